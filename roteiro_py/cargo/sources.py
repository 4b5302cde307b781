"""The host's cargo source replacement (`[source]` tables), followed for downloads.

Why: a host whose cargo configuration replaces crates.io (`[source.crates-io]
replace-with = "mirror"`, `[source.mirror] registry = "sparse+https://mirror/"`) wants
every download to go to the mirror: a corporate network may reach nothing else, and the
mirror may be the one vetted copy. `fetch-deps` (cargo/registry.py) asks `cache_source`
which registry a pinned package is downloaded from. The guest is never given any of this:
it sees the vendored view (cargo/vendor.py), whose `[source]` tables replace the
lockfile's own sources, whatever the host's mirror was.

What is guaranteed:
- The configuration read is the user's, never the tree's: `.cargo/config.toml` (or
  `.cargo/config`, which cargo prefers when both exist) in the ancestors of
  `fetch_directory()` (under $ROTEIRO_HOME), deepest first, then `$CARGO_HOME/config.toml`;
  tables merge key by key, the deeper file winning. Each file is read bounded
  (CONFIG_MAX_BYTES); the user's own files may be links (dotfile managers).
- Only what the lockfile needs is followed: a pinned package's source (crates.io, or a
  registry whose `[source.<name>] registry` is that URL) through its `replace-with`
  chain (at most MAX_CHAIN links) to a table naming a sparse registry
  (`registry = "sparse+http(s)://..."`; cargo/registry.py downloads over https only).
- A replacement that cannot be followed is refused, naming the file and the key
  (errors.SourceReplacementRefused): a `directory` or `local-registry` source (a host
  path), a git-protocol index, a `git` source, a name that is not a bare TOML key, a chain
  that loops, crates.io read over git (`registries.crates-io.protocol = "git"`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from roteiro_py import errors, paths
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

#: The largest host cargo configuration file read (real ones are a few KiB).
CONFIG_MAX_BYTES = 1024 * 1024
#: The most `replace-with` links followed from one source (cargo's real chains have one).
MAX_CHAIN = 8
#: The longest registry URL followed.
MAX_URL_CHARS = 2048
#: The built-in source name of crates.io, and its URLs as a lockfile writes them.
CRATES_IO = "crates-io"
CRATES_IO_SOURCES = ("registry+https://github.com/rust-lang/crates.io-index",
                     "sparse+https://index.crates.io/")
#: The keys of a `[source.<name>]` table that are understood; of these only `replace-with`
#: and a sparse `registry` are ever given to the guest.
_KNOWN_KEYS = ("replace-with", "registry", "local-registry", "directory", "git", "branch",
               "tag", "rev")
#: A sparse registry URL that is safe inside a TOML basic string on a command line.
_SPARSE_URL = re.compile(r"sparse\+https?://[!#-\[\]-~]+")
#: The URL of a replaced registry other than crates.io, under the same rule.


@dataclass(frozen=True)
class Setting:
    """One key of a `[source.<name>]` table and the file it came from."""

    value: object
    file: Path


@dataclass
class HostSources:
    """The host's `[source]` tables as cargo merges them."""

    tables: dict[str, dict[str, Setting]] = field(default_factory=dict)
    #: Where crates.io's protocol was chosen ("git" is refused when crates.io is used).
    crates_io_protocol: Setting | None = None

    def cache_source(self, source: str) -> str:
        """The source whose cache directories hold a package pinned from `source` (a
        lockfile `source` string): `source` itself, or the sparse registry its
        replacement chain ends at (where fetch-deps downloads it from); refuses a chain
        that cannot be followed (errors.SourceReplacementRefused)."""
        name = self._name_of(source)
        if name is None:
            return source
        seen = [name]
        while True:
            table = self.tables.get(name, {})
            replace = table.get("replace-with")
            if replace is None:
                break
            target = replace.value
            key = f"source.{name}.replace-with"
            if not isinstance(target, str):
                raise errors.SourceReplacementRefused(replace.file, key, "its value is not a "
                                                      "source name")
            if target in seen:
                raise errors.SourceReplacementRefused(replace.file, key, "the replacements form "
                                                      f"a loop ({' -> '.join([*seen, target])})")
            if len(seen) > MAX_CHAIN:
                raise errors.SourceReplacementRefused(replace.file, key, "more than "
                                                      f"{MAX_CHAIN} replacements are chained")
            if target not in self.tables:
                raise errors.SourceReplacementRefused(replace.file, key, f"no [source.{target}] "
                                                      "table defines the source it names")
            seen.append(target)
            name = target
        if len(seen) == 1:
            self._refuse_git_crates_io(name)
            return source
        return self._registry_of(name)

    def _name_of(self, source: str) -> str | None:
        if source in CRATES_IO_SOURCES or source.rstrip("/") in (s.rstrip("/") for s in CRATES_IO_SOURCES):
            return CRATES_IO
        kind, _, url = source.partition("+")
        wanted = url if kind == "registry" else source
        for name, table in sorted(self.tables.items()):
            registry = table.get("registry")
            if registry is not None and registry.value == wanted and "replace-with" in table:
                return name
        return None

    def _registry_of(self, name: str) -> str:
        table = self.tables[name]
        for key in ("directory", "local-registry"):
            if key in table:
                raise errors.SourceReplacementRefused(
                    table[key].file, f"source.{name}.{key}", "it is a path on this host, "
                    "which fetch-deps does not read packages from (it downloads them, checked against the lockfile)")
        for key in ("git", "branch", "tag", "rev"):
            if key in table:
                raise errors.SourceReplacementRefused(
                    table[key].file, f"source.{name}.{key}", "a git source cannot replace a "
                    "registry fetch-deps downloads from")
        unknown = sorted(set(table) - set(_KNOWN_KEYS))
        if unknown:
            raise errors.SourceReplacementRefused(
                table[unknown[0]].file, f"source.{name}.{unknown[0]}", "it is not a key of a "
                "cargo [source] table")
        registry = table.get("registry")
        if registry is None:
            some = next(iter(table.values())).file if table else paths.cargo_home() / "config.toml"
            raise errors.SourceReplacementRefused(some, f"source.{name}", "the source it names "
                                                  "has no registry")
        url = registry.value
        key = f"source.{name}.registry"
        if not isinstance(url, str) or len(url) > MAX_URL_CHARS or not _SPARSE_URL.fullmatch(url):
            why = ("a git-protocol index is not read (fetch-deps reads a registry's sparse "
                   "index); use the mirror's sparse+https:// URL"
                   if isinstance(url, str) and not url.startswith("sparse+")
                   else "it is not a sparse+http(s):// URL")
            raise errors.SourceReplacementRefused(registry.file, key, why)
        if "@" in urlsplit(url.partition("+")[2]).netloc:
            raise errors.SourceReplacementRefused(registry.file, key, "it holds credentials "
                                                  "(user@host), which are never sent from a configuration URL")
        return url

    def _refuse_git_crates_io(self, name: str) -> None:
        if name == CRATES_IO and self.crates_io_protocol is not None \
                and self.crates_io_protocol.value == "git":
            raise errors.SourceReplacementRefused(
                self.crates_io_protocol.file, "registries.crates-io.protocol", "crates.io "
                "read over git is not followed (fetch-deps reads a registry's sparse index); "
                "remove the setting to use the default, sparse")


