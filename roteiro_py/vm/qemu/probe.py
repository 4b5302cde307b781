"""Does this host's hypervisor actually run our guest? Boot a canary and see.

Opening /dev/kvm, or even KVM_CREATE_VM, says "yes" on hosts where no ordinary guest
runs (VM_NOTES: a PVM nested hypervisor; boxlite/libkrun failed the same way). So the
probe boots the real kernel with the base initramfs and a one-line job that prints
`ROTEIRO-CANARY-OK` on the serial console, and waits for that marker with a deadline.
The two KVM failures seen on these machines are both caught:
- `-cpu host`: qemu aborts within ~35 ms (SIGABRT, `failed to set MSR 0x10a`), reported
  with qemu's own last line;
- the default CPU model: nothing on the console until killed; reported as a hang when
  `KVM_DEADLINE` passes (a KVM canary boots in well under a second).
Verdicts are cached under `paths.cache_root()/vm-probe` per (qemu version, kernel and
initramfs digests, accelerator, cpu model), so a lint pays for the probe once. A TCG
timeout is not cached: under TCG it more likely means a loaded host than a broken one.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from roteiro_py import errors, paths
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.qemu import job
from roteiro_py.vm.qemu.machine import QEMU, QEMU_VERSION_TIMEOUT_S, MachineSpec, boot, qemu_version
from roteiro_py.vocabulary import ACCELS

MARKER = "ROTEIRO-CANARY-OK"
#: A KVM canary that has not printed its marker by now is hung.
KVM_DEADLINE = 6.0
#: Under TCG the canary took 3.3-5.6 s on a 2-core host shared with other builds.
TCG_DEADLINE = 30.0
#: The accelerators a probe can pass: every `[vm] accel` choice but "auto".
ACCELERATORS = tuple(accel for accel in ACCELS if accel != "auto")
#: How long a "silent hang" verdict for hardware acceleration is trusted. An abort is
#: deterministic and cached for good; a hang can also be one slow boot on a loaded host,
#: and must not disable KVM for every later lint.
HANG_VERDICT_TTL_S = 3600.0
#: The CPU model each accelerator runs with (the probe must test what runs).
CPU = {"kvm": "host", "tcg": "max"}


@dataclass(frozen=True)
class Verdict:
    accel: str
    usable: bool
    reason: str
    seconds: float
    qemu_version: str
    cpu: str
    cached: bool = False


def qemu_info(qemu: str = QEMU) -> tuple[str | None, str | None]:
    """(absolute path, version string) of qemu; the path None when it is not installed,
    the version None when it did not say it (`machine.qemu_version`).

    The one place a failed `--version` is not a refusal of its own: doctor goes on to its
    other checks and reports the qemu without a version, and the probe's verdict (not
    usable, saying why) becomes the lint's SandboxUnavailable.
    """
    path = shutil.which(qemu)
    if path is None:
        return None, None
    try:
        first = qemu_version(path)
    except (errors.SpawnFailed, errors.HostToolFailed):
        return path, None
    return path, first.removeprefix("QEMU emulator version ").strip() or None


def _cache_file(version: str, assets: Assets, accel: str, cpu: str) -> Path:
    key = json.dumps([version, assets.kernel_sha256, assets.initrd_sha256, accel, cpu])
    name = hashlib.sha256(key.encode()).hexdigest()[:32]
    return paths.cache_root() / "vm-probe" / f"{name}.json"


def _precheck(accel: str) -> str | None:
    if accel == "kvm":
        if not os.path.exists("/dev/kvm"):
            return "/dev/kvm does not exist (KVM not loaded, or not exposed to this host)"
        if not os.access("/dev/kvm", os.R_OK | os.W_OK):
            return "/dev/kvm is not readable and writable by this user"
    return None


def cached_verdict(cache: Path) -> Verdict | None:
    """The stored verdict, unless it is missing, unreadable, or an expired hang."""
    try:
        data = json.loads(cache.read_text())
        expired = time.time() - cache.stat().st_mtime >= HANG_VERDICT_TTL_S
        if not data.get("usable") and "silent hang" in str(data.get("reason")) and expired:
            return None
        return Verdict(**{**data, "cached": True})
    except (OSError, ValueError, TypeError, AttributeError):
        return None


def probe(accel: str, assets: Assets, *, cpu: str | None = None, qemu: str = QEMU,
          use_cache: bool = True) -> Verdict:
    """Boot the canary under `accel` and say whether it ran, and if not, why."""
    cpu = cpu or CPU.get(accel, "max")
    path, version = qemu_info(qemu)
    if path is None:
        return Verdict(accel, False, f"{qemu} is not installed", 0.0, "", cpu)
    if version is None:
        return Verdict(accel, False, f"{path} did not say its version (`--version` failed "
                       f"or took more than {QEMU_VERSION_TIMEOUT_S:g} s)", 0.0, "", cpu)
    early = _precheck(accel)
    if early is not None:
        return Verdict(accel, False, early, 0.0, version, cpu)
    cache = _cache_file(version, assets, accel, cpu)
    if use_cache:
        cached = cached_verdict(cache)
        if cached is not None:
            return cached
    deadline = TCG_DEADLINE if accel == "tcg" else KVM_DEADLINE
    spec = MachineSpec(assets=assets, accel=accel, cpu=cpu, cpus=1, memory_mib=256,
                       disks=(), shares=(), ports=(), job=job.canary_archive(), qemu=path)
    clock = time.monotonic()
    result = boot(spec, deadline=deadline)
    seconds = round(time.monotonic() - clock, 3)
    qemu_said = result.qemu_output.decode("utf-8", "replace").strip().splitlines()
    last = qemu_said[-1][:200] if qemu_said else ""
    if MARKER.encode() in result.console:
        verdict = Verdict(accel, True, f"canary guest booted in {seconds:.1f} s", seconds,
                          version, cpu)
    elif result.timed_out:
        verdict = Verdict(accel, False, f"the canary guest printed nothing within "
                          f"{deadline:g} s and was killed (a silent hang)"
                          + (f"; qemu said: {last}" if last else ""), seconds, version, cpu)
        if accel == "tcg":
            return verdict
    else:
        status = result.qemu_exit
        how = (f"was killed by signal {-status}" + (" (SIGABRT: qemu aborted)"
               if status == -6 else "")) if status is not None and status < 0 else \
            f"exited with status {status}"
        verdict = Verdict(accel, False, f"qemu {how} after {seconds:.2f} s without booting "
                          "the canary" + (f"; qemu said: {last}" if last else ""), seconds,
                          version, cpu)
    cache.parent.mkdir(parents=True, exist_ok=True)
    staged = cache.with_suffix(".tmp")
    staged.write_text(json.dumps({k: v for k, v in asdict(verdict).items() if k != "cached"}))
    os.replace(staged, cache)
    return verdict
