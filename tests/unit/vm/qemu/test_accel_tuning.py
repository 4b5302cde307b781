"""What machine.qemu_argv gives each accelerator for TCG's own tuning (issue 25, lever 3):
the translation cache's size, and kernel words for TCG only (none are shipped:
`mitigations=off` was measured and did not pay; the tests set it to see where it goes).

Under TCG qemu does not emulate speculative execution, so the guest's mitigations only
guard against nothing; under KVM the guest runs on the host's CPU, which speculates, and
the kernel's defaults must stay whatever TCG gets. The same argv shapes a template (its key covers it:
test_template_key.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.qemu import machine
from roteiro_py.vm.qemu.machine import MachineSpec


def spec(accel: str) -> MachineSpec:
    assets = Assets(Path("/vmlinux"), Path("/base.cpio"), "k" * 64, "i" * 64, "6.1", "provisioned")
    return MachineSpec(assets=assets, accel=accel, cpu="max", cpus=2, memory_mib=256, disks=(),
                       shares=(), ports=("stdout0", "stderr0"), job=b"")


def option(argv: list[str], name: str) -> str:
    assert argv.count(name) == 1, argv
    return argv[argv.index(name) + 1]


def test_tcg_gets_the_stated_translation_cache() -> None:
    argv = machine.qemu_argv(spec("tcg"), Path("/initrd"), Path("/sockets"))
    assert option(argv, "-accel") == f"tcg,tb-size={machine.TCG_TB_SIZE_MIB}"
    # 64 MiB, the size before issue 25, thrashed on LLVM's code (bench/vm_tcg.py)
    assert machine.TCG_TB_SIZE_MIB >= 256


def test_kvm_gets_no_tcg_option() -> None:
    argv = machine.qemu_argv(spec("kvm"), Path("/initrd"), Path("/sockets"))
    assert option(argv, "-accel") == "kvm"


def test_tcg_words_reach_the_tcg_command_line_only(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "TCG_KERNEL_WORDS", ("mitigations=off",))
    tcg = machine.qemu_argv(spec("tcg"), Path("/initrd"), Path("/sockets"))
    kvm = machine.qemu_argv(spec("kvm"), Path("/initrd"), Path("/sockets"))
    assert "mitigations=off" in option(tcg, "-append").split()
    assert "mitigations=off" not in option(kvm, "-append").split()


@pytest.mark.parametrize("khz", [None, 2596124])
def test_kvm_keeps_the_kernels_default_mitigations(
        monkeypatch: pytest.MonkeyPatch, khz: int | None) -> None:
    monkeypatch.setattr(machine, "tsc_khz", lambda: khz)
    monkeypatch.setattr(machine, "TCG_KERNEL_WORDS", ("mitigations=off",))
    argv = machine.qemu_argv(spec("kvm"), Path("/initrd"), Path("/sockets"))
    words = option(argv, "-append").split()
    assert "rdinit=/init" in words  # control: this is the kernel's command line
    assert not [word for word in words if word.startswith(("mitigations=", "nopti", "nospectre",
                                                            "spectre_v2=", "pti="))], words
    assert machine.kernel_cmdline("kvm") == option(argv, "-append")


def test_the_tcg_command_line_is_the_kvm_one_and_the_tcg_words(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(machine, "tsc_khz", lambda: 2596124)
    monkeypatch.setattr(machine, "TCG_KERNEL_WORDS", ("mitigations=off",))
    tcg, kvm = machine.kernel_cmdline("tcg").split(), machine.kernel_cmdline("kvm").split()
    assert [word for word in tcg if word not in machine.TCG_KERNEL_WORDS] == kvm
    assert set(machine.TCG_KERNEL_WORDS) <= set(tcg)
