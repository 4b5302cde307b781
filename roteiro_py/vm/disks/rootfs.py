"""The guest's root filesystem: OCI image layers flattened into an ext4 image, cached.

Guarantees:
- Layers are applied in order with OCI whiteouts honoured: `.wh.NAME` deletes NAME from
  the layers below, `.wh..wh..opq` empties its directory of what the layers below put
  there (what the same layer adds is kept, whatever the member order).
- Extraction never changes anything outside the staging directory and never follows a
  link, for any operation (create, mkdir of parents, chmod, chown, utime, hardlink,
  whiteout, opaque marker, the directory modes applied at the end of a layer): each is
  made relative to a directory fd reached from the root component by component with
  O_NOFOLLOW|O_DIRECTORY, never through a path string the image could have redirected.
  Absolute member names, `..` components and names that are empty after normalisation
  refuse the image (`UnsafeLayer`); a symlink or file standing where a parent must be is
  replaced by a directory, as overlayfs would show it; a hardlink must name a regular
  file already extracted inside the tree; symlinks are stored as they are (never
  followed here; in the guest they resolve inside the guest's root).
- One image flattens into at most MAX_FLATTENED_BYTES of file content (a sparse member
  counts its logical size; data tarfile reads through unwritten, behind a whiteout or
  an unknown member type, counts too) and MAX_FLATTENED_ENTRIES files and directories, checked
  before and while each member is written; past either the image is refused naming
  the layer, the member and the cap. Header values a host call cannot take (owners
  outside 32 bits, a NUL in a link target) refuse the image; mtimes are clamped.
- A missing host tool (mkfs.ext4, zstd) is `HostToolMissing`, naming its Debian package.
  Each runs through the process layer (process/tool.py): its process group killed at the
  run's deadline (DeadlineExceeded), its output bounded (zstd's at `decompressed_bound`,
  past which the layer is refused), never an exception the boundary does not know.
- Device nodes and FIFOs are dropped: the guest has its own /dev, and a device node in
  the image would be a way around it.
- setuid and setgid bits are stripped, and file capabilities (xattrs) are not copied:
  a lint image needs no privilege escalation, and the command runs unprivileged with
  no_new_privs on nosuid mounts anyway; stripping means the image has no such file at all.
- The image is built by `mkfs.ext4 -d` (no root, no loop device; no journal: the root is
  mounted read-only) into a temporary file and renamed into the cache, under a file
  lock per manifest digest held exclusive, so two runs never race and a reader never
  sees half an image; a run using it holds that lock shared until its VM is done
  (`rootfs_in_use`), so no prune removes it meanwhile, and records that use
  (`<hex>.ext4.used`, eviction.record_use): nothing else tells when an image was last booted.
- Every layer blob is hashed as it is read (raw bytes, through decompression to EOF): a
  blob that does not match its digest is `LayerDamaged` (the conductor says
  ImageNotProvisioned, naming it, with prefetch as the way forward), including one whose
  damage broke the archive reader, and nothing is cached. A layer is therefore verified
  whenever it is used, while `Store.resolve` checks layers by size only.
- The cached image is sealed when built and checked on every use (`rootfs_record.py`:
  what that catches and what it does not); `rootfs_image` returns its path and the
  sealed sha256, the identity a snapshot template keys on.
- A build killed half way (SIGKILL, power loss) leaves its temporary directory, up to
  MAX_FLATTENED_BYTES, in the cache; the next use of the cache removes every such
  directory whose digest's lock nobody holds (no build of it is running).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import shutil
import stat
import tarfile
import tempfile
import threading
import time
import zlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import IO, BinaryIO, Protocol, cast

from roteiro_py import errors, paths
from roteiro_py.eviction import record_use, used_record
from roteiro_py.locks import acquire_within, held_shared, taken_if_free
from roteiro_py.process.tool import DIAGNOSTIC_BYTES, Late, reading_stdout, run_tool, write_all
from roteiro_py.store.tarheaders import BoundedTarInfo
from roteiro_py.vm.disks import rootfs_record

MEDIA_TAR = (
    "application/vnd.oci.image.layer.v1.tar",
    "application/vnd.docker.image.rootfs.diff.tar",
)
MEDIA_GZIP = (
    "application/vnd.oci.image.layer.v1.tar+gzip",
    "application/vnd.docker.image.rootfs.diff.tar.gzip",
)
MEDIA_ZSTD = ("application/vnd.oci.image.layer.v1.tar+zstd",)

WHITEOUT = ".wh."
OPAQUE = ".wh..wh..opq"

#: Caps on what one image may flatten into, checked as each member is written. The
#: toolchain image (754 MB of layers) flattens to about 2 GB and 40,000 entries; these
#: leave room for images several times larger and stop a sparse or tiny-file bomb long
#: before it fills the cache's disk or its inodes.
MAX_FLATTENED_BYTES = 16 * 1024**3
MAX_FLATTENED_ENTRIES = 1_000_000
#: Path components in one member name: bounds the directory walk and the recursion of a
#: removal (shutil.rmtree recurses per level); real images stay under 30.
MAX_MEMBER_DEPTH = 256
#: Owners are 32-bit on Linux; -1 would mean "leave unchanged" to chown.
MAX_ID = 2**32 - 2
#: Member mtimes are clamped to 0..this (year 2106): far past any real image, and a
#: header's 12-digit or pax value cannot overflow os.utime.
MAX_MTIME = 2**32 - 1
COPY_CHUNK = 1 << 20
#: Bytes of tar headers and padding counted per entry in what zstd may write for one
#: layer (`decompressed_bound`): a header block, a pax record, the padding of a member.
TAR_BYTES_PER_ENTRY = 4096
#: Seconds zstd may take for one layer, and mkfs.ext4 for one image, when no run's
#: deadline bounds them (a lint always has one; tests and the bench may not): a bound
#: for a tool that hangs, far past what a working host takes for an image within the caps.
DECOMPRESS_TIMEOUT_S = 3600.0
MKFS_TIMEOUT_S = 3600.0

#: Host tools spawned here and the Debian package that provides each.
HOST_TOOL_PACKAGES = {"mkfs.ext4": "e2fsprogs", "e2fsck": "e2fsprogs", "resize2fs": "e2fsprogs",
                      "zstd": "zstd"}

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC


class Layer(Protocol):
    """What the image store hands over for each layer, bottom first."""

    @property
    def digest(self) -> str: ...
    @property
    def media_type(self) -> str: ...
    @property
    def path(self) -> Path: ...


#: Refusal for a layer that would escape the tree or cannot be read (errors.py owns it).
UnsafeLayer = errors.UnsafeImageLayer


@dataclass(frozen=True)
class FlattenLimits:
    """The caps one flatten enforces (tests and the bench pass small ones)."""

    max_bytes: int = MAX_FLATTENED_BYTES
    max_entries: int = MAX_FLATTENED_ENTRIES
    #: The run's deadline (time.monotonic()) and its length for the refusal: a lint run
    #: flattens before it boots, and a layer of a million tiny members is minutes of work.
    until: float | None = None
    seconds: float = 0.0


@dataclass
class FlattenReport:
    files: int = 0
    dropped: list[str] = field(default_factory=list)  # device nodes, fifos
    stripped: list[str] = field(default_factory=list)  # setuid/setgid bits removed


def member_path(digest: str, name: str) -> PurePosixPath:
    """The normalised relative path of a member, or UnsafeLayer."""
    if name.startswith("/") or "\0" in name:
        raise UnsafeLayer(digest, name, "absolute member name")
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if any(p == ".." for p in parts):
        raise UnsafeLayer(digest, name, "`..` in member name")
    if not parts:
        raise UnsafeLayer(digest, name, "empty member name")
    return PurePosixPath(*parts)


class _Blob:
    """A layer blob's raw bytes, hashed as they are read (the `read` tarfile and the zstd
    pump call), so flattening verifies the blob in the same pass that unpacks it."""

    def __init__(self, raw: IO[bytes]) -> None:
        self._raw = raw
        self._hash = hashlib.sha256()
        self.size = 0

    def read(self, amount: int = -1) -> bytes:
        data = self._raw.read(amount)
        self._hash.update(data)
        self.size += len(data)
        return data

    def digest_to_end(self, check_time: Callable[[], None]) -> str:
        """The digest of the whole blob: what the decompressor left unread (a gzip trailer,
        the tar's end blocks, trailing bytes) is read here, within the run's deadline."""
        while self.read(COPY_CHUNK):
            check_time()
        return f"sha256:{self._hash.hexdigest()}"


class LayerDamaged(Exception):
    """A layer blob's bytes do not hash to its digest: the store's copy was damaged or
    changed after prefetch verified it. Nothing is cached from it. The conductor, which
    knows the image's reference, turns this into ImageNotProvisioned naming the blob."""

    def __init__(self, digest: str, actual: str, size: int) -> None:
        self.digest = digest
        self.actual = actual
        self.size = size
        super().__init__(f"the layer blob {digest} is damaged: its {size} bytes hash to "
                         f"{actual}")


@contextlib.contextmanager
def _open_layer(layer: Layer, blob: _Blob, limits: FlattenLimits) -> Iterator[tarfile.TarFile]:
    media = layer.media_type
    if media in MEDIA_TAR or media in MEDIA_GZIP:
        # A stream mode ("r|") calls only read(); typeshed's fileobj type asks for more.
        with tarfile.open(fileobj=cast("IO[bytes]", blob), mode="r|gz" if media in MEDIA_GZIP else "r|",
                          tarinfo=BoundedTarInfo) as archive:
            yield archive
        return
    if media in MEDIA_ZSTD:
        purpose = f"decompress the image layer {layer.digest}"
        zstd = host_tool("zstd", purpose)
        timeout, late = _tool_deadline(limits, "decompressing an image layer",
                                       DECOMPRESS_TIMEOUT_S)
        with reading_stdout([zstd, "-dcq"], purpose=purpose, timeout=timeout,
                            max_bytes=decompressed_bound(limits), late=late) as (out, stream):
            assert stream.stdin is not None
            stop = threading.Event()
            pump = threading.Thread(target=_pump, args=(blob, stream.stdin, stop), daemon=True)
            pump.start()
            try:
                with tarfile.open(fileobj=cast("IO[bytes]", out), mode="r|",
                                  tarinfo=BoundedTarInfo) as archive:
                    yield archive
            finally:
                stop.set()
                stream.close()  # zstd's group is killed, its stdin closed: the pump ends
                pump.join()
        return
    raise UnsafeLayer(layer.digest, "", f"unsupported layer media type {media!r}")


def decompressed_bound(limits: FlattenLimits) -> int:
    """Bytes zstd may write for one layer: what the flatten may write, plus the tar
    headers and padding of as many entries as it may hold. The flatten's own caps stop a
    bomb of member data sooner; this bounds one of headers (each extended header may hold
    tarheaders.MAX_HEADER_DATA, and whiteouts cost no byte of the budget)."""
    return limits.max_bytes + limits.max_entries * TAR_BYTES_PER_ENTRY


def _pump(blob: _Blob, sink: BinaryIO, stop: threading.Event) -> None:
    """Feed zstd the blob through the hasher; what is left when zstd stops reading is
    hashed by `digest_to_end` after this thread has ended (one reader at a time)."""
    try:
        while not stop.is_set() and (chunk := blob.read(COPY_CHUNK)):
            write_all(sink, chunk)
    except (OSError, ValueError):  # zstd exited (a damaged or hostile stream) or was
        pass  # killed, and its stdin was closed under us (ValueError: closed file)
    finally:
        with contextlib.suppress(OSError):
            sink.close()


def _tool_deadline(limits: FlattenLimits | None, what: str,
                   fallback: float) -> tuple[float, Late | None]:
    """A host tool's deadline: what is left of the run's, refused as DeadlineExceeded when
    it passes; without a run deadline (tests, the bench) `fallback` seconds, refused as
    errors.HostToolFailed."""
    left = _left(limits, what)
    if left < 0:
        return fallback, None
    return left, lambda: _late(limits, what)


def host_tool(tool: str, purpose: str) -> str:
    """The absolute path of a host tool, or HostToolMissing naming its Debian package.

    Without it a missing `mkfs.ext4` or `zstd` surfaced as FileNotFoundError, exit 4.
    """
    where = shutil.which(tool)
    if where is None:
        raise errors.HostToolMissing(tool, HOST_TOOL_PACKAGES[tool], purpose)
    return where


class _Budget:
    """What one image has written so far, refused the moment a cap would be passed.

    A 10 KB GNU-sparse layer once flattened into 3.1 GB: the caps bound the host's disk
    and inodes whatever the layer's compressed size, and sparse members count their
    full logical size (that is what gets written).
    """

    def __init__(self, limits: FlattenLimits) -> None:
        self.limits = limits
        self.bytes = 0
        self.entries = 0

    def check_time(self) -> None:
        """Refuse once the run's deadline has passed (checked per member and per chunk)."""
        if self.limits.until is not None and time.monotonic() > self.limits.until:
            raise errors.DeadlineExceeded("flattening the image into its root filesystem",
                                          self.limits.seconds,
                                          stopped="the VM was not started")

    def check_bytes(self, layer: Layer, name: str, amount: int) -> None:
        """Refuse now if writing `amount` more bytes would pass the cap."""
        self.check_time()
        if self.bytes + amount > self.limits.max_bytes:
            raise UnsafeLayer(layer.digest, name,
                              f"the flattened image would pass {self.limits.max_bytes} bytes, "
                              "the cap on a flattened image (rootfs.MAX_FLATTENED_BYTES)")

    def add_bytes(self, layer: Layer, name: str, amount: int) -> None:
        self.check_bytes(layer, name, amount)
        self.bytes += amount

    def add_entry(self, layer: Layer, name: str) -> None:
        self.check_time()
        if self.entries + 1 > self.limits.max_entries:
            raise UnsafeLayer(layer.digest, name,
                              f"the flattened image would pass {self.limits.max_entries} files "
                              "and directories (whiteouts and dropped members count too), "
                              "the cap on a flattened image (rootfs.MAX_FLATTENED_ENTRIES)")
        self.entries += 1


def _lstat(dir_fd: int, name: str) -> os.stat_result | None:
    try:
        return os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None


def _remove_entry(dir_fd: int, name: str) -> None:
    """Remove `name` inside dir_fd whatever it is; a directory goes with its content.

    shutil.rmtree with dir_fd works through file descriptors on Linux and never
    follows a link inside the tree it removes.
    """
    st = _lstat(dir_fd, name)
    if st is None:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _open_dir(dir_fd: int, name: str) -> int | None:
    """An fd of the real directory `name` in dir_fd; None if it is absent or not one."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # a link, a file, a fifo
            return None
        raise


def _walk(root_fd: int, parts: Sequence[str], *,
          made: Callable[[str], None] | None = None) -> int | None:
    """An fd of root/parts[0]/parts[1]/..., every step opened O_NOFOLLOW|O_DIRECTORY.

    Nothing here resolves a path string that the image could have redirected: each
    component is looked up relative to the fd of the real directory before it. With
    `made` (a member's own parents), a component that is missing is created and one
    that is a link or a file is replaced by a directory (as overlayfs shows it), and
    `made` is told of each directory created. Without it (whiteouts, opaque markers,
    hardlink sources, the final chmod), such a path gives None: it is looked up, and
    a link on the way is not the directory the image named.
    The caller closes the fd.
    """
    fd = os.dup(root_fd)
    try:
        for part in parts:
            nxt = _open_dir(fd, part)
            if nxt is None:
                if made is None:
                    os.close(fd)
                    return None
                _remove_entry(fd, part)
                made(part)
                os.mkdir(part, 0o755, dir_fd=fd)
                nxt = os.open(part, _DIR_FLAGS, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _clamp_time(value: float) -> float:
    return min(max(float(value), 0.0), float(MAX_MTIME))


def _ids(layer: Layer, member: tarfile.TarInfo) -> tuple[int, int]:
    if not (0 <= member.uid <= MAX_ID and 0 <= member.gid <= MAX_ID):
        raise UnsafeLayer(layer.digest, member.name,
                          f"owner {member.uid}:{member.gid} is outside 0..{MAX_ID}")
    return member.uid, member.gid


def flatten(layers: Sequence[Layer], dest: Path, limits: FlattenLimits | None = None) -> FlattenReport:
    """Apply `layers` bottom first into the empty directory `dest`.

    Every operation (create, chmod, chown, utime, link, whiteout, opaque marker, the
    mkdir of parents) is made relative to a directory fd reached component by component
    with O_NOFOLLOW (`_walk`): a hostile layer once planted `x -> /host/dir` after a
    directory `x` of mode 0777, and the chmod applied at the end of the layer followed
    the link and made the host directory world-writable.
    """
    report = FlattenReport()
    budget = _Budget(limits or FlattenLimits())
    root_fd = os.open(dest, _DIR_FLAGS)
    try:
        for layer in layers:
            _apply_layer(layer, root_fd, budget, report)
    finally:
        os.close(root_fd)
    return report


def _apply_layer(layer: Layer, root_fd: int, budget: _Budget, report: FlattenReport) -> None:
    """Unpack one layer, hashing its raw blob on the way: a blob whose bytes do not match
    its digest is LayerDamaged, whether it unpacked or broke the archive reader."""
    try:
        raw = layer.path.open("rb")
    except OSError as exc:
        raise UnsafeLayer(layer.digest, "", f"cannot be read: {exc}") from exc
    with raw:
        blob = _Blob(raw)
        try:
            dir_meta = _unpack(layer, blob, root_fd, budget, report)
        except UnsafeLayer as exc:
            # A flipped byte in a gzip layer reads as a broken archive; the bytes say
            # whether the store's copy is damaged (prefetch) or the image is bad as built.
            _check_digest(layer, blob, budget, exc)
            raise
        _check_digest(layer, blob, budget, None)
    _set_dir_meta(root_fd, dir_meta)


def _check_digest(layer: Layer, blob: _Blob, budget: _Budget, cause: Exception | None) -> None:
    """LayerDamaged unless the whole blob hashes to the layer's digest."""
    actual = blob.digest_to_end(budget.check_time)
    if actual != layer.digest:
        raise LayerDamaged(layer.digest, actual, blob.size) from cause


def _unpack(layer: Layer, blob: _Blob, root_fd: int, budget: _Budget,
            report: FlattenReport) -> list[tuple[PurePosixPath, int, float]]:
    as_root = os.geteuid() == 0
    # Paths this layer added, and every directory above them: an opaque marker keeps them.
    kept: set[PurePosixPath] = set()
    dir_meta: list[tuple[PurePosixPath, int, float]] = []
    try:
        with _open_layer(layer, blob, budget.limits) as archive:
            for member in archive:
                # a stream keeps every member (with its copy of global pax keys) otherwise;
                # `members` is public tarfile API that typeshed leaves out
                archive.members.clear()  # type: ignore[attr-defined]
                if member.isdir() and not member.name.strip("./"):
                    # the layer's own root entry ("./"): the tree exists already
                    budget.add_entry(layer, member.name)
                    continue
                rel = member_path(layer.digest, member.name)
                if len(rel.parts) > MAX_MEMBER_DEPTH:
                    raise UnsafeLayer(layer.digest, member.name,
                                      f"more than {MAX_MEMBER_DEPTH} path components "
                                      "(rootfs.MAX_MEMBER_DEPTH)")
                if "\0" in member.linkname:
                    raise UnsafeLayer(layer.digest, member.name, "link target holds a NUL byte")
                if _apply_member(layer, archive, member, rel, root_fd, budget, report,
                                 dir_meta, kept, as_root):
                    kept.add(rel)
                    kept.update(rel.parents)
                else:  # a whiteout or a dropped member: no entry, but a member to loop over
                    budget.add_entry(layer, member.name)
    except (tarfile.TarError, OSError, EOFError, zlib.error, ValueError) as exc:
        # ValueError: tarfile's own parsing of a GNU sparse 1.0 map (`int(b"abc")`, a map
        # cut short) raises it, not TarError, for bytes the layer chose.
        raise UnsafeLayer(layer.digest, "", f"cannot be read: {exc}") from exc
    return dir_meta


def _set_dir_meta(root_fd: int, dir_meta: list[tuple[PurePosixPath, int, float]]) -> None:
    for rel, mode, mtime in reversed(dir_meta):
        fd = _walk(root_fd, rel.parts)
        if fd is None:
            continue  # replaced later in the layer by a link or a file: nothing to chmod
        try:
            os.fchmod(fd, mode)
            os.utime(fd, (mtime, mtime))
        finally:
            os.close(fd)


def _apply_member(layer: Layer, archive: tarfile.TarFile, member: tarfile.TarInfo,
                  rel: PurePosixPath, root_fd: int, budget: _Budget, report: FlattenReport,
                  dir_meta: list[tuple[PurePosixPath, int, float]], kept: set[PurePosixPath],
                  as_root: bool) -> bool:
    """Apply one member; True when it added something to the tree."""
    base = rel.name
    skipped = ((member.isreg() and base.startswith(WHITEOUT))
               or member.type not in tarfile.SUPPORTED_TYPES)
    if skipped and member.size > 0:
        # tarfile reads through the data of these members without our writing it: a
        # zstd layer could make a whiteout "hold" 100 GB of zeros to decompress. It
        # counts against the same cap as what is written.
        budget.add_bytes(layer, member.name, member.size)
    if base == OPAQUE:
        fd = _walk(root_fd, rel.parent.parts)
        if fd is not None:
            try:
                for name in os.listdir(fd):
                    if rel.parent / name not in kept:
                        _remove_entry(fd, name)
            finally:
                os.close(fd)
        return False
    if base.startswith(WHITEOUT):
        victim = base[len(WHITEOUT):]
        if victim in ("", ".", ".."):
            raise UnsafeLayer(layer.digest, member.name, "invalid whiteout")
        fd = _walk(root_fd, rel.parent.parts)
        if fd is not None:
            try:
                _remove_entry(fd, victim)
            finally:
                os.close(fd)
        return False
    if member.ischr() or member.isblk() or member.isfifo():
        report.dropped.append(str(rel))
        return False
    if not (member.isdir() or member.issym() or member.islnk() or member.isfile()):
        report.dropped.append(str(rel))
        return False
    uid, gid = _ids(layer, member)
    mtime = _clamp_time(member.mtime)
    mode = member.mode & 0o7777
    if member.isdir():
        mode &= ~stat.S_ISUID
    else:
        if mode & (stat.S_ISUID | stat.S_ISGID):
            report.stripped.append(str(rel))
        mode &= ~(stat.S_ISUID | stat.S_ISGID)
    if member.isfile():
        budget.check_bytes(layer, member.name, member.size)  # before a byte is written
    pfd = _walk(root_fd, rel.parts[:-1],
                made=lambda _part: budget.add_entry(layer, member.name))
    assert pfd is not None
    try:
        existing = _lstat(pfd, base)
        if member.isdir():
            if existing is not None and not stat.S_ISDIR(existing.st_mode):
                _remove_entry(pfd, base)
                existing = None
            if existing is None:
                budget.add_entry(layer, member.name)
                os.mkdir(base, 0o700, dir_fd=pfd)
            if as_root:
                os.chown(base, uid, gid, dir_fd=pfd, follow_symlinks=False)
            dir_meta.append((rel, mode, mtime))
            return True
        if existing is not None:
            _remove_entry(pfd, base)
        budget.add_entry(layer, member.name)
        if member.issym():
            os.symlink(member.linkname, base, dir_fd=pfd)
        elif member.islnk():
            _hardlink(layer, member, root_fd, pfd, base)
        else:
            _write_file(layer, archive, member, pfd, base, mode, budget)
            report.files += 1
        if as_root:
            os.chown(base, uid, gid, dir_fd=pfd, follow_symlinks=False)
        if not member.issym():
            os.utime(base, (mtime, mtime), dir_fd=pfd, follow_symlinks=False)
        return True
    finally:
        os.close(pfd)


def _hardlink(layer: Layer, member: tarfile.TarInfo, root_fd: int, pfd: int, base: str) -> None:
    link_rel = member_path(layer.digest, member.linkname)
    sfd = _walk(root_fd, link_rel.parts[:-1])
    if sfd is None:
        raise UnsafeLayer(layer.digest, member.name, "hardlink through a symbolic link")
    try:
        st = _lstat(sfd, link_rel.name)
        if st is None:
            raise UnsafeLayer(layer.digest, member.name, "hardlink to a missing file")
        if not stat.S_ISREG(st.st_mode):
            raise UnsafeLayer(layer.digest, member.name,
                              "hardlink to something not a regular file")
        os.link(link_rel.name, base, src_dir_fd=sfd, dst_dir_fd=pfd, follow_symlinks=False)
    finally:
        os.close(sfd)


def _write_file(layer: Layer, archive: tarfile.TarFile, member: tarfile.TarInfo, pfd: int,
                base: str, mode: int, budget: _Budget) -> None:
    source = archive.extractfile(member)
    assert source is not None
    fd = os.open(base, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                 0o600, dir_fd=pfd)
    with os.fdopen(fd, "wb") as out:
        while chunk := source.read(COPY_CHUNK):
            budget.add_bytes(layer, member.name, len(chunk))
            out.write(chunk)
        os.fchmod(out.fileno(), mode)


def _tree_size(root: Path) -> tuple[int, int]:
    """(bytes of content, entries) in `root`, each inode's bytes counted once.

    Counting every name asked mkfs.ext4 for 20 PiB when a layer hardlinked one 16 GiB
    file a million times (each link costs one entry and no byte of the flatten budget).
    """
    size, count = 0, 0
    seen: set[tuple[int, int]] = set()
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            count += 1
            with contextlib.suppress(OSError):
                st = os.lstat(os.path.join(dirpath, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    size += st.st_size
    return size, count


def make_ext4(source: Path, image: Path, *, label: str = "rootfs",
              timeout: float | None = None, late: Late | None = None,
              fixed_time: int | None = None) -> None:
    """An ext4 image holding `source`, sized to fit it (mkfs.ext4 -d, no root needed).

    `timeout`: seconds after which mkfs.ext4's process group is killed (a share image is
    built within what is left of the run's deadline), refused as `late()`; without one,
    MKFS_TIMEOUT_S, refused as errors.HostToolFailed (process/tool.py).
    `fixed_time`: the time (epoch seconds) of the image's root directory, which mkfs.ext4
    would otherwise set to its own clock (every other entry keeps the seconds of its
    source: e2fsprogs 1.47.0, measured), via E2FSPROGS_FAKE_TIME."""
    size, count = _tree_size(source)
    blocks_kib = (int(size * 1.25) // 1024) + count * 4 + 16 * 1024
    inodes = count + 1024
    purpose = f"build the ext4 image {image}"
    mkfs = host_tool("mkfs.ext4", purpose)
    done = run_tool(
        [mkfs, "-q", "-F", "-L", label, "-d", str(source), "-N", str(inodes),
         "-E", "root_owner=0:0", "-O", "^has_journal", "-b", "4096", str(image),
         f"{blocks_kib}k"], purpose=purpose,
        timeout=MKFS_TIMEOUT_S if timeout is None else timeout, max_bytes=DIAGNOSTIC_BYTES,
        env=None if fixed_time is None else {"E2FSPROGS_FAKE_TIME": str(fixed_time)},
        late=None if timeout is None else late)
    if done.exit != 0:
        said = done.stderr.decode("utf-8", "replace").strip()[-300:]
        raise errors.ScratchUnavailable(image, f"mkfs.ext4 failed: {said}")


#: resize2fs -M passes at most: its estimate of the smallest size is generous on a large
#: filesystem, and a second pass on the smaller one took an image holding 27 MB from
#: 86 MB to 33 MB (a third changed nothing).
SHRINK_PASSES = 3
#: resize2fs's last word on the size it made: "... is now 47270 (4k) blocks long.", or
#: when it is as small as it gets "... is already 8157 (4k) blocks long.  Nothing to do!"
_RESIZED = re.compile(rb"is (?:now|already) (\d{1,12}) \((\d{1,2})k\) blocks long")


def shrink_ext4(path: Path, timeout: float, late: Late | None = None) -> int:
    """Shrink the ext4 image at `path` to the smallest size that holds its data and return
    it: `e2fsck -f -y` (resize2fs needs a checked filesystem), then `resize2fs -M` until it
    shrinks no more (SHRINK_PASSES), the file cut to the size resize2fs reports after each
    (it cuts a regular file itself; this makes sure).

    Why: an image's holes are written out by a copy that does not keep them (GNU tar
    without --sparse, as actions/cache calls it). For a read-only image only: it keeps next
    to no free space. A failure is errors.ScratchUnavailable quoting the tool.

    Only for an image whose every byte the host wrote (the root filesystem, made here by
    mkfs.ext4 from the image's layers), never for one a guest's kernel wrote (a scratch
    disk, a dependency cache): e2fsck and resize2fs parse the filesystem's metadata, and
    e2fsprogs has had memory-safety bugs on crafted filesystems (CVE-2019-5094,
    CVE-2022-1304), so a guest that owns its kernel would own the host through them
    (vm/disks/scratch.py)."""
    ext4_tool(path, "e2fsck", ["-f", "-y"], (0, 1), timeout, late)
    size = path.stat().st_size
    for _ in range(SHRINK_PASSES):
        resized = _RESIZED.search(ext4_tool(path, "resize2fs", ["-M"], (0,), timeout, late))
        if resized is None:
            raise errors.ScratchUnavailable(path, "resize2fs did not say the size it made")
        made = int(resized.group(1)) * int(resized.group(2)) * 1024
        if path.stat().st_size > made:
            os.truncate(path, made)
        if made >= size:
            break
        size = made
    return size


def ext4_tool(path: Path, tool: str, args: list[str], fine: tuple[int, ...], timeout: float,
              late: Late | None = None) -> bytes:
    """Run an e2fsprogs `tool` on the image: its output, or ScratchUnavailable quoting it
    when its exit is not one of `fine`."""
    purpose = f"shrink the ext4 image {path}"
    done = run_tool([host_tool(tool, purpose), *args, str(path)], purpose=purpose,
                    timeout=timeout, max_bytes=DIAGNOSTIC_BYTES, late=late)
    said = done.stdout + done.stderr
    if done.exit not in fine:
        tail = said.decode("utf-8", "replace").strip()[-300:]
        raise errors.ScratchUnavailable(path, f"{tool} exited {done.exit}: {tail}")
    return said


#: A build's temporary directory in the cache: `.<manifest hex>-<random>`.
_BUILD_DIR = re.compile(r"\.([0-9a-f]{64})-[A-Za-z0-9_]+")


def _sweep_stale_builds(cache: Path, locked: str | None = None) -> None:
    """Remove build directories left by killed builds: those of `locked` (whose lock the
    caller holds exclusive), and of any digest whose lock can be taken now. A live build
    holds its lock for as long as its directory exists, so its directory is never taken."""
    with os.scandir(cache) as entries:
        stale = [(m.group(1), e.path) for e in entries
                 if (m := _BUILD_DIR.fullmatch(e.name)) and e.is_dir(follow_symlinks=False)]
    for hexd, where in stale:
        if hexd == locked:
            shutil.rmtree(where, ignore_errors=True)
            continue
        with taken_if_free(cache / f"{hexd}.lock") as free:
            if free:  # else being built right now
                shutil.rmtree(where, ignore_errors=True)


@dataclass(frozen=True)
class RootFilesystem:
    """The cached root filesystem a VM boots: its path, and its identity as sealed at build
    (digest: "sha256:<hex>" of the ext4 image, rootfs_record.py), which is what a snapshot
    template of a machine booted from it is keyed on."""

    path: Path
    digest: str


def rootfs_image(layers: Sequence[Layer], manifest_digest: str,
                 limits: FlattenLimits | None = None) -> RootFilesystem:
    """`rootfs_in_use`, its lock let go at once: for what boots nothing from it afterwards
    in this run (provisioning, benchmarks, tests). A lint holds it (`rootfs_in_use`)."""
    with rootfs_in_use(layers, manifest_digest, limits) as found:
        return found


@contextlib.contextmanager
def rootfs_in_use(layers: Sequence[Layer], manifest_digest: str,
                  limits: FlattenLimits | None = None) -> Iterator[RootFilesystem]:
    """The cached ext4 root filesystem for this image, held for the block: its lock held
    shared from the check that finds it sealed until the block ends (locks.held_shared),
    so that no prune removes it before qemu has opened it or while a VM reads it, and
    lints of one image check and use it side by side. Built once per manifest digest under
    the lock held exclusive (flattened within `limits`, the run's deadline among them; its
    layers hashed as they are read, LayerDamaged when one does not match), and on every
    later use checked against the record sealed at build: an image written since is
    rebuilt, never booted. The layers are read only to build it: a lint with the image
    cached reads none."""
    algo, _, hexd = manifest_digest.partition(":")
    if algo != "sha256" or len(hexd) != 64 or not all(c in "0123456789abcdef" for c in hexd):
        raise ValueError(f"not a sha256 manifest digest: {manifest_digest!r}")
    cache = paths.cache_root() / "rootfs"
    cache.mkdir(parents=True, exist_ok=True)
    image = cache / f"{hexd}.ext4"
    what = "another run building the root filesystem"
    _left(limits, f"waiting for {what}")  # none left: refused before the lock file is made
    _sweep_stale_builds(cache)

    def sealed() -> RootFilesystem | None:
        record = rootfs_record.check(image)
        return None if record is None else RootFilesystem(image, record.digest)

    with held_shared(rootfs_record.lock_path(image), until=limits.until if limits else None,
                     seconds=limits.seconds if limits else 0.0, waiting_for=what,
                     check=sealed, build=lambda: _build_image(layers, image, hexd, limits),
                     what="root filesystem", where=image) as found:
        record_use(used_record(image))  # its last use, for `cache prune` (eviction.py)
        yield found


def _build_image(layers: Sequence[Layer], image: Path, hexd: str,
                 limits: FlattenLimits | None) -> None:
    """Build `image` under its lock held exclusive, unless a run that held it first built
    it already (or it is sealed and intact after all)."""
    cache = image.parent
    what = "another run building or using the root filesystem"
    lock = acquire_within(rootfs_record.lock_path(image),
                          until=limits.until if limits else None,
                          seconds=limits.seconds if limits else 0.0, waiting_for=what)
    try:
        _sweep_stale_builds(cache, hexd)
        if rootfs_record.check(image) is not None:
            return
        rootfs_record.discard(image)  # written since it was sealed, or never sealed
        with tempfile.TemporaryDirectory(prefix=f".{hexd}-", dir=cache) as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            flatten(layers, tree, limits)
            staged = Path(tmp) / "image.ext4"
            what = "building the root filesystem image"
            timeout, late = _tool_deadline(limits, what, MKFS_TIMEOUT_S)
            make_ext4(tree, staged, timeout=timeout, late=late)
            # mkfs.ext4 -d is given 25 % room to fit; the image is read-only from here, and
            # that room is holes a cache's tar writes out (1,082,740,736 -> 837,713,920
            # bytes for the test suite's 1.95 toolchain image, 0.7 s)
            timeout, late = _tool_deadline(limits, what, MKFS_TIMEOUT_S)
            shrink_ext4(staged, timeout, late)
            os.replace(staged, image)
        rootfs_record.seal(image)
    finally:
        lock.release()


def _late(limits: FlattenLimits | None, what: str) -> errors.DeadlineExceeded:
    return errors.DeadlineExceeded(what, limits.seconds if limits else 0.0,
                                   stopped="the VM was not started")


def _left(limits: FlattenLimits | None, what: str) -> float:
    """Seconds left of the run's deadline (-1: none, wait for ever, as filelock reads it);
    DeadlineExceeded when none are left. The flatten is bounded by it, and so are the wait
    for another run's build of the same image and mkfs.ext4 (minutes for a big image)."""
    if limits is None or limits.until is None:
        return -1
    left = limits.until - time.monotonic()
    if left <= 0:
        raise _late(limits, what)
    return left
