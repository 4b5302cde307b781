"""What a run is doing, told as it happens.

A lint under TCG takes seconds to minutes; a run that prints nothing for that long looks
hung, to a person and to a CI job's watchdog alike. The conductor of a run and the VM
backend report stages through a `Progress`; how it is shown (a spinner on a terminal,
plain lines in a log, nothing with `-q`) is the renderer's business, never theirs.

Text handed to `note` may come from the guest (the crate cargo says it is checking):
every renderer sanitises it (roteiro_py/untrusted.py) before it reaches a terminal.

The renderers (`for_stderr()` picks one):
- `Terminal` (stderr is a terminal): a rich spinner showing the current stage, its
  elapsed time and the latest note; each finished stage leaves one line ("boot  2.1 s").
  `note()` only stores the text: the spinner's own thread draws it, at most
  REFRESH_PER_SECOND times a second, so the VM's read loop that calls `note()` for each
  chunk of cargo's stderr never waits on the terminal. Anything else written to stderr
  while the spinner runs (the worktree copy's warnings) is printed above it; `finish()`
  stops it and shows the cursor again, and the CLI calls `finish()` before any refusal is
  printed, on Ctrl-C and SIGTERM too (lint/__init__.py `run_lint_command`).
- `Plain` (a CI log, a file, a pipe): one line per finished stage, no control sequence,
  flushed at once so a CI log shows it live; a note becomes a line at most once every
  PLAIN_NOTE_INTERVAL_S per stage (the first at once), so a long clippy step still says
  which crate it is on without one line per crate.
- `SILENT`: `-q`, `[lint] quiet`, and every caller that was given no Progress.
Nothing is ever written to stdout: the report alone goes there.

`-v` (`verbose=True`, either renderer) shows what a run is made of, as it happens:
- every note, not only the latest (the spinner's) or one per PLAIN_NOTE_INTERVAL_S (a
  log's): each crate cargo checks, in the dependency cache's VM and in the lint's, each
  as a line under its stage; repeats of the line before are skipped, and past
  MAX_VERBOSE_NOTES in one stage the rest are counted in one line, so a guest printing
  its whole 64 MiB output limit as crate lines gives a bounded log;
- the details the conductor gives (`detail()`, roteiro_py/lint/__init__.py): which
  setting chose the accelerator and the image, the isolation the probe found, the
  image's manifest digest, the root filesystem, the dependency cache's state and key,
  the VM template restored (or why the VM booted cold) and the command line run in the
  guest, each sanitised and cut to DETAIL_CHARS. Without -v `detail()` shows nothing.

`announce()` is a line at every verbosity but -q: the dependency cache's build says with it
that it happens once per lockfile and takes minutes, so a first lint that sits in one stage
for 3 minutes says why (lint/dep_cache.py).

Elapsed times are the host's clock (`time.monotonic`); the guest's runs 15-40 % slow
(issue 11). A note is sanitised and cut to NOTE_CHARS when it is shown, never when it is
given, so a flood of notes costs the read loop an assignment each.
"""

from __future__ import annotations

import os
import sys
import time
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol, TextIO

from roteiro_py.untrusted import guard, sanitise

if TYPE_CHECKING:
    from rich.console import Console, RenderableType
    from rich.live import Live
    from rich.spinner import Spinner

#: Stage names, in the order a run passes them (a run skips those it does not need).
#: HYPERVISOR: the accelerator's probe (a canary boot, 3-30 s under TCG when its verdict
#: is not cached yet; milliseconds when it is).
HYPERVISOR = "hypervisor"
IMAGE = "image verified"
CARGO_VIEW = "package cache"
ROOTFS = "root filesystem"
#: Finding, or building in a VM of its own, the dependency cache (lint/dep_cache.py).
DEP_CACHE = "dependency cache"
WORKTREE = "worktree copied"
BOOT = "boot"
RESTORE = "restore"
TOOLCHAIN = "toolchain"
CLIPPY = "clippy"
REPORT = "report"


