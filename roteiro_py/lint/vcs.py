"""The git state of a tree, read as data: no git process, hook or filter runs on it.

`--fix` refuses a dirty tree as `cargo fix` does, and an attestation names the commit a
clean checkout is at (issue 24, 26). Both need what `git status` knows; neither may run
git on the tree: a repository's configuration chooses commands (`core.fsmonitor`,
`filter.<name>.clean` driven by the tree's `.gitattributes`, hooks), and the tree is the
code under review.

Guarantees:
- Read through dulwich's readers of the index, the object store, refs and ignore files,
  never its porcelain: nothing runs (no filter driver, fsmonitor, hook, pager or
  credential helper; tests/unit/lint/test_vcs.py plants each and sees nothing run).
- What `clean` means: what `git status --porcelain --untracked-files=all` would print
  nothing for, with two conservative differences: no clean filter or line-ending
  conversion is applied (a file such a filter would normalise counts as changed), and a
  submodule (a gitlink) is not looked into.
- `staged` (index ≠ HEAD, or every entry of an unborn branch), `unstaged` (a tracked file
  changed, deleted or turned into another kind in the worktree) and `untracked` (not in
  the index and not ignored by `.gitignore`, `.git/info/exclude` or `core.excludesFile`)
  are paths relative to the work tree's root, POSIX, sorted, each list at most
  MAX_LISTED long (`truncated` says one was cut: the state is still known to be dirty).
- Quiet: dulwich's log (which names the tree's paths raw) goes nowhere.
- Bounded: an index larger than MAX_INDEX_BYTES, a walk past MAX_WALKED untracked
  candidates, or a repository dulwich cannot read (a format it does not know, a missing
  object) is errors.VcsUnreadable naming the repository and why, never a guess of clean.
- Found as git finds it: the nearest `.git` (a directory, or the `gitdir:` file a
  worktree or submodule has) at the root or above it.
- Clean is not "what the guest saw": git calls a tree clean that holds ignored files (by
  the tree's own `.gitignore` or the repository's `info/exclude`) or edits under the
  skip-worktree bit, and a staged copy holds them. `copy_differs` compares a staged copy
  with a commit's tree entry by entry (every file and link, its blob id and executable
  bit), so a commit names a copy only when it is that commit's content.
"""

from __future__ import annotations

import hashlib
import logging
import os
import stat
import struct
import zlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dulwich import errors as dulwich_errors
from dulwich.errors import NotGitRepository
from dulwich.ignore import IgnoreFilterManager
from dulwich.index import ConflictedIndexEntry, Index, IndexEntry
from dulwich.object_store import tree_lookup_path
from dulwich.objects import Commit, ObjectID, Tree
from dulwich.refs import HEADREF
from dulwich.repo import Repo

from roteiro_py.errors import VcsUnreadable

# dulwich logs what it skips ("Ignoring <path>: it is a symbolic link") with the tree's
# names as they are, and with no handler configured Python prints that raw on stderr: a
# directory named with ESC sequences would drive the terminal. What it skips, git skips.
_DULWICH_LOG = logging.getLogger("dulwich")
_DULWICH_LOG.addHandler(logging.NullHandler())
_DULWICH_LOG.propagate = False

#: The most paths kept per kind of change: enough to name them in a refusal.
MAX_LISTED = 200
#: The largest `.git/index` read (about 1.5 million entries of a typical path length).
MAX_INDEX_BYTES = 256 * 1024 * 1024
#: The most untracked candidates walked before the state is called unreadable.
MAX_WALKED = 1_000_000


@dataclass(frozen=True)
class GitState:
    """What `git status` would say of a work tree, and the commit it is at."""

    root: Path
    #: HEAD's commit and its tree (hex), None on a branch with no commit yet.
    commit: str | None
    tree: str | None
    staged: tuple[str, ...]
    unstaged: tuple[str, ...]
    untracked: tuple[str, ...]
    #: A list above was cut at MAX_LISTED.
    truncated: bool = False

    @property
    def clean(self) -> bool:
        return not (self.staged or self.unstaged or self.untracked)


