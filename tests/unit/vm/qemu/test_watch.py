"""A dependency cache's build names the crates cargo compiles, in a CI log, at the default
verbosity (issue 23 §2: nothing showed for the 3 minutes of the build).

The build's job is shaped unlike a lint's: the probes, one cargo step per selection
(lint/dep_cache.py SELECTIONS), then a cleanup step (BUILD_CLEANUP), so cargo's is not the
last. The streams fed here are real cargo's stderr (the host's cargo on a copy of
examples/demo-workspace, each selection in turn), cut in chunks as the read loop gets
them, through the watch and the renderer a non-tty run uses.
"""

from __future__ import annotations

import io
from pathlib import Path

from roteiro_py import progress as P
from roteiro_py.lint.dep_cache import BUILDING, SELECTIONS
from roteiro_py.vm.qemu.watch import JobWatch
from tests.data.realcargo import DEMO, copy_crate, run_clippy

PROBES = 2  # the steps before cargo's in the build (dep_cache._build: steps_for's probes)
STEPS = PROBES + len(SELECTIONS) + 1  # cargo's, then the cleanup
CLEANUP = STEPS - 1


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def cargo_stderr(tmp_path: Path) -> list[bytes]:
    """cargo's stderr for each selection the build runs, in turn, on one target dir."""
    tree = copy_crate(DEMO, tmp_path / "demo")
    said = []
    for selection in SELECTIONS:
        run = run_clippy(tree, target_dir=tmp_path / "target",
                         argv=["cargo", "clippy", "--offline", "--locked", "--workspace", *selection])
        assert run.status == 0, run.stderr
        said.append(run.stderr.encode())
    return said


def build_log(stderr: list[bytes], cargo: int | None) -> str:
    """What a CI log shows of a dependency cache build whose cargo steps write `stderr`
    (`cargo`: the step the watch is told is cargo's first)."""
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    plain.stage(P.DEP_CACHE)
    plain.announce(BUILDING)
    watch = JobWatch(P.NotesOnly(plain), STEPS, cargo)
    for index in range(PROBES):
        watch.feed("status", f"start {index}\nexit {index} 0 0\n".encode())
    for index, said in enumerate(stderr, start=PROBES):
        watch.feed("status", f"start {index}\n".encode())
        for line in said.splitlines(keepends=True):  # one chunk a line, 10 s apart
            watch.feed(f"stderr{index}", line)
            clock.now += P.PLAIN_NOTE_INTERVAL_S
        watch.feed("status", f"exit {index} 0 0\n".encode())
    watch.feed("status", f"start {CLEANUP}\n".encode())
    watch.feed(f"stderr{CLEANUP}", b"   Checking the-cleanup v0\n")
    plain.finish()
    return out.getvalue()


def test_the_build_names_each_crate_cargo_checks_in_a_ci_log(tmp_path: Path) -> None:
    stderr = cargo_stderr(tmp_path)
    assert b"Checking demo-core v0.1.0" in stderr[0]  # the stream is cargo's, naming the crates
    log = build_log(stderr, PROBES)
    notes = [line.split(None, 2)[2] for line in log.splitlines()
             if line.startswith(P.DEP_CACHE) and "checking" in line]
    assert "checking demo-core v0.1.0" in notes and "checking demo-app v0.1.0" in notes, log
    assert log.splitlines()[0] == P.note_prefix(P.DEP_CACHE) + BUILDING  # once per lockfile
    assert "\x1b" not in log and "\r" not in log


def test_control_watching_the_last_step_as_before_names_no_crate(tmp_path: Path) -> None:
    """Red before: the watch took the last step for cargo's (the cleanup here) and the
    log said nothing but the stage's end for the whole build."""
    log = build_log(cargo_stderr(tmp_path), None)
    assert "demo-core" not in log and "demo-app" not in log, log
    assert "checking the-cleanup v0" in log  # what it watched instead
