"""Framed streaming with real children: deadlines, departures, floods, the exited hook.

Every child here is a real process (python -c or sh); the only fake is the read error
in `test_a_failed_read_is_never_a_clean_exit`, because a real pipe cannot be made to
fail a read on demand.
"""

from __future__ import annotations

import errno
import os
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.platform_support import PIDFD_KERNEL
from roteiro_py.process import stream as stream_module
from roteiro_py.process.stream import (
    QUEUE_FRAMES,
    READ_BYTES,
    Exit,
    Failed,
    Frame,
    Output,
    collect,
    spawn,
    spawn_sandboxed,
)

PY = sys.executable

pytestmark = pytest.mark.timeout(15)


def py(source: str) -> list[str]:
    return [PY, "-c", source]


def state(pid: int) -> str | None:
    """The process state letter from /proc/PID/stat, or None if there is no such pid."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):  # gone, or going as we read
        return None
    return stat.rpartition(")")[2].split()[0]


def wait_until(predicate: Callable[[], bool], seconds: float) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def outputs(frames: Iterator[Frame] | list[Frame]) -> list[Output]:
    return [frame for frame in frames if isinstance(frame, Output)]


# -- environment ----------------------------------------------------------------------


def test_sandboxed_env_is_fresh_and_the_probe_can_see_a_leak(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROTEIRO_AMBIENT_PROBE", "ambient-secret")
    probe = py("import os; print(os.environ.get('ROTEIRO_AMBIENT_PROBE'), "
               "os.environ.get('ROTEIRO_PASSED'), os.environ['PATH'])")
    sandboxed = collect(spawn_sandboxed(probe, env={"ROTEIRO_PASSED": "passed"}, timeout=10))
    assert sandboxed.stdout.decode().split() == [
        "None", "passed", stream_module.DEFAULT_PATH]
    # Control arm: the same probe does see the ambient variable when it is inherited.
    inherited = collect(spawn(probe, env={"ROTEIRO_PASSED": "passed"}, timeout=10))
    assert inherited.stdout.decode().split()[:2] == ["ambient-secret", "passed"]


# -- the deadline ---------------------------------------------------------------------


def test_the_deadline_kills_the_whole_group_including_a_writing_grandchild(
    tmp_path: Path,
) -> None:
    marker = tmp_path / "marker"
    script = f"(while :; do echo x >> {marker}; sleep 0.02; done) & sleep 60"
    start = time.monotonic()
    frames = list(spawn(["sh", "-c", script], timeout=1.0))
    assert time.monotonic() - start < 4
    assert isinstance(frames[-1], Failed) and frames[-1].code == "timeoutExceeded"
    size = marker.stat().st_size
    assert size > 0, "the grandchild never wrote, so this test proves nothing"
    time.sleep(0.3)
    assert marker.stat().st_size == size, "the grandchild outlived the deadline"


def test_a_child_that_ignores_sigterm_is_still_killed_at_the_deadline() -> None:
    child = py("import os, signal, time\n"
               "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
               "os.write(1, b'ready\\n')\n"
               "time.sleep(60)")
    start = time.monotonic()
    with spawn(child, timeout=1.0) as stream:
        frames = list(stream)
        pid = stream.pid
    assert outputs(frames)[0].data == b"ready\n"
    assert isinstance(frames[-1], Failed) and frames[-1].code == "timeoutExceeded"
    assert time.monotonic() - start < 4
    assert state(pid) is None


# -- draining -------------------------------------------------------------------------


def test_both_pipes_flooded_without_deadlock_and_byte_exact() -> None:
    size = 5 * 1024 * 1024
    child = py("import os\n"
               f"out = bytes(range(256)) * ({size} // 256)\n"
               "err = bytes(reversed(out))\n"
               "for i in range(0, len(out), 100000):\n"
               "    os.write(2, err[i:i + 100000])\n"
               "    os.write(1, out[i:i + 100000])\n")
    result = collect(spawn(child, timeout=12))
    expected = bytes(range(256)) * (size // 256)
    assert result.exit == 0
    assert len(result.stdout) == size and result.stdout == expected
    assert len(result.stderr) == size and result.stderr == bytes(reversed(expected))


def test_frames_arrive_while_the_child_is_still_running() -> None:
    child = py("import os, time; os.write(1, b'first\\n'); time.sleep(30)")
    with spawn(child, timeout=10) as stream:
        first = next(stream)
        assert first == Output(1, "stdout", b"first\n")
        assert state(stream.pid) in ("S", "R")


def test_chunk_framing_delivers_a_prompt_while_the_child_waits_for_input() -> None:
    with spawn(["sh", "-c", "printf 'name? '; read x; echo \"hello $x\""], timeout=10,
               stdin="pipe") as stream:
        assert next(stream) == Output(1, "stdout", b"name? ")
        # The prompt arrived before any input was sent; the shell then blocks in read
        # (on a loaded machine it may still be running when the frame arrives: wait for
        # it to block, bounded, rather than sample its state once).
        waited = time.monotonic() + 5
        while state(stream.pid) != "S" and time.monotonic() < waited:
            time.sleep(0.01)
        assert state(stream.pid) == "S"  # blocked in read, no newline written
        assert stream.stdin is not None
        stream.stdin.write(b"bob\n")
        stream.stdin.close()
        rest = list(stream)
    assert b"".join(f.data for f in outputs(rest)) == b"hello bob\n"
    assert rest[-1] == Exit(0, False)


def test_closing_stdin_ends_cat_and_null_stdin_is_none() -> None:
    stream = spawn(["cat"], timeout=10, stdin="pipe")
    assert stream.stdin is not None
    stream.stdin.write(b"abc")
    stream.stdin.close()
    result = collect(stream)
    assert (result.stdout, result.exit, result.timed_out) == (b"abc", 0, False)
    with spawn(["cat"], timeout=10) as null:
        assert null.stdin is None
        assert list(null) == [Exit(0, False)]


def test_line_framing_splits_at_newlines_and_bounds_a_line_without_one() -> None:
    child = py("import sys; sys.stdout.write('a\\nbb\\n' + 'x' * 200000); sys.stdout.flush()")
    frames = list(spawn(child, timeout=10, framing="line"))
    out = outputs(frames)
    assert [f.data for f in out[:2]] == [b"a\n", b"bb\n"]
    assert all(len(f.data) <= READ_BYTES for f in out)
    assert b"".join(f.data for f in out[2:]) == b"x" * 200000
    assert frames[-1] == Exit(0, False)


def test_a_chatty_child_blocks_instead_of_growing_the_queue(tmp_path: Path) -> None:
    progress = tmp_path / "progress"
    child = py("import os\n"
               f"fd = os.open({str(progress)!r}, os.O_WRONLY | os.O_CREAT)\n"
               "chunk = b'y' * 65536\n"
               "n = 0\n"
               "while True:\n"
               "    os.write(1, chunk); n += 1\n"
               "    os.pwrite(fd, str(n).encode().ljust(12), 0)\n")
    with spawn(child, timeout=10) as stream:
        next(stream)
        time.sleep(0.6)  # stop consuming; an unbounded queue would take megabytes here
        written = int(progress.read_text())
    # Queue, the two frames in the readers' hands, and the pipe's own buffer.
    assert written <= QUEUE_FRAMES + 4, f"{written} chunks written while nobody read"
    assert written >= QUEUE_FRAMES, "the child was not producing at all"


# -- departure ------------------------------------------------------------------------


def test_endless_output_with_a_departed_consumer_ends_within_seconds() -> None:
    with spawn(py("import os\nwhile True: os.write(1, b'z' * 4096)"), timeout=60) as stream:
        pid = stream.pid
        assert isinstance(next(stream), Output)
        start = time.monotonic()
    assert time.monotonic() - start < 3
    assert state(pid) is None


def test_a_silent_child_with_a_departed_consumer_ends() -> None:
    stream = spawn(["sleep", "60"], timeout=60)
    pid = stream.pid
    start = time.monotonic()
    stream.close()
    assert time.monotonic() - start < 3
    assert state(pid) is None


def test_a_dropped_iterator_kills_the_child() -> None:
    pid = 0
    for frame in spawn(["sh", "-c", "echo $$; exec sleep 60"], timeout=60):
        assert isinstance(frame, Output)
        pid = int(frame.data)
        break
    # Nothing but the loop referenced the stream; it is collected as the loop ends.
    assert pid > 0
    assert wait_until(lambda: state(pid) is None, 5), "the child outlived its consumer"


# -- the terminal frame ---------------------------------------------------------------


def test_one_seq_counter_rebuilds_the_order_across_both_streams() -> None:
    order = ["out", "err", "err", "out", "err", "out"]
    child = py("import os, sys\n"
               f"for i, s in enumerate({order!r}):\n"
               "    os.write(1 if s == 'out' else 2, f'{s}{i}'.encode())\n"
               "    sys.stdin.readline()\n")
    seen: list[Output] = []
    with spawn(child, timeout=10, stdin="pipe") as stream:
        assert stream.stdin is not None
        for frame in stream:
            if isinstance(frame, Output):
                seen.append(frame)
                stream.stdin.write(b"\n")  # the child writes its next piece only now
    assert [f.seq for f in seen] == [1, 2, 3, 4, 5, 6]
    assert [f.data.decode() for f in sorted(seen, key=lambda f: f.seq)] == [
        f"{s}{i}" for i, s in enumerate(order)]
    assert [f.stream for f in seen] == [
        "stdout" if s == "out" else "stderr" for s in order]


def test_a_read_dropped_over_the_cap_leaves_a_gap_in_the_sequence() -> None:
    child = py("import os, sys, time\n"
               "os.write(1, b'A' * 15); sys.stdin.readline()\n"
               "os.write(1, b'B' * 5); time.sleep(0.3)\n"
               "os.write(2, b'C')\n")
    with spawn(child, timeout=10, stdin="pipe", max_bytes=10) as stream:
        assert stream.stdin is not None
        first = next(stream)
        stream.stdin.write(b"\n")
        frames = [first, *stream]
    assert frames == [
        Output(1, "stdout", b"A" * 10),  # cut at the cap, the rest of the read dropped
        Exit(0, truncated=True),  # seq 2 (B) and 3 (C, on stderr: the cap is a total) dropped
    ]
    assert stream.truncated_streams == {"stdout", "stderr"}


FLOOD = ("import os, sys\n"
         "n = int(sys.argv[1])\n"
         "if os.fork() == 0:\n"
         "    os.write(2, b'E' * n); os._exit(0)\n"
         "os.write(1, b'O' * n); os.wait()\n")


def test_the_cap_is_a_total_over_both_streams_of_a_flooding_child() -> None:
    cap = 300_000
    collected = collect(spawn([sys.executable, "-c", FLOOD, str(3 * cap)], timeout=30,
                              max_bytes=cap))
    assert collected.exit == 0
    kept = len(collected.stdout) + len(collected.stderr)
    assert kept == cap  # was up to 2 x cap: each stream had a cap of its own
    assert collected.truncated_streams  # the stream(s) that went past it are flagged
    assert set(collected.stdout) <= {ord("O")} and set(collected.stderr) <= {ord("E")}


def test_under_the_total_cap_both_streams_arrive_whole() -> None:
    collected = collect(spawn([sys.executable, "-c", FLOOD, "100000"], timeout=30,
                              max_bytes=200_000))
    assert (collected.stdout, collected.stderr) == (b"O" * 100_000, b"E" * 100_000)
    assert not collected.truncated and collected.exit == 0


def test_a_signal_death_is_an_exit_with_a_negative_code_and_the_only_terminal() -> None:
    frames = list(spawn(["sh", "-c", "echo bye; kill -TERM $$"], timeout=10))
    assert frames == [Output(1, "stdout", b"bye\n"), Exit(-15, False)]


def test_a_failed_read_is_never_a_clean_exit(monkeypatch: pytest.MonkeyPatch) -> None:
    # Fake: a real pipe cannot be made to fail a read on demand.
    real_read = os.read

    def failing_read(fd: int, n: int) -> bytes:
        if threading.current_thread().name.startswith("stderr-"):
            raise OSError(errno.EIO, "Input/output error")
        return real_read(fd, n)

    monkeypatch.setattr(os, "read", failing_read)
    frames = list(spawn(["sh", "-c", "echo out; echo err >&2"], timeout=10))
    assert isinstance(frames[-1], Failed) and frames[-1].code == "outputReadFailed"
    assert "stderr" in frames[-1].message
    assert not any(isinstance(f, Exit) for f in frames)


# -- the exited hook ------------------------------------------------------------------


@pytest.mark.parametrize("ending", ["exit", "deadline", "departed"])
def test_the_exited_hook_sees_a_zombie_and_the_pid_is_gone_after(ending: str) -> None:
    seen: list[tuple[int, str | None]] = []
    argv = ["sh", "-c", "echo ready; exit 3"] if ending == "exit" else [
        "sh", "-c", "echo ready; exec sleep 60"]
    timeout = 0.5 if ending == "deadline" else 10
    stream = spawn(argv, timeout=timeout, exited=lambda pid: seen.append((pid, state(pid))))
    expected = {"exit": Exit(3, False), "deadline": "timeoutExceeded", "departed": None}
    with stream:
        assert next(stream) == Output(1, "stdout", b"ready\n")
        if ending != "departed":
            terminal = list(stream)[-1]
            code = terminal.code if isinstance(terminal, Failed) else terminal
            assert code == expected[ending]
    assert seen == [(stream.pid, "Z")]
    assert state(stream.pid) is None


# -- spawning -------------------------------------------------------------------------


def test_a_missing_program_is_spawn_failed() -> None:
    with pytest.raises(errors.SpawnFailed) as caught:
        spawn_sandboxed(["roteiro-no-such-program"], timeout=5)
    assert caught.value.program == "roteiro-no-such-program"
    assert "No such file" in caught.value.reason


def test_a_file_that_is_not_executable_is_spawn_failed(tmp_path: Path) -> None:
    script = tmp_path / "script"
    script.write_text("#!/bin/sh\necho no\n")
    with pytest.raises(errors.SpawnFailed) as caught:
        spawn([str(script)], timeout=5)
    assert "Permission denied" in caught.value.reason


def test_a_missing_working_directory_is_spawn_failed_and_named(tmp_path: Path) -> None:
    with pytest.raises(errors.SpawnFailed) as caught:
        spawn(["true"], cwd=tmp_path / "absent", timeout=5)
    assert str(tmp_path / "absent") in caught.value.reason


def test_an_exited_hook_that_raises_is_a_failed_wait_not_a_clean_exit() -> None:
    def hook(pid: int) -> None:
        raise RuntimeError("hook broke")

    frames = list(spawn(["true"], timeout=10, exited=hook))
    assert frames == [Failed("waitFailed", "the exited hook raised RuntimeError: hook broke")]


def test_without_pidfd_a_spawn_refuses_naming_the_platform_and_nothing_runs(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """There is no wait fallback: a Python without os.pidfd_open refuses before the child
    starts. (Removing the attribute is the only way to be that Python on this host.)"""
    marker = tmp_path / "ran"
    argv = ["sh", "-c", f"touch {marker}"]
    with monkeypatch.context() as patch:
        patch.delattr(os, "pidfd_open")
        with pytest.raises(errors.PlatformUnsupported) as refused:
            spawn(argv, timeout=5)
    text = refused.value.guidance().render_text()
    kernel = ".".join(map(str, PIDFD_KERNEL))
    assert "no os.pidfd_open" in text and f"Linux {kernel} or later" in text
    time.sleep(0.3)
    assert not marker.exists()
    # control: with pidfd the same child runs
    assert collect(spawn(argv, timeout=5)).exit == 0 and marker.exists()


def test_a_kernel_without_pidfd_open_is_refused_and_the_child_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """ENOSYS is faked: a kernel older than 5.3 cannot be had on demand here. The
    refusal comes from asking about this process's own pid, so no child ever starts."""
    marker = tmp_path / "ran"

    def no_pidfd(pid: int, flags: int = 0) -> int:
        raise OSError(errno.ENOSYS, "Function not implemented")

    monkeypatch.setattr(os, "pidfd_open", no_pidfd)
    with pytest.raises(errors.PlatformUnsupported, match="no pidfd_open system call"):
        spawn(["sh", "-c", f"sleep 0.3; touch {marker}"], timeout=5)
    time.sleep(0.6)
    assert not marker.exists(), "the child outlived the refusal"


