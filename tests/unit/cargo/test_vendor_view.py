"""The guest's view of dependencies holds exactly what the lockfile pins, made from the
package store, shared alone, bounded, kept small (roteiro_py/cargo/vendor.py, through the
lint's preflight lint/caches.py and the mount table vm/mounts.py).

Ported from the tests of the copy of $CARGO_HOME it replaces (the cargo_view module): a
view is made by putting `.crate` files in the store, as fetch-deps does. test_vendor.py
has the unpacking itself (real cargo reading the view, hostile archives, the seal)."""

from __future__ import annotations

import gzip
import hashlib
import io
import os
import tarfile
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from roteiro_py import errors, lint
from roteiro_py.cargo import store, vendor
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE, read_pins
from roteiro_py.process.grants import GrantSet
from roteiro_py.process.sandbox import Command
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, cargo_views_root, derive_mounts
from tests.unit.cargo_support import crate_bytes, lockfile, stored

REV = "2f47bcb905c7393e7194e3d445ca71bf35c3af0d"


def tree_of(path: Path) -> lint.Tree:
    return lint.Tree(asked=path, workspace=path, repo_root=path)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


def big_member(name: str, size: int) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.size = size
    return info


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """A store holding the pinned itoa and another project's crate; a host cargo home
    with credentials and a cache of its own; a tree whose lockfile pins itoa."""
    checksum = stored(crate_bytes("itoa", "1.0.15", lib="pub fn pinned() {}\n"))
    stored(crate_bytes("other-secret", "9.9.9", lib='pub const LEAK: &str = "OTHER-PROJECT-CRATE";\n'))
    cargo = tmp_path / "cargo-home"
    (cargo / "registry" / "cache" / "index.crates.io-1949cf8c6b5b557f").mkdir(parents=True)
    (cargo / "registry" / "cache" / "index.crates.io-1949cf8c6b5b557f" / "itoa-1.0.15.crate").write_bytes(
        b"HOST-CACHE")
    (cargo / "credentials.toml").write_text("token = 'SECRET'\n")
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum))
    return tree, cargo, checksum


def test_the_view_holds_exactly_the_pinned_packages_and_nothing_else_of_the_host(host) -> None:
    tree, cargo, checksum = host
    registry, git = lint.package_cache(tree_of(tree))
    assert registry is not None and git is None  # no git pin: no git/ at all
    assert registry.parent.parent == cargo_views_root()
    package = "0/itoa-1.0.15"
    assert files_under(registry) == {vendor.SOURCES_FILE, f"{package}/Cargo.toml",
                                     f"{package}/src/lib.rs", f"{package}/.cargo-checksum.json"}
    # control arm: what is pinned arrives with its bytes
    assert (registry / package / "src" / "lib.rs").read_text() == "pub fn pinned() {}\n"
    everything = b"".join(p.read_bytes() for p in registry.parent.rglob("*") if p.is_file())
    assert b"OTHER-PROJECT-CRATE" not in everything and b"SECRET" not in everything
    assert b"HOST-CACHE" not in everything
    # and the grant the lint gives the guest names only the view
    grant = {str(a) for a in lint.grant_for(tree_of(tree), registry, git)}
    assert f"fs:read:{registry}/**" in grant and not any(str(cargo) in a for a in grant)


def test_the_mount_table_puts_the_view_where_the_guests_cargo_is_told_to_look(host) -> None:
    tree, cargo, _ = host
    made = lint.guest_cargo(tree_of(tree))
    assert made.registry is not None
    grant = lint.grant_for(tree_of(tree), made.registry, made.git)
    table = derive_mounts(grant, Command("cargo", (), tree), scratch="/.roteiro-scratch",
                          host_cargo_home=cargo)
    assert {(s.host, s.guest) for s in table.shares} == {
        (tree, str(tree)), (made.registry, f"{GUEST_CARGO_HOME}/registry")}
    assert table.cargo_home
    # the guest's cargo is given the view's [source] tables by their path in that share,
    # and each directory they name is in it
    assert made.config_args == ("--config", f"{GUEST_CARGO_HOME}/registry/{vendor.SOURCES_FILE}")
    tables = (made.registry / vendor.SOURCES_FILE).read_text()
    assert f'directory = "{GUEST_CARGO_HOME}/registry/0"' in tables
    assert (made.registry / "0").is_dir()


