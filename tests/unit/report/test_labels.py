"""Every label rustc gives is kept (issue 23), checked against what cargo 1.95 printed.

tests/data/cargo-labels/clippy.jsonl is cargo's own JSON for a type mismatch (E0308: the
primary label "expected `u32`, found `&str`", the secondary "expected due to this"), a
clippy warning with a suggestion and a note, and a rustc warning whose label is a
suggestion; rendered.txt is the text cargo printed for a person (capture.py). Before this
the primary label and the `rustc --explain` line were dropped: in the terminal, in JSON
and in SARIF. Every label is guest text: cleaned, capped in length (MAX_LABEL_CHARS) and
in number (MAX_RELATED), whatever the guest sends.
"""

from __future__ import annotations

import json
import re
import shutil
import time
from pathlib import Path, PurePosixPath

import jsonschema  # type: ignore[import-untyped]
import pytest
from realcargo import DATA, copy_crate, make_report, run_clippy, staged_copy

from roteiro_py.clippy.parse import MAX_LINE_BYTES, PathLayout, parse_messages
from roteiro_py.report import FORMATS, Finding, Report, render
from roteiro_py.report.github import PROVENANCE_PREFIX
from roteiro_py.report.load import load_report
from roteiro_py.report.model import MAX_LABEL_CHARS, MAX_RELATED

CRATE = DATA / "cargo-labels"
CAPTURED = (CRATE / "clippy.jsonl").read_bytes()
RENDERED = (CRATE / "rendered.txt").read_text()
LAYOUT = PathLayout(guest_root=PurePosixPath("/guest/repo"))
PRIMARY = "expected `u32`, found `&str`"
SECONDARY = "expected due to this"
EXPLAIN = "For more information about this error, try `rustc --explain E0308`."
SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())
#: As test_hostile.py: anything a terminal or the runner could act on.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                    r"\u2060-\u206f\ufeff\ufff9-\ufffb]")


@pytest.fixture(scope="module")
def report() -> Report:
    parsed = parse_messages(CAPTURED, LAYOUT, staged=staged_copy(CRATE))
    assert parsed.build_success is False
    return make_report(parsed.findings, build_succeeded=False)


def by_code(report: Report, code: str) -> Finding:
    return next(finding for finding in report.findings if finding.code == code)


def test_the_fixture_is_what_cargo_printed() -> None:
    """Control: cargo itself shows both labels and the explain line."""
    assert f"^^^ {PRIMARY}" in RENDERED and SECONDARY in RENDERED and EXPLAIN in RENDERED


def test_the_primary_label_and_the_secondary_are_kept(report: Report) -> None:
    mismatch = by_code(report, "E0308")
    assert (mismatch.path, mismatch.line, mismatch.column) == ("src/main.rs", 2, 18)
    assert mismatch.label == PRIMARY
    (related,) = mismatch.related
    assert (related.line, related.column, related.message) == (2, 12, SECONDARY)
    assert by_code(report, "clippy::needless_return").label is None  # rustc gave it none
    # cargo shows this one's suggestion where a label goes; it is a suggestion, kept as one
    unused = by_code(report, "unused_variables")
    assert unused.label is None and unused.fixes[0].after == "    let _unused = 3;"


def _caret_line(text: str, label: str) -> str:
    return next(line for line in text.splitlines() if line.rstrip().endswith(f"^^^ {label}"))


def test_the_human_report_shows_the_label_under_the_span_as_cargo_does(report: Report) -> None:
    text = render(report, "human")
    ours, cargo = _caret_line(text, PRIMARY), _caret_line(RENDERED, PRIMARY)
    assert ours.index("^^^") == cargo.index("^^^")  # under the same column, same gutter
    assert SECONDARY in text


def test_the_explain_line_is_shown_once_as_cargo_prints_it(report: Report) -> None:
    text = render(report, "human")
    assert text.count(EXPLAIN) == 1 and RENDERED.count(EXPLAIN) == 1
    assert text.index(EXPLAIN) > text.index(PRIMARY)  # after the diagnostics, as cargo
    # rustc's form for several codes, sorted, the first one named
    twice = report.model_copy(update={"findings": [
        *report.findings, by_code(report, "E0308").model_copy(update={"code": "E0277", "line": 3})]})
    text = render(twice, "human")
    assert "Some errors have detailed explanations: E0277, E0308." in text
    assert text.count("For more information about an error, try `rustc --explain E0277`.") == 1
    assert EXPLAIN not in text
    # control: no error code, no explain line (lints have none)
    lints = report.model_copy(update={"findings": [f for f in report.findings if f.code != "E0308"]})
    assert "rustc --explain" not in render(lints, "human")


def test_json_keeps_the_labels_and_reads_them_back(report: Report, tmp_path: Path) -> None:
    saved = tmp_path / "report.json"
    saved.write_text(render(report, "json"))
    data = json.loads(saved.read_text())
    assert next(f for f in data["findings"] if f["code"] == "E0308")["label"] == PRIMARY
    loaded = load_report(saved)
    assert loaded == report and by_code(loaded, "E0308").label == PRIMARY


def test_a_report_saved_before_labels_still_loads() -> None:
    saved = DATA / "reports" / "demo-before-baseline.json"
    assert all("label" not in f for f in json.loads(saved.read_text())["findings"])  # control
    loaded = load_report(saved)
    assert loaded.findings and all(f.label is None for f in loaded.findings)
    for format in FORMATS:
        render(loaded, format)  # type: ignore[arg-type]


