"""Flattening hostile layers: nothing outside the root filesystem changes, and caps hold.

Real layers (tar written by tarfile or GNU tar), flattened by the code under test into a
tmp directory; the victims are real files and directories next to it.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py import errors
from roteiro_py.store import tarheaders
from roteiro_py.vm.disks import rootfs


@dataclass(frozen=True)
class Layer:
    digest: str
    media_type: str
    path: Path


@dataclass(frozen=True)
class M:
    """One tar member: name, kind (tarfile type), mode, data, link target."""

    name: str
    kind: bytes = tarfile.REGTYPE
    mode: int = 0o644
    data: bytes = b""
    link: str = ""


def tar_bytes(members: list[M]) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        for m in members:
            info = tarfile.TarInfo(m.name)
            info.type, info.mode, info.linkname = m.kind, m.mode, m.link
            info.size = len(m.data) if m.kind == tarfile.REGTYPE else 0
            tar.addfile(info, io.BytesIO(m.data) if m.kind == tarfile.REGTYPE else None)
    return raw.getvalue()


def named(path: Path) -> Layer:
    """The tar layer at `path`, named by its bytes' digest as the store names a blob
    (flatten checks the digest as it reads the layer)."""
    return Layer(f"sha256:{hashlib.sha256(path.read_bytes()).hexdigest()}",
                 rootfs.MEDIA_TAR[0], path)


def layer(path: Path, members: list[M]) -> Layer:
    path.write_bytes(tar_bytes(members))
    return named(path)


@dataclass
class World:
    dest: Path
    victim: Path  # a host directory outside the rootfs
    tmp: Path

    def snapshot(self) -> dict[str, tuple[int, bytes | None]]:
        out: dict[str, tuple[int, bytes | None]] = {}
        for p in [self.victim, *sorted(self.victim.rglob("*"))]:
            st = os.lstat(p)
            out[str(p)] = (st.st_mode, p.read_bytes() if p.is_file() else None)
        return out


@pytest.fixture
def world(tmp_path: Path) -> World:
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    victim.chmod(0o755)
    (victim / "sub").chmod(0o755)
    (victim / "file").write_text("keep")
    (victim / "file").chmod(0o644)
    (victim / "sub" / "file").write_text("keep too")
    dest = tmp_path / "root"
    dest.mkdir()
    return World(dest, victim, tmp_path)


D, S, H = tarfile.DIRTYPE, tarfile.SYMTYPE, tarfile.LNKTYPE

# Each attack, with the members that, without the link, apply inside the rootfs.
ATTACKS: dict[str, list[M]] = {
    # 9.3 as found: a directory's mode, applied at the end of the layer, through a link
    # that replaced the directory later in the same layer.
    "link-then-mode": [M("x", D, 0o777), M("x", S, link="{victim}")],
    "link-then-mode-on-a-file": [M("y", D, 0o777), M("y", S, link="{victim}/file")],
    # a parent of the directory is replaced by a link after the directory was made
    "link-as-parent-dir": [M("a", D, 0o755), M("a/sub", D, 0o777), M("a", S, link="{victim}")],
    "link-then-file-write": [M("w", S, link="{victim}"), M("w/file", data=b"pwned")],
    "link-then-file-replace": [M("file", S, link="{victim}/file"), M("file", data=b"pwned")],
    "link-then-hardlink": [M("t", data=b"mine"), M("l", S, link="{victim}"),
                           M("l/file", H, link="t")],
    "link-then-whiteout": [M("z", S, link="{victim}"), M("z/.wh.file"), M("z/sub/.wh.file")],
    "link-then-opaque": [M("o", S, link="{victim}"), M("o/.wh..wh..opq")],
    "link-then-dir": [M("k", S, link="{victim}"), M("k/sub", D, 0o777),
                      M("k/new", D, 0o777)],
}


def _expand(members: list[M], victim: Path) -> list[M]:
    return [M(m.name, m.kind, m.mode, m.data, m.link.replace("{victim}", str(victim)))
            for m in members]


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_flattening_never_changes_a_file_outside_the_rootfs(world: World, attack: str) -> None:
    before = world.snapshot()
    evil = layer(world.tmp / "evil.tar", _expand(ATTACKS[attack], world.victim))
    with contextlib.suppress(errors.UnsafeImageLayer):  # refusing is fine, changing the host not
        rootfs.flatten([evil], world.dest)
    assert world.snapshot() == before


def test_control_without_the_link_the_mode_and_writes_apply_inside(world: World) -> None:
    plain = layer(world.tmp / "plain.tar", [
        M("x", D, 0o777), M("a", D, 0o755), M("a/sub", D, 0o777), M("w", D, 0o755),
        M("w/file", data=b"mine"), M("t", data=b"t"), M("l", D, 0o755), M("l/file", H, link="t"),
    ])
    rootfs.flatten([plain], world.dest)
    assert os.stat(world.dest / "x").st_mode & 0o7777 == 0o777
    assert os.stat(world.dest / "a" / "sub").st_mode & 0o7777 == 0o777
    assert (world.dest / "w" / "file").read_bytes() == b"mine"
    assert os.stat(world.dest / "l" / "file").st_ino == os.stat(world.dest / "t").st_ino
    # and a whiteout in a real directory does remove, in a later layer
    later = layer(world.tmp / "later.tar", [M("w/.wh.file"), M("a/.wh..wh..opq")])
    rootfs.flatten([later], world.dest)
    assert not (world.dest / "w" / "file").exists() and list((world.dest / "a").iterdir()) == []


def test_the_link_itself_is_kept_inside_the_rootfs(world: World) -> None:
    """The control for link-then-mode: the link is stored, only never followed."""
    evil = layer(world.tmp / "evil.tar", _expand(ATTACKS["link-then-mode"], world.victim))
    rootfs.flatten([evil], world.dest)
    assert os.readlink(world.dest / "x") == str(world.victim)


# -- caps on the flattened size and entry count ------------------------------------------


def test_the_byte_cap_refuses_before_writing_and_names_the_limit(world: World) -> None:
    big = layer(world.tmp / "big.tar", [M("small", data=b"s" * 100), M("big", data=b"b" * 5000)])
    limits = rootfs.FlattenLimits(max_bytes=4000)
    with pytest.raises(errors.UnsafeImageLayer) as refused:
        rootfs.flatten([big], world.dest, limits)
    text = refused.value.guidance().render_text()
    assert f"{limits.max_bytes} bytes" in text and "MAX_FLATTENED_BYTES" in text
    assert big.digest in text and "'big'" in text
    assert not (world.dest / "big").exists()  # refused before a byte of it was written
    # control: under the cap it flattens
    (ok := world.tmp / "ok").mkdir()
    rootfs.flatten([big], ok, rootfs.FlattenLimits(max_bytes=5100))
    assert (ok / "big").stat().st_size == 5000


def test_the_entry_cap_counts_parents_and_names_the_limit(world: World) -> None:
    many = layer(world.tmp / "many.tar",
                 [M(f"d{i}/f{j}", data=b"x") for i in range(5) for j in range(5)])
    limits = rootfs.FlattenLimits(max_entries=20)
    with pytest.raises(errors.UnsafeImageLayer) as refused:
        rootfs.flatten([many], world.dest, limits)
    text = refused.value.guidance().render_text()
    assert "20 files and directories" in text and "MAX_FLATTENED_ENTRIES" in text
    assert sum(1 for _ in world.dest.rglob("*")) <= limits.max_entries
    (ok := world.tmp / "ok").mkdir()
    rootfs.flatten([many], ok, rootfs.FlattenLimits(max_entries=30))
    assert sum(1 for _ in ok.rglob("*")) == 30


def test_the_default_caps_are_the_stated_constants(world: World) -> None:
    assert rootfs.FlattenLimits() == rootfs.FlattenLimits(rootfs.MAX_FLATTENED_BYTES,
                                                          rootfs.MAX_FLATTENED_ENTRIES)
    # the refusal states the constant's number
    tiny = layer(world.tmp / "t.tar", [M("f", data=b"x")])
    with pytest.raises(errors.UnsafeImageLayer) as refused:
        rootfs.flatten([tiny], world.dest, rootfs.FlattenLimits(max_entries=0))
    assert " 0 files and directories" in refused.value.guidance().render_text()


def gnu_sparse_layer(tmp: Path, logical: int) -> Layer:
    """A real GNU-sparse layer made by GNU tar: `logical` bytes, almost all of them a hole."""
    src = tmp / "sparse-src"
    src.mkdir()
    with (src / "hole").open("wb") as f:
        f.write(b"head")
        f.truncate(logical)
    path = tmp / "sparse.tar"
    subprocess.run(["tar", "--sparse", "--format=gnu", "-cf", str(path), "-C", str(src),
                    "hole"], check=True)
    with tarfile.open(path) as check:
        (member,) = check.getmembers()
        assert member.type == tarfile.GNUTYPE_SPARSE and member.size == logical
    return named(path)


def test_a_sparse_member_counts_its_logical_size(world: World) -> None:
    logical = 64 * 1024 * 1024
    sparse = gnu_sparse_layer(world.tmp, logical)
    assert sparse.path.stat().st_size < 64 * 1024  # the bomb is small
    with pytest.raises(errors.UnsafeImageLayer, match="MAX_FLATTENED_BYTES"):
        rootfs.flatten([sparse], world.dest, rootfs.FlattenLimits(max_bytes=logical // 2))
    assert not (world.dest / "hole").exists()
    (ok := world.tmp / "ok").mkdir()
    rootfs.flatten([sparse], ok, rootfs.FlattenLimits(max_bytes=logical))
    assert (ok / "hole").stat().st_size == logical
    with (ok / "hole").open("rb") as written:
        assert written.read(4) == b"head"


# -- fuzzing tar headers ----------------------------------------------------------------------

SEED_MEMBERS = [M("etc", D, 0o755), M("etc/motd", data=b"hello\n"), M("bin", D, 0o755),
                M("bin/tool", mode=0o4755, data=b"#!x"), M("bin/sh", S, link="tool"),
                M("bin/hard", H, link="bin/tool"), M("etc/.wh.gone"), M("opt/.wh..wh..opq"),
                M("dev-node", tarfile.CHRTYPE), M("x", D, 0o777)]
SEED = tar_bytes(SEED_MEMBERS)
with tarfile.open(fileobj=io.BytesIO(SEED)) as _seed:
    HEADERS = [m.offset for m in _seed.getmembers()]
FUZZ_LIMITS = rootfs.FlattenLimits(max_bytes=1 << 20, max_entries=200)


def _fix_checksum(data: bytearray, offset: int) -> None:
    block = data[offset:offset + 512]
    block[148:156] = b" " * 8
    data[offset + 148:offset + 156] = b"%06o\0 " % sum(block)


def _flatten_fuzzed(data: bytes) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        world = Path(tmp)
        victim = world / "victim"
        victim.mkdir()
        (victim / "file").write_text("keep")
        (dest := world / "root").mkdir()
        path = world / "layer.tar"
        path.write_bytes(data)
        with contextlib.suppress(errors.UnsafeImageLayer):
            rootfs.flatten([named(path)], dest, FUZZ_LIMITS)
        assert sorted(p.name for p in world.iterdir()) == ["layer.tar", "root", "victim"]
        assert [p.name for p in victim.iterdir()] == ["file"]
        assert (victim / "file").read_text() == "keep"
        assert os.lstat(victim).st_mode & 0o777 == 0o755


MUTATIONS = st.lists(st.tuples(st.integers(0, len(SEED) - 1), st.integers(0, 255)),
                     min_size=1, max_size=8)


@given(MUTATIONS)
def test_a_mutated_layer_flattens_or_is_refused_raw(mutations: list[tuple[int, int]]) -> None:
    data = bytearray(SEED)
    for at, value in mutations:
        data[at] = value
    _flatten_fuzzed(bytes(data))


@given(st.lists(st.tuples(st.sampled_from(HEADERS), st.integers(0, 511), st.integers(0, 255)),
                min_size=1, max_size=8))
def test_a_layer_with_mutated_headers_flattens_or_is_refused(
        mutations: list[tuple[int, int, int]]) -> None:
    """Checksums recomputed, so the mutation reaches the fields (names, types, sizes,
    modes, link names, ids, times) and not only the checksum check."""
    data = bytearray(SEED)
    for header, at, value in mutations:
        data[header + at] = value
    for header in HEADERS:
        _fix_checksum(data, header)
    _flatten_fuzzed(bytes(data))


def test_control_the_unmutated_seed_flattens(tmp_path: Path) -> None:
    (dest := tmp_path / "root").mkdir()
    (tmp_path / "seed.tar").write_bytes(SEED)
    report = rootfs.flatten([named(tmp_path / "seed.tar")], dest,
                            FUZZ_LIMITS)
    assert (dest / "etc/motd").read_bytes() == b"hello\n" and report.files == 2
    data = bytearray(SEED)
    _fix_checksum(data, HEADERS[0])
    assert bytes(data) == SEED  # the checksum fix reproduces tarfile's own


def pax_layer(path: Path, name: str, kind: bytes, pax: dict[str, str], link: str = "") -> Layer:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.type, info.linkname, info.pax_headers = kind, link, pax
        tar.addfile(info, io.BytesIO(b"") if kind == tarfile.REGTYPE else None)
    path.write_bytes(raw.getvalue())
    return named(path)


@pytest.mark.parametrize("pax,kind,expect", [
    ({"mtime": "1e300"}, tarfile.REGTYPE, "flattens"),      # os.utime: OverflowError
    ({"mtime": "-99999999999999"}, tarfile.REGTYPE, "flattens"),
    ({"uid": "99999999999999999999"}, tarfile.REGTYPE, "refused"),  # chown: OverflowError
    ({"gid": "4294967295"}, tarfile.DIRTYPE, "refused"),     # -1 as an id: "unchanged"
    ({"linkpath": "a\x00b"}, tarfile.SYMTYPE, "refused"),    # os.symlink: ValueError
], ids=["mtime-1e300", "mtime-negative", "uid-2^66", "gid-2^32-1", "nul-in-linkpath"])
def test_extreme_header_values_flatten_or_are_refused(tmp_path: Path, pax: dict[str, str],
                                                      kind: bytes, expect: str) -> None:
    (dest := tmp_path / "root").mkdir()
    evil = pax_layer(tmp_path / "l.tar", "member", kind, pax)
    if expect == "refused":
        with pytest.raises(errors.UnsafeImageLayer, match="'member'"):
            rootfs.flatten([evil], dest)
        return
    rootfs.flatten([evil], dest)
    assert 0 <= os.lstat(dest / "member").st_mtime <= rootfs.MAX_MTIME


def chained_headers(count: int, tail: str = "after") -> bytes:
    """`count` pax extended headers in a row, then one regular file: tarfile recurses per
    header, so a few thousand of them were a RecursionError."""
    record = b"13 comment=x\n"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for _ in range(count):
            info = tarfile.TarInfo("PaxHeader")
            info.type, info.size = tarfile.XHDTYPE, len(record)
            tar.addfile(info, io.BytesIO(record))
        info = tarfile.TarInfo(tail)
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    return raw.getvalue()


def test_chained_extended_headers_are_refused_not_recursed(tmp_path: Path) -> None:
    (tmp_path / "few.tar").write_bytes(chained_headers(3))
    (ok := tmp_path / "ok").mkdir()
    rootfs.flatten([named(tmp_path / "few.tar")], ok)
    assert (ok / "after").read_bytes() == b"ok"  # control: a short chain is a member
    (tmp_path / "many.tar").write_bytes(chained_headers(3000))
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer) as refused:
        rootfs.flatten([named(tmp_path / "many.tar")], dest)
    text = refused.value.guidance().render_text()
    assert f"more than {tarheaders.MAX_HEADER_CHAIN} extended headers" in text


def test_an_oversized_pax_header_is_refused_before_it_is_read(tmp_path: Path) -> None:
    def layer_with_comment(size: int, path: Path) -> Layer:
        return pax_layer(path, "member", tarfile.REGTYPE, {"comment": "c" * size})

    (ok := tmp_path / "ok").mkdir()
    rootfs.flatten([layer_with_comment(10_000, tmp_path / "small.tar")], ok)
    assert (ok / "member").exists()  # control
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer) as refused:
        rootfs.flatten([layer_with_comment(tarheaders.MAX_HEADER_DATA, tmp_path / "big.tar")],
                       dest)
    assert f"more than {tarheaders.MAX_HEADER_DATA}" in refused.value.guidance().render_text()


@pytest.mark.parametrize("sparse_map", [b"5\nxx", b"abc\n", b"99999999\n1\n2\n"],
                         ids=["map-cut-short", "map-not-a-number", "map-claims-more"])
def test_a_broken_gnu_sparse_map_is_refused(tmp_path: Path, sparse_map: bytes) -> None:
    """tarfile raises ValueError (not TarError) parsing these pax sparse 1.0 maps."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("s")
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                            "GNU.sparse.name": "s", "GNU.sparse.realsize": "10"}
        info.size = len(sparse_map)
        tar.addfile(info, io.BytesIO(sparse_map))
    (tmp_path / "l.tar").write_bytes(raw.getvalue())
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer, match="cannot be read"):
        rootfs.flatten([named(tmp_path / "l.tar")], dest)


