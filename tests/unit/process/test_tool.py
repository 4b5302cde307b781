"""Host tools run through the process layer (process/tool.py), with real misbehaving
children: one that sleeps past its deadline with a grandchild writing, one that floods
both pipes, one that cannot start, one that fails; each with the well-behaved control.
"""

from __future__ import annotations

import sys
import tarfile
import time
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.process.tool import reading_stdout, run_tool, write_all

PY = sys.executable

pytestmark = pytest.mark.timeout(20)


def test_a_tool_past_its_deadline_is_refused_and_its_whole_group_killed(tmp_path: Path) -> None:
    marker = tmp_path / "marker"
    script = f"(while :; do echo x >> {marker}; sleep 0.02; done) & sleep 60"
    started = time.monotonic()
    with pytest.raises(errors.HostToolFailed) as refused:
        run_tool(["sh", "-c", script], purpose="make a thing", timeout=1.0, max_bytes=1024)
    assert time.monotonic() - started < 4
    text = refused.value.guidance().render_text()
    assert "sh could not make a thing: it did not finish within 1 s, and its process group " \
           "was killed." in text
    size = marker.stat().st_size
    assert size > 0, "the grandchild never wrote, so this test proves nothing"
    time.sleep(0.3)
    assert marker.stat().st_size == size, "the grandchild outlived the deadline"


def test_a_deadline_the_caller_owns_is_refused_in_its_words() -> None:
    late = errors.DeadlineExceeded("building the share image", 7.0, stopped="the host killed it")
    with pytest.raises(errors.DeadlineExceeded) as refused:
        run_tool(["sleep", "30"], purpose="p", timeout=0.5, max_bytes=1024, late=lambda: late)
    assert refused.value is late


def test_a_flooding_tool_keeps_only_its_bound_and_the_control_keeps_all() -> None:
    flood = [PY, "-c", "import os\nfor _ in range(200):\n"
                       "    os.write(1, b'o' * 65536); os.write(2, b'e' * 65536)"]
    started = time.monotonic()
    cut = run_tool(flood, purpose="p", timeout=15, max_bytes=100_000)
    assert time.monotonic() - started < 10
    assert cut.exit == 0 and len(cut.stdout) + len(cut.stderr) == 100_000 and cut.truncated
    whole = run_tool([PY, "-c", "print('v 1.0')"], purpose="p", timeout=15, max_bytes=100_000)
    assert whole.exit == 0 and whole.stdout == b"v 1.0\n" and not whole.truncated


def test_a_tool_that_cannot_start_is_spawn_failed_and_a_failing_one_returns_its_status(
        tmp_path: Path) -> None:
    with pytest.raises(errors.SpawnFailed):
        run_tool([str(tmp_path / "absent-tool")], purpose="p", timeout=5, max_bytes=1024)
    failed = run_tool(["sh", "-c", "echo no >&2; exit 3"], purpose="p", timeout=5,
                      max_bytes=1024)
    assert failed.exit == 3 and failed.stderr == b"no\n"


def test_stdout_read_as_a_file_ends_only_at_a_clean_exit() -> None:
    """tarfile reads zstd's output this way (rootfs._open_layer): a short stream must never
    read as a whole one."""
    cat = ["cat"]
    with reading_stdout(cat, purpose="p", timeout=10, max_bytes=1 << 20) as (out, stream):
        assert stream.stdin is not None
        write_all(stream.stdin, b"abc" * 1000)
        stream.stdin.close()
        assert out.read(10) + out.read() == b"abc" * 1000 and out.read() == b""
    failing = ["sh", "-c", "echo partial; echo 'bad frame' >&2; exit 1"]
    with reading_stdout(failing, purpose="p", timeout=10, max_bytes=1 << 20) as (out, _), \
            pytest.raises(OSError, match="sh exited with status 1: bad frame"):
        out.read()
    flood = ["sh", "-c", "yes"]
    with reading_stdout(flood, purpose="p", timeout=10, max_bytes=100_000) as (out, _), \
            pytest.raises(OSError, match="more than 100000 bytes"):
        out.read()
    hung = ["sleep", "30"]
    started = time.monotonic()
    with reading_stdout(hung, purpose="read a layer", timeout=1, max_bytes=1024) as (out, _), \
            pytest.raises(errors.HostToolFailed, match="within 1 s"):
        out.read(512)
    assert time.monotonic() - started < 4


def test_tarfile_reads_a_tools_stdout_whole(tmp_path: Path) -> None:
    """The control arm of the refusals above: a tool that exits 0 gives every member."""
    source = tmp_path / "src"
    source.mkdir()
    for index in range(50):
        (source / f"f{index}").write_bytes(bytes([index]) * 5000)
    with tarfile.open(tmp_path / "a.tar", "w") as archive:
        archive.add(source, arcname=".")
    with reading_stdout(["cat", str(tmp_path / "a.tar")], purpose="p", timeout=10,
                        max_bytes=1 << 20) as (out, _), \
            tarfile.open(fileobj=out, mode="r|") as read:  # type: ignore[call-overload]
        names = sorted(member.name for member in read)
    assert len(names) == 51
