"""`Unconfined` with real children: opt-in, refusal before spawning, env, cwd, deadline, cap."""

from __future__ import annotations

import sys
from collections.abc import Mapping
from datetime import UTC, datetime
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.process import (
    OUTPUT_LIMIT,
    Command,
    GrantAtom,
    GrantSet,
    Outcome,
    Unconfined,
    workspace_grant,
)
from roteiro_py.process.unconfined import utf8_prefix

pytestmark = pytest.mark.timeout(15)

UNCONFINED = Unconfined(i_understand_this_is_not_a_sandbox=True)


def python(workspace: Path, source: str, env: Mapping[str, str] | None = None) -> Command:
    return Command(sys.executable, ("-c", source), workspace, env or {})


def test_it_cannot_be_built_without_saying_what_it_is() -> None:
    with pytest.raises(ValueError, match="no isolation"):
        Unconfined(i_understand_this_is_not_a_sandbox=False)
    with pytest.raises(TypeError):
        Unconfined()  # type: ignore[call-arg]


@pytest.mark.parametrize("extra", [
    "fs:write:{ws}/**", "fs:read:/etc/**", "net:egress:crates.io:443", "secret:use:TOKEN",
    "env:read:HOME", "proc:exec:rustc", "gpu:use:0",
])
def test_a_grant_beyond_read_and_exec_is_refused_before_anything_runs(
    tmp_path: Path, extra: str,
) -> None:
    marker = tmp_path / "marker"
    command = python(tmp_path, f"open({str(marker)!r}, 'w').close()")
    allowed = workspace_grant(tmp_path, sys.executable)
    extra_atom = GrantAtom.parse(extra.format(ws=tmp_path.resolve()))
    with pytest.raises(errors.Unenforceable) as caught:
        UNCONFINED.run(command, GrantSet(allowed.atoms | {extra_atom}))
    assert caught.value.atom == str(extra_atom)
    assert not marker.exists(), "the command ran although the grant was refused"
    # Control arm: with the grant it can honour, the same command runs and leaves the marker.
    assert UNCONFINED.run(command, allowed).succeeded
    assert marker.exists()


def test_a_grant_without_exec_of_the_program_is_refused(tmp_path: Path) -> None:
    command = Command("true", (), tmp_path)
    tree = f"{tmp_path.resolve()}/**"
    with pytest.raises(errors.Unenforceable) as caught:
        UNCONFINED.run(command, GrantSet.of(f"fs:read:{tree}"))
    assert caught.value.atom == "proc:exec:true"


