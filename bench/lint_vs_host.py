"""Sandboxed lint vs the same clippy on the host, cold and warm, measured in one run.

Cold: a fresh build directory (the VM's default: a new scratch disk per run; the host:
an empty CARGO_TARGET_DIR). Warm: the second of two runs sharing a build directory (the
VM with --keep-cache; the host reusing its CARGO_TARGET_DIR). Prints the medians and the
ratios VM/host. Not a test: numbers are reported, never asserted.

    .venv/bin/python bench/lint_vs_host.py [TREE] [--runs N] [--accel tcg]
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
CLIPPY = ["cargo", "clippy", "--message-format=json", "--offline", "--locked"]


def timed(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr.decode()[-2000:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", nargs="?", default=str(ROOT / "examples" / "demo-workspace"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--accel", default="tcg")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    layout = Path("/var/tmp/roteiro-images/clippy-1.95.0")
    reference = subprocess.run([sys.executable, str(ROOT / "scripts" / "build-image"), "--output",
                                str(layout)], capture_output=True, text=True, check=True).stdout.split()[-1]
    with tempfile.TemporaryDirectory(prefix="bench-lint-") as work:
        home = Path(work) / "home"
        env = {**os.environ, "ROTEIRO_HOME": str(home)}
        subprocess.run([EXE, "prefetch", "--vm-assets", "--allow-download"], env=env, check=True,
                       capture_output=True)
        subprocess.run([EXE, "prefetch", "--analyzer", "clippy", "--from", f"oci:{layout}", "--image",
                        reference], env=env, check=True, capture_output=True)
        lint = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", args.accel,
                "--format", "json"]
        timed(lint, env)  # builds the cached root filesystem and the probe verdict once
        vm_cold = [timed(lint, env) for _ in range(args.runs)]
        vm_warm = []
        for _ in range(args.runs):
            shutil.rmtree(home / "cache" / "builds", ignore_errors=True)
            timed([*lint, "--keep-cache"], env)
            vm_warm.append(timed([*lint, "--keep-cache"], env))
        host_cold, host_warm = [], []
        for index in range(args.runs):
            target = Path(work) / f"host-target-{index}"
            host_env = {**os.environ, "CARGO_TARGET_DIR": str(target)}
            host_cold.append(timed(CLIPPY, host_env, tree))
            host_warm.append(timed(CLIPPY, host_env, tree))
    rows = {"cold": (statistics.median(vm_cold), statistics.median(host_cold)),
            "warm": (statistics.median(vm_warm), statistics.median(host_warm))}
    print(f"tree: {tree}  accel: {args.accel}  runs: {args.runs} (medians)")
    for name, (vm, host) in rows.items():
        print(f"{name}:  sandboxed {vm:7.2f} s   host {host:6.2f} s   ratio {vm / host:6.1f}x")


if __name__ == "__main__":
    main()
