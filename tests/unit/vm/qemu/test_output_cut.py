"""Output that never arrived is not a command that happened (issue 21 item 5).

The reader of a VM's channels (vm/qemu/machine.py) took a failed `recv` on a step's
stdout or stderr socket for the end of the stream, and closed sockets still open 2 s
after qemu exited, recording neither: the step's exit status was then reported over
output that did not all arrive, and a lint judged it. Both are now recorded per channel
(`MachineResult.cut`), carried to the step (`VmOutcome.lost_streams`), and refused
(errors.OutputCut, naming the stream and the step).

The run goes through the real backend, `machine.boot` and the process layer; `qemu` is
a stand-in that connects to the run's sockets as qemu does and speaks the guest init's
status protocol (no VM may boot in a unit test, and the property is about the reader).
Two faults:
- a socket still open after qemu exited: the stand-in leaves a child of its own, out of
  its process group, holding the step's stdout open (real qemu cannot, under
  `-sandbox spawn=deny`; the reader must not trust that);
- a failed `recv`: injected into this process's `socket.recv` for the step's stdout,
  because no real component can make a unix socket's read fail on demand.
Each with its control arm: the same run without the fault is whole and judged.
"""

from __future__ import annotations

import contextlib
import errno
import os
import signal
import socket
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from roteiro_py import errors
from roteiro_py.lint.judgement import judge_job
from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.api import JobOutcome
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import backend as qemu_backend
from roteiro_py.vm.qemu import machine, probe

pytestmark = pytest.mark.timeout(60)

#: What the step "writes": enough for several reads.
STDOUT = b"warning: the step's output\n" * 5000

STAND_IN = f"""#!{sys.executable}
import os, socket, sys, time
argv = sys.argv[1:]
if argv[:1] == ["--version"]:
    print("QEMU emulator version 7.2.19")
    sys.exit(0)
paths = {{}}
for index, word in enumerate(argv):
    if word == "-chardev":
        fields = dict(p.split("=", 1) for p in argv[index + 1].split(",")[1:] if "=" in p)
        paths[fields["id"].removeprefix("c_")] = fields["path"]
socks = {{}}
for name, path in paths.items():
    socks[name] = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    socks[name].connect(path)
def say(name, data):
    try:
        socks[name].sendall(data)
    except OSError:  # the reader closed it
        pass
say("status", b"ready\\nstart 0\\n")
say("stdout0", {STDOUT!r})
say("stderr0", b"step stderr\\n")
holder = os.environ.get("ROTEIRO_TEST_HOLDER")
if holder:
    pid = os.fork()
    if pid == 0:
        os.setsid()  # out of the process group the deadline kills
        null = os.open(os.devnull, os.O_RDWR)
        for fd in (0, 1, 2):  # not qemu's pipes: only the socket is held
            os.dup2(null, fd)
        for name, sock in socks.items():
            if name != "stdout0":
                sock.close()
        time.sleep(40)
        os._exit(0)
    with open(holder, "w") as out:
        out.write(str(pid))
say("status", b"exit 0 0 0\\ndone\\n")
for sock in socks.values():
    sock.close()
"""


@pytest.fixture
def run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    """A function running one step through the backend with the stand-in qemu."""
    for name in ("rootfs.ext4", "vmlinuz", "initrd"):
        (tmp_path / name).write_bytes(b"")
    qemu = tmp_path / "bin" / "qemu-system-x86_64"
    qemu.parent.mkdir()
    qemu.write_text(STAND_IN)
    qemu.chmod(0o755)
    assets = Assets(tmp_path / "vmlinuz", tmp_path / "initrd", "k" * 64, "i" * 64,
                    "6.1.0-test", "provisioned")
    monkeypatch.setattr(qemu_backend, "load_assets", lambda kernel, initrd: assets)
    monkeypatch.setattr(probe, "probe", lambda accel, found, **_: probe.Verdict(
        accel, True, "canary guest booted in 0.4 s", 0.4, "7.2.19", probe.CPU[accel]))
    step = Command("cargo", ("clippy", "--message-format=json"), Path("/tmp"), {}, timeout=30)

    def one() -> JobOutcome:
        backend = qemu_backend.QemuBackend(VmOptions(rootfs=tmp_path / "rootfs.ext4", accel="tcg",
                                                     template=False), qemu=str(qemu))
        return backend.run_steps([step], GrantSet.of("proc:exec:cargo"), deadline=30)

    yield one, step


def refusal(job: JobOutcome, step: Command) -> errors.OutputCut | None:
    try:
        judge_job(job, [step], reference="registry.example/clippy@sha256:" + "a" * 64)
    except errors.OutputCut as cut:
        return cut
    return None


def test_a_step_socket_still_open_after_qemu_exited_is_output_cut(
        run: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    one, step = run
    whole = one()  # control arm: the same run, nothing held open
    assert whole.completed and whole.steps[0].exit == 0 and whole.steps[0].stdout == STDOUT
    assert refusal(whole, step) is None
    holder = tmp_path / "holder.pid"
    monkeypatch.setenv("ROTEIRO_TEST_HOLDER", str(holder))
    started = time.monotonic()
    try:
        held = one()
        elapsed = time.monotonic() - started
        os.kill(int(holder.read_text()), 0)  # alive all along: the stream had not ended
    finally:
        with contextlib.suppress(FileNotFoundError, ProcessLookupError, ValueError):
            os.kill(int(holder.read_text()), signal.SIGKILL)
    assert held.steps[0].exit == 0  # what the guest said; the refusal is the host's
    cut = refusal(held, step)
    assert cut is not None, "an exit status was judged over output that did not all arrive"
    assert (cut.stream, cut.step) == ("stdout", 1)
    assert machine.DRAIN_AFTER_EXIT_S <= elapsed < machine.DRAIN_AFTER_EXIT_S + 10
    text = cut.guidance().render_text()
    assert "The stdout of step 1, `cargo clippy --message-format=json`, did not arrive whole " \
           "from the guest: it was still open 2 s after qemu exited" in text


def test_a_failed_read_of_a_step_socket_is_output_cut(
        run: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    one, step = run
    whole = one()  # control arm: the same run, every read succeeds
    assert whole.steps[0].stdout == STDOUT and refusal(whole, step) is None
    real_recv = socket.socket.recv
    read_once: set[socket.socket] = set()

    def failing(self: socket.socket, size: int, *args: Any) -> bytes:
        # The fault: a read of the step's stdout fails once some of it has been read.
        if not str(self.getsockname()).endswith("/stdout0"):
            return real_recv(self, size, *args)
        if self in read_once:
            raise ConnectionResetError(errno.ECONNRESET, "Connection reset by peer")
        read_once.add(self)
        return real_recv(self, size, *args)

    monkeypatch.setattr(socket.socket, "recv", failing)
    failed = one()
    assert failed.steps[0].exit == 0 and 0 < len(failed.steps[0].stdout) < len(STDOUT)
    cut = refusal(failed, step)
    assert cut is not None, "an exit status was judged over output that did not all arrive"
    assert (cut.stream, cut.step) == ("stdout", 1)
    assert "reading it failed: [Errno 104] Connection reset by peer" in cut.why
