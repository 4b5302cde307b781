"""One QEMU microvm boot: the command line, the channels, the deadline, the output cap.

Guarantees, and what each prevents:
- No network: `-nodefaults` and no `-netdev`/NIC, so the guest has only `lo`.
- Read-only is enforced by the hypervisor: the root image and every share image are
  virtio-blk drives with `readonly=on`, 9p shares are `-fsdev ...,readonly=on`; a guest
  `mount -o remount,rw` still gets EROFS from qemu (VM_NOTES). The scratch is the only
  writable drive, and it is a raw ext4 image the host never mounts, so what the guest
  plants in it (setuid files, device nodes, symlinks) never exists as such on the host's
  filesystem. The host never mounts or reads back any image it attached.
- QEMU runs under its seccomp sandbox (`-sandbox on,...`): a guest that finds a device
  emulation bug cannot then spawn processes or raise privileges from inside qemu.
- Every byte from the guest arrives on a unix socket this process listens on (qemu
  connects to it as a client at start-up), per channel: the serial console (kernel
  messages, capped ring), `status` (only the guest's init can open it), and
  `stdoutN`/`stderrN` per step. The step streams share one cap of `output_limit` bytes
  in total (a cap per stream would let 6 streams hold 6x the documented cap); when they
  pass it, the VM is killed (a guest that floods cannot keep us reading until the
  deadline) and the stream that passed it is flagged truncated. `Channels` does this
  accounting, and is what a fuzz test drives.
- A stream is whole only when its socket reached end of file. A `recv` that failed, or
  a socket still open DRAIN_AFTER_EXIT_S after qemu exited, is recorded in
  `Channels.cut` with why (taken for the end of the stream, it would let a step's status
  be reported over output that had not all arrived); the backend refuses such a step
  (errors.OutputCut).
- A VM template's boot and its clones (template.py) add two sockets, also listened on in
  the run directory: qemu's QMP monitor (no guest device is wired to it) and the `job`
  port, host->guest, opened in the guest only by init (its node is in the initramfs's
  /dev, never in the command's root). What the guest writes to the job port is never
  read.
- Its unix sockets live in a run directory whose socket paths fit `sun_path`
  (SUN_PATH_MAX): under TMPDIR when that is short enough, else under /tmp (a long
  TMPDIR would make the bind fail with an OSError, exit 4).
- The deadline is the process layer's (`process.stream.spawn`): qemu leads its own
  process group and the group is SIGKILLed when the deadline passes or when we stop
  reading, so neither qemu nor a helper outlives the run; what arrived before is kept.
- How a share travels (backend.share_transport decides; bench/vm_shares.py measures).
  Guest time to stat then read every file once, as cargo's fingerprint walk and rustc do,
  TCG, this 2-core host shared with other builds (medians; rounds varied 2-6x with load):

  | tree                                   | 9p loose | 9p none | 9p mmap | ext4 image |
  |----------------------------------------|----------|---------|---------|------------|
  | worktree, 3,010 files, 15.9 MB         | 44.5 s   | 194 s   | 177 s   | 8.0 s      |
  | registry-shaped, 1,300 files, 10.5 MB  | 26.6 s   | 151 s   | 52 s    | 4.5 s      |

  (none/mmap: one round; loose and image: three.) Host cost of an image, staging copy +
  `mkfs.ext4 -d`: 500 files / 20 MB 0.14 s, 3,000 files / 16 MB 0.25 s, 5,000 files /
  27 MB 0.73 s on a quiet host; 0.41 / 1.93 / 3.83 s while the host was loaded.
  So: the worktree is a read-only ext4 image built per run (share_image.py; at least ~5x
  faster end to end even counting the build). The cargo registry stays 9p with
  cache=loose, the fastest 9p mode by 3-10x (safe: the share is read-only and the VM
  lives for one run, so no host change needs to be seen mid-run). An image of it would
  read ~6x faster, but would be a copy of it made again on every run.

Why the registry is not an image: docs/DESIGN_NOTES.md, section `roteiro_py/vm/qemu/machine.py`.
"""

from __future__ import annotations

import contextlib
import os
import selectors
import shutil
import socket
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from roteiro_py import errors
from roteiro_py.process.stream import Exit, Failed, Output, spawn
from roteiro_py.process.tool import DIAGNOSTIC_BYTES, run_tool
from roteiro_py.vm.assets.assets import Assets

