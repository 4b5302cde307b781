"""The terminal report: findings grouped by file, each with its source line, the span
underlined and rustc's label under it, then rustc's `rustc --explain` line for the error
codes shown, the counts and one provenance line.

Every guest string is already clean (model.py); it is still put on the console only as
`rich.text.Text` with markup and highlighting off, so a message like `[red]` or
`[link=...]` is shown as written, never interpreted. Lines a CI runner would read as
commands are broken by `render()`, the door every format leaves by.

Bounded: a guest string is shown with at most MAX_SHOWN_LINES lines, then "… N more
lines" (a related span's label with one; the JSON and SARIF reports keep them whole), and
each finding is one `Text` and one `console.print`. A message of 4,000 newlines is 8 KB of
guest output; rendered one print per line it cost ~180 us a line, so the 64 MiB output cap
was ~1.6 h of host CPU after the run's deadline. Now at most MAX_FINDINGS findings of
about 55 lines are rendered: ~19 s for the worst case measured (10,000 findings, 28 MB).

Where it goes (`screen_for`): rich judges the console, as for any rich program (COLUMNS,
TERM=dumb, NO_COLOR, FORCE_COLOR and TTY_COMPATIBLE), instead of our own
`os.get_terminal_size()`: under `script -qc` that reports 0 columns, and a rich Console
given width 0 prints nothing at all: the report vanished with the exit status still 1.
A width below MIN_WIDTH (a pty with no size set, `COLUMNS=0`) is taken as FALLBACK_WIDTH;
lines are never wrapped (soft_wrap), so the width only has to be one rich can print at.
Colour follows `--color` / `[lint] color`, else cargo's own CARGO_TERM_COLOR, else auto.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from itertools import groupby
from typing import TextIO

from rich.console import Console
from rich.text import Text

from roteiro_py.guidance import counted
from roteiro_py.progress import FALLBACK_WIDTH, MIN_WIDTH
from roteiro_py.report.model import LEVELS, BuildScriptWarning, Child, Finding, Fix, Report, comparison_phrase
from roteiro_py.report.plain import dependency_line
from roteiro_py.vocabulary import COLORS


@dataclass(frozen=True)
class Screen:
    """How the human report is laid out for where it goes: a width rich can print at, and
    whether it carries colour (SGR sequences)."""

    width: int
    color: bool


def color_choice(setting: str | None, environ: Mapping[str, str] | None = None) -> str:
    """`setting` (`--color` or `[lint] color`), or when unset cargo's CARGO_TERM_COLOR, as
    `cargo clippy` in the same shell would; an unknown CARGO_TERM_COLOR (cargo's variable,
    not ours to refuse) is auto."""
    if setting is not None:
        return setting
    cargo = (os.environ if environ is None else environ).get("CARGO_TERM_COLOR", "").strip().lower()
    return cargo if cargo in COLORS else "auto"


def screen_for(stream: TextIO, choice: str, *, to_file: bool = False,
               environ: Mapping[str, str] | None = None) -> Screen:
    """The Screen for writing to `stream` with `choice` (auto, always, never), as rich
    detects it. `to_file`: the report goes to `--output`, which auto never colours."""
    console = Console(file=stream, highlight=False, markup=False, emoji=False,
                      force_terminal=True if choice == "always" else None,
                      _environ=os.environ if environ is None else environ)
    width = console.width if console.width >= MIN_WIDTH else FALLBACK_WIDTH
    if choice == "always":
        return Screen(width, True)
    if choice == "never" or to_file:
        return Screen(width, False)
    # auto: rich's own judgement (TTY_COMPATIBLE, FORCE_COLOR, isatty), then NO_COLOR and
    # a dumb terminal, as the no-color.org convention and TERM=dumb ask
    return Screen(width, console.is_terminal and not console.is_dumb_terminal and not console.no_color)

#: Lines shown of one message or help text (or snippet); the rest are counted.
MAX_SHOWN_LINES = 20

_STYLE = {"error": "bold red", "warning": "bold yellow", "note": "bold cyan", "help": "bold green"}


def _underline(source_line: str, column: int, end_column: int | None) -> str:
    """Carets under columns column..end_column-1 (1-based code points), keeping tabs."""
    start = max(column - 1, 0)
    stop = max((end_column or column + 1) - 1, start + 1)
    stop = min(stop, max(len(source_line), start + 1))
    prefix = "".join("\t" if ch == "\t" else " " for ch in source_line[:start])
    return prefix + "^" * (stop - start)


def _capped(text: str) -> list[str]:
    """The lines of `text`, at most MAX_SHOWN_LINES of them, then how many were left out."""
    lines = text.removesuffix("\n").split("\n", MAX_SHOWN_LINES)
    if len(lines) <= MAX_SHOWN_LINES:
        return lines
    more = lines[-1].count("\n") + 1
    return [*lines[:-1], f"… {more} more line{'s' if more != 1 else ''}"]


def _first_line(text: str) -> str:
    """The first line of `text`, and how many lines were left out."""
    first, newline, rest = text.removesuffix("\n").partition("\n")
    more = rest.count("\n") + 1 if newline else 0
    return f"{first} … {more} more line{'s' if more != 1 else ''}" if more else first


def _continued(text: str) -> str:
    """A multi-line guest string with every line after the first indented under the first."""
    return "\n        ".join(_capped(text))


def _inline_fix(finding: Finding) -> Fix | None:
    """The suggestion cargo showed as a label under the primary span, if any (Fix.inline:
    rustc chooses by a display style its JSON does not carry). Drawn so here only when its
    one part is the primary span itself; otherwise as lines before and after."""
    inline = [fix for fix in finding.fixes if fix.inline and len(fix.edits) == 1]
    if len(inline) != 1:
        return None
    edit = inline[0].edits[0]
    here = (edit.path, edit.line, edit.column, edit.end_line, edit.end_column)
    if here != (finding.path, finding.line, finding.column, finding.end_line, finding.end_column):
        return None
    return inline[0]


def _help_label(fix: Fix) -> str:
    shown = fix.edits[0].replacement.strip()
    return f"help: {fix.message}: `{shown}`" if shown else f"help: {fix.message}"


def _gutter(finding: Finding, shown_lines: int) -> int:
    """The width of the line-number gutter: the widest number the finding shows."""
    numbers = [(finding.line or 1) + max(shown_lines - 1, 0)]
    numbers += [fix.line + max(len(_capped(fix.before or "")), len(_capped(fix.after or ""))) - 1
                for fix in finding.fixes if fix.line is not None]
    return len(str(max(numbers)))


def _marks(source: str, finding: Finding, label: str | None) -> list[str]:
    """The rows under a one-line primary span, as rustc draws them: `^` under it, `-` under
    each related span of the same line, the rightmost label beside its marks and each
    other label on a row of its own under a `|` from its span, rightmost first."""
    spans = [(finding.column or 1, finding.end_column, "^", label)]
    spans += [(r.column, r.end_column if r.end_line == r.line else None, "-",
               _first_line(r.message) if r.message else None)
              for r in finding.related if r.path == finding.path and r.line == finding.line
              and r.end_line == r.line]
    spans.sort(key=lambda span: span[0])
    row: list[str] = []
    for column, end, mark, _ in spans:
        drawn = _underline(source, column, end)
        start = len(drawn) - len(drawn.lstrip(" \t"))
        while len(row) < len(drawn):
            row.append(" ")
        for index in range(start, len(drawn)):
            if row[index] == " ":
                row[index] = mark
    rows = ["".join(row).rstrip()]
    labelled = [(column, text) for column, _, _, text in spans if text]
    if labelled and labelled[-1][0] == spans[-1][0]:
        rows[0] += " " + labelled.pop()[1]
    if not labelled:
        return rows

    def at(columns: list[int]) -> list[str]:
        cells = [" "] * (max(columns) + 1)
        for column in columns:
            cells[column] = "|"
        return cells

    offsets = [len(_underline(source, column, None)) - 1 for column, _ in labelled]
    rows.append("".join(at(offsets)).rstrip())
    for count in range(len(labelled), 0, -1):
        cells = at(offsets[:count]) if count > 1 else []
        head = "".join(cells[:offsets[count - 1]]) if cells else " " * offsets[count - 1]
        rows.append(head + labelled[count - 1][1])
    return rows


def _finding(finding: Finding) -> Text:
    """One finding as one `Text` of several lines, in cargo's layout: the header, `-->`,
    the gutter, the source with its marks and labels, `= note`s, then each suggestion."""
    message = _capped(finding.message)
    head = Text()
    head.append(finding.level, style=_STYLE[finding.level])
    if finding.code:
        head.append(f"[{finding.code}]", style=_STYLE[finding.level])
    head.append(": ")
    head.append(message[0], style="bold")
    parts = [head]
    for extra in message[1:]:
        parts.append(Text("   " + extra))
    inline = _inline_fix(finding)
    fixes = [fix for fix in finding.fixes if fix is not inline]
    lines = (finding.snippet.splitlines()[:MAX_SHOWN_LINES] or [""]) if (
        finding.snippet is not None and finding.column is not None) else []
    width = _gutter(finding, len(lines))
    pad, style = " " * width, _STYLE[finding.level]
    bar = Text(f"{pad} |", style="blue")
    if finding.path is not None and finding.line is not None:
        parts.append(Text(f"{pad}--> {finding.path}:{finding.line}:{finding.column}", style="blue"))
        label = _help_label(inline) if inline is not None else (
            _first_line(finding.label) if finding.label else None)
        if not lines and label:  # no line to put it under
            parts.append(Text.assemble(f"{pad} = ", ("label", "bold"), ": ", label))
        if lines:
            parts.append(bar)
            parts.extend(_source(finding, lines, width, label, style))
    related = [Text(f"{pad} = also {r.path}:{r.line}:{r.column}"
                    + (f" ({_first_line(r.message)})" if r.message else ""), style="dim")
               for r in finding.related
               if not (lines and r.path == finding.path and r.line == finding.line == finding.end_line
                       and r.end_line == r.line)]
    if finding.children or finding.fixes:  # as cargo: the spans' labels, notes, suggestions
        notes = [*related, *(_child(child, pad) for child in finding.children)]
        if notes and lines:
            parts.append(bar)
        parts.extend(notes)
        for fix in fixes:
            parts.extend(_fix(fix, width))
        return Text("\n").join(parts)
    # a report written before issue 13: its first help and first replacement only
    if related and lines:
        parts.append(bar)
    parts.extend(related)
    if finding.help:
        parts.append(Text.assemble(f"{pad} = ", ("help", "bold"), ": ", _continued(finding.help)))
    if finding.suggestion is not None and "\n" not in finding.suggestion:
        parts.append(Text.assemble(f"{pad} = ", ("suggestion", "bold"), ": `",
                                   finding.suggestion, "`"))
    return Text("\n").join(parts)


def _source(finding: Finding, lines: list[str], width: int, label: str | None,
            style: str) -> list[Text]:
    """The source rows and their marks: one line as `^^^ label`; a span over several lines
    as rustc draws it, `/` on its first line, `|` down the margin, `|____^` at its end."""
    line = finding.line or 1
    gutter = Text(f"{' ' * width} | ", style="blue")
    if finding.end_line is None or finding.end_line == line or len(lines) == 1:
        rows = [Text.assemble((f"{line:>{width}} | ", "blue"), lines[0])]
        for mark in _marks(lines[0], finding, label):
            rows.append(gutter.copy().append(mark, style=style) if mark else Text(f"{' ' * width} |",
                                                                                   style="blue"))
        return rows
    rows = []
    for offset, source in enumerate(lines):
        margin = "/ " if offset == 0 else "| "
        rows.append(Text.assemble((f"{line + offset:>{width}} | ", "blue"), (margin, style), source))
    if line + len(lines) - 1 < finding.end_line:  # the span goes on past what is shown
        rows.append(Text.assemble((f"{'...':<{width}}", "blue"), ("  |", style)))
        return rows
    # the column is the guest's (or a saved report's: any size): the `_` run stops one past
    # its line's end, as `_underline` does, never a run as long as the number says
    last = min(max((finding.end_column or 2) - 2, 0), len(lines[finding.end_line - line]))
    end = Text(f"{' ' * width} | ", style="blue")
    end.append("|" + "_" * (last + 1) + "^", style=style)
    if label:
        end.append(" " + label, style=style)
    rows.append(end)
    return rows


def _child(child: Child, pad: str = " ") -> Text:
    """`  = note: ...` as cargo shows a note or help without a suggestion."""
    where = child.location
    at = f" (at {where.path}:{where.line}:{where.column})" if where is not None else ""
    return Text.assemble(f"{pad} = ", (child.level, "bold"), ": ", _continued(child.message),
                         (at, "dim"))


def _fix(fix: Fix, width: int | None = None) -> list[Text]:
    """`help: <message>` and the lines as they are and as the suggestion makes them, as
    cargo shows a suggestion (`2 -     assert_eq!(x, true);` / `2 +     assert!(x);`)
    between two `|` rows; without those lines, each part as `path:line:column:
    `replacement``. Bounded like every other guest text: MAX_SHOWN_LINES lines of each side."""
    parts = [Text.assemble(("help", _STYLE["help"]), ": ", _continued(fix.message))]
    if fix.before is not None and fix.after is not None and fix.line is not None:
        old, new = _capped(fix.before), _capped(fix.after)
        gutter = max(width or 0, len(str(fix.line + max(len(old), len(new)) - 1)))
        bar = Text(f"{' ' * gutter} |", style="blue")
        parts.append(bar)
        if len(old) == len(new):  # line by line: an unchanged line is context
            for offset, (was, now) in enumerate(zip(old, new, strict=True)):
                number = f"{fix.line + offset:>{gutter}}"
                if was == now:
                    parts.append(Text.assemble((f"{number} | ", "blue"), was))
                    continue
                parts.append(Text.assemble((f"{number} - ", "red"), was))
                parts.append(Text.assemble((f"{number} + ", "green"), now))
        else:
            for offset, was in enumerate(old):
                parts.append(Text.assemble((f"{fix.line + offset:>{gutter}} - ", "red"), was))
            for offset, now in enumerate(new):
                parts.append(Text.assemble((f"{fix.line + offset:>{gutter}} + ", "green"), now))
        parts.append(bar)
        return parts
    for edit in fix.edits:
        shown = _first_line(edit.replacement) if edit.replacement else ""
        what = f"`{shown}`" if edit.replacement else "remove"
        parts.append(Text.assemble((f"  {edit.path}:{edit.line}:{edit.column}: ", "blue"),
                                   ("replace with " if edit.replacement else "") + what))
    return parts


#: An error code rustc has an explanation for (`rustc --explain E0308`); lints have none.
_ERROR_CODE = re.compile(r"E[0-9]{4}")
#: Codes rustc names in "Some errors have detailed explanations: ..." before "...".
_EXPLAINED_SHOWN = 9


def explain_lines(findings: list[Finding]) -> list[str]:
    """rustc's closing lines for the error codes among `findings`, worded as it words them
    (rustc_errors `print_error_count`): one code, "For more information about this
    error, try `rustc --explain E0308`."; several, sorted, the first nine named, then
    "For more information about an error, try ..." with the first. rustc prints them
    once per crate; the report once, after every finding."""
    codes = sorted({f.code for f in findings if f.code and _ERROR_CODE.fullmatch(f.code)})
    if not codes:
        return []
    if len(codes) == 1:
        return [f"For more information about this error, try `rustc --explain {codes[0]}`."]
    named = ", ".join(codes[:_EXPLAINED_SHOWN]) + ("..." if len(codes) > _EXPLAINED_SHOWN else ".")
    return [f"Some errors have detailed explanations: {named}",
            f"For more information about an error, try `rustc --explain {codes[0]}`."]


#: How the count line names each level in the plural ("3 warnings").
_PLURAL = {"error": "errors", "warning": "warnings", "note": "notes", "help": "help"}


def _build_script_warning(warning: BuildScriptWarning) -> Text:
    """As cargo prints it: `warning: <package>@<version>: <message>`."""
    return Text.assemble(("warning", _STYLE["warning"]), f": {warning.package}@{warning.version}: ",
                         _continued(warning.message))


def render_human(report: Report, *, width: int = 100, color: bool = False) -> str:
    """The report as terminal text; with `color`, rich's SGR colour codes and nothing else."""
    buffer = io.StringIO()
    width = width if width >= MIN_WIDTH else FALLBACK_WIDTH  # 0 would print nothing at all
    console = Console(file=buffer, width=width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False,
                      markup=False, emoji=False, soft_wrap=True)
    for warning in report.build_script_warnings:  # cargo prints them before rustc's
        console.print(_build_script_warning(warning))
    if report.build_script_warnings:
        console.print()
    # Compared with a baseline or a diff, only the findings that gate the run are shown;
    # the rest are counted below (the JSON report keeps them all, marked).
    gating = [f for f in report.findings if f.gating]
    ordered = sorted(gating, key=lambda f: (f.path or "", f.line or 0, f.column or 0))
    for path, group in groupby(ordered, key=lambda f: f.path):
        console.print(Text(path or "(no location)", style="bold underline"))
        for finding in group:
            console.print(_finding(finding))
            console.print()
    explained = explain_lines(gating)  # after the diagnostics, as rustc prints them
    for text in explained:
        console.print(Text(text, style="bold"))
    if explained:
        console.print()
    summary = report.summary
    counts = ", ".join(counted(summary.counts.get(level, 0), level, _PLURAL[level]) for level in LEVELS
                       if summary.counts.get(level, 0))
    line = Text(counted(summary.total, "finding", "findings"), style="bold")
    if counts:
        line.append(f" ({counts})")
    if summary.build_script_warnings:
        line.append("; " + counted(summary.build_script_warnings, "build script warning",
                                    "build script warnings"))
        if summary.build_script_warnings > len(report.build_script_warnings):
            line.append(f" ({summary.build_script_warnings - len(report.build_script_warnings)} not shown)")
    line.append("; build " + ("succeeded" if summary.build_succeeded else "FAILED"),
                style="" if summary.build_succeeded else "bold red")
    if summary.outside_repository:
        line.append(f"; {summary.outside_repository} outside the repository, not shown")
    if summary.dropped_findings:
        line.append(f"; {summary.dropped_findings} more past the cap of a report, not shown",
                    style="bold")
    console.print(line)
    compared = comparison_phrase(report, "not shown")
    if compared is not None:
        console.print(Text(compared, style="bold"))
    toolchain, isolation, image = report.toolchain, report.isolation, report.provenance
    # The pin may name an index; the digest shown is then the platform manifest's.
    shown = image.image_reference if image.image_reference.endswith(image.image_digest) else (
        f"{image.image_reference} (manifest {image.image_digest})")
    chooser = {"user": "your config ", "repo": "the repository's "}.get(image.image_chosen_by or "", "")
    if image.image_chosen_in:
        shown += f" (chosen by {chooser}{image.image_chosen_in})"
    console.print(Text(
        f"linted in {shown} "
        f"with clippy {toolchain.clippy_version}, rustc {toolchain.rustc_release} "
        f"({toolchain.host}); isolation: {isolation.description}",
        style="dim",
    ))
    if report.dependency_cache is not None:
        console.print(Text(dependency_line(report), style="dim"))
    return buffer.getvalue()
