"""Git packages into the store: the pinned commit's files, and nothing the tree, the remote
or the user's git configuration chose.

Host cargo, given a tree, follows its `file://` and `ssh://` sources and every submodule
URL a dependency's `.gitmodules` names: it fetches every branch of a private host
repository and opens SSH sessions with the host's keys (issue 20). Here host git is a
tool with its hands tied, driven by the lockfile's pin alone:

- Nothing configures it but us: no system or global configuration (`GIT_CONFIG_NOSYSTEM`,
  `GIT_CONFIG_GLOBAL=/dev/null`, an empty `HOME`), a fresh environment
  (process.stream.spawn_sandboxed: nothing of ours or the user's reaches it but the CA
  file and the proxy, passed by name), and `_HARDENING`: only https
  (`protocol.allow=never`), no prompt, no askpass, no credential helper, no hooks, no
  LFS or other filters, no attributes, no replace objects, no bundle URIs, no automatic
  gc (which detaches and outlives the process group), objects checked as they arrive.
- It fetches the pinned commit only (`--depth=1`, by id) into a bare repository of its
  own. A host that refuses fetching by id gets the pin's branch or tag (or its default
  branch), which must still point at the commit, or the package is refused.
- The files come out through `git archive --worktree-attributes` in a bare repository (no
  `.gitattributes` of the commit applies: no `export-ignore`, no `export-subst`), read
  by `Checkout`, our own tar reader, into the store's staging directory: regular files and
  directories only; a link is materialized as a copy of what it names inside the
  checkout, and one leaving it, a device, a FIFO, a hard link, `..`, an absolute path or
  `.git` is refused. Every bound is a constant below, shared by the whole checkout.
- Submodules: `.gitmodules` at that commit is parsed by `git config --blob --no-includes`
  (a parser, nothing more); each gitlink must have an entry, and its URL (a relative one
  resolved against the parent's) must be https without credentials. Every submodule of a
  commit is checked before any is fetched, so a `file://` or `ssh://` one is refused
  before anything is asked of it. Then each gitlinked commit is fetched the same way,
  recursively, bounded in depth and count.
- The checkout is sealed (store.keep_git_checkout) with every file's sha256, computed as
  it was written; a failed fetch leaves nothing in the store.

`package_dir` and `normalized_manifest` read the checkout's manifests as data (the one
bounded reader, tomllib) to find a package and write the standalone manifest `cargo
vendor` writes for a git package (workspace inheritance resolved).
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import os
import posixpath
import re
import shutil
import sys
import tarfile
import tempfile
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any
from urllib.parse import urlsplit

import tomli_w

from roteiro_py import errors
from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import Pin
from roteiro_py.cargo.registry import HostCargo
from roteiro_py.cargo.workspace import MANIFEST_MAX_BYTES, parse_tree_toml, read_tree_file
from roteiro_py.process.stream import Exit, Failed, Output, Stream, collect, spawn_sandboxed

#: The most bytes of files one checkout (with its submodules) may hold. The largest git
#: dependencies in use (monorepos such as wasmtime's) hold a few hundred MiB.
MAX_CHECKOUT_BYTES = 1024 * 1024 * 1024
#: The most files (and links) one checkout, submodules included, may hold.
MAX_CHECKOUT_FILES = 100_000
#: The most directories one checkout may hold: a directory costs no byte, and links to
#: directories materialized as copies multiply them (12 links deep made 16k of them).
MAX_CHECKOUT_DIRS = 100_000
#: The most components a path in a checkout may have, and the most bytes.
MAX_PATH_DEPTH = 64
MAX_PATH_BYTES = 4096
#: The largest pack one repository's fetch may write (a depth-1 pack of the pinned commit
#: holds its files compressed, so a checkout within MAX_CHECKOUT_BYTES fits). Without it a
#: git host could send for as long as the fetch may take (FETCH_TIMEOUT_S) at line rate.
#: Git keeps every fetch as one pack file (`fetch.unpackLimit=1`), and the kernel cuts a
#: file written past RLIMIT_FSIZE (`_LIMITED`).
MAX_PACK_BYTES = MAX_CHECKOUT_BYTES + 64 * 1024 * 1024
#: How deep submodules may nest, and how many one checkout may have in all.
MAX_SUBMODULE_DEPTH = 4
MAX_SUBMODULES = 64
#: The largest `.gitmodules` read (real ones are under a few KiB).
MAX_GITMODULES_BYTES = 256 * 1024
#: Links followed to resolve one link (the kernel's own limit, ELOOP).
MAX_LINK_HOPS = 40
#: The most bytes of output git's other commands may write (a listing of
#: MAX_CHECKOUT_FILES paths fits), and of an error shown in a refusal.
MAX_GIT_OUTPUT = 64 * 1024 * 1024
MAX_ERROR_CHARS = 600
#: The most directories `package_dir` walks to find a manifest.
MAX_WALK_DIRS = 20_000
#: What a tar header and its padding may add per entry (a pax header for a long name).
_TAR_OVERHEAD = 4096

#: The configuration git runs with: nothing from the system, the user or the remote can
#: add to it (`-c` wins over every file, and no file is read).
_HARDENING = (
    "protocol.allow=never", "protocol.https.allow=always",
    "credential.helper=", "core.hooksPath=/dev/null", "core.fsmonitor=false",
    "core.attributesFile=/dev/null", "core.autocrlf=false", "core.sshCommand=false",
    "filter.lfs.smudge=", "filter.lfs.process=", "filter.lfs.clean=",
    "filter.lfs.required=false",
    # Only the first request may be redirected (a moved repository): git keeps a redirect
    # within https (protocol.allow), and the lockfile's author could name that URL anyway.
    "http.followRedirects=initial",
    "transfer.fsckObjects=true", "fetch.fsckObjects=true", "protocol.version=2",
    "transfer.bundleURI=false", "fetch.recurseSubmodules=false", "submodule.recurse=false",
    "gc.auto=0", "gc.autoDetach=false", "maintenance.auto=false",
    "fetch.writeCommitGraph=false", "fetch.unpackLimit=1", "transfer.unpackLimit=1",
    "init.defaultBranch=main", "advice.detachedHead=false",
)
#: The environment git runs with (beside PATH, HOME, the CA and the proxy).
_ENVIRONMENT = {
    "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
    "GIT_CONFIG_SYSTEM": "/dev/null", "GIT_ATTR_NOSYSTEM": "1",
    "GIT_TERMINAL_PROMPT": "0", "GIT_ASKPASS": "/bin/false", "SSH_ASKPASS": "/bin/false",
    "GIT_SSH_COMMAND": "/bin/false", "GIT_ALLOW_PROTOCOL": "https",
    "GIT_PROTOCOL_FROM_USER": "0", "GIT_NO_REPLACE_OBJECTS": "1", "GIT_NO_LAZY_FETCH": "1",
    "GIT_LFS_SKIP_SMUDGE": "1", "LC_ALL": "C",
}
#: The user's proxy settings, passed through by name (curl reads both spellings).
_PROXY_VARIABLES = ("HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY",
                    "no_proxy")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
#: Runs `argv[2:]` with no file larger than argv[1] bytes and no core dump (what git and
#: its index-pack inherit); the interpreter isolated (-I: no PYTHON* variable, no site).
_LIMITED = ("import os, resource, sys; limit = int(sys.argv[1]); "
            "resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)); "
            "resource.setrlimit(resource.RLIMIT_CORE, (0, 0)); "
            "os.execvp(sys.argv[2], sys.argv[2:])")
#: What git says when the kernel cut the pack (SIGXFSZ is 25 on Linux).
_CUT_OFF = re.compile(r"signal 25|[Ff]ile size limit exceeded|File too large")
#: A ref name safe as a refspec's source: no `:`, `*`, `^`, `~`, `?`, `[`, `\`, space.
_REF_NAME = re.compile(r"[A-Za-z0-9_+@][A-Za-z0-9._/+@-]{0,255}")
_URL = re.compile(r"https://[!$-\[\]-~]+")
_HOST = re.compile(r"[A-Za-z0-9.-]{1,253}|\[[0-9A-Fa-f:.]{2,45}\]")


class ArchiveRefused(Exception):
    """What a checkout's files held that is not kept (becomes errors.PackageRefused)."""


