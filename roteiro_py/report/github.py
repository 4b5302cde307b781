"""GitHub Actions workflow commands: one `::error`/`::warning`/`::notice` line a finding.

A workflow command is a line of the step's log that the runner interprets, so a guest
string that put a newline into one would start a command of its own (`::add-mask::`,
`::stop-commands::`). Escaping follows GitHub's toolkit (`@actions/core` command.ts):
in the message `%`, `\\r`, `\\n` become `%25`, `%0D`, `%0A`; in a property value `:` and
`,` also become `%3A` and `%2C`. The strings are clean (model.py) before that, and every
field of an annotation (message, help, suggestion, doc link, title, file) is escaped the
same way: none of them can end the line or the property list.

An annotation carries the message, rustc's help, the suggestions (what `cargo clippy
--fix` would write) and the lint's documentation (report/links.py), as cargo's own output
does. A suggestion is shown whole, from `Finding.fixes`: its help, then the lines it
touches as they are (`-`) and as all its parts make them (`+`), as cargo and the human
report show them; without those lines, each part's place and replacement. (The legacy
`Finding.suggestion`, the first part alone, is what a report written before `fixes`
has: `bool_assert_comparison` then read `suggestion: `assert``, which would not
compile.)

The first line is the run's provenance, one `::notice` (PROVENANCE_TITLE): the pinned
image, the toolchain the guest said it has, and the isolation the backend that ran the
job had (hardware-isolated or not), so a job's page says what vouched for its findings
without opening the log. It takes one of the step's notice annotations.

GitHub's limits (actions/runner's ExecutionContext.cs, and
https://github.com/actions/toolkit/blob/main/docs/problem-matchers.md), and what happens
past them:
- ANNOTATION_LIMIT annotations of each type (error, warning, notice) per step, and 50
  per job over all its steps; the runner drops the rest without a word. Past the limit
  no more commands of that type are printed; a plain line says how many were not
  annotated and where they are: the step summary ($GITHUB_STEP_SUMMARY, written by the
  same run: report/markdown.py) lists the first of them, `--format json` or `sarif`
  every one. Other steps' annotations share the job's 50.
- MESSAGE_LIMIT characters (UTF-16 code units, as .NET counts) of a message; the runner
  cuts the rest. So the message is composed to fit: the doc link is always kept, the
  suggestion gets at most SUGGESTION_SHARE of it, and the message and help are cut with
  a mark saying so.
- TITLE_LIMIT characters of a title (the Checks API's limit an annotation lands in).
"""

from __future__ import annotations

from collections import Counter

from roteiro_py.report.links import doc_url
from roteiro_py.report.markdown import MAX_FINDINGS as SUMMARY_FINDINGS
from roteiro_py.report.markdown import listed_as
from roteiro_py.report.model import Finding, Report, comparison_phrase
from roteiro_py.report.plain import fix_text

#: Annotations of one type GitHub shows per step (error, warning, notice each).
ANNOTATION_LIMIT = 10
#: Annotations GitHub shows per job, over all its steps.
JOB_ANNOTATION_LIMIT = 50
#: Characters of one annotation's message the runner keeps (`_maxIssueMessageLength`).
MESSAGE_LIMIT = 4096
#: Of MESSAGE_LIMIT, at most this much is the suggestion.
SUGGESTION_SHARE = 1024
#: Characters of an annotation's title (the Checks API's `title`).
TITLE_LIMIT = 255

_TYPE = {"error": "error", "warning": "warning", "note": "notice", "help": "notice"}
#: The workflow commands this format writes on purpose; `guard()` breaks any other.
OWN_COMMANDS = frozenset(_TYPE.values())
_CUT_MARK = "… [cut to GitHub's annotation size; --format json or sarif has it whole]"
#: The title of the provenance notice (the first line of this format).
PROVENANCE_TITLE = "pylint-sandbox: provenance"


def escape_data(text: str) -> str:
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def units(text: str) -> int:
    """The length of `text` as the runner counts it: UTF-16 code units."""
    return len(text.encode("utf-16-le", errors="surrogatepass")) // 2


def _cut(text: str, limit: int, mark: str = _CUT_MARK) -> str:
    """`text` if it fits in `limit` units, else its start and `mark`, within `limit`."""
    if units(text) <= limit:
        return text
    room = max(limit - units(mark), 0)
    # Never half a surrogate pair: a cut pair is dropped whole.
    kept = text.encode("utf-16-le", errors="surrogatepass")[: room * 2].decode(
        "utf-16-le", errors="ignore")
    return kept + mark if units(kept + mark) <= limit else mark[:limit]


