"""A report as GitHub pull-request reviews: what `pylint-sandbox review` posts (issue 23 §3).

Pure: this builds the request bodies of `POST /repos/{owner}/{repo}/pulls/{n}/reviews`
and sends nothing (commands/review.py posts them). What it guarantees:

- A comment lands only on lines the pull request's diff adds (`Placement`): GitHub
  answers 422 for a line outside the diff, and one bad comment fails the whole review.
  A finding that cannot be placed is listed in the review's body instead (at most
  MAX_LISTED of them, the rest counted).
- A machine-applicable suggestion becomes a ```suggestion block, which GitHub applies by
  replacing the commented lines whole. So the block holds the new text of exactly the
  lines start..end its edits touch, computed here from the file's current bytes (read
  through the one reader by the caller) and the edits' spans: a span past the file's
  end or its line, edits that overlap or reach another file, lines that differ from what
  the lint saw (`Fix.before`), text the sanitiser would change, or more than
  MAX_SUGGESTION_LINES lines give no block (the finding is still commented, and the
  reason is said). Never a block that would write something the fix does not. A line
  rustc removes whole (a span to column 1 of the next line) is GitHub's deletion, an
  empty block on that line alone.
- Guest text (message, code, label, help) is shown only inside a fenced code block whose
  fence is longer than any run of backticks in it, so it can neither close the fence nor
  be read as Markdown or HTML: no `@user` mention, no `#123` link, no image, no tag. The
  suggestion's fence is chosen the same way. The only other text is ours, and a doc link
  from report/links.py (built only from a lint name).
- Every comment and body carries its finding's fingerprint (report/fingerprint.py) in a
  hidden `<!-- pylint-sandbox:FINGERPRINT -->`; a finding whose fingerprint is in
  `posted` (read back from the pull request's comments and reviews) is not posted again,
  so a re-run after a push repeats nothing.
- No cap of ten: every placeable finding that gates the run is commented, in reviews of
  at most MAX_COMMENTS_PER_REVIEW comments each; every body within BODY_LIMIT.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from roteiro_py.report.fingerprint import fingerprints
from roteiro_py.report.links import doc_url
from roteiro_py.report.model import Edit, Finding, Fix, Report, comparison_phrase
from roteiro_py.report.safe import clean, is_clean

#: Characters GitHub takes in a review's body or a comment's body.
BODY_LIMIT = 65_536
#: Comments sent in one review; more findings make more reviews, each this size at most
#: (one request stays small enough that a 422 names few comments).
MAX_COMMENTS_PER_REVIEW = 50
#: Findings listed in a review's body when they could not be commented on a line.
MAX_LISTED = 50
#: The most lines a suggestion block replaces, and the most characters it holds (its
#: fences included, which are as long as its longest run of backticks).
MAX_SUGGESTION_LINES = 50
MAX_SUGGESTION_CHARS = 20_000
#: Characters of one listed finding's line in a body.
_LISTED_CHARS = 300
#: Characters of guest text in one comment (message, label and help together).
_TEXT_CHARS = 8_000

MARKER_PREFIX = "<!-- pylint-sandbox:"
_MARKER = re.compile(r"<!-- pylint-sandbox:([0-9a-f]{64}) -->")
_BACKTICKS = re.compile(r"`+")


def marker(fingerprint: str) -> str:
    return f"{MARKER_PREFIX}{fingerprint} -->"


#: A line that opens a fenced code block (CommonMark: three or more backticks, up to three
#: spaces before them, an info string with no backtick).
_OPENING = re.compile(r" {0,3}(`{3,})[^`]*")


def markers_in(body: str) -> set[str]:
    """The fingerprints of the markers in a comment's or a review's body, outside its
    fenced code blocks. Inside them is guest text (a message, a label, a suggestion's
    lines: the tree chooses them), and a marker quoted there would keep the finding it
    names from ever being commented. Ours are never fenced; every guest text is (`fenced`),
    with a fence no line of it can close, which is also how this reads the fences."""
    found: set[str] = set()
    fence: str | None = None
    for line in body.splitlines():
        if fence is None:
            opening = _OPENING.fullmatch(line)
            if opening is not None:
                fence = opening.group(1)
            else:
                found.update(_MARKER.findall(line))
        elif line.strip(" ") and set(line.strip(" ")) == {"`"} and len(line.strip(" ")) >= len(fence):
            fence = None
    return found


def fenced(text: str, info: str = "text") -> str:
    """`text` in a fenced code block no line of it can close: the fence is one backtick
    longer than its longest run of backticks (CommonMark closes a fence only with at
    least as many). Inside it GitHub renders nothing: no mention, no link, no HTML."""
    longest = max((len(run) for run in _BACKTICKS.findall(text)), default=0)
    fence = "`" * max(3, longest + 1)
    return f"{fence}{info}\n{text}\n{fence}"


@dataclass(frozen=True)
class Suggestion:
    """The new text of lines start..end of `path` (no final newline), or why there is none."""

    start: int
    end: int
    text: str
    #: The lines are removed (GitHub's empty suggestion), not replaced by an empty line.
    deletes: bool = False

    def block(self) -> str:
        return "```suggestion\n```" if self.deletes else fenced(self.text, "suggestion")


@dataclass(frozen=True)
class Comment:
    fingerprint: str
    path: str
    start: int
    end: int
    body: str

    def payload(self) -> dict[str, Any]:
        """The comment as the reviews API takes it: the new side of the diff (RIGHT)."""
        data: dict[str, Any] = {"path": self.path, "line": self.end, "side": "RIGHT", "body": self.body}
        if self.start < self.end:
            data.update(start_line=self.start, start_side="RIGHT")
        return data


@dataclass
class ReviewPlan:
    """What to post: `reviews` are request bodies, in order; `notes` say what was left
    out of a comment and why (shown to the user); `unplaced` the findings listed, not
    commented; `already` how many were posted by an earlier run."""

    reviews: list[dict[str, Any]] = field(default_factory=list)
    comments: list[Comment] = field(default_factory=list)
    unplaced: list[Finding] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    already: int = 0


#: Whether lines first..last of a path may carry a comment (every one in the diff).
Placement = Callable[[str, int, int], bool]
#: The current bytes of a file of the tree by its repository path, or None (unreadable).
Source = Callable[[str], bytes | None]


def _span_lines(finding: Finding) -> tuple[int, int] | None:
    if finding.path is None or finding.line is None:
        return None
    return finding.line, max(finding.end_line or finding.line, finding.line)


def _offset(lines: Sequence[str], first: int, line: int, column: int) -> int | None:
    """The code-point offset of (line, column) in the block lines[first-1:], each line
    with its newline; None when the column is past the line's end (its newline counts)."""
    index = line - 1
    if index >= len(lines):
        return None
    if column - 1 > len(lines[index]):
        return None
    return sum(len(text) for text in lines[first - 1:index]) + column - 1