def _sparse_seed() -> bytes:
    """A valid pax sparse 1.0 member (map: one 2-byte extent at 0 of a 10-byte file)."""
    body = b"1\n0\n2\n".ljust(512, b"\0") + b"ok"
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("GNUSparseFile.0/s")
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0",
                            "GNU.sparse.name": "s", "GNU.sparse.realsize": "10"}
        info.size = len(body)
        tar.addfile(info, io.BytesIO(body))
    return raw.getvalue()


SPARSE_SEED = _sparse_seed()


def test_control_the_sparse_seed_flattens(tmp_path: Path) -> None:
    (dest := tmp_path / "root").mkdir()
    (tmp_path / "s.tar").write_bytes(SPARSE_SEED)
    rootfs.flatten([named(tmp_path / "s.tar")], dest)
    assert (dest / "s").read_bytes() == b"ok" + b"\0" * 8


@given(st.lists(st.tuples(st.integers(0, len(SPARSE_SEED) - 1), st.integers(0, 255)),
                min_size=1, max_size=8))
def test_a_mutated_sparse_layer_flattens_or_is_refused(mutations: list[tuple[int, int]]) -> None:
    data = bytearray(SPARSE_SEED)
    for at, value in mutations:
        data[at] = value
    _flatten_fuzzed(bytes(data))