def test_sarif_carries_the_labels_and_validates(report: Report) -> None:
    log = json.loads(render(report, "sarif"))
    jsonschema.validate(log, SCHEMA)
    result = next(r for r in log["runs"][0]["results"] if r["ruleId"] == "E0308")
    assert result["locations"][0]["message"]["text"] == PRIMARY
    assert PRIMARY in result["message"]["text"]
    (related,) = result["relatedLocations"]
    assert related["message"]["text"] == SECONDARY
    assert related["physicalLocation"]["region"]["startColumn"] == 12


def test_the_annotation_and_the_summary_carry_the_label(report: Report) -> None:
    github = render(report, "github")
    line = next(line for line in github.splitlines() if "title=E0308" in line)
    assert "mismatched types%0Aexpected `u32`, found `&str`" in line
    assert PRIMARY in render(report, "markdown")


def test_gitlab_carries_the_label_in_its_description(report: Report) -> None:
    """GitLab's code quality widget shows `description` alone: the label goes there, after
    the message, as the annotation puts it (it was left out of GitLab's only)."""
    issues = json.loads(render(report, "gitlab"))
    mismatch = next(issue for issue in issues if issue["check_name"] == "E0308")
    assert mismatch["description"].startswith(f"mismatched types\n{PRIMARY}")
    # control: a finding without a label gets no empty line for it
    unlabeled = [f for f in report.findings if not f.label]
    assert unlabeled, "the fixture has a finding without a primary label"
    assert all("\n\n" not in issue["description"] for issue in issues)


# -- hostile labels ------------------------------------------------------------------------

def _diagnostic(spans: list[dict[str, object]]) -> bytes:
    return json.dumps({"reason": "compiler-message", "message": {
        "message": "mismatched types", "code": {"code": "E0308", "explanation": None},
        "level": "error", "spans": spans, "children": [], "rendered": ""}}).encode() + b"\n"


def _span(line: int, label: str | None, *, primary: bool) -> dict[str, object]:
    return {"file_name": "src/main.rs", "line_start": line, "line_end": line, "column_start": 1,
            "column_end": 4, "is_primary": primary, "label": label, "text": [],
            "suggested_replacement": None, "suggestion_applicability": None, "expansion": None}


def test_a_megabyte_label_is_cut_to_the_cap() -> None:
    huge = "x" * 1_000_000
    stream = _diagnostic([_span(1, huge, primary=True), _span(2, huge, primary=False)])
    assert len(stream) < 2_100_000
    stream = _diagnostic([_span(1, huge, primary=True)])
    (finding,) = parse_messages(stream, PathLayout()).findings
    assert finding.label is not None and len(finding.label) <= MAX_LABEL_CHARS
    assert finding.label.endswith(f"…[truncated to {MAX_LABEL_CHARS} characters]")
    stream = _diagnostic([_span(1, "short", primary=True), _span(2, "y" * 900_000, primary=False)])
    (finding,) = parse_messages(stream, PathLayout()).findings
    (related,) = finding.related
    assert related.message is not None and len(related.message) <= MAX_LABEL_CHARS
    # a saved report is held to the same cap when it is read back
    saved = json.loads(render(make_report([finding]), "json"))
    saved["findings"][0]["label"] = "z" * 100_000
    assert len(Report.model_validate(saved).findings[0].label or "") <= MAX_LABEL_CHARS


def test_ten_thousand_spans_keep_at_most_the_cap() -> None:
    # only the keys the parser reads, so that the line stays under MAX_LINE_BYTES
    spans = [_span(1, "primary", primary=True)] + [
        {"file_name": "a.rs", "line_start": line, "column_start": 1, "is_primary": False, "label": "l"}
        for line in range(2, 10_002)]
    stream = _diagnostic(spans)
    assert len(stream) <= MAX_LINE_BYTES
    started = time.monotonic()
    (finding,) = parse_messages(stream, PathLayout()).findings
    assert time.monotonic() - started < 5
    assert finding.label == "primary" and len(finding.related) == MAX_RELATED
    for format in FORMATS:
        render(make_report([finding]), format)  # type: ignore[arg-type]


def test_a_label_that_is_a_terminal_or_runner_command_is_inert() -> None:
    evil = "\x1b]8;;http://evil.example\x07\x1b[2J\u202e\r\n::error::forged\n::add-mask::x"
    stream = _diagnostic([_span(1, evil, primary=True), _span(2, evil, primary=False)])
    (finding,) = parse_messages(stream, PathLayout()).findings
    assert finding.label is not None and "\\x1b[2J" in finding.label
    report = make_report([finding])
    for format in FORMATS:
        text = render(report, format)  # type: ignore[arg-type]
        assert not UNSAFE.search(text), (format, UNSAFE.findall(text))
        lines = text.splitlines()
        assert not any(line.lstrip().startswith(("::error::forged", "::add-mask::")) for line in lines)
    github = render(report, "github").splitlines()
    assert github[0].startswith(PROVENANCE_PREFIX)
    assert sum(line.startswith("::") for line in github[1:]) == 1


def test_captured_labels_still_match_live_cargo(tmp_path: Path) -> None:
    """The fixture is what this host's cargo prints today (capture.py regenerates it)."""
    if shutil.which("cargo") is None:
        pytest.fail("this test needs the host's cargo (scripts/test installs it)")
    crate = copy_crate(CRATE, tmp_path / "crate")
    for left in ("clippy.jsonl", "rendered.txt", "capture.py"):
        (crate / left).unlink()
    run = run_clippy(crate, target_dir=tmp_path / "target")
    assert run.status == 101, run.stderr
    live = [json.loads(line)["message"]["rendered"] for line in run.stdout.splitlines()
            if b'"compiler-message"' in line]
    assert "".join(live) == RENDERED
