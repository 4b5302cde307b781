"""Ctrl-C during a boot tears the machine down without a thread traceback.

`machine._boot` reads qemu's own output in a thread that, when qemu's stream ends, wakes
the read loop through a socket pair. On Ctrl-C the loop is abandoned: the stream is
closed (qemu killed) and the teardown closes the socket pair, while the reader thread,
released by the stream's end, sends its wake-up. When the close came first the send
failed with EBADF and Python printed the thread's traceback before 'interrupted'.

The run is real: a driver process boots through `machine.boot` with a stand-in qemu (a
real child, connected to the run's sockets as qemu is; no VM may boot in a unit test)
and this test sends it a real SIGINT. The race is made deterministic, not mocked: a
trace hook in the driver holds the reader thread at its wake-up until the teardown has
closed the wake socket (or 10 s pass), which is the losing order the race sometimes
took. The driver says whether that order was reached (the control that the test
exercised the race at all).
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.timeout(60)

STAND_IN = f"""#!{sys.executable}
import socket, sys, time
argv = sys.argv[1:]
socks = {{}}
for index, word in enumerate(argv):
    if word == "-chardev":
        fields = dict(p.split("=", 1) for p in argv[index + 1].split(",")[1:] if "=" in p)
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.connect(fields["path"])
        socks[fields["id"].removeprefix("c_")] = sock
socks["status"].sendall(b"ready\\n")
time.sleep(50)
"""

DRIVER = """
import linecache, signal, sys, threading, time
from pathlib import Path
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.qemu import machine

signal.signal(signal.SIGINT, signal.default_int_handler)
tmp = Path(sys.argv[1])

held = []

def hold_the_wake_up(frame, event, arg):
    if event != "line" or held:
        return hold_the_wake_up
    if "wake" not in linecache.getline(frame.f_code.co_filename, frame.f_lineno):
        return hold_the_wake_up
    held.append(frame)  # once: its first line that names the wake socket
    wake = frame.f_locals["wake_w"]
    deadline = time.monotonic() + 10
    while wake.fileno() != -1 and time.monotonic() < deadline:
        time.sleep(0.01)
    print("held until closed" if wake.fileno() == -1 else "not closed", flush=True)
    return None

def trace(frame, event, arg):
    if frame.f_code.co_name == "consume" and frame.f_code.co_filename == machine.__file__:
        return hold_the_wake_up
    return None

threading.settrace(trace)
assets = Assets(tmp / "vmlinuz", tmp / "initrd", "k" * 64, "i" * 64, "6.1.0-test", "test")
spec = machine.MachineSpec(assets=assets, accel="tcg", cpu="max", cpus=1, memory_mib=64,
                           disks=(), shares=(), ports=("stdout0",), job=b"",
                           qemu=str(tmp / "qemu"))

def on_status(line):
    if line == "ready":
        print("ready", flush=True)

try:
    machine.boot(spec, deadline=40, on_status=on_status)
except KeyboardInterrupt:
    for thread in threading.enumerate():  # let the reader finish: its traceback is the bug
        if thread.name.startswith("qemu-"):
            thread.join(15)
    print("interrupted", flush=True)
    sys.exit(130)
print("booted to the end", flush=True)
"""


def interruptible() -> None:
    """SIGINT at its default in the driver whatever this run inherited (tests/unit/cli)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_ctrl_c_while_qemu_runs_tears_down_without_a_thread_traceback(tmp_path: Path) -> None:
    for name in ("vmlinuz", "initrd"):
        (tmp_path / name).write_bytes(b"")
    qemu = tmp_path / "qemu"
    qemu.write_text(STAND_IN)
    qemu.chmod(0o755)
    with subprocess.Popen([sys.executable, "-c", DRIVER, str(tmp_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                          preexec_fn=interruptible) as driver:
        assert driver.stdout is not None
        assert driver.stdout.readline().strip() == "ready"
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=40)
    # control: the reader was held until the teardown had closed the wake socket
    assert out.splitlines() == ["held until closed", "interrupted"], (out, err)
    assert driver.returncode == 130
    assert "Exception in thread" not in err, err
    assert "Bad file descriptor" not in err, err
