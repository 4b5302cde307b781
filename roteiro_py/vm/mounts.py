"""From a grant to the guest's mount table, or a refusal before anything boots.

The mapping (what the guest sees):

- `fs:read:/some/dir/**` (with or without the matching `fs:list`) becomes a read-only
  share of that host directory. A step names it by its host path (`Share.guest`), in
  its working directory, its arguments and its environment, and its output names it so
  again; the guest mounts it at `GUEST_TREES` + that path (`Share.mount_point`), in a
  tmpfs the guest init makes, so nothing of the image lies on the way to it: under
  GUEST_TREES every parent is one the guest init made (root-owned, 0755), whatever the
  image holds. Not at the host path itself: the image owns the guest's directories (a
  0700 /root the unprivileged cargo cannot enter, a /home or /var/run that is a link,
  the VM's own /dev/shm and /cargo-home), and a tree there would be unreachable or
  collide. The mapping back is the deletion of one prefix (`MountTable.host_bytes`),
  exact in any text or JSON (no escaping is ever needed), and the price is
  len(GUEST_TREES) bytes of PATH_MAX for every path of the tree in the guest. Nested
  grants collapse into the outermost share. How a share travels is the backend's choice; the qemu backend copies
  a worktree into a read-only ext4 image per run, leaving out `.git` and cargo `target`
  directories, FIFOs, sockets and device nodes (vm/disks/share_image.py), and shares the
  cargo registry over read-only 9p (the numbers are in qemu/machine.py).
- A read of a vendored view (`cargo_views_root()/<key>/registry/**` or `.../git/**`,
  made by roteiro_py/cargo/vendor.py with only what one lockfile pins, unpacked from
  verified archives) is mapped to `/cargo-home/registry` and `/cargo-home/git`. This is
  what a lint grants, and the guest's only view of dependencies. `/cargo-home` itself is a
  tmpfs owned by the guest user, so cargo can create its lock files there.
- Nothing of the host's cargo home is shared: a grant under it (its registry/ and git/
  hold every project's crates and checkouts, with their `.git`), or one that would
  contain it (its root holds credentials.toml), is refused.
- `fs:write:P` is accepted only when P is the scratch disk's guest path or under it: the
  scratch is the one writable place. Everything else the guest can write (its root
  overlay, /tmp) is RAM that disappears with the VM.
- `proc:exec:*` is accepted: every process the command starts runs inside the VM.
- A command's working directory is on a share, on the scratch disk, or FRESH_CWD. A tree
  that is, or holds, a directory the VM provides (/tmp, /dev, /proc, /sys, /cargo-home,
  the scratch) is refused: a step's path there would name two places.
- `net:*`, `secret:*`, `env:read:*` and unknown domains are refused: there is no network
  device, no secret channel, and the environment is set, never inherited.

Why trees are not mounted at their host path: docs/DESIGN_NOTES.md, section
`roteiro_py/vm/mounts.py`.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from roteiro_py import errors, paths
from roteiro_py.process.grants import GrantAtom, GrantSet
from roteiro_py.process.sandbox import Command

# Where the scratch disk is mounted, for every backend and caller; stated in the leaf
# vocabulary.py because lint names it before anything of roteiro_py.vm may load.
from roteiro_py.vocabulary import GUEST_SCRATCH as GUEST_SCRATCH

#: The unprivileged uid/gid commands run as in the guest (any backend); the scratch disk's
#: root is created owned by it (vm/disks/scratch.py).
GUEST_UID = 1000
GUEST_GID = 1000
#: Where the guest's CARGO_HOME is assembled; set CARGO_HOME to this in a step's env.
GUEST_CARGO_HOME = "/cargo-home"
#: Guest paths the VM itself provides: a tree share may not be one of them or hold one
#: (a step's path there would name both); under them it is fine (it is mounted under
#: GUEST_TREES).
RESERVED = ("/proc", "/sys", "/dev", GUEST_CARGO_HOME)
#: Where the guest mounts every tree share, each at this + its host path: a tmpfs the
#: guest init makes (guest_init.sh mount_trees), so no directory of the image, whatever
#: its mode or link, lies between the root and a tree (see the module docstring).
GUEST_TREES = "/.roteiro-trees"
#: The sub-directories of a vendored view that are shared (read-only).
CARGO_SHAREABLE = ("registry", "git")
#: A guest directory every boot provides empty (a tmpfs), where a command may start
#: outside every share: the toolchain probes run there, away from the tree's files.
FRESH_CWD = "/tmp"


def cargo_views_root() -> Path:
    """Where the per-lockfile vendored views are made (roteiro_py/cargo/vendor.py)."""
    return paths.cache_root() / "cargo-views"


def _view_guest(path: PurePosixPath, views: PurePosixPath) -> str | None:
    """The guest path of a cargo view's registry/ or git/, None when `path` is none."""
    if not _is_within(path, views):
        return None
    parts = path.relative_to(views).parts
    if len(parts) != 2 or parts[1] not in CARGO_SHAREABLE or parts[0].startswith("."):
        return None
    return str(PurePosixPath(GUEST_CARGO_HOME) / parts[1])


