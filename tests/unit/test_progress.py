"""Progress on stderr: the renderers, the guest-line splitter, and what a terminal is left with.

Clocks are injected (a list the test advances), so no assertion depends on how fast this
machine is. The terminal renderer is driven with a forced-terminal rich Console into a
StringIO, and what it wrote is replayed on `screen()`, a model of the few sequences rich
uses (CR, LF, cursor up, erase line, cursor show/hide): what a person sees once it is done.
"""

from __future__ import annotations

import io
import os
import pty
import re
import subprocess
import sys
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from rich.console import Console

from roteiro_py import progress as P
from roteiro_py.vm.qemu.watch import MAX_LINE_BYTES, SEARCH_LINES, JobWatch, LastLine, crate_note
from tests.unit.pty_support import drain

STAGE_LINE = re.compile(r"^(?P<name>\S(?:.*\S)?) +(?P<seconds>\d+\.\d) s$")
HOSTILE = "\x1b[2J\x1b]8;;http://evil\x07::error::forged ##[set-output name=x]\u202e" + "A" * 1_000_000


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class Recorder:
    """A Progress that records what it was told (the JobWatch's listener)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def stage(self, name: str) -> None:
        self.events.append(("stage", name))

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def finish(self) -> None:
        self.events.append(("finish", ""))


def screen(written: str) -> list[str]:
    """The lines a terminal shows after `written`, for the sequences rich's Live emits."""
    lines = [""]
    row = col = 0
    for token in re.findall(r"\x1b\[\??[0-9;]*[A-Za-z]|\r|\n|[^\x1b\r\n]", written):
        if token == "\r":
            col = 0
        elif token == "\n":
            row += 1
            col = 0
            if row == len(lines):
                lines.append("")
        elif token.startswith("\x1b["):
            code, arg = token[-1], token[2:-1]
            if code == "A":
                row = max(row - int(arg or 1), 0)
            elif code == "K" and arg == "2":
                lines[row] = ""
            elif code in "hlm":  # cursor show/hide, colours: nothing on the screen
                continue
            else:
                raise AssertionError(f"screen() does not model {token!r}")
        else:
            line = lines[row].ljust(col)
            lines[row] = line[:col] + token + line[col + 1:]
            col += 1
    return [line for line in lines if line.strip()]


def forced_terminal() -> tuple[Console, io.StringIO]:
    out = io.StringIO()
    return Console(file=out, force_terminal=True, width=100, highlight=False, markup=False,
                   emoji=False, color_system=None), out


def drive(progress: P.Progress, clock: Clock, stages: list[tuple[str, float]]) -> None:
    for name, seconds in stages:
        progress.stage(name)
        clock.now += seconds
    progress.finish()


RUN = [(P.IMAGE, 0.04), (P.CARGO_VIEW, 0.01), (P.ROOTFS, 0.2), (P.WORKTREE, 0.3),
       (P.BOOT, 2.1), (P.TOOLCHAIN, 1.5), (P.CLIPPY, 4.25), (P.REPORT, 0.02)]


# -- plain: a CI log --------------------------------------------------------------------


def test_plain_is_one_line_per_stage_with_its_elapsed_seconds_and_no_escape() -> None:
    clock, out = Clock(), io.StringIO()
    drive(P.Plain(out, clock), clock, RUN)
    lines = out.getvalue().splitlines()
    parsed = [STAGE_LINE.match(line) for line in lines]
    assert [(m.group("name"), m.group("seconds")) for m in parsed if m] == [
        (name, f"{seconds:.1f}") for name, seconds in RUN]
    assert len(lines) == len(RUN)
    assert "\x1b" not in out.getvalue() and "\r" not in out.getvalue()


def test_the_stage_a_run_stopped_in_is_marked_never_shown_as_done() -> None:
    """A refusal in the image stage printed "image verified 0.0 s", as if it had been."""
    for stopped in (True, False):  # False: the control arm, a run that ended well
        clock, out = Clock(), io.StringIO()
        plain = P.Plain(out, clock)
        plain.stage(P.HYPERVISOR)
        clock.now += 0.5
        plain.stage(P.IMAGE)
        plain.finish(stopped=stopped)
        assert out.getvalue().splitlines() == [
            P.stage_line(P.HYPERVISOR, 0.5), P.stage_line(P.IMAGE, 0.0, stopped)]
        assert out.getvalue().rstrip().endswith(P.STOPPED) is stopped


