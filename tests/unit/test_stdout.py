"""Every command that prints on stdout ends as `cat` does when its reader leaves (141 =
128 + SIGPIPE, nothing on stderr it would not say anyway), and says that a closed or full
stdout is the problem (exit 2, `> FILE`): never exit 4 with a traceback log
(roteiro_py/stdout.py). A BrokenPipeError from a child's pipe stays the failure it is.

Each case is a real process of the real command line, with its own $ROTEIRO_HOME and
$CARGO_HOME, run in a directory under tmp_path; `lint clippy` has only its VM run replaced
by a saved report (tests/data/saved_lint_cli.py): its report goes through the same
`deliver()` as `render`'s, which nothing replaces.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from realcargo import DATA

from roteiro_py import errors
from tests.unit.cargo_support import workspace
from tests.unit.commands.test_doctor import provisioned

READER_LEFT = 128 + signal.SIGPIPE
SAVED = DATA / "reports" / "demo-before-baseline.json"
CLI = [sys.executable, "-m", "roteiro_py"]


def crate(tmp_path: Path) -> Path:
    """A workspace of one crate with no dependencies, and its lockfile: fetch-deps needs no
    network."""
    return workspace(tmp_path, "a")


#: Each command that prints on stdout: its command line under tmp_path, and its exit
#: status with a reader that reads everything (the saved report has warnings: 1; doctor
#: on an empty $ROTEIRO_HOME: 3).
CASES: dict[str, tuple[Callable[[Path], list[str]], int]] = {
    "--help": (lambda _: [*CLI, "--help"], 0),
    "--version": (lambda _: [*CLI, "--version"], 0),
    "docs": (lambda _: [*CLI, "docs"], 0),
    "docs threat-model": (lambda _: [*CLI, "docs", "threat-model"], 0),
    "dockerfile": (lambda _: [*CLI, "dockerfile", "clippy"], 0),
    "config show": (lambda _: [*CLI, "config", "show"], 0),
    "config get": (lambda _: [*CLI, "config", "get", "vm.cpus"], 0),
    "doctor": (lambda _: [*CLI, "doctor"], errors.EXIT_REFUSED),
    "doctor json": (lambda _: [*CLI, "doctor", "--format", "json"], errors.EXIT_REFUSED),
    "cache list": (lambda _: [*CLI, "cache", "list"], 0),
    "render": (lambda _: [*CLI, "render", str(SAVED)], errors.EXIT_FINDINGS),
    "render json": (lambda _: [*CLI, "render", str(SAVED), "--format", "json"], errors.EXIT_FINDINGS),
    "lint clippy": (lambda tmp: [sys.executable, str(DATA / "saved_lint_cli.py"), "lint", "clippy",
                                 str(crate(tmp)), "--quiet"], errors.EXIT_FINDINGS),
    "prefetch": (lambda _: [*CLI, "prefetch", "--analyzer", "clippy", "--image", provisioned()], 0),
    "fetch-deps": (lambda tmp: [*CLI, "fetch-deps", str(crate(tmp))], 0),
}
#: fetch-deps imports its fetchers (cargo/registry.py, cargo/git.py), which issue 20 adds
#: alongside: until they are there it cannot run at all.
FETCHERS = all(importlib.util.find_spec(f"roteiro_py.cargo.{name}") for name in ("registry", "git"))


def run(command: list[str], cwd: Path, env: dict[str, str], *, stdout: int | None = subprocess.PIPE,
        closed: bool = False) -> subprocess.CompletedProcess[bytes]:
    if closed:  # fd 1 closed when the process starts, as `>&-` leaves it
        command = ["bash", "-c", '"$@" >&-', "-", *command]
    return subprocess.run(command, cwd=cwd, env=env, stdout=stdout, stderr=subprocess.PIPE, timeout=120)


def no_internal_error(result: subprocess.CompletedProcess[bytes]) -> None:
    for said in (b"Traceback", b"internal error", b"Exception ignored", b"Broken pipe"):
        assert said not in result.stderr, result.stderr.decode(errors="replace")


@pytest.mark.parametrize("name", [pytest.param(name, marks=pytest.mark.skipif(
    name == "fetch-deps" and not FETCHERS, reason="cargo/registry.py and git.py are not here yet"))
    for name in CASES])
def test_a_reader_that_leaves_or_a_stdout_that_cannot_be_written_is_not_an_internal_error(
        name: str, tmp_path: Path, roteiro_home: Path) -> None:
    make, normal = CASES[name]
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo"),
           "SAVED_REPORT": str(SAVED), "LINT_CALLS": str(tmp_path / "calls")}
    command = make(tmp_path)

    # The control: with a reader, the command prints and exits as it always did.
    ok = run(command, cwd, env)
    assert (ok.returncode, bool(ok.stdout)) == (normal, True), ok.stderr
    no_internal_error(ok)

    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first byte
    try:
        left = run(command, cwd, env, stdout=write_end)
    finally:
        os.close(write_end)
    assert left.returncode == READER_LEFT, left.stderr
    no_internal_error(left)
    if not ok.stderr:  # silent, as cat is: nothing is said that a full run would not say
        assert left.stderr == b""

    closed = run(command, cwd, env, closed=True)
    assert closed.returncode == errors.EXIT_USAGE, closed.stderr
    assert b"prints on stdout, and stdout is closed." in closed.stderr
    assert b" > FILE`." in closed.stderr
    no_internal_error(closed)

    with open("/dev/full", "wb") as full:
        unwritable = run(command, cwd, env, stdout=full.fileno())
    assert unwritable.returncode == errors.EXIT_USAGE, unwritable.stderr
    assert b"could not write on stdout (No space left on device)." in unwritable.stderr
    no_internal_error(unwritable)

    assert not (roteiro_home / "logs").exists(), list((roteiro_home / "logs").iterdir())


def test_a_closed_stdout_refuses_a_lint_before_it_runs(tmp_path: Path, roteiro_home: Path) -> None:
    """The report has nowhere to go: refused with the other output checks, before the VM
    (the stand-in counts its runs), not after a whole lint. Control: with a stdout, it runs."""
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo"),
           "SAVED_REPORT": str(SAVED), "LINT_CALLS": str(tmp_path / "calls")}
    command = [sys.executable, str(DATA / "saved_lint_cli.py"), "lint", "clippy", str(crate(tmp_path))]
    closed = run(command, tmp_path, env, closed=True)
    assert closed.returncode == errors.EXIT_USAGE and b"stdout is closed" in closed.stderr
    assert not (tmp_path / "calls").exists()
    # every report to a file: stdout is not needed, and the lint runs
    to_file = run([*command, "--output", str(tmp_path / "report.txt")], tmp_path, env, closed=True)
    assert to_file.returncode == errors.EXIT_FINDINGS, to_file.stderr
    assert (tmp_path / "calls").read_text() == "lint\n" and (tmp_path / "report.txt").read_text()


#: `config show` whose core writes into the stdin of a child that has exited: EPIPE on a
#: pipe that is not stdout.
CHILD_PIPE = """
import subprocess, sys
from roteiro_py.commands import config