#: Bytes kept over all step streams together (stdout and stderr of every step). 40 MB of
#: clippy JSON comes back whole (tested); past this the VM is stopped and the outcome is
#: truncated.
OUTPUT_LIMIT = 64 * 1024 * 1024
#: Bytes of the serial console and of qemu's own output kept for diagnostics.
CONSOLE_LIMIT = 64 * 1024
#: Bytes the status channel may carry; init writes a few dozen lines.
STATUS_LIMIT = 64 * 1024
#: Seconds the channels are still read after qemu exited. qemu's end closes its side of
#: every socket, so what it wrote arrives and then end of file, at once; a socket still
#: open after this is held by something else, and its stream is recorded as cut.
DRAIN_AFTER_EXIT_S = 2.0

QEMU = "qemu-system-x86_64"
#: Seconds `qemu --version` may take (it answers in tens of milliseconds; past this it
#: hangs, and the refusal is errors.HostToolFailed).
QEMU_VERSION_TIMEOUT_S = 30.0
#: Bytes of a unix socket path, the terminating NUL included (Linux `sun_path`).
SUN_PATH_MAX = 108
#: The longest channel name: "stderr" and a two-digit step index.
_LONGEST_CHANNEL = "stderr99"
#: MiB of TCG's translation cache (`-accel tcg,tb-size=`). When it fills, TCG throws every
#: translation away and translates again; rustc's and LLVM's code is large. It is host
#: memory in qemu's own process, not guest RAM, and only what TCG fills counts in its RSS.
#: bench/vm_tcg.py (issue 25, lever 3; docs/PERFORMANCE.md), qemu's CPU seconds, arms
#: interleaved in one run, median of 3 per-round ratios to 64 MiB: a lint that compiles
#: proc-macro2, quote and a proc macro to machine code 0.68x at 256 MiB, 0.69x at 512 (its
#: clippy stage 0.57x and 0.63x); the demo workspace's check 0.92x at 256, 0.98x at 512,
#: 0.94x at 1024 (within its noise). The lint's peak RSS (qemu's) on the compile-heavy
#: tree: 571 MiB at 64, 783 at 256, 1092 at 512; on the demo 350, 560, 707, 708 at 1024.
TCG_TB_SIZE_MIB = 256
#: Kernel command-line words added under TCG only; none. `mitigations=off` was measured
#: and not taken (bench/vm_tcg.py, docs/PERFORMANCE.md). TCG does not emulate speculative
#: execution, so the guest's Spectre mitigations (under `-cpu max` this kernel turns on
#: retpolines with RSB filling for v2, usercopy/swapgs barriers for v1; it reports no PTI:
#: Meltdown "Not affected") guard against nothing there, but turning them off did not
#: pay at this cache size: the compile-heavy lint's CPU seconds 0.91x with a 64 MiB cache,
#: 1.08x with 256 MiB (rounds 0.91-1.11x), the demo's 0.97x. Were a word added here: under
#: KVM the guest runs on the host's own CPU, which does speculate, and kernel_cmdline
#: leaves the kernel's defaults there.
TCG_KERNEL_WORDS: tuple[str, ...] = ()


@dataclass(frozen=True)
class Disk:
    serial: str
    path: Path
    readonly: bool


@dataclass(frozen=True)
class MachineSpec:
    assets: Assets
    accel: str  # "kvm" | "tcg"
    cpu: str
    cpus: int
    memory_mib: int
    disks: tuple[Disk, ...]
    shares: tuple[tuple[str, Path], ...]  # (mount tag, host directory), all read-only
    ports: tuple[str, ...]  # virtio-serial port names besides "status"
    job: bytes  # newc archive appended to the base initramfs
    qemu: str = QEMU
    #: Guest RAM in a file (template.py): (path, shared). Shared RAM is written to the
    #: file (a template); unshared is a private copy-on-write mapping of it (a clone).
    memory: tuple[Path, bool] | None = None
    #: A QMP monitor on a socket we listen on, and a host->guest "job" port (template.py).
    control: bool = False
    #: Start paused, waiting for `migrate-incoming` (a clone restored from a template).
    incoming: bool = False


