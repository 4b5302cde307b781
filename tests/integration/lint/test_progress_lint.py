"""A real lint says what it is doing on stderr, and only the report reaches stdout.

Real CLI, real VM (TCG), real cargo: the crate in the clippy stage's note is the one the
guest's cargo printed on its stderr, carried by the read loop (vm/qemu/watch.py).
"""

from __future__ import annotations

import json
import os
import pty
import re
import signal
import subprocess
import threading
from pathlib import Path

from roteiro_py import progress as P
from roteiro_py.errors import EXIT_INTERRUPTED
from tests.integration.lint.lint_support import EXE, HOME, Image, cli

STAGE_LINE = re.compile(r"^(?P<name>\S(?:.*\S)?) +\d+\.\d s$")
RUN_STAGES = [P.HYPERVISOR, P.IMAGE, P.CARGO_VIEW, P.ROOTFS, P.DEP_CACHE, P.WORKTREE, P.BOOT, P.TOOLCHAIN,
              P.CLIPPY, P.REPORT]


def stage_names(stderr: str) -> list[str]:
    return [m.group("name") for m in map(STAGE_LINE.match, stderr.splitlines()) if m]


def run_stages(seen: list[str]) -> list[str]:
    """RUN_STAGES as a run restored from a VM template says them: restore for boot, after
    boot when the run built the template."""
    machine = [P.BOOT, P.RESTORE] if P.BOOT in seen else [P.RESTORE]
    return [stage for name in RUN_STAGES for stage in (machine if name == P.BOOT else [name])]


def test_a_lint_tells_each_stage_on_stderr_and_only_the_report_on_stdout(
        demo: Path, clippy_image: Image) -> None:
    lint = ("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "json",
            "--fail-on", "never")
    done = cli(*lint, env={"ROTEIRO_VM_TEMPLATE": "false"})  # a cold boot
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)  # stdout is the report and nothing else
    assert report["summary"]["build_succeeded"] is True
    assert stage_names(done.stderr) == RUN_STAGES
    # Restored from a VM template (built first if this is the first run of its key: boot).
    restored = cli(*lint)
    assert restored.returncode == 0, restored.stderr
    assert stage_names(restored.stderr) == run_stages(stage_names(restored.stderr))
    again = json.loads(restored.stdout)  # the same results, the probes' included
    assert [again[k] for k in ("toolchain", "findings", "summary", "command")] == [
        report[k] for k in ("toolchain", "findings", "summary", "command")]
    clippy_notes = [line for line in done.stderr.splitlines()
                    if line.startswith(P.CLIPPY) and not STAGE_LINE.match(line)]
    assert clippy_notes and "checking demo-core v0.1.0" in clippy_notes[0], done.stderr
    assert "\x1b" not in done.stderr and "\r" not in done.stderr  # a log, not a terminal


def test_quiet_prints_no_stage_lines_and_the_refusal_still(demo: Path, clippy_image: Image) -> None:
    """A refusal after the first stages (no lockfile: the package cache stage refuses)."""
    (demo / "Cargo.lock").unlink()
    said = cli("lint", "clippy", str(demo), "--image", clippy_image.reference)
    assert said.returncode == 3 and said.stdout == ""
    assert stage_names(said.stderr) == [P.HYPERVISOR, P.IMAGE]  # control: they are there
    # the stage the refusal ended is not shown as done
    assert re.search(rf"^{P.CARGO_VIEW} +\d+\.\d s {re.escape(P.STOPPED)}$", said.stderr, re.M)
    assert said.stderr.index(P.CARGO_VIEW) < said.stderr.index("would write Cargo.lock")
    for quiet in (["-q"], ["--quiet"]):
        silent = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, *quiet)
        assert silent.returncode == 3 and silent.stdout == ""
        assert stage_names(silent.stderr) == [] and "would write Cargo.lock" in silent.stderr
    by_setting = cli("lint", "clippy", str(demo), "--image", clippy_image.reference,
                     env={"ROTEIRO_LINT_QUIET": "true"})
    assert by_setting.returncode == 3 and stage_names(by_setting.stderr) == []


