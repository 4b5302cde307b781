"""The guest's only view of dependencies is a vendored directory source made from the
package store (roteiro_py/cargo/vendor.py): archives hashed again and unpacked in Python,
cargo's own per-file checksums written, the view sealed by the host. Real host cargo reads
the view offline (the same `[source]` tables the guest gets, rebased onto the host path)
and refuses a file changed in it; a hostile `.crate` is refused before anything is kept."""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.cargo import store, vendor
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE, Pin, read_pins
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, cargo_views_root
from tests.unit.cargo_support import crate_bytes, stored, tree_with  # tests/unit/cargo_support.py


def host_cargo(tree: Path, view: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """Real cargo, offline and locked, given the view's `[source]` tables rebased from the
    guest's path onto the view's host path (the only difference from what the guest runs)."""
    sources = (view / "registry" / vendor.SOURCES_FILE).read_text()
    rebased = tmp_path / "sources.toml"
    rebased.write_text(sources.replace(GUEST_CARGO_HOME, str(view)))
    env = {**os.environ, "CARGO_HOME": str(tmp_path / "cargo-home"),
           "CARGO_TARGET_DIR": str(tmp_path / "target")}
    return subprocess.run(["cargo", *args, "--offline", "--locked", "--config", str(rebased)],
                          cwd=tree, env=env, capture_output=True, text=True, timeout=300, check=False)


@pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo on the host")
def test_real_cargo_builds_from_the_view_and_refuses_a_changed_file(tmp_path: Path) -> None:
    checksum = stored(crate_bytes("tiny", "1.0.0"))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    made = vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    assert made.config_args == ("--config", vendor.GUEST_SOURCES)
    assert made.registry is not None
    view = made.registry.parent
    package = view / "registry" / "0" / "tiny-1.0.0"
    recorded = json.loads((package / ".cargo-checksum.json").read_text())
    assert recorded["package"] == checksum
    assert recorded["files"]["src/lib.rs"] == hashlib.sha256(b"pub fn f() -> u32 { 1 }\n").hexdigest()
    done = host_cargo(tree, view, tmp_path, "check")
    assert done.returncode == 0, done.stderr
    # a byte changed in the view after it was made: cargo itself refuses to build from it
    os.chmod(package / "src" / "lib.rs", 0o644)
    (package / "src" / "lib.rs").write_text("pub fn f() -> u32 { 2 }\n")
    shutil.rmtree(tmp_path / "target")
    done = host_cargo(tree, view, tmp_path, "check")
    assert done.returncode != 0 and "checksum" in done.stderr, done.stderr


def test_a_view_changed_after_it_was_sealed_is_made_again_from_the_store(tmp_path: Path) -> None:
    checksum = stored(crate_bytes("tiny", "1.0.0"))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    lock = read_pins(tree / "Cargo.lock")
    first = vendor.vendored(lock, tree).registry
    assert first is not None
    lib = first / "0" / "tiny-1.0.0" / "src" / "lib.rs"
    inode = lib.stat().st_ino
    again = vendor.vendored(lock, tree).registry
    assert again == first and lib.stat().st_ino == inode  # control: a sealed view is reused
    lib.write_text("pub fn f() -> u32 { 666 }\n")  # changed after unpacking
    vendor.vendored(lock, tree)
    assert lib.read_text() == "pub fn f() -> u32 { 1 }\n"  # the guest never sees the change
    (first / "0" / "tiny-1.0.0" / "src" / "extra.rs").write_text("planted")  # a file added
    vendor.vendored(lock, tree)
    assert not (first / "0" / "tiny-1.0.0" / "src" / "extra.rs").exists()


def test_a_damaged_store_entry_is_dropped_and_named(tmp_path: Path) -> None:
    checksum = stored(crate_bytes("tiny", "1.0.0"))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    path = store.crate_path(checksum)
    path.write_bytes(crate_bytes("tiny", "1.0.0", lib="pub fn evil() {}\n"))
    with pytest.raises(errors.NoPackageCache, match="tiny 1.0.0"):
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    assert not path.exists()  # fetch-deps fetches it again
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir()]


