"""The packages a Cargo.lock pins, checked before anything is fetched or given to the guest.

The lockfile is the only thing the host reads to decide what to fetch (no manifest, no
cargo configuration of the tree: issue 20). Each package with a `source` is a pin:

- `registry+<url>` / `sparse+<url>`: a registry package. The URL must be `https://`
  (`registry+https://github.com/rust-lang/crates.io-index` is crates.io, read through its
  sparse index), and the package must carry its sha256 `checksum`: a version-1 lockfile
  keeps checksums in `[metadata]`, which is not read, so such a package is refused by name.
- `git+https://<host>/<path>[?branch=|tag=|rev=<ref>]#<commit>`: a git package, only over
  https and only with a full commit id after `#` (what cargo writes).

Anything else (`file://`, `ssh://`, `git://`, `http://`, a URL that does not parse, a name
that is not a cargo package name) is errors.PackageRefused naming the package, before any
network is touched. Names, versions and references become host path components and guest
`--config` values, so each is checked against a strict pattern here, once.
A package without a `source` is the tree's own (a member or a path dependency).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal
from urllib.parse import parse_qsl, urlsplit

from roteiro_py import errors
from roteiro_py.cargo.workspace import read_lockfile

#: crates.io as a lockfile names it (the git index URL, kept in lockfiles for
#: compatibility), and the sparse index cargo reads it through.
CRATES_IO_SOURCE = "registry+https://github.com/rust-lang/crates.io-index"
CRATES_IO_SPARSE = "https://index.crates.io/"
#: The most packages one lockfile may pin (the largest real lockfiles hold ~1,500).
MAX_PINS = 20_000
#: The longest URL of a source (cargo's own are under 200 characters).
MAX_URL_CHARS = 2048

_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")
_VERSION = re.compile(r"[0-9A-Za-z.+-]{1,128}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
_CHECKSUM = re.compile(r"[0-9a-f]{64}")
#: What a URL and a git reference may hold: printable ASCII without space, quote,
#: backslash or `#`-free where it matters; safe inside a TOML basic string on a command line.
_URL = re.compile(r"https://[!$-\[\]-~]+")
_REF = re.compile(r"[!#-\[\]-~]{1,256}")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")


@dataclass(frozen=True)
class Pin:
    """One package the lockfile pins from a registry or git, checked."""

    name: str
    version: str
    kind: Literal["registry", "git"]
    #: The lockfile's `source`, verbatim (what cargo matches a replacement against).
    source: str
    #: registry: the index URL (`https://...`, sparse; crates.io's sparse index for
    #: crates.io); git: the repository URL, without the query and the commit.
    url: str
    #: registry: the `.crate`'s sha256 (hex).
    checksum: str | None = None
    #: git: the full commit id.
    rev: str | None = None
    #: git: ("branch" | "tag" | "rev", value) from the URL's query; None for the default branch.
    reference: tuple[str, str] | None = None

    def label(self) -> str:
        return f"{self.name} {self.version}"

    def described(self) -> str:
        """The pin as a refusal names it: `itoa 1.0.15`, `dep 0.1.0 (git <commit 12>)`."""
        if self.kind == "git":
            return f"{self.label()} (git {(self.rev or '')[:12]})"
        return self.label()


@dataclass(frozen=True)
class Lockfile:
    path: Path
    pins: tuple[Pin, ...]
    #: The packages without a source (the tree's own), sorted, each once.
    path_packages: tuple[str, ...]


def read_pins(lockfile: Path) -> Lockfile:
    """The pins of the tree's `lockfile`, or a refusal (TreeFileRefused, PackageRefused)."""
    return pins_of(lockfile, read_lockfile(lockfile))


def pins_of(lockfile: Path, data: dict[str, Any]) -> Lockfile:
    """`read_pins` of an already parsed lockfile; `lockfile` names it in a refusal."""
    packages = data.get("package", [])
    if not isinstance(packages, list):
        raise errors.TreeFileRefused(lockfile, "its `package` entries are not an array of tables")
    if len(packages) > MAX_PINS:
        raise errors.TreeFileRefused(lockfile, f"it holds more than {MAX_PINS} packages")
    pinned: dict[Pin, None] = {}  # in order, each distinct pin once
    own: set[str] = set()
    for package in packages:
        if not isinstance(package, dict):
            raise errors.TreeFileRefused(lockfile, "a `package` entry is not a table")
        name, version = package.get("name"), package.get("version")
        if not (isinstance(name, str) and _NAME.fullmatch(name)):
            raise errors.TreeFileRefused(lockfile, f"{_short(name)} is not a cargo package name")
        if not (isinstance(version, str) and _VERSION.fullmatch(version)):
            raise errors.TreeFileRefused(lockfile, f"the version {_short(version)} of {name} is "
                                         "not a cargo package version")
        if "source" not in package:
            own.add(name)
            continue
        pinned.setdefault(pin_of(lockfile, name, version, package.get("source"),
                                 package.get("checksum")))
    return Lockfile(lockfile, tuple(pinned), tuple(sorted(own)))


