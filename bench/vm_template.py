"""VM templates (roteiro_py/vm/qemu/template.py) against cold boots, measured in one run.

1. The backend alone, with lint's own steps (the two toolchain probes, then clippy) on a
   tree: host clock from `run_steps` being called to the clippy step starting, and qemu
   start -> guest ready (`boot_seconds`: for a cold boot the probes still follow, for a
   clone they are done), cold vs restored, alternating.
2. The whole `pylint-sandbox lint clippy` with `[vm] template` off and on, alternating,
   and the first lint of a key (which builds the template).
Not a test: numbers are reported, never asserted. Needs the clippy image that
`pylint-sandbox image build` writes (as bench/lint_overhead.py).

    .venv/bin/python bench/vm_template.py [TREE] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return elapsed


def backend_runs(tree: Path, reference: str, runs: int) -> None:
    from roteiro_py import config
    from roteiro_py.lint import clippy_command, grant_for, guest_env, locate, package_cache, steps_for
    from roteiro_py.reference import parse
    from roteiro_py.store import Store
    from roteiro_py.vm.disks import scratch
    from roteiro_py.vm.disks.rootfs import rootfs_image
    from roteiro_py.vm.options import VmOptions
    from roteiro_py.vm.qemu.backend import QemuBackend

    settings = config.Settings()
    image = Store.default().resolve(parse(reference))
    located = locate(tree)
    registry, git = package_cache(located)
    steps = steps_for(located, settings, guest_env(image), clippy_command(settings))
    grant = grant_for(located, registry, git)
    rootfs = rootfs_image(image.layers, image.manifest_digest)  # sealed: path and digest
    rows: dict[str, list[tuple[float, float, float]]] = {"cold": [], "restored": []}
    with tempfile.TemporaryDirectory(prefix="bench-template-") as work:
        templates = Path(work) / "templates"
        for index in range(runs + 1):
            for kind in ("cold", "restored"):
                disk = scratch.create_scratch(Path(work) / f"scratch-{kind}-{index}.img", 8192)
                backend = QemuBackend(VmOptions(
                    rootfs=rootfs.path, scratch=disk, accel="tcg", memory_mib=settings.vm.memory_mib,
                    template=kind == "restored", template_root=templates, rootfs_identity=rootfs.digest))
                backend.isolation()
                called = time.time()
                job = backend.run_steps(steps, grant, deadline=600, template_steps=len(steps) - 1)
                disk.unlink()
                if not job.completed:
                    sys.exit(f"{kind}: {job.failure}")
                clippy = job.steps[-1]
                row = (clippy.started.timestamp() - called, job.boot_seconds or 0.0,
                       clippy.duration)
                if kind == "restored" and index == 0:
                    print(f"template built in {job.template_built_seconds:.2f} s "
                          f"(call -> clippy start {row[0]:.2f} s)")
                    continue
                if index > 0:  # the first round warms the page cache (and builds)
                    rows[kind].append(row)
    print("backend, median of", runs, "(call -> clippy starts | qemu start -> ready | clippy)")
    for kind, values in rows.items():
        columns = [statistics.median(column) for column in zip(*values, strict=True)]
        print(f"  {kind:9} {columns[0]:6.2f} s | {columns[1]:6.2f} s | {columns[2]:6.2f} s   "
              f"runs: {[round(v[0], 2) for v in values]}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", nargs="?", default=str(ROOT / "examples" / "demo-workspace"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--only", choices=("lint", "backend"))
    parser.add_argument("--home", help="a ROTEIRO_HOME to use and keep (default: a new one)")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    layout = Path("/var/tmp/roteiro-images/clippy-1.95.0")
    reference = subprocess.run([str(Path(sys.executable).with_name("pylint-sandbox")), "image", "build",
                                "--no-set-image", "--output",
                                str(layout)], capture_output=True, text=True,
                               check=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory(prefix="bench-template-home-") as work:
        home = Path(args.home) if args.home else Path(work) / "home"
        env = {**os.environ, "ROTEIRO_HOME": str(home)}
        os.environ["ROTEIRO_HOME"] = str(home)
        subprocess.run([EXE, "prefetch", "--vm-assets", "--allow-download"], env=env, check=True,
                       capture_output=True)
        subprocess.run([EXE, "prefetch", "--analyzer", "clippy", "--from", f"oci:{layout}",
                        "--image", reference], env=env, check=True, capture_output=True)
        lint = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", "tcg",
                "--format", "json"]
        off = {**env, "ROTEIRO_VM_TEMPLATE": "false"}
        timed(lint, off)  # the cached root filesystem and the probe verdict, once
        if args.only != "lint":
            backend_runs(tree, reference, args.runs)
        if args.only == "backend":
            return
        shutil.rmtree(home / "cache" / "vm-templates", ignore_errors=True)
        first = timed(lint, env)
        cold, restored = [], []
        for _ in range(args.runs):
            cold.append(timed(lint, off))
            restored.append(timed(lint, env))
        print(f"lint clippy {tree.name}, {args.runs} runs each, alternating")
        print(f"  template off  median {statistics.median(cold):6.2f} s  {[round(t, 2) for t in cold]}")
        print(f"  template on   median {statistics.median(restored):6.2f} s  "
              f"{[round(t, 2) for t in restored]}")
        print(f"  first lint of a key (builds the template) {first:.2f} s")


if __name__ == "__main__":
    main()
