"""What `pylint-sandbox` costs on the host before its first stage: `--help`, the refusals
before any VM, and a lint up to the moment its VM starts, in one interleaved run.

Per case, printed: the median wall time and the median CPU time (user + sys of the
process and every child it waited for, from getrusage: far less sensitive to the load of
a shared machine than the wall time), each as a ratio to `--help`; the modules loaded
(`len(sys.modules)` when the command returns), and which of the heavy ones were among
them. Every round runs every case under every revision once, in an order rotated from
round to round, so a before/after ratio is taken side by side.

The cases: `--help`; no image configured; a tag instead of a digest; `render` with an
unknown format and `prefetch` with nothing to do (usage errors before any report or store
loads); an image not provisioned (a digest the store lacks: this one passes the
hypervisor check first, so it needs the VM assets and a probe verdict, taken from
$ROTEIRO_TEST_HOME, /var/tmp/roteiro-test-home by default, as the integration tests
provision it; skipped when that has none); with `--home HOME` (a ROTEIRO_HOME whose
config names a provisioned image, its root filesystem and VM template already made, as
after one lint), a lint of an empty crate stopped where its VM would start (the template's
restore or a cold boot): the host's part of a lint before its clippy stage. That case
uses HOME's caches (a scratch disk is made and removed per run) and runs with --accel tcg.

Each REV is a directory holding a `roteiro_py/` (`git archive <commit> roteiro_py | tar -x
-C DIR`; compile it, `python -m compileall -q DIR`, when PYTHONDONTWRITEBYTECODE is set,
or every run pays for compiling), run with PYTHONPATH=DIR; with none, the package this
interpreter imports. Not a test: numbers are reported, never asserted.

    python bench/cli_startup.py [--runs N] [--home HOME] [NAME=DIR ...]
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

RUNS = 15
PROVISIONED = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"))
UNPROVISIONED = "localhost/bench/clippy@sha256:" + "0" * 64
#: Modules whose presence is reported per case: each costs 10-150 ms to import here.
HEAVY = ("pydantic", "roteiro_py.config_model", "roteiro_py.report.model", "rich.console",
         "cryptography", "filelock", "http.client", "ssl", "concurrent.futures", "tarfile",
         "importlib.metadata", "dulwich", "docker", "hypothesis")
#: Runs the command line as the installed script does, then writes the modules loaded to
#: stderr's last line. With BENCH_STOP_AT_VM set, the lint stops where its VM would
#: start, the template's restore or a cold boot: the one way a child starts
#: (process/stream.py `spawn`) is wrapped before main(), and a qemu given more than
#: `--version` raises SystemExit(99) there, which unwinds the run (its cleanup included).
RUNNER = """\
import os, sys
sys.argv[0] = "pylint-sandbox"
def modules():
    os.write(2, ("\\n@modules " + " ".join(sorted(sys.modules)) + "\\n").encode())
if os.environ.get("BENCH_STOP_AT_VM"):
    import roteiro_py.process.stream as stream
    spawn = stream.spawn
    def stopped(argv, *args, **kwargs):
        if len(argv) > 3 and any(os.path.basename(a).startswith("qemu-system") for a in argv):
            raise SystemExit(99)
        return spawn(argv, *args, **kwargs)
    stream.spawn = stopped
from roteiro_py.cli.app import main
code = main()
modules()
sys.exit(code)
"""


@dataclass
class Samples:
    wall: list[float] = field(default_factory=list)
    cpu: list[float] = field(default_factory=list)
    modules: set[str] = field(default_factory=set)


def timed(argv: list[str], env: dict[str, str], expect: int | None, into: Samples) -> None:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, check=False, cwd=tempfile.gettempdir())
    into.wall.append(time.perf_counter() - started)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    into.cpu.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    if expect is not None and done.returncode != expect:
        raise SystemExit(f"{argv[1:]} exited {done.returncode}, not {expect}:\n"
                         f"{done.stderr.decode(errors='replace')[-2000:]}")
    last = done.stderr.decode(errors="replace").rstrip("\n").rpartition("\n")[2]
    if last.startswith("@modules "):
        into.modules = set(last.split()[1:])


def provisioned_home(home: Path) -> bool:
    """Copy the VM assets and the probe's verdicts into `home`; False when there are none."""
    assets, verdicts = PROVISIONED / "vm", PROVISIONED / "cache" / "vm-probe"
    if not (assets / "manifest.json").is_file() or not verdicts.is_dir():
        return False
    shutil.copytree(assets, home / "vm")
    shutil.copytree(verdicts, home / "cache" / "vm-probe")
    return True


