"""Wall time of `pylint-sandbox --help` and of a cheap refusal, measured in one run.

Prints medians over N runs and the ratio to a bare `python -c pass`, so the figure can be
compared across machines. Not a test: numbers are reported, never asserted.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNS = 15
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))


def median_seconds(argv: list[str], env: dict[str, str]) -> float:
    samples = []
    for _ in range(RUNS):
        started = time.perf_counter()
        subprocess.run(argv, env=env, capture_output=True, check=False)
        samples.append(time.perf_counter() - started)
    return statistics.median(samples)


def main() -> None:
    with tempfile.TemporaryDirectory() as home:
        env = {**os.environ, "ROTEIRO_HOME": home}
        bare = median_seconds([sys.executable, "-c", "pass"], env)
        help_ = median_seconds([EXE, "--help"], env)
        refusal = median_seconds([EXE, "lint", "clippy", home, "--image", "rust:1.95"], env)
        no_image = median_seconds([EXE, "lint", "clippy", home], env)
    print(f"python -c pass            {bare * 1000:7.1f} ms")
    print(f"pylint-sandbox --help     {help_ * 1000:7.1f} ms  ({help_ / bare:.1f}x bare python)")
    print(f"refusal: tag, not digest  {refusal * 1000:7.1f} ms  ({refusal / bare:.1f}x bare python)")
    print(f"refusal: no image         {no_image * 1000:7.1f} ms  ({no_image / bare:.1f}x bare python)")


if __name__ == "__main__":
    main()
