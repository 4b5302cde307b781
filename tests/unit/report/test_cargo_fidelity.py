"""The human report shows what cargo shows (issue 13), checked against real cargo 1.95.

tests/data/cargo-fidelity is linted with the host's `cargo clippy` and the argv the guest
runs (realcargo.py); its JSON goes through the parser and the report as a lint's does,
and its stderr is what cargo printed for a person: the report must carry the same
suggestion lines, notes, doc links and build-script warnings. Each test has the control
that shows what was missing before: the first replacement alone, no note, no count in
the plural.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from realcargo import DATA, CargoRun, copy_crate, make_report, report_of, run_clippy

from roteiro_py.clippy.parse import (
    MAX_BUILD_SCRIPT_WARNINGS,
    MAX_CHILDREN,
    MAX_EDITS,
    MAX_FIXES,
    PathLayout,
    build_script_warnings,
    parse_messages,
)
from roteiro_py.report.github import PROVENANCE_PREFIX
from roteiro_py.report.model import Finding, Report
from roteiro_py.report.render import render

CRATE = DATA / "cargo-fidelity"
SGR = re.compile(r"\x1b\[[0-9;]*m")


@pytest.fixture(scope="module")
def fidelity(tmp_path_factory: pytest.TempPathFactory) -> tuple[CargoRun, Report]:
    if shutil.which("cargo") is None:
        pytest.fail("these tests need the host's cargo (scripts/test installs it)")
    repo = copy_crate(CRATE, tmp_path_factory.mktemp("fidelity") / "crate")
    run = run_clippy(repo, target_dir=tmp_path_factory.mktemp("target"))
    assert run.status == 0, run.stderr
    return run, report_of(run, repo)


def by_code(report: Report, code: str) -> Finding:
    return next(finding for finding in report.findings if finding.code == code)


def cargo_rendered(run: CargoRun, code: str) -> str:
    """rustc's own rendering of the diagnostic `code` (the text cargo prints)."""
    import json

    for line in run.stdout.splitlines():
        message = json.loads(line)
        if message.get("reason") == "compiler-message" and (message["message"].get("code") or {}).get(
                "code") == code:
            return str(message["message"]["rendered"])
    raise AssertionError(f"cargo printed no {code}")


def test_a_multi_part_suggestion_is_shown_whole_as_cargo_shows_it(fidelity: tuple[CargoRun, Report]) -> None:
    run, report = fidelity
    finding = by_code(report, "clippy::bool_assert_comparison")
    (fix,) = finding.fixes
    assert len(fix.edits) == 3 and fix.applicability == "MachineApplicable"
    assert (fix.line, fix.before, fix.after) == (2, "    assert_eq!(x, true);", "    assert!(x);")
    text = render(report, "human")
    cargo = cargo_rendered(run, "clippy::bool_assert_comparison")
    for line in ("help: replace it with `assert!(..)`", "2 -     assert_eq!(x, true);", "2 +     assert!(x);"):
        assert line in cargo and line in text.splitlines(), line
    # control: the first replacement alone, all a report showed before, is not the fix
    assert finding.suggestion == "assert"
    legacy = render(report.model_copy(update={"findings": [
        finding.model_copy(update={"children": [], "fixes": []})]}), "human")
    assert "= suggestion: `assert`" in legacy and "assert!(x)" not in legacy


def test_a_github_annotation_carries_every_part_of_a_suggestion(fidelity: tuple[CargoRun, Report]) -> None:
    """An annotation showed `suggestion: `assert`` for bool_assert_comparison: the first
    of its three parts, which applied alone would not compile. It now shows what cargo
    shows: the help and the line as it is and as the whole suggestion makes it."""
    run, report = fidelity
    finding = by_code(report, "clippy::bool_assert_comparison")
    only = report.model_copy(update={"findings": [finding]})
    provenance, line = [line for line in render(only, "github").splitlines() if line.startswith("::")]
    assert provenance.startswith(PROVENANCE_PREFIX)
    message = line.split("::", 2)[2].replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
    cargo = cargo_rendered(run, "clippy::bool_assert_comparison")
    for shown in ("help: replace it with `assert!(..)`", "2 -     assert_eq!(x, true);", "2 +     assert!(x);"):
        assert shown in cargo and shown in message.splitlines(), shown
    assert message.count("replace it with `assert!(..)`") == 1  # the help is not said twice
    assert "suggestion: `assert`" not in message
    legacy = render(report.model_copy(update={"findings": [finding.model_copy(update={"fixes": []})]}),
                    "github")  # control: a report without `fixes` shows the first part, as before
    assert "suggestion: `assert`" in legacy and "assert!(x)" not in legacy


