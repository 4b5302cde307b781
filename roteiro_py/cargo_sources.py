"""The host's cargo source replacement (`[source]` tables), given to the guest as it is.

Why: a host whose cargo configuration replaces crates.io (`[source.crates-io]
replace-with = "mirror"`, `[source.mirror] registry = "sparse+https://mirror/"`) makes
`fetch-deps` (host cargo) fill `registry/{index,cache,src}/<mirror host>-<hash>/`, while
the guest's cargo, which never sees the host's configuration, looks in
`index.crates.io-<hash>/`: every lint was "cold cache", and `fetch-deps` could not help.

What is guaranteed:
- The configuration read is the one host cargo reads for `fetch-deps` (deps.py runs it in
  a clean copy under $ROTEIRO_HOME/tmp): `.cargo/config.toml` (or `.cargo/config`, which
  cargo prefers when both exist) in that directory's ancestors, deepest first, then
  `$CARGO_HOME/config.toml`; tables merge key by key, the deeper file winning. Each file
  is read bounded (CONFIG_MAX_BYTES); the user's own files may be links (dotfile managers).
- Only what the lockfile needs is followed: a pinned package's source (crates.io, or a
  registry whose `[source.<name>] registry` is that URL) through its `replace-with`
  chain (at most MAX_CHAIN links) to a table naming a sparse registry
  (`registry = "sparse+http(s)://..."`). The cache directories of that registry are where
  the view looks (cargo_view.py), and the guest is given the chain's ends on the command
  line: `--config source.<origin>.replace-with="<end>"` (and the origin's `registry`
  when it is not crates.io) and `--config source.<end>.registry="sparse+..."`, nothing
  else (no credentials, no other key), each padded past PATH_MAX so that cargo never
  reads a tree file of that name in its place. `--config` outranks the tree's own
  `.cargo/config.toml`: the view holds the
  packages where the host's replacement put them, and `fetch-deps` never read the tree's
  configuration either.
- A replacement the guest cannot follow is refused once, before boot, naming the file and
  the key (errors.SourceReplacementRefused): a `directory` or `local-registry` source (a
  host path the guest would need mounted), a git-protocol index (the view carries sparse
  index caches only), a `git` source, a name that is not a bare TOML key (checked only
  for the tables a pinned package goes through), a chain that loops.
  crates.io itself read over git (`registries.crates-io.protocol = "git"`, or
  CARGO_REGISTRIES_CRATES_IO_PROTOCOL) is refused for the same reason as a git index.
"""

from __future__ import annotations

import os
import re
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from roteiro_py import errors, paths
from roteiro_py.untrusted import FileRefused, read_bounded

#: The largest host cargo configuration file read (real ones are a few KiB).
CONFIG_MAX_BYTES = 1024 * 1024
#: The most `replace-with` links followed from one source (cargo's real chains have one).
MAX_CHAIN = 8
#: The longest registry URL given to the guest.
MAX_URL_CHARS = 2048
#: The built-in source name of crates.io, and its URLs as a lockfile writes them.
CRATES_IO = "crates-io"
CRATES_IO_SOURCES = ("registry+https://github.com/rust-lang/crates.io-index",
                     "sparse+https://index.crates.io/")
#: The keys of a `[source.<name>]` table that are understood; of these only `replace-with`
#: and a sparse `registry` are ever given to the guest.
_KNOWN_KEYS = ("replace-with", "registry", "local-registry", "directory", "git", "branch",
               "tag", "rev")
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
#: A sparse registry URL that is safe inside a TOML basic string on a command line.
_SPARSE_URL = re.compile(r"sparse\+https?://[!#-\[\]-~]+")
#: The URL of a replaced registry other than crates.io, under the same rule.
_ORIGIN_URL = re.compile(r"(sparse\+)?https?://[!#-\[\]-~]+")
#: Linux's PATH_MAX: a longer name is ENAMETOOLONG on every filesystem (see guest_args).
PATH_MAX = 4096


@dataclass(frozen=True)
class Setting:
    """One key of a `[source.<name>]` table and the file it came from."""

    value: object
    file: Path


