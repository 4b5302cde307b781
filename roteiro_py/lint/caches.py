"""What a run reuses from earlier runs, and the one place each is made: the per-lockfile
view of the cargo cache (roteiro_py/cargo_view.py), the scratch disk (fresh per run, or
kept and locked with `--keep-cache`), and the root filesystem (per manifest digest,
checked against its sealed record on every use: vm/qemu/rootfs_record.py).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py import config, paths
from roteiro_py.errors import (
    DeadlineExceeded,
    LockfileWouldBeWritten,
    NoPackageCache,
    ScratchUnavailable,
)

if TYPE_CHECKING:
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.lint.preflight import Tree
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm.qemu.rootfs import RootFilesystem


def package_cache(tree: Tree, deadline: Deadline | None = None) -> tuple[Path | None, Path | None]:
    """Step 5: the tree has a lockfile, and the guest's view of the cargo cache holds
    exactly what it pins (roteiro_py/cargo_view.py): (view registry/, view git/).

    A tree whose lockfile pins nothing from a registry or git (only path dependencies)
    gets no view at all. A pinned package the host cache lacks is NoPackageCache naming it.
    """
    from roteiro_py.cargo_view import cargo_view, pins

    lockfile = tree.workspace / "Cargo.lock"
    if not os.path.lexists(lockfile):
        raise LockfileWouldBeWritten(tree.workspace, f"{lockfile} does not exist")
    cargo_home = paths.cargo_home().resolve()
    pinned = pins(lockfile)
    for kind in sorted({pin.kind for pin in pinned}):
        if not (cargo_home / kind).is_dir():
            raise NoPackageCache(cargo_home / kind, tree.asked)
    view = cargo_view(lockfile, cargo_home, tree.asked, pinned=pinned,
                      until=deadline.at if deadline else None,
                      seconds=deadline.seconds if deadline else 0.0)
    if view is None:
        return None, None
    registry, git = view / "registry", view / "git"
    return (registry if registry.is_dir() else None), (git if git.is_dir() else None)


def scratch_key(tree: Tree, manifest_digest: str, features: list[str]) -> str:
    material = json.dumps([str(tree.workspace), manifest_digest, sorted(features)])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@contextlib.contextmanager
def scratch_disk(settings: config.Settings, key: str,
                 deadline: Deadline | None = None) -> Iterator[Path]:
    """Step 6: the writable scratch disk, discarded at the end unless keep_cache.

    A kept disk is locked for the run: two lints of the same key take turns, they never
    share one ext4 image (qemu would refuse the second, and a shared cache would let one
    build see the other half-written). Only making the disk is reported as the scratch
    being unavailable; what fails while it is in use propagates as itself.
    """
    from filelock import FileLock, Timeout

    from roteiro_py.vm.qemu.scratch import create_scratch

    size = settings.vm.scratch_mib
    if settings.lint.keep_cache:
        builds = paths.cache_root() / "builds"
        disk = builds / f"{key}.ext4"
        try:
            builds.mkdir(parents=True, exist_ok=True)
            # another lint of the same key is waited for within the run's deadline only
            lock = FileLock(str(builds / f"{key}.lock"), timeout=-1 if deadline is None
                            else max(deadline.at - time.monotonic(), 0.0))
            lock.acquire()
        except Timeout:
            assert deadline is not None
            raise DeadlineExceeded("waiting for another lint using the same kept cache",
                                   deadline.seconds, stopped="the VM was not started") from None
        except OSError as error:
            raise ScratchUnavailable(builds, error.strerror or str(error)) from None
        try:
            if not disk.is_file():
                create_scratch(disk, size)
            yield disk
        finally:
            lock.release()
        return
    scratch_dir = paths.cache_root() / "scratch"
    disk = scratch_dir / f"{uuid.uuid4().hex}.ext4"
    try:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        _sweep(scratch_dir)
    except OSError as error:
        raise ScratchUnavailable(scratch_dir, error.strerror or str(error)) from None
    try:
        create_scratch(disk, size)
        yield disk
    finally:
        with contextlib.suppress(FileNotFoundError):
            disk.unlink()


def _sweep(scratch_dir: Path) -> None:
    """Remove scratch disks left behind by runs killed without unwinding (SIGKILL, power loss)."""
    import time

    from roteiro_py.vm.qemu.shareimage import STALE_SECONDS

    cutoff = time.time() - STALE_SECONDS
    for leftover in scratch_dir.glob("*.ext4"):
        with contextlib.suppress(OSError):
            if leftover.lstat().st_mtime < cutoff:
                leftover.unlink()


def root_filesystem(image: ResolvedImage, store_root: Path, deadline: Deadline) -> RootFilesystem:
    """The image's root filesystem: built once per manifest digest from layers hashed as they
    are flattened, checked against its sealed record on every later use (a copy written
    since is rebuilt, never booted): vm/qemu/rootfs.py, rootfs_record.py.

    A layer blob that does not hash to its digest is found here, not by the store (which
    checks layers by size per lint): it is the image not being provisioned, and prefetch
    (which re-hashes every blob and fetches the damaged one again) is the way forward."""
    from roteiro_py.errors import ImageNotProvisioned
    from roteiro_py.vm.qemu.rootfs import FlattenLimits, LayerDamaged, rootfs_image

    try:
        return rootfs_image(image.layers, image.manifest_digest,
                            FlattenLimits(until=deadline.at, seconds=deadline.seconds))
    except LayerDamaged as damaged:
        raise ImageNotProvisioned(image.reference, store_root, str(damaged)) from None
