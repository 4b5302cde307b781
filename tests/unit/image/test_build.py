"""`image build` end to end on this host, from a local Debian archive signed by the test's
own key (pinned for the test) and a rustup-shaped toolchain directory of the test's own:
two builds give one digest, a changed input another, a .deb that does not match its index
is refused with nothing stored, and the command provisions the image and prints its pin."""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import subprocess
import tarfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py import eviction
from roteiro_py.commands.image import run_image_build
from roteiro_py.errors import ImageBuildRefused, UsageError
from roteiro_py.image import build, layers, toolchain
from roteiro_py.reference import parse_pinned
from roteiro_py.store import Store
from roteiro_py.vm.assets import debian_archive
from roteiro_py.vm.assets.debian_archive import ArchiveError
from tests.unit.vm.assets import test_debian_archive as archive_support

SUITE = "bookworm"
#: A root that needs every kind of relation: Pre-Depends, an alternative, a virtual package.
PACKAGES = {
    "dash": ("0.5.12-2", "Pre-Depends: libc6\nDepends: debianutils | missing\n", [("./bin/dash", b"#dash")]),
    "debianutils": ("5.7", "", [("./usr/bin/which", b"#which")]),
    "libc6": ("2.36-9", "Depends: libgcc-s1\n", [("./lib/x86_64-linux-gnu/libc.so.6", b"libc")]),
    "libgcc-s1": ("12.2.0", "Provides: libgcc1\n", [("./lib/x86_64-linux-gnu/libgcc_s.so.1", b"gcc_s")]),
    "zlib1g": ("1:1.2.13", "Depends: libgcc1\n", [("./lib/x86_64-linux-gnu/libz.so.1", b"z")]),
    "gcc": ("4:12.2.0", "", [("./usr/bin/gcc", b"#gcc")]),
    "libc6-dev": ("2.36-9", "", [("./usr/include/stdio.h", b"/* */")]),
    # the rest of the seed, each one file
    **{name: ("1.0", "", [(f"./usr/share/{name}/x", name.encode())])
       for name in ("coreutils", "diffutils", "findutils", "grep", "gzip", "sed")},
}


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[archive_support.Gpg]:
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    tool = archive_support.Gpg(home)
    tool.run("--quick-gen-key", "Test Archive <a@example.org>", "ed25519", "sign", "never")
    yield tool
    subprocess.run(["gpgconf", "--kill", "all"], env={"GNUPGHOME": str(home), "PATH": os.environ["PATH"]},
                   check=False, timeout=30)


@pytest.fixture
def pinned(gpg: archive_support.Gpg, monkeypatch: pytest.MonkeyPatch) -> None:
    keys = archive_support.keys_of(gpg, "a@example.org", [gpg.fingerprint("a@example.org")])
    monkeypatch.setattr(debian_archive, "pinned_keys", lambda: keys)


def make_archive(gpg: archive_support.Gpg, root: Path, packages: dict[str, tuple[str, str, list[tuple[str, bytes]]]],
                 tamper: str = "") -> str:
    """A local archive holding `packages`; the .deb of `tamper` is altered after the index
    listed its digest (the size kept)."""
    stanzas = []
    (root / "pool" / "main").mkdir(parents=True)
    for name, (version, fields, members) in packages.items():
        filename = f"pool/main/{name}.deb"
        data = archive_support.make_deb(root / filename, list(members)).read_bytes()
        stanzas.append(f"Package: {name}\nVersion: {version}\n{fields}Filename: {filename}\nSize: {len(data)}\n"
                       f"SHA256: {hashlib.sha256(data).hexdigest()}\n")
        if name == tamper:
            (root / filename).write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    index = lzma.compress("\n".join(stanzas).encode())
    dists = root / "dists" / SUITE
    (dists / "main" / "binary-amd64").mkdir(parents=True)
    (dists / "main" / "binary-amd64" / "Packages.xz").write_bytes(index)
    body = (f"Origin: Debian\nSuite: {SUITE}\nCodename: {SUITE}\nDate: {archive_support.rfc2822(time.time() - 3600)}\n"
            f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)} main/binary-amd64/Packages.xz\n")
    (dists / "InRelease").write_bytes(archive_support.signed(gpg, "a@example.org", body))
    return str(root)


