"""Issue 24's editor figure, measured in one run on one machine: what a save costs when
rust-analyzer's check command is `pylint-sandbox lint clippy --message-format json`.

- warm lint: a lint of the tree after one unmeasured lint made every cache (root
  filesystem, probe verdict, VM template, dependency cache), with no edit in between;
- save: one source file of a member edited (a function with a needless `return` appended,
  a new name each run), then the same lint: what rust-analyzer runs on a save;
- host: `cargo clippy --message-format=json` on a copy of the same tree after the same kind
  of edit, its target directory warm (what the editor runs without us);
- stages: each lint's progress lines on stderr (bench/lint_overhead.py's `stages`, host
  clock, 0.1 s resolution), and, from `-v`, how the save found each cache: the root
  filesystem and the template must be found, not made, and the dependency cache used or
  skipped (no registry dependency), never built, on a save.

Ratios, because machines differ by 2x: save / warm lint's clippy stage (what a save costs
beyond the check itself) and save / host. Not a test: reported, never asserted.

    .venv/bin/python bench/editor_save.py [TREE] [--serde] [--runs 3] [--accel tcg]
        [--keep-cache] [--home DIR]

TREE defaults to examples/demo-workspace (no registry dependency); `--serde` lints
bench/dep_cache.py's workspace instead (serde with derive: the dependency cache is used;
crates.io is read once into /var/tmp/roteiro-bench-serde). `--keep-cache` measures the
trusted path (the scratch kept between lints). The lint prints cargo's stream with
`--message-format json` where this revision has it, else the JSON report (`--format
json`); the first line says which.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from lint_overhead import STAGE, stages  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
HOST = ["cargo", "clippy", "--message-format=json", "--offline", "--locked"]
#: The save's edit: a finding clippy reports with its source line, so the save's output
#: shows it saw the edit (the value is unique to the run).
EDIT = "\npub fn editor_save_{n}() -> i32 {{\n    return 90900{n};\n}}\n"


@dataclass(frozen=True)
class Lint:
    wall: float
    stages: dict[str, float]
    notes: list[str]
    stdout: str


def output_flags() -> list[str]:
    """`--message-format json` where `lint clippy` has it (issue 24), else the JSON report."""
    done = subprocess.run([EXE, "lint", "clippy", "--help"], capture_output=True, text=True, check=True)
    return ["--message-format", "json"] if "--message-format" in done.stdout else ["--format", "json"]


def lint(argv: list[str], env: dict[str, str]) -> Lint:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    wall = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    notes = [line for line in done.stderr.splitlines() if line.strip() and not STAGE.match(line)]
    return Lint(wall, stages(done.stderr), notes, done.stdout)


def host_run(tree: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(HOST, cwd=tree, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"host cargo clippy exited {done.returncode}:\n{done.stderr[-3000:]}")
    return time.perf_counter() - started


def edited_file(tree: Path) -> Path:
    """The first member's src/lib.rs (else main.rs): the file a save edits."""
    for name in ("lib.rs", "main.rs"):
        found = sorted(tree.glob(f"**/src/{name}"))
        if found:
            return found[0]
    sys.exit(f"{tree} has no src/lib.rs or src/main.rs to edit")


def caches_made(save: Lint) -> list[str]:
    """What a save made that a warm lint must only find, from its -v notes and stages."""
    made = []
    if save.stages.get("boot", 0.0) > 0.0 or any("booted cold" in n or "built by this run" in n
                                                  for n in save.notes):
        made.append("VM template (booted, not restored)")
    if save.stages.get("root filesystem", 0.0) >= 1.0:
        made.append(f"root filesystem ({save.stages['root filesystem']:.1f} s)")
    if dep_cache_state(save) == "built":
        made.append("dependency cache")
    return made


def dep_cache_state(save: Lint) -> str:
    """used, built or skipped, as the save's -v note says it."""
    for note in save.notes:
        found = re.search(r"dependency cache (used|built|skipped)\b", note)
        if found:
            return found[1]
    return "not said"


