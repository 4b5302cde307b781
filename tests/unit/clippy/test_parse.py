"""clippy/parse.py against real `cargo clippy` output of examples/demo-workspace."""

from __future__ import annotations

import json
import re
from pathlib import Path, PurePosixPath

import pytest
from realcargo import DATA, CargoRun, run_clippy, staged_copy

from roteiro_py.clippy.parse import (
    MAX_DROPPED_ERRORS,
    MAX_LINE_BYTES,
    PathLayout,
    parse_messages,
)

RUST = PathLayout(workspace=PurePosixPath("rust"))
CORE = "rust/crates/demo-core/src/lib.rs"
APP = "rust/crates/demo-app/src/main.rs"
DEFAULT = {
    ("clippy::needless_return", CORE, 5, 5),
    ("clippy::clone_on_copy", CORE, 12, 20),
    ("clippy::len_zero", APP, 5, 8),
}
ALL_TARGETS = DEFAULT | {("clippy::bool_assert_comparison", CORE, 25, 9)}


def found(stdout: bytes, layout: PathLayout = RUST) -> set[tuple[str | None, str | None,
                                                                int | None, int | None]]:
    parsed = parse_messages(stdout, layout)
    return {(f.code, f.path, f.line, f.column) for f in parsed.findings}


def test_demo_findings_are_the_known_ones(demo_default: CargoRun) -> None:
    assert demo_default.status == 0, demo_default.stderr
    parsed = parse_messages(demo_default.stdout, RUST)
    assert parsed.build_success is True
    assert found(demo_default.stdout) == DEFAULT
    assert all(f.level == "warning" for f in parsed.findings)


def test_demo_findings_match_cargos_human_output(demo_copy: Path, tmp_path: Path,
                                                 demo_default: CargoRun) -> None:
    """The same locations cargo prints in its human form (`--> file:line:col`)."""
    argv = [arg for arg in demo_default.argv if arg != "--message-format=json"]
    human = run_clippy(demo_copy / "rust", target_dir=tmp_path, argv=argv)
    printed = set(re.findall(r"--> (\S+):(\d+):(\d+)", human.stderr))
    parsed = parse_messages(demo_default.stdout, RUST)
    assert {(f"rust/{path}", int(line), int(col)) for path, line, col in printed} == {
        (f.path, f.line, f.column) for f in parsed.findings}


def test_all_targets_reports_each_diagnostic_once(demo_all_targets: CargoRun) -> None:
    raw = [json.loads(line) for line in demo_all_targets.stdout.splitlines()]
    messages = [m for m in raw if m["reason"] == "compiler-message"]
    assert len(messages) > len(ALL_TARGETS), "control: cargo repeats diagnostics per target"
    parsed = parse_messages(demo_all_targets.stdout, RUST)
    assert sorted((f.code, f.path, f.line, f.column) for f in parsed.findings) == sorted(
        ALL_TARGETS)
    assert parsed.duplicates == len(messages) - len(ALL_TARGETS)


def test_snippet_help_and_suggestion_come_from_the_diagnostic(
        demo_default: CargoRun, demo_copy: Path) -> None:
    parsed = parse_messages(demo_default.stdout, RUST, staged=staged_copy(demo_copy / "rust"))
    by_code = {f.code: f for f in parsed.findings}
    ret = by_code["clippy::needless_return"]
    assert ret.snippet == "    return x * 2;"
    assert (ret.line, ret.column, ret.end_line, ret.end_column) == (5, 5, 5, 17)
    assert ret.suggestion == "x * 2" and ret.help == "remove `return`"
    assert by_code["clippy::clone_on_copy"].suggestion == "*v"