def _refusing(call: str, code: int, monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Make `os.<call>` fail with `code` for pidfds, as a kernel or a filter would
    (faked: neither a 5.3 kernel nor Docker's old seccomp profile is here on demand);
    returns the pids the real pidfd_open was asked about."""
    asked: list[int] = []
    real_open, real_waitid = os.pidfd_open, os.waitid

    def pidfd_open(pid: int, flags: int = 0) -> int:
        asked.append(pid)
        if call == "pidfd_open":
            raise OSError(code, os.strerror(code))
        return real_open(pid, flags)

    def waitid(idtype: int, ident: int, options: int) -> object:
        if call == "waitid" and idtype == os.P_PIDFD:
            raise OSError(code, os.strerror(code))
        return real_waitid(idtype, ident, options)

    monkeypatch.setattr(os, "pidfd_open", pidfd_open)
    monkeypatch.setattr(os, "waitid", waitid)
    return asked


@pytest.mark.parametrize(("call", "code", "said"), [
    ("waitid", errno.EINVAL, "waitid has no P_PIDFD"),  # Linux 5.3: pidfd_open, no P_PIDFD
    ("pidfd_open", errno.EPERM, "not permitted here (a seccomp filter"),
    ("waitid", errno.EPERM, "not permitted here (a seccomp filter"),
])
def test_a_host_that_cannot_wait_by_pidfd_is_refused_before_any_child_starts(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, call: str, code: int, said: str) -> None:
    """On Linux 5.3 pidfd_open works and waitid(P_PIDFD) is EINVAL: every wait failed
    once the child ran, a failed run instead of this refusal. Under a seccomp filter that
    does not know the calls (EPERM) the spawn was an OSError: exit 4."""
    marker = tmp_path / "ran"
    asked = _refusing(call, code, monkeypatch)
    with pytest.raises(errors.PlatformUnsupported) as refused:
        spawn(["sh", "-c", f"touch {marker}"], timeout=5)
    text = refused.value.guidance().render_text()
    assert said in text and f"Linux {'.'.join(map(str, PIDFD_KERNEL))} or later" in text, text
    assert asked == [os.getpid()]  # only this process was asked about: no child started
    time.sleep(0.3)
    assert not marker.exists()
    monkeypatch.undo()  # control: the real calls, and the same child runs
    assert collect(spawn(["sh", "-c", f"touch {marker}"], timeout=5)).exit == 0 and marker.exists()
