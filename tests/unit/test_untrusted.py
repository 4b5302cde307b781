"""Untrusted text has one door out: no output line is a command to a terminal or a CI runner.

The GitHub Actions runner reads a line of a step's log as a command to itself (set-output,
add-mask, stop-commands, add-matcher) when it CONTAINS `##[` anywhere (ActionCommand.
TryParse, the legacy syntax) or starts, after TrimStart(), with `::` (TryParseV2). The
checker below mirrors both, and every test scans EVERY line of what the tool really prints
(the four report formats, refusals on stderr, `config`) with it; its control arm shows the
github format's own annotations ARE commands to it.
"""

from __future__ import annotations

import io
import json
import re
import sys
import unicodedata
from pathlib import Path

import pytest
import typer
from hypothesis import given
from hypothesis import strategies as st
from realcargo import make_report

from roteiro_py import errors
from roteiro_py.cli import app as cli
from roteiro_py.commands import config
from roteiro_py.guidance import printable
from roteiro_py.report import FORMATS, Finding, Location, Report, render
from roteiro_py.report.github import PROVENANCE_PREFIX
from roteiro_py.untrusted import MAX_FIELD_CHARS, guard, sanitise

# --- the runner's rules (actions/runner src/Runner.Common/ActionCommand.cs) ----------------

#: The commands the runner registers (ActionCommandManager and its extensions), compared
#: case-insensitively there.
REGISTERED = frozenset({"stop-commands", "set-env", "set-output", "save-state", "add-mask",
                        "add-path", "add-matcher", "remove-matcher", "warning", "error",
                        "notice", "debug", "group", "endgroup", "echo"})
#: .NET Char.IsWhiteSpace, what String.TrimStart() removes.
DOTNET_WHITESPACE = ("\t\n\v\f\r \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200b)))
                     + "\u2028\u2029\u202f\u205f\u3000")
#: Default_Ignorable_Code_Point outside Cf (DerivedCoreProperties.txt).
IGNORABLE_NOT_CF = re.compile("[\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180f\u2065\u3164"
                              "\ufe00-\ufe0f\uffa0\ufff0-\ufff8\U000e0000-\U000e0fff]")
SGR = re.compile(r"\x1b\[[0-9;]*m")


def runner_lines(text: str) -> list[str]:
    """How the runner cuts a stream into lines (StreamReader.ReadLine)."""
    return re.split(r"\r\n|\r|\n", text)


def _name(info: str) -> str | None:
    space = info.find(" ")
    name = info if space < 0 else info[:space]
    return name if name.lower() in REGISTERED else None


def try_parse_v2(line: str) -> str | None:
    message = line.lstrip(DOTNET_WHITESPACE)
    if not message.startswith("::"):
        return None
    end = message.find("::", 2)
    return None if end < 0 else _name(message[2:end])


def try_parse(line: str) -> str | None:
    prefix = line.find("##[")
    if prefix < 0:
        return None
    bracket = line.find("]", prefix)
    return None if bracket < 0 else _name(line[prefix + 3:bracket])


def views(line: str) -> list[str]:
    """The line as the runner may compare it: as is, and (stricter) without what ICU's
    culture-sensitive IndexOf/StartsWith skip (controls, format and ignorable characters)
    and without colour codes."""
    stripped = "".join(ch for ch in SGR.sub("", line)
                       if unicodedata.category(ch) not in ("Cc", "Cf") or ch == "\t")
    return [line, IGNORABLE_NOT_CF.sub("", stripped)]


def runner_commands(text: str) -> list[tuple[str, str]]:
    """(command, line) for every line the runner would execute."""
    found = []
    for line in runner_lines(text):
        for view in views(line):
            name = try_parse_v2(view) or try_parse(view)
            if name:
                found.append((name, line))
                break
    return found


