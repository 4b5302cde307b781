"""The report as a Markdown summary, for a CI job's page ($GITHUB_STEP_SUMMARY).

GitHub renders a step summary as GitHub-flavoured Markdown, and the report's strings
came from the guest or the tree: a message can hold `|` (a table cell ends), backticks,
`<img src=...>` or `<details>` (GitHub renders some HTML), `[text](https://evil)` (a link
that says one thing and goes to another), `@org/team` (a mention notifies people) and
`#123` (a reference to an issue). So every such string here, without exception, is put
in a code span by `code()`: inside one, Markdown, HTML, links, autolinks, mentions and
references are all shown as written (GitHub does not look for mentions in code). A code
span cannot hold a line break (a block would start), so whitespace is folded to one
space, and its fence is one backtick longer than any run in the text, so the text
cannot close it. No guest string is put in a table: tables hold only our own words and
numbers. A link is written only to a documentation page whose URL report/links.py built
from a name it checked, or to the finding's file at the job's commit (`links`: built by
report/links.py `blob_base` from variables it checked, the path percent-encoded).

A suggestion's code (`Finding.fixes`, what `cargo clippy --fix` would write, as the github
format shows it: report/plain.py `fix_text`) is a fenced code block under its finding:
inside one nothing is Markdown or HTML, and its fence is one backtick longer than any
run in the text (at least three), so no line of it can close the block. Every line is
indented as the list item's content, so none can end the item and the block with it.

Compared with a baseline or a diff (roteiro_py/compare/), only the findings that gate the
run (`Finding.gating`: new, in the diff) are listed, as the human report shows them and the
github format annotates them, and a closing line counts the rest and names the files
they were judged against (in code spans: the names are outside text too). Listing every
finding errors first would put a known error ahead of the new warning the pull request
added, on the page github's overflow line sends readers to.

Bounded: at most MAX_LINTS lints and MAX_FINDINGS findings are listed (errors first,
then by file and line; the summary says how many of how many), each string at most
FIELD_CHARS characters, its suggestions SUGGESTION_CHARS. At its largest that is about
160 KB, far below the
STEP_SUMMARY_LIMIT GitHub accepts for one step (past it GitHub drops the whole summary:
"$GITHUB_STEP_SUMMARY upload aborted, supports content up to a size of 1024k"); the
writer (lint/output.py) checks what the file holds already.
"""

from __future__ import annotations

import re
from collections import Counter

from roteiro_py.guidance import counted
from roteiro_py.report.links import blob_url, doc_url
from roteiro_py.report.model import LEVELS, Finding, Report, comparison_phrase
from roteiro_py.report.plain import dependency_line, fix_text

#: Findings listed by the summary; the github format's note past its limit says so.
MAX_FINDINGS = 50
#: Lints listed with their counts (the most frequent first).
MAX_LINTS = 50
#: Characters of one guest string shown.
FIELD_CHARS = 300
#: Characters of one finding's suggestions shown (its fixes together); the rest is cut
#: with a mark. 50 findings with this much is 100 KB.
SUGGESTION_CHARS = 2000
#: Bytes GitHub accepts in one step's summary file.
STEP_SUMMARY_LIMIT = 1024 * 1024

_RANK = {level: rank for rank, level in enumerate(LEVELS)}
_BACKTICKS = re.compile(r"`+")


def code(text: str, limit: int = FIELD_CHARS) -> str:
    """`text` as one inline code span that nothing in it can end (see the docstring)."""
    flat = " ".join(text.split())
    if len(flat) > limit:
        flat = flat[: limit - 1] + "…"
    if not flat:
        return "(empty)"
    fence = "`" * (max((len(run) for run in _BACKTICKS.findall(flat)), default=0) + 1)
    # One space inside each fence: CommonMark strips exactly one from each side, so a
    # text that starts or ends with a backtick is shown as it is.
    return f"{fence} {flat} {fence}"


def block(text: str, indent: str = "  ") -> list[str]:
    """`text` as a fenced code block whose lines are indented by `indent` (see the
    docstring): a fence of backticks longer than any run in it, at least three."""
    fence = "`" * max(3, max((len(run) for run in _BACKTICKS.findall(text)), default=0) + 1)
    return [indent + fence, *(indent + line for line in text.split("\n")), indent + fence]


def _heading(report: Report) -> str:
    """The headline: the findings counted, and, when they were judged against a baseline
    or a diff, how many are new (they gate the run) and how many known (in the baseline,
    or outside the diff)."""
    summary = report.summary
    counts = ", ".join(counted(summary.counts.get(level, 0), level) for level in LEVELS
                       if summary.counts.get(level, 0))
    build = "build succeeded" if summary.build_succeeded else "**build FAILED**"
    findings = counted(summary.total, "finding") + (f" ({counts})" if counts else "")
    compared = report.comparison
    if compared is None:
        return f"### clippy: {findings}; {build}"
    new = sum(finding.gating for finding in report.findings)
    nothing_added = "; this change adds no lines" if compared.diff is not None and not compared.diff_files else ""
    return f"### clippy: {new} new, {summary.total - new} known of {findings}{nothing_added}; {build}"


def _provenance(report: Report) -> list[str]:
    image, toolchain = report.provenance, report.toolchain
    lines = [f"Linted in {code(image.image_reference)} (manifest {code(image.image_digest)})"
             + (f", chosen by {code(image.image_chosen_in)}" if image.image_chosen_in else "")
             + f", with clippy {code(toolchain.clippy_version)}, rustc "
             f"{code(toolchain.rustc_release)} ({code(toolchain.host)}); isolation: "
             f"{code(report.isolation.description)}."]
    if report.dependency_cache is not None:
        lines.append(f"Dependencies: {code(dependency_line(report))}.")
    return lines


