"""Spawning a child and streaming what it writes as numbered frames, with a real deadline.

This is the one place a process is started and watched: qemu (vm/qemu/machine.py),
`Unconfined`, and every host tool (mkfs.ext4, zstd, `qemu --version`, through
`tool.run_tool`, which turns a deadline or a failed read into a refusal) sit on it.
tests/unit/process/test_contract.py fails when any other module of the package
starts a process (`subprocess`, `os.system`, `os.exec*`, `pty`, ...), and it lists no
exception. What this module guarantees, and the failure each guarantee prevents:

* One sequence counter across stdout and stderr, so the order of production can be
  rebuilt. A read dropped for being over `max_bytes` still takes a number, so a gap in
  the sequence shows that output was dropped.
* Exactly one terminal frame, always last: `Exit` or `Failed`. A read that failed is
  reported as `Failed(outputReadFailed)`, never as a clean exit with short output.
* The two pipes are drained by their own threads, so a child that floods stderr while
  the consumer waits on stdout cannot deadlock, and output streams while the child runs.
* A real deadline: the child leads its own process group (`start_new_session`) and the
  whole group is SIGKILLed, so what it forked dies too, and a child that ignores SIGTERM
  is not asked. The kill comes first, then `Failed(timeoutExceeded)`. The deadline bounds
  the whole stream: if the child exits but something still holds its pipes open at the
  deadline, that is a timeout too. A process that left the group with `setsid()`
  escapes the kill; containing those is the VM's job, not this module's.
* When the group leader exits, whatever it left running in its group is killed, so a
  backgrounded grandchild cannot hold the pipes open and keep the stream alive.
* `max_bytes` is a total over stdout and stderr together (a per-stream cap would let a
  child deliver twice the cap); the read that passes it is cut, the stream it was on is
  flagged in `truncated_streams`, and later reads of either stream are dropped.
* Backpressure: at most `QUEUE_FRAMES` frames of at most `READ_BYTES` each wait for the
  consumer; a chatty child blocks on its pipe instead of growing our memory. Line framing
  emits at a newline or at `READ_BYTES`, so output without newlines is bounded too.
* A consumer that departs (`close()`, leaving the `with` block, or dropping the stream
  so it is garbage collected) kills the group, even a child that prints nothing.
* The `exited` hook runs while the child is a zombie: exited, not yet reaped, so its pid
  cannot have been reused and /proc/PID still names it. On the deadline and departure
  paths the hook runs after the SIGKILL has made the child exit and before it is reaped:
  running it before the kill would race a child that is still running, which is what
  the hook exists to avoid. Linux only: `os.pidfd_open` and `waitid(P_PIDFD, WNOWAIT)`.
  There is no fallback for other systems (a kqueue or a polling wait): the platform is
  refused before a lint starts (platform_support.py), and a spawn that is reached
  without pidfd anyway (a kernel before 5.4, a container's seccomp filter, a Python
  built without it) refuses with errors.PlatformUnsupported before the child starts
  (`_pidfd_missing`), or kills it if pidfd_open fails for it all the same.
  The hook is part of waiting for the child: if it raises, the terminal frame is
  `Failed(waitFailed)` naming the exception, never a clean `Exit`.
"""

from __future__ import annotations

import collections
import contextlib
import errno
import math
import os
import select
import signal
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType, TracebackType
from typing import IO, BinaryIO, Literal, cast

from roteiro_py import errors
from roteiro_py.platform_support import missing_pidfd

#: Bytes per read, and so the largest frame; line framing emits at this size too.
READ_BYTES = 64 * 1024
#: Frames that may wait for the consumer before the readers (and so the child) block.
QUEUE_FRAMES = 16
#: The PATH a sandboxed child gets when the caller passes none.
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin"

StreamName = Literal["stdout", "stderr"]
FailureCode = Literal["timeoutExceeded", "outputReadFailed", "waitFailed"]


@dataclass(frozen=True)
class Output:
    seq: int
    stream: StreamName
    data: bytes


@dataclass(frozen=True)
class Exit:
    #: As `returncode`: negative means killed by that signal.
    code: int
    truncated: bool


