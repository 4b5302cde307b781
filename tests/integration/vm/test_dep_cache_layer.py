"""The dependency cache's layer in a real guest (guest_init.sh mount_depcache).

A cache is a read-only disk another VM wrote; a run sees it under a directory of its
scratch with its own writes going to the scratch. What a run writes there, a hostile
build script included, never reaches the cache: the disk is attached read-only, the
guest mounts it read-only, and the overlay's upper layer is the scratch.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.mounts import GUEST_SCRATCH
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu.backend import QemuBackend

#: Where the runs below layer the cache: a directory on the scratch, as a lint's target dir.
TARGET = f"{GUEST_SCRATCH}/target"


def sh(script: str, cwd: str = "/tmp", timeout: float = 60) -> Command:
    return Command("sh", ("-c", script), Path(cwd), {"PATH": "/bin"}, timeout=timeout)


def digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


WRITE_CACHE = f"""
mkdir -p {TARGET}/debug/deps {TARGET}/debug/.fingerprint/itoa-1
echo cached-rmeta > {TARGET}/debug/deps/libitoa-1.rmeta
echo fingerprint > {TARGET}/debug/.fingerprint/itoa-1/lib-itoa
echo written
"""

HOSTILE_RUN = f"""
cat {TARGET}/debug/deps/libitoa-1.rmeta
echo poisoned > {TARGET}/debug/deps/libitoa-1.rmeta && echo "overwrote in the merged view"
rm -rf {TARGET}/debug/.fingerprint/itoa-1 && echo "removed in the merged view"
echo new > {TARGET}/member.rmeta && echo "wrote a new file"
cat {TARGET}/debug/deps/libitoa-1.rmeta
mount -o remount,rw {TARGET} 2>&1 | head -1
for d in /dev/vd*; do [ -e "$d" ] && echo "device visible: $d"; done
[ -e /depcache ] && echo "cache mount reachable" || echo "cache mount out of reach"
"""


@pytest.mark.timeout(600)
def test_a_run_writes_above_the_cache_and_the_cache_is_untouched(tmp_path: Path,
                                                                 rootfs_image: Path) -> None:
    cache = scratch.create_scratch(tmp_path / "cache.ext4", 64)
    writer = QemuBackend(VmOptions(rootfs=rootfs_image, scratch=cache, accel="tcg", template=False))
    grant = GrantSet.of(f"fs:write:{GUEST_SCRATCH}/**", "proc:exec:sh")
    built = writer.run_steps([sh(WRITE_CACHE)], grant)
    assert built.completed and built.steps[0].exit == 0, (built.failure, built.steps[0].stderr)
    cache.chmod(0o444)
    before = digest(cache)

    def layered_run(script: str) -> tuple[str, str]:
        disk = scratch.create_scratch(tmp_path / f"scratch-{len(list(tmp_path.iterdir()))}.ext4", 64)
        backend = QemuBackend(VmOptions(rootfs=rootfs_image, scratch=disk, accel="tcg", template=False,
                                        dep_cache=cache, dep_cache_guest=TARGET))
        outcome = backend.run_steps([sh(script)], grant)
        assert outcome.completed, (outcome.failure, outcome.console[-2000:])
        return outcome.steps[0].stdout.decode(), outcome.steps[0].stderr.decode()

    out, err = layered_run(HOSTILE_RUN)
    lines = out.splitlines()
    assert lines[0] == "cached-rmeta"  # the lower layer is visible
    # control: the run can write, remove and create in the merged view ...
    assert "overwrote in the merged view" in lines and "removed in the merged view" in lines
    assert "wrote a new file" in lines and lines[4] == "poisoned"
    assert not any(line.startswith("device visible") for line in lines), out
    assert lines[-1] == "cache mount out of reach", "the cache's own mount is outside the run's root"
    # ... and none of it reached the cache: its bytes are unchanged, and a new run sees it whole
    assert digest(cache) == before
    again, _ = layered_run(f"cat {TARGET}/debug/deps/libitoa-1.rmeta; "
                           f"ls {TARGET}/debug/.fingerprint; ls {TARGET}")
    assert again.splitlines() == ["cached-rmeta", "itoa-1", "debug"]


@pytest.mark.timeout(600)
def test_a_cache_whose_target_is_a_link_is_refused_by_the_guest(tmp_path: Path,
                                                                 rootfs_image: Path) -> None:
    cache = scratch.create_scratch(tmp_path / "cache.ext4", 64)
    writer = QemuBackend(VmOptions(rootfs=rootfs_image, scratch=cache, accel="tcg", template=False))
    grant = GrantSet.of(f"fs:write:{GUEST_SCRATCH}/**", "proc:exec:sh")
    built = writer.run_steps([sh(f"ln -s / {TARGET} && echo linked")], grant)
    assert built.steps[0].stdout == b"linked\n"
    disk = scratch.create_scratch(tmp_path / "scratch.ext4", 64)
    backend = QemuBackend(VmOptions(rootfs=rootfs_image, scratch=disk, accel="tcg", template=False,
                                    dep_cache=cache, dep_cache_guest=TARGET))
    outcome = backend.run_steps([sh(f"ls {TARGET}")], grant)
    assert not outcome.completed and not outcome.steps
    assert "no plain target directory" in (outcome.failure or "")


def test_a_cache_directory_outside_the_scratch_is_refused_before_anything(tmp_path: Path,
                                                                          rootfs_image: Path) -> None:
    disk = scratch.create_scratch(tmp_path / "scratch.ext4", 64)
    with pytest.raises(ValueError, match="not under the scratch"):
        VmOptions(rootfs=rootfs_image, scratch=disk, dep_cache=disk, dep_cache_guest="/target")
