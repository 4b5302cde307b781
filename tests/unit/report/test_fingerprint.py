"""A finding's fingerprint: the same while lines move and blocks are re-indented, different
when what the finding is about differs, and unique within a report."""

from __future__ import annotations

import hashlib
import json

from realcargo import DATA

from roteiro_py.report import Finding, Report
from roteiro_py.report.fingerprint import RECIPE, finding_fingerprint, fingerprints, span_text

SAVED = DATA / "reports" / "demo-before-baseline.json"


def finding(**extra: object) -> Finding:
    fields: dict[str, object] = {
        "code": "clippy::needless_return", "level": "warning", "message": "unneeded `return` statement",
        "path": "src/lib.rs", "line": 5, "column": 5, "end_line": 5, "end_column": 17,
        "snippet": "    return x * 2;"}
    return Finding.model_validate({**fields, **extra})


def test_lines_inserted_above_or_a_reindented_block_keep_the_fingerprint() -> None:
    base = finding_fingerprint(finding())
    assert finding_fingerprint(finding(line=50, end_line=50)) == base
    assert finding_fingerprint(finding(column=9, end_column=21, snippet="        return x * 2;")) == base
    assert finding_fingerprint(finding(level="error")) == base  # -D warnings: the same finding
    assert finding_fingerprint(finding(message="unneeded  `return`\nstatement ")) == base
    assert len(base) == 64 and int(base, 16) >= 0


def test_what_the_finding_is_about_changes_it() -> None:
    """Control arm of the test above: each input of the recipe does count."""
    base = finding_fingerprint(finding())
    others = [finding(code="clippy::let_and_return"), finding(code=None),
              finding(path="src/main.rs"), finding(message="unneeded `return` statements"),
              finding(snippet="    return x * 3;"), finding(snippet=None)]
    prints = {finding_fingerprint(other) for other in others}
    assert base not in prints and len(prints) == len(others)
    assert finding_fingerprint(finding(), 1) != base
    assert finding_fingerprint(finding(), path="src/new.rs") == finding_fingerprint(finding(path="src/new.rs"))


def test_the_span_text_is_cut_by_columns_and_bounded_by_the_snippet() -> None:
    assert span_text(finding()) == "return x * 2"  # end_column is exclusive
    multi = finding(line=3, end_line=5, column=10, end_column=3, snippet="fn a() { if x {\n  y\n}) z")
    assert span_text(multi) == "if x {\n  y\n})"
    # the snippet holds at most five lines: a longer span keeps what it has
    long = finding(line=1, end_line=9, column=1, end_column=2, snippet="a\nb\nc\nd\ne")
    assert span_text(long) == "a\nb\nc\nd\ne"
    assert span_text(finding(snippet=None)) == ""
    assert span_text(finding(path=None, line=None, column=None, end_line=None, end_column=None)) == ""


def test_identical_findings_get_occurrences_in_position_order_and_unique_fingerprints() -> None:
    first, second = finding(line=5, end_line=5), finding(line=40, end_line=40)
    prints = fingerprints([second, first])  # listed out of order
    assert prints == [finding_fingerprint(second, 1), finding_fingerprint(first, 0)]
    assert len(set(prints)) == 2
    # a different file is its own count: both are occurrence 0
    other = finding(path="src/other.rs")
    assert fingerprints([first, other]) == [finding_fingerprint(first), finding_fingerprint(other)]


def test_a_renamed_path_is_fingerprinted_under_its_new_name() -> None:
    old, new = finding(path="src/old.rs"), finding(path="src/new.rs")
    assert fingerprints([old], renamed={"src/old.rs": "src/new.rs"}) == fingerprints([new])
    assert fingerprints([old]) != fingerprints([new])  # control: without the rename they differ
    spanless = finding(path=None, line=None, column=None, end_line=None, end_column=None)
    assert fingerprints([spanless], renamed={"src/old.rs": "x"}) == [finding_fingerprint(spanless)]


def test_the_recipe_is_pinned_by_a_saved_report() -> None:
    """A baseline saved today must match tomorrow: a change to what goes into a
    fingerprint changes RECIPE, and this test, on purpose."""
    report = Report.model_validate_json(SAVED.read_bytes())
    assert RECIPE == "pylint-sandbox/finding-fingerprint/1"
    assert fingerprints(report.findings)[0] == PINNED_NEEDLESS_RETURN
    # the module docstring's recipe, restated: sha256 of the JSON list of its fields
    by_hand = json.dumps([RECIPE, "clippy::needless_return", "rust/crates/demo-core/src/lib.rs",
                          "unneeded `return` statement", "return x * 2", 0])
    assert hashlib.sha256(by_hand.encode()).hexdigest() == PINNED_NEEDLESS_RETURN


PINNED_NEEDLESS_RETURN = "c98139b723621779d884a42740c245210a1363d00c236bb4d994e2e8624a1db3"


def test_a_span_that_ends_before_it_starts_is_no_finding_a_file_can_hold() -> None:
    """A saved report or a baseline is read through the model: a finding whose end comes
    before its start crashed the fingerprint (IndexError, exit 4 from `render` and
    `--baseline`); the model refuses it, and every consumer can rely on the order."""
    import pytest
    from pydantic import ValidationError

    from roteiro_py.report.model import MAX_FINDINGS, MAX_FIXES, Edit, Fix, Location

    good = finding(snippet="a\nb")
    for bad in ({"end_line": good.line - 1},
                {"end_line": good.line, "end_column": good.column - 1}):
        with pytest.raises(ValidationError, match="ends before it starts"):
            Finding.model_validate({**good.model_dump(), **bad})
    with pytest.raises(ValidationError, match="ends before it starts"):
        Location(path="a.rs", line=3, column=1, end_line=2, end_column=1)
    with pytest.raises(ValidationError, match="ends before it starts"):
        Edit(path="a.rs", line=3, column=5, end_line=3, end_column=4, replacement="")
    assert span_text(good) is not None  # control: the ordered one is taken
    edit = Edit(path="a.rs", line=3, column=5, end_line=3, end_column=5, replacement="x")
    with pytest.raises(ValidationError):
        Finding.model_validate({**good.model_dump(), "fixes": [Fix(message="m", edits=[edit])] * (MAX_FIXES + 1)})
    report = json.loads((DATA / "reports" / "demo-before-baseline.json").read_text())
    Report.model_validate(report)  # control
    report["findings"] = report["findings"][:1] * (MAX_FINDINGS + 1)
    with pytest.raises(ValidationError):
        Report.model_validate(report)