def show(path):
    child = subprocess.Popen(["true"], stdin=subprocess.PIPE)
    child.wait()
    child.stdin.write(b"x" * 65536)
    child.stdin.flush()

config.show = show
from roteiro_py.cli.app import main
sys.exit(main(["config", "show"]))
"""


@pytest.mark.parametrize("reader", ["present", "left"])
def test_a_broken_pipe_to_a_child_is_not_the_reader_of_stdout_leaving(
        reader: str, tmp_path: Path, roteiro_home: Path) -> None:
    """A child that died under the tool is a failure (exit 4, with its log), whether or not
    stdout's reader has left too: only a write to stdout itself is the reader leaving.
    Checking the state of fd 1 after the fact would call the second case 141."""
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo")}
    read_end, write_end = os.pipe()
    if reader == "left":
        os.close(read_end)
    try:
        result = run([sys.executable, "-c", CHILD_PIPE], tmp_path, env, stdout=write_end)
    finally:
        os.close(write_end)
        if reader == "present":
            os.close(read_end)
    assert result.returncode == errors.EXIT_INTERNAL, result.stderr
    assert b"internal error: BrokenPipeError" in result.stderr
    assert len(list((roteiro_home / "logs").iterdir())) == 1


def _drain(fd: int, into: bytearray, start: threading.Event) -> None:
    """Read slowly, a page at a time: the writer meets a pipe with room for part of a write."""
    start.wait()
    while chunk := os.read(fd, 4096):
        into += chunk
        time.sleep(0.001)


@pytest.mark.parametrize("unbuffered", [True, False])
def test_a_non_blocking_stdout_that_fills_waits_for_its_reader(
        unbuffered: bool, tmp_path: Path, roteiro_home: Path) -> None:
    """fd 1 may be a pipe whose file description another process made O_NONBLOCK (a shell,
    node, a CI runner sharing it): a write that finds it full is EAGAIN, which io.FileIO
    answers with None, and BufferedWriter with BlockingIOError. It was exit 1 and a bare
    traceback (the flush in main, then again in restore); it must wait for the reader, as a
    blocking stdout does, and print every byte. Control: the same command on a blocking pipe.
    Unbuffered (PYTHONUNBUFFERED), a write the pipe has room for only part of is short, and
    neither TextIOWrapper nor `sys.stdout.buffer.write` writes the rest."""
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo")}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    command = [*CLI, "docs", "threat-model"]  # ~20 KB, written at once
    expected = run(command, tmp_path, env)
    assert expected.returncode == 0 and len(expected.stdout) > 4096, expected.stderr

    read_end, write_end = os.pipe()
    os.set_blocking(write_end, False)
    filled = 0
    with contextlib.suppress(BlockingIOError):
        while True:  # full before the command writes its first byte
            filled += os.write(write_end, b"x" * 4096)
    received = bytearray()
    start = threading.Event()
    reader = threading.Thread(target=_drain, args=(read_end, received, start))
    reader.start()
    try:
        child = subprocess.Popen(command, cwd=tmp_path, env=env, stdout=write_end, stderr=subprocess.PIPE)
        os.close(write_end)
        time.sleep(1)  # the command finds the pipe full, and must wait
        start.set()
        _out, stderr = child.communicate(timeout=120)
    finally:
        start.set()
        reader.join(timeout=120)
        os.close(read_end)
    assert child.returncode == 0, stderr
    no_internal_error(subprocess.CompletedProcess(command, child.returncode, b"", stderr))
    assert bytes(received[filled:]) == expected.stdout


#: A command's core writing stdout, then stderr (as `prefetch --vm-assets --analyzer`
#: lists the assets, then says how the image is fetched), both into one pipe.
INTERLEAVED = """
import sys
import threading
import time
from roteiro_py.commands import config

