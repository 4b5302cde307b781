"""The human report on a real terminal (issue 13): never vanishing, coloured as asked.

`script -qc ...` gives a program a pty that reports 0 columns; rich given width 0 prints
nothing, and our own `os.get_terminal_size()` passed it on: the report vanished with the
exit status still 1. These tests run `run_lint_command` in a child process whose stdout
is a real pty. The VM run itself (`lint.lint`) is replaced by one returning a report
saved from real cargo output: a VM does not run in the unit tests, and everything after
it (the settings, the console, the renderer, the write) is the real code.
"""

from __future__ import annotations

import fcntl
import os
import pty
import re
import struct
import subprocess
import sys
import termios
from pathlib import Path

import pytest

from roteiro_py.report.human import FALLBACK_WIDTH, color_choice, screen_for
from roteiro_py.report.model import Report
from tests.unit.pty_support import drain

ROOT = Path(__file__).resolve().parents[3]
SGR = re.compile(r"\x1b\[[0-9;]*m")

CHILD = r"""
import io, os, sys
from pathlib import Path
from rich.console import Console
from roteiro_py import config, lint
from roteiro_py.report.model import Report

report = Report.model_validate_json(Path(sys.argv[1]).read_text())

def ran(request, progress):  # the VM run; everything after it is the real code
    return report, config.resolve(request.path, flags=request.flags).settings

lint.lint = ran
# what this terminal reports, and what rich makes of a width of 0: the control
columns = os.get_terminal_size(1).columns
empty = io.StringIO()
Console(file=empty, width=columns, soft_wrap=True).print("anything")
sys.stderr.write(f"columns={columns} zero-width-printed={empty.getvalue()!r}\n")
flags = {"lint.color": (sys.argv[3] or None, "--color")}
sys.exit(lint.run_lint_command(lint.LintRequest(path=Path(sys.argv[2]), flags=flags)))
"""


def on_a_pty(report: Report, tmp_path: Path, color: str = "", env: dict[str, str] | None = None,
             columns: int = 0) -> tuple[int, str, str]:
    """Run the report's printing in a child whose stdout is a pty of `columns` columns
    (0: a new pty's size, as under `script`); its exit status, what reached the pty, and
    its stderr."""
    saved = tmp_path / "report.json"
    saved.write_text(report.model_dump_json())
    primary, secondary = pty.openpty()
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 0, columns, 0, 0))
    base = {k: v for k, v in os.environ.items()
            if k not in ("COLUMNS", "NO_COLOR", "FORCE_COLOR", "TTY_COMPATIBLE", "CARGO_TERM_COLOR", "CI")}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(saved), str(tmp_path), color],
                             stdin=subprocess.DEVNULL, stdout=secondary, stderr=subprocess.PIPE,
                             env={**base, "TERM": "xterm", **(env or {})}, cwd=ROOT)
    os.close(secondary)
    written = drain(primary)
    assert child.stderr is not None
    stderr = child.stderr.read().decode()
    child.stderr.close()
    return child.wait(timeout=60), written.decode().replace("\r\n", "\n"), stderr


def test_a_terminal_of_zero_columns_still_gets_the_report(demo_report: Report, tmp_path: Path) -> None:
    status, shown, stderr = on_a_pty(demo_report, tmp_path)
    # control: this pty is the one that made the report vanish: 0 columns, and rich
    # prints nothing at that width
    assert "columns=0 zero-width-printed=''" in stderr, stderr
    assert status == 1, stderr  # the demo has warnings: --fail-on warning
    plain = SGR.sub("", shown)
    assert " --> rust/crates/demo-core/src/lib.rs:5:5" in plain
    assert "4 findings (4 warnings); build succeeded" in plain
    assert SGR.search(shown)  # auto on a terminal: coloured