class Progress(Protocol):
    def stage(self, name: str) -> None:
        """Stage `name` begins; the stage before it, if any, ends now."""
        ...

    def note(self, text: str) -> None:
        """What the current stage is busy with now (untrusted text is allowed)."""
        ...

    def detail(self, text: str) -> None:
        """A fact about the current stage worth a line of its own, shown only with -v
        (untrusted text is allowed)."""
        ...

    def announce(self, text: str) -> None:
        """A line of its own under the current stage at every verbosity but -q: what a
        person watching must know now (the dependency cache is built, once per lockfile,
        and that takes minutes). Sanitised and cut as a detail is."""
        ...

    def finish(self, stopped: bool = False) -> None:
        """The run is over: end the last stage, clear any spinner. `stopped`: it ended in
        a refusal or an error, and its line must not read as if that stage succeeded."""
        ...


class Silent:
    """Says nothing: `-q`, and every caller that was given no Progress."""

    def stage(self, name: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def detail(self, text: str) -> None:
        pass

    def announce(self, text: str) -> None:
        pass

    def finish(self, stopped: bool = False) -> None:
        pass


SILENT: Progress = Silent()


class NotesOnly:
    """Passes on what a nested job is busy with as notes of the caller's current stage,
    never its stages: the dependency cache's build VM (lint/dep_cache.py) runs the same
    toolchain and clippy steps as the lint, and its "checking syn v2.0" belongs under
    "dependency cache", not as stages of the lint's own."""

    def __init__(self, outer: Progress) -> None:
        self.outer = outer

    def stage(self, name: str) -> None:
        pass

    def note(self, text: str) -> None:
        self.outer.note(text)

    def detail(self, text: str) -> None:
        self.outer.detail(text)

    def announce(self, text: str) -> None:
        self.outer.announce(text)

    def finish(self, stopped: bool = False) -> None:
        pass


#: A note is shown cut to this many characters, its truncation mark included: one short line.
NOTE_CHARS = 72
#: In a log, a stage's notes become lines at most this often (the first one at once).
PLAIN_NOTE_INTERVAL_S = 10.0
#: How often the terminal spinner, its elapsed time and the latest note are redrawn.
REFRESH_PER_SECOND = 8
#: With -v, a detail is shown cut to this many characters (a guest command line with its
#: features fits; a hostile value does not fill the log).
DETAIL_CHARS = 400
#: With -v, at most this many notes of one stage are lines; the rest are counted. A real
#: lint notes one line per crate (a large workspace with its dependencies: ~1,000).
MAX_VERBOSE_NOTES = 5000
#: Stage names are padded to this width, so the elapsed times line up.
_NAME_WIDTH = max(len(name) for name in (HYPERVISOR, IMAGE, CARGO_VIEW, ROOTFS, DEP_CACHE, WORKTREE,
                                         BOOT, RESTORE, TOOLCHAIN, CLIPPY, REPORT))


#: How the line of a stage the run stopped in ends ("image verified" refused is no success).
STOPPED = "(stopped)"


def note_prefix(name: str | None) -> str:
    """What a note, a detail or an announcement under stage `name` starts with in a log:
    the stage's name, then blanks past the elapsed-time column, so a note's text lines up
    with the other notes and never starts where a stage line's seconds do (issue 23: a
    note began two columns left of the time under it, `clippy           checking ...` over
    `clippy             15.2 s`)."""
    return f"{name or '':<{_NAME_WIDTH}} {'':{_TIME_WIDTH}}   "


#: The width of a stage line's elapsed seconds (`stage_line`).
_TIME_WIDTH = 6


def stage_line(name: str, seconds: float, stopped: bool = False) -> str:
    """The line a finished stage leaves: its name and its elapsed seconds; STOPPED after
    them when the run ended in that stage with a refusal or an error."""
    return f"{name:<{_NAME_WIDTH}} {seconds:{_TIME_WIDTH}.1f} s" + (f" {STOPPED}" if stopped else "")


def shown_note(text: str) -> str:
    """A note as any renderer shows it: sanitised and at most NOTE_CHARS long."""
    return sanitise(text, limit=NOTE_CHARS)


def shown_detail(text: str) -> str:
    """A detail as a verbose renderer shows it: sanitised and at most DETAIL_CHARS long."""
    return sanitise(text, limit=DETAIL_CHARS)


def more_notes_line(count: int) -> str:
    """The line that counts the notes of a stage a verbose renderer did not show."""
    return f"… {count} more note{'s' if count != 1 else ''} not shown (MAX_VERBOSE_NOTES)"


class _Stages(ABC):
    """The bookkeeping every shown renderer shares: the current stage, when it began,
    its latest note; `_ended` and `_closed` are what each renderer draws."""

    def __init__(self, clock: Callable[[], float], verbose: bool = False) -> None:
        self._clock = clock
        self._verbose = verbose
        self._name: str | None = None
        self._began = 0.0
        self._note = ""
        self._finished = False
        self._noted = 0  # notes of this stage shown as lines (verbose)
        self._unshown = 0  # and those past MAX_VERBOSE_NOTES

    def stage(self, name: str) -> None:
        if self._finished:
            return
        now = self._clock()
        if self._name is not None:
            self._end_notes()
            self._ended(self._name, now - self._began, False)
        self._name, self._began, self._note = name, now, ""
        self._noted = self._unshown = 0
        self._started(name)

    def note(self, text: str) -> None:
        if self._verbose and self._name is not None and not self._finished and text != self._note:
            if self._noted < MAX_VERBOSE_NOTES:
                self._noted += 1
                self._line(note_prefix(self._name) + shown_note(text))
            else:
                self._unshown += 1
        self._note = text

    def detail(self, text: str) -> None:
        if self._verbose and not self._finished:
            self._line(note_prefix(self._name) + shown_detail(text))

    def announce(self, text: str) -> None:
        if not self._finished:
            self._line(note_prefix(self._name) + shown_detail(text))

    def finish(self, stopped: bool = False) -> None:
        if self._finished:
            return
        if self._name is not None:
            self._end_notes()
        self._finished = True
        if self._name is not None:
            self._ended(self._name, self._clock() - self._began, stopped)
        self._closed()

    def _end_notes(self) -> None:
        if self._unshown:
            self._line(note_prefix(self._name) + more_notes_line(self._unshown))

    @abstractmethod
    def _line(self, line: str) -> None:
        """Show one finished line (verbose notes and details) above anything live."""

    def _started(self, name: str) -> None:  # noqa: B027  (a hook: only some renderers draw here)
        pass

    @abstractmethod
    def _ended(self, name: str, seconds: float, stopped: bool) -> None:
        """Draw the line stage `name` leaves once it has ended."""

    def _closed(self) -> None:  # noqa: B027  (a hook: only some renderers draw here)
        pass


class Plain(_Stages):
    """Lines for a log: one per finished stage, notes rate-limited, each flushed at once."""

    def __init__(self, stream: TextIO, clock: Callable[[], float] = time.monotonic, *,
                 verbose: bool = False) -> None:
        super().__init__(clock, verbose)
        self._stream = stream
        self._noted_at: float | None = None

    def _started(self, name: str) -> None:
        self._noted_at = None

    def note(self, text: str) -> None:
        super().note(text)
        if self._name is None or self._finished or self._verbose:
            return
        now = self._clock()
        if self._noted_at is None or now - self._noted_at >= PLAIN_NOTE_INTERVAL_S:
            self._noted_at = now
            self._write(note_prefix(self._name) + shown_note(text))

    def _ended(self, name: str, seconds: float, stopped: bool) -> None:
        self._write(stage_line(name, seconds, stopped))

    def _line(self, line: str) -> None:
        self._write(line)

    def _write(self, line: str) -> None:
        # A progress line that cannot be written (stderr closed, a full pipe's EPIPE)
        # must not end a lint: the report and the exit status are what the caller reads.
        try:
            self._stream.write(guard(line) + "\n")
            self._stream.flush()
        except (OSError, ValueError):
            pass


class Terminal(_Stages):
    """A rich spinner on a terminal: the current stage, its elapsed time, the latest note."""

    def __init__(self, console: Console, clock: Callable[[], float] = time.monotonic, *,
                 auto_refresh: bool = True, verbose: bool = False) -> None:
        super().__init__(clock, verbose)
        self._console = console
        self._auto_refresh = auto_refresh
        self._live: Live | None = None
        self._spinner: Spinner | None = None

    def _started(self, name: str) -> None:
        if self._live is None:
            # lazy: rich only for a spinner on a terminal (a log, -q and the refusals never need it)
            from rich.live import Live
            from rich.spinner import Spinner

            self._spinner = Spinner("dots")
            # redirect_stderr: a warning written to sys.stderr meanwhile is printed above
            # the spinner instead of through it; stdout is never touched.
            self._live = Live(console=self._console, get_renderable=self._render,
                              transient=True, auto_refresh=self._auto_refresh,
                              refresh_per_second=REFRESH_PER_SECOND,
                              redirect_stdout=False, redirect_stderr=True)
            self._live.start()
        self.refresh()

    def refresh(self) -> None:
        """Draw now (the spinner's thread does it REFRESH_PER_SECOND times a second)."""
        if self._live is not None and not self._finished:
            self._live.refresh()

    def _render(self) -> RenderableType:
        # lazy: rich (see _started)
        from rich.text import Text

        assert self._spinner is not None
        if self._name is None:
            return Text("")
        line = f"{self._name} {self._clock() - self._began:.1f} s"
        if self._note:
            line += f"  {shown_note(self._note)}"
        self._spinner.update(text=Text(line, no_wrap=True, overflow="ellipsis"))
        return self._spinner

    def _ended(self, name: str, seconds: float, stopped: bool) -> None:
        # lazy: rich (see _started)
        from rich.text import Text

        assert self._live is not None
        self._live.console.print(Text(stage_line(name, seconds, stopped)), highlight=False)

    def _line(self, line: str) -> None:
        # lazy: rich (see _started)
        from rich.text import Text

        # printed above the spinner (Live keeps it below); before the first stage there is
        # no Live yet and the console prints it as it is
        console = self._live.console if self._live is not None else self._console
        console.print(Text(guard(line), style="dim"), highlight=False)

    def _closed(self) -> None:
        if self._live is not None:
            self._live.stop()


def interactive() -> bool:
    """A person is watching stderr: it is a terminal, and this is not a CI job."""
    return sys.stderr.isatty() and not os.environ.get("CI") and os.environ.get("TERM") != "dumb"


#: A console narrower than this did not say how wide it is (a pty with no size under
#: `script`, `COLUMNS=0`): rich given a width of 0 prints nothing at all. The report
#: (report/human.py), the refusals and the progress then use FALLBACK_WIDTH.
MIN_WIDTH = 20
#: rich's own default for a terminal that reports no size.
FALLBACK_WIDTH = 80


def stderr_console() -> Console:
    """A rich Console for stderr as rich detects it, at rich's default width when the
    terminal says 0 columns (otherwise a refusal or a stage line would print as nothing)."""
    # lazy: rich only when something is printed to a terminal
    from rich.console import Console

    console = Console(file=sys.stderr, highlight=False, markup=False, emoji=False)
    if console.width < MIN_WIDTH:
        console = Console(file=sys.stderr, highlight=False, markup=False, emoji=False, width=FALLBACK_WIDTH)
    return console


def for_stderr(*, quiet: bool = False, verbose: bool = False) -> Progress:
    """The renderer for this process's stderr: nothing when quiet, a spinner when a person
    watches it, plain lines otherwise; with `verbose`, every note and detail as a line
    too. It draws nothing before its first stage."""
    if quiet:
        return SILENT
    if interactive():
        return Terminal(stderr_console(), verbose=verbose)
    return Plain(sys.stderr, verbose=verbose)