def pin_of(lockfile: Path, name: str, version: str, source: object, checksum: object) -> Pin:
    """One package's pin, or errors.PackageRefused naming it and why."""
    label = f"{name} {version}"

    def refuse(why: str) -> errors.PackageRefused:
        return errors.PackageRefused(lockfile, label, why)

    if not isinstance(source, str) or len(source) > MAX_URL_CHARS:
        raise refuse("its source is not a string of at most "
                     f"{MAX_URL_CHARS} characters")
    kind, plus, rest = source.partition("+")
    if not plus or kind not in ("registry", "sparse", "git"):
        raise refuse(f"its source {_short(source)} is none that cargo writes "
                     "(registry+, sparse+, git+<url>#<commit>)")
    if kind == "git":
        url, hashmark, commit = rest.rpartition("#")
        if not hashmark or not _COMMIT.fullmatch(commit):
            raise refuse(f"its git source {_short(source)} does not pin a full commit id")
        base, _, query = url.partition("?")
        _checked_url(base, source, refuse)
        return Pin(name, version, "git", source, base, rev=commit,
                   reference=_reference(query, source, refuse))
    if not (isinstance(checksum, str) and _CHECKSUM.fullmatch(checksum)):
        raise refuse("it has no sha256 checksum in the lockfile (a version-1 lockfile keeps "
                     "them in [metadata], which is not read: `cargo update --workspace` in the "
                     "guest's toolchain writes a current one)" if checksum is None
                     else "its checksum is not sha256 hex")
    url = CRATES_IO_SPARSE if source == CRATES_IO_SOURCE else rest
    _checked_url(url, source, refuse)
    if "?" in url or "#" in url:
        raise refuse(f"its registry URL {_short(url)} has a query or a fragment")
    return Pin(name, version, "registry", source, url, checksum=checksum)


def _checked_url(url: str, source: str, refuse: Any) -> None:
    """An https URL whose host parses and holds no credentials, else the pin's refusal."""
    if not _URL.fullmatch(url):
        raise refuse(f"its source {_short(source)} is not https (only https sources are "
                     "fetched: file://, ssh:// and git:// reach what this host can reach)")
    try:
        parts = urlsplit(url)
        port = parts.port  # a port that is not a number raises here
    except ValueError:
        raise refuse(f"its source URL {_short(url)} does not parse") from None
    if "@" in parts.netloc:
        raise refuse(f"its source URL {_short(url)} names a user (credentials are never "
                     "taken from a lockfile)")
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    if not host or not _HOST.fullmatch(host):
        raise refuse(f"its source URL {_short(url)} has no valid host")


def _reference(query: str, source: str, refuse: Any) -> tuple[str, str] | None:
    """The git reference a source's query names (`branch=`, `tag=`, `rev=`), decoded."""
    if not query:
        return None
    pairs = parse_qsl(query, keep_blank_values=True)
    if len(pairs) != 1 or pairs[0][0] not in ("branch", "tag", "rev"):
        raise refuse(f"its git source {_short(source)} has a query other than one of "
                     "branch=, tag=, rev=")
    kind, value = pairs[0]
    if not _REF.fullmatch(value):
        raise refuse(f"its git {kind} {_short(value)} holds characters a git reference "
                     "does not (space, quote, backslash, control)")
    return kind, value


def _short(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 120 else text[:117] + "..."


def path_packages_in(lockfile: Path, data: dict[str, Any]) -> list[str]:
    """The names of the packages an already parsed lockfile holds without a `source`
    (workspace members, path and path-[patch] dependencies), sorted, each once; a name is
    checked as a pin's is (it becomes part of a path in the guest), else
    errors.TreeFileRefused. The dependency cache (depcache/skeleton.py) builds these from
    stubs and must know them to drop their build state; it reads no pin."""
    names: set[str] = set()
    packages = data.get("package")
    for package in packages if isinstance(packages, list) else []:
        if not isinstance(package, dict) or "source" in package:
            continue
        name = package.get("name")
        if not isinstance(name, str) or not _NAME.fullmatch(name):
            raise errors.TreeFileRefused(lockfile, f"{_short(name)} (a package without a source) "
                                         "is not a cargo package name")
        names.add(name)
    return sorted(names)
