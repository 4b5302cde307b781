"""VM templates: a booted, probed guest saved once, restored as a private clone per run.

Why: under TCG a cold run spends ~8-10 s before clippy starts (kernel 2.5-2.9 s, modules
~1.3 s, mounts, the two toolchain probes 1.5-3 s; issue 11). A template is that machine
stopped where it waits for its job; a clone restored from it is running 0.1-0.2 s after
qemu starts and ready for the job ~0.8 s after (bench/vm_template.py, lint's own steps
on the demo workspace, TCG, a 2-core host at load ~3: `run_steps` called -> clippy step
starts, median of 3, 12.2 s cold vs 0.86 s restored; building the template, once per
key, 14.3 s). The design is Kata's VM templating / Firecracker's snapshots:

- Template: qemu boots with the real kernel and initramfs, the run's root filesystem
  (read-only drive), guest RAM in a `memory-backend-file` with share=on, and every
  device slot a run can use. Init loads its modules, assembles the root overlay, runs
  the template steps (the probes, which run in /tmp and touch no per-run share; their
  outcomes are kept beside the template as JSON), says `template-ready` and waits for
  a job on the host->guest `job` port. The host stops it (QMP `stop`), saves its device
  state with migration (`x-ignore-shared`: the RAM is the file, not copied; ~260 KB of
  state) to a file it opened and passed over QMP (no `exec:` helper: qemu runs under
  `-sandbox spawn=deny`), and quits it. It is built in a temporary directory and renamed
  into place under a file lock held exclusive: two first lints build one template. A
  run restoring from it holds that lock shared until its clone is done (`in_use`), so
  no prune or sweep removes it meanwhile.
- Clone: qemu with the same arguments and device slots (machine.qemu_argv, from the same
  MachineSpec shape), RAM mapped from the template's file with share=off (a private
  copy-on-write mapping: a clone's writes never reach the file; qemu 7.2's `readonly=on`
  would map it read-only, as ROM, so the file is opened read-write but never written),
  `-incoming defer`, `migrate-incoming` from the state file, and no `-S`, so qemu runs the
  guest as soon as the state is loaded. The per-run disks are new files under the slots'
  drive ids: the template had empty placeholders there that it never mounted, and the
  guest drops what it cached of them (`blockdev --flushbufs`) before mounting. Disk sizes
  are part of the slots (the guest keeps the size it probed): a share image is padded,
  sparse, to IMAGE_SLOT_BYTES; the scratch slot is the scratch disk's own size (in the
  key). A share image larger than its slot boots cold (same isolation, only slower).
- The job (job.clone_archive: the mount calls and step scripts job.py writes for a cold
  boot, values shell-quoted) goes over the job port as `<length>\\n<newc archive>`; init
  checks the length before unpacking it.
- Each clone gets the host's clock (`CLOCK`, epoch seconds; cargo would otherwise see
  every file as changed) and host entropy (`seed`, SEED_BYTES from os.urandom) mixed
  into the pool and made live with the RNDRESEEDCRNG ioctl (reseed_program). Writing to
  /dev/urandom alone only mixes the pool on Linux 6.1, and a clone resumes with the
  template's crng key. Measured here, clones read different bytes even without the
  reseed (at the first read after restore too: the kernel's early-boot timed reseed,
  which also draws on RDRAND, host entropy under TCG's `-cpu max`); the ioctl makes
  that a guarantee rather than a property of this kernel, CPU model and timing.
- The guest's bdev cache of a placeholder: the kernel drops a block device's page
  cache when its last opener closes it (only the boot-time partition scan opened the
  slots), so a clone saw its new disks even without `blockdev --flushbufs` (measured);
  the flush stays, at two execs, so that holds whatever opened them.
- Key (template_key): everything that shapes the saved machine: qemu's binary and
  version, kernel and initramfs digests, the root filesystem's identity (what the caller
  verified, and the file's own identity), accelerator, CPU model and count, memory, the
  qemu arguments (TCG's tb-size, device slots and their order; the kernel command line
  is the `-append` value among them, so TCG's `mitigations=off` is covered too, less
  `tsc_early_khz`: a per-host reading that changes from one read of /proc/cpuinfo to
  the next), slot sizes, the guest init, the reseed program, the template steps (argv,
  env, cwd, timeout) and FORMAT.
- Trust: a template whose files are missing or of the wrong size, whose state file's
  digest differs from the one recorded, or whose restore fails (qemu rejects the state,
  or the guest never reports ready), is deleted and built again, once; a second failure
  is the run's failure.
Every guarantee of machine.py holds for both the template boot and the clone: no NIC,
read-only drives enforced by qemu, -sandbox, pdeathsig, every guest byte on a socket we
listen on (the QMP monitor too, in the run directory; no device is wired to it), the
output cap and the deadline.
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import json
import os
import re
import shutil
import struct
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from roteiro_py import paths
from roteiro_py.eviction import record_use, used_record
from roteiro_py.locks import acquire_within, held_shared, taken_if_free
from roteiro_py.process.sandbox import Command
from roteiro_py.untrusted import FileRefused, read_bounded
from roteiro_py.vm.qemu import job
from roteiro_py.vm.qemu.machine import (
    Control,
    Disk,
    MachineResult,
    MachineSpec,
    boot,
    qemu_argv,
    qemu_version,
)
from roteiro_py.vm.qemu.qmp import Qmp
from roteiro_py.vm.qemu.status import StepRecord, step_records

#: Bumped when what a template holds or how it is restored changes.
FORMAT = 1
#: Bytes of a share-image slot; an image is padded (sparse) to it. The guest's ext4 uses
#: only the filesystem's own size, so a larger slot costs nothing but a larger sparse file.
IMAGE_SLOT_BYTES = 4 << 30
#: Bytes of host entropy sent to each clone.
SEED_BYTES = 64
#: Bytes of the largest job sent over the job port.
JOB_LIMIT = 16 << 20
#: Seconds between two QMP polls of a migration in progress.
POLL_SECONDS = 0.005
#: Seconds a clone may take from `cont` to its init reporting ready (0.3-2.5 s measured
#: on a loaded 2-core host) before its restore counts as failed: a template whose memory
#: file was damaged in place can hang the guest, which would otherwise hold the run until
#: its deadline instead of being rebuilt.
READY_SECONDS = 120.0

#: Seconds a template may go unused before the next template build removes it: every
#: new image, kernel or qemu makes a new key, and each template keeps the guest memory it
#: touched (hundreds of MB).
STALE_SECONDS = 14 * 24 * 3600

MEMORY = "memory"
STATE = "state"
META = "template.json"
ARCHIVE = "template.cpio"
#: The file name of the root filesystem the template booted (`<manifest hex>.ext4`), so
#: `cache remove-image` finds the templates built from an image it removes (`origin`).
ORIGIN = "rootfs-name"
#: A root filesystem's file name is 69 bytes; anything longer is not one of ours.
MAX_ORIGIN_BYTES = 128


def templates_root() -> Path:
    return paths.cache_root() / "vm-templates"


def reseed_program() -> bytes:
    """A static x86-64 ELF that runs `ioctl(0, RNDRESEEDCRNG)` and exits with its errno.

    Init runs it with /dev/urandom on stdin after writing the host's seed there. Built
    here from its 28 bytes of machine code so the initramfs needs no compiler and no C
    library: busybox has no applet that issues an ioctl.
    """
    code = bytes.fromhex(
        "b810000000"    # mov eax, 16         ; SYS_ioctl
        "31ff"          # xor edi, edi        ; fd 0
        "be07520000"    # mov esi, 0x5207     ; RNDRESEEDCRNG = _IO('R', 7)
        "0f05"          # syscall
        "89c7"          # mov edi, eax
        "f7df"          # neg edi             ; 0 or errno
        "b83c000000"    # mov eax, 60         ; SYS_exit
        "0f05")         # syscall
    base, header, phdr = 0x400000, 64, 56
    entry = base + header + phdr
    size = header + phdr + len(code)
    ident = b"\x7fELF\x02\x01\x01" + b"\0" * 9
    elf = struct.pack("<16sHHIQQQIHHHHHH", ident, 2, 0x3E, 1, entry, header, 0, 0, header,
                      phdr, 1, 0, 0, 0)
    program = struct.pack("<IIQQQQQQ", 1, 5, 0, base, base, size, size, 0x1000)
    return elf + program + code


@dataclass(frozen=True)
class Template:
    key: str
    directory: Path
    steps: tuple[StepRecord, ...]
    #: Seconds the template took to build (boot, probes, save); 0.0 when it was found.
    built_seconds: float = 0.0


@dataclass
class Restored:
    """A clone's run: the machine's result, and when qemu had the guest running again."""

    result: MachineResult
    running_at: float | None = None


class TemplateUnusable(Exception):
    """No template can serve this run (a template step failed): it boots cold."""


def qemu_identity(qemu: str) -> list[object]:
    """The qemu binary's resolved path, file identity and `--version` (asked once per
    binary and process: machine.qemu_version)."""
    found = shutil.which(qemu) or qemu
    real = os.path.realpath(found)
    st = os.stat(real)
    ident = (real, st.st_ino, st.st_size, st.st_mtime_ns)
    return [*ident, qemu_version(real)]


def file_identity(path: Path) -> list[object]:
    st = path.stat()
    return [str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def slot_spec(spec: MachineSpec, directory: Path) -> MachineSpec:
    """`spec` with every per-run file replaced by a placeholder in `directory`: the shape
    a template is booted with (the root filesystem stays: it is part of the key)."""
    disks = []
    for disk in spec.disks:
        if disk.serial == job.ROOT_SERIAL:
            disks.append(disk)
        else:
            disks.append(Disk(disk.serial, directory / f"slot-{disk.serial}", disk.readonly))
    shares = tuple((tag, directory / f"slot-{tag}") for tag, _ in spec.shares)
    return dataclasses.replace(spec, disks=tuple(disks), shares=shares)


def slot_sizes(spec: MachineSpec) -> dict[str, int]:
    """The size each per-run disk slot has: the scratch and the dependency cache their
    disk's own (job.SIZED_SERIALS), a share IMAGE_SLOT_BYTES."""
    return {disk.serial: (disk.path.stat().st_size if disk.serial in job.SIZED_SERIALS
                          else IMAGE_SLOT_BYTES)
            for disk in spec.disks if disk.serial != job.ROOT_SERIAL}