def suspicious(text: str, *, own: frozenset[str] = frozenset()) -> list[str]:
    """Lines carrying `##[` or starting with `::` (registered or not), bar the tool's own."""
    bad = []
    for line in runner_lines(text):
        for view in views(line):
            head = view.lstrip(DOTNET_WHITESPACE)
            is_own = bool(own) and re.match(r"::(?:" + "|".join(own) + ") .*::", head)
            if "##[" in view or (head.startswith("::") and not is_own):
                bad.append(line)
                break
    return bad


def test_control_arm_the_checker_sees_commands() -> None:
    assert runner_commands("x ##[set-output name=x;]y") == [("set-output", "x ##[set-output name=x;]y")]
    assert [n for n, _ in runner_commands("ok\n    ::add-mask::x\r\u3000::stop-commands::t")] == [
        "add-mask", "stop-commands"]
    assert [n for n, _ in runner_commands("#\u200b#[add-mask]x")] == ["add-mask"]
    assert runner_commands("::warning file=a.rs,line=1::m") == [("warning", "::warning file=a.rs,line=1::m")]
    assert runner_commands("note: `::std` and #[derive(Debug)] are fine") == []
    assert suspicious("  ::nope::x") and suspicious("a ##[nope") and not suspicious("#[x] a::b")


# --- the reports ------------------------------------------------------------------------

DEPRECATED_SOURCE = '#[deprecated(note = "use g ##[set-output name=x;]y")]'
HOSTILE = ("use of deprecated function `f`: ##[set-output name=x;]y\n"
           "    ::add-mask::secret\n\u3000::stop-commands::tok\n::error file=src/x.rs::forged"
           "\n#\u200b#[add-matcher]m\u200e\u202e\u2066\u061c")


def hostile_report() -> Report:
    clean_one = Finding(code="clippy::needless_return", level="warning",
                        message="consider adding `#[derive(Debug)]` to `S`", path="src/ok.rs",
                        line=1, column=1, end_line=1, end_column=2)
    hostile = Finding(code="deprecated##[add-mask]c", level="warning", message=HOSTILE,
                      path="src/lib##[add-mask]p.rs", line=1, column=1, end_line=1, end_column=2,
                      snippet=DEPRECATED_SOURCE, suggestion="::add-mask::s ##[add-mask]s",
                      help=HOSTILE,
                      related=[Location(path="src/lib.rs", line=2, column=1, end_line=2,
                                        end_column=2, message=HOSTILE)])
    crate_level = Finding(code=None, level="error", message="::add-mask::top ##[set-output]z",
                          path=None, line=None, column=None, end_line=None, end_column=None)
    return make_report([clean_one, hostile, crate_level], build_succeeded=False)


def outputs(report: Report) -> dict[str, str]:
    texts = {format: render(report, format) for format in FORMATS}  # type: ignore[arg-type]
    texts["human-color"] = render(report, "human", color=True)
    return texts


def test_no_report_format_carries_a_runner_command() -> None:
    report = hostile_report()
    for format, text in outputs(report).items():
        own = frozenset({"warning", "error", "notice"}) if format == "github" else frozenset()
        assert not suspicious(text, own=own), (format, suspicious(text, own=own))
        commands = runner_commands(text)
        if format == "github":
            # Control: the format's own annotations are commands, one per finding, no more.
            assert sorted(name for name, _ in commands) == ["error", "notice", "warning", "warning"]
            assert all(line.startswith(("::warning file=", "::error title=", PROVENANCE_PREFIX))
                       for _, line in commands)
        else:
            assert commands == [], (format, commands)
    human = render(report, "human")
    # Control: the guest's text is shown, escaped where it would act, the rest unchanged.
    assert "consider adding `#[derive(Debug)]` to `S`" in human
    assert "##\\x5bset-output name=x;]y" in human and "\\x3a:add-mask::secret" in human
    assert '#[deprecated(note = "use g ##\\x5bset-output name=x;]y")]' in human
    assert "\\u200e\\u202e\\u2066\\u061c" in human and "#\\u200b#[add-matcher]" in human