class OnPty:
    """The real CLI with its stderr on a pseudo-terminal (as a person runs it) and its
    stdout on a pipe, so what each carries can be told apart."""

    def __init__(self, *args: str) -> None:
        primary, secondary = pty.openpty()
        env = {k: v for k, v in os.environ.items() if k != "CI"} | {
            "ROTEIRO_HOME": str(HOME), "ROTEIRO_VM_ACCEL": "tcg", "TERM": "xterm",
            "COLUMNS": "100"}
        # SIGINT at its default whatever this run inherited (a suite started as a background
        # job has it ignored, and the Ctrl-C test then never saw "interrupted")
        self.child = subprocess.Popen([str(EXE), *args], stdin=subprocess.DEVNULL,
                                      stdout=subprocess.PIPE, stderr=secondary, env=env,
                                      preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        os.close(secondary)
        self._primary = primary
        self._written = bytearray()
        self._lock = threading.Condition()
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()

    def _drain(self) -> None:
        while True:
            try:
                data = os.read(self._primary, 65536)
            except OSError:  # EIO: every writer of the pty has closed it
                data = b""
            with self._lock:
                self._written.extend(data)
                self._lock.notify_all()
            if not data:
                return

    def wait_for(self, text: bytes, timeout: float) -> None:
        """Until `text` has been written to the terminal (or the child has gone)."""
        with self._lock:
            self._lock.wait_for(lambda: text in self._written or self.child.poll() is not None,
                                timeout=timeout)

    def finish(self) -> tuple[int, bytes, str]:
        """(exit status, stdout, what the terminal was sent)."""
        assert self.child.stdout is not None
        stdout = self.child.stdout.read()
        self.child.stdout.close()
        code = self.child.wait(timeout=900)
        self._reader.join(timeout=60)
        os.close(self._primary)
        return code, stdout, self._written.decode(errors="replace")


def terminal_lines(text: str) -> list[str]:
    return re.split(r"\r\n|\r|\n", re.sub(r"\x1b\[\??[0-9;]*[A-Za-z]", "", text))


def stages_on(text: str) -> list[str]:
    return [m.group("name") for m in map(STAGE_LINE.match, terminal_lines(text))
            if m and m.group("name") in (*RUN_STAGES, P.RESTORE)]


def test_on_a_terminal_the_spinner_is_on_stderr_and_stdout_is_the_report(
        demo: Path, clippy_image: Image) -> None:
    code, stdout, text = OnPty("lint", "clippy", str(demo), "--image", clippy_image.reference,
                               "--format", "json", "--fail-on", "never").finish()
    assert code == 0, text[-3000:]
    report = json.loads(stdout)
    assert report["summary"]["build_succeeded"] is True and b"\x1b" not in stdout
    assert "\x1b[?25l" in text and "\x1b[?25h" in text  # the spinner ran on the terminal
    assert "clippy" in text and "checking demo-core" in text
    # every finished stage left its line, and the spinner's own line was erased last
    assert stages_on(text) == run_stages(stages_on(text))
    assert text.endswith("\x1b[2K"), repr(text[-200:])


def test_on_a_terminal_a_refusal_comes_after_the_spinner_is_gone(demo: Path, clippy_image: Image) -> None:
    (demo / "Cargo.lock").unlink()
    code, stdout, text = OnPty("lint", "clippy", str(demo), "--image", clippy_image.reference).finish()
    assert code == 3 and stdout == b""
    assert stages_on(text) == [P.HYPERVISOR, P.IMAGE]
    assert f"{P.CARGO_VIEW:<15} " in text and P.STOPPED in text
    refusal = text.index("error")  # rich wraps the sentence to the terminal's width
    assert "Cargo.lock" in text[refusal:]
    # the spinner stopped before it: the cursor shown again, the spinner's line erased
    assert text.rindex("\x1b[?25h") < refusal and text.rindex("\x1b[2K") < refusal


def test_ctrl_c_clears_the_spinner_before_saying_interrupted(demo: Path, clippy_image: Image) -> None:
    run = OnPty("lint", "clippy", str(demo), "--image", clippy_image.reference)
    # The VM runs (booted, or restored from a template): a spinner is up
    run.wait_for(P.TOOLCHAIN.encode(), timeout=600)
    run.child.send_signal(signal.SIGINT)
    code, stdout, text = run.finish()
    assert code == EXIT_INTERRUPTED and stdout == b"", text[-2000:]
    assert "\x1b[?25l" in text
    said = text.rindex("interrupted")
    assert text.rindex("\x1b[?25h") < said and text.rindex("\x1b[2K") < said
    assert terminal_lines(text[said:])[0] == "interrupted"