def fetch_directory() -> Path:
    """The directory at and above which `fetch-deps` looks for the host's cargo
    configuration, as cargo run there would: a place of the user's ($ROTEIRO_HOME), not
    the tree. Nothing runs in it or creates it."""
    return paths.roteiro_home() / "tmp"


def config_files(start: Path, cargo_home: Path) -> list[Path]:
    """The configuration files host cargo reads when run below `start`, lowest precedence
    first: `$CARGO_HOME/config.toml` unless an ancestor already holds it, then `/` down to
    `start` (cargo's order)."""
    found: list[Path] = []
    for directory in reversed((start, *start.parents)):
        chosen = _config_in(directory / ".cargo")
        if chosen is not None:
            found.append(chosen)
    home = _config_in(cargo_home)
    if home is not None and not any(_same(home, f) for f in found):
        found.insert(0, home)
    return found


def _config_in(directory: Path) -> Path | None:
    for name in ("config", "config.toml"):  # cargo prefers the old name when both exist
        if (directory / name).is_file():
            return directory / name
    return None


def _same(left: Path, right: Path) -> bool:
    try:
        return left.samefile(right)
    except OSError:
        return False


def host_sources(start: Path | None = None, cargo_home: Path | None = None) -> HostSources:
    """The `[source]` tables host cargo uses in `fetch-deps`, merged as cargo merges them."""
    start = fetch_directory() if start is None else start
    cargo_home = paths.cargo_home() if cargo_home is None else cargo_home
    merged = HostSources()
    for file in config_files(start, cargo_home):
        data = _read(file)
        source = data.get("source")
        if source is not None and not isinstance(source, dict):
            raise errors.SourceReplacementRefused(file, "source", "it is not a table")
        for name, table in (source or {}).items():
            if not isinstance(table, dict):
                raise errors.SourceReplacementRefused(file, f"source.{name}", "it is not a table")
            keys = merged.tables.setdefault(name, {})
            for key, value in table.items():
                keys[key] = Setting(value, file)
        registries = data.get("registries")
        crates_io = registries.get(CRATES_IO) if isinstance(registries, dict) else None
        if isinstance(crates_io, dict) and "protocol" in crates_io:
            merged.crates_io_protocol = Setting(crates_io["protocol"], file)
    protocol = os.environ.get("CARGO_REGISTRIES_CRATES_IO_PROTOCOL")
    if protocol is not None:  # the environment outranks every file
        merged.crates_io_protocol = Setting(protocol, Path("CARGO_REGISTRIES_CRATES_IO_PROTOCOL"))
    return merged


def _read(file: Path) -> dict[str, Any]:
    try:
        return parse_toml(read_bounded(file, CONFIG_MAX_BYTES, follow_links=True))
    except FileNotFoundError:
        return {}
    except FileRefused as refused:
        raise errors.SourceReplacementRefused(file, "(the file)", refused.reason) from None
