"""Where the report goes: every `--format FMT[=PATH]` from one report, each file written
atomically and never through a link the tree planted, and the step summary of a CI job.

One run, every output: `--format sarif=clippy.sarif --format json=report.json --format
github` renders the one report three times after one VM run (a CI that wants SARIF for
code scanning and annotations in the log lints once, not twice). The rules, checked before
anything runs (`plan_outputs`, `check_outputs`):
- FMT is one of vocabulary.FORMATS; a PATH, when given, is not empty; at most MAX_TARGETS.
- At most one target has no PATH: it is printed on stdout. Two would interleave two
  formats into something nothing can read, so that is a usage error naming both.
- `--output FILE` is that one target's PATH: `--format sarif --output x.sarif` is
  `--format sarif=x.sarif`, and with no `--format` at all it is where the configured
  format (`[lint] format`) goes. With every `--format` given its own PATH,
  `--output` would name nothing: a usage error, never a file silently left unwritten.
- No two targets name the same file (the second would silently replace the first).
- `--category NAME` (SARIF's automationDetails.id) needs a sarif target.
`[lint] format` stays one default: the format of the run when no `--format` is given.
- `--message-format FMT` (cargo's own stream, clippy/stream.py) owns stdout: every
  `--format` then needs its =PATH (or `--output`), and with neither no report is written
  at all, only the stream. A `--format` without =PATH beside it is a usage error. So does
  `--fix=patch` (its diff is stdout's), with the same rules.

Each file is rendered whole and then put in place by `write_output` (below); a target
that cannot be written does not keep the others from being written: all are tried, then
the first failure is raised naming how many failed.

`$GITHUB_STEP_SUMMARY` (`append_step_summary`): set by GitHub's runner to a file of its
own, outside the tree. When set, a lint or a render appends the Markdown summary
(report/markdown.py) to it; when unset, nothing is written anywhere. The file is opened
for appending without following a link and without creating it, and must be a regular
file: a link, a missing file, a FIFO or a device is not written and one line on stderr
says so; the run's exit status does not change (the reports were written; the summary
is a courtesy to the reader of the job's page). Each listed finding links to its file at
the job's commit when GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_SHA have GitHub's
shapes (report/links.py `blob_base`). GitHub drops a step's whole summary past
STEP_SUMMARY_LIMIT bytes, so what the file holds already is counted: without room for
the lists of lints and findings only the counts are appended, without room for those
nothing is.
"""

from __future__ import annotations

import errno
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py import paths
from roteiro_py.errors import UsageError
from roteiro_py.lint.preflight import check_output, refuse_linked_directory
from roteiro_py.untrusted import sanitise
from roteiro_py.vocabulary import FORMATS, Format

if TYPE_CHECKING:
    from roteiro_py.report.model import Report

#: Outputs one run may write (each is rendered and written whole).
MAX_TARGETS = 16
#: `--category`: what GitHub's upload accepts in automationDetails.id, kept to letters,
#: digits and `._:=/-` (report/sarif.py CATEGORY is the same; a test checks).
CATEGORY = re.compile(r"[A-Za-z0-9._:=/-]{1,100}")
#: The variable GitHub's runner sets to this step's summary file.
STEP_SUMMARY_ENV = "GITHUB_STEP_SUMMARY"


@dataclass(frozen=True)
class Target:
    """One output: a format (None: the configured `[lint] format`) and a file (None:
    stdout), with the flag that asked for it, as refusals name it."""

    format: str | None
    path: Path | None
    spelling: str


@dataclass(frozen=True)
class OutputPlan:
    targets: tuple[Target, ...]
    category: str | None = None

    def resolved(self, default: str) -> tuple[Target, ...]:
        """The targets with the configured format filled in; refuses a `--category` that
        no SARIF output would carry (known once the configuration is)."""
        targets = tuple(Target(t.format or default, t.path, t.spelling) for t in self.targets)
        _check_category(self.category, targets)
        return targets


def _check_category(category: str | None, targets: Sequence[Target]) -> None:
    if category is not None and not any(t.format in ("sarif", None) for t in targets):
        raise UsageError(f"--category {category} names a SARIF category, and no output is SARIF.",
                         hint="Add --format sarif=FILE, or leave out --category.")