def test_a_grant_of_all_views_or_of_two_views_is_refused(host) -> None:
    tree, cargo, _ = host
    registry, _ = lint.package_cache(tree_of(tree))
    assert registry is not None
    command = Command("cargo", (), tree)
    for bad in (f"fs:read:{cargo_views_root()}/**", f"fs:read:{registry.parent}/**"):
        with pytest.raises(errors.Unenforceable) as caught:
            derive_mounts(GrantSet.of(f"fs:read:{tree}/**", bad), command, scratch=None,
                          host_cargo_home=cargo)
        assert "only one view" in caught.value.guidance().render_text()
    other = cargo_views_root() / ("f" * 32) / "registry"
    other.mkdir(parents=True)
    with pytest.raises(errors.Unenforceable) as caught:
        derive_mounts(GrantSet.of(f"fs:read:{tree}/**", f"fs:read:{registry}/**", f"fs:read:{other}/**"),
                      command, scratch=None, host_cargo_home=cargo)
    assert "another share already provides" in caught.value.guidance().render_text()
    # control: the view's registry/ alone is shared
    derive_mounts(GrantSet.of(f"fs:read:{tree}/**", f"fs:read:{registry}/**"), command, scratch=None,
                  host_cargo_home=cargo)


@pytest.mark.parametrize("kind", ["registry", "git"])
def test_a_grant_under_the_host_cargo_home_is_refused(host, kind: str) -> None:
    """The guest used to be given $CARGO_HOME/registry and git (every project's crates,
    checkouts with their .git); no part of the host's cargo home is shared now."""
    tree, cargo, _ = host
    (cargo / kind).mkdir(exist_ok=True)
    registry, _ = lint.package_cache(tree_of(tree))
    grant = lint.grant_for(tree_of(tree), registry, None)
    command = Command("cargo", (), tree)
    derive_mounts(grant, command, scratch="/.roteiro-scratch", host_cargo_home=cargo)  # control
    with pytest.raises(errors.Unenforceable) as caught:
        derive_mounts(GrantSet(grant.atoms | GrantSet.of(f"fs:read:{cargo}/{kind}/**").atoms), command,
                      scratch="/.roteiro-scratch", host_cargo_home=cargo)
    assert caught.value.atom == f"fs:read:{cargo}/{kind}/**"
    assert "no part of the host's cargo home is shared" in caught.value.guidance().render_text()


def test_only_path_dependencies_get_no_view_at_all(tmp_path: Path) -> None:
    lockfile(tmp_path, ("b", "0.2.0", None, None))
    assert lint.package_cache(tree_of(tmp_path)) == (None, None)
    assert lint.guest_cargo(tree_of(tmp_path)).config_args == ()
    assert not cargo_views_root().exists()


def test_a_pinned_package_the_store_lacks_is_named(host) -> None:
    tree, _, checksum = host
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum),
             ("zmissing", "2.0.1", CRATES_IO_SOURCE, "0" * 64))
    with pytest.raises(errors.NoPackageCache) as caught:
        lint.package_cache(tree_of(tree))
    text = caught.value.guidance().render_text()
    assert "lacks zmissing 2.0.1" in text and f"pylint-sandbox fetch-deps {tree}" in text
    assert str(store.packages_root()) in text
    # a .crate stored under another checksum is not the pinned package
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO_SOURCE, "1" * 64))
    with pytest.raises(errors.NoPackageCache, match="itoa 1.0.15"):
        lint.package_cache(tree_of(tree))
    lockfile(tree, ("gdep", "0.1.0", f"git+https://example.invalid/gdep#{'b' * 40}", None))
    with pytest.raises(errors.NoPackageCache, match=r"gdep 0.1.0 \(git bbbbbbbbbbbb\)"):
        lint.package_cache(tree_of(tree))
    assert not cargo_views_root().exists()  # refused before anything was unpacked


def test_another_projects_checkout_is_not_given_for_a_lookalike_git_source(tmp_path: Path) -> None:
    """Same commit from another URL, or the same URL at another full commit id: cargo
    would never use that checkout for this lockfile, so the store does not hand it out."""
    private = "a" * 40
    lock = lockfile(tmp_path, ("private", "0.1.0", f"git+https://git.internal/private#{private}", None))
    pin = read_pins(lock).pins[0]
    staging = store.git_staging(pin)
    (staging / "src").mkdir()
    (staging / "src" / "lib.rs").write_text('pub const K: &str = "PRIVATE";\n')
    store.keep_git_checkout(pin, staging, {"src/lib.rs": hashlib.sha256(
        b'pub const K: &str = "PRIVATE";\n').hexdigest()})
    for url, rev in (("https://evil.example/private", private),
                     ("https://git.internal/private", "a" * 7 + "b" * 33)):
        lockfile(tmp_path, ("private", "0.1.0", f"git+{url}#{rev}", None))
        with pytest.raises(errors.NoPackageCache, match="private 0.1.0"):
            lint.package_cache(tree_of(tmp_path))
    # control: the project that fetched it (any reference to that commit) finds it
    lockfile(tmp_path, ("private", "0.1.0", f"git+https://git.internal/private?branch=main#{private}", None))
    assert vendor.missing_from_store(read_pins(lock).pins) == []


