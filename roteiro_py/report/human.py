"""The terminal report: findings grouped by file, each with its source line and the span
underlined, then the counts and one provenance line.

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
"""

from __future__ import annotations

import io
from itertools import groupby

from rich.console import Console
from rich.text import Text

from roteiro_py.report.model import LEVELS, Finding, Report, comparison_phrase

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


def _finding(finding: Finding) -> Text:
    """One finding as one `Text` of several lines."""
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
    if finding.path is not None and finding.line is not None:
        parts.append(Text(f"  --> {finding.path}:{finding.line}:{finding.column}", style="blue"))
        if finding.snippet is not None and finding.column is not None:
            lines = finding.snippet.splitlines()[:MAX_SHOWN_LINES] or [""]
            gutter = len(str(finding.line + len(lines) - 1))
            for offset, source in enumerate(lines):
                number = finding.line + offset
                row = Text(f"{number:>{gutter}} | ", style="blue")
                row.append(source)
                parts.append(row)
                if offset == 0:
                    last = finding.end_column if finding.end_line == finding.line else None
                    mark = Text(f"{'':>{gutter}} | ", style="blue")
                    mark.append(_underline(source, finding.column, last),
                                style=_STYLE[finding.level])
                    parts.append(mark)
    if finding.help:
        parts.append(Text.assemble("  = ", ("help", "bold"), ": ", _continued(finding.help)))
    if finding.suggestion is not None and "\n" not in finding.suggestion:
        parts.append(Text.assemble("  = ", ("suggestion", "bold"), ": `",
                                   finding.suggestion, "`"))
    for related in finding.related:
        label = f" ({_first_line(related.message)})" if related.message else ""
        parts.append(Text(f"  also {related.path}:{related.line}:{related.column}{label}",
                          style="dim"))
    return Text("\n").join(parts)


def render_human(report: Report, *, width: int = 100, color: bool = False) -> str:
    """The report as terminal text; with `color`, rich's SGR colour codes and nothing else."""
    buffer = io.StringIO()
    console = Console(file=buffer, width=width, force_terminal=color, no_color=not color,
                      color_system="standard" if color else None, highlight=False,
                      markup=False, emoji=False, soft_wrap=True)
    # Compared with a baseline or a diff, only the findings that gate the run are shown;
    # the rest are counted below (the JSON report keeps them all, marked).
    gating = [f for f in report.findings if f.gating]
    ordered = sorted(gating, key=lambda f: (f.path or "", f.line or 0, f.column or 0))
    for path, group in groupby(ordered, key=lambda f: f.path):
        console.print(Text(path or "(no location)", style="bold underline"))
        for finding in group:
            console.print(_finding(finding))
            console.print()
    summary = report.summary
    counts = ", ".join(f"{summary.counts.get(level, 0)} {level}" for level in LEVELS
                       if summary.counts.get(level, 0))
    line = Text(f"{summary.total} finding{'s' if summary.total != 1 else ''}", style="bold")
    if counts:
        line.append(f" ({counts})")
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


def dependency_line(report: Report) -> str:
    """Where the run's dependencies came from, with cargo's own count of what it compiled."""
    cache, summary = report.dependency_cache, report.summary
    assert cache is not None
    counted = (f"{summary.dependencies_fresh} dependency units fresh, "
               f"{summary.dependencies_compiled} compiled")
    if cache.state == "skipped":
        return f"dependency cache skipped: {cache.reason}; {counted}"
    key = (cache.key or "")[:16]
    if cache.state == "built":
        took = f" in {cache.build_seconds:.0f} s" if cache.build_seconds is not None else ""
        again = f" ({cache.reason})" if cache.reason else ""
        return f"dependency cache {key} built{took}{again}, then used; {counted}"
    return f"dependency cache {key} used; {counted}"