def make_toolchain(root: Path, version: str = "1.95.0") -> Path:
    toolchain_dir = root / "toolchains" / f"{version}-x86_64-unknown-linux-gnu"
    (toolchain_dir / "bin").mkdir(parents=True)
    for binary in toolchain.BINARIES:
        (toolchain_dir / "bin" / binary).write_bytes(f"#{binary}".encode())
        (toolchain_dir / "bin" / binary).chmod(0o755)
    (toolchain_dir / "lib" / "rustlib").mkdir(parents=True)
    (toolchain_dir / "lib" / "librustc_driver.so").write_bytes(b"driver")
    (toolchain_dir / "lib" / "rustlib" / "multirust-channel-manifest.toml").write_text(
        f'[pkg.rustc]\nversion = "{version} (abc 2026-04-14)"\n')
    return toolchain_dir


def request(archive: str, toolchain_dir: Path, **options: bool) -> build.BuildRequest:
    return build.BuildRequest(toolchain.Installed(toolchain_dir, "1.95.0"), archive=archive, suite=SUITE,
                              security_archive="", **options)


def layer_names(layout: Path, reference: str, index: int) -> list[str]:
    manifest = json.loads((layout / "blobs" / "sha256" / reference.rsplit(":", 1)[1]).read_text())
    with tarfile.open(layout / "blobs" / "sha256" / manifest["layers"][index]["digest"][7:]) as tar:
        return tar.getnames()


def test_two_builds_give_one_digest_and_a_changed_input_another(
        gpg: archive_support.Gpg, pinned: None, tmp_path: Path, roteiro_home: Path) -> None:
    archive = make_archive(gpg, tmp_path / "archive", PACKAGES)
    toolchain_dir = make_toolchain(tmp_path / "rustup")
    first = build.build(request(archive, toolchain_dir))
    assert not first.cached
    assert first.reference.startswith("localhost/roteiro/clippy:1.95.0@sha256:")
    assert [p.split("=")[0] for p in first.packages] == sorted(PACKAGES)
    root = layer_names(first.layout, first.reference, 0)
    assert {"bin", "usr/bin/dash", "usr/bin/sh", "usr/bin/cc", "usr/bin/which",
            "usr/lib/x86_64-linux-gnu/libz.so.1"} <= set(root)
    assert "usr/local/bin/clippy-driver" in layer_names(first.layout, first.reference, 1)
    record = eviction.used_record(first.layout)
    eviction.record_use(record, now=1_000_000.0)  # an old use, 1970
    again = build.build(request(archive, toolchain_dir))
    assert (again.cached, again.reference) == (True, first.reference)
    # a cached build is a use: `cache prune` ranks the kept layout by it, not by its mtime
    assert eviction.recorded_use(record) is not None and eviction.recorded_use(record) > time.time() - 60
    rebuilt = build.build(request(archive, toolchain_dir), force=True)  # every byte written again
    assert (rebuilt.cached, rebuilt.reference) == (False, first.reference)
    (toolchain_dir / "lib" / "librustc_driver.so").write_bytes(b"drivex")
    changed = build.build(request(archive, toolchain_dir))
    assert not changed.cached and changed.reference != first.reference
    without = build.build(request(archive, toolchain_dir, with_clippy=False, with_gcc=False))
    assert without.reference.startswith("localhost/roteiro/clippy:1.95.0-noclippy-nogcc@sha256:")
    assert "usr/local/bin/clippy-driver" not in layer_names(without.layout, without.reference, 1)
    assert "usr/bin/cc" not in layer_names(without.layout, without.reference, 0)


def test_a_deb_that_does_not_match_its_index_is_refused_and_nothing_is_stored(
        gpg: archive_support.Gpg, pinned: None, tmp_path: Path, roteiro_home: Path) -> None:
    archive = make_archive(gpg, tmp_path / "archive", PACKAGES, tamper="libc6")
    toolchain_dir = make_toolchain(tmp_path / "rustup")
    with pytest.raises(ArchiveError, match="libc6.deb does not match the SHA256 and size"):
        build.build(request(archive, toolchain_dir))
    assert not list(build.images_root().glob("clippy-*"))
    assert not [p.name for p in build.debs_root().iterdir() if "libc6" in p.name or p.suffix == ".tmp"]
    cached = {p.name for p in build.debs_root().iterdir()}
    assert all(name.endswith(".deb") for name in cached)
    # control: the same archive with the .deb intact builds
    intact = make_archive(gpg, tmp_path / "intact", PACKAGES)
    assert not build.build(request(intact, toolchain_dir)).cached