@dataclass
class MachineResult:
    channels: dict[str, bytes]
    truncated: set[str]
    #: (seconds since qemu started, line) for each line init wrote to the status port.
    status: list[tuple[float, str]]
    console: bytes
    qemu_output: bytes
    qemu_exit: int | None
    timed_out: bool
    #: Why the run ended abnormally: deadline, output limit, qemu failure; or None.
    failure: str | None
    started_wall: float
    duration: float
    status_truncated: bool = False
    connected: set[str] = field(default_factory=set)
    #: Channels whose stream did not arrive whole, and why (`Channels.cut`).
    cut: dict[str, str] = field(default_factory=dict)
    #: Why the `control` function failed (template.py), or None.
    control_failure: str | None = None


@dataclass(frozen=True)
class Control:
    """What a `control` function gets once qemu has connected its QMP monitor and job port:
    both sockets are ours (qemu connected to listeners in the run directory); the guest
    reaches neither (no device is wired to the monitor; the job port is host->guest and
    only init, as root in the initramfs, opens it). `clock` is the monotonic time qemu
    was started at, the origin of every status line's time."""

    qmp: socket.socket
    job: socket.socket
    clock: float


class Channels:
    """What arrived on each channel, with every cap applied; `feed` returns False when the
    VM must be stopped (the output cap passed, or the `stop_on` status line came)."""

    def __init__(self, names: list[str], output_limit: int, stop_on: str | None = None,
                 watch: Callable[[str], None] | None = None) -> None:
        self.watch = watch
        self.data: dict[str, bytearray] = {name: bytearray() for name in names}
        self.output_limit = output_limit
        self.stop_on = stop_on
        self.kept = 0  # bytes kept over all step streams
        self.truncated: set[str] = set()
        self.status: list[tuple[float, str]] = []
        self.status_truncated = False
        self.failure: str | None = None
        #: Channels whose stream did not reach its end, and why (the first reason).
        self.cut: dict[str, str] = {}
        self._pending = b""

    def lost(self, name: str, why: str) -> None:
        """Record that `name`'s stream ended before its end of file."""
        self.cut.setdefault(name, why)

    def feed(self, name: str, chunk: bytes, now: float) -> bool:
        buf = self.data[name]
        if name == "console":
            buf.extend(chunk)
            del buf[:-CONSOLE_LIMIT]
            return True
        if name == "status":
            if len(buf) + len(chunk) > STATUS_LIMIT:
                self.status_truncated = True
                chunk = chunk[:max(STATUS_LIMIT - len(buf), 0)]
            buf.extend(chunk)
            self._pending += chunk
            *lines, self._pending = self._pending.split(b"\n")
            go_on = True
            for line in lines:
                text = line.decode("ascii", "replace").strip()
                self.status.append((now, text))
                if self.watch is not None:
                    self.watch(text)
                if self.stop_on is not None and text.startswith(self.stop_on):
                    self.failure = self.failure or f"stopped on {self.stop_on!r}"
                    go_on = False
            return go_on
        room = self.output_limit - self.kept
        if len(chunk) > room:
            self.truncated.add(name)
            buf.extend(chunk[:max(room, 0)])
            self.kept += max(room, 0)
            self.failure = self.failure or (
                f"the guest's output passed the limit of {self.output_limit} bytes (all "
                f"streams together) on {name}; the VM was stopped")
            return False
        buf.extend(chunk)
        self.kept += len(chunk)
        return True


def run_directory() -> Path:
    """A private directory for one boot whose socket paths fit in `sun_path`."""
    for base in (None, "/tmp"):
        rundir = Path(tempfile.mkdtemp(prefix="roteiro-vm-", dir=base))
        if len(os.fsencode(rundir / _LONGEST_CHANNEL)) < SUN_PATH_MAX:
            return rundir
        rundir.rmdir()
    raise errors.UsageError(  # unreachable while /tmp/roteiro-vm-<8 random chars>/stderr99 fits
        f"No directory for qemu's sockets fits the {SUN_PATH_MAX}-byte limit of a unix "
        f"socket path (TMPDIR is {tempfile.gettempdir()}).",
        hint="Set TMPDIR to a shorter directory.")