class CheckoutOutOfTime(ArchiveRefused):
    """Writing the checkout's files passed the fetch's deadline."""


# -- the tar reader ------------------------------------------------------------------


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 160 else text[:157] + "..."


def _checked_path(name: str) -> str:
    """`name` (an archive member's path) as a relative POSIX path, or ArchiveRefused."""
    try:
        encoded = name.encode("utf-8")
    except UnicodeEncodeError:
        raise ArchiveRefused(f"the path {_shown(name)} is not UTF-8") from None
    if len(encoded) > MAX_PATH_BYTES:
        raise ArchiveRefused(f"a path is longer than {MAX_PATH_BYTES} bytes")
    if name.startswith("/"):
        raise ArchiveRefused(f"the path {_shown(name)} is absolute")
    parts = name.split("/")
    if len(parts) > MAX_PATH_DEPTH:
        raise ArchiveRefused(f"the path {_shown(name)} is more than {MAX_PATH_DEPTH} deep")
    for part in parts:
        if part in ("", ".", ".."):
            raise ArchiveRefused(f"the path {_shown(name)} has an empty, `.` or `..` component")
        if part.casefold() == ".git" or "\0" in part:
            raise ArchiveRefused(f"the path {_shown(name)} holds `.git` or a NUL byte")
    return name