def test_a_cold_store_names_the_first_packages_it_lacks_and_counts_the_rest(tmp_path: Path) -> None:
    held = stored(crate_bytes("held", "1.0.0"))
    wanted = [(f"crate{i}", "1.0.0", CRATES_IO_SOURCE, f"{i + 1:064x}") for i in range(errors.MISSING_NAMED + 2)]
    lockfile(tmp_path, ("held", "1.0.0", CRATES_IO_SOURCE, held), *wanted)
    with pytest.raises(errors.NoPackageCache) as caught:
        lint.package_cache(tree_of(tmp_path))
    text = caught.value.guidance().summary
    assert caught.value.missing == tuple(f"crate{i} 1.0.0" for i in range(errors.MISSING_NAMED))
    assert f"crate{errors.MISSING_NAMED - 1} 1.0.0 and 2 more," in text and "held" not in text
    assert not cargo_views_root().exists()  # refused before anything was unpacked


def test_a_version_bump_past_the_stored_crate_is_cold(tmp_path: Path) -> None:
    checksum = stored(crate_bytes("itoa", "1.0.15"))
    lockfile(tmp_path, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum))
    assert lint.package_cache(tree_of(tmp_path))[0] is not None  # control: the stored one is served
    bumped = hashlib.sha256(crate_bytes("itoa", "1.0.16")).hexdigest()
    lockfile(tmp_path, ("itoa", "1.0.16", CRATES_IO_SOURCE, bumped))
    with pytest.raises(errors.NoPackageCache, match="lacks itoa 1.0.16,"):
        lint.package_cache(tree_of(tmp_path))
    assert store.has_crate(checksum)  # the older one stays for the trees that pin it


def test_a_view_past_its_byte_bound_is_refused_naming_the_bound(tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    """Each package within its own bound (UNPACK_MAX_BYTES), the view past VIEW_MAX_BYTES."""
    deps = [(name, "1.0.0", CRATES_IO_SOURCE,
             stored(crate_bytes(name, "1.0.0", extra=[big_member(f"{name}-1.0.0/big.bin", 3000)])))
            for name in ("one", "two")]
    lockfile(tmp_path, *deps)
    monkeypatch.setattr(vendor, "VIEW_MAX_BYTES", 4000)
    with pytest.raises(errors.PackageRefused) as caught:
        lint.package_cache(tree_of(tmp_path))
    text = caught.value.guidance().render_text()
    assert "two 1.0.0" in text and "more than 4000 bytes, the most one view holds" in text
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir()]  # nothing half-made kept
    monkeypatch.setattr(vendor, "VIEW_MAX_BYTES", 8000)  # control: within the bound
    assert lint.package_cache(tree_of(tmp_path))[0] is not None


def test_a_view_is_made_once_per_pinned_set_and_a_build_killed_midway_is_cleared(
        tmp_path: Path) -> None:
    checksum = stored(crate_bytes("itoa", "1.0.15"))
    lock = lockfile(tmp_path, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum))
    key = vendor.view_key(read_pins(lock).pins)
    killed = cargo_views_root() / f".{key[:12]}-killed"
    (killed / "registry").mkdir(parents=True)  # what a build killed midway leaves
    first = lint.package_cache(tree_of(tmp_path))
    assert first[0] is not None and first[0].parent == cargo_views_root() / key
    assert not killed.exists()
    lib = first[0] / "0" / "itoa-1.0.15" / "src" / "lib.rs"
    inode = lib.stat().st_ino
    assert lint.package_cache(tree_of(tmp_path)) == first and lib.stat().st_ino == inode  # reused
    # control: another pinned set is another view
    other = stored(crate_bytes("ryu", "1.0.20"))
    lockfile(tmp_path, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum), ("ryu", "1.0.20", CRATES_IO_SOURCE, other))
    second = lint.package_cache(tree_of(tmp_path))
    assert second[0] is not None and second[0] != first[0] and first[0].is_dir()


