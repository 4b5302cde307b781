"""Wall time of `pylint-sandbox --help` and of the refusals before any VM, in one run.

Prints medians over N runs, the ratio of each refusal to `--help` (issue 11's target: at
most 2x) and to a bare `python -c pass`, so the figures compare across machines. The
refusals: no image configured; a tag instead of a digest; `render` with an unknown format
and `prefetch` with nothing to do (usage errors before any report or store loads); an
image not provisioned (a digest the store lacks: this one passes the hypervisor check
first, so it needs the VM assets and a probe verdict, taken from $ROTEIRO_TEST_HOME,
/var/tmp/roteiro-test-home by default, as the integration tests provision it; skipped when
that has none).
Not a test: numbers are reported, never asserted.

    python bench/cli_startup.py [--runs N]
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

RUNS = 15
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
PROVISIONED = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"))
UNPROVISIONED = "localhost/bench/clippy@sha256:" + "0" * 64


def median_seconds(argv: list[str], env: dict[str, str], runs: int,
                   expect: int | None = None) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        done = subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append(time.perf_counter() - started)
        if expect is not None and done.returncode != expect:
            raise SystemExit(f"{argv[1:]} exited {done.returncode}, not {expect}:\n"
                             f"{done.stderr.decode(errors='replace')[-2000:]}")
    return statistics.median(samples)


def provisioned_home(home: Path) -> bool:
    """Copy the VM assets and the probe's verdicts into `home`; False when there are none."""
    assets, verdicts = PROVISIONED / "vm", PROVISIONED / "cache" / "vm-probe"
    if not (assets / "manifest.json").is_file() or not verdicts.is_dir():
        return False
    shutil.copytree(assets, home / "vm")
    shutil.copytree(verdicts, home / "cache" / "vm-probe")
    return True


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    runs = parser.parse_args().runs
    rows: list[tuple[str, float]] = []
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as ready:
        tree = Path(empty) / "tree"  # a crate: the not-provisioned refusal locates it first
        (tree / "src").mkdir(parents=True)
        (tree / "Cargo.toml").write_text('[package]\nname = "b"\nversion = "0.1.0"\n')
        (tree / "src" / "lib.rs").write_text("")
        env = {**os.environ, "ROTEIRO_HOME": empty}
        bare = median_seconds([sys.executable, "-c", "pass"], env, runs)
        help_ = median_seconds([EXE, "--help"], env, runs, expect=0)
        rows.append(("refusal: no image", median_seconds(
            [EXE, "lint", "clippy", str(tree)], env, runs, expect=3)))
        rows.append(("refusal: tag, not digest", median_seconds(
            [EXE, "lint", "clippy", str(tree), "--image", "rust:1.95"], env, runs, expect=2)))
        rows.append(("refusal: render --format", median_seconds(
            [EXE, "render", str(tree / "report.json"), "--format", "bogus"], env, runs, expect=2)))
        rows.append(("refusal: prefetch (usage)", median_seconds([EXE, "prefetch"], env, runs, expect=2)))
        if provisioned_home(Path(ready)):
            ready_env = {**os.environ, "ROTEIRO_HOME": ready}
            argv = [EXE, "lint", "clippy", str(tree), "--image", UNPROVISIONED, "--accel", "tcg"]
            subprocess.run(argv, env=ready_env, capture_output=True, check=False)  # a probe, once
            rows.append(("refusal: not provisioned", median_seconds(argv, ready_env, runs,
                                                                    expect=3)))
        else:
            print(f"(no VM assets in {PROVISIONED}: the not-provisioned refusal is skipped)")
    print(f"median of {runs} runs")
    print(f"python -c pass             {bare * 1000:7.1f} ms")
    print(f"pylint-sandbox --help      {help_ * 1000:7.1f} ms  ({help_ / bare:.1f}x bare python)")
    for name, seconds in rows:
        print(f"{name:<26} {seconds * 1000:7.1f} ms  ({seconds / help_:.2f}x --help, "
              f"{seconds / bare:.1f}x bare python)")


if __name__ == "__main__":
    main()
