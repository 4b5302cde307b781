"""The guest's cargo cache is a view of exactly what the lockfile pins (roteiro_py/cargo_view.py).

The host caches here have cargo's measured layout (sparse registry, git db + checkouts;
the layout and what cargo --offline --locked needs of it are in the module docstring,
and the real-cargo proof is tests/integration/lint/test_cargo_view_lint.py)."""

from __future__ import annotations

import hashlib
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py import cargo_view, lint
from roteiro_py.deps import unsafe_sources_in
from roteiro_py.errors import NoPackageCache, PackageCacheRefused, TreeFileRefused, Unenforceable
from roteiro_py.process.grants import GrantSet
from roteiro_py.process.sandbox import Command
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, cargo_views_root, derive_mounts

REG = "index.crates.io-1949cf8c6b5b557f"
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
REV = "2f47bcb905c7393e7194e3d445ca71bf35c3af0d"
GDIR = "gdep-6b3a484aa0897d7f"


def add_crate(cargo: Path, name: str, version: str, body: str, registry: str = REG) -> str:
    """A crate as `cargo fetch` leaves it; returns the sha256 of its .crate file."""
    reg = cargo / "registry"
    crate = f"{name}-{version}"
    (reg / "cache" / registry).mkdir(parents=True, exist_ok=True)
    data = f"crate bytes of {crate}\n".encode()
    (reg / "cache" / registry / f"{crate}.crate").write_bytes(data)
    index = reg / "index" / registry
    (index / ".cache" / cargo_view.index_path(name)).parent.mkdir(parents=True, exist_ok=True)
    (index / ".cache" / cargo_view.index_path(name)).write_text(f"index entry of {name}\n")
    (index / "config.json").write_text('{"dl": "https://static.crates.io/crates"}\n')
    src = reg / "src" / registry / crate
    (src / "src").mkdir(parents=True)
    (src / "src" / "lib.rs").write_text(body)
    (src / ".cargo-ok").write_text('{"v":1}')
    return hashlib.sha256(data).hexdigest()


def add_checkout(cargo: Path, directory: str, rev: str, body: str, url: str) -> None:
    """A git dependency as cargo leaves it (db FETCH_HEAD naming the URL, checkout HEAD the commit)."""
    git = cargo / "git"
    (git / "db" / directory / "objects").mkdir(parents=True, exist_ok=True)
    (git / "db" / directory / "HEAD").write_text("ref: refs/heads/master\n")
    (git / "db" / directory / "FETCH_HEAD").write_text(f"{rev}\t\t{url}\n")
    checkout = git / "checkouts" / directory / rev[:7]
    (checkout / "src").mkdir(parents=True)
    (checkout / "src" / "lib.rs").write_text(body)
    (checkout / ".cargo-ok").write_text("")
    (checkout / ".git" / "refs" / "heads").mkdir(parents=True)
    (checkout / ".git" / "HEAD").write_text("ref: refs/heads/master\n")
    (checkout / ".git" / "refs" / "heads" / "master").write_text(rev + "\n")


def lockfile(tree: Path, *packages: tuple[str, str, str | None, str | None]) -> Path:
    text = 'version = 4\n[[package]]\nname = "top"\nversion = "0.1.0"\n'
    for name, version, source, checksum in packages:
        text += f'[[package]]\nname = "{name}"\nversion = "{version}"\n'
        if source is not None:
            text += f'source = "{source}"\n'
        if checksum is not None:
            text += f'checksum = "{checksum}"\n'
    (tree / "Cargo.lock").write_text(text)
    return tree / "Cargo.lock"


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if not p.is_dir()}


@pytest.fixture
def host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path, str]:
    """A host cache holding the pinned itoa and gdep, plus another project's crate and
    private git checkout; a tree whose lockfile pins itoa and gdep."""
    cargo = tmp_path / "cargo-home"
    checksum = add_crate(cargo, "itoa", "1.0.15", "pub fn pinned() {}\n")
    add_crate(cargo, "other-secret", "9.9.9", "pub const LEAK: &str = \"OTHER-PROJECT-CRATE\";\n")
    add_checkout(cargo, GDIR, REV, "pub const G: u32 = 7;\n", "https://example.invalid/gdep")
    add_checkout(cargo, "private-0123456789abcdef", "a" * 40, "pub const K: &str = \"PRIVATE\";\n",
                 "https://git.internal/private")
    (cargo / "credentials.toml").write_text("token = 'SECRET'\n")
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum),
             ("gdep", "0.1.0", f"git+https://example.invalid/gdep#{REV}", None))
    return tree, cargo, checksum