@dataclass(frozen=True)
class Failed:
    code: FailureCode
    message: str


Frame = Output | Exit | Failed

_NO_ENV: Mapping[str, str] = MappingProxyType({})


def _readable(fds: Sequence[int], timeout: float | None) -> set[int]:
    """The fds that are readable (or at end of file) within `timeout` seconds.

    poll rather than select: select cannot watch a descriptor numbered 1024 or more, and
    a long-lived process with many open files gets there.
    """
    poller = select.poll()
    for fd in fds:
        poller.register(fd, select.POLLIN)
    wait_ms = None if timeout is None else math.ceil(timeout * 1000)
    return {fd for fd, _ in poller.poll(wait_ms)}


class _Pump:
    """The state the threads share; the `Stream` is not referenced by any thread.

    If a thread held the `Stream`, a consumer that simply dropped it would never have it
    collected, and the child would run until its deadline.
    """

    def __init__(self, proc: subprocess.Popen[bytes], pidfd: int, *, timeout: float,
                 framing: Literal["chunk", "line"], max_bytes: int | None,
                 exited: Callable[[int], None] | None) -> None:
        self.proc = proc
        self.pidfd = pidfd
        self.timeout = timeout
        self.deadline = time.monotonic() + timeout
        self.framing = framing
        self.max_bytes = max_bytes
        self.exited = exited
        self.cond = threading.Condition()
        self.frames: collections.deque[Frame] = collections.deque()
        self.seq = 0
        self.sent = {"stdout": 0, "stderr": 0}
        self.cut: set[str] = set()
        self.read_error: str | None = None
        self.readers_left = 2
        self.departed = False
        self.finished = False
        # One byte written here wakes the supervisor and the readers' select().
        self.wake_r, self.wake_w = os.pipe()
        self.threads: list[threading.Thread] = []

    # -- the queue ------------------------------------------------------------------

    def put(self, frame: Frame) -> None:
        with self.cond:
            self.cond.wait_for(lambda: len(self.frames) < QUEUE_FRAMES or self.departed)
            if not self.departed:
                self.frames.append(frame)
                self.cond.notify_all()

    def emit(self, stream: StreamName, data: bytes) -> None:
        """Number a read and queue what the cap lets through, in one step.

        The number is taken only once there is room, under the same lock as the append,
        so the queue is always in sequence order; taking it before waiting would let the
        other reader's later frame in first.
        """
        with self.cond:
            if self.max_bytes is not None:
                room = self.max_bytes - self.sent["stdout"] - self.sent["stderr"]
                if len(data) > room:
                    self.cut.add(stream)
                    data = data[:max(room, 0)]
            if data:
                self.cond.wait_for(
                    lambda: len(self.frames) < QUEUE_FRAMES or self.departed)
            self.seq += 1
            if data and not self.departed:
                self.sent[stream] += len(data)
                self.frames.append(Output(self.seq, stream, data))
                self.cond.notify_all()

    def get(self) -> Frame | None:
        with self.cond:
            self.cond.wait_for(lambda: bool(self.frames) or self.finished)
            if not self.frames:
                return None
            frame = self.frames.popleft()
            self.cond.notify_all()
            return frame

    def wake(self) -> None:
        with self.cond:
            if not self.finished:  # once finished the fd is closed and its number reusable
                os.write(self.wake_w, b"x")

    def depart(self) -> None:
        """The consumer is gone: stop delivering and let the supervisor kill the group."""
        with self.cond:
            if self.departed:
                return
            self.departed = True
            self.cond.notify_all()
        self.wake()

    # -- the threads ----------------------------------------------------------------

    def read(self, stream: StreamName, fd: int) -> None:
        """Drain one pipe until end of file, a read error, or being told to stop."""
        pending = b""
        try:
            while True:
                if self.wake_r in _readable([fd, self.wake_r], None):
                    break  # woken: the stream is ending (deadline, departure, read error)
                try:
                    chunk = os.read(fd, READ_BYTES - len(pending))
                except OSError as exc:
                    with self.cond:
                        self.read_error = f"reading the child's {stream} failed: {exc}"
                    self.wake()
                    break
                if not chunk:
                    break
                if self.framing == "chunk":
                    self.emit(stream, chunk)
                    continue
                pending += chunk
                while b"\n" in pending:
                    line, _, pending = pending.partition(b"\n")
                    self.emit(stream, line + b"\n")
                if len(pending) >= READ_BYTES:
                    self.emit(stream, pending)
                    pending = b""
            if pending:
                self.emit(stream, pending)
        finally:
            with self.cond:
                self.readers_left -= 1
                self.cond.notify_all()

    def _kill_group(self) -> None:
        with contextlib.suppress(ProcessLookupError):  # the group is already empty
            os.killpg(self.proc.pid, signal.SIGKILL)

    def _reap(self, *, after_kill: bool) -> str | None:
        """Wait for the leader to exit, run the hook while it is a zombie, then reap it.

        Returns a message if waiting (or the hook, which runs inside the wait) failed.
        """
        failure = None
        try:
            os.waitid(os.P_PIDFD, self.pidfd, os.WEXITED | os.WNOWAIT)
        except OSError as exc:
            failure = f"waiting for the child failed: {exc}"
        if failure is None and self.exited is not None:
            try:
                self.exited(self.proc.pid)
            except Exception as exc:  # the hook is the caller's code; report, not crash
                failure = f"the exited hook raised {type(exc).__name__}: {exc}"
        if not after_kill:
            self._kill_group()  # what the leader left behind in its group
        if failure is not None:
            self._kill_group()
        self.proc.wait()
        return failure

    def supervise(self) -> None:
        """Wait for exit, the deadline, a read error or departure, and end the stream."""
        terminal: Frame | None = None
        try:
            remaining = max(self.deadline - time.monotonic(), 0.0)
            ready = _readable([self.pidfd, self.wake_r], remaining)
            with self.cond:
                departed, read_error = self.departed, self.read_error
            if self.pidfd in ready and not departed:
                failure = self._reap(after_kill=False)
                with self.cond:
                    done = self.cond.wait_for(
                        lambda: self.readers_left == 0 or self.departed,
                        timeout=max(self.deadline - time.monotonic(), 0.0),
                    )
                    read_error = self.read_error
                if failure is not None:
                    terminal = Failed("waitFailed", failure)
                elif read_error is not None:
                    terminal = Failed("outputReadFailed", read_error)
                elif not done:
                    terminal = Failed(
                        "timeoutExceeded",
                        f"the child exited with status {self.proc.returncode}, but its "
                        "output had not been read to the end by the deadline (a process "
                        "outside its group holds the pipe, or the consumer fell behind)",
                    )
                else:
                    terminal = Exit(cast(int, self.proc.returncode), bool(self.cut))
            else:
                self._kill_group()
                failure = self._reap(after_kill=True)
                if departed:
                    terminal = None
                elif read_error is not None:
                    terminal = Failed("outputReadFailed", read_error)
                elif failure is not None:
                    terminal = Failed("waitFailed", failure)
                else:
                    terminal = Failed(
                        "timeoutExceeded",
                        f"the deadline of {self.timeout:g} s passed; the child's "
                        "process group was killed",
                    )
        finally:
            self.wake()
            for thread in self.threads:
                if thread is not threading.current_thread():
                    thread.join()
            if terminal is not None:
                self.put(terminal)
            for pipe in (self.proc.stdout, self.proc.stderr):
                if pipe is not None:
                    pipe.close()
            if self.departed and self.proc.stdin is not None:
                _close_quietly(self.proc.stdin)
            with self.cond:
                os.close(self.pidfd)
                os.close(self.wake_r)
                os.close(self.wake_w)
                self.finished = True
                self.cond.notify_all()


