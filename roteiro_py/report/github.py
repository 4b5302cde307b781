"""GitHub Actions workflow commands: one `::error`/`::warning`/`::notice` line a finding.

A workflow command is a line of the step's log that the runner interprets, so a guest
string that put a newline into one would start a command of its own (`::add-mask::`,
`::stop-commands::`). Escaping follows GitHub's toolkit (`@actions/core` command.ts):
in the message `%`, `\\r`, `\\n` become `%25`, `%0D`, `%0A`; in a property value `:` and
`,` also become `%3A` and `%2C`. The strings are clean (model.py) before that.

GitHub shows at most ANNOTATION_LIMIT annotations of each type (error, warning, notice)
per step and drops the rest without a word, so past the limit no more commands of that
type are printed; a plain line says how many were not annotated and where to see them.
"""

from __future__ import annotations

from collections import Counter

from roteiro_py.report.model import Finding, Report, comparison_phrase

#: GitHub's documented limit per type and per step (docs: "Workflow commands", annotations).
ANNOTATION_LIMIT = 10

_TYPE = {"error": "error", "warning": "warning", "note": "notice", "help": "notice"}
#: The workflow commands this format writes on purpose; `guard()` breaks any other.
OWN_COMMANDS = frozenset(_TYPE.values())


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def annotation(finding: Finding) -> str:
    properties: list[tuple[str, str]] = []
    if finding.path is not None:
        properties.append(("file", finding.path))
        if finding.line is not None:
            properties.append(("line", str(finding.line)))
            properties.append(("endLine", str(finding.end_line or finding.line)))
        if finding.column is not None and finding.end_line in (None, finding.line):
            # GitHub uses columns only for single-line spans.
            properties.append(("col", str(finding.column)))
            properties.append(("endColumn", str(finding.end_column or finding.column)))
    properties.append(("title", finding.code or f"rustc {finding.level}"))
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    message = finding.message
    if finding.help:
        message += f"\nhelp: {finding.help}"
    return f"::{_TYPE[finding.level]} {rendered}::{escape_data(message)}"


def render_github(report: Report) -> str:
    lines: list[str] = []
    shown: Counter[str] = Counter()
    left_out: Counter[str] = Counter()
    # Compared with a baseline or a diff, only the findings that gate the run are
    # annotated (a pull request answers for what it adds); the rest are counted below.
    for finding in (f for f in report.findings if f.gating):
        kind = _TYPE[finding.level]
        if shown[kind] < ANNOTATION_LIMIT:
            shown[kind] += 1
            lines.append(annotation(finding))
        else:
            left_out[kind] += 1
    for kind in ("error", "warning", "notice"):
        if left_out[kind]:
            lines.append(
                f"{left_out[kind]} more {kind} finding{'s' if left_out[kind] != 1 else ''} "
                f"not annotated (GitHub shows {ANNOTATION_LIMIT} {kind} annotations per step); "
                "see the full report with --format human, json or sarif."
            )
    compared = comparison_phrase(report, "not annotated")
    if compared is not None:
        lines.append(compared + ".")
    summary = report.summary
    lines.append(f"clippy: {summary.total} findings; build "
                 f"{'succeeded' if summary.build_succeeded else 'failed'}"
                 + (f"; {summary.dropped_findings} more past the cap of a report, not shown."
                    if summary.dropped_findings else "."))
    return "\n".join(lines) + "\n"