def suggestion_of(fix: Fix, path: str, data: bytes | None) -> Suggestion | str:
    """The suggestion block `fix` makes of `path` (whose current bytes are `data`), or
    the reason there is none (see the module docstring)."""
    if fix.applicability != "MachineApplicable":
        return "rustc does not call it machine-applicable"
    if not fix.edits or any(edit.path != path for edit in fix.edits):
        return "it edits another file"
    if data is None:
        return "the file could not be read"
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return "the file is not UTF-8"
    lines = text.splitlines(keepends=True)
    edits: list[Edit] = sorted(fix.edits, key=lambda edit: (edit.line, edit.column))
    first, last = edits[0].line, max(edit.end_line for edit in edits)
    if last > len(lines):
        return "its span is past the file's end"
    if last - first + 1 > MAX_SUGGESTION_LINES:
        return f"it replaces more than {MAX_SUGGESTION_LINES} lines"
    block = "".join(lines[first - 1:last])
    if fix.before is not None and fix.line == first and \
            block.removesuffix("\n").removesuffix("\r") != fix.before:
        return "the file changed since the lint"
    pieces: list[str] = []
    position = 0
    for edit in edits:
        start = _offset(lines, first, edit.line, edit.column)
        end = _offset(lines, first, edit.end_line, edit.end_column)
        if start is None or end is None:
            return "its span is past the end of its line"
        if start < position:
            return "its edits overlap"
        pieces += [block[position:start], edit.replacement]
        position = end
    pieces.append(block[position:])
    new = "".join(pieces)
    # the block, fences counted: a fence is as long as the text's longest run of backticks,
    # so a line of them (a string literal of the tree) would triple its cost in the body
    if len(fenced(new, "suggestion")) > MAX_SUGGESTION_CHARS:
        return f"it is longer than {MAX_SUGGESTION_CHARS} characters (its block's fences counted)"
    if not is_clean(new, keep_newlines=True, keep_tabs=True) or "\r" in block:
        return "its text holds characters a review cannot show exactly"
    # A span that ends at column 1 of its last line (rustc's whole-line removal, as of an
    # unused import) leaves that line as it was: the block stops before it, so the comment
    # needs only the lines that change, and removing them whole is GitHub's deletion.
    kept = lines[last - 1]
    if last > first and all(edit.line < last for edit in edits) and new.endswith(kept):
        head = new[:len(new) - len(kept)]
        if head == "":
            return Suggestion(first, last - 1, "", deletes=True)
        if head.endswith("\n"):
            return Suggestion(first, last - 1, head[:-1])
    # GitHub replaces the lines with the block's text and ends it with a newline itself.
    return Suggestion(first, last, new[:-1] if new.endswith("\n") and block.endswith("\n") else new)


