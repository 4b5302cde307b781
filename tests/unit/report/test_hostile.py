"""No guest string reaches a terminal or a workflow command raw.

The real case: tests/data/evil-build, whose build script generates code with a
deprecation note full of escape sequences (OSC 8 hyperlink, CSI 2J, C1 CSI, a bidi
override, \\r\\n and a forged `::error::`), which rustc quotes in a real diagnostic; and
whose source line carries a raw ESC that the snippet reads. Then random control bytes in
every guest field, through the parser and every renderer.
"""

from __future__ import annotations

import json
import random
import re

import pytest
from realcargo import CargoRun, make_report

from roteiro_py.clippy.parse import PathLayout, parse_messages
from roteiro_py.report import FORMATS, Report, render
from roteiro_py.report.github import PROVENANCE_PREFIX
from roteiro_py.report.safe import clean, is_clean

#: Anything a terminal or the runner could act on: C0 but \n and \t, DEL, C1, bidi, LS/PS.
UNSAFE = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u061c\u200b-\u200f\u2028-\u202e"
                    r"\u2060-\u206f\ufeff\ufff9-\ufffb]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def outputs(report: Report) -> dict[str, str]:
    texts = {format: render(report, format) for format in FORMATS}  # type: ignore[arg-type]
    texts["human-color"] = render(report, "human", color=True)
    return texts


def test_control_arm_the_real_diagnostic_carries_escapes(evil_run: CargoRun) -> None:
    messages = [json.loads(line)["message"]["message"] for line in evil_run.stdout.splitlines()
                if b'"compiler-message"' in line]
    deprecated = next(m for m in messages if m.startswith("use of deprecated"))
    for raw in ("\x1b]8;;http://evil.example\x07", "\x1b[2J", "\x9b31m", "\u202e",
                "\r\n::error::forged"):
        assert raw in deprecated


def test_evil_build_output_is_neutralised(evil_report: Report) -> None:
    assert {f.code for f in evil_report.findings} == {"deprecated", "clippy::needless_return"}
    snippet = next(f.snippet for f in evil_report.findings if f.code == "clippy::needless_return")
    assert snippet is not None and "\\x1b[2J" in snippet  # the raw ESC, shown escaped
    for format, text in outputs(evil_report).items():
        leftover = SGR.sub("", text) if format == "human-color" else text
        assert not UNSAFE.search(leftover), (format, UNSAFE.findall(leftover))
        shown = "\\x1b]8;;http://evil.example\\x07"
        assert (json.dumps(shown)[1:-1] if format in ("json", "sarif", "gitlab") else shown) in text
    github = render(evil_report, "github").splitlines()
    assert github[0].startswith(PROVENANCE_PREFIX)  # the run's provenance, then one a finding
    assert sum(line.startswith("::") for line in github[1:]) == len(evil_report.findings)
    assert not any(line.startswith("::error::forged") for line in github)


def test_colour_output_contains_only_riches_own_sgr(evil_report: Report) -> None:
    text = render(evil_report, "human", color=True)
    assert SGR.search(text), "control: colour output does use escapes"
    assert "\x1b" not in SGR.sub("", text)


def _hostile(rng: random.Random, *, path: bool = False) -> str:
    """Random text rich in controls; for a path, no `/`, `.`, NUL or backslash, which the
    parser rightly treats as leaving the repository (tested in tests/unit/clippy/test_parse.py)."""
    controls = (*range(1 if path else 0, 0x20), 0x7f, *range(0x80, 0xa0), 0x202e, 0x2066,
                0x200f, 0x2028, 0xfeff, 0x061c)
    alphabet = [chr(c) for c in controls] + list("ab:,%[]" if path else "ab:,%/.[]\\")
    return "".join(rng.choice(alphabet) for _ in range(rng.randint(1, 40)))


@pytest.mark.parametrize("seed", range(25))
def test_random_control_bytes_never_survive(seed: int) -> None:
    rng = random.Random(seed)
    lines = []
    for _ in range(12):
        span = {"file_name": "src/" + _hostile(rng, path=True) + ".rs", "is_primary": True,
                "line_start": 1, "line_end": 1, "column_start": 1, "column_end": 2,
                "label": _hostile(rng), "expansion": None}
        other = {**span, "is_primary": False, "line_start": 2, "line_end": 2}
        diag = {"message": _hostile(rng), "level": rng.choice(["error", "warning", "note"]),
                "code": {"code": _hostile(rng)}, "spans": [span, other],
                "children": [{"level": "help", "message": _hostile(rng), "spans": [
                    {**span, "suggested_replacement": _hostile(rng)}]}]}
        lines.append(json.dumps({"reason": "compiler-message", "message": diag}))
    parsed = parse_messages("\n".join(lines).encode(), PathLayout())
    assert len(parsed.findings) == 12, "control: the hostile findings are all reported"
    report = make_report(parsed.findings, build_succeeded=False)
    for format, text in outputs(report).items():
        leftover = SGR.sub("", text) if format == "human-color" else text
        assert not UNSAFE.search(leftover), (format, UNSAFE.findall(leftover))
    github = render(report, "github").splitlines()
    assert github[0].startswith(PROVENANCE_PREFIX)
    assert sum(line.startswith("::") for line in github[1:]) == 12


