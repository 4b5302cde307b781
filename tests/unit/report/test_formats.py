"""The report model and its renderers, on the real clippy output of the demo workspace."""

from __future__ import annotations

import json
import os
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
from realcargo import DATA, DIGEST, make_report

from roteiro_py.report import FORMATS, Finding, Report, render
from roteiro_py.report.github import ANNOTATION_LIMIT, PROVENANCE_PREFIX, escape_data, escape_property
from roteiro_py.report.human import render_human
from roteiro_py.report.snippet import read_snippet

SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())


def finding(level: str = "warning", n: int = 1, **extra: object) -> Finding:
    fields: dict[str, object] = {
        "code": "clippy::needless_return", "level": level, "message": f"message {n}",
        "path": "src/lib.rs", "line": n, "column": 1, "end_line": n, "end_column": 3}
    return Finding.model_validate({**fields, **extra})


def test_json_round_trips_and_is_versioned(demo_report: Report) -> None:
    text = render(demo_report, "json")
    data = json.loads(text)
    assert data["schema_version"] == 1 and data["started"] == "2026-04-14T10:00:00Z"
    assert Report.model_validate_json(text) == demo_report


def test_summary_agrees_with_findings(demo_report: Report) -> None:
    assert demo_report.summary.total == len(demo_report.findings) == 4
    assert demo_report.summary.counts["warning"] == 4 and demo_report.summary.build_succeeded


def test_sarif_is_valid_against_the_official_schema(demo_report: Report) -> None:
    log = json.loads(render(demo_report, "sarif"))
    jsonschema.validate(log, SCHEMA)
    log["runs"][0]["results"][0]["level"] = "warn"
    with pytest.raises(jsonschema.ValidationError):  # control: the schema does bite
        jsonschema.validate(log, SCHEMA)