@dataclass
class Checkout:
    """The files written so far into `root` (a staging directory), within the bounds.

    Nothing but regular files and directories is ever created under `root`, so no write
    can pass through a link; links are kept aside (`links`) and materialized by `seal`."""

    root: Path
    #: The time.monotonic() by which the files must be written (None: no deadline).
    until: float | None = None
    files: dict[str, str] = field(default_factory=dict)
    dirs: set[str] = field(default_factory=lambda: {""})
    links: dict[str, str] = field(default_factory=dict)
    total_bytes: int = 0
    submodules: int = 0
    #: Every path written or recorded, by its parent directory: `_children` in time
    #: proportional to its answer (a scan of every path made materializing quadratic:
    #: 8k files through 12 levels of links took 85 s, 130k would take hours).
    _kids: dict[str, set[str]] = field(default_factory=dict, init=False)
    #: While `seal` runs: every link's target, and the links not materialized yet.
    _targets: dict[str, str] = field(default_factory=dict, init=False)
    _pending: dict[str, str] = field(default_factory=dict, init=False)

    def _in_time(self) -> None:
        if self.until is not None and time.monotonic() > self.until:
            raise CheckoutOutOfTime("writing its files took longer than the time allowed "
                                    "for fetching")

    def _add(self, path: str) -> None:
        parent, name = posixpath.split(path)
        self._kids.setdefault(parent, set()).add(name)

    def _count(self, size: int) -> None:
        self._in_time()
        if len(self.files) + len(self.links) >= MAX_CHECKOUT_FILES:
            raise ArchiveRefused(f"it holds more than {MAX_CHECKOUT_FILES} files")
        self.total_bytes += size
        if self.total_bytes > MAX_CHECKOUT_BYTES:
            raise ArchiveRefused(f"its files hold more than {MAX_CHECKOUT_BYTES} bytes")

    def _claim(self, path: str) -> None:
        """Refuse a path already taken, or below a file or a link."""
        if path in self.files or path in self.links or path in self.dirs:
            raise ArchiveRefused(f"the path {_shown(path)} appears twice")
        parts = path.split("/")
        for end in range(1, len(parts)):
            above = "/".join(parts[:end])
            if above in self.files or above in self.links:
                raise ArchiveRefused(f"the path {_shown(path)} is below a file or a link")

    def _mkdirs(self, path: str) -> None:
        parts = path.split("/")
        for end in range(1, len(parts) + 1):
            here = "/".join(parts[:end])
            if here not in self.dirs:
                if len(self.dirs) > MAX_CHECKOUT_DIRS:
                    raise ArchiveRefused(f"it holds more than {MAX_CHECKOUT_DIRS} directories")
                self._claim(here)
                os.mkdir(self.root / here, 0o755)
                self.dirs.add(here)
                self._add(here)

    def _write(self, path: str, source: IO[bytes], size: int, executable: bool) -> None:
        self._count(size)
        self._claim(path)
        parent = posixpath.dirname(path)
        if parent:
            self._mkdirs(parent)
        fd = os.open(self.root / path,
                     os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                     0o755 if executable else 0o644)
        digest = hashlib.sha256()
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := source.read(min(1 << 20, size - written) or 1):
                written += len(chunk)
                if written > size:
                    raise ArchiveRefused(f"the file {_shown(path)} is longer than its header")
                digest.update(chunk)
                out.write(chunk)
        if written != size:
            raise ArchiveRefused(f"the file {_shown(path)} ended early")
        self.files[path] = digest.hexdigest()
        self._add(path)

    def unpack(self, archive: IO[bytes], prefix: str = "") -> None:
        """Write the members of the tar stream `archive` under `prefix`, or ArchiveRefused.

        Regular files and directories are written; a symbolic link is recorded for `seal`;
        anything else (a hard link, a device, a FIFO) is refused."""
        try:
            with tarfile.open(fileobj=archive, mode="r|", encoding="utf-8",
                              errors="surrogateescape") as tar:
                for member in tar:
                    self._member(tar, member, prefix)
        except (tarfile.TarError, EOFError) as error:
            raise ArchiveRefused(f"its archive does not read as tar ({error})") from None
        except OSError as error:  # what `_claim` did not foresee; never exit 4
            raise ArchiveRefused(f"its files could not be written ({error.strerror})") from None

    def _member(self, tar: tarfile.TarFile, member: tarfile.TarInfo, prefix: str) -> None:
        path = _checked_path(posixpath.join(prefix, member.name) if prefix else member.name)
        if member.isdir():
            self._mkdirs(path)
        elif member.isreg():
            source = tar.extractfile(member)
            assert source is not None  # a regular member always has its data
            self._write(path, source, member.size, bool(member.mode & 0o111))
        elif member.issym():
            if member.linkname.startswith("/") or not member.linkname:
                raise ArchiveRefused(f"the link {_shown(path)} points at "
                                     f"{_shown(member.linkname)}, outside the checkout")
            self._count(0)
            self._claim(path)
            parent = posixpath.dirname(path)
            if parent:
                self._mkdirs(parent)
            self.links[path] = member.linkname
            self._add(path)
        else:
            kind = "a hard link" if member.islnk() else "a device, FIFO or other special file"
            raise ArchiveRefused(f"the path {_shown(path)} is {kind}")

    def empty_dir(self, path: str) -> None:
        """The directory `path` exists and is empty (a submodule's place), or ArchiveRefused."""
        _checked_path(path)
        if path not in self.dirs:
            self._mkdirs(path)
        if any(p.startswith(path + "/") for p in (*self.files, *self.links)):
            raise ArchiveRefused(f"the submodule path {_shown(path)} already holds files")

    # -- links, materialized -----------------------------------------------------------

    def _resolve(self, link: str) -> str:
        """The path inside the checkout that `link` leads to, through further links."""
        links = self._targets or self.links
        parts = link.split("/")[:-1]
        pending = links[link].split("/")
        hops = 0
        while pending:
            part = pending.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if not parts:
                    raise ArchiveRefused(f"the link {_shown(link)} points outside the checkout")
                parts.pop()
                continue
            parts.append(part)
            here = "/".join(parts)
            if here in links:
                hops += 1
                target = links[here]
                if hops > MAX_LINK_HOPS or target.startswith("/"):
                    raise ArchiveRefused(f"the link {_shown(link)} loops or leaves the checkout")
                parts.pop()
                pending = target.split("/") + pending
        return "/".join(parts)

    def _children(self, directory: str) -> list[str]:
        """The names in `directory`: files, directories, and links (materialized or not)."""
        return sorted(self._kids.get(directory, ()))

    def _materialize(self, at: str, source: str) -> None:
        """Put a copy of the checkout's `source` (resolved, no link) at `at`."""
        self._in_time()
        _checked_path(at)
        if source in self.files:
            size = os.stat(self.root / source).st_size
            with open(self.root / source, "rb") as handle:
                self._write(at, handle, size, os.access(self.root / source, os.X_OK))
        elif source in self.dirs:
            if not source or at == source or at.startswith(source + "/"):
                raise ArchiveRefused(f"the link {_shown(at)} names a directory holding it")
            self._mkdirs(at)
            for name in self._children(source):
                inner = f"{source}/{name}" if source else name
                self._materialize(f"{at}/{name}", self._resolve(inner)
                                  if inner in self._targets else inner)
        else:
            raise ArchiveRefused(f"a link leads to {_shown(source)}, which is not in the checkout")

    def seal(self) -> dict[str, str]:
        """Every link materialized as a copy; every regular file's path and sha256."""
        resolved = {link: self._resolve(link) for link in sorted(self.links)}
        # Each link's place is free to write to from now on; `_resolve` and `_children`
        # still see the links not materialized yet through `_pending`.
        self._targets = dict(self.links)
        self._pending = dict(self.links)
        self.links.clear()
        try:
            for link, source in resolved.items():
                self._materialize(link, source)
                del self._pending[link]
        except OSError as error:
            raise ArchiveRefused(f"its files could not be written ({error.strerror})") from None
        return dict(self.files)


# -- git, hardened -------------------------------------------------------------------


