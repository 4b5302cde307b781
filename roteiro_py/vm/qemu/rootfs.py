"""The guest's root filesystem: OCI image layers flattened into an ext4 image, cached.

Guarantees:
- Layers are applied in order with OCI whiteouts honoured: `.wh.NAME` deletes NAME from
  the layers below, `.wh..wh..opq` empties its directory of what the layers below put
  there (what the same layer adds is kept, whatever the member order).
- Extraction never writes outside the staging directory and never follows a link while
  writing: absolute member names, `..` components and names that are empty after
  normalisation refuse the image (`UnsafeLayer`); every file is created with
  O_NOFOLLOW|O_EXCL after its parents were made real directories (a symlink or file
  standing where a parent must be is replaced, as overlayfs would show it); a hardlink
  must name a regular file already extracted inside the tree; symlinks are stored as
  they are (they are never followed here, and in the guest they resolve inside the
  guest's root).
- Device nodes and FIFOs are dropped: the guest has its own /dev, and a device node in
  the image would be a way around it.
- setuid and setgid bits are stripped, and file capabilities (xattrs) are not copied:
  a lint image needs no privilege escalation, and the command runs unprivileged with
  no_new_privs on nosuid mounts anyway; stripping means the image has no such file at all.
- The image is built by `mkfs.ext4 -d` (no root, no loop device; no journal: the root is
  mounted read-only) into a temporary file and renamed into the cache, under a file
  lock per manifest digest, so two runs never race and a reader never sees half an image.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import subprocess
import tarfile
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Protocol

from filelock import FileLock

from roteiro_py import errors, paths

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


@contextlib.contextmanager
def _open_layer(layer: Layer) -> Iterator[tarfile.TarFile]:
    media = layer.media_type
    if media in MEDIA_TAR or media in MEDIA_GZIP:
        with layer.path.open("rb") as raw, tarfile.open(
                fileobj=raw, mode="r|gz" if media in MEDIA_GZIP else "r|") as archive:
            yield archive
        return
    if media in MEDIA_ZSTD:
        proc = subprocess.Popen(["zstd", "-dcq", str(layer.path)], stdout=subprocess.PIPE)
        assert proc.stdout is not None
        try:
            with tarfile.open(fileobj=proc.stdout, mode="r|") as archive:
                yield archive
        finally:
            proc.stdout.close()
            proc.kill()
            proc.wait()
        return
    raise UnsafeLayer(layer.digest, "", f"unsupported layer media type {media!r}")


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _real_parents(root: Path, rel: PurePosixPath) -> Path:
    """Make each parent of rel a real directory (replacing links/files), return the target."""
    current = root
    for part in rel.parts[:-1]:
        current = current / part
        try:
            st = os.lstat(current)
        except FileNotFoundError:
            os.mkdir(current, 0o755)
            continue
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(current)
            os.mkdir(current, 0o755)
    return current / rel.name


def _real_dir_chain(root: Path, rel_dir: PurePosixPath) -> bool:
    """True when `root/rel_dir` and every directory on the way are real directories.

    Whiteouts, opaque markers and hardlink sources name paths in earlier layers; a
    symlink in any component of such a path (`x -> /etc`, then `x/.wh.passwd`) would
    otherwise send the removal or the link to the host. Checking the member's own parents
    (`_real_parents`) is not enough: these paths are looked up, not created.
    """
    current = root
    for part in rel_dir.parts:
        current = current / part
        try:
            if not stat.S_ISDIR(os.lstat(current).st_mode):
                return False
        except FileNotFoundError:
            return False
    return True


def flatten(layers: Sequence[Layer], dest: Path) -> FlattenReport:
    """Apply `layers` bottom first into the empty directory `dest`."""
    report = FlattenReport()
    as_root = os.geteuid() == 0
    for layer in layers:
        added: set[PurePosixPath] = set()
        dir_modes: list[tuple[Path, int]] = []
        try:
            with _open_layer(layer) as archive:
                for member in archive:
                    if member.isdir() and not member.name.strip("./"):
                        continue  # the layer's own root entry ("./"): the tree exists already
                    rel = member_path(layer.digest, member.name)
                    base = rel.name
                    if base == OPAQUE:
                        target = dest / rel.parent
                        if _real_dir_chain(dest, rel.parent):
                            for child in target.iterdir():
                                crel = rel.parent / child.name
                                if not any(a == crel or crel in a.parents for a in added):
                                    _remove(child)
                        continue
                    if base.startswith(WHITEOUT):
                        victim = rel.parent / base[len(WHITEOUT):]
                        if victim.name in ("", ".", ".."):
                            raise UnsafeLayer(layer.digest, member.name, "invalid whiteout")
                        if _real_dir_chain(dest, rel.parent):
                            _remove(dest / victim)
                        continue
                    if member.ischr() or member.isblk() or member.isfifo():
                        report.dropped.append(str(rel))
                        continue
                    path = _real_parents(dest, rel)
                    mode = member.mode & 0o7777
                    if mode & (stat.S_ISUID | stat.S_ISGID) and not member.isdir():
                        report.stripped.append(str(rel))
                    mode &= ~(stat.S_ISUID | stat.S_ISGID) if not member.isdir() else 0o7777
                    existing = os.path.lexists(path)
                    if member.isdir():
                        if existing and not (path.is_dir() and not path.is_symlink()):
                            _remove(path)
                            existing = False
                        if not existing:
                            os.mkdir(path, 0o700)
                        dir_modes.append((path, mode & ~stat.S_ISUID))
                    else:
                        if existing:
                            _remove(path)
                        if member.issym():
                            os.symlink(member.linkname, path)
                        elif member.islnk():
                            link_rel = member_path(layer.digest, member.linkname)
                            if not _real_dir_chain(dest, link_rel.parent):
                                raise UnsafeLayer(layer.digest, member.name,
                                                  "hardlink through a symbolic link")
                            src = dest / link_rel
                            try:
                                st = os.lstat(src)
                            except FileNotFoundError as exc:
                                raise UnsafeLayer(layer.digest, member.name,
                                                  "hardlink to a missing file") from exc
                            if not stat.S_ISREG(st.st_mode):
                                raise UnsafeLayer(layer.digest, member.name,
                                                  "hardlink to something not a regular file")
                            os.link(src, path, follow_symlinks=False)
                        elif member.isfile():
                            source = archive.extractfile(member)
                            assert source is not None
                            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL |
                                         os.O_NOFOLLOW, 0o600)
                            with os.fdopen(fd, "wb") as out:
                                shutil.copyfileobj(source, out, 1 << 20)
                            os.chmod(path, mode)
                            report.files += 1
                        else:
                            report.dropped.append(str(rel))
                            continue
                    if as_root:
                        os.lchown(path, member.uid, member.gid)
                    if not member.issym():
                        os.utime(path, (member.mtime, member.mtime), follow_symlinks=False)
                    added.add(rel)
        except (tarfile.TarError, OSError, EOFError) as exc:
            if isinstance(exc, UnsafeLayer):
                raise
            raise UnsafeLayer(layer.digest, "", f"cannot be read: {exc}") from exc
        for path, mode in reversed(dir_modes):
            os.chmod(path, mode)
    return report


def _tree_size(root: Path) -> tuple[int, int]:
    size, count = 0, 0
    for dirpath, dirnames, filenames in os.walk(root):
        for name in (*dirnames, *filenames):
            count += 1
            with contextlib.suppress(OSError):
                size += os.lstat(os.path.join(dirpath, name)).st_size
    return size, count


def make_ext4(source: Path, image: Path, *, label: str = "rootfs") -> None:
    """An ext4 image holding `source`, sized to fit it (mkfs.ext4 -d, no root needed)."""
    size, count = _tree_size(source)
    blocks_kib = (int(size * 1.25) // 1024) + count * 4 + 16 * 1024
    inodes = count + 1024
    done = subprocess.run(
        ["mkfs.ext4", "-q", "-F", "-L", label, "-d", str(source), "-N", str(inodes),
         "-E", "root_owner=0:0", "-O", "^has_journal", "-b", "4096", str(image),
         f"{blocks_kib}k"], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise errors.ScratchUnavailable(image, f"mkfs.ext4 failed: {done.stderr.strip()[-300:]}")


def rootfs_image(layers: Sequence[Layer], manifest_digest: str) -> Path:
    """The cached ext4 root filesystem for this image, built once per manifest digest."""
    algo, _, hexd = manifest_digest.partition(":")
    if algo != "sha256" or len(hexd) != 64 or not all(c in "0123456789abcdef" for c in hexd):
        raise ValueError(f"not a sha256 manifest digest: {manifest_digest!r}")
    cache = paths.cache_root() / "rootfs"
    cache.mkdir(parents=True, exist_ok=True)
    image = cache / f"{hexd}.ext4"
    with FileLock(str(cache / f"{hexd}.lock")):
        if image.is_file():
            return image
        with tempfile.TemporaryDirectory(prefix=f".{hexd[:12]}-", dir=cache) as tmp:
            tree = Path(tmp) / "tree"
            tree.mkdir()
            flatten(layers, tree)
            staged = Path(tmp) / "image.ext4"
            make_ext4(tree, staged)
            os.replace(staged, image)
    return image