def test_single_part_suggestions_read_as_a_before_and_after(fidelity: tuple[CargoRun, Report]) -> None:
    run, report = fidelity
    text = render(report, "human").splitlines()
    for code, before, after in (("clippy::ptr_arg", "5 - pub fn length(v: &Vec<u8>) -> usize {",
                                 "5 + pub fn length(v: &[u8]) -> usize {"),
                                ("clippy::needless_return", "7 -     return v.len();", "7 +     v.len()")):
        cargo = cargo_rendered(run, code)
        assert before in cargo and after in cargo  # what cargo printed ...
        assert text[text.index(before) + 1] == after  # ... the report prints, in order
    # the unused variable: cargo shows its suggestion as a label under the span, and so
    # does the report (Fix.inline, read from cargo's own layout), not as lines
    label = "help: if this is intentional, prefix it with an underscore: `_unused`"
    assert any(line.endswith(f"^^^^^^ {label}") for line in cargo_rendered(run, "unused_variables").splitlines())
    assert any(line.endswith(f"^^^^^^ {label}") for line in text)
    assert "6 +     let _unused = 3;" not in text


def test_the_on_by_default_notes_and_the_doc_links_are_shown(fidelity: tuple[CargoRun, Report]) -> None:
    run, report = fidelity
    text = render(report, "human")
    for code in ("clippy::bool_assert_comparison", "clippy::ptr_arg", "clippy::needless_return"):
        lint = code.removeprefix("clippy::")
        note = f"  = note: `#[warn({code})]` on by default"
        link = f"https://rust-lang.github.io/rust-clippy/rust-1.95.0/index.html#{lint}"
        assert note in cargo_rendered(run, code) and note in text.splitlines()
        assert f"  = help: for further information visit {link}" in text.splitlines()
        assert by_code(report, code).doc_url == link
    assert "`#[warn(unused_variables)]` (part of `#[warn(unused)]`) on by default" in text
    assert by_code(report, "unused_variables").doc_url is None  # rustc gives it no link


def test_build_script_warnings_are_shown_as_cargo_prints_them(fidelity: tuple[CargoRun, Report]) -> None:
    run, report = fidelity
    printed = [line for line in run.stderr.splitlines() if line.startswith("warning: cargo-fidelity@")]
    assert printed == ["warning: cargo-fidelity@0.3.1: generated bindings are stale",
                       "warning: cargo-fidelity@0.3.1: second spelling, same line on stderr"]
    assert b"generated bindings" not in run.stdout  # cargo's JSON does not carry them
    text = render(report, "human")
    assert text.splitlines()[:2] == printed
    assert [(w.package, w.version) for w in report.build_script_warnings] == [("cargo-fidelity", "0.3.1")] * 2
    assert "4 findings (4 warnings); 2 build script warnings; build succeeded" in text
    # control: a stderr without them (cargo's other warnings) gives none
    assert build_script_warnings("warning: unused manifest key: package.x\n"
                                 "warning: `cargo-fidelity` (lib) generated 4 warnings\n") == ([], 0)


@pytest.mark.parametrize(("levels", "line"), [
    ([], "0 findings; build succeeded"),
    (["warning"], "1 finding (1 warning); build succeeded"),
    (["warning"] * 3, "3 findings (3 warnings); build succeeded"),
    (["error", "warning", "warning"], "3 findings (1 error, 2 warnings); build succeeded"),
])
def test_counts_are_in_the_plural_when_they_are_plural(levels: list[str], line: str) -> None:
    findings = [Finding.model_validate({"code": None, "level": level, "message": f"m{i}", "path": None,
                                        "line": None, "column": None, "end_line": None, "end_column": None})
                for i, level in enumerate(levels)]
    assert line in render(make_report(findings), "human")


def test_a_report_written_before_the_new_fields_loads_and_renders(fidelity: tuple[CargoRun, Report]) -> None:
    """The JSON report only gained optional fields: a consumer of version 1 reads it, and
    a version-1 report without them loads and is rendered as it was."""
    import json

    _, report = fidelity
    data = json.loads(report.model_dump_json())
    assert data["schema_version"] == 1
    for finding in data["findings"]:
        for key in ("children", "fixes", "doc_url"):
            finding.pop(key)
    data.pop("build_script_warnings")
    data["summary"].pop("build_script_warnings")
    old = Report.model_validate(data)
    assert old.findings[0].children == [] and old.build_script_warnings == []
    text = render(old, "human")
    assert "= help: replace it with `assert!(..)`" in text and "= suggestion: `assert`" in text
    assert Report.model_validate_json(report.model_dump_json()) == report  # and the new round-trips


# -- hostile children -----------------------------------------------------------------