def tree_of(path: Path) -> lint.Tree:
    return lint.Tree(asked=path, workspace=path, repo_root=path)


def test_the_view_holds_exactly_the_pinned_packages_and_nothing_else_of_the_host_cache(host) -> None:
    tree, cargo, _ = host
    registry, git = lint.package_cache(tree_of(tree))
    assert registry is not None and git is not None
    assert registry.parent.parent == cargo_views_root()
    seen = files_under(registry) | {f"git/{f}" for f in files_under(git)}
    assert seen == {
        "CACHEDIR.TAG", f"cache/{REG}/itoa-1.0.15.crate", f"index/{REG}/config.json",
        f"index/{REG}/.cache/it/oa/itoa", f"src/{REG}/itoa-1.0.15/.cargo-ok",
        f"src/{REG}/itoa-1.0.15/src/lib.rs",
        "git/CACHEDIR.TAG", f"git/db/{GDIR}/HEAD", f"git/db/{GDIR}/FETCH_HEAD",
        f"git/checkouts/{GDIR}/{REV[:7]}/.cargo-ok", f"git/checkouts/{GDIR}/{REV[:7]}/src/lib.rs",
        f"git/checkouts/{GDIR}/{REV[:7]}/.git/HEAD", f"git/checkouts/{GDIR}/{REV[:7]}/.git/refs/heads/master"}
    # control arm: what is pinned arrives with its bytes
    assert (registry / "src" / REG / "itoa-1.0.15" / "src" / "lib.rs").read_text() == "pub fn pinned() {}\n"
    everything = b"".join(p.read_bytes() for p in registry.parent.rglob("*") if p.is_file())
    assert b"OTHER-PROJECT-CRATE" not in everything and b"PRIVATE" not in everything
    assert b"SECRET" not in everything
    # and the grant the lint gives the guest names only the view
    grant = {str(a) for a in lint.grant_for(tree_of(tree), registry, git)}
    assert f"fs:read:{registry}/**" in grant and not any(str(cargo) in a for a in grant)


def test_the_mount_table_puts_the_view_where_cargo_looks(host) -> None:
    tree, cargo, _ = host
    registry, git = lint.package_cache(tree_of(tree))
    grant = lint.grant_for(tree_of(tree), registry, git)
    table = derive_mounts(grant, Command("cargo", (), tree), scratch="/.roteiro-scratch",
                          host_cargo_home=cargo)
    assert {(s.host, s.guest) for s in table.shares} == {
        (tree, str(tree)), (registry, f"{GUEST_CARGO_HOME}/registry"),
        (git, f"{GUEST_CARGO_HOME}/git")}
    assert table.cargo_home


def test_a_grant_of_all_views_or_of_two_views_is_refused(host) -> None:
    tree, cargo, _ = host
    registry, _ = lint.package_cache(tree_of(tree))
    assert registry is not None
    command = Command("cargo", (), tree)
    for bad in (f"fs:read:{cargo_views_root()}/**", f"fs:read:{registry.parent}/**"):
        with pytest.raises(Unenforceable) as caught:
            derive_mounts(GrantSet.of(f"fs:read:{tree}/**", bad), command, scratch=None,
                          host_cargo_home=cargo)
        assert "only one view" in caught.value.guidance().render_text()
    other = cargo_views_root() / ("f" * 32) / "registry"
    other.mkdir(parents=True)
    with pytest.raises(Unenforceable) as caught:
        derive_mounts(GrantSet.of(f"fs:read:{tree}/**", f"fs:read:{registry}/**", f"fs:read:{other}/**"),
                      command, scratch=None, host_cargo_home=cargo)
    assert "another share already provides" in caught.value.guidance().render_text()


def test_only_path_dependencies_get_no_view_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "absent-cargo-home"))
    lockfile(tmp_path, ("b", "0.2.0", None, None))
    assert lint.package_cache(tree_of(tmp_path)) == (None, None)
    assert not cargo_views_root().exists()


