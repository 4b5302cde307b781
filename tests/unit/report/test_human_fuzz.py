"""The terminal report's cargo layout (`_marks`, `_source`) draws from guest numbers.

Every line, column and label of a finding is the guest's (clippy/parse.py keeps positions
up to 10,000,000) or a saved report's (`render`: any size the model takes). Drawn as a run
of `_` or `^` as long as the number says, one finding of a multi-line span ending at
column 10,000,000 was 10 MB of terminal output (x 10,000 findings: 100 GB), and one ending
at column 10**18 was a MemoryError, an internal error (exit 4) instead of a report. The
property: whatever the numbers, the text of a finding is bounded by the text it shows
(its snippet, message, labels), never by a position.
"""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from realcargo import make_report

from roteiro_py.report import render
from roteiro_py.report.model import Finding

#: Positions as the guest can send them, and as a saved report can carry them.
POSITIONS = st.one_of(st.integers(1, 6), st.integers(1, 10_000_000), st.just(10**18))
#: Guest text rich in what the layout draws with.
TEXTS = st.text(alphabet="ab \t`|^_-\n", max_size=30)
#: A snippet: free text, or a few short lines (the multi-line span's shape).
SNIPPETS = st.none() | TEXTS | st.lists(st.text(alphabet="ab}\t", max_size=6), min_size=2,
                                         max_size=4).map("\n".join)
#: Characters one finding of the fields above may take (header, gutter, marks, labels).
PER_FINDING = 8_000


@st.composite
def findings(draw: st.DrawFn) -> Finding:
    line = draw(POSITIONS)
    end_line = line + draw(st.sampled_from([0, 0, 1, 2, 1_000_000]))
    column, end_column = draw(POSITIONS), draw(POSITIONS)
    if end_line == line:
        end_column = max(column, end_column)
    related = [{"path": "src/lib.rs", "line": line + shift, "column": start,
                "end_line": line + shift, "end_column": max(start, end), "message": message}
               for start, end, message, shift in draw(st.lists(st.tuples(
                   POSITIONS, POSITIONS, st.none() | TEXTS, st.sampled_from([0, 0, 1])), max_size=10))]
    fixes: list[dict[str, Any]] = []
    for _ in range(draw(st.integers(0, 2))):
        last = line + draw(st.sampled_from([0, 0, 1]))
        fixes.append({"message": draw(TEXTS), "applicability": "MachineApplicable",
                      "inline": draw(st.booleans()),
                      "edits": [{"path": "src/lib.rs", "line": line, "column": column, "end_line": last,
                                 "end_column": max(column, end_column) if last == line else draw(POSITIONS),
                                 "replacement": draw(TEXTS)}],
                      "line": draw(st.none() | st.just(line)),
                      "before": draw(st.none() | TEXTS), "after": draw(st.none() | TEXTS)})
    return Finding.model_validate({
        "level": "warning", "code": None, "message": draw(TEXTS) or "m", "path": "src/lib.rs",
        "line": line, "column": column, "end_line": end_line, "end_column": end_column,
        "snippet": draw(SNIPPETS), "label": draw(st.none() | TEXTS), "help": None,
        "suggestion": None, "related": related, "fixes": fixes})


def test_control_the_strategy_reaches_the_multi_line_mark() -> None:
    # the case that blew up, drawn by hand: a span over two shown lines, its end column huge
    finding = Finding.model_validate({
        "level": "warning", "code": None, "message": "m", "path": "src/lib.rs", "line": 1,
        "column": 1, "end_line": 2, "end_column": 10_000_000, "snippet": "fn a() {\n}\n",
        "label": "here", "help": None, "suggestion": None})
    text = render(make_report([finding]), "human")
    assert len(text) < PER_FINDING, len(text)
    # the closing mark stops one past its line's end (`}`: 1 wide), as a column just past
    # the newline draws it (control: the mark is drawn, and a real column draws the same)
    assert "|__^ here" in text
    assert "|__^ here" in render(make_report([finding.model_copy(update={"end_column": 3})]), "human")


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(st.lists(findings(), min_size=1, max_size=3))
def test_a_findings_text_is_bounded_whatever_its_positions(drawn: list[Finding]) -> None:
    text = render(make_report(drawn), "human")  # no exception: an exception is exit 4
    assert len(text) < PER_FINDING * len(drawn) + 2_000, len(text)
