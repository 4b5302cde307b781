"""The host's `[source]` replacement is followed to its cache and given to the guest, or
refused once before boot (roteiro_py/cargo_sources.py); a cold cache names what it lacks.

The host caches here have cargo's layout (tests/unit/test_cargo_view.py's helpers); the
real-cargo proof through a sparse mirror on loopback is
tests/integration/lint/test_source_replacement_lint.py.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from test_cargo_view import CRATES_IO, REG, add_crate, lockfile, tree_of

from roteiro_py import cargo_sources, deps, errors, lint
from roteiro_py.vm.mounts import cargo_views_root

MIRROR = "sparse+https://mirror.example/index/"
MIRROR_DIR = "mirror.example-0123456789abcdef"


@pytest.fixture
def cargo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "cargo-home"
    home.mkdir()
    monkeypatch.setenv("CARGO_HOME", str(home))
    monkeypatch.delenv("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", raising=False)
    return home


def mirror_config(cargo: Path, table: str = f'registry = "{MIRROR}"') -> Path:
    (cargo / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "mirror"\n[source.mirror]\n' + table + "\n"
        '[registries.private]\ntoken = "SECRET-TOKEN"\n[http]\nproxy = "http://proxy.example"\n')
    return cargo / "config.toml"


def test_a_mirrored_crate_is_found_under_the_mirror_and_the_guest_is_given_only_its_source_tables(
        cargo: Path, tmp_path: Path) -> None:
    checksum = add_crate(cargo, "itoa", "1.0.15", "pub fn mirrored() {}\n", registry=MIRROR_DIR)
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum))
    with pytest.raises(errors.NoPackageCache, match="lacks itoa 1.0.15"):
        lint.package_cache(tree_of(tree))  # control: without the replacement, the guest's dirs are cold
    mirror_config(cargo)
    got = lint.guest_cargo(tree_of(tree))
    assert got.registry is not None
    assert (got.registry / "src" / MIRROR_DIR / "itoa-1.0.15" / "src" / "lib.rs").is_file()
    assert tuple(a.rstrip() for a in got.config_args) == (
        "--config", 'source.crates-io.replace-with="mirror"', "--config", f'source.mirror.registry="{MIRROR}"')
    # padded with TOML whitespace: no tree file of that name can exist for cargo to read instead
    assert all(len(a) >= cargo_sources.PATH_MAX for a in got.config_args[1::2])
    assert "SECRET" not in repr(got) and "proxy" not in repr(got)


def test_the_guest_argv_carries_the_replacement_before_the_lint_levels() -> None:
    argv = ["cargo-clippy", "clippy", "--offline", "--", "-W", "x"]
    given = lint.run.with_config(argv, ("--config", 'a="b"'))
    assert given == ["cargo-clippy", "clippy", "--config", 'a="b"', "--offline", "--", "-W", "x"]
    assert lint.run.with_config(argv, ()) == argv


def test_a_view_found_through_a_replacement_is_another_view(cargo: Path, tmp_path: Path) -> None:
    """The key names the replacement: the same pins through crates.io are another view."""
    plain = add_crate(cargo, "itoa", "1.0.15", "pub fn plain() {}\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, plain))
    first = lint.guest_cargo(tree_of(tree))
    (cargo / "registry" / "cache" / MIRROR_DIR).mkdir(parents=True)
    (cargo / "registry" / "cache" / MIRROR_DIR / "itoa-1.0.15.crate").write_bytes(
        (cargo / "registry" / "cache" / REG / "itoa-1.0.15.crate").read_bytes())
    mirror_config(cargo)
    with pytest.raises(errors.NoPackageCache):  # the mirror's index and src are not there
        lint.guest_cargo(tree_of(tree))
    assert first.config_args == ()


@pytest.mark.parametrize(("table", "key", "why"), [
    ('directory = "/srv/vendor"', "source.mirror.directory", "a path on this host"),
    ('local-registry = "/srv/reg"', "source.mirror.local-registry", "a path on this host"),
    ('registry = "https://mirror.example/git-index"', "source.mirror.registry", "git-protocol index"),
    ('registry = "sparse+https://m.example/\\"x"', "source.mirror.registry", "not a sparse"),
    ('registry = "sparse+https://u:pw@m.example/"', "source.mirror.registry", "credentials"),
    ('git = "https://mirror.example/x"', "source.mirror.git", "git source"),
    ('registry = "sparse+https://m.example/"\nsecret = 1', "source.mirror.secret", "not a key"),
    ('replace-with = "crates-io"', "source.mirror.replace-with", "loop"),
    ('replace-with = "nowhere"', "source.mirror.replace-with", "no [source.nowhere]"),
])
def test_a_replacement_the_guest_cannot_follow_is_refused_naming_file_and_key(
        cargo: Path, tmp_path: Path, table: str, key: str, why: str) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, None))
    config = mirror_config(cargo, table)
    with pytest.raises(errors.SourceReplacementRefused) as caught:
        lint.package_cache(tree_of(tree))
    assert (caught.value.file, caught.value.key) == (config, key)
    text = caught.value.guidance().render_text()
    assert why in text and str(config) in text and f"pylint-sandbox fetch-deps {tree}" in text
    assert not cargo_views_root().exists() or not any(cargo_views_root().iterdir())


def test_a_replacement_no_pinned_source_uses_is_not_refused(cargo: Path, tmp_path: Path) -> None:
    (cargo / "config.toml").write_text('[source.corp]\nregistry = "https://corp.example/index"\n'
                                       'replace-with = "vendored"\n[source.vendored]\n'
                                       'directory = "/srv/vendor"\n')
    checksum = add_crate(cargo, "itoa", "1.0.15", "pub fn plain() {}\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum))
    assert lint.guest_cargo(tree_of(tree)).config_args == ()
    # control: a package of the corp registry does go through the refused replacement
    lockfile(tree, ("corp-crate", "1.0.0", "registry+https://corp.example/index", None))
    with pytest.raises(errors.SourceReplacementRefused, match="source.vendored.directory"):
        lint.guest_cargo(tree_of(tree))


def test_crates_io_read_over_git_is_refused(cargo: Path, tmp_path: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, None))
    with pytest.raises(errors.NoPackageCache):  # control: the default protocol is followed
        lint.package_cache(tree_of(tree))
    monkeypatch.setenv("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", "git")
    with pytest.raises(errors.SourceReplacementRefused, match="registries.crates-io.protocol"):
        lint.package_cache(tree_of(tree))


def test_the_files_read_are_cargos_deeper_first_and_config_before_config_toml(tmp_path: Path) -> None:
    start = tmp_path / "roteiro" / "tmp"
    start.mkdir(parents=True)
    home = tmp_path / "cargo-home"
    home.mkdir()
    (home / "config.toml").write_text('[source.crates-io]\nreplace-with = "home"\n'
                                      '[source.home]\nregistry = "sparse+https://home.example/"\n')
    assert cargo_sources.config_files(start, home) == [home / "config.toml"]
    deeper = tmp_path / "roteiro" / ".cargo"
    deeper.mkdir()
    (deeper / "config.toml").write_text('[source.crates-io]\nreplace-with = "ignored"\n')
    (deeper / "config").write_text('[source.crates-io]\nreplace-with = "deeper"\n'
                                   '[source.deeper]\nregistry = "sparse+https://deeper.example/"\n')
    files = cargo_sources.config_files(start, home)
    assert files[0] == home / "config.toml" and files[-1] == deeper / "config"
    merged = cargo_sources.host_sources(start, home)
    assert merged.cache_source(CRATES_IO) == "sparse+https://deeper.example/"
    assert merged.guest_args()[-1].rstrip() == 'source.deeper.registry="sparse+https://deeper.example/"'


def test_a_host_config_that_is_not_toml_or_too_large_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "cargo-home"
    home.mkdir()
    (home / "config.toml").write_bytes(b"[source\n")
    with pytest.raises(errors.SourceReplacementRefused, match="not valid TOML"):
        cargo_sources.host_sources(tmp_path / "start", home)
    (home / "config.toml").write_bytes(b"#" * (cargo_sources.CONFIG_MAX_BYTES + 1))
    with pytest.raises(errors.SourceReplacementRefused, match=str(cargo_sources.CONFIG_MAX_BYTES)):
        cargo_sources.host_sources(tmp_path / "start", home)
    (home / "config.toml").write_bytes(b"#" * cargo_sources.CONFIG_MAX_BYTES)  # control: at the bound
    assert cargo_sources.host_sources(tmp_path / "start", home).tables == {}


def test_fetch_deps_refuses_the_replacement_before_cargo_runs(cargo: Path, tmp_path: Path,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "top"\nversion = "0.1.0"\n')
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, None))
    monkeypatch.setenv("PATH", str(tmp_path / "no-cargo-here"))
    with pytest.raises(errors.SpawnFailed):  # control: past the check, cargo is looked for
        deps.fetch_deps(tree)
    mirror_config(cargo, 'directory = "/srv/vendor"')
    with pytest.raises(errors.SourceReplacementRefused) as caught:
        deps.fetch_deps(tree)
    assert caught.value.key == "source.mirror.directory" and caught.value.tree == tree


def test_a_cold_cache_names_the_first_packages_it_lacks_and_counts_the_rest(
        cargo: Path, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    held = add_crate(cargo, "held", "1.0.0", "")
    wanted = [(f"crate{i}", "1.0.0", CRATES_IO, None) for i in range(errors.MISSING_NAMED + 2)]
    lockfile(tree, ("held", "1.0.0", CRATES_IO, held), *wanted)
    with pytest.raises(errors.NoPackageCache) as caught:
        lint.package_cache(tree_of(tree))
    text = caught.value.guidance().summary
    assert caught.value.missing == tuple(f"crate{i} 1.0.0" for i in range(errors.MISSING_NAMED))
    assert f"crate{errors.MISSING_NAMED - 1} 1.0.0 and 2 more," in text and "held" not in text
    assert not any(p.name.startswith(".") for p in cargo_views_root().iterdir() if p.is_dir())


def test_a_version_bump_past_the_cached_crate_is_cold(cargo: Path, tmp_path: Path) -> None:
    checksum = add_crate(cargo, "itoa", "1.0.15", "")
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum))
    assert lint.package_cache(tree_of(tree))[0] is not None  # control: the cached one is served
    lockfile(tree, ("itoa", "1.0.16", CRATES_IO, checksum))
    with pytest.raises(errors.NoPackageCache, match="lacks itoa 1.0.16,"):
        lint.package_cache(tree_of(tree))
    assert os.path.isdir(cargo / "registry" / "src" / REG / "itoa-1.0.15")


def test_the_guest_gets_a_location_for_every_table_it_is_given(cargo: Path, tmp_path: Path) -> None:
    """cargo refuses a [source] table with no location ("no source location specified"):
    a replaced registry other than crates.io is given its own `registry`, and a chain is
    given as its two ends (tests/integration/lint/test_source_replacement_lint.py runs
    the chain through real cargo)."""
    (cargo / "config.toml").write_text(
        '[source.corp]\nregistry = "https://corp.example/index"\nreplace-with = "relay"\n'
        '[source.relay]\nregistry = "sparse+https://relay.example/"\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "{MIRROR}"\n')
    checksum = add_crate(cargo, "corp-crate", "1.0.0", "pub fn corp() {}\n", registry=MIRROR_DIR)
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("corp-crate", "1.0.0", "registry+https://corp.example/index", checksum))
    got = lint.guest_cargo(tree_of(tree))
    assert got.registry is not None
    assert tuple(a.rstrip() for a in got.config_args) == (
        "--config", 'source.corp.registry="https://corp.example/index"',
        "--config", 'source.corp.replace-with="mirror"',
        "--config", f'source.mirror.registry="{MIRROR}"')
    # the origin's URL goes on the guest's command line too: held to the same rules
    (cargo / "config.toml").write_text(
        '[source.corp]\nregistry = "https://u:pw@corp.example/index"\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "{MIRROR}"\n')
    lockfile(tree, ("corp-crate", "1.0.0", "registry+https://u:pw@corp.example/index", checksum))
    with pytest.raises(errors.SourceReplacementRefused, match="credentials") as caught:
        lint.guest_cargo(tree_of(tree))
    assert caught.value.key == "source.corp.registry"


def test_a_step_is_shown_without_the_padding_of_its_config_values() -> None:
    from roteiro_py.clippy.command import pinned, unpinned

    sources = cargo_sources.HostSources(tables={
        "mirror": {"registry": cargo_sources.Setting(MIRROR, Path("c"))},
        "crates-io": {"replace-with": cargo_sources.Setting("mirror", Path("c"))}})
    sources.cache_source(CRATES_IO)
    argv = lint.run.with_config(["cargo-clippy", "clippy", "--", "-W", "x  "], tuple(sources.guest_args()))
    assert unpinned(pinned(argv)) == ["cargo-clippy", "clippy", "--config", 'source.crates-io.replace-with="mirror"',
                                      "--config", f'source.mirror.registry="{MIRROR}"', "--", "-W", "x  "]
    assert max(len(a) for a in argv) >= cargo_sources.PATH_MAX  # what runs is padded


def test_a_table_the_lockfile_never_reaches_is_not_judged(cargo: Path, tmp_path: Path) -> None:
    """cargo accepts any source name; one the guest could not be given as a bare TOML key
    is refused only when a pinned package goes through it (it refused every lint)."""
    checksum = add_crate(cargo, "itoa", "1.0.15", "pub fn mirrored() {}\n", registry=MIRROR_DIR)
    tree = tmp_path / "tree"
    tree.mkdir()
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO, checksum))
    config = mirror_config(cargo)
    config.write_text(config.read_text() + '[source."corp.internal"]\nregistry = "https://corp.example/"\n'
                      'replace-with = "mirror"\n')
    assert lint.guest_cargo(tree_of(tree)).registry is not None
    lockfile(tree, ("corp-crate", "1.0.0", "registry+https://corp.example/", None))
    with pytest.raises(errors.SourceReplacementRefused, match="not one the guest can be given") as caught:
        lint.guest_cargo(tree_of(tree))
    assert caught.value.key == "source.corp.internal.replace-with"