def plan_outputs(formats: Sequence[str], output: Path | None = None,
                 category: str | None = None, stream: str | None = None,
                 stdout_taken_by: str | None = None) -> OutputPlan:
    """The outputs `--format FMT[=PATH]...`, `--output FILE` and `--category NAME` ask
    for, or the UsageError that says what is wrong with them (module docstring).
    `stream`: `--message-format`, which owns stdout; `stdout_taken_by`: another option that
    does (`--fix=patch`, whose diff is stdout's)."""
    owner = f"--message-format {stream}" if stream is not None else stdout_taken_by
    if len(formats) > MAX_TARGETS:
        raise UsageError(f"--format was given {len(formats)} times; at most {MAX_TARGETS} outputs "
                         "are written by one run.", hint="Write fewer formats, or render more from "
                         "the JSON report: pylint-sandbox render REPORT.json --format FMT=PATH.")
    if category is not None and not CATEGORY.fullmatch(category):
        raise UsageError(f"--category {category!r} is not a category: use 1 to 100 letters, digits "
                         "and . _ : = / - (for example --category clippy/workspace-a).")
    targets: list[Target] = []
    for given in formats:
        name, has_path, where = given.partition("=")
        if name not in FORMATS:
            raise UsageError(f"--format {given}: {name!r} is not a format; expected one of "
                             f"{', '.join(FORMATS)}, optionally as FMT=PATH.")
        if has_path and not where:
            raise UsageError(f"--format {given}: the path after = is empty.",
                             hint=f"Write --format {name}=FILE, or --format {name} for stdout.")
        targets.append(Target(name, Path(where) if has_path else None,
                              f"--format {given}"))
    if not targets and (output is not None or owner is None):
        targets.append(Target(None, output, f"--output {output}" if output else "[lint] format"))
    elif output is not None:
        pathless = [i for i, t in enumerate(targets) if t.path is None]
        if not pathless:
            raise UsageError(f"--output {output} names no output: every --format has its own =PATH.",
                             hint="Leave out --output, or give one --format without =PATH for it.")
        index = pathless[0]
        targets[index] = Target(targets[index].format, output,
                                f"{targets[index].spelling} --output {output}")
    printed = [t.spelling for t in targets if t.path is None]
    if owner is not None and printed:
        raise UsageError(f"{owner} and {printed[0]} would both be printed on stdout.",
                         hint=f"Give the report a file: --format FMT=PATH (or --output FILE); "
                         f"{owner.split()[0]} prints its own output alone on stdout.")
    if len(printed) > 1:
        raise UsageError(f"{printed[0]} and {printed[1]} would both be printed on stdout.",
                         hint="Give all but one a file: --format FMT=PATH (or --output FILE).")
    _check_category(category, targets)  # the configured format is checked by resolved()
    seen: dict[str, str] = {}
    for target in targets:
        if target.path is None:
            continue
        key = os.path.abspath(target.path)
        if key in seen:
            raise UsageError(f"{seen[key]} and {target.spelling} name the same file.",
                             hint="Give each format its own file.")
        seen[key] = target.spelling
    return OutputPlan(tuple(targets), category)


def check_outputs(plan: OutputPlan) -> None:
    """Refuse, before anything runs, a target's file that cannot be written (or that is
    no regular file a report may be written to, `write_output`)."""
    for target in plan.targets:
        check_output(target.path, shown=target.spelling)
        if target.path is not None:
            _written_into(target.path, target.spelling)


def terminal_style(color: str | None = None) -> tuple[int, bool]:
    """The width and colour of the human report printed on stdout, as rich judges the
    console (report/human.py screen_for) for `--color`/`[lint] color` (None: cargo's
    CARGO_TERM_COLOR, else auto)."""
    # lazy: lint/__init__.py imports this stage at its top, so report/'s renderers
    # (pydantic, rich) would load on the refusals before any VM (bench/cli_startup.py)
    from roteiro_py.report.human import color_choice, screen_for

    screen = screen_for(sys.stdout, color_choice(color))
    return screen.width, screen.color