def test_captured_fixture_still_matches_live_cargo(demo_default: CargoRun,
                                                   demo_all_targets: CargoRun) -> None:
    """tests/data/demo-clippy/*.jsonl (regenerate with capture.py) agree with real cargo."""
    for name, live in (("default", demo_default), ("all-targets", demo_all_targets)):
        stored = (DATA / "demo-clippy" / f"{name}.jsonl").read_bytes()
        assert found(stored, PathLayout()) == {
            (code, (path or "").removeprefix("rust/"), line, col)
            for code, path, line, col in found(live.stdout)}


def test_workspace_in_a_subfolder_prefixes_paths(demo_default: CargoRun) -> None:
    at_root = found(demo_default.stdout, PathLayout())
    nested = found(demo_default.stdout, PathLayout(workspace=PurePosixPath("a/b")))
    assert {(c, f"a/b/{p}", li, co) for c, p, li, co in at_root} == nested


def _message(file_name: str, *, code: str | None = "clippy::x", level: str = "warning",
             message: str = "m", expansion: dict[str, object] | None = None,
             spans: list[dict[str, object]] | None = None) -> bytes:
    span = {"file_name": file_name, "is_primary": True, "line_start": 3, "line_end": 3,
            "column_start": 2, "column_end": 4, "expansion": expansion}
    diag = {"message": message, "level": level,
            "code": {"code": code, "explanation": None} if code else None,
            "spans": [span] if spans is None else spans, "children": []}
    return json.dumps({"reason": "compiler-message", "message": diag}).encode()


@pytest.mark.parametrize(("file_name", "expected"), [
    ("src/lib.rs", "ws/src/lib.rs"),
    ("../shared/x.rs", None),  # in the repository, but outside the workspace the guest saw
    ("../.git/config", None),
    ("src/.git/config", None),
    ("/guest/repo/.git/config", None),
    ("../../etc/passwd", None),
    ("src/../../../x.rs", None),
    ("/guest/repo/ws/src/a.rs", "ws/src/a.rs"),
    ("/guest/repo/../secret.rs", None),
    ("/guest/repository/x.rs", None),
    ("/root/.cargo/registry/src/index/serde-1.0/src/lib.rs", None),
    ("<anon>", None),
    ("/rustc/59807616e1/library/core/src/macros/mod.rs", None),
])
def test_paths_from_the_guest_are_confined(file_name: str, expected: str | None) -> None:
    layout = PathLayout(workspace=PurePosixPath("ws"), guest_root=PurePosixPath("/guest/repo"))
    parsed = parse_messages(_message(file_name), layout)
    assert [f.path for f in parsed.findings] == ([expected] if expected else [])
    assert parsed.outside_repository == (0 if expected else 1)


def test_outside_span_is_located_at_its_macro_call_site() -> None:
    call_site = {"file_name": "src/main.rs", "is_primary": False, "line_start": 9,
                 "line_end": 9, "column_start": 5, "column_end": 20, "expansion": None}
    parsed = parse_messages(_message("/rustc/abc/library/std/src/macros.rs",
                                     expansion={"span": call_site, "macro_decl_name": "x!"}),
                            PathLayout())
    assert [(f.path, f.line, f.column) for f in parsed.findings] == [("src/main.rs", 9, 5)]


def test_error_outside_the_repository_is_remembered_not_reported() -> None:
    parsed = parse_messages(_message("/root/.cargo/registry/src/x/lib.rs", level="error",
                                     message="mismatched types"), PathLayout())
    assert parsed.findings == [] and parsed.dropped_errors == ["mismatched types"]


def test_errors_outside_the_repository_keep_only_the_first_few_messages() -> None:
    # 20,000 repeats of one dependency error once kept 20,000 messages for a summary of 8.
    stdout = b"\n".join(_message("/elsewhere/lib.rs", level="error", message=f"e{i}")
                      for i in range(20_000))
    parsed = parse_messages(stdout, PathLayout())
    assert parsed.outside_repository == 20_000            # every one is still counted
    assert parsed.dropped_errors == [f"e{i}" for i in range(MAX_DROPPED_ERRORS)]


