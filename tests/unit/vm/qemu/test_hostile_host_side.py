"""The host side of a boot against hostile input: non-UTF-8 paths, a long TMPDIR, and
fuzzed channel framing and status lines (a documented value or a refusal, never a crash)."""

from __future__ import annotations

import os
import socket
import tempfile
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.api import JobOutcome
from roteiro_py.vm.mounts import derive_mounts
from roteiro_py.vm.qemu import backend, job, machine
from roteiro_py.vm.qemu import status as status_port


def archive_for(tree: Path, env: dict[str, str] | None = None) -> bytes:
    grant = GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**", "proc:exec:cargo")
    command = Command("cargo", ("clippy",), tree, env=env or {})
    table = derive_mounts(grant, command, scratch=None,
                          host_cargo_home=Path("/nonexistent-cargo-home"))
    return job.job_archive(table, [command], stop_on_failure=True, images={0})


def test_a_workspace_path_that_is_not_utf8_reaches_the_guest_as_its_bytes(tmp_path: Path) -> None:
    tree = Path(os.fsdecode(os.fsencode(tmp_path) + b"/caf\xe9-\xff"))
    tree.mkdir()  # Python holds the name as lone surrogates: .encode() raised (exit 4)
    archive = archive_for(tree)
    assert b"/caf\xe9-\xff" in archive
    plain = archive_for(tmp_path)  # control: a UTF-8 path is written as it was
    assert os.fsencode(tmp_path) in plain


def test_a_string_with_no_bytes_is_refused_as_documented(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="no file name or argv can hold"):
        archive_for(tmp_path, env={"X": "\ud800"})
    assert b"X=ok" in archive_for(tmp_path, env={"X": "ok"})  # control