def fits(spec: MachineSpec) -> bool:
    """Whether every per-run share image fits its slot (the job can be restored)."""
    return all(disk.path.stat().st_size <= IMAGE_SLOT_BYTES for disk in spec.disks
               if disk.serial not in (job.ROOT_SERIAL, *job.SIZED_SERIALS))


def template_key(spec: MachineSpec, template_steps: Sequence[Command],
                 rootfs_identity: str) -> str:
    shaped = slot_spec(spec, Path("/slot"))
    argv = qemu_argv(dataclasses.replace(shaped, memory=(Path("/memory"), True), control=True,
                                         job=b""),
                     Path("/initrd"), Path("/sockets"))
    # The kernel command line is the -append value qemu_argv gives this accelerator (the
    # one the template boots with), less `tsc_early_khz`: dropping the whole word, as
    # this once did, left the command line out of the key on every host with a reading.
    argv = [re.sub(r"\s*tsc_early_khz=\S+", "", word) for word in argv]
    material = {
        "format": FORMAT,
        "qemu": qemu_identity(spec.qemu),
        "kernel": spec.assets.kernel_sha256, "initrd": spec.assets.initrd_sha256,
        "rootfs": [rootfs_identity, *file_identity(next(
            d.path for d in spec.disks if d.serial == job.ROOT_SERIAL))],
        "accel": spec.accel, "cpu": spec.cpu, "cpus": spec.cpus, "memory": spec.memory_mib,
        "argv": argv[1:],
        "slots": slot_sizes(spec),
        "init": hashlib.sha256(job.guest_init()).hexdigest(),
        "reseed": hashlib.sha256(reseed_program()).hexdigest(),
        "steps": [[list(step.argv), sorted(step.env.items()), str(step.workspace),
                   step.timeout] for step in template_steps],
    }
    return hashlib.sha256(json.dumps(material, sort_keys=True).encode()).hexdigest()[:32]