def test_clean_is_idempotent_and_total() -> None:
    rng = random.Random(7)
    for _ in range(200):
        text = _hostile(rng)
        once = clean(text)
        assert clean(once) == once and is_clean(once) and not UNSAFE.search(once)
    assert clean("tab\there", keep_tabs=True) == "tab\there"
    assert clean("a\nb") == "a\\x0ab" and clean("a\nb", keep_newlines=True) == "a\nb"


def test_no_line_of_the_human_report_is_a_runner_command() -> None:
    """Multi-line guest strings must not start a CI log line with `::` or `##[`."""
    from roteiro_py.report.model import Finding, Location

    forged = "ok\n::add-mask::abc\n::error file=src/main.rs,line=1::forged\n  ##[error]old style\n::stop-commands::t"
    finding = Finding(code="clippy::x", level="warning", message=forged, path="src/lib.rs", line=1,
                      column=1, end_line=1, end_column=2, help=forged,
                      related=[Location(path="src/lib.rs", line=1, column=1, end_line=1, end_column=2,
                                        message=forged)])
    report = make_report([finding])
    for color in (False, True):
        text = render(report, "human", color=color)
        plain = re.sub(r"\x1b\[[0-9;]*m", "", text)
        lines = [line.lstrip() for line in plain.splitlines()]
        assert not [line for line in lines if line.startswith(("::", "##["))], plain
        assert "add-mask" in plain and "forged" in plain  # shown, not dropped


def _newline_findings(count: int, newlines: int) -> bytes:
    """`count` findings whose messages are a word and `newlines` newlines (8 KB of JSON)."""
    diag = {"level": "warning", "code": None, "children": [],
            "spans": [{"file_name": "src/lib.rs", "line_start": 1, "column_start": 1,
                       "is_primary": True},
                      {"file_name": "src/lib.rs", "line_start": 2, "column_start": 1,
                       "is_primary": False, "label": "label\n" + "\n" * newlines}]}
    out = [json.dumps({"reason": "compiler-message",
                       "message": {**diag, "message": f"m{i}\nsecond" + "\n" * newlines,
                                   "children": [{"level": "help", "message": "h\n" * newlines,
                                                 "spans": [], "children": []}]}})
           for i in range(count)]
    out.append(json.dumps({"reason": "build-finished", "success": True}))
    return ("\n".join(out) + "\n").encode()