def _suggestions(finding: Finding) -> str | None:
    """The finding's suggestions as the github format shows them, within SUGGESTION_CHARS;
    for a report written before `fixes`, its first replacement."""
    if finding.fixes:
        text = "\n".join(fix_text(fix) for fix in finding.fixes)
    elif finding.suggestion is not None:
        text = f"suggestion:\n{finding.suggestion.removesuffix(chr(10))}"
    else:
        return None
    return text if len(text) <= SUGGESTION_CHARS else text[: SUGGESTION_CHARS - 1] + "…"


def _finding(finding: Finding, release: str, links: str | None) -> list[str]:
    where = "(no location)"
    if finding.path is not None:
        where = code(f"{finding.path}:{finding.line}:{finding.column}" if finding.line
                     else finding.path)
        if links is not None:
            where = f"[{where}]({blob_url(links, finding.path, finding.line)})"
    name = code(finding.code or f"rustc {finding.level}")
    line = f"- **{finding.level}** {name} at {where}: {code(finding.message)}"
    if finding.label:
        line += f" ({code(finding.label)})"
    # rustc's first help is usually a suggestion's own message, shown with its code below
    if finding.help and all(fix.message != finding.help for fix in finding.fixes):
        line += f"; help: {code(finding.help)}"
    url = doc_url(finding.code, release)
    if url is not None:
        line += f" ([docs]({url}))"
    suggestions = _suggestions(finding)
    if suggestions is None:
        return [line]
    return [line, "", *block(suggestions)]


def listed_as(report: Report) -> str:
    """What the summary lists, in comparison_phrase's words ("New findings in the diff");
    the github format's overflow line names them the same way."""
    compared = report.comparison
    if compared is None:
        return "Findings"
    if compared.baseline is not None:
        return "New findings" + (" in the diff" if compared.diff is not None else "")
    return "Findings in the diff"


#: Stand-ins for the file names in comparison_phrase, replaced by their code spans: no
#: phrase of ours or count holds a NUL, and a name cannot (the model cleans it).
_NAMES = ("\0baseline\0", "\0diff\0")


def _comparison(report: Report) -> list[str]:
    """comparison_phrase's line with the baseline's and the diff's names as code spans."""
    compared = report.comparison
    if compared is None:
        return []
    stand_in = compared.model_copy(update={
        "baseline": _NAMES[0] if compared.baseline is not None else None,
        "diff": _NAMES[1] if compared.diff is not None else None})
    phrase = comparison_phrase(report.model_copy(update={"comparison": stand_in}), "not listed")
    if phrase is None:
        return []
    for stand, name in zip(_NAMES, (compared.baseline, compared.diff), strict=True):
        if name is not None:
            phrase = phrase.replace(stand, code(name))
    return [phrase + ".", ""]


def render_markdown(report: Report, *, with_findings: bool = True, links: str | None = None) -> str:
    """The summary; without `with_findings`, only the counts and the provenance (what
    the writer falls back to when the step's summary has no room for more). `links`:
    report/links.py `blob_base`, where each listed finding's file is linked; None: no link.
    The table lists the levels that have findings (none when no level has)."""
    summary = report.summary
    out = [_heading(report), ""]
    levels = [level for level in LEVELS if summary.counts.get(level, 0)]
    if levels:
        out += ["| level | findings |", "|---|---:|"]
        out += [f"| {level} | {summary.counts[level]} |" for level in levels]
        out.append("")
    notes = []
    if summary.outside_repository:
        notes.append(f"{summary.outside_repository} outside the repository, not reported")
    if summary.dropped_findings:
        notes.append(f"**{summary.dropped_findings} more past the cap of a report, not shown**")
    if notes:
        out += ["; ".join(notes) + ".", ""]
    by_lint = Counter(finding.code or f"rustc {finding.level}" for finding in report.findings)
    if by_lint and with_findings:
        ranked = sorted(by_lint.items(), key=lambda item: (-item[1], item[0]))
        out.append(f"**By lint** ({counted(len(ranked), 'lint')}"
                   + (f", the {MAX_LINTS} most frequent shown" if len(ranked) > MAX_LINTS else "")
                   + "):")
        out.append("")
        out += [f"- {code(name)}: {count}" for name, count in ranked[:MAX_LINTS]]
        out.append("")
    gating = [finding for finding in report.findings if finding.gating]
    if gating and with_findings:
        ordered = sorted(gating, key=lambda f: (_RANK[f.level], f.path or "", f.line or 0, f.column or 0))
        shown = ordered[:MAX_FINDINGS]
        which = (f"all {len(ordered)}" if len(shown) == len(ordered)
                 else f"the first {len(shown)} of {len(ordered)}")
        out.append(f"**{listed_as(report)}** ({which}, errors first; the JSON and SARIF reports have "
                   "every one):")
        out.append("")
        for finding in shown:
            out += _finding(finding, report.toolchain.rustc_release, links)
        out.append("")
    elif report.findings and with_findings:
        out += [f"**{listed_as(report)}**: none.", ""]
    elif report.findings:
        out += ["The findings are not listed: this step's summary has no room for them "
                "(the JSON and SARIF reports have every one).", ""]
    out += _comparison(report)
    out += _provenance(report)
    return "\n".join(out) + "\n"
