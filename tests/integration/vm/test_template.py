"""VM templates under TCG (vm/qemu/template.py): clones restored from one template never
share state, the key covers what shapes the template, a damaged template is rebuilt, and
a run that cannot be restored boots cold with the same results."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.api import JobOutcome
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.mounts import GUEST_SCRATCH
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import machine, template
from roteiro_py.vm.qemu.backend import QemuBackend

CPUS = 2
RANDOM = "taskset 1 head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \\n'; echo"
#: The template's step: prints random bytes the clones must never repeat.
PROBE = f"echo probe-ran; {RANDOM}"
#: The clone's step: its worktree, its scratch, fresh random bytes, its clock.
JOB = (f"cat file; ls {GUEST_SCRATCH}; echo mine > {GUEST_SCRATCH}/mark-$(cat file); {RANDOM}; "
       "date +%s")


def sh(script: str, cwd: Path | str, timeout: float = 60) -> Command:
    return Command("sh", ("-c", script), Path(cwd), {"PATH": "/bin"}, timeout=timeout)


class Run:
    def __init__(self, tmp: Path, name: str, rootfs: Path, templates: Path,
                 enabled: bool = True, scratch_mib: int = 64) -> None:
        self.tree = tmp / f"tree-{name}"
        self.tree.mkdir()
        (self.tree / "file").write_text(f"content-{name}\n")
        self.disk = scratch.create_scratch(tmp / f"scratch-{name}.img", scratch_mib)
        self.grant = GrantSet.of(f"fs:read:{self.tree}/**", f"fs:list:{self.tree}/**",
                                 f"fs:write:{GUEST_SCRATCH}/**", "proc:exec:sh")
        self.backend = QemuBackend(VmOptions(
            rootfs=rootfs, scratch=self.disk, accel="tcg", memory_mib=256, cpus=CPUS, template=enabled,
            template_root=templates, rootfs_identity="test-rootfs"))
        self.outcome: JobOutcome | None = None

    def run(self, probe: str = PROBE) -> JobOutcome:
        self.clock = int(time.time())
        self.outcome = self.backend.run_steps([sh(probe, "/tmp"), sh(JOB, self.tree)],
                                              self.grant, deadline=240, template_steps=1)
        return self.outcome


def lines(outcome: JobOutcome, step: int) -> list[str]:
    return outcome.steps[step].stdout.decode().splitlines()


@pytest.fixture
def templates(tmp_path: Path) -> Path:
    return tmp_path / "templates"


def test_clones_never_share_state(tmp_path: Path, rootfs_image: Path, templates: Path) -> None:
    first = Run(tmp_path, "first", rootfs_image, templates)
    built = first.run()
    assert built.completed, (built.failure, built.console[-2000:])
    assert built.template is not None and built.template_built_seconds > 0
    template_random = lines(built, 0)[1]
    runs = [Run(tmp_path, name, rootfs_image, templates) for name in ("a", "b")]
    threads = [threading.Thread(target=run.run) for run in runs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seen = []
    for run in runs:
        outcome = run.outcome
        assert outcome is not None and outcome.completed, outcome and outcome.failure
        assert outcome.template == built.template and outcome.template_built_seconds == 0
        assert lines(outcome, 0) == lines(built, 0)  # the template's own step, cached
        content, *rest = lines(outcome, 1)
        assert content == f"content-{run.tree.name[5:]}"  # its own worktree
        assert not [line for line in rest if line.startswith("mark-")]  # nobody else's
        random, clock = rest[-2], int(rest[-1])
        assert len(random) == 64
        assert clock >= run.clock  # the host's clock, not the template's
        seen.append(random)
    assert first.outcome is not None
    seen.append(lines(first.outcome, 1)[-2])
    assert len(set(seen)) == len(seen)  # every clone its own random bytes
    assert template_random not in seen


def test_damaged_template_is_rebuilt(tmp_path: Path, rootfs_image: Path,
                                     templates: Path) -> None:
    built = Run(tmp_path, "first", rootfs_image, templates).run()
    assert built.completed and built.template is not None
    directory = templates / built.template
    for name in (template.STATE, template.MEMORY):
        assert template.load(directory, built.template, 256) is not None  # control arm
        with (directory / name).open("r+b") as handle:
            handle.truncate(1000)
        assert template.load(directory, built.template, 256) is None  # never trusted
        again = Run(tmp_path, f"after-{name}", rootfs_image, templates).run()
        assert again.completed, again.failure
        assert again.template == built.template
        assert again.template_built_seconds > 0  # built anew, not trusted
        assert lines(again, 1)[0] == f"content-after-{name}"
    # Damage load() cannot see (the memory file's size is right, its bytes are not): the
    # restore fails, and the template is rebuilt rather than trusted.
    memory = directory / template.MEMORY
    size = memory.stat().st_size
    with memory.open("r+b") as handle:
        handle.truncate(0)
        handle.truncate(size)
    assert template.load(directory, built.template, 256) is not None
    again = Run(tmp_path, "after-zeroed", rootfs_image, templates).run()
    assert again.completed, again.failure
    assert again.template == built.template and again.template_built_seconds > 0


def test_key_covers_its_inputs(tmp_path: Path, rootfs_image: Path, templates: Path) -> None:
    base = Run(tmp_path, "base", rootfs_image, templates).run()
    assert base.template is not None
    other_probe = Run(tmp_path, "probe", rootfs_image, templates).run(probe=PROBE + "; true")
    other_scratch = Run(tmp_path, "scratch", rootfs_image, templates, scratch_mib=80).run()
    keys = {base.template, other_probe.template, other_scratch.template}
    assert None not in keys and len(keys) == 3
    assert other_probe.template_built_seconds > 0 and other_scratch.template_built_seconds > 0


#: The template step that shows the guest kernel's command line and what it says of
#: Spectre v2 (retpolines when its mitigations are on).
KERNEL = "cat /proc/cmdline /sys/devices/system/cpu/vulnerabilities/spectre_v2"


def test_tcg_tuning_reaches_the_guest_and_makes_its_own_template(
        tmp_path: Path, rootfs_image: Path, templates: Path,
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "TCG_KERNEL_WORDS", ("mitigations=off",))  # measured, not shipped
    tuned = Run(tmp_path, "tuned", rootfs_image, templates).run(probe=KERNEL)
    cmdline, spectre_v2 = lines(tuned, 0)
    assert tuned.template is not None and tuned.template_built_seconds > 0
    monkeypatch.setattr(machine, "TCG_KERNEL_WORDS", ())
    monkeypatch.setattr(machine, "TCG_TB_SIZE_MIB", 64)  # the value before issue 25
    default = Run(tmp_path, "default", rootfs_image, templates).run(probe=KERNEL)
    default_cmdline, default_spectre_v2 = lines(default, 0)
    # a template made with the other values is never restored with these
    assert default.template not in (None, tuned.template) and default.template_built_seconds > 0
    assert "mitigations=off" not in default_cmdline.split()
    assert default_spectre_v2.startswith("Mitigation:"), default_spectre_v2  # the control arm
    assert "mitigations=off" in cmdline.split()
    assert spectre_v2.startswith("Vulnerable"), spectre_v2  # what the kernel did with it


def test_a_job_that_does_not_fit_boots_cold(tmp_path: Path, rootfs_image: Path,
                                            templates: Path,
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    run = Run(tmp_path, "big", rootfs_image, templates)
    # the worktree image (a few MB) is now larger than its slot
    monkeypatch.setattr(template, "IMAGE_SLOT_BYTES", 4096)
    outcome = run.run()
    assert outcome.completed and outcome.template is None
    assert lines(outcome, 1)[0] == "content-big"
    assert not templates.exists()


def test_cold_path_gives_the_same_results(tmp_path: Path, rootfs_image: Path,
                                          templates: Path) -> None:
    cold = Run(tmp_path, "cold", rootfs_image, templates, enabled=False).run()
    assert cold.completed and cold.template is None
    assert not templates.exists()
    warm = Run(tmp_path, "warm", rootfs_image, templates).run()
    assert warm.completed and warm.template is not None
    for outcome, name in ((cold, "cold"), (warm, "warm")):
        assert lines(outcome, 0)[0] == "probe-ran"
        assert lines(outcome, 1)[0] == f"content-{name}"
        assert [step.exit for step in outcome.steps] == [0, 0]