def tsc_khz() -> int | None:
    """The host TSC frequency for `tsc_early_khz=`: without it 11 of 20 boots under load
    hung calibrating the TSC (VM_NOTES)."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("cpu MHz"):
                return int(float(line.split(":")[1]) * 1000)
    except (OSError, ValueError):
        return None
    return None


def kernel_cmdline(accel: str) -> str:
    """The guest kernel's command line under `accel`. TCG_KERNEL_WORDS are added under TCG
    only; under KVM the guest runs on the host's real CPU, which speculates, so the
    kernel's default mitigations stay."""
    words = ["console=ttyS0", "quiet", "loglevel=3", "panic=-1", "rdinit=/init",
             "8250.nr_uarts=1", "random.trust_cpu=on"]
    if accel == "tcg":
        words += TCG_KERNEL_WORDS
    khz = tsc_khz()
    if khz:
        words.append(f"tsc_early_khz={khz}")
    return " ".join(words)


#: What each qemu binary said to `--version`, by its resolved path and file identity
#: (`_identity`): asked once per binary and process. A lint asked three times, ~10 ms of
#: CPU each plus the spawn (the probe for the sandbox, again for the job's backend, the
#: template's key); a binary replaced meanwhile is another identity, and asked again.
_VERSIONS: dict[tuple[str, int, int, int], str] = {}


def _identity(path: str) -> tuple[str, int, int, int] | None:
    real = os.path.realpath(path)
    try:
        st = os.stat(real)
    except OSError:
        return None
    return real, st.st_ino, st.st_size, st.st_mtime_ns


def qemu_version(path: str) -> str:
    """The first line qemu at `path` prints for `--version` ("" when it prints nothing),
    through the process layer: errors.SpawnFailed when it cannot start, HostToolFailed
    past QEMU_VERSION_TIMEOUT_S. Remembered per binary (`_VERSIONS`); a failure is not."""
    ident = _identity(path)
    if ident is not None and ident in _VERSIONS:
        return _VERSIONS[ident]
    done = run_tool([path, "--version"], purpose="ask qemu its version",
                    timeout=QEMU_VERSION_TIMEOUT_S, max_bytes=DIAGNOSTIC_BYTES)
    lines = done.stdout.decode("utf-8", "replace").strip().splitlines()
    first = lines[0] if lines else ""
    if ident is not None:
        _VERSIONS[ident] = first
    return first


def tied_to_caller(argv: list[str]) -> list[str]:
    """`argv` run so that it is SIGKILLed when the thread that started it dies.

    qemu leads its own process group so a deadline can kill everything it started; but
    the deadline lives in this process. If this process is SIGKILLed (the OOM killer, a
    CI runner escalating to KILL), nothing would stop qemu: the guest would run the
    hostile build on, hold the scratch disk's write lock, and keep its memory. util-
    linux's setpriv sets the parent-death signal and execs qemu (it survives the exec);
    QEMU 7.2 has no `-run-with exit-with-parent` of its own.

    Without setpriv this refuses (errors.HostToolMissing) rather than start qemu untied:
    run as is, qemu would outlive a killed lint, its guest running unseen.
    """
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        raise errors.HostToolMissing("setpriv", "util-linux", "tie the VM to this process, "
                                     "so that a lint that is killed leaves no guest running")
    return [setpriv, "--pdeathsig", "KILL", "--", *argv]


def qemu_argv(spec: MachineSpec, initrd: Path, sockets: Path) -> list[str]:
    accel = f"tcg,tb-size={TCG_TB_SIZE_MIB}" if spec.accel == "tcg" else spec.accel
    machine = "microvm,x-option-roms=off,isa-serial=on"
    memory: list[str] = []
    if spec.memory is not None:
        path, shared = spec.memory
        machine += ",memory-backend=ram"
        memory = ["-object", f"memory-backend-file,id=ram,size={spec.memory_mib}M,"
                             f"mem-path={_opt(path)},share={'on' if shared else 'off'}"]
    argv = [
        spec.qemu, "-M", machine, "-accel", accel, *memory,
        "-cpu", spec.cpu, "-smp", str(spec.cpus), "-m", str(spec.memory_mib),
        "-nodefaults", "-no-user-config", "-display", "none", "-no-reboot",
        "-sandbox", "on,obsolete=deny,elevateprivileges=deny,spawn=deny,resourcecontrol=deny",
        "-global", "virtio-mmio.force-legacy=false",
        "-kernel", str(spec.assets.kernel), "-initrd", str(initrd),
        "-append", kernel_cmdline(spec.accel),
        "-chardev", f"socket,id=console,path={sockets / 'console'}",
        "-serial", "chardev:console",
    ]
    if spec.control:
        argv += ["-chardev", f"socket,id=c_qmp,path={sockets / 'qmp'}",
                 "-mon", "chardev=c_qmp,mode=control"]
    if spec.incoming:
        argv += ["-incoming", "defer"]
    if spec.ports:
        argv += ["-device", "virtio-serial-device"]
        for name in ("status", *spec.ports, *(["job"] if spec.control else [])):
            argv += ["-chardev", f"socket,id=c_{name},path={sockets / name}",
                     "-device", f"virtserialport,chardev=c_{name},name={name}"]
    for disk in spec.disks:
        ro = ",readonly=on" if disk.readonly else ""
        argv += ["-drive", f"file={_opt(disk.path)},if=none,id=d_{disk.serial},format=raw{ro}",
                 "-device", f"virtio-blk-device,drive=d_{disk.serial},serial={disk.serial}"]
    for tag, host in spec.shares:
        argv += ["-fsdev", f"local,id=f_{tag},path={_opt(host)},security_model=none,"
                           "readonly=on,multidevs=remap",
                 "-device", f"virtio-9p-device,fsdev=f_{tag},mount_tag={tag}"]
    return argv