#: GUEST_TREES where it begins a path in a step's output (cargo's `path+file:///...`
#: package ids included): not preceded by a byte a path name holds (so
#: `src/.roteiro-trees/` stays), and followed by `/`.
_PLACED = re.compile(rb"(?:(?<=file://)|(?<![A-Za-z0-9._~/\-\x80-\xff]))"
                     + re.escape(GUEST_TREES.encode()) + rb"(?=/)")


@dataclass(frozen=True)
class Share:
    """A host directory the guest sees read-only.

    `guest`: the path a step names it by (its host path for a tree, or a path under
    GUEST_CARGO_HOME); `mount_point`: where the guest mounts it."""

    host: Path
    guest: str

    @property
    def is_tree(self) -> bool:
        return not _is_within(PurePosixPath(self.guest), PurePosixPath(GUEST_CARGO_HOME))

    @property
    def mount_point(self) -> str:
        return GUEST_TREES + self.guest if self.is_tree else self.guest


@dataclass(frozen=True)
class MountTable:
    shares: tuple[Share, ...]
    #: The scratch disk's mount point, when the grant names it.
    scratch: str | None
    #: "rw" when the grant writes there, "ro" when it only reads (the disk is then
    #: attached read-only), None when the scratch is not attached at all.
    scratch_mode: str | None
    #: Whether GUEST_CARGO_HOME is assembled (any cargo share present).
    cargo_home: bool

    @property
    def trees(self) -> bool:
        """Whether GUEST_TREES is assembled (any tree share present)."""
        return any(share.is_tree for share in self.shares)

    def guest_word(self, word: str) -> str:
        """`word` (a working directory, an argument, an environment value) as the guest
        must be told it: a tree's host path, or one under it, at its mount point."""
        for share in self.shares:
            if share.is_tree and (word == share.guest or word.startswith(share.guest.rstrip("/") + "/")):
                return share.mount_point + word[len(share.guest):]
        return word

    def host_bytes(self, data: bytes) -> bytes:
        """A step's output with every guest path of a tree named by its host path again:
        GUEST_TREES deleted where it begins a path (exact in text and in JSON alike: the
        rest is the host path as the guest wrote it, escaped as it was)."""
        return _PLACED.sub(b"", data) if self.trees and GUEST_TREES.encode() in data else data

    def host_text(self, text: str) -> str:
        """host_bytes of a text (a failure the guest init reported)."""
        return self.host_bytes(text.encode("utf-8", "surrogateescape")).decode("utf-8", "surrogateescape")


def _is_within(path: PurePosixPath, root: PurePosixPath) -> bool:
    return path == root or root in path.parents


def _path_of(atom: GrantAtom) -> tuple[PurePosixPath, bool]:
    resource = atom.resource
    recursive = resource.endswith("/**")
    return PurePosixPath((resource[:-3] if recursive else resource) or "/"), recursive