@dataclass
class HostSources:
    """The host's `[source]` tables as cargo merges them, and what the guest is given."""

    tables: dict[str, dict[str, Setting]] = field(default_factory=dict)
    #: Where crates.io's protocol was chosen ("git" is refused when crates.io is used).
    crates_io_protocol: Setting | None = None
    #: The guest's `--config` arguments, in the order the chains were followed.
    _given: dict[str, str] = field(default_factory=dict)

    def cache_source(self, source: str) -> str:
        """The source whose cache directories hold a package pinned from `source` (a
        lockfile `source` string): `source` itself, or the sparse registry its
        replacement chain ends at. Records the chain for `guest_args`; refuses a chain
        the guest cannot follow (errors.SourceReplacementRefused)."""
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
            # Checked here, where a name is about to be given to the guest as a bare TOML
            # key, not for every table of the host's files (cargo accepts any name, and a
            # table the lockfile never reaches refused every lint).
            if not _NAME.fullmatch(name):
                raise errors.SourceReplacementRefused(replace.file, key, "its source name is not "
                                                      f"one the guest can be given ({_NAME.pattern})")
            if not isinstance(target, str) or not _NAME.fullmatch(target):
                raise errors.SourceReplacementRefused(replace.file, key, "its value is not a "
                                                      f"source name the guest can be given ({_NAME.pattern})")
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
        url = self._registry_of(name)
        # The guest is given the chain's two ends only: cargo wants a location in every
        # [source] table it reads, and an intermediate one given only its replace-with
        # was "no source location specified" after boot. Its packages are the end's.
        origin = seen[0]
        if origin != CRATES_IO:  # cargo knows crates.io's location; another origin's is its registry
            self._given[f"source.{origin}.registry"] = self._origin_url(origin)
        self._given[f"source.{origin}.replace-with"] = name
        return url

    def guest_args(self) -> list[str]:
        """`--config` arguments giving the guest the chains `cache_source` followed.

        cargo reads `--config X` as a configuration FILE when a path X exists relative to
        its working directory, which in the guest is the tree: a tree holding a file named
        like an argument put its own tables (or anything else) in place of the host's, at
        --config rank. Each argument is padded with TOML whitespace (which cargo accepts
        after the value) to PATH_MAX characters, so no path by that name can exist
        (ENAMETOOLONG) and cargo always parses it as `key="value"`."""
        args: list[str] = []
        for key, value in sorted(self._given.items()):
            args += ["--config", f'{key}="{value}"'.ljust(PATH_MAX)]
        return args

    def key(self) -> str:
        """What a cargo view built through these replacements depends on ("" for none)."""
        return repr(sorted(self._given.items())) if self._given else ""

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
                    "which the guest does not see (it sees only the packages the lockfile pins)")
        for key in ("git", "branch", "tag", "rev"):
            if key in table:
                raise errors.SourceReplacementRefused(
                    table[key].file, f"source.{name}.{key}", "a git source cannot replace a "
                    "registry the guest reads offline")
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
            why = ("a git-protocol index is not given to the guest (its view carries sparse "
                   "index caches only); use the mirror's sparse+https:// URL"
                   if isinstance(url, str) and not url.startswith("sparse+")
                   else "it is not a sparse+http(s):// URL")
            raise errors.SourceReplacementRefused(registry.file, key, why)
        if "@" in urlsplit(url.partition("+")[2]).netloc:
            raise errors.SourceReplacementRefused(registry.file, key, "it holds credentials "
                                                  "(user@host), which are never given to the guest")
        self._given[key] = url
        return url

    def _origin_url(self, name: str) -> str:
        """The `registry` of a replaced source other than crates.io (the lockfile's URL,
        which `_name_of` matched), checked as safe inside a TOML string."""
        registry = self.tables[name]["registry"]
        url = registry.value
        if not (isinstance(url, str) and len(url) <= MAX_URL_CHARS and _ORIGIN_URL.fullmatch(url)):
            raise errors.SourceReplacementRefused(registry.file, f"source.{name}.registry",
                                                  "it is not an http(s):// or sparse+http(s):// URL")
        if "@" in urlsplit(url.removeprefix("sparse+")).netloc:
            raise errors.SourceReplacementRefused(registry.file, f"source.{name}.registry", "it holds "
                                                  "credentials (user@host), which are never given "
                                                  "to the guest")
        return url

    def _refuse_git_crates_io(self, name: str) -> None:
        if name == CRATES_IO and self.crates_io_protocol is not None \
                and self.crates_io_protocol.value == "git":
            raise errors.SourceReplacementRefused(
                self.crates_io_protocol.file, "registries.crates-io.protocol", "crates.io "
                "read over git is not given to the guest (its view carries sparse index "
                "caches only); remove the setting to use the default, sparse")


def fetch_directory() -> Path:
    """The directory at and above which host cargo looks for configuration in `fetch-deps`
    (deps.py makes its clean copy below it and creates nothing else on the way)."""
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
        data = read_bounded(file, CONFIG_MAX_BYTES, follow_links=True)
    except FileNotFoundError:
        return {}
    except FileRefused as refused:
        raise errors.SourceReplacementRefused(file, "(the file)", refused.reason) from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        why = "it is not UTF-8"
    except tomllib.TOMLDecodeError as error:
        why = f"it is not valid TOML ({error})"
    except (RecursionError, ValueError):
        why = "its TOML is nested too deeply or holds a number too long to read"
    raise errors.SourceReplacementRefused(file, "(the file)", why)