def test_missing_pins_are_named_before_anything_is_unpacked(tmp_path: Path) -> None:
    deps = {f"dep{i}": ("1.0.0", hashlib.sha256(f"{i}".encode()).hexdigest()) for i in range(7)}
    tree = tree_with(tmp_path, deps)
    with pytest.raises(errors.NoPackageCache) as caught:
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    text = caught.value.guidance().render_text()
    assert "dep0 1.0.0" in text and "and 2 more" in text and "fetch-deps" in text
    assert not cargo_views_root().exists()


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", size: int = 3) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type = kind
    info.linkname = link
    info.size = size if kind == tarfile.REGTYPE else 0
    return info


@pytest.mark.parametrize(("member", "said"), [
    (_member("tiny-1.0.0/src/link", tarfile.SYMTYPE, "/etc/passwd"), "not a regular file"),
    (_member("tiny-1.0.0/src/hard", tarfile.LNKTYPE, "tiny-1.0.0/Cargo.toml"), "not a regular file"),
    (_member("tiny-1.0.0/dev", tarfile.CHRTYPE), "not a regular file"),
    (_member("tiny-1.0.0/fifo", tarfile.FIFOTYPE), "not a regular file"),
    (_member("tiny-1.0.0/../escape.rs"), "outside"),
    (_member("/abs.rs"), "outside"),
    (_member("other-1.0.0/x.rs"), "outside"),
])
def test_a_hostile_crate_is_refused_and_nothing_is_kept(tmp_path: Path, member: tarfile.TarInfo,
                                                         said: str) -> None:
    checksum = stored(crate_bytes("tiny", "1.0.0", extra=[member]))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    with pytest.raises(errors.PackageRefused, match=said):
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir()]
    assert not (tmp_path.parent / "escape.rs").exists()


def test_a_crate_past_the_bounds_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    checksum = stored(crate_bytes("tiny", "1.0.0", extra=[_member("tiny-1.0.0/big", size=5000)]))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    monkeypatch.setattr(vendor, "UNPACK_MAX_BYTES", 4000)
    with pytest.raises(errors.PackageRefused, match="more than 4000 bytes"):
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    monkeypatch.setattr(vendor, "UNPACK_MAX_BYTES", 6000)  # control: within the bound
    assert vendor.vendored(read_pins(tree / "Cargo.lock"), tree).registry is not None


def test_the_sources_file_replaces_each_origin_with_its_own_directory() -> None:
    from roteiro_py.cargo.lockfile import pin_of

    commit = "0123456789abcdef0123456789abcdef01234567"
    pins = (pin_of(Path("L"), "a", "1.0.0", CRATES_IO_SOURCE, "a" * 64),
            pin_of(Path("L"), "b", "1.0.0", "sparse+https://reg.example/idx/", "b" * 64),
            pin_of(Path("L"), "c", "0.1.0", f"git+https://git.example/c?tag=v1#{commit}", None),
            pin_of(Path("L"), "d", "0.1.0", f"git+https://git.example/c?tag=v1#{commit}", None))
    import tomllib

    tables = tomllib.loads(vendor.sources_toml(pins))["source"]
    assert tables["crates-io"] == {"replace-with": "roteiro-registry-dir-0"}
    assert tables["roteiro-registry-1"] == {"registry": "sparse+https://reg.example/idx/",
                                            "replace-with": "roteiro-registry-dir-1"}
    assert tables["roteiro-git-0"] == {"git": "https://git.example/c", "tag": "v1",
                                       "replace-with": "roteiro-git-dir-0"}
    assert tables["roteiro-git-dir-0"] == {"directory": f"{GUEST_CARGO_HOME}/git/0"}
    assert len([k for k in tables if k.startswith("roteiro-git-dir")]) == 1  # c and d: one source


