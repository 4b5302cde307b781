"""Issue 25's pull-request figures, each against host `cargo clippy` on the same tree in the
same run: a small workspace deriving serde with ten registry packages (serde with
`derive`, serde_json, and under them serde_derive, syn, quote, proc-macro2,
unicode-ident, itoa, ryu, memchr).

- PR lint: default settings (a fresh scratch), the dependency cache already built, after
  a one-line edit of one member (`model/src/lib.rs`), against host `cargo clippy` on the
  same edit with its target directory warm (what a developer's own re-lint costs);
- first lint: the first sandboxed lint of the project on a ROTEIRO_HOME that holds the
  image, the VM assets, a root filesystem and a template (one unmeasured lint of an empty
  crate made them): it builds the dependency cache in a VM of its own, then lints;
  against host `cargo clippy` with an empty target directory (the crates already
  downloaded on both sides: neither figure counts the network);
- warm / cold on this workspace (registry dependencies, the cache built): the second of
  two `--keep-cache` lints against a default lint, no edit between (issue 25 asks the
  ratio on such a workspace as well as on the demo's, bench/lint_overhead.py).

Targets (issue 25): PR lint <= 10x host, first lint <= 15x host cold, warm <= 0.25x cold. Reported, never
asserted. The crates come from crates.io: the host side into a CARGO_HOME made under a
temporary directory, the sandboxed side by `pylint-sandbox fetch-deps` with that home.
The host cargo is the one on PATH (`cargo --version` is printed).

    PYTHONPATH=. .venv/bin/python bench/pr_lint.py [--runs 3] [--accel tcg]
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
from pathlib import Path

from lint_overhead import linter_image, provision  # bench/ is the script's directory

EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
CLIPPY = ["cargo", "clippy", "--message-format=json", "--offline", "--locked"]
STAGE = re.compile(r"^(?P<name>\S(?:.*\S)?) +(?P<seconds>\d+\.\d) s$")

MODEL = """use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Point { pub x: i64, pub y: i64 }

pub fn origin() -> Point {
    return Point { x: 0, y: 0 };
}

pub fn encoded(p: &Point) -> String {
    serde_json::to_string(p).unwrap_or_default()
}
"""
APP = """fn main() {
    let p = model::origin();
    if p.x == 0 { println!("{}", model::encoded(&p)); }
}
"""
#: The versions are pinned so the lockfile is the same on every run: serde_json 1.0.140
#: is the last that depends on serde itself (later ones on serde_core).
MODEL_DEPENDENCIES = ('serde = { version = "=1.0.219", features = ["derive"] }\n'
                      'serde_json = "=1.0.140"\n')


def workspace(path: Path) -> Path:
    """The two-member workspace: `model` derives serde and uses serde_json; `app` uses it."""
    (path / "model" / "src").mkdir(parents=True)
    (path / "app" / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[workspace]\nmembers = ["model", "app"]\nresolver = "2"\n')
    (path / "model" / "Cargo.toml").write_text(
        '[package]\nname = "model"\nversion = "0.1.0"\nedition = "2021"\n'
        f"[dependencies]\n{MODEL_DEPENDENCIES}")
    (path / "model" / "src" / "lib.rs").write_text(MODEL)
    (path / "app" / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n'
        '[dependencies]\nmodel = { path = "../model" }\n')
    (path / "app" / "src" / "main.rs").write_text(APP)
    return path


def edit(tree: Path, n: int) -> None:
    """A one-line edit of one member, different on each call."""
    (tree / "model" / "src" / "lib.rs").write_text(MODEL + f"pub fn edited() -> i64 {{ {n} }}\n")


def cargo_home(work: Path, tree: Path) -> Path:
    """A CARGO_HOME of this run alone, holding the lockfile's packages (from crates.io)."""
    home = work / "cargo-home"
    env = {**os.environ, "CARGO_HOME": str(home)}
    subprocess.run(["cargo", "generate-lockfile", "-q"], cwd=tree, env=env, check=True)
    subprocess.run(["cargo", "fetch", "-q", "--locked"], cwd=tree, env=env, check=True)
    return home


def fetch_deps(tree: Path, env: dict[str, str]) -> None:
    subprocess.run([EXE, "fetch-deps", str(tree)], env=env, check=True, capture_output=True)


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return elapsed, done.stdout, done.stderr


def stages(stderr: str) -> dict[str, float]:
    found: dict[str, float] = {}
    for match in map(STAGE.match, stderr.splitlines()):
        if match:
            found[match["name"]] = found.get(match["name"], 0.0) + float(match["seconds"])
    return found