def git_state(root: Path) -> GitState | None:
    """The state of the git work tree holding `root`; None when there is none."""
    try:
        repo = Repo.discover(str(root))
    except NotGitRepository:
        return None
    except (OSError, ValueError, KeyError) as error:
        raise VcsUnreadable(root, str(error)) from None
    with repo:
        worktree = Path(repo.path)
        try:
            return _state(repo, worktree)
        except VcsUnreadable:
            raise
        except _unreadable() as error:
            raise VcsUnreadable(worktree, f"{type(error).__name__}: {error}") from None


def _unreadable() -> tuple[type[Exception], ...]:
    """What a damaged or foreign repository makes dulwich's readers raise."""
    return (OSError, ValueError, KeyError, AssertionError, NotImplementedError, struct.error,
            zlib.error, dulwich_errors.ChecksumMismatch, dulwich_errors.ObjectFormatException,
            dulwich_errors.NotTreeError, dulwich_errors.NotCommitError, dulwich_errors.NotBlobError,
            dulwich_errors.ObjectMissing)


def _state(repo: Repo, worktree: Path) -> GitState:
    index_path = Path(repo.index_path())
    try:
        size = index_path.stat().st_size
    except FileNotFoundError:
        size = 0
    if size > MAX_INDEX_BYTES:
        raise VcsUnreadable(worktree, f"its index is {size} bytes, more than {MAX_INDEX_BYTES}")
    index = repo.open_index()
    commit_id: str | None = None
    tree_id: ObjectID | None = None
    try:
        head = repo.refs[HEADREF]
    except KeyError:
        head = None
    if head is not None:
        commit = repo[head]
        if not isinstance(commit, Commit):
            raise VcsUnreadable(worktree, "HEAD does not name a commit")
        commit_id, tree_id = head.decode("ascii"), commit.tree
    cut = False

    def listed(paths: list[str]) -> tuple[str, ...]:
        nonlocal cut
        ordered = sorted(set(paths))
        cut = cut or len(ordered) > MAX_LISTED
        return tuple(ordered[:MAX_LISTED])

    staged = [_text(path) for (old, new), _modes, _shas
              in index.changes_from_tree(repo.object_store, tree_id)
              if (path := new or old) is not None]
    if repo.object_format.name != "sha1":
        raise VcsUnreadable(worktree, f"its objects are named by {repo.object_format.name}, "
                            "and only sha1 repositories are read")
    racy_after = os.stat(index_path).st_mtime_ns if size else 0
    unstaged = [_text(path) for path, entry in index.iteritems()
                if _changed(worktree, path, entry, racy_after)]
    return GitState(
        root=worktree,
        commit=commit_id,
        tree=None if tree_id is None else tree_id.decode("ascii"),
        staged=listed(staged),
        unstaged=listed(unstaged),
        untracked=listed(_untracked(repo, worktree, index)),
        truncated=cut,
    )


def _changed(worktree: Path, path: bytes, entry: IndexEntry | ConflictedIndexEntry,
             racy_after: int) -> bool:
    """Whether a tracked path differs in the worktree from its index entry, as git decides
    it: gone, another kind (a file, a link, a FIFO, a directory; or reached through a link
    or a non-directory), another executable bit, or other content. The content is hashed
    unless the stat data match the entry and the file is older than the index (git's
    "racy" rule: a file written in the index's own instant is hashed). A submodule's
    gitlink and a sparse checkout's skipped entries are not looked at."""
    if isinstance(entry, ConflictedIndexEntry):
        return True
    if entry.skip_worktree or stat.S_ISDIR(entry.mode) or entry.mode == 0o160000:
        return False
    parts = _text(path).split("/")
    here = worktree
    for part in parts[:-1]:
        here = here / part
        try:
            if not stat.S_ISDIR(os.lstat(here).st_mode):
                return True
        except OSError:
            return True
    full = here / parts[-1]
    try:
        st = os.lstat(full)
    except OSError:
        return True
    if stat.S_ISLNK(entry.mode) != stat.S_ISLNK(st.st_mode):
        return True
    if not (stat.S_ISLNK(st.st_mode) or stat.S_ISREG(st.st_mode)):
        return True
    if stat.S_ISREG(st.st_mode) and bool(entry.mode & 0o100) != bool(st.st_mode & 0o100):
        return True
    mtime, ctime = _ns(entry.mtime), _ns(entry.ctime)
    if (st.st_size == entry.size and st.st_mtime_ns == mtime and st.st_ctime_ns == ctime
            and st.st_mtime_ns < racy_after):
        return False
    return _blob_id(full, st) != entry.sha