def test_sarif_has_what_github_code_scanning_needs(demo_report: Report) -> None:
    run = json.loads(render(demo_report, "sarif"))["runs"][0]
    driver = run["tool"]["driver"]
    assert driver["semanticVersion"] == "0.1.95"
    rules = {rule["id"]: rule for rule in driver["rules"]}
    assert set(rules) == {"clippy::needless_return", "clippy::clone_on_copy",
                          "clippy::len_zero", "clippy::bool_assert_comparison"}
    for rule in rules.values():
        assert rule["shortDescription"]["text"] and rule["help"]["text"]
    assert rules["clippy::len_zero"]["helpUri"] == (
        "https://rust-lang.github.io/rust-clippy/rust-1.95.0/index.html#len_zero")
    hashes = set()
    for result in run["results"]:
        assert result["ruleId"] and result["level"] == "warning"
        location = result["locations"][0]["physicalLocation"]
        assert location["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        assert location["artifactLocation"]["uri"].startswith("rust/crates/")
        hashes.add(result["partialFingerprints"]["primaryLocationLineHash"])
    assert len(hashes) == 4
    needless = next(r for r in run["results"] if r["ruleId"] == "clippy::needless_return")
    assert needless["locations"][0]["physicalLocation"]["region"] == {
        "startLine": 5, "startColumn": 5, "endLine": 5, "endColumn": 17,
        "snippet": {"text": "    return x * 2;"}}


def test_sarif_levels_rustc_codes_and_spanless_findings() -> None:
    report = make_report([
        finding("error", 1, code="E0308"), finding("note", 2, code=None),
        finding("help", 3, code="unused_variables"),
        finding("error", 4, code="clippy::x", path=None, line=None, column=None,
                end_line=None, end_column=None)], build_succeeded=False, workspace="rust")
    log = json.loads(render(report, "sarif"))
    jsonschema.validate(log, SCHEMA)
    results = log["runs"][0]["results"]
    assert [(r["ruleId"], r["level"]) for r in results] == [
        ("E0308", "error"), ("rustc::note", "note"), ("unused_variables", "note"),
        ("clippy::x", "error")]
    assert results[3]["locations"][0]["physicalLocation"]["artifactLocation"]["uri"] == (
        "rust/Cargo.toml")
    rules = log["runs"][0]["tool"]["driver"]["rules"]
    assert rules[0]["helpUri"] == "https://doc.rust-lang.org/error_codes/E0308.html"


def test_human_groups_by_file_and_underlines_the_span(demo_report: Report) -> None:
    text = render(demo_report, "human")
    lines = text.splitlines()
    assert lines[0] == "rust/crates/demo-app/src/main.rs"
    assert "rust/crates/demo-core/src/lib.rs" in lines
    at = lines.index(" --> rust/crates/demo-core/src/lib.rs:5:5")
    assert lines[at + 1:at + 4] == ["  |", "5 |     return x * 2;", "  |     ^^^^^^^^^^^^"]
    assert "4 findings (4 warnings); build succeeded" in text
    assert lines[-1] == (
        f"linted in registry.example/team/clippy:1.95 (manifest {DIGEST}) with clippy 0.1.95, "
        "rustc 1.95.0 (x86_64-unknown-linux-gnu); isolation: QEMU microvm with KVM, no network")


def test_human_never_interprets_markup() -> None:
    report = make_report([finding(message="[bold red]x[/] [link=http://e]y[/link]")])
    assert "[bold red]x[/] [link=http://e]y[/link]" in render_human(report, color=True)


def test_github_annotation_escaping() -> None:
    assert escape_data("a%b\r\nc") == "a%25b%0D%0Ac"
    assert escape_property("a%b:c,d\n") == "a%25b%3Ac%2Cd%0A"
    report = make_report([finding(message="50% of x,y: z", path="src/a,b:c.rs")])
    provenance, first = render(report, "github").splitlines()[:2]
    assert provenance.startswith(PROVENANCE_PREFIX)  # the run's provenance comes first
    assert first == ("::warning file=src/a%2Cb%3Ac.rs,line=1,endLine=1,col=1,endColumn=3,"
                     "title=clippy%3A%3Aneedless_return::50%25 of x,y: z%0Afor further information "
                     "visit https://rust-lang.github.io/rust-clippy/rust-1.95.0/index.html#needless_return")


def test_github_limit_of_annotations_per_type() -> None:
    findings = [finding("warning", n) for n in range(1, ANNOTATION_LIMIT + 4)]
    findings += [finding("error", n) for n in range(1, 3)]
    text = render(make_report(findings, build_succeeded=False), "github")
    commands = [line for line in text.splitlines() if line.startswith("::")]
    assert sum(line.startswith("::warning ") for line in commands) == ANNOTATION_LIMIT
    assert sum(line.startswith("::error ") for line in commands) == 2
    assert ("3 more warning findings not annotated (GitHub shows 10 warning annotations per "
            "step); the step summary lists the first 50 findings of the run (errors first), "
            "--format json or sarif every one.") in text
    assert "more error" not in text


def test_every_format_renders(demo_report: Report) -> None:
    for format in FORMATS:
        assert render(demo_report, format)  # type: ignore[arg-type]


def test_snippet_never_leaves_the_repository(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "src" / "a.rs").write_text("one\ntwo\nthree\n")
    (tmp_path / "secret").write_text("key\n")
    (repo / "src" / "link.rs").symlink_to(tmp_path / "secret")
    os.mkfifo(repo / "src" / "fifo.rs")
    assert read_snippet(repo, "src/a.rs", 2, 3) == "two\nthree"
    assert read_snippet(repo, "src/a.rs", 3, 9) is None
    assert read_snippet(repo, "../secret", 1) is None
    assert read_snippet(repo, "src/link.rs", 1) is None
    assert read_snippet(repo, "src/fifo.rs", 1) is None
    assert read_snippet(repo, str(tmp_path / "secret"), 1) is None
