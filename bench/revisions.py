"""The same lints under several revisions of the package, interleaved in one run, so that a
before/after ratio is taken side by side on a machine whose load changes (issue 25).

Each REV is a directory holding a `roteiro_py/` (e.g. `git archive <commit> roteiro_py |
tar -x -C DIR`), run as `PYTHONPATH=DIR pylint-sandbox lint ...` on one shared
ROTEIRO_HOME (each revision's templates and dependency caches are keyed apart). Per
round, every revision runs each case once, in an order rotated from round to round:

- empty: an empty crate, default settings (a fresh scratch): the fixed cost of a lint;
- warm: the demo workspace, the second of two `--keep-cache` lints (kept scratch removed
  first): a re-lint with nothing changed;
- pr: bench/pr_lint.py's serde workspace after a one-line edit, default settings, its
  dependency cache built by one unmeasured lint per revision first.

Printed per case and revision: the median wall time and clippy stage, and each run's;
then the median CPU seconds (user + system) of the lint's processes, qemu's included
(less sensitive to the machine's load than wall time, though not immune to it), and the
median of each round's after/before wall ratio (paired within a round).
Not a test: reported, never asserted.

    .venv/bin/python bench/revisions.py NAME=DIR [NAME=DIR ...] [--runs 3] [--cases empty,warm,pr]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import tempfile
from pathlib import Path

from lint_overhead import linter_image, provision  # bench/ is the script's directory
from pr_lint import EXE, cargo_home, edit, empty_crate, fetch_deps, run, stages, workspace

ROOT = Path(__file__).resolve().parent.parent


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("revisions", nargs="+", help="NAME=DIR, DIR holding roteiro_py/")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--cases", default="empty,warm,pr")
    parser.add_argument("--accel", default="tcg")
    parser.add_argument("--layout", default="/var/tmp/roteiro-images/clippy-1.95.0")
    parser.add_argument("--vm-assets-from", type=Path, default=None,
                        help="a provisioned ROTEIRO_HOME/vm to copy instead of downloading")
    args = parser.parse_args()
    revisions = dict(r.split("=", 1) for r in args.revisions)
    cases = args.cases.split(",")
    reference = linter_image(args.layout)
    results: dict[tuple[str, str], list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-revisions-") as scratch:
        work = Path(scratch)
        home = work / "home"
        base = {**os.environ, "ROTEIRO_HOME": str(home)}
        base.pop("CI", None)
        if args.vm_assets_from is not None:
            shutil.copytree(args.vm_assets_from, home / "vm")
        provision(base, args.layout, reference)
        trees = {"empty": empty_crate(work / "empty")}
        demo = work / "demo"
        shutil.copytree(ROOT / "examples" / "demo-workspace", demo, ignore=shutil.ignore_patterns("target"))
        trees["warm"] = demo
        if "pr" in cases:
            trees["pr"] = workspace(work / "ws")
            base["CARGO_HOME"] = str(cargo_home(work, trees["pr"]))
            fetch_deps(trees["pr"], base)

        cpu: dict[tuple[str, str], list[float]] = {}  # per measured lint, as results
        last = [0.0]  # the CPU seconds of the latest lint

        def children_cpu() -> float:
            used = resource.getrusage(resource.RUSAGE_CHILDREN)
            return used.ru_utime + used.ru_stime

        def lint(name: str, case: str, *extra: str) -> tuple[float, str, str]:
            env = {**base, "PYTHONPATH": revisions[name]}
            before = children_cpu()
            done = run([EXE, "lint", "clippy", str(trees[case]), "--image", reference, "--accel",
                        args.accel, "--format", "json", *extra], env)
            last[0] = children_cpu() - before
            return done

        for name in revisions:  # root filesystem, templates, dependency caches: unmeasured
            lint(name, "empty")
            if "pr" in cases:
                lint(name, "pr")
        names = list(revisions)
        for round_ in range(args.runs):
            order = names[round_ % len(names):] + names[:round_ % len(names)]
            if "pr" in cases:
                edit(trees["pr"], round_ + 1)
            for case in cases:
                for name in order:
                    if case == "warm":
                        shutil.rmtree(home / "cache" / "builds", ignore_errors=True)
                        lint(name, case, "--keep-cache")
                        wall, _, err = lint(name, case, "--keep-cache")
                    else:
                        wall, _, err = lint(name, case)
                    results.setdefault((case, name), []).append((wall, stages(err).get("clippy", 0.0)))
                    cpu.setdefault((case, name), []).append(last[0])

    med = statistics.median
    print(f"accel {args.accel}, runs {args.runs}, interleaved (medians, host clock)")
    for case in cases:
        first = med([w for w, _ in results[(case, names[0])]])
        for name in names:
            runs = results[(case, name)]
            wall = med([w for w, _ in runs])
            print(f"{case:5} {name:10} lint {wall:6.2f} s  clippy stage {med([c for _, c in runs]):5.1f} s"
                  f"  fixed {med([w - c for w, c in runs]):5.2f} s  vs {names[0]} {wall / first:4.2f}x"
                  f"  (each: {', '.join(f'{w:.2f}/{c:.1f}' for w, c in runs)})")
            used = cpu[(case, name)]
            paired = [w / f for (w, _), (f, _) in zip(runs, results[(case, names[0])], strict=True)]
            print(f"{'':16} cpu {med(used):6.2f} s  (each: {', '.join(f'{c:.1f}' for c in used)})"
                  f"  paired wall ratio vs {names[0]} {med(paired):4.2f}x")


if __name__ == "__main__":
    main()