def derive_mounts(grant: GrantSet, command: Command, *, scratch: str | None,
                  host_cargo_home: Path) -> MountTable:
    """The mount table enforcing `grant`, or errors.Unenforceable naming the first atom."""
    shown = command.display()
    cargo = PurePosixPath(str(host_cargo_home.expanduser().resolve()))
    views = PurePosixPath(str(cargo_views_root().resolve()))
    scratch_path = PurePosixPath(scratch) if scratch else None
    reads: list[tuple[PurePosixPath, GrantAtom]] = []
    lists: list[PurePosixPath] = []
    scratch_mode: str | None = None
    for atom in grant:
        if atom.domain in ("net", "secret"):
            raise errors.Unenforceable(str(atom), shown,
                                       "the VM has no network device and no secret channel")
        if atom.domain == "env":
            raise errors.Unenforceable(str(atom), shown, "the guest's environment is set "
                                       "explicitly and never inherited from the host")
        if atom.domain == "proc":
            continue  # everything the command runs, runs inside the VM
        if atom.domain != "fs":
            raise errors.Unenforceable(str(atom), shown, f"the domain {atom.domain!r} is "
                                       "unknown to the VM backend")
        path, recursive = _path_of(atom)
        if atom.action == "write":
            if scratch_path is None or not _is_within(path, scratch_path):
                where = f"the scratch disk at {scratch}" if scratch else "no scratch disk"
                raise errors.Unenforceable(str(atom), shown, "the only writable place in the "
                                           f"VM is {where}")
            scratch_mode = "rw"
            continue
        if scratch_path is not None and _is_within(path, scratch_path):
            scratch_mode = scratch_mode or "ro"
            continue
        if not recursive:
            raise errors.Unenforceable(str(atom), shown, "a share exposes a whole directory "
                                       "tree; grant `<dir>/**`")
        if _is_within(cargo, path):
            # Met by a user whose CARGO_HOME is inside the tree (a CI job's, in its
            # checkout): the grant is the program's, so the way forward is to move that.
            raise errors.Unenforceable(
                str(atom), shown, f"{path} holds the cargo home {cargo} (CARGO_HOME), whose "
                "root holds credentials.toml; no part of the host's cargo home is shared with "
                "the VM", fix=None if path == path.parent else f"Move CARGO_HOME out of {path} "
                "(in CI: to a directory outside the checkout)")
        is_view = _view_guest(path, views) is not None
        if not is_view and (_is_within(path, views) or _is_within(views, path)):
            raise errors.Unenforceable(str(atom), shown, "of the cargo views, only one view's "
                                       "registry/ and git/ are shared (each holds what one "
                                       "lockfile pins)")
        if is_view:
            pass
        elif _is_within(path, cargo):
            raise errors.Unenforceable(str(atom), shown, "no part of the host's cargo home is "
                                       "shared: the guest sees only the vendored view of the "
                                       "packages one lockfile pins (roteiro_py/cargo/vendor.py)")
        elif any(_is_within(PurePosixPath(r), path) for r in (*RESERVED, FRESH_CWD)) or (
                scratch_path is not None and _is_within(scratch_path, path)):
            raise errors.Unenforceable(str(atom), shown, "it is, or holds, a directory the VM "
                                       "itself provides (a step's path there would name both)")
        if atom.action == "read":
            reads.append((path, atom))
        else:
            lists.append(path)
    read_paths = [p for p, _ in reads]
    for path in lists:
        if not any(_is_within(path, r) for r in read_paths):
            raise errors.Unenforceable(f"fs:list:{path}/**", shown, "a share cannot list a "
                                       "directory without letting its files be read")
    outermost = sorted({p for p in read_paths
                        if not any(o != p and _is_within(p, o) for o in read_paths)}, key=str)
    shares: list[Share] = []
    for path in outermost:
        host = Path(str(path))
        view_guest = _view_guest(path, views)
        guest = view_guest if view_guest is not None else str(path)
        if not host.is_dir():
            atom = next(a for p, a in reads if p == path)
            raise errors.Unenforceable(str(atom), shown, f"{host} is not a directory on "
                                       "this host")
        if any(s.guest == guest for s in shares):
            atom = next(a for p, a in reads if p == path)
            raise errors.Unenforceable(str(atom), shown, f"another share already provides {guest}")
        shares.append(Share(host, guest))
    cwd = PurePosixPath(str(command.workspace))
    visible = [PurePosixPath(s.guest) for s in shares]
    if scratch_path is not None and scratch_mode is not None:
        visible.append(scratch_path)
    if cwd != PurePosixPath(FRESH_CWD) and not any(_is_within(cwd, v) for v in visible):
        raise errors.Unenforceable(f"fs:read:{cwd}/**", shown, "the working directory is "
                                   "neither shared nor on the scratch disk")
    return MountTable(tuple(shares), scratch if scratch_mode else None, scratch_mode,
                      any(_is_within(PurePosixPath(s.guest), PurePosixPath(GUEST_CARGO_HOME))
                          for s in shares))