def _cainfo() -> str | None:
    """The CA file for https, where the user named one for cargo (CARGO_HTTP_CAINFO, `[http]
    cainfo` in $CARGO_HOME/config.toml: read as cargo/registry.py reads them, a relative
    path made absolute, since git runs in a directory of its own) or for TLS at large
    (SSL_CERT_FILE): a corporate proxy's or a self-hosted git's CA. Registry downloads and
    git fetches trust the same CA, or a git pin failed where a registry pin worked."""
    named = HostCargo.read().cainfo
    if named is not None:
        return str(named[0])
    value = os.environ.get("SSL_CERT_FILE")
    return os.path.abspath(value) if value else None


class _StdoutReader(io.RawIOBase):
    """A running git's stdout as a file for tarfile; its stderr kept aside, bounded."""

    def __init__(self, stream: Stream) -> None:
        self._frames: Iterator[Any] = iter(stream)
        self._pending = b""
        self.stderr = bytearray()
        self.end: Exit | Failed | None = None

    def readable(self) -> bool:
        return True

    def _next(self) -> bool:
        frame = next(self._frames, None)
        if frame is None:
            return False
        if isinstance(frame, Output):
            if frame.stream == "stdout":
                self._pending = frame.data
            elif len(self.stderr) < MAX_ERROR_CHARS * 4:
                self.stderr += frame.data
        else:
            self.end = frame
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._pending:
            if self.end is not None or not self._next():
                return 0
        count = min(len(buffer), len(self._pending))
        buffer[:count] = self._pending[:count]
        self._pending = self._pending[count:]
        return count

    def drain(self) -> None:
        self._pending = b""
        while self.end is None and self._next():
            self._pending = b""


@dataclass
class _Git:
    """Host git, hardened, in a working directory of its own, against one deadline."""

    pin: Pin
    lockfile: Path
    tree: Path
    until: float
    work: Path
    repositories: int = 0
    #: The CA file git verifies with (`_cainfo`), read once per fetch.
    cainfo: str | None = field(default_factory=_cainfo)

    def refused(self, why: str) -> errors.PackageRefused:
        return errors.PackageRefused(self.lockfile, self.pin.described(), why, self.tree)

    def unreachable(self, url: str, why: str) -> errors.PackageSourceUnreachable:
        return errors.PackageSourceUnreachable(url, self.pin.described(), why, self.tree)

    def environment(self, repository: Path | None) -> dict[str, str]:
        env = {**_ENVIRONMENT, "HOME": str(self.work / "home"),
               "XDG_CONFIG_HOME": str(self.work / "home")}
        if repository is not None:
            env["GIT_DIR"] = str(repository)
        env.update({name: os.environ[name] for name in _PROXY_VARIABLES if os.environ.get(name)})
        return env

    def argv(self, args: list[str]) -> list[str]:
        configuration = list(_HARDENING)
        if self.cainfo:
            configuration.append(f"http.sslCAInfo={self.cainfo}")
        return [sys.executable, "-I", "-c", _LIMITED, str(MAX_PACK_BYTES), "git",
                *(item for pair in configuration for item in ("-c", pair)), *args]

    def remaining(self, url: str) -> float:
        left = self.until - time.monotonic()
        if left <= 0:
            raise self.unreachable(url, "the time allowed for fetching ran out")
        return left

    def spawn(self, repository: Path | None, args: list[str], url: str, max_bytes: int) -> Stream:
        return spawn_sandboxed(self.argv(args), env=self.environment(repository), cwd=self.work,
                               timeout=self.remaining(url), max_bytes=max_bytes)

    def run(self, repository: Path | None, args: list[str], url: str,
            max_bytes: int = MAX_GIT_OUTPUT) -> tuple[int | None, bytes, str]:
        """(exit status or None, stdout, why it failed as one line) of `git args`."""
        done = collect(self.spawn(repository, args, url, max_bytes))
        if done.timed_out:
            raise self.unreachable(url, "the time allowed for fetching ran out")
        if done.truncated:
            raise self.refused(f"git's answer about {_shown(url)} was larger than "
                               f"{max_bytes} bytes")
        return done.exit, done.stdout, _why(done.stderr, done.failure)

    def new_repository(self, url: str, commit: str) -> Path:
        self.repositories += 1
        repository = self.work / f"repository-{self.repositories}"
        object_format = "sha256" if len(commit) == 64 else "sha1"
        status, _, why = self.run(None, ["init", "--quiet", "--bare", "--template=",
                                              f"--object-format={object_format}",
                                              str(repository)], url)
        if status != 0:
            raise errors.InternalError(f"git init failed: {why}")
        return repository

    def fetch(self, url: str, commit: str, reference: tuple[str, str] | None) -> Path:
        """A new bare repository holding `commit` from `url` (and nothing else)."""
        repository = self.new_repository(url, commit)
        status, _, why = self.run(repository, ["fetch", "--quiet", "--depth=1", "--no-tags",
                                               "--", url, commit], url)
        self.check_size(url, why)
        if status == 0 and self.is_commit(repository, commit, url):
            return repository
        refspec = _fallback_refspec(reference)
        if refspec is None:
            raise self.unreachable(url, f"the commit {commit} could not be fetched ({why})")
        status, _, fallback_why = self.run(repository, ["fetch", "--quiet", "--depth=1",
                                                        "--no-tags", "--", url, refspec], url)
        self.check_size(url, fallback_why)
        if status != 0:
            raise self.unreachable(url, f"the commit {commit} could not be fetched ({why}); "
                                   f"nor {refspec} ({fallback_why})")
        status, tip, _ = self.run(repository, ["rev-parse", "--verify", "--quiet",
                                               "--end-of-options", "FETCH_HEAD^{commit}"], url)
        found = tip.decode("ascii", "replace").strip()
        if found != commit:
            raise self.refused(f"{_shown(url)} does not serve a commit by its id, and {refspec} "
                               f"there is now {_shown(found)}, not the pinned {commit} "
                               "(`cargo update` the dependency to pin what it serves)")
        return repository

    def check_size(self, url: str, why: str) -> None:
        """errors.PackageRefused when git's pack was cut at MAX_PACK_BYTES (`why`: git's
        message); nothing of it is kept (the work directory goes)."""
        if _CUT_OFF.search(why):
            raise self.refused(f"{_shown(url)} sent a pack larger than {MAX_PACK_BYTES} bytes "
                               "(MAX_PACK_BYTES) for the pinned commit; nothing was kept")

    def is_commit(self, repository: Path, commit: str, url: str) -> bool:
        status, kind, _ = self.run(repository, ["cat-file", "-t", commit], url)
        return status == 0 and kind.strip() == b"commit"

    def entries(self, repository: Path, commit: str, url: str) -> list[tuple[str, str, str, str]]:
        """(mode, type, object id and size, path) of every entry of the commit's tree."""
        status, out, why = self.run(repository, ["ls-tree", "-r", "-z", "-l", "--full-tree",
                                                 commit], url)
        if status != 0:
            raise self.unreachable(url, f"the commit {commit}'s files could not be listed ({why})")
        found = []
        for record in out.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            fields = meta.decode("ascii", "replace").split()
            if len(fields) != 4:
                raise self.refused(f"git listed an entry of {commit} it did not describe")
            found.append((fields[0], fields[1], f"{fields[2]} {fields[3]}",
                          path.decode("utf-8", "surrogateescape")))
        if len(found) > MAX_CHECKOUT_FILES:
            raise self.refused(f"it holds more than {MAX_CHECKOUT_FILES} files")
        return found

    def archive(self, repository: Path, commit: str, url: str, checkout: Checkout,
                prefix: str) -> None:
        """The commit's files into `checkout` under `prefix`, through `Checkout.unpack`."""
        left = MAX_CHECKOUT_BYTES - checkout.total_bytes
        room = left + _TAR_OVERHEAD * (MAX_CHECKOUT_FILES + 1)
        stream = self.spawn(repository, ["archive", "--format=tar", "--worktree-attributes",
                                         commit], url, room)
        with stream:
            reader = _StdoutReader(stream)
            try:
                checkout.unpack(io.BufferedReader(reader, 1 << 16), prefix)
            except CheckoutOutOfTime:
                raise self.unreachable(url, "the time allowed for fetching ran out") from None
            except ArchiveRefused as refused:
                raise self.refused(str(refused)) from None
            reader.drain()
        if isinstance(reader.end, Failed) and reader.end.code == "timeoutExceeded":
            raise self.unreachable(url, "the time allowed for fetching ran out")
        if not (isinstance(reader.end, Exit) and reader.end.code == 0):
            raise self.unreachable(url, f"the files of {commit} could not be read ("
                                   f"{_why(bytes(reader.stderr), None)})")

    def gitmodules(self, repository: Path, blob: str, url: str) -> dict[str, dict[str, str]]:
        """`.gitmodules` (the blob `blob`) as {name: {variable: value}}, parsed by git's
        config parser alone: no include followed, nothing acted on."""
        status, out, why = self.run(repository, ["config", "--blob", blob, "--no-includes",
                                                 "--null", "--list"], url,
                                    max_bytes=MAX_GITMODULES_BYTES * 2)
        if status != 0:
            raise self.refused(f"its .gitmodules does not parse ({why})")
        modules: dict[str, dict[str, str]] = {}
        for record in out.split(b"\0"):
            key, _, value = record.decode("utf-8", "surrogateescape").partition("\n")
            section, _, rest = key.partition(".")
            name, _, variable = rest.rpartition(".")
            if section == "submodule" and name:
                modules.setdefault(name, {}).setdefault(variable, value)
        return modules