def message_of(finding: Finding, rustc_release: str) -> str:
    """The annotation's text (before escaping), within MESSAGE_LIMIT."""
    tail = ""
    if finding.fixes:
        shown = "".join("\n" + fix_text(fix) for fix in finding.fixes)
        tail += _cut(shown, SUGGESTION_SHARE, "… [suggestion cut]")
    elif finding.suggestion is not None:  # a report written before `fixes`: its first part
        suggestion = finding.suggestion
        shown = (f"\nsuggestion: `{suggestion}`" if "\n" not in suggestion
                 else f"\nsuggestion:\n{suggestion}")
        tail += _cut(shown, SUGGESTION_SHARE, "… [suggestion cut]")
    url = doc_url(finding.code, rustc_release)
    if url is not None:
        tail += f"\nfor further information visit {url}"
    head = finding.message
    if finding.label:  # the primary span's label, which cargo shows under the span
        head += f"\n{finding.label}"
    # rustc's first help is usually a suggestion's own message, shown with it above
    if finding.help and all(fix.message != finding.help for fix in finding.fixes):
        head += f"\nhelp: {finding.help}"
    return _cut(head, MESSAGE_LIMIT - units(tail)) + tail


def annotation(finding: Finding, rustc_release: str = "") -> str:
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
    properties.append(("title", _cut(finding.code or f"rustc {finding.level}", TITLE_LIMIT, "…")))
    rendered = ",".join(f"{key}={escape_property(value)}" for key, value in properties)
    message = message_of(finding, rustc_release)
    return f"::{_TYPE[finding.level]} {rendered}::{escape_data(message)}"


def _provenance_prefix() -> str:
    return f"::notice title={escape_property(PROVENANCE_TITLE)}::"


def provenance_notice(report: Report) -> str:
    """The image, the toolchain and the isolation of the run, as one `::notice`. Every
    value came from outside (the image reference from a repository's configuration, the
    toolchain from the guest): escaped like any annotation, never a line or a property of
    its own."""
    image, toolchain, isolation = report.provenance, report.toolchain, report.isolation
    pinned = image.image_reference if image.image_reference.endswith(image.image_digest) else (
        f"{image.image_reference} (manifest {image.image_digest})")
    clippy = f"clippy {toolchain.clippy_version}"
    if toolchain.clippy_commit and toolchain.clippy_date:
        clippy += f" ({toolchain.clippy_commit} {toolchain.clippy_date})"
    rustc = f"rustc {toolchain.rustc_release}" + (
        f" ({toolchain.rustc_commit})" if toolchain.rustc_commit else "") + f" on {toolchain.host}"
    hardware = "hardware-isolated" if isolation.hardware_isolated else "not hardware-isolated"
    message = (f"image: {pinned}\ntoolchain: {clippy}, {rustc}\nisolation: {isolation.description} "
               f"(backend {isolation.backend}, accelerator {isolation.accelerator}, {hardware})")
    return _provenance_prefix() + escape_data(_cut(message, MESSAGE_LIMIT))


#: How the provenance notice's line starts (what a reader of the log filters on).
PROVENANCE_PREFIX = _provenance_prefix()


def render_github(report: Report) -> str:
    lines: list[str] = [provenance_notice(report)]
    shown: Counter[str] = Counter(notice=1)  # the provenance is one of the step's notices
    left_out: Counter[str] = Counter()
    release = report.toolchain.rustc_release
    # Compared with a baseline or a diff, only the findings that gate the run are
    # annotated (a pull request answers for what it adds); the rest are counted below.
    for finding in (f for f in report.findings if f.gating):
        kind = _TYPE[finding.level]
        if shown[kind] < ANNOTATION_LIMIT:
            shown[kind] += 1
            lines.append(annotation(finding, release))
        else:
            left_out[kind] += 1
    # what the step summary lists: the findings that gate the run, as annotated here
    listed = "findings of the run" if report.comparison is None else listed_as(report).lower()
    for kind in ("error", "warning", "notice"):
        if left_out[kind]:
            lines.append(
                f"{left_out[kind]} more {kind} finding{'s' if left_out[kind] != 1 else ''} "
                f"not annotated (GitHub shows {ANNOTATION_LIMIT} {kind} annotations per step"
                + ("; one is the run's provenance" if kind == "notice" else "") + "); "
                f"the step summary lists the first {SUMMARY_FINDINGS} {listed} (errors "
                "first), --format json or sarif every one."
            )
    compared = comparison_phrase(report, "not annotated")
    if compared is not None:
        lines.append(compared + ".")
    summary = report.summary
    lines.append(f"clippy: {summary.total} finding{'' if summary.total == 1 else 's'}; build "
                 f"{'succeeded' if summary.build_succeeded else 'failed'}"
                 + (f"; {summary.dropped_findings} more past the cap of a report, not shown."
                    if summary.dropped_findings else "."))
    return "\n".join(lines) + "\n"