def render_all(report: Report, targets: Sequence[Target], *,
               category: str | None = None, color: str | None = None) -> list[tuple[Target, str]]:
    """Each target with its text; a format is rendered once, whatever number of files
    it goes to (the human report on a terminal once more, at its width and colour)."""
    # lazy: report/ (pydantic, rich), as in terminal_style() above
    from roteiro_py.report.render import render

    texts: dict[tuple[str, int, bool], str] = {}
    rendered: list[tuple[Target, str]] = []
    for target in targets:
        assert target.format is not None, "resolved() fills in the configured format"
        # a file is never coloured unless asked for by name (--color always)
        width, colored = terminal_style(color) if target.path is None and target.format == "human" \
            else (100, color == "always" and target.format == "human")
        key = (target.format, width, colored)
        if key not in texts:
            fmt: Format = target.format  # type: ignore[assignment]  # FORMATS checked it
            texts[key] = render(report, fmt, width=width, color=colored, category=category)
        rendered.append((target, texts[key]))
    return rendered


def deliver(rendered: Sequence[tuple[Target, str]]) -> None:
    """Write each file, then print the stdout target; every file is tried before the
    first failure is raised (UsageError, naming how many failed)."""
    failures: list[UsageError] = []
    for target, text in rendered:
        if target.path is not None:
            try:
                write_output(target.path, text, shown=target.spelling)
            except UsageError as failure:
                failures.append(failure)
    for target, text in rendered:
        if target.path is None:
            sys.stdout.write(text)
            sys.stdout.flush()
    if failures:
        first = failures[0]
        if len(failures) > 1:
            raise UsageError(f"{first.message} ({len(failures) - 1} more of the outputs could not be "
                             "written either; the others were.)", hint=first.hint)
        raise first


def append_step_summary(report: Report, environ: Mapping[str, str] | None = None) -> str | None:
    """Append the Markdown summary to `$GITHUB_STEP_SUMMARY` when it is set (module
    docstring); returns a line for stderr when it was set and not written, else None."""
    # lazy: report/ (pydantic, rich), as in terminal_style() above
    from roteiro_py.report.links import blob_base
    from roteiro_py.report.markdown import STEP_SUMMARY_LIMIT
    from roteiro_py.report.render import render_summary
    environ = os.environ if environ is None else environ
    where = environ.get(STEP_SUMMARY_ENV)
    if not where:
        return None
    links = blob_base(environ)

    def skipped(why: str) -> str:
        return f"pylint-sandbox: ${STEP_SUMMARY_ENV} ({sanitise(where)}) was not written: {why}.\n"

    flags = os.O_WRONLY | os.O_APPEND | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
    try:
        fd = os.open(where, flags)
    except OSError as error:
        if error.errno == errno.ELOOP:
            return skipped("it is a symbolic link, and the runner's summary file never is")
        if error.errno == errno.ENOENT:
            return skipped("it does not exist (the runner creates it for each step)")
        if error.errno == errno.ENXIO:  # a FIFO no one reads (O_NONBLOCK: never a wait)
            return skipped("it is not a regular file")
        return skipped(f"it cannot be opened ({error.strerror or error})")
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return skipped("it is not a regular file")
        room = STEP_SUMMARY_LIMIT - st.st_size
        for with_findings in (True, False):
            data = (("\n" if st.st_size else "") + render_summary(report, with_findings=with_findings,
                                                                     links=links)).encode()
            if len(data) <= room:
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view):]
                return None
        return skipped(f"it holds {st.st_size} bytes, and GitHub drops a step's whole summary "
                       f"past {STEP_SUMMARY_LIMIT}")
    except OSError as error:
        return skipped(f"writing it failed ({error.strerror or error})")
    finally:
        os.close(fd)


