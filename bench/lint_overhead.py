"""Issue 11's figures, measured in one run on one machine: what a sandboxed lint costs
over the same clippy on the host, where its time goes, and how fast a refusal is.

- cold: a fresh scratch (the default); the template, root filesystem and probe verdict
  already made by one unmeasured lint first, as on any machine after its first lint;
- warm: the second of two `--keep-cache` lints sharing a scratch;
- host: `cargo clippy` with an empty CARGO_TARGET_DIR (cold) and again (warm);
- stages: each lint's progress lines on stderr (host clock, 0.1 s resolution), so
  "fixed overhead" is the whole lint minus its clippy stage: start, checks, boot or
  restore, probes, staging and report;
- empty: an empty library crate (no dependency, a fresh scratch): the whole fixed cost
  of a lint, cargo's own start in the guest included, against host `cargo clippy` on the
  same crate with an empty target directory;
- refusal: a lint refused before any VM (a tag, not a digest) against `--help`.

A TREE with registry dependencies is fetched first (`fetch-deps`, with the caller's
CARGO_HOME), and its dependency cache is built by the unmeasured first lint, so cold and
warm both start from it (issue 25 asks warm/cold on such a workspace too).

Targets (issues 11 and 25, ratios because machines differ by 2x): fixed overhead <= 1.0 s,
warm <= 0.25x cold, empty crate <= 2.0 s, refusal <= 2x --help. Not a test: reported,
never asserted.

    .venv/bin/python bench/lint_overhead.py [TREE] [--runs 3] [--accel tcg]

Run it against another revision with PYTHONPATH=<that checkout> (lines it does not print
are left blank).
"""

from __future__ import annotations

import argparse
import os
import re
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
STAGE = re.compile(r"^(?P<name>\S(?:.*\S)?) +(?P<seconds>\d+\.\d) s$")
REFUSAL_RUNS = 11


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return elapsed, done.stderr