def test_summaries_are_skipped_but_spanless_diagnostics_kept() -> None:
    stream = b"\n".join([
        _message("", code=None, message="1 warning emitted", spans=[]),
        _message("", code=None, level="error", message="aborting due to 2 previous errors",
                 spans=[]),
        _message("", code=None, level="failure-note",
                 message="For more information about this error, try `rustc --explain E0308`.",
                 spans=[]),
        _message("", code="clippy::cargo_common_metadata", message="package is missing x",
                 spans=[]),
    ])
    parsed = parse_messages(stream, PathLayout())
    assert parsed.summaries_skipped == 3
    assert [(f.code, f.path) for f in parsed.findings] == [
        ("clippy::cargo_common_metadata", None)]


def test_garbage_lines_are_counted_and_do_not_hide_findings(demo_default: CargoRun) -> None:
    garbage = [
        b"not json at all",
        b'{"reason": "compiler-message", "message": ',
        b"[" * 100_000 + b"]" * 100_000,
        b'{"reason": "compiler-message", "message": {"level": 3, "message": [], "spans": 1}}',
        b'{"reason": "compiler-message", "message": {"level": "warning", "message": "m", '
        b'"spans": [{"file_name": "a.rs", "is_primary": true, "line_start": -4, '
        b'"column_start": true}]}}',
        b'{"reason": "build-finished", "success": "yes"}',
        b'{"reason": "something-new"}',
        b'"just a string"',
        b"x" * (MAX_LINE_BYTES + 1),
        b"\xff\xfe\x00binary",
    ]
    lines = demo_default.stdout.splitlines()
    mixed = b"\n".join(line for pair in zip(lines, [garbage] * len(lines), strict=True)
                       for line in (pair[0], *pair[1]))
    parsed = parse_messages(mixed, RUST)
    assert {(f.code, f.path, f.line, f.column) for f in parsed.findings} == DEFAULT
    assert parsed.build_success is True
    # The malformed-span diagnostic is one the parser drops as outside (invalid positions).
    assert parsed.ignored_lines == (len(garbage) - 1) * len(lines)


@pytest.mark.parametrize(("code", "kept"), [
    ("clippy::needless_return", True), ("unused_variables", True), ("E0308", True),
    ("rustdoc::broken_intra_doc_links", True),
    ("clippy::x`](https://evil.example/) [y", False), ("E03081", False), ("a b", False),
    ("CLIPPY::X", False), ("clippy::x\n::error::y", False),
])
def test_codes_from_the_guest_are_validated(code: str, kept: bool) -> None:
    parsed = parse_messages(_message("src/lib.rs", code=code), PathLayout())
    assert [f.code for f in parsed.findings] == [code if kept else None]


def _artifact(package_id: object, fresh: object) -> bytes:
    return json.dumps({"reason": "compiler-artifact", "package_id": package_id, "fresh": fresh,
                       "target": {"name": "x"}, "filenames": []}).encode()


def test_dependency_units_are_counted_by_cargos_own_fresh_flag() -> None:
    """What the dependency cache saved is read from cargo's messages: registry and git
    units (both package id forms), never the tree's own path packages."""
    lines = [
        _artifact("registry+https://github.com/rust-lang/crates.io-index#itoa@1.0.15", True),
        _artifact("sparse+https://index.crates.io/#serde@1.0.0", False),
        _artifact("git+file:///g/gdep#0.1.0", True),
        _artifact("itoa 1.0.14 (registry+https://github.com/rust-lang/crates.io-index)", False),
        _artifact("path+file:///ws#demo@0.1.0", False),   # the tree's own: not counted
        _artifact("demo 0.1.0 (path+file:///ws)", True),    # nor in the older form
        _artifact("registry+https://x#y@1", "yes"),         # a fresh that is no bool: ignored
        _artifact(7, True),
    ]
    out = parse_messages(b"\n".join(lines), PathLayout())
    assert (out.dependencies_fresh, out.dependencies_compiled) == (2, 2)
    assert out.ignored_lines == 2