def _why(stderr: bytes, failure: str | None) -> str:
    """The last lines git wrote, as one short line (what a refusal quotes)."""
    text = " ".join(stderr.decode("utf-8", "replace").split()) or failure or "no message"
    return text if len(text) <= MAX_ERROR_CHARS else "..." + text[-MAX_ERROR_CHARS:]


def _fallback_refspec(reference: tuple[str, str] | None) -> str | None:
    """What to fetch from a host that will not serve a commit by id: the pin's branch or
    tag, a full ref it names, or the default branch; None for a short commit id."""
    if reference is None:
        return "HEAD"
    kind, value = reference
    if not _REF_NAME.fullmatch(value) or ".." in value or "//" in value or value.endswith("/"):
        return None
    if kind == "branch":
        return f"refs/heads/{value}"
    if kind == "tag":
        return f"refs/tags/{value}"
    return value if value.startswith("refs/") else None


def submodule_url(parent: str, url: str) -> str | None:
    """`url` (a submodule's, from .gitmodules) resolved against its parent's URL as git
    resolves it (`./x`, `../x`), when the result is https without credentials; else None."""
    if url.startswith(("./", "../")):
        base = parent.rstrip("/")
        rest = url
        while rest.startswith(("./", "../")):
            if rest.startswith("./"):
                rest = rest[2:]
                continue
            rest = rest[3:]
            scheme_end = base.index("://") + 3
            if "/" not in base[scheme_end:]:
                return None  # above the host
            base = base.rsplit("/", 1)[0]
        url = f"{base}/{rest}" if rest else base
    if not _URL.fullmatch(url):
        return None
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return None
    host = parts.netloc.rsplit(":", 1)[0] if port is not None else parts.netloc
    if "@" in parts.netloc or not _HOST.fullmatch(host) or parts.query or parts.fragment:
        return None
    return url


