"""Where does boot-to-first-command go, and does loading fewer kernel modules, or loading
them in parallel, shorten it? Reads the guest init's "uptime init=.. modules=.. ready=.."
status line (the guest's own clock) and the host's time to "ready", for `--boots` boots
of each variant, interleaved so host load hits every variant alike:

- sequential: the provisioned base initramfs as is (16 insmods, in dependency order);
- parallel: the same modules, each dependency level loaded with `insmod &` + `wait`;
- no-9p: without 9pnet, 9pnet_virtio, netfs, fscache and 9p (what dropping 9p would save).

Variants replace /etc/modules.load and /init through the per-run job archive (it is
unpacked over the base initramfs), so nothing is re-provisioned.

    ROTEIRO_HOME=/var/tmp/roteiro-test-home .venv/bin/python bench/vm_modules.py [--boots 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "vm"))
from oci_fixture import busybox_image  # noqa: E402

from roteiro_py.process import Command  # noqa: E402
from roteiro_py.vm.assets.assets import load_assets  # noqa: E402
from roteiro_py.vm.assets.initramfs import Entry, write_newc  # noqa: E402
from roteiro_py.vm.disks import rootfs  # noqa: E402
from roteiro_py.vm.mounts import MountTable  # noqa: E402
from roteiro_py.vm.qemu import job  # noqa: E402
from roteiro_py.vm.qemu.machine import Disk, MachineSpec, boot  # noqa: E402

#: The provisioned modules by dependency level (from modules.dep of 6.1.0-57-amd64).
LEVELS = (
    ("virtio_ring", "crc32c_generic", "crc16", "mbcache", "overlay", "9pnet", "netfs"),
    ("virtio", "jbd2", "fscache"),
    ("virtio_mmio", "virtio_blk", "virtio_console", "ext4", "9pnet_virtio", "9p"),
)
NINEP = {"9pnet", "9pnet_virtio", "netfs", "fscache", "9p"}
SEQUENTIAL_LOOP = ('for m in $(cat /etc/modules.load); do insmod "/lib/modules/$m" || '
                   'echo "insmod $m failed" > /dev/ttyS0; done')
PARALLEL_LOOP = ('while read -r level; do for m in $level; do insmod "/lib/modules/$m.ko" & '
                 'done; wait; done < /etc/modules.levels')


def variant_job(name: str, table: MountTable, steps: list[Command]) -> bytes:
    archive = job.job_archive(table, steps, stop_on_failure=True)
    if name == "sequential":
        return archive
    init = job.guest_init().decode()
    extra: list[Entry] = []
    if name == "parallel":
        assert SEQUENTIAL_LOOP in init
        init = init.replace(SEQUENTIAL_LOOP, PARALLEL_LOOP)
        levels = "\n".join(" ".join(level) for level in LEVELS) + "\n"
        extra.append(Entry.file("etc/modules.levels", levels.encode()))
    elif name == "no-9p":
        order = [m for m in load_assets_order() if m.removesuffix(".ko") not in NINEP]
        extra.append(Entry.file("etc/modules.load", ("\n".join(order) + "\n").encode()))
    # A second archive after the job's: its /init and /etc files replace the earlier ones.
    return archive + write_newc([Entry.directory("etc"), Entry.file("init", init.encode(),
                                                                     0o755), *extra])


def load_assets_order() -> list[str]:
    import json

    from roteiro_py import paths

    manifest = json.loads((paths.vm_assets_root() / "manifest.json").read_text())
    return list(manifest["modules"])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--boots", type=int, default=5)
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vm-modules-"))
    layers, digest = busybox_image(tmp / "oci")
    image = rootfs.rootfs_image(layers, digest).path
    table = MountTable((), None, None, False)
    steps = [Command("true", (), Path("/"), {"PATH": "/bin"})]
    assets = load_assets()
    results: dict[str, list[tuple[float, float, float, float]]] = {}
    for _ in range(args.boots):
        for name in ("sequential", "parallel", "no-9p"):
            spec = MachineSpec(assets=assets, accel="tcg", cpu="max", cpus=2, memory_mib=256,
                               disks=(Disk(job.ROOT_SERIAL, image, readonly=True),),
                               shares=(), ports=("stdout0", "stderr0"),
                               job=variant_job(name, table, steps))
            result = boot(spec, deadline=120)
            host_ready = next(at for at, line in result.status if line == "ready")
            line = next(line for _, line in result.status if line.startswith("uptime "))
            values = dict(word.split("=") for word in line.split()[1:])
            init, modules, ready = (float(values[k]) for k in ("init", "modules", "ready"))
            results.setdefault(name, []).append((init, modules - init, ready - modules,
                                                 host_ready))
            assert "insmod" not in result.console.decode("utf-8", "replace"), result.console
    print(f"median of {args.boots} boots (guest clock; host = qemu start -> 'ready'):")
    print(f"  {'variant':11} {'kernel->init':>12} {'modules':>8} {'mounts':>7} {'host':>6}")
    for name, rows in results.items():
        cols = [statistics.median(r[i] for r in rows) for i in range(4)]
        print(f"  {name:11} {cols[0]:11.2f}s {cols[1]:7.2f}s {cols[2]:6.2f}s {cols[3]:5.2f}s")


if __name__ == "__main__":
    main()