def _opt(path: Path) -> str:
    """A path as a qemu option value: commas are doubled, qemu's own escape."""
    return str(path).replace(",", ",,")


def boot(spec: MachineSpec, *, deadline: float, output_limit: int = OUTPUT_LIMIT,
         stop_on: str | None = None,
         watch: Callable[[str, bytes], None] | None = None,
         control: Callable[[Control], None] | None = None,
         on_status: Callable[[str], None] | None = None) -> MachineResult:
    """Boot, collect every channel until qemu exits or the deadline passes, return it all.

    `stop_on`: a status line prefix after which the VM is killed at once (the probe's
    marker); None waits for the guest to power off. `watch(channel, chunk)` sees each
    chunk of the status port and the step streams as it arrives (the console's are not
    passed); it runs in the read loop, so it must be quick and bounded (vm/qemu/watch.py).
    `control` (with `spec.control`): run in its own thread once qemu has connected its
    monitor and job port, while this one goes on collecting the channels; if it raises,
    qemu is killed and the message is `control_failure`. `on_status` sees each whole
    status line (within STATUS_LIMIT) as it arrives (template.py waits on them).
    """
    rundir = run_directory()
    try:
        return _boot(spec, rundir, deadline, output_limit, stop_on, watch, control, on_status)
    finally:
        shutil.rmtree(rundir, ignore_errors=True)