@pytest.mark.parametrize("name", [".cargo-checksum.json/x", "./.cargo-checksum.json/x"])
def test_a_crate_holding_a_directory_where_the_checksum_file_goes_is_refused(
        tmp_path: Path, name: str) -> None:
    """Review of issue 20: a `.crate` with a *directory* `.cargo-checksum.json` (only the
    file of that name was skipped) ended in IsADirectoryError when the checksum file was
    written: exit 4 on every lint of a lockfile pinning it, instead of a refusal."""
    checksum = stored(crate_bytes("tiny", "1.0.0", extra=[_member(f"tiny-1.0.0/{name}")]))
    tree = tree_with(tmp_path, {"tiny": ("1.0.0", checksum)})
    with pytest.raises(errors.PackageRefused, match=r"\.cargo-checksum\.json"):
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir()]
    # control: the same crate with the file at another name makes a view
    checksum = stored(crate_bytes("tiny", "1.0.0", extra=[_member("tiny-1.0.0/cargo-checksum/x")]))
    tree = tree_with(tmp_path / "control", {"tiny": ("1.0.0", checksum)})
    assert vendor.vendored(read_pins(tree / "Cargo.lock"), tree).registry is not None


def _seal_checkout(pin: Pin, files: dict[str, str]) -> None:
    """`files` as the store's sealed checkout of `pin`, as cargo/git.py leaves one."""
    staging = store.git_staging(pin)
    for path, text in files.items():
        (staging / path).parent.mkdir(parents=True, exist_ok=True)
        (staging / path).write_text(text)
    store.keep_git_checkout(pin, staging, {p: hashlib.sha256(t.encode()).hexdigest()
                                           for p, t in files.items()})


def _stored_git(tmp_path: Path, files: dict[str, str]) -> Path:
    """A tree whose lockfile pins `dep 0.1.0` from git, its checkout (`files`) sealed in
    the store as cargo/git.py leaves one."""
    from roteiro_py.cargo.lockfile import pin_of

    commit = "ab" * 20
    source = f"git+https://git.example/dep#{commit}"
    pin = pin_of(Path("Cargo.lock"), "dep", "0.1.0", source, None)
    _seal_checkout(pin, files)
    tree = tmp_path / "tree"
    tree.mkdir(parents=True)
    (tree / "Cargo.lock").write_text(f'version = 4\n[[package]]\nname = "dep"\nversion = "0.1.0"\n'
                                     f'source = "{source}"\n')
    return tree


_GIT_DEP = {"Cargo.toml": '[package]\nname = "dep"\nversion = "0.1.0"\nedition = "2021"\n',
            "src/lib.rs": ""}
_INHERITING = {"Cargo.toml": '[workspace]\n[workspace.package]\nversion = "0.1.0"\n'
                             '[package]\nname = "dep"\nversion.workspace = true\n',
               "src/lib.rs": ""}


@pytest.mark.parametrize(("files", "said"), [
    ({**_GIT_DEP, ".cargo-checksum.json/x": ""}, ".cargo-checksum.json"),
    ({**_INHERITING, "Cargo.toml.orig/x": ""}, "Cargo.toml.orig"),
])
def test_a_git_checkout_holding_a_directory_where_the_view_writes_a_file_is_refused(
        tmp_path: Path, files: dict[str, str], said: str) -> None:
    """Review of issue 20: a git dependency with a directory `.cargo-checksum.json`, or
    one with a directory `Cargo.toml.orig` whose manifest needs normalizing, ended in
    IsADirectoryError when the view wrote the file of that name (exit 4)."""
    tree = _stored_git(tmp_path, files)
    with pytest.raises(errors.PackageRefused, match=said.replace(".", r"\.")):
        vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    # control: the same checkout with the directory elsewhere makes a view
    files = {("elsewhere/x" if path.endswith("/x") else path): text for path, text in files.items()}
    tree = _stored_git(tmp_path / "control", files)
    made = vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    assert made.git is not None and (made.git / "0" / "dep-0.1.0" / "elsewhere" / "x").is_file()


def _crate(name: str, version: str, files: dict[str, tuple[bytes, int]],
           dirs: tuple[str, ...] = ()) -> bytes:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for directory in dirs:
            info = tarfile.TarInfo(f"{name}-{version}/{directory}")
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, (data, mode) in files.items():
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size, info.mode = len(data), mode
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def _manifest(name: str, version: str) -> bytes:
    return f'[package]\nname = "{name}"\nversion = "{version}"\nedition = "2021"\n'.encode()