def load(directory: Path, key: str, memory_mib: int) -> Template | None:
    """The template in `directory` if all its files are there and whole, else None."""
    try:
        meta = json.loads((directory / META).read_text())
        if meta.get("format") != FORMAT or meta.get("key") != key:
            return None
        state = (directory / STATE).read_bytes()
        if hashlib.sha256(state).hexdigest() != meta.get("state_sha256"):
            return None
        if (directory / MEMORY).stat().st_size != memory_mib << 20:
            return None
        if (directory / ARCHIVE).stat().st_size != meta.get("archive_bytes"):
            return None
        steps = tuple(StepRecord.from_json(step) for step in meta["steps"])
        os.utime(directory)  # used now: see sweep
        record_use(used_record(directory))  # and for `cache prune` (eviction.py)
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return Template(key, directory, steps)


#: A template's directory (its key), as template_key names it.
_KEY = re.compile(r"[0-9a-f]{32}")


def lock_path(root: Path, key: str) -> Path:
    """The template's lock: held exclusive by the run that builds it (and by what removes
    it), shared by every run whose VM restores from it, until that VM is done."""
    return root / f"{key}.lock"


def sweep(root: Path, keep: str) -> None:
    """Remove templates unused for STALE_SECONDS whose lock is free (no run is restoring
    from one or building it), except `keep`, and builds left half-done as long ago (a
    live build's directory is younger than any run's deadline)."""
    cutoff = time.time() - STALE_SECONDS
    for entry in root.iterdir():
        with contextlib.suppress(OSError):
            if entry.name == keep or not entry.is_dir() or entry.lstat().st_mtime >= cutoff:
                continue
            if not _KEY.fullmatch(entry.name):
                discard(entry)
                continue
            with taken_if_free(lock_path(root, entry.name)) as free:
                if free:
                    discard(entry)