@pytest.mark.parametrize(("color", "env", "coloured"), [
    ("", {}, True),                                   # auto on a terminal
    ("never", {}, False),
    ("", {"NO_COLOR": "1"}, False),                   # no-color.org
    ("always", {"NO_COLOR": "1"}, True),              # a flag outranks NO_COLOR
    ("", {"CARGO_TERM_COLOR": "never"}, False),       # as cargo in the same shell
    ("auto", {"CARGO_TERM_COLOR": "never"}, True),    # our own setting outranks cargo's
    ("", {"TERM": "dumb"}, False),
])
def test_color_follows_the_flag_then_cargo_then_the_terminal(
        demo_report: Report, tmp_path: Path, color: str, env: dict[str, str], coloured: bool) -> None:
    status, shown, stderr = on_a_pty(demo_report, tmp_path, color, env, columns=120)
    assert status == 1, stderr
    assert "4 findings (4 warnings)" in SGR.sub("", shown)
    assert bool(SGR.search(shown)) is coloured


def test_the_screen_rich_detects() -> None:
    import io

    not_a_tty = io.StringIO()
    assert screen_for(not_a_tty, "auto", environ={}).color is False
    assert screen_for(not_a_tty, "auto", environ={"FORCE_COLOR": "1"}).color is True
    assert screen_for(not_a_tty, "auto", environ={"FORCE_COLOR": "1", "NO_COLOR": "1"}).color is False
    assert screen_for(not_a_tty, "auto", environ={"TTY_COMPATIBLE": "1"}).color is True
    assert screen_for(not_a_tty, "auto", to_file=True, environ={"FORCE_COLOR": "1"}).color is False
    assert screen_for(not_a_tty, "always", environ={"NO_COLOR": "1"}).color is True
    assert screen_for(not_a_tty, "never", environ={"FORCE_COLOR": "1"}).color is False
    assert screen_for(not_a_tty, "auto", environ={"COLUMNS": "132"}).width == 132
    assert screen_for(not_a_tty, "auto", environ={"COLUMNS": "0"}).width == FALLBACK_WIDTH
    assert color_choice(None, {"CARGO_TERM_COLOR": "always"}) == "always"
    assert color_choice(None, {"CARGO_TERM_COLOR": "Never "}) == "never"
    assert color_choice(None, {"CARGO_TERM_COLOR": "sometimes"}) == "auto"  # cargo's to refuse
    assert color_choice("never", {"CARGO_TERM_COLOR": "always"}) == "never"
    assert color_choice(None, {}) == "auto"


def test_the_color_setting_is_validated_and_the_users_only(tmp_path: Path) -> None:
    from roteiro_py import config
    from roteiro_py.errors import ConfigError

    assert config.resolve(tmp_path, environ={"ROTEIRO_LINT_COLOR": "never"}).settings.lint.color == "never"
    assert config.resolve(tmp_path, environ={}).settings.lint.color is None  # unset: cargo's, then auto
    with pytest.raises(ConfigError, match="lint.color"):
        config.resolve(tmp_path, environ={"ROTEIRO_LINT_COLOR": "sometimes"})
    (tmp_path / "roteiro.toml").write_text('[lint]\ncolor = "always"\n')
    with pytest.raises(ConfigError, match="branch under review"):
        config.resolve(tmp_path, environ={})


def test_a_refusal_on_a_terminal_of_zero_columns_is_still_printed(tmp_path: Path) -> None:
    """The refusal printer and the progress renderer use rich on stderr too; `COLUMNS=0`
    (a shell exporting a size-less pty's width) made rich's width 0."""
    import io

    from rich.console import Console

    assert Console(file=io.StringIO(), _environ={"COLUMNS": "0"}).width == 0  # control: rich's own
    primary, secondary = pty.openpty()
    base = {k: v for k, v in os.environ.items() if k not in ("NO_COLOR", "CI")}
    child = subprocess.Popen([str(Path(sys.executable).with_name("pylint-sandbox")), "lint", "clippy",
                              str(tmp_path)], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                             stderr=secondary, env={**base, "TERM": "xterm", "COLUMNS": "0"}, cwd=tmp_path)
    os.close(secondary)
    written = drain(primary)
    assert child.stdout is not None
    child.stdout.close()
    assert child.wait(timeout=60) == 3
    shown = SGR.sub("", written.decode())
    assert "No linter image is configured" in shown and "pylint-sandbox prefetch" in shown