def test_making_a_view_stops_at_the_runs_deadline(tmp_path: Path,
                                                 hold_lock: Callable[[Path], Callable[[], None]]) -> None:
    """The view was made (and another run's making of it waited for) with no deadline,
    before lint() even made one: [vm] timeout_s did not bound it."""
    from roteiro_py.clippy.parse import Deadline

    tree = tmp_path / "tree"
    tree.mkdir()
    lock = lockfile(tree, ("itoa", "1.0.15", CRATES_IO_SOURCE, stored(crate_bytes("itoa", "1.0.15"))))
    key = vendor.view_key(read_pins(lock).pins)
    cargo_views_root().mkdir(parents=True, exist_ok=True)
    release = hold_lock(cargo_views_root() / f"{key}.lock")
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as late:
        lint.package_cache(tree_of(tree), Deadline(at=time.monotonic() + 1.0, seconds=77.0))
    assert time.monotonic() - started < 5
    assert "77 s" in late.value.guidance().render_text()
    release()
    # control: with the lock free the same call makes the view within the deadline
    registry, _ = lint.package_cache(tree_of(tree), Deadline(at=time.monotonic() + 60, seconds=60))
    assert registry is not None and registry.is_dir()
    # and a deadline already past stops the making itself, not only the wait
    other = tmp_path / "other"
    other.mkdir()
    lockfile(other, ("ryu", "1.0.20", CRATES_IO_SOURCE, stored(crate_bytes("ryu", "1.0.20"))))
    with pytest.raises(errors.DeadlineExceeded):
        lint.package_cache(tree_of(other), Deadline(at=time.monotonic() - 1, seconds=5))
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir() and p != registry.parent]


def test_a_view_unused_for_longer_than_any_run_is_reclaimed(
        tmp_path: Path, hold_lock: Callable[[Path], Callable[[], None]]) -> None:
    """Every distinct pinned set is a full copy: pull requests each changing one pin
    filled the disk. A view unused for VIEW_STALE_SECONDS goes when another is next
    used; one used recently, or held by a run, stays."""
    views = []
    for i in range(3):
        tree = tmp_path / f"pr{i}"
        tree.mkdir()
        lockfile(tree, (f"tiny{i}", "1.0.0", CRATES_IO_SOURCE, stored(crate_bytes(f"tiny{i}", "1.0.0"))))
        made = vendor.vendored(read_pins(tree / "Cargo.lock"), tree).registry
        assert made is not None
        views.append(made.parent)
    long_ago = time.time() - vendor.VIEW_STALE_SECONDS - 3600
    os.utime(views[0], (long_ago, long_ago))
    os.utime(views[1], (long_ago, long_ago))
    hold_lock(cargo_views_root() / f"{views[1].name}.lock")  # a run is using it
    again = vendor.vendored(read_pins(tmp_path / "pr2" / "Cargo.lock"), tmp_path / "pr2").registry
    assert again is not None and again.parent == views[2] and views[2].is_dir()
    assert not views[0].exists() and not (cargo_views_root() / f"{views[0].name}.json").exists()
    assert views[1].is_dir()  # control: as old, but held by a run


def test_looking_up_a_lockfile_that_repeats_a_big_package_is_bounded(tmp_path: Path) -> None:
    """Every pin is looked up before anything is unpacked: a hostile lockfile naming one
    big stored crate thousands of times (a checksum apiece) once hashed it thousands of
    times before a byte of the view was counted (16 MiB of lockfile is ~100,000 pins).
    A lookup is a name in the store now; the archive is hashed once, when it is unpacked."""
    noise = tarfile.TarInfo("big-1.0.0/noise.bin")
    noise.size = 8 << 20
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        tar.addfile(noise, io.BytesIO(os.urandom(noise.size)))
    data = gzip.compress(buffer.getvalue(), mtime=0)  # 8 MiB that does not compress
    checksum = stored(data)
    repeats = 2000  # 16 GiB hashed when every pin hashes its crate
    lockfile(tmp_path, *[("big", "1.0.0", CRATES_IO_SOURCE, f"{i:064x}") for i in range(repeats)])
    started = time.monotonic()
    with pytest.raises(errors.NoPackageCache) as cold:
        lint.package_cache(tree_of(tmp_path))
    assert time.monotonic() - started < 10
    assert cold.value.missing == ("big 1.0.0",) and cold.value.total == 1  # named once
    # control: the same package pinned twice, checksum right, is found (once) and viewed
    lockfile(tmp_path, *[("big", "1.0.0", CRATES_IO_SOURCE, checksum)] * 2)
    registry, _ = lint.package_cache(tree_of(tmp_path))
    assert registry is not None and [p.name for p in (registry / "0").iterdir()] == ["big-1.0.0"]
