"""Issue 12's figures, measured in one run on one machine: a workspace whose lockfile pins
`serde` with `derive` (serde_derive, syn, quote, proc-macro2, unicode-ident under it).

- host: `cargo clippy` with an empty target dir (what the workspace costs outside a VM);
- first: the first sandboxed lint on a fresh ROTEIRO_HOME that already holds the image,
  the VM assets and a root filesystem and template (one unmeasured lint of another tree
  made those): it builds the dependency cache in a VM of its own, then lints with it;
- second: the next lint after editing a member's source (the cache is used);
- no-cache: the same edited tree with `--no-dep-cache` (what every lint cost before);
- stages: the second lint's progress lines.

Goal (issue 12): second <= first / 10 under TCG. Reported, never asserted.

    .venv/bin/python bench/dep_cache.py [--accel tcg]

The crates come from crates.io into a private CARGO_HOME by `pylint-sandbox fetch-deps`
(the machine must reach crates.io once; later runs reuse /var/tmp/roteiro-bench-serde).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from lint_overhead import linter_image, provision  # bench/ is the script's directory

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
CLIPPY = ["cargo", "clippy", "--message-format=json", "--offline", "--locked"]
STAGE = re.compile(r"^(?P<name>\S(?:.*\S)?) +(?P<seconds>\d+\.\d) s$")
CRATES = Path("/var/tmp/roteiro-bench-serde")

MODEL = """use serde::{Deserialize, Serialize};

#[derive(Debug, Serialize, Deserialize)]
pub struct Point { pub x: i64, pub y: i64 }

pub fn origin() -> Point {
    return Point { x: 0, y: 0 };
}
"""
APP = """fn main() {
    let p = model::origin();
    if p.x == 0 { println!("{:?}", p); }
}
"""


def workspace(path: Path) -> Path:
    (path / "model" / "src").mkdir(parents=True)
    (path / "app" / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[workspace]\nmembers = ["model", "app"]\nresolver = "2"\n')
    (path / "model" / "Cargo.toml").write_text(
        '[package]\nname = "model"\nversion = "0.1.0"\nedition = "2021"\n'
        '[dependencies]\nserde = { version = "=1.0.219", features = ["derive"] }\n')
    (path / "model" / "src" / "lib.rs").write_text(MODEL)
    (path / "app" / "Cargo.toml").write_text(
        '[package]\nname = "app"\nversion = "0.1.0"\nedition = "2021"\n'
        '[dependencies]\nmodel = { path = "../model" }\n')
    (path / "app" / "src" / "main.rs").write_text(APP)
    return path


def provision_crates(tree: Path) -> Path:
    """A lockfile for the tree and a private cargo home holding what it pins."""
    home = CRATES / "cargo-home"
    lock = CRATES / "Cargo.lock"
    if not lock.is_file():
        CRATES.mkdir(parents=True, exist_ok=True)
        subprocess.run(["cargo", "generate-lockfile", "-q"], cwd=tree, check=True,
                       env={**os.environ, "CARGO_HOME": str(home)})
        shutil.copy(tree / "Cargo.lock", lock)
    shutil.copy(lock, tree / "Cargo.lock")
    subprocess.run([EXE, "fetch-deps", str(tree)], check=True, capture_output=True,
                   env={**os.environ, "CARGO_HOME": str(home)})
    return home


def run(argv: list[str], env: dict[str, str], cwd: Path | None = None) -> tuple[float, str, str]:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, cwd=cwd, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode not in (0, 1):
        sys.exit(f"{' '.join(argv)} exited {done.returncode}:\n{done.stderr[-3000:]}")
    return elapsed, done.stdout, done.stderr


def stages(stderr: str) -> str:
    return "  ".join(f"{m['name']} {m['seconds']}" for m in map(STAGE.match, stderr.splitlines()) if m)


def described(stdout: str) -> str:
    report = json.loads(stdout)
    cache, summary = report["dependency_cache"], report["summary"]
    return (f"cache {cache['state']}, {summary['dependencies_fresh']} dependency units fresh, "
            f"{summary['dependencies_compiled']} compiled, {summary['total']} findings")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--accel", default="tcg")
    parser.add_argument("--layout", default="/var/tmp/roteiro-images/clippy-1.95.0")
    args = parser.parse_args()
    reference = linter_image(args.layout)
    with tempfile.TemporaryDirectory(prefix="bench-depcache-") as work:
        tree = workspace(Path(work) / "ws")
        cargo_home = provision_crates(tree)
        home = Path(work) / "home"
        env = {**os.environ, "ROTEIRO_HOME": str(home), "CARGO_HOME": str(cargo_home)}
        env.pop("CI", None)
        provision(env, args.layout, reference)
        lint = [EXE, "lint", "clippy", str(tree), "--image", reference, "--accel", args.accel,
                "--format", "json"]
        # root filesystem, probe verdict and templates, made by a lint of another tree
        run([EXE, "lint", "clippy", str(ROOT / "examples" / "demo-workspace"), "--image", reference,
             "--accel", args.accel, "--format", "json"], env)
        host, _, _ = run(CLIPPY, {**os.environ, "CARGO_HOME": str(cargo_home),
                                  "CARGO_TARGET_DIR": str(Path(work) / "host-target")}, tree)
        first, first_out, first_err = run(lint, env)
        (tree / "model" / "src" / "lib.rs").write_text(MODEL + "\npub fn edited() -> i64 { 1 }\n")
        second, second_out, second_err = run(lint, env)
        plain, plain_out, _ = run([*lint, "--no-dep-cache"], env)

    print(f"serde-derive workspace, accel {args.accel}, one run each (host clock)")
    print(f"host cargo clippy (empty target dir): {host:7.2f} s")
    print(f"first lint (builds the cache):        {first:7.2f} s  {first / host:5.1f}x host  "
          f"[{described(first_out)}]")
    print(f"second lint (member edited):          {second:7.2f} s  {second / host:5.1f}x host  "
          f"[{described(second_out)}]")
    print(f"same lint with --no-dep-cache:        {plain:7.2f} s  {plain / host:5.1f}x host  "
          f"[{described(plain_out)}]")
    print(f"first / second: {first / second:.1f}x (goal >= 10x); "
          f"no-cache / second: {plain / second:.1f}x")
    print(f"first lint's stages:  {stages(first_err)}")
    print(f"second lint's stages: {stages(second_err)}")


if __name__ == "__main__":
    main()
