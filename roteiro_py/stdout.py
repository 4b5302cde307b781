"""stdout as every command writes it: a reader that leaves ends the command as `cat` ends,
and a stdout that cannot take the bytes is said to be the problem it is.

`pylint-sandbox config show | head -1`, `lint clippy . | head`, a `docker build -` that
failed at once: the reader closes the pipe and the next write fails with EPIPE (Python
ignores SIGPIPE). That BrokenPipeError was exit 4, "internal error", with a traceback log
(`--help` and `--version`: exit 1, from click's own handler). A command whose reader left
has not failed: `cat` dies of SIGPIPE, 141 to a shell, and says nothing; so do these
(errors.EXIT_READER_LEFT). For `lint clippy` the report's verdict (0 or 1) did not reach
the reader either, and 141 is what `set -o pipefail` shows of `lint ... | tee`, never a
pass. A closed stdout (`>&-`) or one that cannot take the bytes (ENOSPC: a full disk,
/dev/full) is not a reader leaving: the place to write is the problem, a usage error
(errors.StdoutUnwritable, exit 2) suggesting `> FILE`.

How a reader leaving is told from every other broken pipe: the tool also writes into
pipes of its children (a child's stdin), and EPIPE there is a child that died, a real
failure. So nothing is inferred after the fact from an exception's type, nor from the
state of fd 1 (which says nothing about where an error came from). `install()` puts
`_Stdout` under sys.stdout, the one object through which the commands write fd 1 (print,
sys.stdout.write, rich's Console, click's echo for --help, sys.stdout.buffer): its
`write` turns the EPIPE of *its own* write into `ReaderLeft`, and any other error of that
write into StdoutUnwritable. A BrokenPipeError raised anywhere else stays what it was.
"""

from __future__ import annotations

import contextlib
import io
import os
import select
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from roteiro_py.errors import StdoutUnwritable
from roteiro_py.invocation import PROGRAM, command_line

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer

    from roteiro_py.errors import StdoutUnwritable


class ReaderLeft(BaseException):
    """The reader of stdout closed its end: raised only by a write to fd 1 (`_Stdout`).

    A BaseException, as KeyboardInterrupt is, so that no `except Exception` between the
    write and the boundary (cli/app.py `main`) makes it a refusal or an internal error."""


class _Stdout(io.FileIO):
    """File descriptor 1, whose failed writes say which failure they are (module docstring).

    After the first failure every write is dropped: the reader is gone or the place
    cannot take the bytes, and the exit status says so already. Without that, the bytes
    still buffered would fail again in Python's own flush at exit ("Exception ignored",
    exit 120)."""

    def __init__(self, words: Sequence[str], *, closed: bool) -> None:
        super().__init__(1, "w", closefd=False)
        self.words = tuple(words)
        #: fd 1 was closed when the process started (it now holds /dev/null, `install()`).
        self.closed_at_start = closed
        self.failed = False

    def unwritable(self, why: str | None) -> StdoutUnwritable:
        """The refusal, naming the command line the user ran (`words`, quoted only now:
        the quoting's imports cost `--help` 11 ms); one too long to paste is named by its
        command's words (`pylint-sandbox lint clippy`)."""
        leading = tuple(word for word in self.words[:2] if not word.startswith("-"))
        return StdoutUnwritable(command_line(self.words) or command_line(leading) or PROGRAM, why)

    def isatty(self) -> bool:
        return not self.closed_at_start and super().isatty()

    def write(self, data: ReadableBuffer, /) -> int:
        if self.failed:
            return memoryview(data).nbytes
        if not memoryview(data).nbytes:
            # Nothing to deliver, so nothing can fail: click probes a stream with
            # write("") inside `except Exception`, which an unbuffered stdout passes down
            # as b"" (ENOSPC on /dev/full); the refusal was swallowed there and every
            # later write dropped, exit 0 with nothing printed.
            return 0
        if self.closed_at_start:
            self.failed = True
            raise self.unwritable(None)
        view = memoryview(data).cast("B")
        done = 0
        while done < len(view):
            try:
                written: int | None = super().write(view[done:])
            except BrokenPipeError:
                self.failed = True
                raise ReaderLeft from None
            except OSError as error:
                self.failed = True
                raise self.unwritable(error.strerror or str(error)) from None
            if written is None:
                # EAGAIN: fd 1's file description is O_NONBLOCK (set by a shell, node or a
                # CI runner that shares it) and the pipe is full. FileIO says None, which
                # BufferedWriter made BlockingIOError: exit 1 and a bare traceback. Wait
                # for the reader, as a blocking stdout does; one that left makes the next
                # write EPIPE.
                select.select([], [self.fileno()], [])
            else:
                done += written
        # Whole, not the short count a non-blocking pipe gives: unbuffered
        # (PYTHONUNBUFFERED), TextIOWrapper and `sys.stdout.buffer.write` are this
        # method's callers, and neither writes the rest of a short write.
        return done


_installed: list[_Stdout] = []


def install(words: Sequence[str]) -> Callable[[], None]:
    """Put `_Stdout` under sys.stdout for one command line (`words`, after the program's
    name, for the refusal to repeat); returns what puts the previous sys.stdout back.

    Only the process's own stdout is replaced: a stream someone else put there (pytest's
    capture, typer's CliRunner, a program embedding the app) is theirs, and left alone."""
    before = sys.stdout
    if before is not None and before is not sys.__stdout__:
        return lambda: None
    if before is None:
        # Python found fd 1 closed (`>&-`). /dev/null takes it, so no file opened later (a
        # log, a disk image) becomes fd 1 and receives what is printed, or what a child
        # that inherits fd 1 prints.
        devnull = os.open(os.devnull, os.O_WRONLY)
        if devnull != 1:
            os.dup2(devnull, 1)
            os.close(devnull)
    else:
        before.flush()
    raw = _Stdout(words, closed=before is None)
    # Buffered as Python had it: line by line on a terminal, and not at all under
    # PYTHONUNBUFFERED / `python -u` (a raw FileIO under a write-through wrapper), where
    # a log of stdout and stderr together keeps the order things were printed in.
    text = before if isinstance(before, io.TextIOWrapper) else None
    unbuffered = text is not None and isinstance(text.buffer, io.RawIOBase)
    sys.stdout = io.TextIOWrapper(
        raw if unbuffered else io.BufferedWriter(raw), encoding=before.encoding if before else "utf-8",
        errors=before.errors if before else "strict",
        line_buffering=text.line_buffering if text else False,
        write_through=text.write_through if text else False)
    _installed.append(raw)

    def restore() -> None:
        mine = sys.stdout
        sys.stdout = before
        _installed.remove(raw)
        # The boundary flushed it already, and after a failure writes are dropped: what
        # could still fail here is a flush under an exception on its way out of main()
        # (an interrupt), which must not be replaced by the flush's own.
        with contextlib.suppress(ReaderLeft, OSError, StdoutUnwritable):
            mine.close()

    return restore


def require_open() -> None:
    """Refuse now when stdout was closed from the start, before work whose product is
    printed there (a lint would run its VM for a report with nowhere to go)."""
    if _installed and _installed[-1].closed_at_start:
        raise _installed[-1].unwritable(None)
