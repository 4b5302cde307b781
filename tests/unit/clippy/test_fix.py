"""clippy/fix.py: which suggestions --fix takes, how overlaps resolve (rustfix's rules),
and that a hostile suggestion is refused before anything is decided from it."""

from __future__ import annotations

import json
import shutil
from pathlib import Path, PurePosixPath

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roteiro_py.clippy.fix import (
    MAX_REPLACEMENT_BYTES,
    FileFix,
    Replacement,
    Suggestion,
    apply_round,
    check,
    machine_applicable,
    unified_diff,
)
from roteiro_py.clippy.parse import PathLayout
from roteiro_py.errors import HostileSuggestion

DATA = Path(__file__).parents[2] / "data" / "demo-clippy"
DEMO = Path(__file__).parents[3] / "examples" / "demo-workspace"
LAYOUT = PathLayout(guest_root=PurePosixPath("/guest/repo"))


def _line(spans: list[dict[str, object]], message: str = "m", *, level: str = "warning",
          target: str = "lib") -> bytes:
    children = [{"level": "help", "message": "try", "spans": spans, "children": []}]
    return json.dumps({"reason": "compiler-message", "package_id": "path+file:///guest/repo#p@0.1.0",
                       "target": {"kind": [target], "name": "p"}, "message": {
        "message": message, "level": level, "spans": [], "children": children}}).encode()


def _span(start: int, end: int, text: str, *, file: str = "src/lib.rs",
          applicability: str = "MachineApplicable") -> dict[str, object]:
    return {"file_name": file, "byte_start": start, "byte_end": end, "line_start": 1,
            "line_end": 1, "column_start": 1, "column_end": 1, "is_primary": True,
            "suggested_replacement": text, "suggestion_applicability": applicability}


def _one(path: str, *parts: tuple[int, int, bytes]) -> Suggestion:
    return Suggestion(path=path, message="m",
                      replacements=tuple(Replacement(path, s, e, t) for s, e, t in parts))


def test_recorded_demo_stream_gives_what_host_cargo_clippy_fix_leaves(tmp_path: Path) -> None:
    """The guest's recorded stream of examples/demo-workspace, applied here, leaves the files
    host `cargo clippy --fix --allow-no-vcs` 1.95 left on a copy of it, recorded under
    tests/data/demo-clippy/fixed/ (the integration test checks the same live)."""
    found = machine_applicable((DATA / "default.jsonl").read_bytes(), LAYOUT)
    originals = {s.path: (DEMO / s.path).read_bytes() for s in found.found}
    fixes = {fix.path: fix for fix in apply_round(found.found, originals)}
    for path, fix in fixes.items():
        assert fix.fixed == (DATA / "fixed" / path).read_bytes() != fix.original
    assert (fixes["crates/demo-core/src/lib.rs"].applied, fixes["crates/demo-app/src/main.rs"].applied) == (2, 1)
    # and --fix=patch's diff, applied by patch(1), gives the same bytes
    copy = tmp_path / "copy"
    shutil.copytree(DEMO, copy)
    patch = shutil.which("patch")
    if patch is None:
        pytest.skip("patch(1) is not installed")
    import subprocess
    subprocess.run([patch, "-p1", "-s"], input=unified_diff(list(fixes.values())).encode(),
                   cwd=copy, check=True, timeout=30)
    for path, fix in fixes.items():
        assert (copy / path).read_bytes() == fix.fixed


def test_only_machine_applicable_parts_are_taken() -> None:
    stream = b"\n".join([
        _line([_span(0, 1, "a")]),
        _line([_span(0, 1, "b", applicability="MaybeIncorrect")]),
        _line([_span(0, 1, "c", applicability="HasPlaceholders")]),
        b"not json", b'{"reason": "build-finished", "success": true}',
    ])
    found = machine_applicable(stream, LAYOUT)
    assert [s.replacements[0].text for s in found.found] == [b"a"]


def test_a_target_with_an_error_is_not_fixed_and_the_others_are() -> None:
    """cargo fix runs one rustc per unit and applies nothing when it fails (cargo-labels:
    its lib is fixed, its bin does not build)."""
    stream = b"\n".join([
        _line([_span(0, 1, "lib")], target="lib"),
        _line([_span(2, 3, "bin")], target="bin"),
        _line([], "mismatched types", level="error", target="bin"),
    ])
    found = machine_applicable(stream, LAYOUT)
    assert [s.replacements[0].text for s in found.found] == [b"lib"] and found.broken == 1


def test_outside_and_two_file_suggestions_are_skipped_and_counted_as_cargo_skips_them() -> None:
    stream = b"\n".join([
        _line([_span(0, 1, "x", file="/rustc/abc/library/core/src/lib.rs")]),
        _line([_span(0, 1, "x", file="../elsewhere.rs")]),
        _line([_span(0, 1, "x"), _span(0, 1, "y", file="src/main.rs")]),
        _line([_span(0, 1, "z")]),
    ])
    found = machine_applicable(stream, LAYOUT)
    assert (found.outside, found.multi_file) == (2, 1)
    assert [s.replacements[0].text for s in found.found] == [b"z"]