def _ns(stamp: int | float | tuple[int, int]) -> int:
    if isinstance(stamp, tuple):
        return stamp[0] * 1_000_000_000 + stamp[1]
    return int(stamp * 1_000_000_000)


def _blob_id(full: Path, st: os.stat_result) -> bytes:
    """The git blob id (sha1, hex) of a link's target or a file's bytes, read in chunks
    without following a link (a file swapped for a link since the stat reads as changed)."""
    if stat.S_ISLNK(st.st_mode):
        target = os.readlink(os.fsencode(full))
        return hashlib.sha1(b"blob %d\0" % len(target) + target).hexdigest().encode("ascii")
    fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    with os.fdopen(fd, "rb") as file:
        opened = os.fstat(file.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return b""
        digest = hashlib.sha1(b"blob %d\0" % opened.st_size)
        read = 0
        while chunk := file.read(1 << 20):
            read += len(chunk)
            digest.update(chunk)
        if read != opened.st_size:  # written while read: not the bytes the header says
            return b""
    return digest.hexdigest().encode("ascii")


def _untracked(repo: Repo, worktree: Path, index: Index) -> list[str]:
    """Files in the worktree that are neither in the index nor ignored: a walk that does
    not descend into an ignored directory, a nested repository or a link."""
    ignored = IgnoreFilterManager.from_repo(repo)
    tracked = {_text(path) for path in index.paths()}
    tracked_dirs = {str(Path(path).parent) for path in tracked}
    found: list[str] = []
    walked = 0
    pending = [worktree]
    while pending and len(found) <= MAX_LISTED:
        here = pending.pop()
        with os.scandir(here) as entries:
            for entry in entries:
                walked += 1
                if walked > MAX_WALKED:
                    raise VcsUnreadable(worktree, f"more than {MAX_WALKED} untracked entries")
                rel = Path(entry.path).relative_to(worktree).as_posix()
                if entry.name == ".git":
                    continue
                is_dir = entry.is_dir(follow_symlinks=False)
                if is_dir and rel not in tracked_dirs and (Path(entry.path) / ".git").exists():
                    # a nested repository: git shows it as `dir/`, a submodule not at all
                    if rel not in tracked and not ignored.is_ignored(rel + "/"):
                        found.append(rel + "/")
                    continue
                if ignored.is_ignored(rel + "/" if is_dir else rel):
                    continue
                if is_dir:
                    pending.append(Path(entry.path))
                elif rel not in tracked:
                    found.append(rel)
    return found


def _text(path: bytes | str) -> str:
    return os.fsdecode(path) if isinstance(path, bytes) else path


#: What `copy_differs` compares per path: the kind ("f" file, "x" executable file, "l"
#: link) and the git blob id (hex) of its bytes or its link's target.
_Entry = tuple[str, bytes]


def copy_differs(workspace: Path, tree: str, copy: Path) -> str | None:
    """None when the staged `copy` of `workspace` holds exactly the commit tree `tree`'s
    files and links below the workspace (each its blob id and executable bit; directories
    are not compared, a submodule's content is in no commit tree); else why not, naming the
    first path that differs (a hostile name: the caller escapes it where it is printed)."""
    try:
        repo = Repo.discover(str(workspace))
    except NotGitRepository:
        return "not a git work tree"
    except (OSError, ValueError, KeyError) as error:
        return f"unreadable ({error})"
    with repo:
        try:
            prefix = PurePosixPath(workspace.resolve().relative_to(Path(repo.path).resolve())
                                   .as_posix())
            expected = _commit_entries(repo, tree.encode("ascii"), prefix)
        except _unreadable() as error:
            return f"unreadable ({type(error).__name__}: {error})"
    found = _copy_entries(copy)
    for path in sorted(set(expected) | set(found)):
        if expected.get(path) != found.get(path):
            return f"{path} differs" if path in expected and path in found else \
                f"{path} is not in the commit" if path in found else f"{path} is not in the copy"
    return None


class _CommitUnusable(ValueError):
    """The commit's tree cannot describe the workspace (caught as unreadable: `_unreadable`)."""


def _commit_entries(repo: Repo, tree_id: bytes, prefix: PurePosixPath) -> dict[str, _Entry]:
    """Every blob and link of the tree `tree_id` below `prefix`, by its path below it."""
    top = repo[tree_id]
    for part in prefix.parts if str(prefix) != "." else ():
        if not isinstance(top, Tree):
            raise _CommitUnusable(f"{prefix} is not a directory of the commit")
        _mode, sha = top[os.fsencode(part)]
        top = repo[sha]
    entries: dict[str, _Entry] = {}
    pending: list[tuple[Tree | object, str]] = [(top, "")]
    while pending:
        here, rel = pending.pop()
        if not isinstance(here, Tree):
            raise _CommitUnusable(f"{prefix} is not a directory of the commit")
        for item in here.iteritems():
            if len(entries) + len(pending) > MAX_WALKED:
                raise _CommitUnusable(f"more than {MAX_WALKED} entries in the commit")
            path = rel + _text(item.path)
            if stat.S_ISDIR(item.mode):
                pending.append((repo[item.sha], path + "/"))
            elif stat.S_ISLNK(item.mode):
                entries[path] = ("l", item.sha)
            elif stat.S_ISREG(item.mode):
                entries[path] = ("x" if item.mode & 0o100 else "f", item.sha)
            # a gitlink (submodule) holds nothing of this commit's: files under it differ
    return entries


def _copy_entries(copy: Path) -> dict[str, _Entry]:
    """Every file and link of a staged copy (ours, bounded by its staging), never followed."""
    entries: dict[str, _Entry] = {}
    for here, dirs, files in os.walk(copy, followlinks=False):
        for name in (*dirs, *files):
            full = Path(here) / name
            st = os.lstat(full)
            rel = full.relative_to(copy).as_posix()
            if stat.S_ISLNK(st.st_mode):
                entries[rel] = ("l", _blob_id(full, st))
            elif stat.S_ISREG(st.st_mode):
                entries[rel] = ("x" if st.st_mode & 0o100 else "f", _blob_id(full, st))
    return entries


def blob_ids_at(root: Path, commit: str, paths: Iterable[str]) -> dict[str, bytes] | None:
    """The blob id (hex) of each of `paths` (POSIX, relative to `root`) that is a regular
    file in `commit` of the git work tree whose root is `root`, read from its object store;
    a path that is not one is left out. None when `root` is not a work tree's root (no
    `.git` there); {} when the commit is not in the repository (a shallow clone that never
    fetched it) or the repository cannot be read: nothing is known to be that commit's."""
    try:
        repo = Repo(str(root))
    except NotGitRepository:
        return None
    except (OSError, ValueError, KeyError):
        return {}
    found: dict[str, bytes] = {}
    with repo:
        try:
            head = repo.object_store[ObjectID(commit.encode("ascii"))]
            if not isinstance(head, Commit):
                return {}
            for path in paths:
                try:
                    mode, sha = tree_lookup_path(repo.object_store.__getitem__, head.tree, path.encode())
                except (KeyError, dulwich_errors.NotTreeError):
                    continue
                if stat.S_ISREG(mode):
                    found[path] = sha
        except _unreadable():
            return {}
    return found


def blob_id(data: bytes) -> bytes:
    """git's id (hex) of a blob holding `data`."""
    return hashlib.sha1(b"blob %d\0" % len(data) + data, usedforsecurity=False).hexdigest().encode()