def _submodules(git: _Git, repository: Path, url: str, commit: str, prefix: str,
                entries: list[tuple[str, str, str, str]]) -> list[tuple[str, str, str]]:
    """(path in the checkout, URL, commit) of every submodule of `commit`, each checked:
    a gitlink without a .gitmodules entry, or with a URL that is not https, is refused
    here, before any submodule is fetched."""
    gitlinks = [(path, oid.split()[0]) for mode, kind, oid, path in entries
                if mode == "160000" and kind == "commit"]
    if not gitlinks:
        return []
    where = f"the submodule of {prefix or 'the repository'}"
    modules_entry = [e for e in entries if e[3] == ".gitmodules"]
    if not modules_entry or modules_entry[0][1] != "blob":
        raise git.refused(f"{where} at {_shown(gitlinks[0][0])} has no .gitmodules entry")
    blob, size = modules_entry[0][2].split()
    if not size.isdigit() or int(size) > MAX_GITMODULES_BYTES:
        raise git.refused(f"the .gitmodules of {url} is larger than {MAX_GITMODULES_BYTES} bytes")
    by_path: dict[str, dict[str, str]] = {}
    for module in git.gitmodules(repository, blob, url).values():
        if "path" in module:
            by_path.setdefault(module["path"], module)
    found = []
    for path, oid in gitlinks:
        shown = posixpath.join(prefix, path) if prefix else path
        named = by_path.get(path, {}).get("url")
        if named is None:
            raise git.refused(f"its submodule at {_shown(shown)} has no URL in .gitmodules")
        resolved = submodule_url(url, named)
        if resolved is None:
            raise git.refused(f"its submodule at {_shown(shown)} has the URL "
                              f"{_shown(named)}, which is not https (only https is "
                              "fetched: file://, ssh:// and git:// reach what this host can "
                              "reach); nothing was fetched from it")
        if not _COMMIT.fullmatch(oid):
            raise git.refused(f"its submodule at {_shown(shown)} pins {_shown(oid)}")
        found.append((shown, resolved, oid))
    return found


def _fetch_tree(git: _Git, checkout: Checkout, url: str, commit: str,
                reference: tuple[str, str] | None, prefix: str, depth: int) -> None:
    """`commit` of `url` into `checkout` at `prefix`, its submodules after it."""
    repository = git.fetch(url, commit, reference)
    entries = git.entries(repository, commit, url)
    submodules = _submodules(git, repository, url, commit, prefix, entries)
    git.archive(repository, commit, url, checkout, prefix)
    shutil.rmtree(repository, ignore_errors=True)
    if submodules and depth >= MAX_SUBMODULE_DEPTH:
        raise git.refused(f"its submodules nest more than {MAX_SUBMODULE_DEPTH} deep")
    for path, sub_url, sub_commit in submodules:
        checkout.submodules += 1
        if checkout.submodules > MAX_SUBMODULES:
            raise git.refused(f"it has more than {MAX_SUBMODULES} submodules")
        try:
            checkout.empty_dir(path)
        except ArchiveRefused as refused:
            raise git.refused(str(refused)) from None
        _fetch_tree(git, checkout, sub_url, sub_commit, None, path, depth + 1)


@contextlib.contextmanager
def _work_directory() -> Iterator[Path]:
    """A directory of git's own (its empty HOME, its bare repositories) beside the store,
    removed at the end."""
    parent = store.packages_root() / "tmp"
    parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="git-", dir=parent))
    try:
        (work / "home").mkdir()
        yield work
    finally:
        shutil.rmtree(work, ignore_errors=True)


def fetch_checkout(pin: Pin, *, lockfile: Path, tree: Path, until: float) -> Path:
    """The store's checkout of the git pin `pin` (its files at the pinned commit, its
    submodules in place, sealed), fetched now unless the store has it.

    `until` is the time.monotonic() by which every git command must be done. Refusals:
    errors.PackageRefused (a submodule that is not https, a hostile file, a bound passed,
    a host that no longer serves the commit) and errors.PackageSourceUnreachable."""
    assert pin.kind == "git" and pin.rev is not None and _COMMIT.fullmatch(pin.rev)
    found = store.git_checkout(pin)
    if found is not None:
        return found[0]
    staging = store.git_staging(pin)
    try:
        with _work_directory() as work:
            git = _Git(pin, lockfile, tree, until, work)
            checkout = Checkout(staging, until)
            _fetch_tree(git, checkout, pin.url, pin.rev, pin.reference, "", 0)
            try:
                files = checkout.seal()
            except CheckoutOutOfTime:
                raise git.unreachable(pin.url, "the time allowed for fetching ran out") from None
            except ArchiveRefused as refused:
                raise git.refused(str(refused)) from None
        return store.keep_git_checkout(pin, staging, files)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise


# -- the package in a checkout, and its manifest ---------------------------------------

#: The dependency tables of a manifest (the underscore spellings: editions up to 2021).
DEPENDENCY_TABLES = ("dependencies", "dev-dependencies", "build-dependencies",
                     "dev_dependencies", "build_dependencies")
#: What `[package]` may inherit from `[workspace.package]` (cargo's list), and which of
#: those are paths relative to the workspace root.
INHERITABLE = frozenset({"authors", "categories", "description", "documentation", "edition",
                         "exclude", "homepage", "include", "keywords", "license",
                         "license-file", "publish", "readme", "repository", "rust-version",
                         "version"})
_PATH_FIELDS = frozenset({"license-file", "readme"})
#: What a dependency with `workspace = true` may add to the workspace's.
_DEPENDENCY_ADDS = frozenset({"workspace", "features", "optional", "default-features",
                              "default_features", "public"})

_HEADER = (b"# Written by pylint-sandbox from the git checkout's Cargo.toml, as `cargo vendor`\n"
           b"# writes it for a git package: workspace inheritance resolved, standalone.\n\n")