def test_a_pinned_package_the_cache_lacks_is_named(host) -> None:
    tree, cargo, checksum = host
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum), ("zmissing", "2.0.1", CRATES_IO, "0" * 64))
    with pytest.raises(NoPackageCache) as caught:
        lint.package_cache(tree_of(tree))
    text = caught.value.guidance().render_text()
    assert "lacks zmissing 2.0.1" in text and f"pylint-sandbox fetch-deps {tree}" in text
    # a .crate whose bytes differ from the pinned checksum is not the pinned package
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, "1" * 64))
    with pytest.raises(NoPackageCache, match="itoa 1.0.15"):
        lint.package_cache(tree_of(tree))
    lockfile(tree, ("gdep", "0.1.0", f"git+https://example.invalid/gdep#{'b' * 40}", None))
    with pytest.raises(NoPackageCache, match="gdep 0.1.0"):
        lint.package_cache(tree_of(tree))


def test_another_projects_checkout_is_not_given_for_a_lookalike_git_source(host) -> None:
    """Same repository name, same commit prefix, another URL or another full commit id:
    cargo would never use that checkout for this lockfile, so the view does not hold it."""
    tree, cargo, _ = host
    private = "a" * 40
    for url, rev in (("https://evil.example/private", private), ("https://git.internal/private", "a" * 7 + "b" * 33)):
        lockfile(tree, ("private", "0.1.0", f"git+{url}#{rev}", None))
        with pytest.raises(NoPackageCache, match="private 0.1.0"):
            lint.package_cache(tree_of(tree))
    lockfile(tree, ("private", "0.1.0", f"git+https://git.internal/private?branch=main#{private}", None))
    _, git = lint.package_cache(tree_of(tree))  # control: the project that fetched it gets it
    assert git is not None and list(git.glob("checkouts/private-*/aaaaaaa/src/lib.rs"))


def test_a_cache_without_git_dir_is_refused_before_any_copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    (tmp_path / "cargo-home" / "registry").mkdir(parents=True)
    lockfile(tmp_path, ("g", "0.1.0", f"git+https://example.invalid/g#{REV}", None))
    with pytest.raises(NoPackageCache) as caught:
        lint.package_cache(tree_of(tmp_path))
    assert str(tmp_path / "cargo-home" / "git") in caught.value.guidance().render_text()


def test_links_and_special_files_inside_a_crate_are_never_followed(host) -> None:
    tree, cargo, _ = host
    src = cargo / "registry" / "src" / REG / "itoa-1.0.15"
    (src / "passwd").symlink_to("/etc/passwd")
    (src / "hostdir").symlink_to(cargo)
    os.mkfifo(src / "fifo")
    registry, _ = lint.package_cache(tree_of(tree))
    assert registry is not None
    copied = registry / "src" / REG / "itoa-1.0.15"
    assert os.readlink(copied / "passwd") == "/etc/passwd"  # a link, resolved in the guest
    assert (copied / "passwd").is_symlink() and (copied / "hostdir").is_symlink()
    assert not (copied / "fifo").exists()
    assert (copied / "src" / "lib.rs").read_text() == "pub fn pinned() {}\n"  # control


def test_a_view_past_its_byte_bound_is_refused_naming_the_bound(host, monkeypatch: pytest.MonkeyPatch) -> None:
    tree, cargo, _ = host
    big = cargo / "registry" / "src" / REG / "itoa-1.0.15" / "big.bin"
    big.write_bytes(b"x" * 4096)
    monkeypatch.setattr(cargo_view, "CARGO_VIEW_MAX_BYTES", 4000)
    with pytest.raises(PackageCacheRefused) as caught:
        lint.package_cache(tree_of(tree))
    assert f"exceed {cargo_view.CARGO_VIEW_MAX_BYTES} bytes" in caught.value.guidance().render_text()
    assert not [p for p in cargo_views_root().iterdir() if p.is_dir()]  # nothing half-built kept