def test_plain_writes_each_line_when_it_happens_not_at_the_end() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    plain.stage(P.BOOT)
    assert out.getvalue() == ""  # a stage's line says how long it took: written as it ends
    clock.now += 2.1
    plain.stage(P.CLIPPY)
    assert out.getvalue() == P.stage_line(P.BOOT, 2.1) + "\n"


def test_plain_notes_are_rate_limited_the_first_at_once() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    plain.stage(P.CLIPPY)
    plain.note("checking demo-core v0.1.0")
    for _ in range(1000):  # a guest printing a crate per chunk
        plain.note("checking flood v0.0.0")
        clock.now += 0.001
    clock.now += P.PLAIN_NOTE_INTERVAL_S
    plain.note("checking demo-app v0.1.0")
    plain.finish()
    lines = out.getvalue().splitlines()
    assert lines[:2] == [P.note_prefix(P.CLIPPY) + "checking demo-core v0.1.0",
                         P.note_prefix(P.CLIPPY) + "checking demo-app v0.1.0"]
    assert len(lines) == 3 and STAGE_LINE.match(lines[2])


def test_silent_and_quiet_say_nothing() -> None:
    assert P.for_stderr(quiet=True) is P.SILENT


def test_not_a_terminal_gets_plain_lines() -> None:
    assert isinstance(P.for_stderr(), P.Plain)  # pytest captures stderr: not a terminal


# -- terminal: a spinner ------------------------------------------------------------------


def test_terminal_shows_a_spinner_and_leaves_only_the_stage_lines() -> None:
    console, out = forced_terminal()
    clock = Clock()
    terminal = P.Terminal(console, clock, auto_refresh=False)
    terminal.stage(P.BOOT)
    clock.now += 2.1
    terminal.note("checking demo-core v0.1.0")
    terminal.refresh()
    shown = screen(out.getvalue())
    assert shown[-1].startswith(("⠋", "⠙", "⠹", "⠸", "⠼", "⠴", "⠦", "⠧", "⠇", "⠏"))
    assert "boot 2.1 s  checking demo-core v0.1.0" in shown[-1]
    assert "\x1b[?25l" in out.getvalue()  # the cursor is hidden while it spins
    terminal.stage(P.CLIPPY)
    clock.now += 4.25
    # control: before finish() the spinner is on the screen, below the finished stage
    assert screen(out.getvalue())[0] == P.stage_line(P.BOOT, 2.1)
    assert "clippy" in screen(out.getvalue())[-1] and len(screen(out.getvalue())) == 2
    terminal.finish()
    assert screen(out.getvalue()) == [P.stage_line(P.BOOT, 2.1), P.stage_line(P.CLIPPY, 4.2)]
    assert out.getvalue().rfind("\x1b[?25h") > out.getvalue().rfind("\x1b[?25l")


def test_terminal_finish_is_safe_before_any_stage_and_twice() -> None:
    console, out = forced_terminal()
    terminal = P.Terminal(console, Clock(), auto_refresh=False)
    terminal.finish()
    terminal.finish()
    assert out.getvalue() == ""


# -- hostile notes --------------------------------------------------------------------------


def assert_harmless(text: str) -> None:
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "##[" not in text
    assert not any(line.lstrip().startswith("::") for line in text.splitlines())


def test_a_hostile_note_is_sanitised_and_one_short_line() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    plain.stage(P.CLIPPY)
    plain.note(HOSTILE)
    plain.note("::error::at the start of a note")
    clock.now += P.PLAIN_NOTE_INTERVAL_S
    plain.note("::error::at the start of a note")
    plain.finish()
    assert_harmless(out.getvalue())
    note, guarded, _ = out.getvalue().splitlines()
    assert note.startswith(P.CLIPPY) and "\\x1b[2J" in note  # shown escaped, not dropped
    assert len(note) <= len(P.note_prefix(P.CLIPPY)) + P.NOTE_CHARS
    assert "\\x3a:error" in P.shown_note("::error::x")  # a note alone is guarded too

    console, written = forced_terminal()
    terminal = P.Terminal(console, clock, auto_refresh=False)
    terminal.stage(P.CLIPPY)
    terminal.note(HOSTILE)
    terminal.refresh()
    spinner_line = screen(written.getvalue())[-1]
    assert "\\x1b[2J" in spinner_line and len(spinner_line) < 100
    terminal.finish()
    # the renderer's own sequences are the only ones: cursor, erase, CR
    assert_harmless(re.sub(r"\x1b\[\??[0-9;]*[AKhlm]", "", written.getvalue()))