def _manifest(checkout: Path, directory: Path, pin: Pin, lockfile: Path,
              tree: Path | None) -> dict[str, Any]:
    path = directory / "Cargo.toml"
    try:
        return parse_tree_toml(path, read_tree_file(path, MANIFEST_MAX_BYTES))
    except errors.TreeFileRefused as refused:
        raise errors.PackageRefused(lockfile, pin.described(), f"its manifest "
                                    f"{_relative(checkout, path)} was not read: {refused.why}",
                                    tree) from None
    except ValueError:  # a path its manifests chose holds a NUL (`package.workspace`)
        raise errors.PackageRefused(lockfile, pin.described(), f"its manifest "
                                    f"{_shown(_relative(checkout, path))} was not read: its "
                                    "path holds a NUL byte (a workspace path a manifest "
                                    "named)", tree) from None


def _relative(checkout: Path, path: Path) -> str:
    return os.path.relpath(path, checkout)


def _candidates(checkout: Path) -> Iterator[Path]:
    """Every directory of the checkout holding a Cargo.toml, root first (cargo's search:
    `target` and hidden directories skipped), at most MAX_WALK_DIRS visited. Not the guest's
    copy's rules (vm/disks/share_image.py `excluded`): this finds a package as cargo does in a
    dependency's checkout, not what the guest sees of the worktree."""
    for visited, (directory, subdirs, files) in enumerate(os.walk(checkout), 1):
        if visited > MAX_WALK_DIRS:
            raise ArchiveRefused(f"it holds more than {MAX_WALK_DIRS} directories")
        subdirs[:] = sorted(d for d in subdirs if d != "target" and not d.startswith("."))
        if "Cargo.toml" in files:
            yield Path(directory)


def package_dir(checkout: Path, pin: Pin, *, lockfile: Path, tree: Path | None = None) -> Path:
    """The directory of the checkout whose Cargo.toml is the package `pin` names: the root
    when it is the package, else the one manifest below with that name (and, among several,
    that version); errors.PackageRefused when none or several are."""
    def refused(why: str) -> errors.PackageRefused:
        return errors.PackageRefused(lockfile, pin.described(), why, tree)

    named: list[Path] = []
    try:
        for directory in _candidates(checkout):
            try:
                manifest = _manifest(checkout, directory, pin, lockfile, tree)
            except errors.PackageRefused:
                continue  # another package's manifest that does not parse: not this one
            package = manifest.get("package")
            if isinstance(package, dict) and package.get("name") == pin.name:
                if directory == checkout:
                    return directory
                named.append(directory)
    except ArchiveRefused as error:
        raise refused(str(error)) from None
    if len(named) > 1:
        named = [d for d in named if _version(checkout, d, pin, lockfile, tree) == pin.version]
    if len(named) != 1:
        places = ", ".join(_relative(checkout, d) for d in named[:5])
        raise refused(f"no manifest in its repository names the package {pin.name}"
                      if not named else f"several manifests name the package {pin.name} at "
                      f"version {pin.version} ({places})")
    return named[0]


def _version(checkout: Path, directory: Path, pin: Pin, lockfile: Path,
             tree: Path | None) -> object:
    package = _manifest(checkout, directory, pin, lockfile, tree).get("package", {})
    version = package.get("version") if isinstance(package, dict) else None
    if isinstance(version, dict) and version.get("workspace") is True:
        with contextlib.suppress(errors.PackageRefused):
            root = _workspace_root(checkout, directory, package, pin, lockfile, tree)
            inherited = _manifest(checkout, root, pin, lockfile, tree).get("workspace")
            shared = inherited.get("package") if isinstance(inherited, dict) else None
            return shared.get("version") if isinstance(shared, dict) else None
        return None
    return version


def _inside(checkout: Path, path: str) -> bool:
    normal = os.path.normpath(path)
    return normal == str(checkout) or normal.startswith(str(checkout) + os.sep)


def _workspace_root(checkout: Path, directory: Path, package: dict[str, Any], pin: Pin,
                    lockfile: Path, tree: Path | None) -> Path:
    """The directory of the workspace `directory`'s package belongs to: `package.workspace`
    where it says, else the nearest manifest at or above it (inside the checkout) with a
    [workspace] table, as cargo searches."""
    explicit = package.get("workspace")
    if isinstance(explicit, str):
        root = os.path.normpath(directory / explicit)
        if not _inside(checkout, root):
            raise errors.PackageRefused(lockfile, pin.described(), "its `package.workspace` "
                                        f"{_shown(explicit)} leaves its repository", tree)
        return Path(root)
    here = directory
    while True:
        if (here / "Cargo.toml").is_file() and "workspace" in _manifest(checkout, here, pin,
                                                                         lockfile, tree):
            return here
        if here == checkout:
            raise errors.PackageRefused(lockfile, pin.described(), "it inherits from a "
                                        "workspace, and no Cargo.toml with [workspace] is "
                                        "above it in its repository", tree)
        here = here.parent


