"""The registry of VM backends, by the name `[vm] backend` uses (the protocol every member
implements, and the values they hand back, are vm/api.py)."""

from __future__ import annotations

from collections.abc import Callable

from roteiro_py.vm.api import VmBackend


def _qemu(**options: object) -> VmBackend:
    from roteiro_py.vm.qemu.backend import QemuBackend

    return QemuBackend(**options)  # type: ignore[arg-type]


#: Backends by the name `[vm] backend` uses; each builds a VmBackend from its options.
BACKENDS: dict[str, Callable[..., VmBackend]] = {
    "qemu": _qemu,  # QEMU microvm: KVM when the probe passes, TCG only on explicit opt-in
}
