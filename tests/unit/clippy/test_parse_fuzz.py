"""parse_messages on anything the guest can print: a ParsedStream, never an exception,
bounded (hypothesis; profile in tests/conftest.py)."""

from __future__ import annotations

import json
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py.clippy.parse import MAX_FINDINGS, ParsedStream, PathLayout, parse_messages

KEYS = ["reason", "message", "level", "spans", "code", "children", "file_name", "is_primary",
        "line_start", "line_end", "column_start", "column_end", "expansion", "span", "label",
        "suggested_replacement", "success", "rendered"]
WORDS = ["compiler-message", "build-finished", "error", "warning", "note", "help",
         "failure-note", "src/lib.rs", "../x.rs", "/guest/repo/src/lib.rs", "<anon>",
         "src/\ud800.rs", "src/link.rs", "clippy::x", "E0308", ""]

scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True), st.sampled_from(WORDS), st.text(max_size=20))
jsonish = st.recursive(
    scalars,
    lambda inner: st.one_of(st.lists(inner, max_size=4),
                            st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=40)


def _span(draw: st.DrawFn) -> dict[str, Any]:
    return {"file_name": draw(st.one_of(st.sampled_from(WORDS), jsonish)),
            "is_primary": draw(st.one_of(st.booleans(), jsonish)),
            "line_start": draw(st.one_of(st.integers(-5, 10), jsonish)),
            "line_end": draw(st.one_of(st.integers(-5, 10), jsonish)),
            "column_start": draw(st.one_of(st.integers(-5, 10), jsonish)),
            "column_end": draw(st.one_of(st.integers(-5, 10), jsonish)),
            "expansion": draw(st.one_of(st.none(), jsonish))}


@st.composite
def cargo_messages(draw: st.DrawFn) -> Any:
    """Cargo-shaped messages with hostile values in every field."""
    diag = {"message": draw(st.one_of(st.text(max_size=30), jsonish)),
            "level": draw(st.one_of(st.sampled_from(WORDS), jsonish)),
            "code": draw(st.one_of(st.none(), st.fixed_dictionaries({"code": jsonish}), jsonish)),
            "spans": draw(st.one_of(st.lists(st.builds(dict), max_size=0),
                                    st.lists(st.composite(lambda d: _span(d))(), max_size=3),
                                    jsonish)),
            "children": draw(st.one_of(st.lists(jsonish, max_size=3), jsonish))}
    return draw(st.sampled_from([
        {"reason": "compiler-message", "message": diag},
        {"reason": "build-finished", "success": draw(jsonish)},
        draw(jsonish)]))


@pytest.fixture(scope="module")
def staged(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("staged")
    (root / "src").mkdir()
    (root / "src" / "lib.rs").write_text("a\nb\nc\nd\ne\nf\ng\nh\ni\nj\n")
    (root / "src" / "link.rs").symlink_to("lib.rs")
    return root


LAYOUT = PathLayout(workspace=PurePosixPath("."), guest_root=PurePosixPath("/guest/repo"))


def check(parsed: ParsedStream, stdout: bytes) -> None:
    assert isinstance(parsed, ParsedStream)
    assert len(parsed.findings) <= MAX_FINDINGS
    lines = stdout.count(b"\n") + 1
    assert len(parsed.findings) + parsed.ignored_lines + parsed.duplicates <= lines


@given(st.binary(max_size=4000))
def test_any_bytes_parse_without_an_exception(staged: Path, stdout: bytes) -> None:
    check(parse_messages(stdout, LAYOUT, staged=staged), stdout)


@given(st.lists(cargo_messages(), max_size=8))
def test_any_json_shaped_like_cargo_parses_without_an_exception(
        staged: Path, messages: list[Any]) -> None:
    stdout = b"\n".join(json.dumps(m).encode("utf-8", "surrogatepass") for m in messages)
    parsed = parse_messages(stdout, LAYOUT, staged=staged)
    check(parsed, stdout)
    for finding in parsed.findings:  # what comes out is the model's, validated
        assert finding.snippet is None or finding.path == "src/lib.rs"


def test_the_generator_reaches_real_findings(staged: Path) -> None:
    """Control: the shape the fuzzer draws from does produce findings with snippets."""
    span = {"file_name": "src/lib.rs", "is_primary": True, "line_start": 2, "line_end": 2,
            "column_start": 1, "column_end": 2, "expansion": None}
    message = {"reason": "compiler-message", "message": {
        "message": "m", "level": "warning", "code": {"code": "clippy::x"}, "spans": [span],
        "children": []}}
    parsed = parse_messages(json.dumps(message).encode(), LAYOUT, staged=staged)
    assert [(f.path, f.snippet) for f in parsed.findings] == [("src/lib.rs", "b")]