def described(stdout: str) -> str:
    report = json.loads(stdout)
    cache, summary = report["dependency_cache"], report["summary"]
    return (f"cache {cache['state']}, {summary['dependencies_fresh']} dependency units fresh, "
            f"{summary['dependencies_compiled']} compiled")


def empty_crate(path: Path) -> Path:
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[package]\nname = "empty"\nversion = "0.1.0"\nedition = "2021"\n')
    (path / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "empty"\nversion = "0.1.0"\n')
    (path / "src" / "lib.rs").write_text("")
    return path


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--accel", default="tcg")
    parser.add_argument("--layout", default="/var/tmp/roteiro-images/clippy-1.95.0")
    parser.add_argument("--vm-assets-from", type=Path, default=None,
                        help="a provisioned ROTEIRO_HOME/vm to copy instead of downloading")
    args = parser.parse_args()
    reference = linter_image(args.layout)
    version = subprocess.run(["cargo", "--version"], capture_output=True, text=True, check=True)
    with tempfile.TemporaryDirectory(prefix="bench-pr-lint-") as scratch:
        work = Path(scratch)
        tree = workspace(work / "ws")
        crates = cargo_home(work, tree)
        home = work / "home"
        env = {**os.environ, "ROTEIRO_HOME": str(home), "CARGO_HOME": str(crates)}
        env.pop("CI", None)
        if args.vm_assets_from is not None:
            shutil.copytree(args.vm_assets_from, home / "vm")
        provision(env, args.layout, reference)
        fetch_deps(tree, env)
        lint = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", args.accel,
                "--format", "json"]
        # the root filesystem, the probe verdict and a template, made by another tree
        run([EXE, "lint", "clippy", str(empty_crate(work / "empty")), "--image", reference,
             "--accel", args.accel, "--format", "json"], env)
        host_env = {**os.environ, "CARGO_HOME": str(crates)}
        host_cold = [run(CLIPPY, {**host_env, "CARGO_TARGET_DIR": str(work / f"host-cold-{i}")}, tree)[0]
                     for i in range(args.runs)]
        first, first_out, first_err = run(lint, env)
        warm_target = {**host_env, "CARGO_TARGET_DIR": str(work / "host-cold-0")}
        host_pr, pr = [], []
        for n in range(args.runs):
            edit(tree, n + 1)
            host_pr.append(run(CLIPPY, warm_target, tree)[0])
            pr.append(run(lint, env))
        cold, warm = [], []
        for _ in range(args.runs):
            cold.append(run(lint, env)[0])
            shutil.rmtree(home / "cache" / "builds", ignore_errors=True)
            run([*lint, "--keep-cache"], env)
            warm.append(run([*lint, "--keep-cache"], env)[0])

    med = statistics.median
    pr_wall = med([w for w, _, _ in pr])
    per = [stages(err) for _, _, err in pr]
    names = list(dict.fromkeys(n for p in per for n in p))
    print(f"serde-derive + serde_json workspace (10 registry packages), accel {args.accel}, "
          f"runs {args.runs} (medians, host clock); host {version.stdout.strip()}")
    print(f"host cargo clippy, cold (empty target dir): {med(host_cold):6.2f} s  "
          f"(each: {', '.join(f'{w:.2f}' for w in host_cold)})")
    print(f"host cargo clippy, one-line edit (warm):    {med(host_pr):6.2f} s  "
          f"(each: {', '.join(f'{w:.2f}' for w in host_pr)})")
    print(f"first lint (builds the dependency cache):   {first:6.2f} s  [{described(first_out)}]")
    print(f"  its stages: {'  '.join(f'{n} {s:.1f}' for n, s in stages(first_err).items())}")
    print(f"PR lint (cache hit, one-line edit):         {pr_wall:6.2f} s  [{described(pr[-1][1])}]"
          f"  (each: {', '.join(f'{w:.2f}' for w, _, _ in pr)})")
    print("  its stages: " + "  ".join(f"{n} {med([p.get(n, 0.0) for p in per]):.1f}" for n in names))
    fixed = med([w - p.get("clippy", 0.0) for (w, _, _), p in zip(pr, per, strict=True)])
    print(f"  fixed overhead (lint minus its clippy stage): {fixed:.2f} s")
    print(f"PR lint / host edit: {pr_wall / med(host_pr):6.1f}x (target <= 10x)")
    print(f"first lint / host cold: {first / med(host_cold):6.1f}x (target <= 15x)")
    print(f"warm (--keep-cache, second) {med(warm):6.2f} s / cold {med(cold):6.2f} s: "
          f"{med(warm) / med(cold):.2f}x (target <= 0.25x)")


if __name__ == "__main__":
    main()
