"""Grants: what a command may touch, as atoms that can be compared without guessing.

A grant atom is `domain:action:resource` (`fs:read:/src/repo/**`, `net:egress:host:443`,
`proc:exec:cargo`, `secret:use:NAME`, `env:read:NAME`). A sandbox is handed a `GrantSet`
and must either confine the command to it or refuse before anything runs; the question
it asks is "is this grant within that ceiling?", and the answer is three-valued:

* YES: provably within.
* NO: provably not within.
* UNKNOWN: this code cannot decide (a domain it does not know, a bare program name
  against a path). Callers treat UNKNOWN exactly like NO (`Containment.allows`): a grant
  nobody can reason about is a grant nobody can enforce.

What parsing guarantees, so that containment is decidable and cannot be fooled:

* Malformed atoms are refused with `MalformedGrant` (a `ValueError`) naming what is
  wrong; a typo such as `fs:raed:/src` is an error, not an unknown atom that silently
  fails every check. Domains this code does not know parse (a newer vocabulary may use
  them) and are answered UNKNOWN.
* Paths are compared segment by segment: `/src/repository` is not inside `/src/repo/**`,
  which a string prefix test would say it is.
* A `..` segment is refused, not normalised. Lexical normalisation is wrong in the
  presence of symlinks (`/src/repo/link/..` is wherever `link` points, plus `..`), and
  keeping `..` would let `/src/repo/../../etc/**` read as "under /src/repo".
* Windows paths (`C:\\src\\repo\\**`) are rewritten with forward slashes and an upper-case
  drive letter, so one grant gives one answer on every host.
* `**` is only allowed as the last segment and means the directory and everything under
  it; any other `*` is refused. An exact path matches only itself.
* `proc:exec:*` is any program. It is how a ceiling says "everything the command runs
  is confined" (a VM backend: vm/qemu/backend.py `ceiling`); as a grant it is within
  only such a ceiling, never within one that names programs.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path, PurePath

#: Each known domain and the actions it has; an action outside this set is a typo.
KNOWN_ACTIONS: dict[str, frozenset[str]] = {
    "fs": frozenset({"read", "write", "list"}),  # files under a path
    "net": frozenset({"egress"}),  # outbound connections to host:port
    "proc": frozenset({"exec"}),  # running a program, by name or absolute path
    "secret": frozenset({"use"}),  # a named secret handed to the command
    "env": frozenset({"read"}),  # an ambient environment variable passed through
}

_WORD = re.compile(r"[a-z][a-z0-9_-]*\Z")
_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_DRIVE = re.compile(r"([A-Za-z]):[\\/]")
_HOST = re.compile(r"(\*|\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?)\Z")
_PROGRAM = re.compile(r"[^\s/\\]+\Z")
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


class MalformedGrant(ValueError):
    """A grant atom that cannot be parsed; the message names the atom and what is wrong."""

    def __init__(self, text: str, what: str) -> None:
        super().__init__(f"malformed grant atom {text!r}: {what}")
        self.text = text
        self.what = what


class Containment(enum.Enum):
    YES = "yes"
    NO = "no"
    UNKNOWN = "unknown"

    @property
    def allows(self) -> bool:
        """Whether a caller may go ahead: only on YES. UNKNOWN is a refusal.

        Without this one place, each caller would write its own `!= NO`, and a grant
        this code cannot reason about would be let through by the first one that did.
        """
        return self is Containment.YES


def _normalise_path(text: str, resource: str) -> tuple[str, tuple[str, ...], bool]:
    """Return (root, segments, recursive) for a path resource, or raise MalformedGrant.

    The root is "/" for POSIX paths and "C:/" for Windows ones, so paths on different
    roots never compare as nested.
    """
    drive = _DRIVE.match(resource)
    if drive:
        root = drive.group(1).upper() + ":/"
        rest = resource[drive.end():].replace("\\", "/")
    elif resource.startswith("\\\\") or resource.startswith("//"):
        raise MalformedGrant(text, "network (UNC) and `//` paths are not supported")
    elif resource.startswith("/"):
        root = "/"
        rest = resource[1:]
    else:
        raise MalformedGrant(text, f"the path {resource!r} is not absolute")
    if "\\" in rest:
        raise MalformedGrant(text, "a POSIX path may not contain a backslash")
    segments = [segment for segment in rest.split("/") if segment not in ("", ".")]
    recursive = bool(segments) and segments[-1] == "**"
    if recursive:
        segments.pop()
    for segment in segments:
        if segment == "..":
            raise MalformedGrant(text, "`..` segments are refused (they could escape the path)")
        if "*" in segment:
            raise MalformedGrant(text, "`**` is only allowed as the last segment")
    return root, tuple(segments), recursive


@dataclass(frozen=True)
class GrantAtom:
    """One permission, `domain:action:resource`, with its resource in normal form."""

    domain: str
    action: str
    resource: str

    @classmethod
    def parse(cls, text: str) -> GrantAtom:
        """Parse an atom, refusing anything that could not be compared reliably."""
        if _CONTROL.search(text):
            raise MalformedGrant(text, "it contains a control character")
        parts = text.split(":", 2)
        if len(parts) != 3:
            raise MalformedGrant(text, "expected domain:action:resource")
        domain, action, resource = parts
        for name, value in (("domain", domain), ("action", action)):
            if not _WORD.match(value):
                raise MalformedGrant(text, f"the {name} {value!r} is not a lower-case word")
        if not resource or resource != resource.strip():
            raise MalformedGrant(text, "the resource is empty or has surrounding spaces")
        actions = KNOWN_ACTIONS.get(domain)
        if actions is None:
            return cls(domain, action, resource)
        if action not in actions:
            known = ", ".join(sorted(actions))
            raise MalformedGrant(text, f"the domain {domain!r} has no action {action!r} "
                                       f"(it has {known})")
        return cls(domain, action, _normal_resource(text, domain, resource))

    @property
    def known(self) -> bool:
        return self.domain in KNOWN_ACTIONS

    def within(self, ceiling: GrantAtom) -> Containment:
        """Whether everything this atom permits is permitted by `ceiling`."""
        if self.domain != ceiling.domain:
            return Containment.NO  # domains are disjoint namespaces, known or not
        if not self.known:
            return Containment.UNKNOWN  # a newer vocabulary's domain: nothing to compare by
        if self.action != ceiling.action:
            return Containment.NO
        if self.domain == "fs":
            return _path_within(self.resource, ceiling.resource)
        if self.domain == "net":
            return _endpoint_within(self.resource, ceiling.resource)
        if self.domain == "proc" and ceiling.resource == "*":
            return Containment.YES
        if self.domain == "proc" and self.resource != ceiling.resource:
            # A bare name is found through PATH, so whether `/usr/bin/cargo` is the
            # `cargo` that was granted depends on the machine that runs it.
            mine, theirs = self.resource, ceiling.resource
            if mine.rsplit("/", 1)[-1] == theirs.rsplit("/", 1)[-1] and (
                "/" not in mine or "/" not in theirs
            ):
                return Containment.UNKNOWN
            return Containment.NO
        return Containment.YES if self.resource == ceiling.resource else Containment.NO

    def __str__(self) -> str:
        return f"{self.domain}:{self.action}:{self.resource}"


def _normal_resource(text: str, domain: str, resource: str) -> str:
    if domain == "fs":
        root, segments, recursive = _normalise_path(text, resource)
        path = root + "/".join(segments)
        if recursive:
            path = path.rstrip("/") + "/**"
        return path
    if domain == "net":
        host, sep, port = resource.rpartition(":")
        if not sep or not _HOST.match(host):
            raise MalformedGrant(text, "expected host:port for net:egress")
        if port != "*" and not (port.isdigit() and 0 < int(port) < 65536):
            raise MalformedGrant(text, f"the port {port!r} is not 1-65535 or *")
        return f"{host.lower()}:{port if port == '*' else int(port)}"
    if domain == "proc":
        if resource == "*":
            return resource
        if resource.startswith("/"):
            root, segments, recursive = _normalise_path(text, resource)
            if recursive or not segments:
                raise MalformedGrant(text, "proc:exec names one program, not a directory")
            return root + "/".join(segments)
        if not _PROGRAM.match(resource) or "*" in resource:
            raise MalformedGrant(text, "a program is a bare name or an absolute path")
        return resource
    if not _NAME.match(resource):
        raise MalformedGrant(text, f"{resource!r} is not a variable or secret name")
    return resource


def _split(path: str) -> tuple[str, tuple[str, ...], bool]:
    root = path[:3] if _DRIVE.match(path) else "/"
    segments = tuple(segment for segment in path[len(root):].split("/") if segment)
    recursive = segments[-1:] == ("**",)
    return root, segments[:-1] if recursive else segments, recursive


def _path_within(path: str, ceiling: str) -> Containment:
    root, segments, recursive = _split(path)
    c_root, c_segments, c_recursive = _split(ceiling)
    if root != c_root:
        return Containment.NO
    if not c_recursive:
        exact = not recursive and segments == c_segments
        return Containment.YES if exact else Containment.NO
    inside = segments[: len(c_segments)] == c_segments
    return Containment.YES if inside else Containment.NO


def _endpoint_within(endpoint: str, ceiling: str) -> Containment:
    host, _, port = endpoint.rpartition(":")
    c_host, _, c_port = ceiling.rpartition(":")
    host_ok = c_host == "*" or host == c_host
    port_ok = c_port == "*" or port == c_port
    return Containment.YES if host_ok and port_ok else Containment.NO


@dataclass(frozen=True)
class GrantSet:
    """A set of atoms; what a sandbox is asked to confine a command to."""

    atoms: frozenset[GrantAtom]

    @classmethod
    def parse(cls, texts: Iterable[str]) -> GrantSet:
        return cls(frozenset(GrantAtom.parse(text) for text in texts))

    @classmethod
    def of(cls, *texts: str) -> GrantSet:
        return cls.parse(texts)

    def __iter__(self) -> Iterator[GrantAtom]:
        return iter(sorted(self.atoms, key=str))

    def __len__(self) -> int:
        return len(self.atoms)

    def admits(self, atom: GrantAtom) -> Containment:
        """Whether `atom` is within some atom of this set."""
        answers = {atom.within(ceiling) for ceiling in self.atoms}
        if Containment.YES in answers:
            return Containment.YES
        return Containment.UNKNOWN if Containment.UNKNOWN in answers else Containment.NO

    def within(self, ceiling: GrantSet) -> Containment:
        """Whether every atom here is within `ceiling`: any NO is NO, then any UNKNOWN."""
        answers = {ceiling.admits(atom) for atom in self.atoms}
        if Containment.NO in answers:
            return Containment.NO
        return Containment.UNKNOWN if Containment.UNKNOWN in answers else Containment.YES

    def beyond(self, ceiling: GrantSet) -> tuple[GrantAtom, ...]:
        """The atoms `ceiling` does not provably admit, in a stable order, for refusals."""
        return tuple(atom for atom in self if not ceiling.admits(atom).allows)

    def __str__(self) -> str:
        return " ".join(str(atom) for atom in self)


def _tree(path: Path) -> str:
    return str(path.resolve()).replace("\\", "/").rstrip("/") + "/**"


def workspace_grant(workspace: Path, program: str) -> GrantSet:
    """Exactly what running `program` over `workspace` needs: read and list it, run it.

    This is the only grant `Unconfined` accepts, so it is kept as small as it can be.
    """
    tree = _tree(workspace)
    return GrantSet.of(f"fs:read:{tree}", f"fs:list:{tree}", f"proc:exec:{program}")


def checker_ceiling(workspace: PurePath, programs: str | Sequence[str],
                    scratch: PurePath | str | None = None, *,
                    sources: Iterable[PurePath] = ()) -> GrantSet:
    """The most a checker (a linter run over a tree) may ever be granted, whatever the
    sandbox running it could enforce.

    Read and list the tree, read the sources of its dependencies (`sources`: for a lint,
    the cargo view of what the lockfile pins), write only its scratch directory, run the
    checker's programs. Never the network, a secret or an ambient variable: a linter that
    needs one is running the tree's code with more than the tree's own authority. Never a
    write to the tree or a read of anything else of the host.

    Applied in production: lint/run.py `check_grant` refuses a lint's (and a dependency
    cache build's) grant beyond it, before anything is prepared, after asking what the
    backend can enforce; a backend able to give a network or an ambient variable must
    still not give them to a checker. Paths are taken as the grant names them (absolute,
    not resolved again: the lint's grant is built from the same resolved paths), and
    `scratch` is where the sandbox mounts it (the guest's path, for a VM).
    """
    names = (programs,) if isinstance(programs, str) else tuple(programs)

    def tree(path: PurePath | str) -> str:
        return str(path).replace("\\", "/").rstrip("/") + "/**"

    atoms = [f"fs:read:{tree(workspace)}", f"fs:list:{tree(workspace)}"]
    atoms += [f"proc:exec:{name}" for name in names]
    atoms += [f"fs:read:{tree(source)}" for source in sources]
    if scratch is not None:
        atoms.append(f"fs:write:{tree(scratch)}")
    return GrantSet.of(*atoms)