def test_overlap_the_later_suggestion_in_the_stream_wins_and_the_other_is_a_conflict() -> None:
    """rustfix applies a file's suggestions in reverse (cargo's `suggestions.iter().rev()`)."""
    first, second = _one("f", (0, 3, b"AAA")), _one("f", (2, 5, b"BBB"))
    [fix] = apply_round([first, second], {"f": b"0123456"})
    assert fix.fixed == b"01BBB56" and (fix.applied, fix.conflicts) == (1, 1)


def test_a_suggestion_applies_whole_or_not_at_all() -> None:
    """The second part clashes: the first part of the same suggestion is not kept either."""
    taken, both = _one("f", (4, 6, b"X")), _one("f", (0, 1, b"Y"), (5, 6, b"Z"))
    [fix] = apply_round([both, taken], {"f": b"0123456"})
    assert fix.fixed == b"0123X6" and (fix.applied, fix.conflicts) == (1, 1)


def test_the_same_edit_twice_is_done_once_and_not_a_conflict() -> None:
    """rustc repeats a diagnostic per target; rustfix's `is_identical` is not an error."""
    [fix] = apply_round([_one("f", (1, 2, b"x")), _one("f", (1, 2, b"x"))], {"f": b"abc"})
    assert fix.fixed == b"axc" and (fix.applied, fix.identical, fix.conflicts) == (1, 1, 0)


def test_an_insertion_may_touch_a_replacement_but_not_another_insertion_there() -> None:
    [fix] = apply_round([_one("f", (1, 2, b"R")), _one("f", (2, 2, b"I"))], {"f": b"abc"})
    assert fix.fixed == b"aRIc" and fix.conflicts == 0
    [fix] = apply_round([_one("f", (2, 2, b"I")), _one("f", (2, 2, b"J"))], {"f": b"abc"})
    assert fix.fixed == b"abJc" and fix.conflicts == 1


@pytest.mark.parametrize(("parts", "original", "why"), [
    (((2, 1, b"x"),), b"abc", "reversed"),
    (((1, 4, b"x"),), b"abc", "past the file's 3 bytes"),
    (((1, 2, b"x"),), "aé".encode(), "splits a UTF-8 character"),
    (((2, 3, b"x"),), "aéb".encode(), "splits a UTF-8 character"),
    (((0, 2, b"x"), (1, 3, b"y")), b"abcd", "overlap"),
    (((1, 1, b"x"), (1, 1, b"y")), b"abcd", "overlap"),
])
def test_a_hostile_suggestion_is_refused_naming_the_file_and_why(
        parts: tuple[tuple[int, int, bytes], ...], original: bytes, why: str) -> None:
    with pytest.raises(HostileSuggestion) as refused:
        check(_one("src/lib.rs", *parts), original)
    assert why in str(refused.value) and "src/lib.rs" in str(refused.value)


def test_a_round_with_one_hostile_suggestion_decides_nothing() -> None:
    """Every suggestion is checked before any is applied: the good one is not returned."""
    good, bad = _one("a", (0, 1, b"x")), _one("b", (0, 99, b"y"))
    with pytest.raises(HostileSuggestion, match="b"):
        apply_round([good, bad], {"a": b"abc", "b": b"abc"})


@pytest.mark.parametrize(("span", "why"), [
    (_span(0, 1, "x" * (MAX_REPLACEMENT_BYTES + 1)), "a replacement of"),
    (_span(-1, 1, "x"), "not two offsets"),
    (_span(0, True, "x"), "not two offsets"),
    (_span(0, 1, "a\x00b"), "NUL"),
    (_span(0, 1, "\ud800"), "not UTF-8"),
])
def test_an_enormous_or_malformed_part_is_refused(span: dict[str, object], why: str) -> None:
    with pytest.raises(HostileSuggestion, match=why):
        machine_applicable(_line([span]), LAYOUT)


def test_too_many_parts_in_one_suggestion_is_refused() -> None:
    with pytest.raises(HostileSuggestion, match="parts"):
        machine_applicable(_line([_span(i, i, "x") for i in range(65)]), LAYOUT)


_ORIGINAL = st.text(alphabet=st.sampled_from("aé\n€ 😀"), max_size=30).map(str.encode)


@settings(max_examples=400, deadline=None)
@given(original=_ORIGINAL,
       spans=st.lists(st.tuples(st.integers(-5, 200), st.integers(-5, 200), st.binary(max_size=8)),
                      min_size=1, max_size=6))