def stages(stderr: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for line in stderr.splitlines():
        match = STAGE.match(line)
        if match:
            found[match["name"]] = found.get(match["name"], 0.0) + float(match["seconds"])
    return found


def median_wall(argv: list[str], env: dict[str, str]) -> float:
    samples = []
    for _ in range(REFUSAL_RUNS):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def linter_image(layout: str) -> str:
    """The linter image `pylint-sandbox image build` makes (cached by its inputs), by reference;
    its OCI layout is also written to `layout`."""
    return subprocess.run([str(Path(sys.executable).with_name("pylint-sandbox")), "image", "build",
                                "--no-set-image", "--output", layout],
                          capture_output=True, text=True, check=True).stdout.split()[-1]


def provision(env: dict[str, str], layout: str, reference: str) -> None:
    """The VM assets and the linter image, provisioned into env's ROTEIRO_HOME."""
    for argv in ([EXE, "prefetch", "--vm-assets", "--allow-download"],
                 [EXE, "prefetch", "--analyzer", "clippy", "--from", f"oci:{layout}", "--image", reference]):
        subprocess.run(argv, env=env, check=True, capture_output=True)


def empty_crate(path: Path) -> Path:
    """A library crate with nothing in it and no dependency (its lockfile pins itself only)."""
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[package]\nname = "empty"\nversion = "0.1.0"\nedition = "2021"\n')
    (path / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "empty"\nversion = "0.1.0"\n')
    (path / "src" / "lib.rs").write_text("")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", nargs="?", default=str(ROOT / "examples" / "demo-workspace"))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--accel", default="tcg")
    parser.add_argument("--layout", default="/var/tmp/roteiro-images/clippy-1.95.0")
    parser.add_argument("--vm-assets-from", type=Path, default=None,
                        help="a provisioned ROTEIRO_HOME/vm to copy instead of downloading")
    args = parser.parse_args()
    tree = Path(args.tree).resolve()
    reference = linter_image(args.layout)
    with tempfile.TemporaryDirectory(prefix="bench-overhead-") as work:
        home = Path(work) / "home"
        env = {**os.environ, "ROTEIRO_HOME": str(home)}
        env.pop("CI", None)
        if args.vm_assets_from is not None:
            shutil.copytree(args.vm_assets_from, home / "vm")
        provision(env, args.layout, reference)
        if (tree / "Cargo.lock").is_file():  # a tree with registry packages needs them stored
            subprocess.run([EXE, "fetch-deps", str(tree)], env=env, check=True, capture_output=True)
        lint = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", args.accel,
                "--format", "json"]
        first, _ = run(lint, env)  # root filesystem, probe verdict, template, dependency cache
        empty = empty_crate(Path(work) / "empty")
        empty_lint = [EXE, "lint", "clippy", str(empty), "--image", reference, "--accel", args.accel,
                      "--format", "json"]
        empty_runs = [run(empty_lint, env) for _ in range(args.runs)]
        empty_host = [run(CLIPPY, {**os.environ, "CARGO_TARGET_DIR": str(Path(work) / f"host-empty-{i}")},
                          empty)[0] for i in range(args.runs)]
        cold = [run(lint, env) for _ in range(args.runs)]
        warm = []
        for _ in range(args.runs):
            shutil.rmtree(home / "cache" / "builds", ignore_errors=True)
            run([*lint, "--keep-cache"], env)
            warm.append(run([*lint, "--keep-cache"], env))
        host_cold, host_warm = [], []
        for index in range(args.runs):
            host_env = {**os.environ, "CARGO_TARGET_DIR": str(Path(work) / f"host-{index}")}
            host_cold.append(run(CLIPPY, host_env, tree)[0])
            host_warm.append(run(CLIPPY, host_env, tree)[0])
        help_s = median_wall([EXE, "--help"], env)
        refusal_s = median_wall([EXE, "lint", "clippy", str(tree), "--image", "rust:1.95"], env)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    print(f"tree: {tree}  accel: {args.accel}  runs: {args.runs} (medians, host clock)")
    print(f"first lint on this ROTEIRO_HOME (makes the caches): {first:6.2f} s")
    rows = {"cold": (cold, host_cold), "warm": (warm, host_warm)}
    for name, (vm_runs, host) in rows.items():
        wall = med([w for w, _ in vm_runs])
        print(f"{name}: sandboxed {wall:6.2f} s  host {med(host):5.2f} s  ratio {wall / med(host):6.1f}x"
              f"  (each: {', '.join(f'{w:.2f}' for w, _ in vm_runs)})")
    for name, (vm_runs, _) in rows.items():
        per = [stages(err) for _, err in vm_runs]
        names = list(dict.fromkeys(n for p in per for n in p))
        if not names:
            print(f"{name} stages: none printed (a revision without progress lines)")
            continue
        print(f"{name} stages: " + "  ".join(f"{n} {med([p.get(n, 0.0) for p in per]):.1f}"
                                            for n in names))
        fixed = [w - p.get("clippy", 0.0) for (w, _), p in zip(vm_runs, per, strict=True)]
        print(f"{name} fixed overhead (lint minus its clippy stage): {med(fixed):.2f} s "
              f"(target <= 1.0 s)")
    empty_wall = med([w for w, _ in empty_runs])
    empty_clippy = med([stages(err).get("clippy", 0.0) for _, err in empty_runs])
    print(f"empty crate: sandboxed {empty_wall:6.2f} s (target <= 2.0 s; clippy stage {empty_clippy:.1f} s)"
          f"  host cold {med(empty_host):5.2f} s"
          f"  (each: {', '.join(f'{w:.2f}' for w, _ in empty_runs)})")
    ratio = med([w for w, _ in warm]) / med([w for w, _ in cold])
    print(f"warm / cold: {ratio:.2f}x (target <= 0.25x)")
    print(f"refusal before any VM {refusal_s * 1000:.0f} ms, --help {help_s * 1000:.0f} ms: "
          f"{refusal_s / help_s:.2f}x (target <= 2x)")


if __name__ == "__main__":
    main()
