"""The VM template key (vm/qemu/template.py) changes with every input that shapes the
saved machine, and with nothing that differs from one run of the same machine to the next."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import pytest

from roteiro_py.process.sandbox import Command
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.qemu import job, machine, template
from roteiro_py.vm.qemu.machine import Disk, MachineSpec


def spec_in(tmp_path: Path) -> MachineSpec:
    rootfs = tmp_path / "rootfs.ext4"
    rootfs.write_bytes(b"root")
    scratch = tmp_path / "scratch.img"
    scratch.write_bytes(b"\0" * 4096)
    share = tmp_path / "share.img"
    share.write_bytes(b"share")
    assets = Assets(tmp_path / "vmlinux", tmp_path / "base.cpio", "k" * 64, "i" * 64, "6.1",
                    "provisioned")
    return MachineSpec(
        assets=assets, accel="tcg", cpu="max", cpus=2, memory_mib=256,
        disks=(Disk(job.ROOT_SERIAL, rootfs, True), Disk(job.SCRATCH_SERIAL, scratch, False),
               Disk(job.share_serial(0), share, True)),
        shares=(("share1", tmp_path),), ports=("stdout0", "stderr0", "stdout1", "stderr1"),
        job=b"", qemu="qemu-system-x86_64")


def probe(cwd: str = "/tmp", **env: str) -> Command:
    return Command("cargo-clippy", ("--version",), Path(cwd), {"PATH": "/bin", **env},
                   timeout=60)


def key(spec: MachineSpec, steps: list[Command] | None = None, rootfs: str = "sha256:aa") -> str:
    return template.template_key(spec, steps or [probe()], rootfs)


@pytest.fixture(autouse=True)
def host_tsc(monkeypatch: pytest.MonkeyPatch) -> None:
    """A host whose /proc/cpuinfo gives a TSC reading (the command line gets
    `tsc_early_khz=`), as on every x86 host this runs on."""
    monkeypatch.setattr(machine, "tsc_khz", lambda: 2400000)


CHANGES: dict[str, Callable[[MachineSpec, Path], str]] = {
    "accel": lambda s, _: key(dataclasses.replace(s, accel="kvm")),
    "cpu model": lambda s, _: key(dataclasses.replace(s, cpu="qemu64")),
    "cpus": lambda s, _: key(dataclasses.replace(s, cpus=1)),
    "memory": lambda s, _: key(dataclasses.replace(s, memory_mib=512)),
    "kernel": lambda s, _: key(dataclasses.replace(s, assets=dataclasses.replace(
        s.assets, kernel_sha256="x" * 64))),
    "initramfs": lambda s, _: key(dataclasses.replace(s, assets=dataclasses.replace(
        s.assets, initrd_sha256="x" * 64))),
    "root filesystem digest": lambda s, _: key(s, rootfs="sha256:bb"),
    "root filesystem file": lambda s, t: (t / "rootfs.ext4").write_bytes(b"other") and key(s),
    "scratch size": lambda s, t: (t / "scratch.img").write_bytes(b"\0" * 8192) and key(s),
    "slots": lambda s, _: key(dataclasses.replace(s, shares=())),
    "ports": lambda s, _: key(dataclasses.replace(s, ports=("stdout0", "stderr0"))),
    "probe argv": lambda s, _: key(s, [Command("rustc", ("-vV",), Path("/tmp"),
                                               {"PATH": "/bin"}, timeout=60)]),
    "probe env": lambda s, _: key(s, [probe(RUSTUP_TOOLCHAIN="1.95")]),
    "probe cwd": lambda s, _: key(s, [probe("/")]),
    "probe count": lambda s, _: key(s, [probe(), probe()]),
}

#: The knobs of TCG's tuning (machine.py), each with another value; the key must cover
#: them: a template built with one is never restored with another.
TUNING: dict[str, object] = {
    "TCG_TB_SIZE_MIB": 128,
    "TCG_KERNEL_WORDS": ("cryptomgr.notests",),
}


@pytest.mark.parametrize("knob", sorted(TUNING))
def test_tcg_tuning_changes_the_key(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                    knob: str) -> None:
    spec = spec_in(tmp_path)
    before = key(spec)
    kvm = key(dataclasses.replace(spec, accel="kvm"))
    monkeypatch.setattr(machine, knob, TUNING[knob])
    assert key(spec) != before
    # under KVM neither knob is used, and the key stays
    assert key(dataclasses.replace(spec, accel="kvm")) == kvm


def test_the_kernel_command_line_qemu_gets_is_in_the_key(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_in(tmp_path)
    before = key(spec)
    monkeypatch.setattr(machine, "kernel_cmdline", lambda accel: f"console=ttyS0 {accel} "
                        "cryptomgr.notests tsc_early_khz=2400000")
    assert key(spec) != before


@pytest.mark.parametrize("change", sorted(CHANGES))
def test_every_input_changes_the_key(tmp_path: Path, change: str) -> None:
    spec = spec_in(tmp_path)
    before = key(spec)
    assert key(spec) == before  # control arm: the same inputs, the same key
    assert CHANGES[change](spec, tmp_path) != before


def test_per_run_values_do_not_change_the_key(tmp_path: Path,
                                              monkeypatch: pytest.MonkeyPatch) -> None:
    spec = spec_in(tmp_path)
    before = key(spec)
    (tmp_path / "share.img").write_bytes(b"another worktree")  # per-run: its slot is fixed
    other = tmp_path / "other"
    other.mkdir()
    moved = dataclasses.replace(spec, shares=(("share1", other),), job=b"another job")
    monkeypatch.setattr(machine, "tsc_khz", lambda: 2399998)  # the next /proc/cpuinfo read
    assert key(moved) == before


def test_reseed_program_is_a_static_x86_64_executable() -> None:
    program = template.reseed_program()
    assert program[:4] == b"\x7fELF" and program[4] == 2 and program[18] == 0x3E
    assert len(program) < 200


def test_sweep_removes_only_templates_unused_for_long(tmp_path: Path) -> None:
    import os
    import time

    old = time.time() - template.STALE_SECONDS - 60
    for name in ("stale", "fresh", "kept-stale"):
        (tmp_path / name).mkdir()
        (tmp_path / name / template.MEMORY).write_bytes(b"m")
    for name in ("stale", "kept-stale"):
        os.utime(tmp_path / name, (old, old))
    template.sweep(tmp_path, keep="kept-stale")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fresh", "kept-stale"]
