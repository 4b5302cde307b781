"""Warm (`--keep-cache`) against cold lints of one tree, in one session: the whole lint and
the clippy step alone, and how many workspace units cargo found fresh.

The lint runs in this process (the clippy step's timing and cargo's own output are read
from the job's outcome), so Python's start (~0.3 s) is not in the whole-lint time. Cold:
a new scratch disk per run. Warm: the same kept disk, after one run that filled it, with
no edit in between. Works on any revision that has `roteiro_py.lint.run_job`, so the
same script measures before and after. Not a test: numbers are printed, never asserted.

    PYTHONPATH=. .venv/bin/python bench/warm_lint.py [TREE] [--runs N] [--home DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent


def fresh_units(stdout: bytes) -> tuple[int, int]:
    """(fresh, rebuilt) workspace units, from cargo's compiler-artifact messages."""
    fresh = rebuilt = 0
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if isinstance(message, dict) and message.get("reason") == "compiler-artifact" \
                and str(message.get("package_id", "")).startswith("path+file://"):
            if message.get("fresh"):
                fresh += 1
            else:
                rebuilt += 1
    return fresh, rebuilt


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", nargs="?", default=str(ROOT / "examples" / "demo-workspace"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--home", default=os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"),
                        help="a ROTEIRO_HOME with the VM assets and the image provisioned")
    args = parser.parse_args()
    os.environ["ROTEIRO_HOME"] = args.home
    layout = Path("/var/tmp/roteiro-images/clippy-1.95.0")
    reference = subprocess.run([str(Path(sys.executable).with_name("pylint-sandbox")), "image", "build",
                                "--no-set-image", "--output",
                                str(layout)], capture_output=True, text=True, check=True).stdout.split()[-1]

    import roteiro_py.lint as lint

    jobs: list[Any] = []
    real = lint.run_job

    def spy(*a: Any, **k: Any) -> Any:
        jobs.append(real(*a, **k))
        return jobs[-1]

    lint.run_job = spy  # type: ignore[assignment]

    def once(tree: Path, keep: bool) -> tuple[float, float, int, int]:
        flags = {"lint.image": (reference, "--image"), "vm.accel": ("tcg", "--accel"),
                 "lint.keep_cache": (keep, "--keep-cache")}
        started = time.perf_counter()
        lint.lint(lint.LintRequest(path=tree, flags=flags))
        whole = time.perf_counter() - started
        step = jobs[-1].steps[-1]
        return (whole, step.duration, *fresh_units(step.stdout))

    with tempfile.TemporaryDirectory(prefix="bench-warm-") as work:
        tree = Path(work) / "tree"
        shutil.copytree(args.tree, tree, ignore=shutil.ignore_patterns("target"))
        once(tree, False)  # the root filesystem and the probe verdict, cached once
        cold = [once(tree, False) for _ in range(args.runs)]
        builds = Path(args.home) / "cache" / "builds"
        before = set(builds.glob("*")) if builds.exists() else set()
        filled = once(tree, True)
        warm = [once(tree, True) for _ in range(args.runs)]
        for left in (set(builds.glob("*")) if builds.exists() else set()) - before:
            left.unlink()

    def row(name: str, runs: list[tuple[float, float, int, int]]) -> str:
        whole = statistics.median(r[0] for r in runs)
        step = statistics.median(r[1] for r in runs)
        units = ", ".join(f"{f}/{f + b}" for _, _, f, b in runs)
        every = ", ".join(f"{r[0]:.2f}/{r[1]:.2f}" for r in runs)
        return (f"{name}: lint {whole:6.2f} s  clippy step {step:6.2f} s  (each lint/step: {every};"
                f" fresh units: {units})")

    print(f"tree: {args.tree}  runs: {args.runs} (medians)")
    print(row("cold", cold))
    print(row("fill", [filled]))
    print(row("warm", warm))
    print(f"warm/cold: lint {statistics.median(r[0] for r in warm) / statistics.median(r[0] for r in cold):.2f}x"
          f"  clippy step {statistics.median(r[1] for r in warm) / statistics.median(r[1] for r in cold):.2f}x")


if __name__ == "__main__":
    main()