def _close_quietly(pipe: BinaryIO | IO[bytes]) -> None:
    with contextlib.suppress(BrokenPipeError):  # the child is gone; nothing waits for more
        pipe.close()


def _departed(pump: _Pump) -> None:
    """The consumer let go of the stream: kill the child and release its stdin."""
    pump.depart()
    if pump.proc.stdin is not None:
        _close_quietly(pump.proc.stdin)


class Stream:
    """A running child as an iterator of frames; a context manager that always kills it.

    `pid` is the child's pid (and its process group id). `stdin` is the write end of its
    standard input when spawned with `stdin="pipe"`, otherwise None; closing it is how
    the child sees end of file. `close()` means the consumer has departed: the group is
    killed and the call returns once the child is reaped.
    """

    def __init__(self, pump: _Pump, stdin: BinaryIO | None) -> None:
        self._pump = pump
        self.pid = pump.proc.pid
        self.stdin = stdin
        self.max_bytes = pump.max_bytes
        self._done = False
        self._finalizer = weakref.finalize(self, _departed, pump)

    def __iter__(self) -> Iterator[Frame]:
        return self

    def __next__(self) -> Frame:
        if self._done:
            raise StopIteration
        frame = self._pump.get()
        if frame is None or isinstance(frame, Exit | Failed):
            self._done = True
        if frame is None:
            raise StopIteration
        return frame

    def close(self) -> None:
        self._finalizer()
        if threading.current_thread() not in self._pump.threads:
            for thread in self._pump.threads:
                thread.join()

    @property
    def truncated_streams(self) -> frozenset[str]:
        """The streams whose output went past `max_bytes` (a total) and was cut."""
        with self._pump.cond:
            return frozenset(self._pump.cut)

    def __enter__(self) -> Stream:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                 tb: TracebackType | None) -> None:
        self.close()