def _uses_workspace(value: object) -> bool:
    """Whether any table in `value` holds `workspace = true`. Walked with a stack: tomllib
    reads arrays a few hundred deep, and recursing over them passed Python's limit."""
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if item.get("workspace") is True:
                return True
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _dependency_tables(manifest: dict[str, Any]) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name as shown, table) of every dependency table, target-specific ones included."""
    for name in DEPENDENCY_TABLES:
        if isinstance(manifest.get(name), dict):
            yield name, manifest[name]
    targets = manifest.get("target")
    if isinstance(targets, dict):
        for cfg, table in targets.items():
            if isinstance(table, dict):
                for name in DEPENDENCY_TABLES:
                    if isinstance(table.get(name), dict):
                        yield f"target.{cfg}.{name}", table[name]


@dataclass
class _Normalizer:
    checkout: Path
    directory: Path
    pin: Pin
    lockfile: Path
    tree: Path | None
    workspace_root: Path | None = None
    workspace: Mapping[str, Any] = field(default_factory=dict)

    def refused(self, why: str) -> errors.PackageRefused:
        return errors.PackageRefused(self.lockfile, self.pin.described(), why, self.tree)

    def rebased(self, path: object, what: str) -> str:
        """A path relative to the workspace root, made relative to the package."""
        assert self.workspace_root is not None
        if not isinstance(path, str):
            raise self.refused(f"its workspace's {what} is not a path")
        target = os.path.normpath(self.workspace_root / path)
        if not _inside(self.checkout, target):
            raise self.refused(f"its workspace's {what} {_shown(path)} leaves its repository")
        return Path(os.path.relpath(target, self.directory)).as_posix()

    def section(self, name: str) -> dict[str, Any]:
        value = self.workspace.get(name)
        if not isinstance(value, dict):
            raise self.refused(f"it inherits from [workspace.{name}], which its workspace's "
                               "Cargo.toml does not have")
        return value

    def package(self, package: dict[str, Any]) -> None:
        for key, value in list(package.items()):
            if not (isinstance(value, dict) and "workspace" in value):
                continue
            if value != {"workspace": True} or key not in INHERITABLE:
                raise self.refused(f"its `package.{key}` inherits from the workspace in a way "
                                   "cargo does not support")
            inherited = self.section("package")
            if key not in inherited:
                raise self.refused(f"its `package.{key}` inherits from the workspace, whose "
                                   "[workspace.package] does not set it")
            package[key] = (self.rebased(inherited[key], f"package.{key}")
                            if key in _PATH_FIELDS and isinstance(inherited[key], str)
                            else inherited[key])
        package.pop("workspace", None)

    def dependency(self, where: str, name: str, own: dict[str, Any]) -> dict[str, Any]:
        if set(own) - _DEPENDENCY_ADDS:
            raise self.refused(f"its dependency {_shown(name)} in [{where}] sets "
                               f"{', '.join(sorted(set(own) - _DEPENDENCY_ADDS))} beside "
                               "`workspace = true`, which cargo does not allow")
        shared = self.section("dependencies").get(name)
        if isinstance(shared, str):
            shared = {"version": shared}
        if not isinstance(shared, dict):
            raise self.refused(f"its dependency {_shown(name)} in [{where}] inherits from the "
                               "workspace, whose [workspace.dependencies] does not have it")
        merged = dict(shared)
        if "path" in merged:
            merged["path"] = self.rebased(merged["path"], f"dependency {name}'s path")
        features = [*merged.get("features", []), *own.get("features", [])]
        if features or "features" in own:
            merged["features"] = features
        if "optional" in own:
            merged["optional"] = own["optional"]
        if own.get("default-features", own.get("default_features")) is True:
            merged.pop("default_features", None)
            merged["default-features"] = True
        if "public" in own:
            merged["public"] = own["public"]
        return merged

    def check_path(self, where: str, name: str, dependency: dict[str, Any]) -> None:
        path = dependency.get("path")
        if path is not None and not (isinstance(path, str) and _inside(
                self.checkout, os.path.normpath(self.directory / path))):
            raise self.refused(f"its dependency {_shown(name)} in [{where}] has the path "
                               f"{_shown(path)}, which leaves its repository")

    def manifest(self, manifest: dict[str, Any]) -> dict[str, Any]:
        out = dict(manifest)
        out.pop("workspace", None)
        if isinstance(out.get("package"), dict):
            out["package"] = dict(out["package"])
            self.package(out["package"])
        for where, table in _dependency_tables(out):
            for name, dependency in list(table.items()):
                if isinstance(dependency, dict) and "workspace" in dependency:
                    if dependency.get("workspace") is not True:
                        raise self.refused(f"its dependency {_shown(name)} in [{where}] has "
                                           "`workspace` other than true")
                    dependency = table[name] = self.dependency(where, name, dependency)
                if isinstance(dependency, dict):
                    self.check_path(where, name, dependency)
        lints = out.get("lints")
        if isinstance(lints, dict) and "workspace" in lints:
            if lints != {"workspace": True}:
                raise self.refused("its [lints] sets `workspace` beside other lints, which "
                                   "cargo does not allow")
            out["lints"] = self.section("lints")
        return out


def normalized_manifest(checkout: Path, package_dir: Path, pin: Pin, *, lockfile: Path,
                        tree: Path | None = None) -> bytes | None:
    """The Cargo.toml to give the guest for the package at `package_dir`, standalone as
    `cargo vendor` writes a git package's (cargo 1.95, measured): `x.workspace = true`
    under [package] taken from [workspace.package] (a `readme`/`license-file` path made
    relative to the package), `dep = { workspace = true, ... }` in every dependency table
    merged with [workspace.dependencies] (features added, `optional`, `default-features =
    true`; a path rebased), `[lints] workspace = true` replaced by [workspace.lints], and
    [workspace] and `package.workspace` dropped. Path dependencies keep their path: cargo
    matches them by name in the vendored source (their version alone would be looked up
    in crates.io, and `--locked` fails). None when nothing needs it.
    errors.PackageRefused for what cargo would not accept or this does not support."""
    manifest = _manifest(checkout, package_dir, pin, lockfile, tree)
    package = manifest.get("package")
    normalizer = _Normalizer(checkout, package_dir, pin, lockfile, tree)
    if not _uses_workspace(manifest):
        if "workspace" not in manifest and not (isinstance(package, dict)
                                                and "workspace" in package):
            for where, table in _dependency_tables(manifest):
                for name, dependency in table.items():
                    if isinstance(dependency, dict):
                        normalizer.check_path(where, name, dependency)
            return None
    else:
        root = _workspace_root(checkout, package_dir, package if isinstance(package, dict)
                               else {}, pin, lockfile, tree)
        workspace = _manifest(checkout, root, pin, lockfile, tree).get("workspace")
        normalizer.workspace_root = root
        normalizer.workspace = workspace if isinstance(workspace, dict) else {}
    try:
        return _HEADER + tomli_w.dumps(normalizer.manifest(manifest)).encode()
    except (TypeError, ValueError, RecursionError) as error:
        raise normalizer.refused(f"its normalized manifest could not be written "
                                 f"({_shown(str(error))})") from None