def test_json_and_sarif_stay_json_and_decode_to_the_shown_text() -> None:
    report = hostile_report()
    decoded = json.loads(render(report, "json"))
    assert decoded["findings"][1]["message"] == report.findings[1].message
    assert "##\\x5bset-output" in decoded["findings"][1]["message"]
    sarif = json.loads(render(report, "sarif"))
    assert "##\\x5bset-output" in sarif["runs"][0]["results"][1]["message"]["text"]


def test_the_guard_breaks_a_command_formed_across_two_clean_fields() -> None:
    """Each field is clean alone; joined, `##` + `[` is a command neither held."""
    joined = sanitise("src/a##") + sanitise("[set-output name=x;]y")
    assert runner_commands(joined) == [("set-output", joined)], "control: the join is a command"
    assert runner_commands(guard(joined)) == [] and "##\\x5b" in guard(joined)
    indented = "note:\n" + sanitise("  ") + sanitise(":") + sanitise(":add-mask::x")
    assert runner_commands(indented) and runner_commands(guard(indented)) == []
    # In JSON the escape is one a JSON reader decodes back to what the guest wrote.
    document = json.dumps({"m": "a##"})[:-2] + '[add-mask]x"}'
    assert runner_commands(document)
    assert runner_commands(guard(document, json=True)) == []
    assert json.loads(guard(document, json=True)) == {"m": "a##[add-mask]x"}
    # The github format's own commands stay; a forged one does not.
    own = "::warning file=a.rs::m\n::add-mask::x\n::Warning file=b::n"
    assert [n for n, _ in runner_commands(guard(own, allowed={"warning"}))] == ["warning"]
    clean_text = "plain line\n  indented: a::b #[attr] [x]\n"
    assert guard(clean_text) == clean_text and guard(clean_text, json=True) == clean_text


# --- refusals on stderr -----------------------------------------------------------------


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


GUEST_STDERR = ("error: ##[set-output name=x;]y\n    ::add-mask::secret\n"
                "::stop-commands::t \u200e\u202e\u2066\u061c end")