#: Why pidfd_open or waitid(P_PIDFD) fails where they cannot be used, by errno.
_NO_PIDFD = {errno.ENOSYS: "this kernel has no pidfd_open system call",
             errno.EPERM: "pidfd_open is not permitted here (a seccomp filter, such as an "
                          "older container runtime's default profile)"}


def _pidfd_missing() -> str | None:
    """Why this host cannot wait on a child by pidfd, asked of this process's own pid so
    that no child is started to find out; None when it can.

    `waitid(P_PIDFD)` came a release after `pidfd_open` (Linux 5.4, not 5.3): on 5.3
    every wait failed with EINVAL once the child was already running, and the run ended
    as a failed wait, not as this refusal. A seccomp filter that does not know the calls
    (Docker's default profile before 20.10) answers EPERM, which was exit 4. Two system
    calls, no child: asked on every spawn, never cached (tests change what `os` has)."""
    if not hasattr(os, "pidfd_open") or not hasattr(os, "P_PIDFD"):
        return "this Python has no os.pidfd_open"
    try:
        fd = os.pidfd_open(os.getpid())
    except OSError as exc:
        if exc.errno in _NO_PIDFD:
            return _NO_PIDFD[exc.errno]
        raise
    try:
        os.waitid(os.P_PIDFD, fd, os.WEXITED | os.WNOHANG)
    except ChildProcessError:
        return None  # understood: this process is not its own child
    except OSError as exc:
        if exc.errno == errno.EINVAL:
            return "this kernel's waitid has no P_PIDFD"
        if exc.errno in _NO_PIDFD:
            return _NO_PIDFD[exc.errno]
        raise
    finally:
        os.close(fd)
    return None