def discard_if_free(root: Path, key: str) -> bool:
    """Remove the template `key` unless a run holds its lock (False: left as it is)."""
    with taken_if_free(lock_path(root, key)) as free:
        if free:
            discard(root / key)
        return free


def discard(directory: Path) -> None:
    """Remove a template (renamed aside first, so no other run sees it half-deleted).
    The caller holds its lock exclusive, or it is no template (a half-done build)."""
    aside = directory.with_name(f".{directory.name}.{os.getpid()}.gone")
    with contextlib.suppress(OSError):
        os.rename(directory, aside)
    shutil.rmtree(aside, ignore_errors=True)
    with contextlib.suppress(FileNotFoundError):
        used_record(directory).unlink()


def origin(directory: Path) -> str | None:
    """The file name of the root filesystem the template in `directory` booted, or None:
    a template from before ORIGIN was written, or a file that is not one of ours."""
    try:
        return read_bounded(directory / ORIGIN, MAX_ORIGIN_BYTES).decode("ascii").strip()
    except (OSError, FileRefused, UnicodeDecodeError):
        return None


def _sparse(path: Path, size: int) -> None:
    with path.open("wb") as handle:
        handle.truncate(size)


def _migrate_done(qmp: Qmp, until: float) -> None:
    while True:
        info = qmp.execute("query-migrate") or {}
        status = info.get("status")
        if status == "completed":
            return
        if status in ("failed", "cancelled"):
            raise RuntimeError(f"saving the template failed: {info.get('error-desc', status)}")
        if time.monotonic() > until:
            raise RuntimeError("saving the template did not finish before the deadline")
        time.sleep(POLL_SECONDS)


WAITING_FOR = "another run building the VM template"


