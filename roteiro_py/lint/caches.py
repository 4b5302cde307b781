"""What a run reuses from earlier runs, and the one place each is made: the per-lockfile
vendored view of its dependencies (roteiro_py/cargo/vendor.py), the scratch disk (fresh per run, or
kept and locked with `--keep-cache`, trusted only with its manifest: lint/freshness.py),
and the root filesystem (per manifest digest, checked against its sealed record on every
use: vm/disks/rootfs_record.py). The view and the root filesystem are held for the run
(`cargo_in_use`, `root_filesystem_in_use`: their locks shared from the check until the
VM is done, roteiro_py/locks.py), a kept scratch disk exclusive for the run.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py import config, paths
from roteiro_py.errors import (
    ImageNotProvisioned,
    LockfileWouldBeWritten,
    ScratchUnavailable,
)

if TYPE_CHECKING:
    from roteiro_py.cargo.vendor import GuestCargo
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.lint.tree import Tree
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm.api import JobOutcome
    from roteiro_py.vm.disks.rootfs import RootFilesystem
    from roteiro_py.vm.stamps import StampBook


def package_cache(tree: Tree, deadline: Deadline | None = None) -> tuple[Path | None, Path | None]:
    """`guest_cargo`'s view: (view registry/, view git/)."""
    cargo = guest_cargo(tree, deadline)
    return cargo.registry, cargo.git


def guest_cargo(tree: Tree, deadline: Deadline | None = None) -> GuestCargo:
    """`cargo_in_use`, the view's lock let go at once: for what boots no VM on it (tests,
    benchmarks). A lint holds it for its run."""
    with cargo_in_use(tree, deadline) as cargo:
        return cargo


@contextlib.contextmanager
def cargo_in_use(tree: Tree, deadline: Deadline | None = None) -> Iterator[GuestCargo]:
    """Step 5: the tree has a lockfile, every package it pins is in the package store
    (filled by `fetch-deps`), and the guest's vendored view holds exactly those packages,
    unpacked from verified archives (roteiro_py/cargo/vendor.py). The view is held (its
    lock shared) for the block: the run's VMs read it, and no prune removes it before
    they are done.

    A tree whose lockfile pins nothing from a registry or git (only path dependencies)
    gets no view at all. Pins the store lacks are NoPackageCache naming them, before
    anything is unpacked or booted; a pin the host would not fetch (not https, no
    checksum) is errors.PackageRefused naming it.
    """
    # lazy: lint/__init__.py imports this stage at its top, so cargo/vendor.py (ssl, git,
    # tarfile) would load on the refusals before any VM (bench/cli_startup.py)
    from roteiro_py.cargo.lockfile import read_pins
    from roteiro_py.cargo.vendor import vendored_in_use

    lockfile = tree.workspace / "Cargo.lock"
    if not os.path.lexists(lockfile):
        raise LockfileWouldBeWritten(tree.workspace, f"{lockfile} does not exist")
    lock = read_pins(lockfile)
    with vendored_in_use(lock, tree.asked, until=deadline.at if deadline else None,
                         seconds=deadline.seconds if deadline else 0.0) as cargo:
        yield cargo


def scratch_key(tree: Tree, manifest_digest: str, features: list[str],
                dep_cache: str | None = None) -> str:
    """A kept scratch's key; a kept build layered over a dependency cache is kept per
    cache (its files are the upper layer of that cache's overlay)."""
    material = json.dumps([str(tree.workspace), manifest_digest, sorted(features)]
                          + ([dep_cache] if dep_cache else []))
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@dataclass
class Scratch:
    """The run's scratch disk and the stamps its copy of the worktree carries.

    `manifest`: where a kept disk's manifest is written back once the run's job has
    completed (`settle`); None for a disk used once."""

    disk: Path
    book: StampBook
    manifest: Path | None = None
    made: float = field(default_factory=time.monotonic)

    def settle(self, job: JobOutcome) -> None:
        """Remember this run's stamps beside a kept disk, if its job completed with a
        plausible clock (lint/freshness.py); otherwise the disk stays untrusted."""
        from roteiro_py.lint import freshness  # lazy: the VM layer (vm/stamps.py); see scratch_disk

        if self.manifest is None or not job.completed:
            return
        if freshness.plausible_end(self.book, job.guest_clock, time.monotonic() - self.made):
            assert job.guest_clock is not None
            freshness.remember(self.manifest, self.book, job.guest_clock)