def test_a_view_is_built_once_per_pinned_set(host) -> None:
    tree, cargo, _ = host
    key = cargo_view.view_key(cargo_view.pins(tree / "Cargo.lock"), cargo.resolve())
    killed = cargo_views_root() / f".{key[:12]}-killed"
    killed.mkdir(parents=True)  # what a build killed midway leaves
    first = lint.package_cache(tree_of(tree))
    (cargo / "registry" / "src" / REG / "itoa-1.0.15" / "src" / "lib.rs").write_text("changed\n")
    assert lint.package_cache(tree_of(tree)) == first
    assert first[0] is not None
    assert (first[0] / "src" / REG / "itoa-1.0.15" / "src" / "lib.rs").read_text() == "pub fn pinned() {}\n"
    assert not killed.exists()


@pytest.mark.parametrize("name", ["../../etc", "a/b", "x\ny", "", "a" * 65])
def test_a_package_name_that_is_not_cargos_is_refused(tmp_path: Path, name: str) -> None:
    (tmp_path / "Cargo.lock").write_text(
        f'[[package]]\nname = {json.dumps(name)}\nversion = "1.0.0"\nsource = "{CRATES_IO}"\n')
    with pytest.raises(TreeFileRefused, match="not a cargo package name"):
        cargo_view.pins(tmp_path / "Cargo.lock")


SOURCES = st.one_of(
    st.text(max_size=60),
    st.builds(lambda k, u: f"{k}+{u}", st.sampled_from(["registry", "sparse", "git", "path", ""]),
              st.text(max_size=60)),
    st.builds(lambda u, r: f"git+https://{u}#{r}", st.text(max_size=30),
              st.one_of(st.text(alphabet="0123456789abcdef", min_size=38, max_size=42), st.text())))
VALUES = st.one_of(st.none(), st.integers(), SOURCES, st.lists(st.text(max_size=5), max_size=2))


@given(st.lists(st.fixed_dictionaries({}, optional={"name": st.one_of(VALUES, st.just("itoa")),
                                                    "version": st.one_of(VALUES, st.just("1.0.0")),
                                                    "source": VALUES, "checksum": VALUES}),
                max_size=4))
def test_fuzzed_lockfile_sources_give_a_documented_value_or_our_refusal(packages: list[dict[str, object]]) -> None:
    data: dict[str, object] = {"package": packages}
    try:
        found = cargo_view.pins_in(Path("/t/Cargo.lock"), data)
    except TreeFileRefused as refused:
        assert "/t/Cargo.lock" in refused.guidance().render_text()
    else:
        for pin in found:
            assert pin.kind in ("registry", "git")
            assert "/" not in pin.name and "/" not in pin.version and ".." not in pin.name
            assert pin.kind == "registry" or (pin.rev is not None and len(pin.rev) in (40, 64))
    unsafe = unsafe_sources_in(data)
    assert all(isinstance(s, str) and not s.partition("+")[2].startswith("https://") for s in unsafe)


@given(st.binary(max_size=300))
def test_fuzzed_lockfile_bytes_give_kinds_or_our_refusal(tmp_path_factory: pytest.TempPathFactory,
                                                         content: bytes) -> None:
    path = tmp_path_factory.mktemp("lock") / "Cargo.lock"
    path.write_bytes(content)
    try:
        assert {pin.kind for pin in cargo_view.pins(path)} <= {"registry", "git"}
    except TreeFileRefused as refused:
        assert str(path) in refused.guidance().render_text()


def test_building_a_view_stops_at_the_runs_deadline(tmp_path: Path, roteiro_home: Path,
                                                    monkeypatch: pytest.MonkeyPatch,
                                                    hold_lock: Callable[[Path], Callable[[], None]],
                                                    ) -> None:
    """The view was built (and another run's build of it waited for) with no deadline,
    before lint() even made one: [vm] timeout_s did not bound it."""
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.errors import DeadlineExceeded

    cargo = tmp_path / "cargo-home"
    checksum = add_crate(cargo, "itoa", "1.0.15", "")
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    tree = tmp_path / "tree"
    tree.mkdir()
    lock = lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum))
    key = cargo_view.view_key(cargo_view.pins(lock), cargo.resolve())
    cargo_views_root().mkdir(parents=True, exist_ok=True)
    release = hold_lock(cargo_views_root() / f"{key}.lock")
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded) as late:
        lint.package_cache(tree_of(tree), Deadline(at=time.monotonic() + 1.0, seconds=77.0))
    assert time.monotonic() - started < 5
    assert "77 s" in late.value.guidance().render_text()
    release()
    # control: with the lock free the same call builds the view within the deadline
    registry, _ = lint.package_cache(tree_of(tree), Deadline(at=time.monotonic() + 60, seconds=60))
    assert registry is not None and registry.is_dir()
    # and a deadline already past stops the copy itself, not only the wait
    other = tmp_path / "other"
    other.mkdir()
    checksum2 = add_crate(cargo, "ryu", "1.0.20", "")
    lockfile(other, ("ryu", "1.0.20", CRATES_IO, checksum2))
    with pytest.raises(DeadlineExceeded):
        lint.package_cache(tree_of(other), Deadline(at=time.monotonic() - 1, seconds=5))