def test_the_environment_is_cleared_but_passed_variables_arrive(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("ROTEIRO_AMBIENT_PROBE", "ambient-secret")
    monkeypatch.setenv("HOME", "/home/probe")
    command = python(
        tmp_path,
        "import os; print(sorted(os.environ.get(k, '-') for k in "
        "('ROTEIRO_AMBIENT_PROBE', 'ROTEIRO_PASSED', 'HOME')))",
        env={"ROTEIRO_PASSED": "passed"},
    )
    outcome = UNCONFINED.run(command, workspace_grant(tmp_path, sys.executable))
    assert outcome.stdout.decode().strip() == str(sorted(["-", "passed", "/home/probe"]))


def test_the_working_directory_is_the_workspace(tmp_path: Path) -> None:
    outcome = UNCONFINED.run(Command("pwd", (), tmp_path), workspace_grant(tmp_path, "pwd"))
    assert outcome.stdout.decode().strip() == str(tmp_path)
    assert outcome.exit == 0 and outcome.succeeded and not outcome.truncated


def test_a_failing_command_is_an_outcome_and_a_timeout_is_never_success(tmp_path: Path) -> None:
    grant = workspace_grant(tmp_path, "sh")
    failed = UNCONFINED.run(Command("sh", ("-c", "echo no >&2; exit 3"), tmp_path), grant)
    assert (failed.exit, failed.stderr, failed.succeeded) == (3, b"no\n", False)
    slow = UNCONFINED.run(Command("sh", ("-c", "sleep 30"), tmp_path, timeout=0.5), grant)
    assert (slow.exit, slow.timed_out, slow.succeeded) == (None, True, False)
    assert 0.4 < slow.duration < 4
    assert slow.started.tzinfo is UTC and slow.ended >= slow.started


def test_succeeded_is_false_when_timed_out_whatever_the_status(tmp_path: Path) -> None:
    now = datetime.now(UTC)
    outcome = Outcome(Command("true", (), tmp_path), 0, b"", b"", True, False, 1.0, now, now)
    assert not outcome.succeeded


def test_a_missing_program_is_spawn_failed(tmp_path: Path) -> None:
    command = Command("roteiro-no-such-program", (), tmp_path)
    with pytest.raises(errors.SpawnFailed):
        UNCONFINED.run(command, workspace_grant(tmp_path, "roteiro-no-such-program"))


def test_output_is_capped_on_a_character_boundary(tmp_path: Path) -> None:
    # 2 ASCII bytes then 3-byte characters: the limit falls inside a character.
    assert (OUTPUT_LIMIT - 2) % 3 != 0
    # stdout only: the cap is a total over both streams (process/stream.py)
    command = python(tmp_path, "import sys; sys.stdout.write('xy' + '\u20ac' * 100000)",
                     env={"PYTHONIOENCODING": "utf-8"})
    outcome = UNCONFINED.run(command, workspace_grant(tmp_path, sys.executable))
    assert outcome.truncated and outcome.exit == 0
    text = outcome.stdout.decode("utf-8")  # strict: a partial character raises
    assert "\ufffd" not in text
    assert len(outcome.stdout) == 2 + (OUTPUT_LIMIT - 2) // 3 * 3
    assert text == "xy" + "\u20ac" * ((OUTPUT_LIMIT - 2) // 3)
    assert outcome.stderr == b""


@pytest.mark.parametrize(("data", "kept"), [
    (b"ab", b"ab"), (b"a\xc3\xa9", b"a\xc3\xa9"), (b"a\xc3", b"a"),
    (b"a\xe2\x82", b"a"), (b"a\xe2\x82\xac", b"a\xe2\x82\xac"), (b"\xf0\x9f\x98", b""),
    (b"", b""),
])
def test_utf8_prefix_drops_only_an_incomplete_last_character(data: bytes, kept: bytes) -> None:
    assert utf8_prefix(data) == kept


def test_diagnostics_is_stderr_then_stdout_bounded(tmp_path: Path) -> None:
    from roteiro_py.process.sandbox import DIAGNOSTICS_LIMIT

    grant = workspace_grant(tmp_path, "sh")
    both = UNCONFINED.run(Command("sh", ("-c", "echo said-out; echo said-err >&2; exit 3"), tmp_path), grant)
    assert both.diagnostics() == "said-err\nsaid-out"
    # control arms: one stream alone is quoted alone, and an empty run says nothing
    only_out = UNCONFINED.run(Command("sh", ("-c", "echo usage: x"), tmp_path), grant)
    assert only_out.diagnostics() == "usage: x"
    assert UNCONFINED.run(Command("sh", ("-c", "true"), tmp_path), grant).diagnostics() == ""
    # a flood is cut to the limit, stderr's start kept first; bad UTF-8 is replaced
    flood = UNCONFINED.run(Command("sh", ("-c", "printf 'E\\377'; head -c 100000 /dev/zero | tr '\\0' e >&2; "
                                                "echo out"), tmp_path), grant)
    said = flood.diagnostics()
    assert len(said) == DIAGNOSTICS_LIMIT and said.startswith("e" * 100) and "out" not in said
    assert flood.diagnostics(limit=8) == "e" * 8
    assert "\ufffd" in UNCONFINED.run(Command("sh", ("-c", "printf 'E\\377' >&2"), tmp_path),
                                      grant).diagnostics()