def test_a_hostile_guest_line_through_the_watch_reaches_the_renderer_bounded() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    watch = JobWatch(plain, steps=3)
    watch.feed("status", b"ready\nstart 0\nexit 0 0 0\nstart 1\nexit 1 0 0\nstart 2\n")
    line = b"   Checking " + HOSTILE.encode() + b" v1.0.0 (/x)"
    for start in range(0, len(line), 65536):  # as the read loop sees it, in 64 KiB chunks
        watch.feed("stderr2", line[start:start + 65536])
    watch.feed("stderr2", b"\r\n")
    watch.feed("stderr2", b"A" * 1_000_000)  # a line that never ends is never a note
    plain.finish()
    text = out.getvalue()
    assert_harmless(text)
    notes = [line for line in text.splitlines() if not STAGE_LINE.match(line)]
    assert len(notes) == 1 and notes[0].startswith(P.note_prefix(P.CLIPPY) + "checking \\x1b[2J")
    assert len(notes[0]) <= len(P.note_prefix(P.CLIPPY)) + P.NOTE_CHARS


# -- the splitter -----------------------------------------------------------------------------


def reference(stream: bytes, prefixes: tuple[bytes, ...], max_line: int) -> bytes | None:
    """The last complete matching line of the whole stream, cut as LastLine cuts it."""
    found = None
    for line in re.split(rb"\r|\n", stream)[:-1]:  # the last piece is unterminated
        head = line[:max_line].lstrip(b" \t")
        if head.startswith(prefixes):
            found = head
    return found


LINES = st.lists(st.one_of(
    st.sampled_from([b"   Checking demo-core v0.1.0 (/w/crates/demo-core)",
                     b"  Compiling build-dep v1.2.3", b"    Finished `dev` profile", b"",
                     b"warning: unused", b"Checking", b"\tChecking tabbed v0"]),
    st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"").replace(b"\r", b"")),
    st.builds(lambda n: b"   Checking giant-" + b"x" * n, st.integers(0, 3 * MAX_LINE_BYTES))),
    max_size=20)


@given(LINES, st.lists(st.sampled_from([b"\n", b"\r\n", b"\r"]), min_size=20, max_size=20),
       st.lists(st.floats(0, 1), max_size=30), st.booleans())
def test_the_splitter_finds_the_last_line_whatever_the_chunking(
        lines: list[bytes], ends: list[bytes], cuts: list[float], unterminated: bool) -> None:
    stream = b"".join(line + end for line, end in zip(lines, ends, strict=False))
    if unterminated:
        stream += b"   Checking never-ends v9"
    prefixes = (b"Checking ", b"Compiling ")
    splitter = LastLine(prefixes)
    found = None
    points = sorted({int(c * len(stream)) for c in cuts} | {0, len(stream)})
    for start, stop in zip(points, points[1:], strict=False):
        got = splitter.feed(stream[start:stop])
        found = got if got is not None else found
        assert splitter.buffered <= MAX_LINE_BYTES
    assert found == reference(stream, prefixes, MAX_LINE_BYTES)


def test_the_splitter_keeps_a_bounded_buffer_and_looks_at_a_bounded_number_of_lines() -> None:
    splitter = LastLine((b"Checking ",))
    for _ in range(100):
        assert splitter.feed(b"x" * 65536) is None
        assert splitter.buffered == MAX_LINE_BYTES
    assert splitter.feed(b"\n") is None
    # control: within SEARCH_LINES of the end a match is found ...
    assert splitter.feed(b"Checking a v1\n" + b"noise\n" * (SEARCH_LINES - 1)) == b"Checking a v1"
    # ... further back it is not looked for: a chunk of newlines costs a bounded search
    assert splitter.feed(b"Checking a v1\n" + b"noise\n" * SEARCH_LINES) is None


def test_crate_note_is_what_cargo_is_busy_with() -> None:
    assert crate_note(b"Checking demo-core v0.1.0 (/w/crates/demo-core)") == "checking demo-core v0.1.0"
    assert crate_note(b"Compiling proc-macro2 v1.0.95") == "compiling proc-macro2 v1.0.95"