def _boot(spec: MachineSpec, rundir: Path, deadline: float, output_limit: int,
          stop_on: str | None, watch: Callable[[str, bytes], None] | None = None,
          control: Callable[[Control], None] | None = None,
          on_status: Callable[[str], None] | None = None) -> MachineResult:
    initrd = rundir / "initrd"
    with initrd.open("wb") as out, spec.assets.initrd.open("rb") as base:
        shutil.copyfileobj(base, out, 1 << 20)
        out.write(spec.job)
    sel = selectors.DefaultSelector()
    names = ["console"] + (["status", *spec.ports] if spec.ports else [])
    listeners: list[socket.socket] = []
    conns: dict[socket.socket, str] = {}
    channels = Channels(names, output_limit, stop_on, on_status)
    connected: set[str] = set()
    controls: dict[str, socket.socket] = {}
    control_failure: list[str] = []
    control_thread: threading.Thread | None = None
    wake_r, wake_w = socket.socketpair()
    # The reader's wake-up and the teardown's close of the pair, one at a time: on Ctrl-C
    # the loop is abandoned and the pair closed while the reader, released by the
    # stream's end, is about to send; a send after the close failed with EBADF and
    # printed a thread traceback (tests/unit/vm/qemu/test_machine.py).
    wake_lock = threading.Lock()
    qemu_out = bytearray()
    terminal: list[Exit | Failed] = []
    try:
        for name in names + (["qmp", "job"] if spec.control else []):
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(str(rundir / name))
            listener.listen(1)
            listener.setblocking(False)
            listeners.append(listener)
            sel.register(listener, selectors.EVENT_READ, ("listen", name))
        sel.register(wake_r, selectors.EVENT_READ, ("wake", ""))
        argv = qemu_argv(spec, initrd, rundir)
        started_wall, clock = time.time(), time.monotonic()
        stream = spawn(tied_to_caller(argv), timeout=deadline, max_bytes=CONSOLE_LIMIT)

        def consume() -> None:
            try:
                for frame in stream:
                    if isinstance(frame, Output):
                        qemu_out.extend(frame.data)
                    else:
                        terminal.append(frame)
            finally:
                with wake_lock:
                    if wake_w.fileno() != -1:  # closed: the loop is gone, nobody to wake
                        wake_w.send(b"x")

        reader = threading.Thread(target=consume, daemon=True, name=f"qemu-{stream.pid}")
        reader.start()
        qemu_done_at: float | None = None
        with stream:
            while True:
                if qemu_done_at is not None and (
                        not conns or time.monotonic() - qemu_done_at > DRAIN_AFTER_EXIT_S):
                    for name in conns.values():
                        channels.lost(name, f"it was still open {DRAIN_AFTER_EXIT_S:g} s "
                                      "after qemu exited, and was not read to its end")
                    break
                for key, _ in sel.select(timeout=0.5):
                    kind, name = key.data
                    if kind == "wake":
                        wake_r.recv(16)
                        qemu_done_at = qemu_done_at or time.monotonic()
                        continue
                    if kind == "listen":
                        with contextlib.suppress(BlockingIOError):
                            conn, _ = key.fileobj.accept()  # type: ignore[union-attr]
                            if name in ("qmp", "job"):
                                sel.unregister(key.fileobj)
                                controls[name] = conn
                                if len(controls) == 2 and control is not None:
                                    control_thread = threading.Thread(
                                        target=_control, daemon=True, name="qemu-control",
                                        args=(control, Control(controls["qmp"], controls["job"],
                                                               clock), stream, control_failure))
                                    control_thread.start()
                                continue
                            conn.setblocking(False)
                            conns[conn] = name
                            connected.add(name)
                            sel.register(conn, selectors.EVENT_READ, ("conn", name))
                            sel.unregister(key.fileobj)
                        continue
                    conn = key.fileobj
                    assert isinstance(conn, socket.socket)
                    try:
                        chunk = conn.recv(1 << 16)
                    except (BlockingIOError, InterruptedError):
                        continue
                    except OSError as error:
                        channels.lost(name, f"reading it failed: {error}")
                        chunk = b""
                    if not chunk:
                        sel.unregister(conn)
                        conn.close()
                        del conns[conn]
                        continue
                    if not channels.feed(name, chunk, time.monotonic() - clock):
                        stream.close()
                    if watch is not None and name != "console":
                        watch(name, chunk)
                if not conns and qemu_done_at is None and terminal:
                    qemu_done_at = time.monotonic()
        reader.join()
        if control_thread is not None:
            control_thread.join(5.0)
        duration = time.monotonic() - clock
    finally:
        with wake_lock:
            for sock in (*listeners, *conns, *controls.values(), wake_r, wake_w):
                with contextlib.suppress(OSError):
                    sock.close()
        sel.close()
    end = terminal[0] if terminal else None
    timed_out = isinstance(end, Failed) and end.code == "timeoutExceeded"
    failure = channels.failure or (control_failure[0] if control_failure else None)
    if failure is None and isinstance(end, Failed):
        failure = end.message
    if failure is None and "status" in channels.cut:
        failure = f"the guest's status port did not arrive whole: {channels.cut['status']}"
    return MachineResult(
        channels={name: bytes(buf) for name, buf in channels.data.items()},
        truncated=channels.truncated, status=channels.status,
        console=bytes(channels.data["console"]),
        qemu_output=bytes(qemu_out), qemu_exit=end.code if isinstance(end, Exit) else None,
        timed_out=timed_out, failure=failure, started_wall=started_wall, duration=duration,
        status_truncated=channels.status_truncated, connected=connected, cut=channels.cut,
        control_failure=control_failure[0] if control_failure else None,
    )


def _control(function: Callable[[Control], None], control: Control, stream: object,
             failures: list[str]) -> None:
    try:
        function(control)
    except Exception as error:  # noqa: BLE001 - reported as the run's failure, qemu killed
        failures.append(str(error) or type(error).__name__)
        close = getattr(stream, "close", None)
        if close is not None:
            close()
