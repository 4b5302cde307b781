"""The linter image's Debian root, from the signed archive alone: no apt, no dpkg, no
maintainer script.

Guarantees:
- The packages are the dependency closure (Pre-Depends and Depends; the first alternative
  that can be satisfied, by a package of that name or one that Provides it; version
  constraints checked) of a fixed seed (`SEED`, and `GCC_SEED` unless left out), read from
  the indexes `debian_archive` verified against the pinned keys; a name in both the main
  and the security archive is taken at its highest version from the archive that lists it.
  A dependency nothing satisfies is refused naming the package and the relation; the
  closure is bounded (`MAX_PACKAGES`).
- Every .deb is kept only if its size and SHA-256 are the index's (`debian_archive.download`);
  a cache of them under $ROTEIRO_HOME/cache/debs is named by that SHA-256 and read again
  only after its digest is checked again.
- The root is the packages' data.tar members merged in name order of the packages (a path
  shipped twice is the later package's): directories, regular files and symbolic links,
  hard links copied, devices and FIFOs dropped, set-id bits cleared, total bytes bounded
  (`MAX_ROOT_BYTES`). /usr is merged as Debian 12 installs it (bin, sbin, lib, lib64 are
  links into usr/), and what maintainer scripts would have made is made here: /usr/bin/cc
  (update-alternatives) and /usr/bin/sh (dash's postinst).

Why these packages: the guest runs `/bin/sh -c` around every step (clippy/command.py) and
the dependency cache's cleanup with `rm` and `sync`; the toolchain's binaries need only
glibc, libgcc_s and zlib; `cargo clippy` links build
scripts and proc macros with `cc`, and a crate with either fails without gcc and libc6-dev.
No CA certificates: the guest has no network.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from roteiro_py.image.layers import Entry, Tree
from roteiro_py.vm.assets import debian_archive, debpkg
from roteiro_py.vm.assets.assets import sha256_file
from roteiro_py.vm.assets.debian_archive import ArchiveError, Package

#: What every image has: a shell for the guest's `/bin/sh -c` steps, the libraries the
#: Rust toolchain's binaries load, coreutils for the steps' own commands (the dependency
#: cache's cleanup runs `rm` and `sync`: lint/dep_cache.py BUILD_CLEANUP), and the rest of
#: the POSIX userland Debian's Essential set gives and build scripts take for granted
#: (an image without coreutils failed that cleanup: "sh: 1: rm: not found").
SEED = ("coreutils", "dash", "diffutils", "findutils", "grep", "gzip", "libc6", "libgcc-s1", "sed", "zlib1g")
#: A C toolchain for build scripts and proc macros (rustc links through `cc`).
GCC_SEED = ("gcc", "libc6-dev")
#: The closure of SEED + GCC_SEED in bookworm is ~70 packages.
MAX_PACKAGES = 300
#: The root's files together (bookworm's closure: ~230 MB unpacked).
MAX_ROOT_BYTES = 2 << 30
#: Merged /usr: the top-level directories that are links into usr/.
MERGED = ("bin", "sbin", "lib", "lib64")
#: Links a maintainer script would make, and what they point at (if the root lacks them).
MADE_LINKS = {"usr/bin/cc": "gcc", "usr/bin/sh": "dash"}

_RELATION = re.compile(
    r"\s*([a-z0-9][a-z0-9+.-]*)(?::[a-z0-9-]+)?\s*(?:\(\s*(<<|<=|=|>=|>>|<|>)\s*([^)\s]+)\s*\))?"
    r"\s*(?:\[[^\]]*\])?\s*(?:<[^>]*>\s*)*")


class Unresolvable(ArchiveError):
    """A seed or dependency nothing in the archive satisfies, or a closure past its bound."""

    def __init__(self, message: str) -> None:
        super().__init__(message, refused=True)


@dataclass(frozen=True)
class Relation:
    name: str
    op: str = ""
    version: str = ""

    def __str__(self) -> str:
        return f"{self.name} ({self.op} {self.version})" if self.op else self.name


@dataclass(frozen=True)
class Located:
    """A package and the archive whose verified index listed it."""

    archive: str
    package: Package


def parse_relations(text: str) -> list[list[Relation]]:
    """A Depends-style field: AND of OR-groups of relations (arch qualifiers and
    restrictions dropped: the image is amd64 and nothing is built)."""
    groups: list[list[Relation]] = []
    for group in text.replace("\n", " ").split(","):
        if not group.strip():
            continue
        alternatives = []
        for alternative in group.split("|"):
            match = _RELATION.fullmatch(alternative)
            if match is None:
                raise Unresolvable(f"a relation this reader cannot parse: {alternative.strip()[:120]!r}")
            op = {"<": "<=", ">": ">="}.get(match.group(2) or "", match.group(2) or "")
            alternatives.append(Relation(match.group(1), op, match.group(3) or ""))
        groups.append(alternatives)
    return groups


def satisfies(version: str, relation: Relation) -> bool:
    if not relation.op:
        return True
    order = debian_archive.compare_versions(version, relation.version)
    return {"<<": order < 0, "<=": order <= 0, "=": order == 0, ">=": order >= 0, ">>": order > 0}[relation.op]


def _providers(index: dict[str, Located]) -> dict[str, list[tuple[str, str]]]:
    """Virtual name -> [(providing package, provided version or "")], by provider name."""
    out: dict[str, list[tuple[str, str]]] = {}
    for name in sorted(index):
        for group in parse_relations(index[name].package.provides):
            for provided in group:
                out.setdefault(provided.name, []).append((name, provided.version if provided.op == "=" else ""))
    return out


def resolve(index: dict[str, Located], seeds: Sequence[str], max_packages: int = MAX_PACKAGES) -> list[Located]:
    """The closure of `seeds` in `index`, sorted by name."""
    providers = _providers(index)
    chosen: dict[str, Located] = {}

    def candidates(relation: Relation) -> list[str]:
        found = []
        real = index.get(relation.name)
        if real is not None and satisfies(real.package.version, relation):
            found.append(relation.name)
        for provider, version in providers.get(relation.name, []):
            if not relation.op or (version and satisfies(version, relation)):
                found.append(provider)
        return found

    queue: list[tuple[str, str]] = [(seed, "the image's seed") for seed in seeds]
    while queue:
        name, why = queue.pop(0)
        if name in chosen:
            continue
        if name not in index:
            raise Unresolvable(f"{name} ({why}) is in neither archive's index")
        if len(chosen) >= max_packages:
            raise Unresolvable(f"the dependency closure is larger than {max_packages} packages "
                               "(image/debian_root.py MAX_PACKAGES)")
        located = chosen[name] = index[name]
        package = located.package
        for group in parse_relations(package.pre_depends) + parse_relations(package.depends):
            options = [(relation, candidates(relation)) for relation in group]
            pending = {queued for queued, _ in queue}
            if any(found in chosen or found in pending for _, names in options for found in names):
                continue
            usable = [names[0] for _, names in options if names]
            if not usable:
                relation_text = " | ".join(str(relation) for relation in group)
                raise Unresolvable(f"{package.name} {package.version} depends on {relation_text}, which "
                                   "no package in the archive satisfies")
            queue.append((usable[0], f"a dependency of {package.name}"))
    return [chosen[name] for name in sorted(chosen)]


def _light(text: bytes) -> dict[str, Package]:
    """Name, version and relations of every stanza of a verified index, each name at its
    highest version. Only what resolving needs: the index lists packages no image wants and
    this reader need not vouch for (bookworm's 0ad-data is larger than MAX_DEB_BYTES);
    `verified` reads the chosen ones again with every check of `parse_packages`."""
    out: dict[str, Package] = {}
    for raw in re.split(rb"\n\n+", text):
        if not raw.strip():
            continue
        if len(raw) > debian_archive.MAX_STANZA_BYTES:
            raise ArchiveError(f"a stanza of the package index is larger than {debian_archive.MAX_STANZA_BYTES} "
                               "bytes", refused=True)
        fields = debian_archive.stanza_fields(raw.decode("utf-8", "replace").strip("\n"))
        name, version = fields.get("Package", ""), fields.get("Version", "")
        old = out.get(name)
        if old is None or debian_archive.compare_versions(version, old.version) > 0:
            out[name] = Package(name, version, "", "", 0, fields.get("Depends", ""),
                                fields.get("Pre-Depends", ""), fields.get("Provides", ""))
    return out


def merged_index(indexes: Sequence[tuple[str, bytes]]) -> dict[str, Located]:
    """Every package of the verified (archive, index text) pairs, each name at its highest
    version, located in the archive that lists it so."""
    out: dict[str, Located] = {}
    for archive, text in indexes:
        for name, package in _light(text).items():
            old = out.get(name)
            if old is None or debian_archive.compare_versions(package.version, old.package.version) > 0:
                out[name] = Located(archive, package)
    return out


def verified(chosen: Sequence[Located], indexes: Sequence[tuple[str, bytes]]) -> list[Located]:
    """`chosen` read again from their indexes by `parse_packages`: Filename, Size and SHA256
    checked, and the version the one resolved."""
    out = []
    for archive, text in indexes:
        wanted = {located.package.name: located for located in chosen if located.archive == archive}
        for name, package in debian_archive.parse_packages(text, wanted.__contains__).items():
            if package.version != wanted[name].package.version:
                raise ArchiveError(f"{name}: the index lists {package.version[:80]}, not the version "
                                   "resolved", refused=True)
            out.append(Located(archive, package))
    if len(out) != len(chosen):
        raise ArchiveError("a resolved package is missing from its index on a second reading", refused=True)
    return sorted(out, key=lambda located: located.package.name)


def fetch_debs(packages: Sequence[Located], cache: Path,
               progress: Callable[[str], None] | None = None) -> list[Path]:
    """Each package's verified .deb, from `cache` (by SHA-256, checked again) or downloaded."""
    cache.mkdir(parents=True, exist_ok=True)
    out = []
    for located in packages:
        package = located.package
        path = cache / f"{package.sha256}.deb"
        if path.is_file() and not path.is_symlink() and path.stat().st_size == package.size \
                and sha256_file(path) == package.sha256:
            out.append(path)
            continue
        if progress is not None:
            progress(f"downloading {package.name} {package.version} ({package.size} bytes)")
        temp = cache / f".{package.sha256}.{os.getpid()}.tmp"
        debian_archive.download(located.archive, package, temp)
        os.replace(temp, path)
        out.append(path)
    return out


def _placed(path: str) -> str:
    """A package's path in the merged-/usr root."""
    top, _, rest = path.partition("/")
    if top in MERGED:
        return f"usr/{top}" + (f"/{rest}" if rest else "")
    return path


def unpack(debs: Sequence[tuple[str, Path]], contents: Path, max_bytes: int = MAX_ROOT_BYTES) -> Tree:
    """The merged root of (package name, .deb) in the given order; files' bytes go to
    `contents` (a directory the caller removes), one file per distinct SHA-256."""
    tree = Tree()
    for top in MERGED:
        tree.add(top, Entry("symlink", 0o777, linkname=f"usr/{top}"))
        tree.add(f"usr/{top}", Entry("dir", 0o755))
    total = 0
    for package, deb in debs:
        shipped: dict[str, Entry] = {}
        try:
            for member, path, stream in debpkg.data_members(deb):
                if not path or member.ischr() or member.isblk() or member.isfifo():
                    continue
                name = _placed(path)
                if member.isdir():
                    entry = Entry("dir", member.mode & 0o1777, member.uid, member.gid)
                elif member.issym():
                    entry = Entry("symlink", 0o777, member.uid, member.gid, linkname=member.linkname)
                elif member.islnk():
                    target = shipped.get(_placed(member.linkname.removeprefix("./").rstrip("/")))
                    if target is None or target.kind != "file":
                        raise debpkg.DebError(f"the hard link {path[:200]!r} names no earlier file")
                    entry = Entry("file", member.mode & 0o777, member.uid, member.gid, source=target.source,
                                  size=target.size)
                elif member.isreg() and stream is not None:
                    total += member.size
                    if total > max_bytes:
                        raise debpkg.DebError(f"the root is larger than {max_bytes} bytes "
                                              "(image/debian_root.py MAX_ROOT_BYTES)")
                    entry = Entry("file", member.mode & 0o777, member.uid, member.gid,
                                  source=_keep(stream, contents, member.size), size=member.size)
                else:
                    raise debpkg.DebError(f"member {path[:200]!r} is of a type a root does not hold")
                if name in MERGED or (name.startswith("usr/") and name[4:] in MERGED and entry.kind != "dir"):
                    raise debpkg.DebError(f"member {path[:200]!r} would replace the merged /usr layout")
                shipped[name] = entry
                tree.add(name, entry)
        except debpkg.DebError as exc:
            raise ArchiveError(f"{package}: {exc}", refused=True) from exc
    for link, points_at in MADE_LINKS.items():
        if link not in tree.entries and f"usr/bin/{points_at}" in tree.entries:
            tree.add(link, Entry("symlink", 0o777, linkname=points_at))
    return tree


def _keep(stream: IO[bytes], contents: Path, size: int) -> Path:
    """`size` bytes of `stream` in `contents`, named by their SHA-256 (one copy per content)."""
    temp = contents / f".member-{os.getpid()}.tmp"
    digest = hashlib.sha256()
    with temp.open("wb") as handle:
        left = size
        while left > 0:
            chunk = stream.read(min(left, 1 << 20))
            if not chunk:
                raise debpkg.DebError("a member is shorter than its header says")
            digest.update(chunk)
            handle.write(chunk)
            left -= len(chunk)
    target = contents / digest.hexdigest()
    if target.exists():
        temp.unlink()
    else:
        os.replace(temp, target)
    return target