@pytest.mark.skipif(shutil.which("cargo") is None, reason="needs cargo on the host")
def test_real_cargo_accepts_the_view_for_every_kind_of_pin(tmp_path: Path, cargo_home: Path) -> None:
    """Review of issue 20 (held): two versions of one crate, the same name and version from
    crates.io, from a sparse registry and from a git-index registry the manifest names
    (`registry = "corp"`, `registry = "gitidx"`), a git
    repository giving two packages at one branch, git pins by tag, rev and default branch,
    and a crate holding Cargo.toml.orig, .cargo_vcs_info.json, names with a space and
    unicode, an empty directory and an executable file: cargo, offline and locked, builds
    the tree from the view alone."""
    from roteiro_py.cargo.lockfile import pin_of

    corp = "sparse+https://corp.example/index/"
    gitidx = "registry+https://gitidx.example/index"
    odd = _crate("tiny", "1.0.0", {
        "Cargo.toml": (_manifest("tiny", "1.0.0"), 0o644),
        "Cargo.toml.orig": (_manifest("tiny", "1.0.0") + b"# original\n", 0o644),
        ".cargo_vcs_info.json": (b'{"git": {"sha1": "' + b"a" * 40 + b'"}}', 0o644),
        "src/lib.rs": (b'mod sp { include!("with space.rs"); }\nmod un { include!("\xc3\xbcn\xc3\xaf.rs"); }\n'
                       b"pub fn f() -> u32 { sp::g() + un::h() }\n", 0o644),
        "src/with space.rs": (b"pub fn g() -> u32 { 1 }\n", 0o644),
        "src/ünï.rs": (b"pub fn h() -> u32 { 1 }\n", 0o644),
        "run.sh": (b"#!/bin/sh\n", 0o755)}, dirs=("empty", "src"))
    checksums = {
        ("tiny", "1.0.0", CRATES_IO_SOURCE): stored(odd),
        ("tiny", "2.0.0", CRATES_IO_SOURCE): stored(crate_bytes("tiny", "2.0.0", "pub fn f() -> u32 { 2 }\n")),
        ("tiny", "1.0.0", corp): stored(crate_bytes("tiny", "1.0.0", "pub fn f() -> u32 { 3 }\n")),
        ("tiny", "1.0.0", gitidx): stored(crate_bytes("tiny", "1.0.0", "pub fn f() -> u32 { 7 }\n")),
    }
    commits = {"multi": "1" * 40, "tagged": "2" * 40, "byrev": "3" * 40, "plain": "4" * 40}
    gits = {  # package -> (repository, query, files of its checkout)
        "ga": ("multi", "?branch=dev", {"Cargo.toml": '[workspace]\nmembers = ["ga", "gb"]\n'
                                        '[workspace.package]\nversion = "0.1.0"\n',
                                        "ga/Cargo.toml": '[package]\nname = "ga"\nversion.workspace = true\n'
                                                         'edition = "2021"\n',
                                        "ga/src/lib.rs": "pub fn f() -> u32 { 4 }\n",
                                        "gb/Cargo.toml": '[package]\nname = "gb"\nversion = "0.1.0"\n'
                                                         'edition = "2021"\n',
                                        "gb/src/lib.rs": "pub fn f() -> u32 { 5 }\n"}),
        "gc": ("tagged", "?tag=v1.0", {}), "gd": ("byrev", "?rev=333333", {}), "ge": ("plain", "", {}),
    }
    lock = ["version = 4\n"]
    for (name, version, source), checksum in sorted(checksums.items()):
        lock.append(f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = "{source}"\n'
                    f'checksum = "{checksum}"\n')
    for package, (repo, query, files) in sorted(gits.items()):
        source = f"git+https://git.example/{repo}{query}#{commits[repo]}"
        lock.append(f'[[package]]\nname = "{package}"\nversion = "0.1.0"\nsource = "{source}"\n')
        pin = pin_of(Path("Cargo.lock"), package, "0.1.0", source, None)
        if store.git_checkout(pin) is not None:
            continue
        files = files or {"Cargo.toml": _manifest(package, "0.1.0").decode(),
                          "src/lib.rs": "pub fn f() -> u32 { 6 }\n"}
        _seal_checkout(pin, files)
    gb = pin_of(Path("Cargo.lock"), "gb", "0.1.0", f"git+https://git.example/multi?branch=dev#{commits['multi']}", None)
    lock.append(f'[[package]]\nname = "gb"\nversion = "0.1.0"\nsource = "{gb.source}"\n')
    deps = ["ga", "gb", "gc", "gd", "ge", f"tiny 1.0.0 ({CRATES_IO_SOURCE})", f"tiny 1.0.0 ({corp})",
            f"tiny 1.0.0 ({gitidx})",
            "tiny 2.0.0"]
    lock.append('[[package]]\nname = "me"\nversion = "0.1.0"\ndependencies = ['
                + ", ".join(json.dumps(d) for d in deps) + "]\n")
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.lock").write_text("".join(lock))
    (tree / "Cargo.toml").write_text(
        '[package]\nname = "me"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\n'
        'tiny = "=1.0.0"\ntiny2 = { package = "tiny", version = "=2.0.0" }\n'
        'tiny_corp = { package = "tiny", version = "=1.0.0", registry = "corp" }\n'
        'tiny_git = { package = "tiny", version = "=1.0.0", registry = "gitidx" }\n'
        'ga = { git = "https://git.example/multi", branch = "dev" }\n'
        'gb = { git = "https://git.example/multi", branch = "dev" }\n'
        'gc = { git = "https://git.example/tagged", tag = "v1.0" }\n'
        'gd = { git = "https://git.example/byrev", rev = "333333" }\n'
        'ge = { git = "https://git.example/plain" }\n')
    (tree / "src" / "lib.rs").write_text(
        "pub fn all() -> u32 { tiny::f() + tiny2::f() + tiny_corp::f() + tiny_git::f() + ga::f() + gb::f()"
        " + gc::f() + gd::f() + ge::f() }\n")
    (cargo_home / "config.toml").write_text(f'[registries.corp]\nindex = "{corp}"\n'
                                           '[registries.gitidx]\nindex = "https://gitidx.example/index"\n')
    made = vendor.vendored(read_pins(tree / "Cargo.lock"), tree)
    (cargo_home / "config.toml").unlink()  # the guest has only the view's sources.toml
    assert made.registry is not None
    view = made.registry.parent
    unpacked = view / "registry" / "0" / "tiny-1.0.0"
    assert os.access(unpacked / "run.sh", os.X_OK) and (unpacked / "empty").is_dir()
    done = host_cargo(tree, view, tmp_path, "check")
    assert done.returncode == 0, done.stderr
    assert "Checking me v0.1.0" in done.stderr and "Checking gb v0.1.0" in done.stderr
    assert (tree / "Cargo.lock").read_text() == "".join(lock)