def units(stdout: str) -> str:
    """Dependency units cargo found fresh and compiled, from the JSON report's summary or,
    in cargo's stream, its `compiler-artifact` records of non-path packages."""
    try:
        summary = json.loads(stdout)["summary"]
        return f"{summary['dependencies_fresh']} fresh/{summary['dependencies_compiled']} compiled"
    except (ValueError, KeyError, TypeError):
        pass
    fresh = compiled = 0
    for line in stdout.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and record.get("reason") == "compiler-artifact" \
                and not str(record.get("package_id", "")).startswith("path+file://"):
            fresh, compiled = (fresh + 1, compiled) if record.get("fresh") else (fresh, compiled + 1)
    return f"{fresh} fresh/{compiled} compiled"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("tree", nargs="?", default=str(ROOT / "examples" / "demo-workspace"))
    parser.add_argument("--serde", action="store_true", help="bench/dep_cache.py's serde workspace")
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--accel", default="tcg")
    parser.add_argument("--keep-cache", action="store_true", help="the trusted path")
    parser.add_argument("--home", default=os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"),
                        help="a ROTEIRO_HOME with the VM assets provisioned (the image is built "
                             "and provisioned into it, cached by its inputs)")
    args = parser.parse_args()
    env = {**os.environ, "ROTEIRO_HOME": args.home}
    env.pop("CI", None)
    built = subprocess.run([EXE, "image", "build", "--no-set-image"], env=env, capture_output=True,
                           text=True, check=True)
    reference = built.stdout.split()[-1]
    flags = output_flags()
    with tempfile.TemporaryDirectory(prefix="bench-editor-") as work:
        tree, host_tree = Path(work) / "tree", Path(work) / "host-tree"
        if args.serde:
            from dep_cache import provision_crates, workspace
            workspace(tree)
            env["CARGO_HOME"] = str(provision_crates(tree))
            # into this ROTEIRO_HOME's package store (provision_crates fills the default one)
            subprocess.run([EXE, "fetch-deps", str(tree)], env=env, check=True, capture_output=True)
            # and into the cargo home the host baseline reads (fetch-deps fills only the store)
            subprocess.run(["cargo", "fetch", "--locked"], cwd=tree, env=env, check=True, capture_output=True)
        else:
            shutil.copytree(args.tree, tree, ignore=shutil.ignore_patterns("target"))
        shutil.copytree(tree, host_tree)
        host_env = {**env, "CARGO_TARGET_DIR": str(Path(work) / "host-target")}
        host_run(host_tree, host_env)  # warm target directory, as the editor's
        host_source = edited_file(host_tree)
        host = []
        for n in range(args.runs):
            host_source.write_text(host_source.read_text() + EDIT.format(n=n))
            host.append(host_run(host_tree, host_env))
        argv = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", args.accel,
                *flags, "-v", *(["--keep-cache"] if args.keep_cache else [])]
        lint(argv, env)  # root filesystem, probe verdict, template, dependency cache: made once
        source = edited_file(tree)
        warm, saves, seen = [], [], []
        for n in range(args.runs):
            warm.append(lint(argv, env))
            source.write_text(source.read_text() + EDIT.format(n=n))
            saves.append(lint(argv, env))
            seen.append(f"90900{n}" in saves[-1].stdout)

    def med(values: list[float]) -> float:
        return statistics.median(values)

    label = "serde workspace (bench/dep_cache.py)" if args.serde else args.tree
    print(f"tree: {label}  accel: {args.accel}  runs: {args.runs} (medians, host clock)")
    print(f"output: {' '.join(flags)}  scratch: {'kept (--keep-cache)' if args.keep_cache else 'new per lint'}"
          f"  image: {reference}")
    for name, runs in (("warm lint", warm), ("save", saves)):
        names = list(dict.fromkeys(s for r in runs for s in r.stages))
        print(f"{name:9}: {med([r.wall for r in runs]):6.2f} s  (each: "
              f"{', '.join(f'{r.wall:.2f}' for r in runs)})")
        print(f"{'':9}  stages: " + "  ".join(f"{s} {med([r.stages.get(s, 0.0) for r in runs]):.1f}"
                                             for s in names))
    save_s = med([r.wall for r in saves])
    clippy_s = med([r.stages.get("clippy", 0.0) for r in warm])
    host_s = med(host)
    print(f"host cargo clippy after the same edit (warm target dir): {host_s:.2f} s "
          f"(each: {', '.join(f'{h:.2f}' for h in host)})")
    print(f"save / warm lint's clippy stage: {save_s / clippy_s:.2f}x  "
          f"(save {save_s:.2f} s, clippy stage {clippy_s:.1f} s; beyond it: {save_s - clippy_s:.2f} s)")
    print(f"save / warm lint: {save_s / med([r.wall for r in warm]):.2f}x   save / host: {save_s / host_s:.1f}x")
    print(f"the edit's new function in the save's output: {sum(seen)}/{len(seen)} saves")
    made = sorted({m for r in saves for m in caches_made(r)})
    print(f"made on a save (should be none): {', '.join(made) if made else 'none'}; "
          f"dependency cache: {', '.join(sorted({dep_cache_state(r) for r in saves}))}; "
          f"dependency units on each save: {', '.join(units(r.stdout) for r in saves)}")


if __name__ == "__main__":
    main()