def show(path):
    sys.stdout.write("on stdout\\n")
    sys.stderr.write("on stderr\\n")

config.show = show
from roteiro_py.cli.app import main
sys.exit(main(["config", "show"]))
"""


@pytest.mark.parametrize("unbuffered", [True, False])
def test_an_unbuffered_stdout_stays_unbuffered(unbuffered: bool, tmp_path: Path, roteiro_home: Path) -> None:
    """PYTHONUNBUFFERED=1 (`python -u`, set in many CI images so that a log keeps its order)
    makes stdout write each line as it is printed: a log of stdout and stderr together reads
    in the order things happened. The wrapper kept Python's buffer, so stdout came last.
    Control: without it, stdout is block-buffered on a pipe, as Python has it."""
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo")}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    result = subprocess.run([sys.executable, "-c", INTERLEAVED], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=120)
    assert result.returncode == 0, result.stdout
    order = [b"on stdout\n", b"on stderr\n"]
    assert result.stdout == b"".join(order if unbuffered else reversed(order))


@pytest.mark.parametrize("name", ["--help", "config show", "docs"])
@pytest.mark.parametrize("unbuffered", [True, False])
def test_a_stdout_that_cannot_be_written_is_said_buffered_or_not(
        name: str, unbuffered: bool, tmp_path: Path, roteiro_home: Path) -> None:
    """Unbuffered (PYTHONUNBUFFERED=1), each write reaches fd 1 as it is made, inside
    libraries: click probes the stream with write("") under `except Exception`, and /dev/full
    refuses even an empty write. The refusal must still be said, whichever way stdout is
    buffered."""
    env = {**os.environ, "ROTEIRO_HOME": str(roteiro_home), "CARGO_HOME": str(tmp_path / "cargo")}
    env.pop("PYTHONUNBUFFERED", None)
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    command = CASES[name][0](tmp_path)
    with open("/dev/full", "wb") as full:
        unwritable = run(command, tmp_path, env, stdout=full.fileno())
    assert unwritable.returncode == errors.EXIT_USAGE, unwritable.stderr
    assert b"could not write on stdout (No space left on device)." in unwritable.stderr
    no_internal_error(unwritable)
    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        left = run(command, tmp_path, env, stdout=write_end)
    finally:
        os.close(write_end)
    assert (left.returncode, left.stderr) == (READER_LEFT, b"")