def test_a_long_tmpdir_still_gives_sockets_that_bind(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    long = tmp_path / ("t" * 120)
    long.mkdir()
    monkeypatch.setenv("TMPDIR", str(long))
    monkeypatch.setattr(tempfile, "tempdir", None)
    # the failure, shown: a socket under the long TMPDIR cannot be bound at all
    with socket.socket(socket.AF_UNIX) as sock, pytest.raises(OSError):
        sock.bind(str(long / "roteiro-vm-xxxxxxxx" / machine._LONGEST_CHANNEL))
    rundir = machine.run_directory()
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.bind(str(rundir / machine._LONGEST_CHANNEL))
        assert not rundir.is_relative_to(long)
    finally:
        (rundir / machine._LONGEST_CHANNEL).unlink()
        rundir.rmdir()
    monkeypatch.setenv("TMPDIR", str(tmp_path))  # control: a short TMPDIR is used as is
    monkeypatch.setattr(tempfile, "tempdir", None)
    rundir = machine.run_directory()
    assert rundir.parent == tmp_path
    rundir.rmdir()


STEPS = ["stdout0", "stderr0", "stdout1", "stderr1", "stdout2", "stderr2"]
chunks = st.lists(st.tuples(st.sampled_from(["console", "status", *STEPS]),
                            st.binary(max_size=3000)), max_size=40)


@given(chunks, st.integers(min_value=0, max_value=20_000))
def test_channel_framing_keeps_every_cap(feed: list[tuple[str, bytes]], limit: int) -> None:
    channels = machine.Channels(["console", "status", *STEPS], limit)
    for name, chunk in feed:
        go_on = channels.feed(name, chunk, 1.0)
        if not go_on:
            assert channels.failure is not None
    kept = sum(len(channels.data[name]) for name in STEPS)
    assert kept == channels.kept <= limit  # a total over all step streams
    assert len(channels.data["console"]) <= machine.CONSOLE_LIMIT
    assert len(channels.data["status"]) <= machine.STATUS_LIMIT
    offered = sum(len(chunk) for name, chunk in feed if name in STEPS)
    assert bool(channels.truncated) == (offered > limit)
    assert all(isinstance(text, str) and "\n" not in text for _, text in channels.status)


def test_the_output_cap_is_a_total_over_the_step_channels() -> None:
    channels = machine.Channels(["console", "status", *STEPS], 100)
    assert channels.feed("stdout0", b"a" * 60, 0.0)
    assert not channels.feed("stderr2", b"b" * 60, 0.0)  # 120 > 100: was 2 x 64 MiB of room
    assert channels.data["stderr2"] == b"b" * 40 and channels.truncated == {"stderr2"}
    assert "all streams together" in (channels.failure or "")
    under = machine.Channels(["console", "status", *STEPS], 120)
    assert under.feed("stdout0", b"a" * 60, 0.0) and under.feed("stderr2", b"b" * 60, 0.0)
    assert not under.truncated  # control


words = st.sampled_from(["ready", "done", "start", "exit", "oom", "error", "clock", "0", "1", "2", "3", "-1",
                         "99999999999999999999", "x", "\u0663", "1.5", ""])
status_lines = st.one_of(st.lists(words, max_size=5).map(" ".join), st.text(max_size=30))


@given(st.lists(st.tuples(st.floats(0, 10_000), status_lines), max_size=20),
       st.dictionaries(st.sampled_from(STEPS), st.binary(max_size=50)),
       st.sets(st.sampled_from(STEPS)), st.booleans())
def test_any_status_lines_give_a_job_outcome(status: list[tuple[float, str]],
                                             streams: dict[str, bytes], truncated: set[str],
                                             timed_out: bool) -> None:
    result = machine.MachineResult(
        channels={"console": b"", "status": b"", **streams}, truncated=truncated,
        status=status, console=b"", qemu_output=b"", qemu_exit=0, timed_out=timed_out,
        failure=None, started_wall=datetime.now(UTC).timestamp(), duration=5.0)
    steps = [Command("cargo", (str(i),), Path("/w"), timeout=10) for i in range(3)]
    isolation = backend.isolation_for("tcg")
    outcome = backend._outcome(steps, result, isolation)
    assert isinstance(outcome, JobOutcome)
    assert len(outcome.steps) <= len(steps)
    assert outcome.completed == any(line.split() == ["done"] for _, line in status)
    assert outcome.guest_clock is None or 0 <= outcome.guest_clock < 10 ** status_port.CLOCK_DIGITS
    for index, step in enumerate(outcome.steps):
        assert step.exit is None or 0 <= step.exit < 10 ** status_port.EXIT_DIGITS
        assert 0 <= step.oom_kills < 10 ** status_port.OOM_DIGITS
        assert step.exit is None or not step.timed_out
        # the stream that passed the cap is named (errors.OutputTooLarge says which)
        assert step.truncated_streams == tuple(kind for kind in ("stdout", "stderr")
                                               if f"{kind}{index}" in truncated)
        assert step.truncated == bool(step.truncated_streams)


def test_image_env_values_no_job_can_carry_are_dropped(tmp_path: Path) -> None:
    from roteiro_py import lint

    class Image:
        config = {"config": {"Env": ["RUSTUP_HOME=/opt/\ud800", "RUST_VERSION=1.95\x00x",
                                     "RUSTUP_TOOLCHAIN=a\nb", "PATH=/opt/bin:/usr/bin"]}}

    env = lint.guest_env(Image())  # type: ignore[arg-type]
    assert "RUSTUP_HOME" not in env and "RUST_VERSION" not in env
    assert "RUSTUP_TOOLCHAIN" not in env
    assert env["PATH"] == "/opt/bin:/usr/bin"  # control: a plain value is kept
    assert b"PATH=/opt/bin:/usr/bin" in archive_for(tmp_path, env=env)  # and the job is made


def test_the_oom_kills_init_counted_reach_the_step_they_happened_in() -> None:
    """guest_init.sh's "oom I N" is the only evidence a SIGKILL was for memory; a line of
    another shape (too many digits, not digits) is no evidence. Control: step 0 had none."""
    lines = ["ready", "start 0", "exit 0 0 0", "start 1", "oom 1 2", "exit 1 137 0",
             "start 2", "oom 2 " + "9" * (status_port.OOM_DIGITS + 1), "oom 2 x", "exit 2 137 0", "done"]
    result = machine.MachineResult(
        channels={"console": b"", "status": b""}, truncated=set(),
        status=[(float(n), line) for n, line in enumerate(lines)], console=b"", qemu_output=b"",
        qemu_exit=0, timed_out=False, failure=None, started_wall=datetime.now(UTC).timestamp(),
        duration=5.0)
    steps = [Command("cargo", (str(i),), Path("/w"), timeout=10) for i in range(3)]
    outcome = backend._outcome(steps, result, backend.isolation_for("tcg"))
    assert [step.oom_kills for step in outcome.steps] == [0, 2, 0]
    assert [step.exit for step in outcome.steps] == [0, 137, 137]


def test_an_exit_status_no_shell_gives_is_no_verdict() -> None:
    """`$?` is 0-255: a status line with more digits (or a sign) than EXIT_DIGITS is no
    exit status, so the step has none (a VM failure), never a 4300-digit status in a
    refusal. Control: the same line with 137 is read."""
    def exits(code: str) -> list[int | None]:
        lines = ["ready", "start 0", f"exit 0 {code} 0", "done"]
        result = machine.MachineResult(
            channels={"console": b"", "status": b""}, truncated=set(),
            status=[(float(n), line) for n, line in enumerate(lines)], console=b"",
            qemu_output=b"", qemu_exit=0, timed_out=False, failure=None,
            started_wall=datetime.now(UTC).timestamp(), duration=5.0)
        steps = [Command("cargo", ("0",), Path("/w"), timeout=10)]
        return [step.exit for step in backend._outcome(steps, result, backend.isolation_for("tcg")).steps]

    assert exits("137") == [137]
    for hostile in ("9" * 4000, "1" + "0" * status_port.EXIT_DIGITS, "-9", "+1", "\u0663"):
        assert exits(hostile) == [None], hostile


def test_the_stream_that_passed_the_cap_is_named() -> None:
    """The cap is one for all streams (Channels); the outcome says which one passed it, so
    OutputTooLarge can name it. Control: the step whose streams stayed under is not cut."""
    channels = machine.Channels(["console", "status", *STEPS], 100)
    channels.feed("status", b"ready\nstart 0\nexit 0 0 0\nstart 1\n", 0.0)
    assert channels.feed("stdout0", b"a" * 60, 0.0)
    assert not channels.feed("stderr1", b"b" * 60, 0.0)
    result = machine.MachineResult(
        channels={name: bytes(data) for name, data in channels.data.items()},
        truncated=channels.truncated, status=channels.status, console=b"", qemu_output=b"",
        qemu_exit=None, timed_out=False, failure=channels.failure,
        started_wall=datetime.now(UTC).timestamp(), duration=5.0)
    steps = [Command("cargo", (str(i),), Path("/w"), timeout=10) for i in range(2)]
    first, second = backend._outcome(steps, result, backend.isolation_for("tcg")).steps
    assert second.truncated and second.truncated_streams == ("stderr",)
    assert not first.truncated and first.truncated_streams == ()
