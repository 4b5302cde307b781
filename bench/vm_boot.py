"""Measure, in one run: boot-to-first-command (median of N boots) and a trivial command's
wall time in the guest vs on the host. (Share transports: bench/vm_shares.py; where the
boot time goes: bench/vm_modules.py.) Uses $ROTEIRO_HOME's provisioned assets and builds
a busybox root filesystem like the integration tests do.

    ROTEIRO_HOME=/var/tmp/roteiro-test-home .venv/bin/python bench/vm_boot.py [--boots 5] [--fs]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "vm"))
from oci_fixture import busybox_image  # noqa: E402

from roteiro_py.process import Command, GrantSet  # noqa: E402
from roteiro_py.vm.disks import rootfs  # noqa: E402
from roteiro_py.vm.options import VmOptions  # noqa: E402
from roteiro_py.vm.qemu.backend import QemuBackend  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boots", type=int, default=5)
    parser.add_argument("--fs", action="store_true")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vm-bench-"))
    layers, digest = busybox_image(tmp / "oci")
    image = rootfs.rootfs_image(layers, digest).path
    tree = tmp / "tree"
    for i in range(3000):
        d = tree / f"d{i // 100}"
        d.mkdir(parents=True, exist_ok=True)
        (d / f"f{i}.rs").write_text(f"// file {i}\n" + "fn f() {}\n" * 20)
    backend = QemuBackend(VmOptions(rootfs=image, accel="tcg"))
    grant = GrantSet.of(f"fs:read:{tree}/**", "proc:exec:true")
    boots, guest_cmd = [], []
    for _ in range(args.boots):
        job = backend.run_steps([Command("true", (), tree, {"PATH": "/bin"})], grant)
        assert job.completed and job.steps[0].exit == 0, job.failure
        boots.append(job.boot_seconds or 0.0)
        guest_cmd.append(job.steps[0].duration)
    host = []
    for _ in range(args.boots):
        t = time.monotonic()
        subprocess.run(["true"], check=True)
        host.append(time.monotonic() - t)
    print(f"boot to first command, median of {args.boots}: {statistics.median(boots):.2f} s "
          f"(min {min(boots):.2f}, max {max(boots):.2f})")
    g, h = statistics.median(guest_cmd), statistics.median(host)
    print(f"`true` wall time: guest {g * 1000:.0f} ms, host {h * 1000:.1f} ms, "
          f"ratio {g / h:.0f}x")
    if args.fs:
        print("--fs moved to bench/vm_shares.py (9p cache modes vs read-only ext4 images)")

if __name__ == "__main__":
    main()
