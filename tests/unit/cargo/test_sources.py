"""The host's `[source]` replacement (a crates.io mirror) is read as host cargo reads its
configuration and followed to the registry it ends at, or refused naming the file and the
key (roteiro_py/cargo/sources.py, HostSources.cache_source). The registry fetcher
downloads through that mirror; the guest is given none of it (it reads the vendored view,
tests/unit/cargo/test_vendor_view.py).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py import errors, lint
from roteiro_py.cargo import sources as cargo_sources
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE as CRATES_IO

MIRROR = "sparse+https://mirror.example/index/"


@pytest.fixture
def cargo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    home = tmp_path / "host-cargo-home"
    home.mkdir()
    monkeypatch.setenv("CARGO_HOME", str(home))
    monkeypatch.delenv("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", raising=False)
    return home


def mirror_config(cargo: Path, table: str = f'registry = "{MIRROR}"') -> Path:
    (cargo / "config.toml").write_text(
        '[source.crates-io]\nreplace-with = "mirror"\n[source.mirror]\n' + table + "\n"
        '[registries.private]\ntoken = "SECRET-TOKEN"\n[http]\nproxy = "http://proxy.example"\n')
    return cargo / "config.toml"


def test_crates_io_is_followed_to_the_hosts_mirror(cargo: Path) -> None:
    assert cargo_sources.host_sources().cache_source(CRATES_IO) == CRATES_IO  # control: no mirror
    mirror_config(cargo)
    sources = cargo_sources.host_sources()
    assert sources.cache_source(CRATES_IO) == MIRROR
    assert "SECRET" not in repr(sources) and "proxy" not in repr(sources)


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
def test_a_replacement_that_cannot_be_followed_is_refused_naming_file_and_key(
        cargo: Path, table: str, key: str, why: str) -> None:
    config = mirror_config(cargo, table)
    with pytest.raises(errors.SourceReplacementRefused) as caught:
        cargo_sources.host_sources().cache_source(CRATES_IO)
    assert (caught.value.file, caught.value.key) == (config, key)
    text = caught.value.guidance().render_text()
    assert why in text and str(config) in text


def test_a_replacement_no_pinned_source_uses_is_not_refused(cargo: Path) -> None:
    (cargo / "config.toml").write_text('[source.corp]\nregistry = "https://corp.example/index"\n'
                                       'replace-with = "vendored"\n[source.vendored]\n'
                                       'directory = "/srv/vendor"\n')
    sources = cargo_sources.host_sources()
    assert sources.cache_source(CRATES_IO) == CRATES_IO
    # control: a package of the corp registry does go through the refused replacement
    with pytest.raises(errors.SourceReplacementRefused, match="source.vendored.directory"):
        sources.cache_source("registry+https://corp.example/index")


def test_crates_io_read_over_git_is_refused(cargo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert cargo_sources.host_sources().cache_source(CRATES_IO) == CRATES_IO  # control: sparse
    monkeypatch.setenv("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", "git")
    with pytest.raises(errors.SourceReplacementRefused, match="registries.crates-io.protocol"):
        cargo_sources.host_sources().cache_source(CRATES_IO)


def test_the_files_read_are_cargos_deeper_first_and_config_before_config_toml(tmp_path: Path) -> None:
    start = tmp_path / "roteiro" / "tmp"
    start.mkdir(parents=True)
    home = tmp_path / "host-cargo-home"
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


def test_a_host_config_that_is_not_toml_or_too_large_is_refused(tmp_path: Path) -> None:
    home = tmp_path / "host-cargo-home"
    home.mkdir()
    (home / "config.toml").write_bytes(b"[source\n")
    with pytest.raises(errors.SourceReplacementRefused, match="not valid TOML"):
        cargo_sources.host_sources(tmp_path / "start", home)
    (home / "config.toml").write_bytes(b"#" * (cargo_sources.CONFIG_MAX_BYTES + 1))
    with pytest.raises(errors.SourceReplacementRefused, match=str(cargo_sources.CONFIG_MAX_BYTES)):
        cargo_sources.host_sources(tmp_path / "start", home)
    (home / "config.toml").write_bytes(b"#" * cargo_sources.CONFIG_MAX_BYTES)  # control: at the bound
    assert cargo_sources.host_sources(tmp_path / "start", home).tables == {}


def test_a_replaced_registry_other_than_crates_io_is_followed_through_a_chain(cargo: Path) -> None:
    (cargo / "config.toml").write_text(
        '[source.corp]\nregistry = "https://corp.example/index"\nreplace-with = "relay"\n'
        '[source.relay]\nregistry = "sparse+https://relay.example/"\nreplace-with = "mirror"\n'
        f'[source.mirror]\nregistry = "{MIRROR}"\n')
    assert cargo_sources.host_sources().cache_source("registry+https://corp.example/index") == MIRROR
    # the mirror's own URL with credentials is refused (it is where downloads go); an origin's
    # URL only names which lockfile source is replaced (a lockfile source with a user is
    # refused by cargo/lockfile.py before anything is followed)
    (cargo / "config.toml").write_text(
        '[source.corp]\nregistry = "https://corp.example/index"\nreplace-with = "mirror"\n'
        '[source.mirror]\nregistry = "sparse+https://u:pw@mirror.example/"\n')
    with pytest.raises(errors.SourceReplacementRefused, match="credentials") as caught:
        cargo_sources.host_sources().cache_source("registry+https://corp.example/index")
    assert caught.value.key == "source.mirror.registry"


def test_any_source_name_cargo_accepts_is_followed(cargo: Path) -> None:
    """cargo accepts any source name (nothing is written for the guest from here any more:
    a name that is no bare TOML key is followed like any other)."""
    config = mirror_config(cargo)
    config.write_text(config.read_text() + '[source."corp.internal"]\nregistry = "https://corp.example/"\n'
                      'replace-with = "mirror"\n')
    sources = cargo_sources.host_sources()
    assert sources.cache_source(CRATES_IO) == MIRROR
    assert sources.cache_source("registry+https://corp.example/") == MIRROR


def test_the_guest_argv_carries_the_views_sources_before_the_lint_levels() -> None:
    """The guest is given the vendored view's [source] tables (cargo/vendor.py), not the
    host's replacement: its path in the read-only share, right after the subcommand."""
    from roteiro_py.cargo.vendor import GUEST_SOURCES
    from roteiro_py.clippy.command import pinned, unpinned

    argv = ["cargo-clippy", "clippy", "--offline", "--", "-W", "x  "]
    given = lint.run.with_config(argv, ("--config", GUEST_SOURCES))
    assert given == ["cargo-clippy", "clippy", "--config", GUEST_SOURCES, "--offline", "--", "-W", "x  "]
    assert unpinned(pinned(given)) == given  # shown as it runs
    assert lint.run.with_config(argv, ()) == argv
