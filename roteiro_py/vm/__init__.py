"""The registry of VM backends, by the name `[vm] backend` uses (the protocol every member
implements, and the values they hand back, are vm/api.py; the one value every member is
built from is vm/options.py)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from roteiro_py.vm.api import VmBackend

if TYPE_CHECKING:
    from roteiro_py.vm.options import VmOptions


def _qemu(options: VmOptions) -> VmBackend:
    # Imported here, not at the top: importing any roteiro_py.vm module runs this file, and
    # the qemu stack (machine, template, probe, assets) must load only when qemu is chosen.
    from roteiro_py.vm.qemu.backend import QemuBackend

    return QemuBackend(options)


#: Backends by the name `[vm] backend` uses; each builds a VmBackend from one VmOptions.
BACKENDS: dict[str, Callable[[VmOptions], VmBackend]] = {
    "qemu": _qemu,  # QEMU microvm: KVM when the probe passes, TCG only on explicit opt-in
}