def _text_of(finding: Finding) -> str:
    """The finding's guest text, as one block (the message, the label, rustc's help)."""
    parts = [f"{finding.level}" + (f"[{finding.code}]" if finding.code else "") + f": {finding.message}"]
    if finding.label:
        parts.append(finding.label)
    if finding.help and all(fix.message != finding.help for fix in finding.fixes):
        parts.append(f"help: {finding.help}")
    return clean("\n".join(parts), keep_newlines=True, limit=_TEXT_CHARS)


def comment_body(finding: Finding, fingerprint: str, rustc_release: str,
                 suggestion: Suggestion | None, fix: Fix | None, why_not: str | None) -> str:
    """One finding's comment: the marker, the guest text fenced, the doc link (built from
    a lint name only), and the suggestion block or why there is none."""
    lines = [marker(fingerprint), f"**pylint-sandbox** (clippy, in a microVM): {finding.level}",
             fenced(_text_of(finding))]
    url = doc_url(finding.code, rustc_release)
    if url is not None:
        lines.append(f"[Documentation of this lint](<{url}>)")
    if suggestion is not None and fix is not None:
        # The code comes from the build in the VM, which the branch under review ran: a
        # build script can forge clippy's JSON, so the block is labelled as what it is.
        lines.append("Suggested change (machine-applicable, as `cargo clippy --fix` would write it; "
                     "made by a build of this branch in the sandbox: read it before committing it):")
        lines.append(fenced(clean(fix.message, keep_newlines=True, limit=500)))
        lines.append(suggestion.block())
    elif why_not is not None:
        lines.append(f"No suggested change: the fix's {why_not}.")
    body = "\n\n".join(lines)
    assert len(body) <= BODY_LIMIT  # noqa: S101  # _TEXT_CHARS + MAX_SUGGESTION_CHARS + ours
    return body


def _placed(finding: Finding, placement: Placement) -> tuple[int, int] | None:
    """The lines a comment on `finding` covers: its whole span when the diff adds every
    line of it, else the first line of it the diff adds; None when it adds none."""
    span = _span_lines(finding)
    if span is None or finding.path is None:
        return None
    first, last = span
    if placement(finding.path, first, last):
        return first, last
    for line in range(first, min(last, first + MAX_SUGGESTION_LINES) + 1):
        if placement(finding.path, line, line):
            return line, line
    return None