@pytest.mark.xfail(strict=True, reason=(
    "review of issue 20, left open: a stored git checkout is trusted by its seal "
    "(git/<key>.json), which whoever can write the store can rewrite with the files; a "
    "registry pin is tied to the lockfile's checksum, a git pin only to that seal. Closing "
    "it means sealing the commit's raw commit and tree objects and checking every file's "
    "blob id up to the pinned commit id when the view is made (cargo/store.py, git.py)."))
def test_a_git_file_changed_with_its_seal_in_the_store_never_reaches_the_view(tmp_path: Path) -> None:
    tree = _stored_git(tmp_path, _GIT_DEP)
    lock = read_pins(tree / "Cargo.lock")
    found = store.git_checkout(lock.pins[0])
    assert found is not None
    checkout, files = found
    planted = "pub fn planted() {}\n"
    (checkout / "src" / "lib.rs").write_text(planted)
    seal = checkout.with_name(f"{checkout.name}.json")
    record = json.loads(seal.read_text())
    record["files"]["src/lib.rs"] = hashlib.sha256(planted.encode()).hexdigest()
    seal.write_text(json.dumps(record))
    try:
        made = vendor.vendored(lock, tree)
    except errors.NoPackageCache:
        return  # refused: what a fix may do
    assert made.git is not None
    assert (made.git / "0" / "dep-0.1.0" / "src" / "lib.rs").read_text() != planted
