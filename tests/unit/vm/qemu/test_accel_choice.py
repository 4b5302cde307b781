"""Which accelerator the qemu backend runs under, decided from the probe's verdicts.

`QemuBackend._resolve_accel` asks `probe.probe` whether each accelerator boots a guest and
chooses from the answers: `auto` is the host's hardware accelerator (KVM: a lint runs only
on Linux x86_64, platform_support.py) or a refusal saying whether TCG would work, never
TCG; TCG runs only when named. The integration tests can only see the verdicts the machine they run on gives
(KVM broken on the development hosts, working on a CI runner), so each of them tested
one half. Here every combination is driven through the real decision with the verdicts
injected: `probe.probe` is replaced, because a real host cannot be made to give "KVM
boots" or "TCG fails" on demand.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from roteiro_py import errors, vocabulary
from roteiro_py.vm.api import Isolation
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import backend as qemu_backend
from roteiro_py.vm.qemu import probe

#: What each fake verdict says, in the words the real probe uses for these outcomes.
BOOTED = "canary guest booted in 0.4 s"
FAILED = "qemu was killed by signal 6 (SIGABRT: qemu aborted) after 0.04 s without booting the canary"


class Host:
    """A host as the backend sees it: its platform, and the probe's verdict per accelerator."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, tmp_path: Path,
                 usable: dict[str, bool]) -> None:
        self.usable = usable
        self.asked: list[tuple[str, str]] = []
        self.assets = Assets(tmp_path / "vmlinuz", tmp_path / "initrd", "k" * 64, "i" * 64,
                             "6.1.0-test", "provisioned")
        monkeypatch.setattr(probe, "probe", self.probe)
        monkeypatch.setattr(qemu_backend, "load_assets", lambda kernel, initrd: self.assets)

    def probe(self, accel: str, assets: Assets, *, cpu: str | None = None,
              qemu: str = "", use_cache: bool = True) -> probe.Verdict:
        assert assets is self.assets  # the backend probes the assets it boots
        self.asked.append((accel, qemu))
        usable = self.usable[accel]
        return probe.Verdict(accel, usable, BOOTED if usable else FAILED, 0.4, "7.2.19",
                             cpu or probe.CPU[accel])


def backend_for(tmp_path: Path, accel: str) -> qemu_backend.QemuBackend:
    return qemu_backend.QemuBackend(VmOptions(rootfs=tmp_path / "rootfs.ext4", accel=accel),
                                    qemu=str(tmp_path / "bin" / "qemu-system-x86_64"))


VERDICTS = [dict(zip(("kvm", "tcg"), combo, strict=True))
            for combo in itertools.product((True, False), repeat=2)]


def test_the_choices_are_the_linux_accelerators_and_hvf_is_refused_as_usage(tmp_path: Path) -> None:
    """hvf (macOS) is no choice: a lint runs only on Linux x86_64 (platform_support.py)."""
    assert vocabulary.ACCELS == ("auto", "kvm", "tcg") and probe.ACCELERATORS == ("kvm", "tcg")
    with pytest.raises(errors.UsageError, match="auto, kvm, tcg, not 'hvf'"):
        backend_for(tmp_path, "hvf")


@pytest.mark.parametrize("usable", VERDICTS,
                         ids=lambda u: ",".join(f"{a}-{'ok' if ok else 'no'}" for a, ok in u.items()))
@pytest.mark.parametrize("accel", vocabulary.ACCELS)
def test_the_accelerator_is_the_one_asked_for_when_its_probe_passes_else_a_refusal(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, usable: dict[str, bool],
        accel: str) -> None:
    host = Host(monkeypatch, tmp_path, usable)
    backend = backend_for(tmp_path, accel)
    wanted = "kvm" if accel == "auto" else accel
    if usable[wanted]:  # the control arm: a usable verdict is what runs
        isolation = backend.isolation()
        assert isolation.accelerator == wanted and isolation.backend == "qemu"
        assert isolation.hardware_isolated is (wanted != "tcg")
        assert ("not a hardware security boundary" in isolation.description) is (wanted == "tcg")
        assert (wanted, backend.qemu) in host.asked  # decided by the probe of the qemu it runs
        return
    with pytest.raises(errors.SandboxUnavailable) as raised:
        backend.isolation()
    refused = raised.value
    assert refused.accel == accel
    assert f"{wanted}: {FAILED}" in refused.findings
    text = refused.guidance().render_text()
    assert errors.NOTHING_RAN in text
    # The opt-in is offered exactly when TCG would work and was not what failed.
    offered = accel != "tcg" and usable["tcg"]
    assert refused.tcg_possible is offered
    assert ("--accel tcg" in text) is offered


def test_auto_never_selects_tcg_however_the_verdicts_fall(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The guard, on its own: with only TCG booting, `auto` refuses and names the opt-in."""
    host = Host(monkeypatch, tmp_path, {"kvm": False, "tcg": True})
    with pytest.raises(errors.SandboxUnavailable) as raised:
        backend_for(tmp_path, "auto").isolation()
    assert raised.value.tcg_possible and "--accel tcg" in raised.value.guidance().render_text()
    assert ("tcg", str(tmp_path / "bin" / "qemu-system-x86_64")) in host.asked  # TCG was probed
    # Control arms on the same host: TCG is selectable at all, by name ...
    assert backend_for(tmp_path, "tcg").isolation() == qemu_backend.isolation_for("tcg")
    # ... and `auto` takes the hardware accelerator as soon as its probe passes.
    host.usable["kvm"] = True
    chosen = backend_for(tmp_path, "auto").isolation()
    assert chosen == qemu_backend.isolation_for("kvm")
    assert chosen.hardware_isolated and chosen.accelerator != "tcg"


def test_the_isolation_of_each_accelerator_says_whether_it_is_hardware() -> None:
    assert qemu_backend.isolation_for("kvm") == Isolation(
        "qemu", "kvm", True, "QEMU microvm under KVM hardware virtualization")
    tcg = qemu_backend.isolation_for("tcg")  # control: the one that is not
    assert not tcg.hardware_isolated and "not a hardware security boundary" in tcg.description