def _comment(finding: Finding, fingerprint: str, release: str, placement: Placement,
             source: Source) -> tuple[Comment | None, str | None]:
    lines = _placed(finding, placement)
    if lines is None or finding.path is None:
        return None, None
    suggestion: Suggestion | None = None
    why: str | None = None
    chosen: Fix | None = None
    for fix in finding.fixes:
        if fix.applicability != "MachineApplicable":
            continue
        made = suggestion_of(fix, finding.path, source(finding.path))
        if isinstance(made, str):
            why = why or made
            continue
        if not placement(finding.path, made.start, made.end):
            why = why or "lines are not all in the pull request's diff"
            continue
        suggestion, chosen, why = made, fix, None
        break
    start, end = (suggestion.start, suggestion.end) if suggestion is not None else lines
    body = comment_body(finding, fingerprint, release, suggestion, chosen, why)
    note = None if why is None else f"{finding.path}:{finding.line}: no suggested change: the fix's {why}"
    return Comment(fingerprint, finding.path, start, end, body), note


def _listed(finding: Finding) -> str:
    where = f"{finding.path}:{finding.line}" if finding.path and finding.line else (finding.path or "(no file)")
    head = _text_of(finding).split("\n", 1)[0]
    return clean(f"{where}: {head}", limit=_LISTED_CHARS)


def _body(report: Report, part: int, parts: int, comments: int, listed: Sequence[tuple[str, Finding]],
          more: int, already: int) -> str:
    summary = report.summary
    lines = [f"**pylint-sandbox**: clippy found {summary.total} finding{'s' if summary.total != 1 else ''} "
             f"(build {'succeeded' if summary.build_succeeded else 'failed'})."]
    if parts > 1:
        lines.append(f"Review {part} of {parts}: GitHub's reviews are posted "
                     f"{MAX_COMMENTS_PER_REVIEW} comments at a time; this one has {comments}.")
    if already and part == 1:
        lines.append(f"{already} finding{'s were' if already != 1 else ' was'} commented on by an earlier run "
                     "and not repeated.")
    if listed:
        lines.append("Findings not on a line this pull request adds (GitHub comments only on its diff):")
        lines.append(fenced("\n".join(_listed(finding) for _, finding in listed)))
        lines.append("".join(marker(fingerprint) for fingerprint, _ in listed))
    if more:
        lines.append(f"{more} more not listed here; `--format json` or `sarif` has every one.")
    compared = comparison_phrase(report, "not reviewed") if part == 1 else None
    if compared is not None:
        # it names the baseline's and the diff's files, which the workflow chose: fenced
        lines.append("Compared with the baseline or the diff, only findings that gate the run are "
                     "reviewed:\n\n" + fenced(compared))
    body = "\n\n".join(lines)
    assert len(body) <= BODY_LIMIT  # noqa: S101  # MAX_LISTED x (_LISTED_CHARS + marker) + ours
    return body


def plan_reviews(report: Report, *, commit_id: str, placement: Placement, source: Source,
                 posted: Iterable[str] = ()) -> ReviewPlan:
    """The reviews that post `report`'s findings which gate the run (report/model.py
    `gating`: not known from a baseline, not outside the diff), and list the rest of them
    that cannot be placed on a line; none already in `posted`. Empty when there is
    nothing new."""
    seen = set(posted)
    plan = ReviewPlan()
    release = report.toolchain.rustc_release
    listed: list[tuple[str, Finding]] = []
    for finding, fingerprint in zip(report.findings, fingerprints(report.findings), strict=True):
        if not finding.gating:
            continue
        if fingerprint in seen:
            plan.already += 1
            continue
        comment, note = _comment(finding, fingerprint, release, placement, source)
        if comment is None:
            plan.unplaced.append(finding)
            listed.append((fingerprint, finding))
            continue
        plan.comments.append(comment)
        if note is not None:
            plan.notes.append(note)
    shown, more = listed[:MAX_LISTED], max(len(listed) - MAX_LISTED, 0)
    batches = [plan.comments[i:i + MAX_COMMENTS_PER_REVIEW]
               for i in range(0, len(plan.comments), MAX_COMMENTS_PER_REVIEW)] or ([[]] if shown else [])
    for part, batch in enumerate(batches, start=1):
        first = part == 1
        plan.reviews.append({
            "commit_id": commit_id,
            "event": "COMMENT",
            "body": _body(report, part, len(batches), len(batch), shown if first else (),
                          more if first else 0, plan.already),
            "comments": [comment.payload() for comment in batch],
        })
    return plan