def test_the_watch_reports_toolchain_then_clippy_then_the_crate() -> None:
    recorder = Recorder()
    watch = JobWatch(recorder, steps=3)
    watch.feed("status", b"ready\nsta")
    watch.feed("status", b"rt 0\n")
    watch.feed("stderr0", b"   Checking not-the-lint v0\n")  # a probe's stderr: not clippy's
    watch.feed("status", b"exit 0 0 0\nstart 1\nexit 1 0 0\n")
    watch.feed("status", b"start 2\n")
    watch.feed("stderr2", b"    Checking demo-core v0.1.0 (/w/crates/demo-core)\n   Check")
    watch.feed("stderr2", b"ing demo-app v0.1.0 (/w/crates/demo-app)\r\n")
    assert recorder.events == [("stage", P.TOOLCHAIN), ("stage", P.CLIPPY),
                               ("note", "checking demo-core v0.1.0"),
                               ("note", "checking demo-app v0.1.0")]


def test_the_watch_keeps_stage_order_when_lines_arrive_together_or_out_of_order() -> None:
    together = Recorder()
    JobWatch(together, steps=3).feed("status", b"ready\nstart 0\nexit 0 0 0\nstart 1\nexit 1 0 0\nstart 2\n")
    assert together.events == [("stage", P.TOOLCHAIN), ("stage", P.CLIPPY)]
    early = Recorder()  # clippy's stderr served before the status port's `start 2`
    watch = JobWatch(early, steps=3)
    watch.feed("stderr2", b"  Checking demo-core v0.1.0\n")
    watch.feed("status", b"start 0\nstart 1\nstart 2\n")
    assert early.events == [("stage", P.TOOLCHAIN), ("stage", P.CLIPPY),
                            ("note", "checking demo-core v0.1.0")]


# -- a real terminal ------------------------------------------------------------------------


def test_on_a_pty_the_spinner_goes_to_stderr_only() -> None:
    """for_stderr() in a real process whose stderr is a pty and stdout a pipe: the control
    sequences reach the pty, stdout holds only what the program printed there."""
    program = (
        "import time\n"
        "from roteiro_py import progress as P\n"
        "p = P.for_stderr()\n"
        "assert isinstance(p, P.Terminal), type(p)\n"
        "p.stage(P.BOOT)\n"
        "p.note('checking demo-core v0.1.0')\n"
        "p.refresh()\n"
        "p.stage(P.CLIPPY)\n"
        "p.finish()\n"
        "print('the report')\n"
    )
    primary, secondary = pty.openpty()
    env = {k: v for k, v in os.environ.items() if k != "CI"} | {"TERM": "xterm", "COLUMNS": "100"}
    child = subprocess.Popen([sys.executable, "-c", program], stdin=subprocess.DEVNULL,
                             stdout=subprocess.PIPE, stderr=secondary, env=env,
                             cwd=Path(__file__).resolve().parents[2])
    os.close(secondary)
    written = drain(primary)
    assert child.stdout is not None
    stdout = child.stdout.read()
    child.stdout.close()
    assert child.wait(timeout=60) == 0, written.decode(errors="replace")
    assert stdout == b"the report\n"
    text = written.decode().replace("\r\n", "\n")  # the pty's ONLCR
    assert "\x1b[?25l" in text and "\x1b[?25h" in text  # the spinner ran here ...
    shown = [STAGE_LINE.match(line) for line in screen(text)]  # ... and is gone:
    assert [m.group("name") if m else None for m in shown] == [P.BOOT, P.CLIPPY]


def test_a_nested_jobs_notes_reach_the_current_stage_and_its_stages_do_not() -> None:
    """The dependency cache's build VM reports toolchain/clippy stages and crate notes;
    under the lint's "dependency cache" stage only the notes are shown."""
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock)
    plain.stage(P.DEP_CACHE)
    nested = P.NotesOnly(plain)
    nested.stage(P.CLIPPY)
    nested.note("checking syn v2.0.119")
    nested.finish(stopped=True)
    plain.finish()
    lines = out.getvalue().splitlines()
    assert lines[0] == P.note_prefix(P.DEP_CACHE) + "checking syn v2.0.119"
    assert [line.split()[0] for line in lines[1:]] == ["dependency"], lines  # no clippy stage line
    assert P.STOPPED not in out.getvalue()


# -- -v: every note, and the run's details ---------------------------------------------------