def test_the_human_report_of_a_flood_of_newlines_is_bounded_per_finding(
        monkeypatch: pytest.MonkeyPatch) -> None:
    # 3 messages of 4,000 newlines (24 KB of guest output) were 12,000 lines and 12,000
    # console.print calls (~180 us each: the 64 MiB output cap was ~1.6 h of host CPU).
    from rich.console import Console

    from roteiro_py.report import human

    report = make_report(parse_messages(_newline_findings(3, 4000), PathLayout()).findings)
    first = report.findings[0]
    assert first.help is not None

    def lines(field: str) -> int:
        return field.removesuffix("\n").count("\n") + 1

    assert lines(first.message) > 1000 and lines(first.help) > 1000  # control: the flood
    assert first.message in json.loads(render(report, "json"))["findings"][0]["message"]
    prints = 0
    real_print = Console.print

    def counting_print(self: Console, *args: object, **kwargs: object) -> None:
        nonlocal prints
        prints += 1
        real_print(self, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(Console, "print", counting_print)
    text = render(report, "human")
    assert prints <= 3 * 2 + 3, prints                        # one Text per finding
    per_finding = 2 * (human.MAX_SHOWN_LINES + 1) + 5         # message, help, location...
    assert text.count("\n") <= 3 * per_finding, text.count("\n")
    assert "warning: m0\n   second\n" in text                 # control: lines ARE shown
    assert f"… {lines(first.message) - human.MAX_SHOWN_LINES} more lines" in text
    assert f"… {lines(first.help) - human.MAX_SHOWN_LINES} more lines" in text
    note = first.related[0].message
    # a related span's label (cut at MAX_LABEL_CHARS, still a flood of lines):
    assert note is not None and lines(note) > human.MAX_SHOWN_LINES * 10
    assert f"also src/lib.rs:2:1 (label … {lines(note) - 1} more lines)\n" in text  # one line


def test_every_field_of_an_annotation_is_escaped() -> None:
    """The suggestion and the doc link joined the message (issue 13): a suggestion is the
    guest's text as much as the message, and `cargo clippy --fix` would write it."""
    from roteiro_py.report.model import Finding

    forged = "x\n::add-mask::s3cret\r\n::error file=a.rs::forged %0A::warning::also\r"
    finding = Finding(code="clippy::needless_return", level="warning", message="m %0A::error::a",
                      path="src/a,b:c.rs", line=1, column=1, end_line=1, end_column=2,
                      help="h\n::stop-commands::tok", suggestion=forged)
    spanless = finding.model_copy(update={"path": None, "line": None, "column": None, "end_line": None,
                                          "end_column": None, "code": "clippy::x::\nerror", "level": "error"})
    report = make_report([finding, spanless])
    text = render(report, "github")
    provenance, *lines = text.splitlines()
    assert provenance.startswith(PROVENANCE_PREFIX)
    assert sum(line.startswith("::") for line in lines) == 2
    assert not [line for line in lines if not line.startswith(("::warning ", "::error ")) and
                line.lstrip().startswith("::")]
    first = lines[0]
    assert "%250A::error::a" in first and "%250A::warning::also" in first  # a literal %0A stays text
    assert "::add-mask::" not in first.split("::", 2)[2].replace("%0A::add-mask::", "")
    message = first.split("::", 2)[2].replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
    assert f"suggestion:\n{clean(forged, keep_newlines=True, keep_tabs=True)}" in message  # control: kept
    assert "help: " + clean("h\n::stop-commands::tok", keep_newlines=True) in message
    assert message.endswith("index.html#needless_return")
    # the spanless one's title (its code) cannot end the property list or the command
    title = lines[1].split("::", 2)[1]
    assert title.startswith("error title=") and "," not in title.removeprefix("error title=")


def test_every_field_of_a_suggestion_in_an_annotation_is_escaped() -> None:
    """The parts of a suggestion (`fixes`: help, lines before and after, replacements)
    joined the annotation: each is the guest's or the tree's text, escaped like the rest."""
    from roteiro_py.report.model import Finding

    forged = "x\n::add-mask::s3cret\r\n::error file=a.rs::forged %0A::warning::also\r"
    edit = {"path": "src/a.rs", "line": 1, "column": 1, "end_line": 1, "end_column": 2}
    finding = Finding.model_validate({
        "code": "clippy::needless_return", "level": "warning", "message": "m", "path": "src/a.rs", "line": 1,
        "column": 1, "end_line": 1, "end_column": 2, "fixes": [
            {"message": forged, "edits": [{**edit, "replacement": forged}], "line": 1, "before": forged,
             "after": forged + "y"},
            {"message": forged, "edits": [{**edit, "replacement": forged}, {**edit, "replacement": "z" + forged}]}]})
    provenance, *lines = render(make_report([finding]), "github").splitlines()
    assert provenance.startswith(PROVENANCE_PREFIX)
    assert [line.split(" ", 1)[0] for line in lines if line.lstrip().startswith("::")] == ["::warning"]
    message = lines[0].split("::", 2)[2]
    assert "%250A::warning::also" in message and "\n" not in message and "\r" not in message
    text = message.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")
    kept = clean(forged, keep_newlines=True, keep_tabs=True)
    # control: every part is shown: both helps, both replacements, the lines before and after
    assert text.count(kept) == 4 and f"replace with:\nz{kept}" in text
    assert "\n2   \\x3a:add-mask::s3cret\n" in text and text.count("::warning::also\\x0d") == 6
    assert "::warning::also\\x0dy\n" in text


def test_the_markdown_summary_of_the_evil_build_is_inert(evil_report: Report) -> None:
    from html.parser import HTMLParser

    from markdown_it import MarkdownIt

    from roteiro_py.report.markdown import render_markdown

    text = render_markdown(evil_report)
    assert not UNSAFE.search(text)
    assert "\\x1b]8;;http://evil.example\\x07" in text  # control: shown, escaped

    class Links(HTMLParser):
        hrefs: list[str | None] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag in ("a", "img", "script", "iframe"):
                self.hrefs.append(dict(attrs).get("href"))

    links = Links()
    links.feed(MarkdownIt("commonmark").enable("table").render(text))
    assert all(href and href.startswith("https://rust-lang.github.io/") or
               href == "https://doc.rust-lang.org/rustc/lints/listing/index.html" for href in links.hrefs)
    assert not any("evil" in (href or "") for href in links.hrefs)