@pytest.mark.parametrize("terminal", [False, True], ids=["pipe", "terminal"])
@pytest.mark.parametrize("error", [
    errors.VmFailed("the guest's init failed ##[add-mask]r", GUEST_STDERR),
    errors.ProbeFailed("reg.example/p##[add-mask]i@sha256:" + "0" * 64, "::add-mask::w", GUEST_STDERR),
    errors.ImageLacksLinter("reg.example/c##[add-mask]i@sha256:" + "0" * 64, GUEST_STDERR),
    errors.PackageRefused(Path("/t/tree##[add-mask]p/Cargo.lock"), "dep 1.0.0", GUEST_STDERR),
], ids=lambda e: type(e).__name__)
def test_refusals_on_stderr_carry_no_runner_command(
        error: errors.RoteiroError, terminal: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.delenv("NO_COLOR", raising=False)
    monkeypatch.setenv("TERM", "xterm-256color")

    def refuse() -> int:
        raise error

    with pytest.raises(typer.Exit) as caught:
        cli._guard(refuse)
    text = stream.getvalue()
    assert caught.value.exit_code == error.exit_code
    assert text.startswith("\x1b[") if terminal else text.startswith("error: "), "control"
    assert runner_commands(text) == [] and not suspicious(text), text
    # Cf marks are escaped in refusals as they are in reports.
    assert not re.search("[\u200e\u202e\u2066\u061c]", text)
    if "the guest said" in text or "came back" in text or "Cargo said" in text:
        assert "\\u200e\\u202e\\u2066\\u061c" in text


def test_cf_marks_in_a_refusal_value_are_escaped() -> None:
    text = errors.ScratchUnavailable(Path("/s/x\u200ey\u202ez\u2066w\u061cv"), "full").guidance(
    ).render_text()
    assert "x\\u200ey\\u202ez\\u2066w\\u061cv" in text


def test_an_internal_error_message_is_sanitised(monkeypatch: pytest.MonkeyPatch) -> None:
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stderr", stream)

    def broken() -> int:
        raise RuntimeError("x\n::add-mask::s ##[set-output name=a;]b \x1b]8;;http://e\x07")

    with pytest.raises(typer.Exit):
        cli._guard(broken)
    text = stream.getvalue()
    assert text.startswith("internal error: RuntimeError: x"), "control"
    assert runner_commands(text) == [] and "\x1b" not in text and text.count("\n") == 1


# --- config, from a hostile roteiro.toml ---------------------------------------------------

ROTEIRO_TOML = """[lint]
image = "[link=https://evil.example]ghcr.io/x[/link] [reverse]y[/reverse] ##[set-output name=x;]y\\u200e"
features = ["::add-mask::f", "[reverse]g##[add-mask]h"]
"""


def _show(tree: Path, monkeypatch: pytest.MonkeyPatch, *, terminal: bool) -> str:
    (tree / "roteiro.toml").write_text(ROTEIRO_TOML)
    stream = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    monkeypatch.setenv("TERM", "xterm-256color")
    monkeypatch.setenv("COLUMNS", "400")  # one row a line, so a value can be looked for
    monkeypatch.delenv("NO_COLOR", raising=False)
    assert config.show(tree) == 0
    return stream.getvalue()


def test_config_show_on_a_terminal_renders_values_as_text(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _show(tmp_path, monkeypatch, terminal=True)
    assert "\x1b]8;" not in text and "\x1b[7m" not in text, "markup from the repository ran"
    assert "\x1b[2m" in text, "control: our own styling (dim defaults) is still applied"
    assert "[link=https://evil.example]ghcr.io/x[/link]" in text and "[reverse]y" in text
    assert runner_commands(text) == [] and not suspicious(text)
    assert "\u200e" not in text and "\\u200e" in text


def test_config_show_get_set_in_a_pipe_carry_no_runner_command(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    text = _show(tmp_path, monkeypatch, terminal=False)
    assert "lint.features" in text and "add-mask" in text, "control: the values are shown"
    assert runner_commands(text) == [] and not suspicious(text), text
    stream = io.StringIO()
    monkeypatch.setattr(sys, "stdout", stream)
    config.get("lint.image", tmp_path)
    config.set_("lint.features", '["##[add-mask]k"]', "repo", tmp_path)
    assert "##\\x5badd-mask]" in stream.getvalue()
    assert runner_commands(stream.getvalue()) == [], stream.getvalue()


# --- the sanitiser itself -----------------------------------------------------------------

#: Heavy on what matters: the runner's markers, line breaks, whitespace, C0/C1, bidi and
#: zero-width marks, separators, a surrogate, a private-use and an ignorable character.
ALPHABET = st.sampled_from(list("#[]:: \t\n\r\x0b\x1b\x85\xa0\u3000ab%\\")
                           + ["\u200b", "\u200e", "\u202e", "\u2066", "\u061c", "\u2028",
                              "\u2029", "\ufeff", "\ud800", "\ue000", "\ufe0f", "\u3164",
                              "\x9b", "\x00"])
BANNED = {"Cc", "Cf", "Cs", "Co", "Zl", "Zp"}


@given(text=st.text(alphabet=ALPHABET, max_size=60), keep_newlines=st.booleans(),
       keep_tabs=st.booleans(), prefix=st.sampled_from(["", "  ", "\t", "error: ", "  | ", "    "]))
def test_sanitised_text_in_any_line_is_inert(text: str, keep_newlines: bool, keep_tabs: bool,
                                             prefix: str) -> None:
    once = sanitise(text, keep_newlines=keep_newlines, keep_tabs=keep_tabs)
    assert sanitise(once, keep_newlines=keep_newlines, keep_tabs=keep_tabs) == once
    kept = ("\n" if keep_newlines else "") + ("\t" if keep_tabs else "")
    assert not [ch for ch in once if unicodedata.category(ch) in BANNED and ch not in kept]
    assert not IGNORABLE_NOT_CF.search(once)
    for line in (prefix + once + " end").split("\n"):
        assert "##[" not in line and not line.lstrip(DOTNET_WHITESPACE).startswith("::")
    assert runner_commands(prefix + once) == []


@given(head=st.text(alphabet=ALPHABET, max_size=30), tail=st.text(alphabet=ALPHABET, max_size=30))
def test_guard_leaves_no_command_whatever_the_fields(head: str, tail: str) -> None:
    joined = sanitise(head) + sanitise(tail) + "\n" + sanitise(tail) + sanitise(head)
    assert runner_commands(guard(joined)) == [] and not suspicious(guard(joined))
    assert guard(guard(joined)) == guard(joined)


def test_length_is_bounded_at_the_stated_limit_and_stays_put() -> None:
    long = "\x1b" * (MAX_FIELD_CHARS * 2)
    once = sanitise(long)
    assert len(once) <= MAX_FIELD_CHARS and sanitise(once) == once
    assert once.endswith(f"[truncated to {MAX_FIELD_CHARS} characters]")
    assert sanitise("x" * MAX_FIELD_CHARS) == "x" * MAX_FIELD_CHARS  # control: at the limit
    assert printable("y" * (MAX_FIELD_CHARS + 1)).endswith(f"{MAX_FIELD_CHARS} characters]")


def test_progress_descriptions_are_text_not_markup(monkeypatch: pytest.MonkeyPatch) -> None:
    """rich's Progress reads a column given as a str as markup; a digest is outside text."""
    import rich
    from rich.console import Console

    from roteiro_py.commands import prefetch

    buffer = io.StringIO()
    monkeypatch.setattr(rich, "_console", Console(file=buffer, force_terminal=True,
                                                  color_system="standard", width=200))
    monkeypatch.setattr(prefetch, "_interactive", lambda: True)
    with prefetch._byte_progress() as progress:
        progress("[reverse]sha256:x", 1, 2)
    text = buffer.getvalue()
    assert "\x1b[7m" not in text and "[reverse]sha256:x" in text
    assert "1/2 bytes" in text, "control: the progress bar did render on the terminal"


def test_a_terminal_wrapping_guest_text_starts_no_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rich wraps at spaces: a sanitised value whose `::` sits mid-line can start the next
    line after the wrap, which is why the guard runs on the rendered output."""
    from rich.console import Console

    error = errors.ProbeFailed("r/x@sha256:" + "0" * 64, "toolchain", "word " * 9 + "::add-mask::secret")
    raw = io.StringIO()
    Console(file=raw, force_terminal=True, width=80, markup=False).print(
        error.guidance().render_rich())
    assert runner_commands(raw.getvalue()), "control: at 80 columns the wrap forms a command"
    stream = _Terminal()
    monkeypatch.setattr(sys, "stderr", stream)
    monkeypatch.setenv("COLUMNS", "80")
    monkeypatch.delenv("NO_COLOR", raising=False)

    def refuse() -> int:
        raise error

    with pytest.raises(typer.Exit):
        cli._guard(refuse)
    assert "add-mask" in stream.getvalue() and runner_commands(stream.getvalue()) == []
    # The same for a table cell that wraps in `config show`.
    (tmp_path / "roteiro.toml").write_text(
        '[lint]\nfeatures = ["' + "w " * 40 + '::add-mask::f"]\n')
    out = _Terminal()
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setenv("COLUMNS", "60")
    assert config.show(tmp_path) == 0
    assert "add-mask" in out.getvalue() and runner_commands(out.getvalue()) == []


@pytest.mark.parametrize("format", ["human", "json", "sarif", "github"])
def test_the_cli_echoing_a_hostile_roteiro_toml_prints_no_runner_command(
        tmp_path: Path, format: str) -> None:
    """The real command line, as CI runs it: a malformed image reference from the tree's
    roteiro.toml is echoed in the refusal on stderr, whatever --format says."""
    import os
    import subprocess

    exe = Path(sys.executable).with_name("pylint-sandbox")
    (tmp_path / "roteiro.toml").write_text(
        '[lint]\nimage = "reg.example/x@sha256:##[set-output name=x;]y \\u200e"\n')
    result = subprocess.run([str(exe), "lint", "clippy", "--format", format, str(tmp_path)],
                            cwd=tmp_path, capture_output=True, text=True, timeout=60,
                            env={**os.environ, "NO_COLOR": "1"})
    assert result.returncode == errors.EXIT_USAGE, result.stderr
    assert "set-output" in result.stderr, "control: the reference is echoed"
    assert runner_commands(result.stderr + result.stdout) == [], result.stderr
    assert not suspicious(result.stderr) and "\u200e" not in result.stderr
    shown = subprocess.run([str(exe), "config", "show"], cwd=tmp_path, capture_output=True,
                           text=True, timeout=60)
    assert shown.returncode == 0 and "set-output" in shown.stdout
    assert runner_commands(shown.stdout) == [] and not suspicious(shown.stdout)


def test_a_deprecation_note_rustc_quotes_reaches_no_format_as_a_command() -> None:
    """Plain source, no escape sequence needed: `#[deprecated(note = "...")]` is quoted by
    rustc in the warning at every use, so the tree chooses a line of the step's log."""
    from roteiro_py.clippy.parse import PathLayout, parse_messages

    note = "use g ##[set-output name=x;]y"
    span = {"file_name": "src/main.rs", "is_primary": True, "line_start": 3, "line_end": 3,
            "column_start": 5, "column_end": 6, "label": None, "expansion": None}
    diagnostic = {"message": f"use of deprecated function `f`: {note}", "level": "warning",
                  "code": {"code": "deprecated"}, "spans": [span], "children": []}
    parsed = parse_messages(json.dumps({"reason": "compiler-message", "message": diagnostic})
                            .encode(), PathLayout())
    assert [f.code for f in parsed.findings] == ["deprecated"], "control: the warning is reported"
    report = make_report(parsed.findings)
    for format, text in outputs(report).items():
        own = frozenset({"warning", "notice"}) if format == "github" else frozenset()
        assert "set-output" in text and not suspicious(text, own=own), format
        assert [name for name, _ in runner_commands(text)] == (
            ["notice", "warning"] if format == "github" else []), format  # the provenance, the finding


def test_sarif_markdown_carries_no_link_from_a_rule_name() -> None:
    """Code scanning renders a rule's `help.markdown`; a code the parser would have dropped
    but a hand-built or reloaded report carries must not become a link there."""
    evil = Finding(code="clippy::x`](https://evil.example)[`y", level="warning", message="m",
                   path="src/a.rs", line=1, column=1, end_line=1, end_column=2)
    fine = evil.model_copy(update={"code": "clippy::needless_return"})
    rules = json.loads(render(make_report([evil, fine]), "sarif"))["runs"][0]["tool"]["driver"]["rules"]
    by_id = {rule["id"]: rule for rule in rules}
    assert "evil.example" not in json.dumps(by_id[evil.code]["help"].get("markdown", ""))
    assert "](https://rust-lang.github.io/" in by_id["clippy::needless_return"]["help"]["markdown"], (
        "control: a real lint name still gets its Markdown link")


def test_a_name_holding_a_nul_byte_is_refused_not_an_internal_error(tmp_path: Path) -> None:
    """os.open raises ValueError for an embedded NUL; a tree's manifest can name such a
    path (`package.workspace = "../\\u0000x"`), and it escaped as exit 4 (review of issue 20)."""
    from roteiro_py.untrusted import FileRefused, read_bounded

    with pytest.raises(FileRefused, match="NUL byte"):
        read_bounded(tmp_path / "a\0b", 10)
    (tmp_path / "ab").write_text("x")
    assert read_bounded(tmp_path / "ab", 10) == b"x"  # control