@contextlib.contextmanager
def in_use(spec: MachineSpec, template_steps: Sequence[Command], key: str, archive: bytes, *,
           until: float, deadline_s: float, root: Path | None = None,
           building: Callable[[], None] | None = None) -> Iterator[Template]:
    """The template for `key`, held for the block: its lock held shared from the check that
    finds it whole until the block ends (locks.held_shared), so that no prune or sweep
    removes it while a clone restores from it; built (`ensure`) first if missing.

    Raises TemplateUnusable when a template step fails (the run then boots cold, which
    reports that failure as a cold run would), DeadlineExceeded when the lock or the build
    outlasts the run's deadline.
    """
    root = root or templates_root()
    root.mkdir(parents=True, exist_ok=True)
    directory = root / key
    built: list[float] = []  # what this run's build took: the check after it finds a template

    def build() -> None:
        made = ensure(spec, template_steps, key, archive, until=until, deadline_s=deadline_s,
                      root=root, building=building)
        built.append(made.built_seconds)

    with held_shared(lock_path(root, key), until=until, seconds=deadline_s,
                     waiting_for=WAITING_FOR,
                     check=lambda: load(directory, key, spec.memory_mib),
                     build=build, what=f"VM template {key}", where=directory) as found:
        # a template this run built says so (the report's template_built_seconds); one it
        # found, or one another run built while this one waited, took it nothing (0.0)
        yield dataclasses.replace(found, built_seconds=built[-1]) if built else found


def ensure(spec: MachineSpec, template_steps: Sequence[Command], key: str, archive: bytes, *,
           until: float, deadline_s: float, root: Path | None = None,
           building: Callable[[], None] | None = None) -> Template:
    """The template for `key`, built (under its lock held exclusive, into place
    atomically) if missing. What a run restores from is held (`in_use`), not this.

    Raises TemplateUnusable when a template step fails, DeadlineExceeded when the lock or
    the build outlasts the run's deadline.
    """
    root = root or templates_root()
    root.mkdir(parents=True, exist_ok=True)
    directory = root / key
    lock = acquire_within(lock_path(root, key), until=until, seconds=deadline_s,
                          waiting_for="another run building or using the VM template")
    try:
        found = load(directory, key, spec.memory_mib)
        if found is not None:
            return found
        if directory.exists():
            discard(directory)
        if building is not None:
            building()
        sweep(root, key)
        return _build(spec, template_steps, key, archive, directory, until)
    finally:
        lock.release()


def _build(spec: MachineSpec, template_steps: Sequence[Command], key: str, archive: bytes,
           directory: Path, until: float) -> Template:
    began = time.monotonic()
    work = Path(tempfile.mkdtemp(prefix=f".{key[:12]}-", dir=directory.parent))
    try:
        shaped = slot_spec(spec, work)
        for disk, size in zip((d for d in shaped.disks if d.serial != job.ROOT_SERIAL),
                              slot_sizes(spec).values(), strict=True):
            _sparse(disk.path, size)
        for _, host in shaped.shares:
            host.mkdir(mode=0o700)
        state_path = work / STATE
        shaped = dataclasses.replace(shaped, memory=(work / MEMORY, True), control=True,
                                     job=archive)
        ready = threading.Event()

        def save(control: Control) -> None:
            qmp = Qmp(control.qmp, until=until)
            while not ready.wait(0.05):
                if time.monotonic() > until:
                    raise RuntimeError("the template guest did not get ready in time")
            qmp.execute("stop")
            qmp.execute("migrate-set-capabilities", capabilities=[
                {"capability": "x-ignore-shared", "state": True}])
            with state_path.open("wb") as state:
                qmp.execute("getfd", fds=(state.fileno(),), fdname="state")
                qmp.execute("migrate", uri="fd:state")
                _migrate_done(qmp, until)
            qmp.execute("quit")

        def watch(line: str) -> None:
            if line == "template-ready":
                ready.set()

        result = boot(shaped, deadline=until - time.monotonic(), control=save, on_status=watch)
        records, failure = step_records(result, len(template_steps))
        if failure is not None:
            raise TemplateUnusable(failure)
        if not ready.is_set() or result.control_failure is not None:
            raise TemplateUnusable(result.control_failure or result.failure or
                                   "the template guest never got ready")
        if any(record.exit != 0 for record in records) or len(records) != len(template_steps):
            raise TemplateUnusable("a template step failed")
        if any(f"{kind}{index}" in result.cut for index in range(len(records))
               for kind in ("stdout", "stderr")):
            # its records would be every clone's outcome: the cold boot reports it instead
            raise TemplateUnusable("a template step's output did not arrive whole")
        (work / ARCHIVE).write_bytes(archive)
        state = state_path.read_bytes()
        meta = {"format": FORMAT, "key": key, "state_sha256": hashlib.sha256(state).hexdigest(),
                "archive_bytes": len(archive), "steps": [r.to_json() for r in records],
                "built_seconds": round(time.monotonic() - began, 3)}
        (work / META).write_text(json.dumps(meta))
        (work / ORIGIN).write_text(next(d.path for d in spec.disks
                                        if d.serial == job.ROOT_SERIAL).name)
        for name in (MEMORY, STATE, ARCHIVE, META):
            with (work / name).open("rb+") as handle:
                os.fsync(handle.fileno())
        for disk in shaped.disks:
            if disk.serial != job.ROOT_SERIAL:
                disk.path.unlink()
        for _, host in shaped.shares:
            host.rmdir()
        os.rename(work, directory)
    except BaseException:
        shutil.rmtree(work, ignore_errors=True)
        raise
    return Template(key, directory, tuple(records), built_seconds=time.monotonic() - began)