def test_any_span_is_refused_or_lands_inside_the_file_on_character_boundaries(
        original: bytes, spans: list[tuple[int, int, bytes]]) -> None:
    """Whatever the guest sends: a HostileSuggestion, or an edit whose every part was a
    range of the file's bytes on character boundaries, its text decoded as UTF-8 here."""
    suggestions = [_one("f", (s, e, t)) for s, e, t in spans]
    try:
        [fix] = apply_round(suggestions, {"f": original})
    except HostileSuggestion:
        return
    text = original.decode()
    for s, e, _ in spans:
        assert 0 <= s <= e <= len(original)
        assert len(original[:s].decode()) + len(original[s:e].decode()) <= len(text)
    assert fix.applied + fix.conflicts + fix.identical == len(spans)


# -- --fix=patch: the diff patch(1) reads ------------------------------------------------

def _patched(tmp_path: Path, files: dict[str, tuple[bytes, bytes]]) -> Path:
    """Each original written under tmp_path/tree, then the round's diff applied by patch -p1."""
    patch = shutil.which("patch")
    if patch is None:
        pytest.skip("patch(1) is not installed")
    import subprocess
    tree = tmp_path / "tree"
    fixes = []
    for path, (original, fixed) in files.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(original)
        fixes.append(FileFix(path, original, fixed))
    subprocess.run([patch, "-p1", "-s", "--batch"], input=unified_diff(fixes).encode("utf-8", "surrogateescape"),
                   cwd=tree, check=True, timeout=30, capture_output=True)
    return tree


@pytest.mark.parametrize("original", [
    b"fn a() {}\x0c\nfn b() { 1 }\n",           # a form feed: str.splitlines() breaks there
    b"// x\xe2\x80\xa8y\nfn b() { 1 }\n",        # U+2028 in a comment: the same
    b"// lone\rcr\nfn b() { 1 }\n",              # a CR that ends no line
    b"// \x1c\x1d\x1e\x85\nfn b() { 1 }\n",      # the other separators Python splits at
    b"fn a() {}\r\nfn b() { 1 }\r\n",            # CRLF
    b"fn a() {}\nfn b() { 1 }",                  # no newline at the end
], ids=["formfeed", "u2028", "lone-cr", "separators", "crlf", "no-final-newline"])
def test_the_patch_gives_the_fixed_bytes_whatever_the_files_line_ends(tmp_path: Path, original: bytes) -> None:
    fixed = original.replace(b"{ 1 }", b"{ 2 }")
    tree = _patched(tmp_path, {"src/lib.rs": (original, fixed)})
    assert (tree / "src/lib.rs").read_bytes() == fixed


@pytest.mark.parametrize("name", [
    "src/a.rs\n+++ b/src/evil.rs", "src/a\tb.rs", "src/my file.rs", "src/\"q\".rs",
    "src/back\\slash.rs", "src/é.rs", "src/\x1b]0;x\x07.rs", "src/a\r.rs",
])
def test_a_file_name_cannot_forge_a_diff_header_or_name_another_file(tmp_path: Path, name: str) -> None:
    """A tree's file name is the tree's: a newline would forge a header (another file for
    patch to write), a tab would end the name early (a file the guest never saw); the name
    is quoted as git quotes it, which GNU patch reads back."""
    original, fixed = b"fn f() { 1 }\n", b"fn f() { 2 }\n"
    diff = unified_diff([FileFix(name, original, fixed)])
    headers = [line for line in diff.split("\n") if line.startswith(("---", "+++"))]
    assert len(headers) == 2 and "\x1b" not in diff and "\r" not in diff
    tree = _patched(tmp_path, {name: (original, fixed)})
    assert (tree / name).read_bytes() == fixed
    assert sorted(p.relative_to(tree).as_posix() for p in tree.rglob("*") if p.is_file()) == [name]


def test_a_round_of_many_parts_is_decided_in_linear_time_not_quadratic() -> None:
    """Within the bounds (10,000 suggestions of 64 parts, ~3 MB of the guest's 64 MiB of
    output here), a round once took 71 s for 25,600 parts and grew with the square (about
    12 hours at the bounds): every part rebuilt and re-sorted the list of parts taken.
    Measured against a generous clock, as the other cores are shared."""
    import time
    count = 25_600
    original = b"x" * (count * 2 + 10)
    suggestions = [Suggestion("src/lib.rs", "m", tuple(
        Replacement("src/lib.rs", (first + i) * 2, (first + i) * 2 + 1, b"y") for i in range(64)))
        for first in range(0, count, 64)]
    began = time.monotonic()
    [fix] = apply_round(suggestions, {"src/lib.rs": original})
    assert time.monotonic() - began < 10
    assert fix.applied == count // 64 and fix.fixed.count(b"y") == count


def test_more_parts_in_one_lint_than_max_parts_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    from roteiro_py.clippy import fix
    monkeypatch.setattr(fix, "MAX_PARTS", 100)
    stream = b"\n".join(_line([_span(i * 2, i * 2 + 1, "y") for i in range(50)]) for _ in range(2))
    assert sum(len(s.replacements) for s in machine_applicable(stream, LAYOUT).found) == 100  # at the bound
    with pytest.raises(HostileSuggestion, match="more than 100 parts"):
        machine_applicable(stream + b"\n" + _line([_span(300, 301, "y")]), LAYOUT)
