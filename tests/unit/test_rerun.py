"""A suggested rerun (`--memory`, `--timeout`) is the user's own command line with one
value changed: pasted into a shell it reaches our real parser as the same request, and a
hostile path stays one inert word (issue 14)."""

from __future__ import annotations

import io
import re
import shlex
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from roteiro_py import errors
from roteiro_py.cli import app as cli
from roteiro_py.config import resolve
from roteiro_py.invocation import MAX_RERUN_CHARS, Invocation, shell_word
from roteiro_py.vocabulary import MAX_MEMORY_MIB, MAX_TIMEOUT_S

Raise = Callable[[Any], int]


def _lint(words: list[str], monkeypatch: pytest.MonkeyPatch, fail: BaseException | None) -> Any:
    """Run the real command line on `words`; the lint's core is replaced by a stand-in that
    records the request it was given (and raises `fail`), so no VM starts."""
    import roteiro_py.lint

    seen: list[Any] = []

    def stand_in(request: Any) -> int:
        seen.append(request)
        if fail is not None:
            raise fail
        return 0

    monkeypatch.setattr(roteiro_py.lint, "run_lint_command", stand_in)
    code = cli.main(words)
    assert len(seen) == 1, f"the parser refused {words!r} (exit {code})"
    return seen[0]


def _bash_words(line: str, tmp_path: Path) -> list[str]:
    """The words bash gives `pylint-sandbox` when `line` is pasted (a function stands in)."""
    out = tmp_path / "words"
    script = f"pylint-sandbox() {{ printf '%s\\0' \"$@\" > {shlex.quote(str(out))}; }}\n{line}\n"
    subprocess.run(["bash", "-c", script], check=True, timeout=30)
    return out.read_bytes().decode("utf-8", "surrogateescape").split("\0")[:-1]


def _suggested(stderr: str) -> str:
    lines = stderr.splitlines()
    assert "  run:" in lines, stderr
    return lines[lines.index("  run:") + 1].strip()


HOSTILE = ["my tree", "it's \"quoted\"", "$(touch {marker})", "`touch {marker}`", "new\nline",
           "tab\there", "bidi\u202eevil", "bytes-\udcff-end", "-dash-first", "--",
           # the printer's guard() escapes the `[` of a runner command; quoted, it must not
           "ci##[set-output name=x;]y"]