def test_a_view_unused_for_longer_than_any_run_is_reclaimed(
        tmp_path: Path, roteiro_home: Path, monkeypatch: pytest.MonkeyPatch,
        hold_lock: Callable[[Path], Callable[[], None]]) -> None:
    """Every distinct pinned set is a full copy; none was ever removed, so pull requests
    each changing one pin filled the disk. A view unused for VIEW_STALE_SECONDS goes when
    another is next used; one used recently, or locked by a run, stays."""
    cargo = tmp_path / "cargo-home"
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    views = []
    for i in range(3):
        tree = tmp_path / f"pr{i}"
        tree.mkdir()
        checksum = add_crate(cargo, f"tiny{i}", "1.0.0", "")
        view = cargo_view.cargo_view(lockfile(tree, (f"tiny{i}", "1.0.0", CRATES_IO, checksum)),
                                     cargo.resolve(), tree)
        assert view is not None
        views.append(view)
    long_ago = time.time() - cargo_view.VIEW_STALE_SECONDS - 3600
    os.utime(views[0], (long_ago, long_ago))
    os.utime(views[1], (long_ago, long_ago))
    hold_lock(cargo_views_root() / f"{views[1].name}.lock")  # a run is using it
    again = cargo_view.cargo_view(tmp_path / "pr2" / "Cargo.lock", cargo.resolve(), tmp_path / "pr2")
    assert again == views[2] and views[2].is_dir()
    assert not views[0].exists()  # unused for longer than any run: reclaimed
    assert views[1].is_dir()  # control: as old, but locked by a run


def test_looking_up_a_lockfile_that_repeats_a_big_package_is_bounded(tmp_path: Path, roteiro_home: Path,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """Every pin is looked up before anything is copied, and each lookup hashes the
    .crate: a hostile lockfile naming one big cached crate thousands of times (a
    checksum apiece) hashed it thousands of times, with no deadline, before a byte of
    the view was counted (16 MiB of lockfile is ~100,000 pins)."""
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.errors import DeadlineExceeded

    cargo = tmp_path / "cargo-home"
    add_crate(cargo, "big", "1.0.0", "")
    crate = cargo / "registry" / "cache" / REG / "big-1.0.0.crate"
    crate.write_bytes(os.urandom(1024) * 8 * 1024)  # 8 MiB
    checksum = hashlib.sha256(crate.read_bytes()).hexdigest()
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    tree = tmp_path / "tree"
    tree.mkdir()
    repeats = 2000  # 16 GiB hashed when every pin hashes its crate
    lockfile(tree, *[("big", "1.0.0", CRATES_IO, f"{i:064x}") for i in range(repeats)])
    started = time.monotonic()
    with pytest.raises(NoPackageCache) as cold:
        lint.package_cache(tree_of(tree))
    assert time.monotonic() - started < 10
    assert "lacks big 1.0.0, which" in cold.value.guidance().render_text()  # named once
    # a deadline already past stops the lookups themselves
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded):
        lint.package_cache(tree_of(tree), Deadline(at=time.monotonic() - 1, seconds=5))
    assert time.monotonic() - started < 10
    # control: the same package pinned twice, checksum right, is found (once) and viewed
    lockfile(tree, *[("big", "1.0.0", CRATES_IO, checksum)] * 2)
    registry, _ = lint.package_cache(tree_of(tree))
    assert registry is not None and (registry / "cache" / REG / "big-1.0.0.crate").is_file()