@pytest.mark.parametrize("name,kind", [("etc/.wh.gone", tarfile.REGTYPE),
                                       ("opt/.wh..wh..opq", tarfile.REGTYPE),
                                       ("odd", b"Z")],  # a type tarfile does not know
                         ids=["whiteout", "opaque", "unknown-type"])
def test_data_read_through_but_not_written_counts_against_the_byte_cap(
        tmp_path: Path, name: str, kind: bytes) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.GNU_FORMAT) as tar:
        info = tarfile.TarInfo(name)
        info.type, info.size = kind, 5000
        tar.addfile(info, io.BytesIO(b"\0" * 5000))
    (tmp_path / "l.tar").write_bytes(raw.getvalue())
    layer_ = named(tmp_path / "l.tar")
    (ok := tmp_path / "ok").mkdir()
    rootfs.flatten([layer_], ok, rootfs.FlattenLimits(max_bytes=5000))  # control
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer, match="MAX_FLATTENED_BYTES"):
        rootfs.flatten([layer_], dest, rootfs.FlattenLimits(max_bytes=4999))


def test_members_that_create_nothing_count_against_the_entry_cap(tmp_path: Path) -> None:
    """A layer of a million device nodes or whiteouts writes nothing, yet is a loop."""
    members = [M(f"dev{i}", tarfile.CHRTYPE) for i in range(15)] + \
              [M(f".wh.gone{i}") for i in range(15)] + [M("./", D, 0o755)] * 5
    layer_ = layer(tmp_path / "l.tar", members)
    (ok := tmp_path / "ok").mkdir()
    rootfs.flatten([layer_], ok, rootfs.FlattenLimits(max_entries=35))  # control
    assert list(ok.iterdir()) == []
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(errors.UnsafeImageLayer, match="MAX_FLATTENED_ENTRIES"):
        rootfs.flatten([layer_], dest, rootfs.FlattenLimits(max_entries=34))