@pytest.mark.parametrize("name", HOSTILE)
@pytest.mark.parametrize(("option", "error", "new"), [
    ("--memory", lambda: errors.KilledBySignal("SIGKILL", 1536, "cargo clippy", oom_kills=1), "3072"),
    ("--timeout", lambda: errors.DeadlineExceeded("cargo clippy", 321.0), "642"),
])
def test_the_rerun_is_the_same_request_with_one_value_changed(
        name: str, option: str, error: Callable[[], errors.RoteiroError], new: str, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    marker = tmp_path / "ran"
    path = str(tmp_path / name.format(marker=marker))
    words = ["lint", "clippy", path, "-p", "--memory", "--features=a,b", "--memory", "512",
             "--format", "json=out file.json", "--format", "sarif", "--output", "o.sarif",
             "--image", "r.example/c@sha256:" + "e" * 64, "--accel", "tcg", "--timeout=9",
             "--target", "x86_64-unknown-linux-gnu", "--no-dep-cache", "-q", "--memory=256",
             "--", "-D", "warnings", "--memory", "7", "--timeout"]
    original = _lint(words, monkeypatch, error())
    line = _suggested(capsys.readouterr().err)
    assert "\n" not in line and line.startswith("pylint-sandbox lint clippy ")
    # Every earlier spelling of the option is gone: it is given once, with the new value.
    assert f"{option}=" not in line and line.count(f" {option} {new} ") == 1
    pasted = _bash_words(line, tmp_path)
    assert not marker.exists()
    rerun = _lint(pasted, monkeypatch, None)
    # The control: the one value did change, and to what the message says.
    key = {"--memory": "vm.memory_mib", "--timeout": "vm.timeout_s"}[option]
    assert rerun.flags[key] == (int(new), option) and original.flags[key] != rerun.flags[key]
    assert {k: v for k, v in rerun.flags.items() if k != key} == \
        {k: v for k, v in original.flags.items() if k != key}
    assert rerun.flags["lint.levels"][0] == ["-D", "warnings", "--memory", "7", "--timeout"]
    assert (rerun.path, rerun.formats, rerun.output) == (original.path, original.formats, original.output)
    assert str(rerun.path) == path and rerun.flags["lint.packages"][0] == ["--memory"]


def test_the_rerun_keeps_the_order_and_spelling_of_the_users_words(
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    _lint(["--debug", "lint", "clippy", "-qp", "--timeout", "--timeout", "5", "."], monkeypatch,
          errors.DeadlineExceeded("cargo clippy", 5.0))
    assert _suggested(capsys.readouterr().err) == \
        "pylint-sandbox --debug lint clippy -qp --timeout . --timeout 10"


def test_without_the_command_line_the_rerun_is_a_note_not_a_wrong_command() -> None:
    """Raised outside `lint clippy`'s boundary (a library call, another command), the error
    cannot know the user's path: it names the option, and offers no line to paste."""
    for error, said in ((errors.KilledBySignal("SIGKILL", 1024, "cargo clippy", oom_kills=1), "`--memory 2048`"),
                        (errors.DeadlineExceeded("waiting for a lock", 30.0), "`--timeout 60`")):
        guidance = error.guidance()
        assert not guidance.commands and any(said in note for note in guidance.notes)


def test_a_command_without_the_option_or_too_long_gets_no_line() -> None:
    invocation = Invocation(words=("fetch-deps", "."), options=frozenset({"--path"}),
                            takes_value=frozenset({"--path"}))
    assert invocation.with_option("--memory", "2") is None
    long = Invocation(words=("lint", "clippy", "x" * MAX_RERUN_CHARS), options=frozenset({"--memory"}),
                      takes_value=frozenset({"--memory"}))
    assert long.with_option("--memory", "2") is None
    assert long.with_option("--memory", "2") is None and Invocation(
        words=("lint", "clippy", "x" * (MAX_RERUN_CHARS - 60)), options=long.options,
        takes_value=long.takes_value).with_option("--memory", "2") is not None


def test_shell_words_are_plain_where_they_can_be() -> None:
    assert shell_word("plain/path-1.0") == "plain/path-1.0"
    assert shell_word("a b") == "'a b'"
    assert shell_word("a\nb") == "$'a\\x0ab'"
    assert shell_word("it's\x1b") == "$'it\\'s\\x1b'"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_on_a_narrow_terminal_every_command_is_still_one_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """rich wraps what it prints at the terminal's width with real newlines: a command
    wider than the terminal came out as two lines, and pasted, the first ran without the
    rest (the rerun without its new value) or a quoted word took a newline. Commands are
    printed whole; the terminal folds them, and a copy joins the fold."""
    marker = tmp_path / "ran"
    path = str(tmp_path / "a rather long workspace name" / "with a member in it")
    words = ["lint", "clippy", path, "--features", "one,two,three", "--format", "json=out file.json"]
    target = errors.TargetNotInImage("riscv64gc-unknown-linux-gnu", "r.example/c@sha256:" + "e" * 64)
    killed = errors.KilledBySignal("SIGKILL", 1536, "cargo clippy", oom_kills=1)
    monkeypatch.setenv("COLUMNS", "60")
    monkeypatch.delenv("NO_COLOR", raising=False)
    for error in (target, killed):
        stream = _Terminal()
        monkeypatch.setattr(sys, "stderr", stream)
        _lint(words, monkeypatch, error)
        shown = re.sub(r"\x1b\[[0-9;]*m", "", stream.getvalue()).splitlines()
        commands = error.guidance().commands
        assert max(map(len, commands)) > 60, "control: a command is wider than the terminal"
        assert all(f"    {command}" in shown for command in commands), shown
    line = _suggested("\n".join(shown))
    assert "--memory 3072" in line and _bash_words(line, tmp_path)[2] == path and not marker.exists()


@pytest.mark.parametrize(("option", "error", "given"), [
    ("--timeout", lambda s: errors.DeadlineExceeded("cargo clippy", float(s)), MAX_TIMEOUT_S // 2 + 1),
    ("--memory", lambda m: errors.KilledBySignal("SIGKILL", m, "cargo clippy", oom_kills=1), MAX_MEMORY_MIB // 2 + 1),
])
def test_the_rerun_stays_within_what_the_option_takes(
        option: str, error: Callable[[int], errors.RoteiroError], given: int, tmp_path: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Doubled past the bound `[vm]` states, the pasted rerun was refused as a bad value: it
    offers the bound instead, and nothing to paste once the run already had it."""

    most = {"--timeout": MAX_TIMEOUT_S, "--memory": MAX_MEMORY_MIB}[option]
    key = {"--timeout": "vm.timeout_s", "--memory": "vm.memory_mib"}[option]
    _lint(["lint", "clippy", ".", option, str(given)], monkeypatch, error(given))
    line = _suggested(capsys.readouterr().err)
    assert line.endswith(f" {option} {most}")
    rerun = _lint(_bash_words(line, tmp_path), monkeypatch, None)
    # The real resolution accepts what the rerun gives, and the control: one more is refused.
    section, name = key.split(".")
    assert getattr(getattr(resolve(tmp_path, flags=rerun.flags).settings, section), name) == most
    with pytest.raises(errors.ConfigError):
        resolve(tmp_path, flags={key: (most + 1, option)})
    _lint(["lint", "clippy", ".", option, str(most)], monkeypatch, error(most))
    guidance = capsys.readouterr().err
    assert "  run:" not in guidance and f"{option} {most}" not in guidance.replace(f"{option} or", "")