def _start(argv: Sequence[str], *, cwd: Path | None, env: Mapping[str, str], timeout: float,
           framing: Literal["chunk", "line"], stdin: Literal["null", "pipe"],
           max_bytes: int | None, exited: Callable[[int], None] | None) -> Stream:
    if not argv:
        raise ValueError("argv is empty: there is no program to run")
    if timeout <= 0:
        raise ValueError(f"timeout must be positive, not {timeout}")
    if max_bytes is not None and max_bytes < 0:
        raise ValueError(f"max_bytes must not be negative, not {max_bytes}")
    missing = _pidfd_missing()
    if missing is not None:
        raise missing_pidfd(missing)
    try:
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), bufsize=0, close_fds=True,
            stdin=subprocess.PIPE if stdin == "pipe" else subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
        )
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename and str(exc.filename) != argv[0] else ""
        raise errors.SpawnFailed(argv[0], f"{exc.strerror or exc}{where}") from exc
    try:
        pidfd = os.pidfd_open(proc.pid)
    except OSError as exc:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
        if exc.errno in _NO_PIDFD:
            raise missing_pidfd(_NO_PIDFD[exc.errno]) from exc
        raise
    pump = _Pump(proc, pidfd, timeout=timeout, framing=framing, max_bytes=max_bytes,
                 exited=exited)
    assert proc.stdout is not None and proc.stderr is not None
    readers = [
        threading.Thread(target=pump.read, args=("stdout", proc.stdout.fileno()), daemon=True,
                         name=f"stdout-{proc.pid}"),
        threading.Thread(target=pump.read, args=("stderr", proc.stderr.fileno()), daemon=True,
                         name=f"stderr-{proc.pid}"),
    ]
    supervisor = threading.Thread(target=pump.supervise, daemon=True, name=f"wait-{proc.pid}")
    pump.threads = [*readers, supervisor]
    stream = Stream(pump, cast("BinaryIO | None", proc.stdin))
    for thread in pump.threads:
        thread.start()
    return stream


def spawn(argv: Sequence[str], *, cwd: Path | None = None, env: Mapping[str, str] | None = None,
          timeout: float, framing: Literal["chunk", "line"] = "chunk",
          stdin: Literal["null", "pipe"] = "null", max_bytes: int | None = None,
          exited: Callable[[int], None] | None = None) -> Stream:
    """Start `argv` with this process's environment plus `env`, and stream its output.

    For trusted helpers (qemu itself, host tools). Anything that runs what a repository
    controls goes through `spawn_sandboxed`, which does not hand it our environment.
    """
    return _start(argv, cwd=cwd, env={**os.environ, **(env or {})}, timeout=timeout,
                  framing=framing, stdin=stdin, max_bytes=max_bytes, exited=exited)


def spawn_sandboxed(argv: Sequence[str], *, env: Mapping[str, str] = _NO_ENV,
                    cwd: Path | None = None, timeout: float,
                    framing: Literal["chunk", "line"] = "chunk",
                    stdin: Literal["null", "pipe"] = "null", max_bytes: int | None = None,
                    exited: Callable[[int], None] | None = None) -> Stream:
    """Start `argv` with a fresh environment: `DEFAULT_PATH` plus exactly `env`.

    Without it, tokens and credentials in the caller's environment (CARGO_REGISTRY_TOKEN,
    AWS_*, GITHUB_TOKEN) would be readable by every build script the child runs.
    """
    return _start(argv, cwd=cwd, env={"PATH": DEFAULT_PATH, **env}, timeout=timeout,
                  framing=framing, stdin=stdin, max_bytes=max_bytes, exited=exited)


@dataclass(frozen=True)
class Collected:
    """A whole run's output, for callers that do not stream."""

    stdout: bytes
    stderr: bytes
    #: The exit status as `returncode`, or None when the run ended in `Failed`.
    exit: int | None
    timed_out: bool
    #: Which streams went past `max_bytes` and were cut.
    truncated_streams: frozenset[str]
    #: The `Failed` message, if the run did not end with a clean `Exit`.
    failure: str | None

    @property
    def truncated(self) -> bool:
        return bool(self.truncated_streams)


def collect(stream: Stream) -> Collected:
    """Drain `stream` to its terminal frame and close it."""
    parts: dict[str, list[bytes]] = {"stdout": [], "stderr": []}
    terminal: Exit | Failed | None = None
    with stream:
        for frame in stream:
            if isinstance(frame, Output):
                parts[frame.stream].append(frame.data)
            else:
                terminal = frame
    if terminal is None:
        raise errors.InternalError("the stream ended without a terminal frame")
    return Collected(
        stdout=b"".join(parts["stdout"]),
        stderr=b"".join(parts["stderr"]),
        exit=terminal.code if isinstance(terminal, Exit) else None,
        timed_out=isinstance(terminal, Failed) and terminal.code == "timeoutExceeded",
        truncated_streams=stream.truncated_streams,
        failure=terminal.message if isinstance(terminal, Failed) else None,
    )