@contextlib.contextmanager
def scratch_disk(settings: config.Settings, key: str,
                 deadline: Deadline | None = None) -> Iterator[Scratch]:
    """Step 6: the writable scratch disk, discarded at the end unless keep_cache.

    A kept disk is locked for the run: two lints of the same key take turns, they never
    share one ext4 image (qemu would refuse the second, and a shared cache would let one
    build see the other half-written). It is reused only with a valid manifest
    (lint/freshness.py), which is removed for the length of the run: a kept disk without
    one is made afresh. Only making the disk is reported as the scratch being
    unavailable; what fails while it is in use propagates as itself.
    """
    # lazy, as every VM-side import of this module: lint/__init__.py imports its stages at
    # its top, so what they import at theirs is paid by the refusals before any VM (no image,
    # a tag: bench/cli_startup.py); freshness pulls vm/ and process/, locks filelock
    from roteiro_py.lint import freshness
    from roteiro_py.locks import acquire_within
    from roteiro_py.vm.disks.scratch import create_scratch
    from roteiro_py.vm.stamps import StampBook

    size = settings.vm.scratch_mib
    if settings.lint.keep_cache:
        builds = paths.cache_root() / "builds"
        disk = builds / f"{key}.ext4"
        try:
            builds.mkdir(parents=True, exist_ok=True)
            # another lint of the same key is waited for within the run's deadline only
            lock = acquire_within(builds / f"{key}.lock",
                                  until=None if deadline is None else deadline.at,
                                  seconds=0.0 if deadline is None else deadline.seconds,
                                  waiting_for="another lint using the same kept cache")
        except OSError as error:
            raise ScratchUnavailable(builds, error.strerror or str(error)) from None
        try:
            manifest = freshness.manifest_path(disk)
            previous = freshness.read_manifest(manifest)
            freshness.forget(manifest)
            if previous is None:
                with contextlib.suppress(FileNotFoundError):
                    disk.unlink()
            if not disk.is_file():
                create_scratch(disk, size)
            yield Scratch(disk, freshness.book_for(previous), manifest)
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
        yield Scratch(disk, StampBook.fresh())
    finally:
        with contextlib.suppress(FileNotFoundError):
            disk.unlink()


def _sweep(scratch_dir: Path) -> None:
    """Remove scratch disks left behind by runs killed without unwinding (SIGKILL, power loss)."""
    # lazy: the VM's disks (scratch_disk says why)
    from roteiro_py.vm.disks.share_image import STALE_SECONDS

    cutoff = time.time() - STALE_SECONDS
    for leftover in scratch_dir.glob("*.ext4"):
        with contextlib.suppress(OSError):
            if leftover.lstat().st_mtime < cutoff:
                leftover.unlink()


def root_filesystem(image: ResolvedImage, store_root: Path, deadline: Deadline) -> RootFilesystem:
    """`root_filesystem_in_use`, its lock let go at once (for what boots nothing from it)."""
    with root_filesystem_in_use(image, store_root, deadline) as found:
        return found


@contextlib.contextmanager
def root_filesystem_in_use(image: ResolvedImage, store_root: Path,
                           deadline: Deadline) -> Iterator[RootFilesystem]:
    """The image's root filesystem, held (its lock shared) for the block, so that no prune
    removes it before the run's VMs are done with it: built once per manifest digest from
    layers hashed as they are flattened, checked against its sealed record on every later
    use (a copy written since is rebuilt, never booted): vm/disks/rootfs.py, rootfs_record.py.

    A layer blob that does not hash to its digest is found here, not by the store (which
    checks layers by size per lint): it is the image not being provisioned, and prefetch
    (which re-hashes every blob and fetches the damaged one again) is the way forward.

    The image itself is held too (store/layout.py `Store.in_use`: its use lock shared, its
    last use recorded), from before the root filesystem's check, so `cache remove-image`
    never takes its blobs or its root filesystem from under this run."""
    # lazy: the VM's disks (scratch_disk says why)
    from roteiro_py.store import Store
    from roteiro_py.vm.disks.rootfs import FlattenLimits, LayerDamaged, rootfs_in_use

    try:
        with Store(store_root).in_use(image, until=deadline.at, seconds=deadline.seconds), \
                rootfs_in_use(image.layers, image.manifest_digest,
                              FlattenLimits(until=deadline.at, seconds=deadline.seconds)) as found:
            yield found
    except LayerDamaged as damaged:
        raise ImageNotProvisioned(image.reference, store_root, str(damaged)) from None
