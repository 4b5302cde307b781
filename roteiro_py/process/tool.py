"""A trusted host program run through the process layer: bounded, with a deadline, or refused.

Host tools (mkfs.ext4, zstd, `qemu --version`) are this host's, not the tree's, but a
hung or flooding one is still a child this process must bound. Every one is started by
`stream.spawn`: it leads its own process group, which is SIGKILLed whole at the deadline
(what the tool forked dies with it), it is waited for by pidfd, and at most the bytes
the caller names are kept of its output (stdout and stderr together). What is not an
exit is a refusal, never an exception the boundary does not know (exit 4):

* a program that cannot be started: errors.SpawnFailed (from `spawn`);
* the deadline passed: `late()`, the caller's refusal (errors.DeadlineExceeded where the
  run's deadline bounds the tool), else errors.HostToolFailed naming the deadline;
* a read or a wait that failed: errors.HostToolFailed quoting the process layer.

An exit status, 0 or not, is returned: what it means is the caller's to say.

`subprocess.run`/`Popen` would capture output without a bound, kill nothing but the tool
itself, and end a timeout as an unhandled `subprocess.TimeoutExpired`;
tests/unit/process/test_contract.py keeps them out: no module of the package but
`stream.py` imports `subprocess`. (How tools ran before: docs/DESIGN_NOTES.md, section
`roteiro_py/process/tool.py`.)
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import BinaryIO

from roteiro_py import errors
from roteiro_py.process.stream import Collected, Exit, Failed, Frame, Output, Stream, collect, spawn

#: Bytes of output kept from a tool whose output is only quoted in a message or read for
#: one line (`--version`, mkfs.ext4's complaint): a message quotes far less
#: (errors.QUOTE_LIMIT), and a tool that floods is cut here, not held in memory.
DIAGNOSTIC_BYTES = 64 * 1024

Late = Callable[[], errors.RoteiroError]


def tool_name(argv: Sequence[str]) -> str:
    """The program as a message names it: its file name, without the directory."""
    return Path(argv[0]).name


def _ended(tool: str, purpose: str, timeout: float, failure: str, timed_out: bool,
           late: Late | None) -> errors.RoteiroError:
    """The refusal for a run that did not end with an exit."""
    if timed_out and late is not None:
        return late()
    if timed_out:
        return errors.HostToolFailed(
            tool, purpose, f"it did not finish within {timeout:g} s, and its process group "
            "was killed")
    return errors.HostToolFailed(tool, purpose, failure)


def run_tool(argv: Sequence[str], *, purpose: str, timeout: float, max_bytes: int,
             env: Mapping[str, str] | None = None, late: Late | None = None) -> Collected:
    """Run `argv` to its end (`spawn` + `collect`) and return its output and status.

    `purpose` completes "<tool> could not ..." in the refusal; `env` is added to
    this process's environment (the tool is ours: `spawn`, not `spawn_sandboxed`).
    """
    collected = collect(spawn(argv, env=env, timeout=timeout, max_bytes=max_bytes))
    if collected.failure is not None:
        raise _ended(tool_name(argv), purpose, timeout, collected.failure,
                     collected.timed_out, late) from None
    return collected


class StdoutFile:
    """A running child's stdout as a file a pulling reader takes bytes from (tarfile in
    stream mode: zstd's output), with its stderr kept for a message.

    `read` gives end of file only after the child exited with status 0 and nothing was
    cut; every other end raises, so a reader never takes a short stream for a whole one:
    output past the stream's `max_bytes`, a status other than 0 (OSError: readers of
    archives already turn it into their refusal of the bytes, rootfs._unpack), the
    deadline (`late()` or HostToolFailed), a failed read or wait (HostToolFailed).
    """

    def __init__(self, stream: Stream, *, purpose: str, timeout: float, tool: str,
                 late: Late | None = None) -> None:
        self._stream = stream
        self._frames: Iterator[Frame] = iter(stream)
        self._purpose = purpose
        self._timeout = timeout
        self._tool = tool
        self._late = late
        self._pending = bytearray()
        self._stderr = bytearray()
        self._ended = False

    def _pull(self) -> None:
        """Take one frame; at the terminal one, end or raise."""
        frame = next(self._frames, None)
        if isinstance(frame, Output):
            if frame.stream == "stdout":
                self._pending += frame.data
            else:
                self._stderr += frame.data[:max(DIAGNOSTIC_BYTES - len(self._stderr), 0)]
        if self._stream.truncated_streams:
            raise OSError(f"{self._tool} wrote more than {self._stream.max_bytes} bytes "
                          "(the bound of its output), and was stopped")
        if isinstance(frame, Failed):
            raise _ended(self._tool, self._purpose, self._timeout, frame.message,
                         frame.code == "timeoutExceeded", self._late)
        if isinstance(frame, Exit) and frame.code != 0:
            said = self._stderr.decode("utf-8", "replace").strip()[-errors.QUOTE_LIMIT:]
            raise OSError(f"{self._tool} exited with status {frame.code}: {said or '(nothing)'}")
        if frame is None or isinstance(frame, Exit):
            self._ended = True

    def read(self, amount: int = -1) -> bytes:
        while not self._ended and (amount < 0 or len(self._pending) < amount):
            self._pull()
        size = len(self._pending) if amount < 0 else min(amount, len(self._pending))
        data = bytes(self._pending[:size])
        del self._pending[:size]
        return data


def write_all(sink: BinaryIO, data: bytes) -> None:
    """Write all of `data` to a raw pipe (`Stream.stdin`, unbuffered), whose `write` may
    take only part of it (a signal arriving mid-write)."""
    view = memoryview(data)
    while view:
        view = view[sink.write(view):]


@contextlib.contextmanager
def reading_stdout(argv: Sequence[str], *, purpose: str, timeout: float, max_bytes: int,
                   late: Late | None = None) -> Iterator[tuple[StdoutFile, Stream]]:
    """`argv` started with a stdin to write to, its stdout as a `StdoutFile`; the child's
    process group is killed when the block ends, however it ends."""
    stream = spawn(argv, timeout=timeout, max_bytes=max_bytes, stdin="pipe")
    with stream:
        yield StdoutFile(stream, purpose=purpose, timeout=timeout, tool=tool_name(argv),
                         late=late), stream