def restore(template: Template, spec: MachineSpec, job_archive: bytes, *, until: float,
            output_limit: int, watch: Callable[[str, bytes], None] | None = None) -> Restored:
    """Run a clone of `template` with `spec`'s per-run disks and shares, sent `job_archive`."""
    if len(job_archive) > JOB_LIMIT:
        raise ValueError(f"a job of {len(job_archive)} bytes is over {JOB_LIMIT}")
    archive = (template.directory / ARCHIVE).read_bytes()
    cloned = dataclasses.replace(spec, memory=(template.directory / MEMORY, False),
                                 control=True, incoming=True, job=archive)
    restored = Restored(result=None)  # type: ignore[arg-type]

    def resume(control: Control) -> None:
        qmp = Qmp(control.qmp, until=until)
        qmp.execute("migrate-set-capabilities", capabilities=[
            {"capability": "x-ignore-shared", "state": True}])
        with (template.directory / STATE).open("rb") as state:
            qmp.execute("getfd", fds=(state.fileno(),), fdname="state")
        qmp.execute("migrate-incoming", uri="fd:state")
        control.job.setblocking(True)
        control.job.settimeout(max(until - time.monotonic(), 0.1))
        control.job.sendall(f"{len(job_archive)}\n".encode() + job_archive)
        # The template was saved stopped, and the state says so: the clone waits paused
        # for `cont` once the state is loaded.
        while (info := qmp.execute("query-migrate") or {}).get("status") != "completed":
            if info.get("status") == "failed":
                raise RuntimeError(f"qemu could not load the template: "
                                   f"{str(info.get('error-desc', ''))[:300]}")
            if time.monotonic() > until:
                raise RuntimeError("the clone's state did not load before the deadline")
            time.sleep(POLL_SECONDS)
        qmp.execute("cont")
        restored.running_at = time.monotonic() - control.clock
        waited = time.monotonic()
        while not ready.wait(0.5):
            if time.monotonic() - waited > READY_SECONDS:
                raise RuntimeError(f"the restored guest was not ready within {READY_SECONDS:g} s")
            qmp.execute("query-status")  # a QmpError once qemu has exited: stop waiting

    ready = threading.Event()

    def seen(line: str) -> None:
        if line == "ready":
            ready.set()

    restored.result = boot(cloned, deadline=until - time.monotonic(), control=resume,
                           output_limit=output_limit, watch=watch, on_status=seen)
    return restored


def seed() -> bytes:
    return os.urandom(SEED_BYTES)