def global_pax_header(size: int) -> bytes:
    """A global pax header (XGLTYPE) of about `size` bytes of ` gNNNNNN=` records, each a
    key tarfile copies into every later member."""
    records = b""
    k = 0
    while len(records) < size:
        body = f" g{k:06d}=\n"
        records += f"{len(body) + 2}{body}".encode()
        k += 1
    info = tarfile.TarInfo("pax_global_header")
    info.type, info.size = tarfile.XGLTYPE, len(records)
    return info.tobuf(tarfile.USTAR_FORMAT) + records + b"\0" * ((-len(records)) % 512)


def whiteouts_after_global_header(path: Path, header_size: int, members: int) -> Layer:
    with open(path, "wb") as f:
        f.write(global_pax_header(header_size))
        with tarfile.open(fileobj=f, mode="w", format=tarfile.USTAR_FORMAT) as tar:
            tar.addfile(tarfile.TarInfo("kept"), io.BytesIO(b""))
            for i in range(members):
                tar.addfile(tarfile.TarInfo(f"d/.wh.x{i}"), io.BytesIO(b""))
    return named(path)


def test_a_global_pax_header_is_capped_not_copied_into_every_member(tmp_path: Path) -> None:
    """A 1 MiB global header (just under MAX_HEADER_DATA) and 60 whiteouts held ~117 MiB (every
    member a copy of its keys, the stream keeping every member): 3.7 GB for 2,000."""
    import tracemalloc

    (ok := tmp_path / "ok").mkdir()
    small = whiteouts_after_global_header(tmp_path / "small.tar", 52, 60)  # git archive's
    rootfs.flatten([small], ok)
    assert (ok / "kept").exists()  # control: a small global header is still read
    (dest := tmp_path / "root").mkdir()
    big = whiteouts_after_global_header(tmp_path / "big.tar", tarheaders.MAX_HEADER_DATA - 1024, 60)
    tracemalloc.start()
    try:
        with pytest.raises(errors.UnsafeImageLayer) as refused:
            rootfs.flatten([big], dest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert f"more than {tarheaders.MAX_GLOBAL_HEADER_DATA} " in (
        refused.value.guidance().render_text())
    assert peak < 8 * 1024**2, f"{peak / 1024**2:.0f} MiB held for a 1 MiB header"


def test_a_stream_does_not_keep_every_member(tmp_path: Path) -> None:
    """Each member (with its copy of the global keys) was kept to the end of the layer."""
    import tracemalloc

    path = tmp_path / "many.tar"
    layer_ = whiteouts_after_global_header(path, tarheaders.MAX_GLOBAL_HEADER_DATA - 200,
                                           4000)
    (dest := tmp_path / "root").mkdir()
    tracemalloc.start()
    try:
        rootfs.flatten([layer_], dest)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert (dest / "kept").exists()
    assert peak < 16 * 1024**2, f"{peak / 1024**2:.0f} MiB held streaming 4,000 members"


def test_the_ext4_size_counts_a_hardlinked_file_once(tmp_path: Path) -> None:
    """200 links to 1 MiB were sized as 200 MiB (a million links to 16 GiB: 20 PiB)."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "big").write_bytes(b"x" * (1 << 20))
    (tree / "other").write_bytes(b"y" * (1 << 20))  # control: distinct files both count
    for i in range(200):
        os.link(tree / "big", tree / f"l{i}")
    size, count = rootfs._tree_size(tree)
    assert count == 202
    assert 2 << 20 <= size < 3 << 20, size


def test_flattening_stops_at_the_runs_deadline(tmp_path: Path) -> None:
    """A lint run flattens before it boots, and nothing bounded that by `[vm] timeout_s`:
    a layer of many members (2,000 whiteouts after a 1 MiB global header took 95 s)
    went on past it."""
    import time

    members = [M(f"f{i}", data=b"x") for i in range(50)]
    (ok := tmp_path / "ok").mkdir()
    rootfs.flatten([layer(tmp_path / "a.tar", members)], ok,
                   rootfs.FlattenLimits(until=time.monotonic() + 3600, seconds=3600))
    assert len(list(ok.iterdir())) == 50  # control: within the deadline it all flattens
    (late := tmp_path / "late").mkdir()
    with pytest.raises(errors.DeadlineExceeded) as refused:
        rootfs.flatten([layer(tmp_path / "b.tar", members)], late,
                       rootfs.FlattenLimits(until=time.monotonic() - 1, seconds=1800))
    text = refused.value.guidance().render_text()
    assert "flattening the image" in text and "deadline of 1800 s" in text
    assert list(late.iterdir()) == []
