"""vm/options.py: a backend's options are the `[vm]` settings a lint resolved, each one
reaching the backend (none left at a bare default), and a combination no backend can
build is refused when the options are made."""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.config import VmSettings
from roteiro_py.progress import SILENT
from roteiro_py.vm.disks.share_image import StageLimits
from roteiro_py.vm.mounts import GUEST_SCRATCH
from roteiro_py.vm.options import VmOptions


def test_of_carries_every_vm_setting_a_backend_builds_from() -> None:
    vm = VmSettings(accel="tcg", cpus=3, memory_mib=640, output_limit_mib=5, stage_max_mib=7,
                    stage_max_files=11, stage_max_depth=13, kernel="/k/vmlinuz", initrd="/k/initrd",
                    template=False)
    options = VmOptions.of(vm, rootfs=Path("/r.ext4"), rootfs_identity="sha256:r",
                           scratch=Path("/s.img"), dep_cache=Path("/d.img"),
                           dep_cache_guest=f"{GUEST_SCRATCH}/target")
    assert options == VmOptions(
        rootfs=Path("/r.ext4"), rootfs_identity="sha256:r", scratch=Path("/s.img"),
        dep_cache=Path("/d.img"), dep_cache_guest=f"{GUEST_SCRATCH}/target", accel="tcg", cpus=3,
        memory_mib=640, kernel=Path("/k/vmlinuz"), initrd=Path("/k/initrd"), output_limit=5 << 20,
        stage=StageLimits(max_bytes=7 << 20, max_files=11, max_depth=13), template=False,
        progress=SILENT)
    # control: the defaults differ from every value above, so a setting dropped by `of` shows
    assert all(getattr(VmOptions(rootfs=Path("/r.ext4")), name) != getattr(options, name)
               for name in ("rootfs_identity", "scratch", "dep_cache", "dep_cache_guest", "accel",
                            "cpus", "memory_mib", "kernel", "initrd", "output_limit", "stage",
                            "template"))


def test_without_settings_the_limits_are_the_settings_defaults() -> None:
    bare, of_defaults = VmOptions(rootfs=Path("/r")), VmOptions.of(VmSettings(), rootfs=Path("/r"))
    assert (bare.output_limit, bare.stage) == (of_defaults.output_limit, of_defaults.stage)


def test_an_unknown_accelerator_is_refused_as_usage() -> None:
    with pytest.raises(errors.UsageError, match="auto, kvm, tcg, not 'hvf'"):
        VmOptions(rootfs=Path("/r"), accel="hvf")  # type: ignore[arg-type]


@pytest.mark.parametrize(("scratch", "guest", "why"), [
    (Path("/s.img"), None, "needs both"),
    (Path("/s.img"), "/target", "not under the scratch"),
    (Path("/s.img"), GUEST_SCRATCH, "not under the scratch"),  # the scratch itself: not a directory on it
    (None, f"{GUEST_SCRATCH}/target", "not under the scratch"),  # no scratch to take the writes
])
def test_a_dependency_cache_goes_only_in_a_directory_of_the_scratch(
        scratch: Path | None, guest: str | None, why: str) -> None:
    with pytest.raises(ValueError, match=why):
        VmOptions(rootfs=Path("/r"), scratch=scratch, dep_cache=Path("/d.img"), dep_cache_guest=guest)
    VmOptions(rootfs=Path("/r"), scratch=Path("/s.img"), dep_cache=Path("/d.img"),
              dep_cache_guest=f"{GUEST_SCRATCH}/target")  # control: the one place it may go