def crate(path: Path) -> Path:
    """An empty crate with its lockfile: the not-provisioned refusal locates it first."""
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text('[package]\nname = "b"\nversion = "0.1.0"\n')
    (path / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "b"\nversion = "0.1.0"\n')
    (path / "src" / "lib.rs").write_text("")
    return path


def heavy_loaded(modules: set[str]) -> str:
    return " ".join(name for name in HEAVY
                    if any(m == name or m.startswith(name + ".") for m in modules)) or "-"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=RUNS)
    parser.add_argument("--home", type=Path, default=None,
                        help="a ROTEIRO_HOME with a provisioned image configured, for the lint case")
    parser.add_argument("revisions", nargs="*", help="NAME=DIR, DIR holding roteiro_py/")
    args = parser.parse_args()
    revisions = {name: str(Path(d).resolve()) for name, d in (r.split("=", 1) for r in args.revisions)}
    if not revisions:
        revisions = {"this": os.environ.get("PYTHONPATH", "")}
    py = [sys.executable, "-c", RUNNER]
    with tempfile.TemporaryDirectory() as empty, tempfile.TemporaryDirectory() as ready:
        tree = crate(Path(empty) / "tree")
        base = {**os.environ, "ROTEIRO_HOME": empty}
        base.pop("CI", None)
        cases: list[tuple[str, list[str], dict[str, str], int | None]] = [
            ("python -c pass", [sys.executable, "-c", "pass"], base, 0),
            ("--help", [*py, "--help"], base, 0),
            ("refusal: no image", [*py, "lint", "clippy", str(tree)], base, 3),
            ("refusal: tag, not digest", [*py, "lint", "clippy", str(tree), "--image", "rust:1.95"], base, 2),
            ("refusal: render --format",
             [*py, "render", str(tree / "report.json"), "--format", "bogus"], base, 2),
            ("refusal: prefetch (usage)", [*py, "prefetch"], base, 2),
        ]
        if provisioned_home(Path(ready)):
            ready_env = {**base, "ROTEIRO_HOME": ready}
            argv = [*py, "lint", "clippy", str(tree), "--image", UNPROVISIONED, "--accel", "tcg"]
            subprocess.run(argv, env=ready_env, capture_output=True, check=False)  # a probe, once
            cases.append(("refusal: not provisioned", argv, ready_env, 3))
        else:
            print(f"(no VM assets in {PROVISIONED}: the not-provisioned refusal is skipped)")
        if args.home is not None:
            lint_env = {**base, "ROTEIRO_HOME": str(args.home.resolve()), "BENCH_STOP_AT_VM": "1"}
            cases.append(("lint, up to its VM", [*py, "lint", "clippy", str(tree), "--accel", "tcg", "-q"],
                          lint_env, 99))
        arms = [(name, rev) for name, *_ in cases for rev in revisions]
        samples = {arm: Samples() for arm in arms}
        by_name = {name: (argv, env, expect) for name, argv, env, expect in cases}
        for round_ in range(args.runs):
            shift = round_ % len(arms)
            for name, rev in arms[shift:] + arms[:shift]:
                argv, env, expect = by_name[name]
                timed(argv, {**env, "PYTHONPATH": revisions[rev]}, expect, samples[(name, rev)])
    print(f"medians of {args.runs} interleaved rounds; CPU = user + sys of the process and its children")
    print(f"{'case':<27} {'revision':<10} {'wall ms':>8} {'CPU ms':>7} {'CPU/help':>8} {'modules':>7}  "
          "heavy modules loaded")
    for name, rev in sorted(arms, key=lambda arm: [n for n, *_ in cases].index(arm[0])):
        got, help_ = samples[(name, rev)], samples[("--help", rev)]
        wall, cpu = statistics.median(got.wall), statistics.median(got.cpu)
        print(f"{name:<27} {rev:<10} {wall * 1000:8.1f} {cpu * 1000:7.1f} "
              f"{cpu / statistics.median(help_.cpu):7.2f}x {len(got.modules) or '-':>7}  "
              f"{heavy_loaded(got.modules) if got.modules else ''}")


if __name__ == "__main__":
    main()