def test_verbose_shows_every_note_once_and_each_detail_as_a_line() -> None:
    for verbose in (True, False):  # False: the control arm, what a run without -v prints
        clock, out = Clock(), io.StringIO()
        plain = P.Plain(out, clock, verbose=verbose)
        plain.stage(P.CLIPPY)
        plain.detail("the guest will run, in /w: cargo-clippy clippy --message-format=json")
        for crate in ("checking a v1", "checking a v1", "checking b v1", "checking c v1"):
            plain.note(crate)
            clock.now += 0.5  # well within PLAIN_NOTE_INTERVAL_S
        plain.finish()
        lines = out.getvalue().splitlines()
        prefix = P.note_prefix(P.CLIPPY)
        if verbose:
            assert lines == [prefix + "the guest will run, in /w: cargo-clippy clippy --message-format=json",
                             prefix + "checking a v1", prefix + "checking b v1", prefix + "checking c v1",
                             P.stage_line(P.CLIPPY, 2.0)]
        else:
            assert lines == [prefix + "checking a v1", P.stage_line(P.CLIPPY, 2.0)]


def test_verbose_notes_are_bounded_per_stage_and_the_rest_counted() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock, verbose=True)
    plain.stage(P.DEP_CACHE)
    for index in range(P.MAX_VERBOSE_NOTES + 25):  # a guest printing a crate per line, forever
        plain.note(f"checking flood-{index} v0")
    plain.stage(P.CLIPPY)
    plain.note("checking demo-core v0.1.0")  # the next stage starts its own count
    plain.finish()
    lines = out.getvalue().splitlines()
    assert len(lines) == P.MAX_VERBOSE_NOTES + 4
    assert lines[P.MAX_VERBOSE_NOTES] == P.note_prefix(P.DEP_CACHE) + f"{P.more_notes_line(25)}"
    assert lines[-2] == P.note_prefix(P.CLIPPY) + "checking demo-core v0.1.0"


def test_a_hostile_detail_is_sanitised_and_cut() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock, verbose=True)
    plain.stage(P.IMAGE)
    plain.detail(HOSTILE)
    plain.finish()
    assert_harmless(out.getvalue())
    detail = out.getvalue().splitlines()[0]
    assert "\\x1b[2J" in detail and len(detail) <= len(P.note_prefix(P.CLIPPY)) + P.DETAIL_CHARS


def test_on_a_terminal_verbose_lines_stay_above_the_spinner() -> None:
    console, out = forced_terminal()
    clock = Clock()
    terminal = P.Terminal(console, clock, auto_refresh=False, verbose=True)
    terminal.stage(P.CLIPPY)
    terminal.detail("the VM was restored from template abc")
    terminal.note("checking demo-core v0.1.0")
    terminal.refresh()
    clock.now += 1.0
    terminal.finish()
    prefix = P.note_prefix(P.CLIPPY)
    assert screen(out.getvalue()) == [prefix + "the VM was restored from template abc",
                                      prefix + "checking demo-core v0.1.0", P.stage_line(P.CLIPPY, 1.0)]


def test_nested_details_reach_the_current_stage_and_silent_ignores_them() -> None:
    clock, out = Clock(), io.StringIO()
    plain = P.Plain(out, clock, verbose=True)
    plain.stage(P.DEP_CACHE)
    P.NotesOnly(plain).detail("the cache VM booted cold")
    P.SILENT.detail("nothing")
    assert out.getvalue() == P.note_prefix(P.DEP_CACHE) + "the cache VM booted cold\n"
    assert isinstance(P.for_stderr(verbose=True), P.Plain) and P.for_stderr(quiet=True, verbose=True) is P.SILENT


def test_a_note_starts_past_the_time_column_of_the_stage_lines() -> None:
    """Issue 23: in a log a note began two columns left of the seconds printed under it
    (`clippy           checking ...` over `clippy             15.2 s`). Every note's text
    now starts in one column, past the end of every stage line's time, whatever the time."""
    out = io.StringIO()
    clock = Clock()
    plain = P.Plain(out, clock=clock)
    for seconds in (0.0, 15.2, 189.0):
        plain.stage(P.CLIPPY)
        plain.note(f"checking crate-{seconds} v0.1.0")
        clock.now += seconds
    plain.finish()
    lines = out.getvalue().splitlines()
    notes = [line for line in lines if "checking" in line]
    stages = [line for line in lines if STAGE_LINE.match(line)]
    assert len(notes) == 3 and len(stages) == 3
    starts = {line.index("checking") for line in notes}
    assert len(starts) == 1 and min(starts) > max(len(line) for line in stages)