def test_an_index_signed_by_a_key_that_is_not_pinned_is_refused(
        gpg: archive_support.Gpg, tmp_path: Path, roteiro_home: Path) -> None:
    archive = make_archive(gpg, tmp_path / "archive", PACKAGES)
    with pytest.raises(ArchiveError, match="InRelease"):
        build.build(request(archive, make_toolchain(tmp_path / "rustup")))
    assert not list(build.images_root().glob("clippy-*"))


def test_the_command_provisions_the_image_and_prints_its_pin_and_the_config_line(
        gpg: archive_support.Gpg, pinned: None, tmp_path: Path, roteiro_home: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    archive = make_archive(gpg, tmp_path / "archive", PACKAGES)
    make_toolchain(tmp_path / "rustup")
    monkeypatch.setenv("RUSTUP_HOME", str(tmp_path / "rustup"))
    # the archive is the user's [vm] setting, as for the VM assets
    (roteiro_home / "config.toml").write_text(f'[vm]\ndebian_archive = "{archive}"\ndebian_security_archive = ""\n')
    options = {"toolchain_name": "1.95.0", "with_clippy": True, "with_gcc": True, "archive": None,
               "suite": None, "security_archive": None, "force": False, "path": tmp_path}
    assert run_image_build(output=tmp_path / "out", **options) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    reference = out.strip()
    assert reference.startswith("localhost/roteiro/clippy:1.95.0@sha256:") and "\n" not in reference
    # no image was configured: the build pins it in the user's config, so a lint needs no
    # hand-copied digest (the four commands of a first lint)
    assert f"lint.image set to it in {roteiro_home / 'config.toml'}" in err
    assert f'image = "{reference}"' in (roteiro_home / "config.toml").read_text()
    # control: with an image configured, nothing is overwritten; the config set line is printed
    assert run_image_build(output=None, **options) == 0  # type: ignore[arg-type]
    again, err = capsys.readouterr()
    assert again.strip() == reference
    assert f"pylint-sandbox config set lint.image '{reference}'" in err and "set to it in" not in err
    assert Store.default().is_present(parse_pinned(reference))
    assert (tmp_path / "out" / "oci-layout").is_file()
    with pytest.raises(ImageBuildRefused, match="no rustup toolchain 1.96.0"):
        run_image_build(output=None, **{**options, "toolchain_name": "1.96.0"})  # type: ignore[arg-type]
    with pytest.raises(UsageError, match="not a Debian suite name"):
        run_image_build(output=None, **{**options, "suite": "../etc"})  # type: ignore[arg-type]


@pytest.mark.parametrize("manifest", [
    "a = " + "[" * 5000 + "]" * 5000,  # tomllib recurses once a level: RecursionError
    "a = " + "1" * 5000,  # past Python's int-to-str digit limit: a bare ValueError
    "pkg = [1]\n",
    '[pkg.rustc]\nversion = "../../x"\n',
])
def test_a_hostile_toolchain_manifest_falls_back_to_the_name(tmp_path: Path, manifest: str) -> None:
    """The host toolchain's multirust-channel-manifest.toml is read as untrusted TOML: a
    file tomllib cannot parse without an exception of its own (exit 4 where it escaped)
    gives the toolchain's name, as one that does not parse does."""
    toolchain_dir = make_toolchain(tmp_path / "rustup")
    (toolchain_dir / "lib" / "rustlib" / "multirust-channel-manifest.toml").write_text(manifest)
    assert toolchain.toolchain_version(toolchain_dir, "1.95.0-x86_64-unknown-linux-gnu") == "1.95.0"


def test_the_toolchain_layer_does_not_depend_on_the_hosts_umask(tmp_path: Path) -> None:
    """A toolchain unpacked under umask 077 (rust_dist creates files 0755/0644 less the
    umask; rustup does the same) has files 0700/0600: their modes went into the layer as
    they were, so the same toolchain gave another digest (and files only root could read
    in the guest). A file's mode in the layer is 0755 when it is executable, else 0644."""
    digests = []
    for umask_modes in ((0o755, 0o644), (0o700, 0o600), (0o750, 0o640)):
        toolchain_dir = make_toolchain(tmp_path / oct(umask_modes[0]))
        for path in toolchain_dir.rglob("*"):
            if path.is_file():
                path.chmod(umask_modes[0] if path.parent.name == "bin" else umask_modes[1])
        tree = toolchain.toolchain_layer(toolchain_dir)
        assert tree.entries["usr/local/bin/cargo"].mode == 0o755
        assert tree.entries["usr/local/lib/librustc_driver.so"].mode == 0o644
        digests.append(layers.write_layer(tree, tmp_path / "blobs").digest)
    assert len(set(digests)) == 1


def test_a_toolchain_file_name_that_is_not_utf8_is_no_crash(tmp_path: Path, roteiro_home: Path) -> None:
    """A file of the toolchain named by bytes that are not UTF-8 came out of the walk as
    surrogates, and the build's cache key encoded them strictly (UnicodeEncodeError,
    exit 4). The name is kept byte for byte, in the key and in the layer."""
    toolchain_dir = make_toolchain(tmp_path / "rustup")
    with open(os.fsencode(toolchain_dir / "lib") + b"/odd-\xff", "wb") as handle:
        handle.write(b"x")
    tools = toolchain.toolchain_layer(toolchain_dir)
    assert build.inputs_digest(request("unused", toolchain_dir)).startswith("sha256:")
    digest = layers.write_layer(tools, tmp_path / "blobs").digest.removeprefix("sha256:")
    with tarfile.open(tmp_path / "blobs" / digest, encoding="utf-8") as tar:
        assert "usr/local/lib/odd-\udcff" in tar.getnames()


def test_a_hostile_build_record_is_no_cache_hit_and_the_image_is_built_again(
        gpg: archive_support.Gpg, pinned: None, tmp_path: Path, roteiro_home: Path) -> None:
    """The layout's record comes back from a CI cache as whoever saved it wrote it, and is
    read through the one bounded reader: one nested past json's recursion limit raised
    RecursionError (exit 4), a FIFO blocked the build for good, a large one was read whole,
    a link was followed to a record outside the layout, and a digest after a terminal
    escape was taken as the reference. Each is no hit: the image is built again, the same
    image, and its new record is a hit (so a hit is observable)."""
    archive = make_archive(gpg, tmp_path / "archive", PACKAGES)
    toolchain_dir = make_toolchain(tmp_path / "rustup")
    first = build.build(request(archive, toolchain_dir))
    record = first.layout / build.INPUTS_FILE
    good = json.loads(record.read_text())
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(record.read_text())
    hostile = {
        "deep": lambda: record.write_text("[" * 60_000),
        "large": lambda: record.write_text(json.dumps({**good, "pad": " " * build.RECORD_MAX_BYTES})),
        "fifo": lambda: (record.unlink(), os.mkfifo(record)),  # no writer: an open for one waits
        "link": lambda: (record.unlink(), record.symlink_to(elsewhere)),
        "escape": lambda: record.write_text(json.dumps(
            {**good, "reference": "\x1b]8;;evil\x07@" + first.reference.rpartition("@")[2]})),
    }
    for what, make in hostile.items():
        assert build.build(request(archive, toolchain_dir)).cached, what  # control: a hit
        make()
        again = build.build(request(archive, toolchain_dir))
        assert (again.cached, again.reference) == (False, first.reference), what
        assert record.is_file() and not record.is_symlink(), what
    # control: a record just under the bound, with the inputs, is a hit
    padded = json.dumps({**good, "pad": ""})
    record.write_text(json.dumps({**good, "pad": " " * (build.RECORD_MAX_BYTES - len(padded))}))
    assert len(record.read_bytes()) == build.RECORD_MAX_BYTES
    assert build.build(request(archive, toolchain_dir)).cached