def write_output(output: Path, text: str, *, shown: str | None = None) -> None:
    """Put the report at `output`, or refuse naming it (UsageError) if that fails;
    `shown` is how the refusal names it (default `--output FILE`).

    A regular file (or a new name) gets the report beside it, renamed into place: a run
    that fails while writing (disk full, interrupted) never leaves a half-written report
    behind; an existing file keeps its mode (a private 0600 report must not become 0644).

    Written into, never renamed over (as root, renaming over `--output /dev/null` would
    replace the device with a file): /dev/null itself, this process's own stdout or
    stderr named as such (`--output /dev/stdout`, `/proc/self/fd/2`: STREAM_NAMES), and
    the file, pipe, socket or terminal they already are. Any other link is replaced by
    the report, wherever it leads: the tree under review can commit `clippy.sarif ->
    ../../.bashrc`, and its `clippy.sarif -> /proc/self/fd/1` (or `-> /dev/null`) would
    send the SARIF into the job's log (or nowhere) instead of the file the CI then uploads.
    Any other file that is not regular (a FIFO, a device, a socket) is refused: a tree
    unpacked from an archive can hold one (tar as root makes device nodes), and writing
    through `clippy.sarif` into a copy of /dev/sda is not a report. A failure (a sticky
    directory's file of another user, ENOSPC) is reported as this path's problem, never
    as an OSError (exit 4) after a whole lint."""
    shown = shown or f"--output {output}"
    refuse_linked_directory(output, shown)  # again: the lint ran in between
    try:
        into = _written_into(output, shown)
        if into is not None:
            _write_into(output, text, into, shown)
            return
        try:
            existing: os.stat_result | None = os.lstat(output)
        except FileNotFoundError:
            existing = None
        mode = stat.S_IMODE(existing.st_mode) if existing is not None and stat.S_ISREG(existing.st_mode) \
            else 0o644 & ~_umask()  # a link is replaced by a new file with the default mode
        paths.replace_file(output, text.encode("utf-8"), mode)
    except OSError as error:
        raise UsageError(
            f"{shown}: the report could not be written "
            f"({error.strerror or error}).",
            hint="The report itself was made; name a file you can write (with room for "
                 "the report) and run the command again, or print it on stdout.") from None


#: /dev/null's device number on Linux (major 1, minor 3).
_DEV_NULL = os.makedev(1, 3)
#: The names of this process's own stdout and stderr: a link at one of these absolute
#: paths is written through to the stream it leads to. No tree under review can put a
#: file there; a link anywhere else may be the tree's, whatever it leads to.
STREAM_NAMES = frozenset({"/dev/stdout", "/dev/stderr", "/dev/fd/1", "/dev/fd/2",
                          "/proc/self/fd/1", "/proc/self/fd/2"})


def _written_into(output: Path, shown: str) -> os.stat_result | None:
    """The file `output` is written into (write_output's docstring says which), None
    when the report replaces what is there (a regular file, a link, nothing), or the
    UsageError for a file it may do neither to."""
    try:
        existing = os.lstat(output)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(existing.st_mode):
        if os.path.abspath(output) not in STREAM_NAMES:
            return None
        try:
            final = os.stat(output)
        except OSError:
            final = None
        if final is None or not _own_stream(final):
            raise UsageError(f"{shown} names this process's own output, and it is not open.",
                             hint="Name a file to write the report to, or leave out the path to print it.")
        return final
    if stat.S_ISREG(existing.st_mode):
        return None
    if (stat.S_ISCHR(existing.st_mode) and existing.st_rdev == _DEV_NULL) or _own_stream(existing):
        return existing
    raise UsageError(f"{shown} is {_kind(existing.st_mode)}, not a regular file: a report is written "
                     "only to a regular file, /dev/null or this process's own stdout or stderr.",
                     hint="Name a regular file (or a new one); to hand the report to a program, leave "
                          "out the path and pipe what is printed.")


def _kind(mode: int) -> str:
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO"), (stat.S_ISSOCK, "a socket"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device")):
        if test(mode):
            return name
    return "a special file"


def _own_stream(st: os.stat_result) -> bool:
    """Whether `st` is the file, pipe, socket or terminal this process's stdout or
    stderr already is."""
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _write_into(output: Path, text: str, checked: os.stat_result, shown: str) -> None:
    """Write into what `output` names, never creating a file (no O_CREAT: a link swapped
    to a missing path fails) and only if the opened file is the one that was checked."""
    fd = os.open(output, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        now = os.fstat(handle.fileno())
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            raise UsageError(f"{shown} changed while the report was written.",
                             hint="Name a file to write the report to.")
        if stat.S_ISREG(now.st_mode):
            handle.truncate(0)
        handle.write(text)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