def _span(line: int, column: int, end_column: int, replacement: str | None = None,
          file_name: str = "src/lib.rs") -> dict[str, object]:
    return {"file_name": file_name, "line_start": line, "line_end": line, "column_start": column,
            "column_end": end_column, "is_primary": True, "label": None,
            "suggested_replacement": replacement, "expansion": None}


def _stream(children: list[object], spans: list[object] | None = None) -> bytes:
    import json

    return json.dumps({"reason": "compiler-message", "message": {
        "level": "warning", "message": "m", "code": {"code": "clippy::x"},
        "spans": spans or [_span(2, 5, 24)], "children": children}}).encode() + b"\n"


def _staged(tmp_path: Path) -> Path:
    (tmp_path / "src").mkdir(parents=True)
    (tmp_path / "src" / "lib.rs").write_text((CRATE / "src" / "lib.rs").read_text())
    return tmp_path


def test_a_suggestion_with_a_part_outside_the_repository_is_not_kept_in_part(tmp_path: Path) -> None:
    whole = {"level": "help", "message": "replace", "spans": [_span(2, 5, 14, "assert"), _span(2, 17, 23, "")]}
    parsed = parse_messages(_stream([whole]), PathLayout(), staged=_staged(tmp_path))
    assert parsed.findings[0].fixes[0].after == "    assert!(x);"  # control: kept whole
    partial = {**whole, "spans": [_span(2, 5, 14, "assert"), _span(2, 17, 23, "", "/etc/passwd")]}
    parsed = parse_messages(_stream([partial]), PathLayout(), staged=_staged(tmp_path / "b"))
    assert parsed.findings[0].fixes == []
    too_many = {**whole, "spans": [_span(2, 5, 6, "a")] * (MAX_EDITS + 1)}
    assert parse_messages(_stream([too_many]), PathLayout()).findings[0].fixes == []


def test_overlapping_or_unreadable_edits_keep_the_edits_without_lines(tmp_path: Path) -> None:
    overlapping = {"level": "help", "message": "x", "spans": [_span(2, 5, 14, "a"), _span(2, 10, 20, "b")]}
    parsed = parse_messages(_stream([overlapping]), PathLayout(), staged=_staged(tmp_path))
    fix = parsed.findings[0].fixes[0]
    assert len(fix.edits) == 2 and fix.before is None and fix.after is None
    text = render(make_report(parsed.findings), "human")
    assert "src/lib.rs:2:5: replace with `a`" in text and "src/lib.rs:2:10: replace with `b`" in text
    past = {"level": "help", "message": "x", "spans": [_span(2, 400, 401, "a")]}  # past the line's end
    parsed = parse_messages(_stream([past]), PathLayout(), staged=_staged(tmp_path / "c"))
    assert parsed.findings[0].fixes[0].after is None


def test_children_are_bounded_and_sanitised() -> None:
    hostile = "\x1b[2J\x1b]8;;http://evil\x07click::error::x ##[set-output name=a]\u202e"
    children = ([{"level": "note", "message": f"n{i} {hostile}", "spans": []} for i in range(20)]
                + [{"level": "help", "message": "h", "spans": [_span(2, 5, 6, f"r{i}")]} for i in range(20)]
                + [{"level": "help", "message": "for further information visit javascript:alert(1)", "spans": []}])
    finding = parse_messages(_stream(children), PathLayout()).findings[0]
    assert len(finding.children) == MAX_CHILDREN and len(finding.fixes) == MAX_FIXES
    assert finding.doc_url is None  # not an https link: shown as text, never as the link
    text = render(make_report([finding]), "human")
    assert "\x1b" not in text and "\u202e" not in text and "##[" not in text
    assert "\\x1b[2J" in text
    assert not any(line.lstrip().startswith("::") for line in text.splitlines())


def test_build_script_warnings_are_bounded_and_sanitised() -> None:
    lines = [f"warning: evil@1.0.0: w{i} \x1b[2J::error::x" for i in range(MAX_BUILD_SCRIPT_WARNINGS + 7)]
    kept, seen = build_script_warnings("\n".join(lines + lines[:3]))  # repeats are one
    assert len(kept) == MAX_BUILD_SCRIPT_WARNINGS and seen == MAX_BUILD_SCRIPT_WARNINGS + 7
    report = make_report([]).model_copy(update={"build_script_warnings": kept})
    text = render(report, "human")
    assert "\x1b" not in text and "warning: evil@1.0.0: w0 \\x1b[2J::error::x" in text
    # only a whole line from its start is one: cargo's prefix inside a line is not
    assert build_script_warnings("note: warning: evil@1.0.0: inside\n") == ([], 0)
    assert SGR.search(text) is None
