"""The terminal report follows cargo's layout, diffed line by line with what cargo printed.

tests/data/cargo-layout (warnings: a one-line span, a span over four lines, suggestions
shown as labels, as `-`/`+` lines and as `~` lines, notes and doc links) and
tests/data/cargo-labels (errors: a primary and a secondary label on one line, the
`rustc --explain` line) hold real `cargo clippy` JSON and the `rendered` text cargo
printed for a person (tests/data/cargo-labels/capture.py makes both). Each diagnostic of
ours is compared with cargo's, found by its `-->` line. What differs, by design
(docs/ARCHITECTURE.md, "The terminal report"), and is normalised here and nowhere else:
- our header names every code (`warning[clippy::ptr_arg]:`); cargo names only error codes,
  a lint's name being in its first `#[warn(...)]` note;
- our report groups findings under their file's path, sorted; cargo prints them as found;
- a suggestion cargo shows as `~` lines (the whole new lines) is shown with the lines it
  replaces, as `-`/`+`: the `+` lines must be cargo's `~` lines.
Everything else (the gutter's width, `-->`, the `|` rows, the marks and labels, `= note`s,
`help:` blocks) must be equal.
"""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path, PurePosixPath

import pytest
from realcargo import DATA, copy_crate, make_report, run_clippy, staged_copy

from roteiro_py.clippy.parse import PathLayout, parse_messages
from roteiro_py.report import render

LAYOUT = PathLayout(guest_root=PurePosixPath("/guest/repo"))
CRATES = ("cargo-layout", "cargo-labels")
_HEADER = re.compile(r"(?P<level>error|warning)(?:\[(?P<code>[^\]]+)\])?: ")
_LINT_CODE = re.compile(r"(warning|error)\[(?!E[0-9]{4}\])[^\]]+\]: ")


def _blocks(text: str) -> dict[str, list[str]]:
    """Each diagnostic of `text` (cargo's or ours), by its `-->` line."""
    found: dict[str, list[str]] = {}
    for block in re.split(r"\n\s*\n", text):
        lines = block.strip("\n").splitlines()
        if len(lines) >= 2 and _HEADER.match(lines[0]) and lines[1].lstrip().startswith("--> "):
            found[lines[1].strip()] = lines
    return found


def _ours(crate: str) -> tuple[str, str]:
    directory = DATA / crate
    parsed = parse_messages((directory / "clippy.jsonl").read_bytes(), LAYOUT,
                            staged=staged_copy(directory))
    text = render(make_report(parsed.findings, build_succeeded=parsed.build_success), "human")
    paths = {finding.path for finding in parsed.findings}
    # our grouping headings, and our header's lint code, normalised (see the docstring)
    kept = [_LINT_CODE.sub(lambda m: f"{m.group(1)}: ", line) for line in text.splitlines()
            if line not in paths]
    return "\n".join(kept), (directory / "rendered.txt").read_text()


def _split(lines: list[str]) -> tuple[list[str], list[list[str]]]:
    """The diagnostic's body and each `help:` block that carries a suggestion's lines."""
    starts = [i for i, line in enumerate(lines) if line.startswith("help: ")]
    body = lines[:starts[0]] if starts else lines
    ends = [*starts[1:], len(lines)] if starts else []
    helps = [lines[a:b] for a, b in zip(starts, ends, strict=True)]
    return body, helps


@pytest.mark.parametrize("crate", CRATES)
def test_every_diagnostic_is_laid_out_as_cargo_lays_it_out(crate: str) -> None:
    ours_text, cargo_text = _ours(crate)
    ours, cargo = _blocks(ours_text), _blocks(cargo_text)
    assert len(cargo) >= (6 if crate == "cargo-layout" else 3)  # control: the fixture has them
    assert set(ours) == set(cargo)
    for where, theirs in cargo.items():
        mine = ours[where]
        my_body, my_helps = _split(mine)
        their_body, their_helps = _split(theirs)
        assert my_body == their_body, f"{where}\nours:\n" + "\n".join(mine) + "\ncargo:\n" + "\n".join(theirs)
        assert [h[0] for h in my_helps] == [h[0] for h in their_helps], where
        for my_help, their_help in zip(my_helps, their_helps, strict=True):
            if any(re.match(r"\s*[0-9]+ ~ ", line) for line in their_help):
                wanted = [re.sub(r"^(\s*[0-9]+) ~ ", r"\1 + ", line) for line in their_help
                          if re.match(r"\s*[0-9]+ ~ ", line)]
                assert [line for line in my_help if re.match(r"\s*[0-9]+ \+ ", line)] == wanted, where
                continue
            assert my_help == their_help, (f"{where}\nours:\n" + "\n".join(my_help)
                                           + "\ncargo:\n" + "\n".join(their_help))


def test_the_comparison_sees_a_layout_that_differs() -> None:
    """Control: the same comparison on our old layout (`  -->` at a fixed indent, no `|`
    rows) finds the difference."""
    ours_text, cargo_text = _ours("cargo-layout")
    old = re.sub(r"^\s*--> ", "  --> ", ours_text, flags=re.M)
    old = "\n".join(line for line in old.splitlines() if not re.fullmatch(r"\s+\|", line))
    ours, cargo = _blocks(old), _blocks(cargo_text)
    assert set(ours) != set(cargo) or any(_split(ours[k])[0] != _split(cargo[k])[0] for k in cargo)


def test_the_layout_fixture_is_what_this_hosts_cargo_prints(tmp_path: Path) -> None:
    """tests/data/cargo-layout is what cargo prints today (capture.py regenerates it)."""
    if shutil.which("cargo") is None:
        pytest.fail("this test needs the host's cargo (scripts/test installs it)")
    crate = copy_crate(DATA / "cargo-layout", tmp_path / "crate")
    for left in ("clippy.jsonl", "rendered.txt"):
        (crate / left).unlink()
    run = run_clippy(crate, target_dir=tmp_path / "target")
    assert run.status == 0, run.stderr
    live = [json.loads(line)["message"]["rendered"] for line in run.stdout.splitlines()
            if b'"compiler-message"' in line]
    assert "".join(live) == (DATA / "cargo-layout" / "rendered.txt").read_text()
