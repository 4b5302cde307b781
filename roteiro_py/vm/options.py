"""The one value a VM backend is built from: `VmOptions`, what any backend needs to build
the VMs of one run (its disks, the machine, the limits, templates, what the user is told).

`VmOptions.of(settings.vm, ...)` takes the `[vm]` settings and the run's own disks, so the
conductor names no backend's parameters and a second backend reads the same value (as
rustwide's SandboxBuilder). Apart from vm/api.py because it reads the settings model and
the copy's caps (pydantic, vm/disks/share_image.py): vm/api.py loads with every
roteiro_py.vm module (vm/mounts.py included, which cargo/ and clippy/ read), this only
when a backend is built.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from roteiro_py import errors
from roteiro_py.config import VmSettings
from roteiro_py.progress import SILENT, Progress
from roteiro_py.vm.disks.share_image import StageLimits
from roteiro_py.vm.mounts import GUEST_SCRATCH
from roteiro_py.vocabulary import ACCELS, Accel

#: Bytes in a MiB (the settings count in MiB, a backend in bytes).
MIB = 1024 * 1024


@dataclass(frozen=True)
class VmOptions:
    """Everything a backend needs to build the VMs of one run, in one typed value; it
    refuses a combination no backend can build (an unknown accelerator, a dependency cache
    without its directory or outside the scratch) when it is made.

    The machine's defaults are those of a bare backend (tests, benches: a small 256 MiB
    guest); a lint's come from `[vm]`, through `of`.
    """

    # -- the run's disks ---------------------------------------------------------------
    #: The root filesystem image the guest boots (read-only).
    rootfs: Path
    #: What the caller verified the root filesystem as (lint: the sealed digest of the
    #: cached root filesystem); part of a VM template's key with the file's identity.
    rootfs_identity: str = ""
    #: The scratch disk, mounted at vm/mounts.py GUEST_SCRATCH: the one writable place.
    #: None: the run has none, and a write grant is refused.
    scratch: Path | None = None
    #: A dependency cache (roteiro_py/depcache/: a read-only ext4 image) the guest layers
    #: under `dep_cache_guest`, a directory on the scratch, with the scratch taking every
    #: write (guest_init.sh mount_depcache). Both or neither.
    dep_cache: Path | None = None
    dep_cache_guest: str | None = None
    # -- the machine ([vm] accel, cpus, memory_mib, kernel, initrd) --------------------
    accel: Accel = "auto"
    cpus: int = 2
    memory_mib: int = 256
    #: A guest kernel and initramfs instead of the provisioned ones; None: those.
    kernel: Path | None = None
    initrd: Path | None = None
    # -- the limits ([vm] output_limit_mib, stage_max_*; by default [vm]'s defaults) ---
    #: Bytes kept over all step streams together; past it the VM is stopped.
    output_limit: int = field(default_factory=lambda: VmSettings().output_limit_mib * MIB)
    #: The caps of the copies of the trees a run shares.
    stage: StageLimits = field(default_factory=lambda: StageLimits.of(VmSettings()))
    # -- templates and what the user is told ([vm] template) ---------------------------
    #: Whether runs given `template_steps` restore from a VM template.
    template: bool = True
    #: Where the templates are kept; None: the cache's own place.
    template_root: Path | None = None
    #: Told the backend's stages (progress.py WORKTREE, BOOT, RESTORE; then, from the
    #: guest, TOOLCHAIN, CLIPPY).
    progress: Progress = SILENT

    def __post_init__(self) -> None:
        if self.accel not in ACCELS:
            raise errors.UsageError(f"[vm] accel must be one of {', '.join(ACCELS)}, "
                                    f"not {self.accel!r}")
        if (self.dep_cache is None) != (self.dep_cache_guest is None):
            raise ValueError("a dependency cache needs both its image and its guest directory")
        if self.dep_cache_guest is not None and not (
                self.scratch is not None
                and PurePosixPath(GUEST_SCRATCH) in PurePosixPath(self.dep_cache_guest).parents):
            raise ValueError(f"the dependency cache's directory {self.dep_cache_guest} is not "
                             f"under the scratch disk's {GUEST_SCRATCH}")

    @classmethod
    def of(cls, vm: VmSettings, *, rootfs: Path, rootfs_identity: str = "",
           scratch: Path | None = None, dep_cache: Path | None = None,
           dep_cache_guest: str | None = None, progress: Progress = SILENT) -> VmOptions:
        """The options of a run under the `[vm]` settings `vm`, with the run's own disks."""
        return cls(rootfs=rootfs, rootfs_identity=rootfs_identity, scratch=scratch,
                   dep_cache=dep_cache, dep_cache_guest=dep_cache_guest,
                   accel=vm.accel, cpus=vm.cpus, memory_mib=vm.memory_mib,
                   kernel=Path(vm.kernel) if vm.kernel else None,
                   initrd=Path(vm.initrd) if vm.initrd else None,
                   output_limit=vm.output_limit_mib * MIB, stage=StageLimits.of(vm),
                   template=vm.template, progress=progress)
