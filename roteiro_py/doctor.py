"""`pylint-sandbox doctor`: what this host has for sandboxed linting, and what to do about gaps.

Every line is a check with a verdict and, when something is missing, the command or the
setting that fixes it. The hypervisor lines come from the same canary probe a lint uses
(and its cached verdicts), not from opening /dev/kvm: on the machines this was built on,
/dev/kvm opens and KVM still cannot run a guest.
"""

from __future__ import annotations

import platform
import shutil
import sys
from dataclasses import dataclass

from roteiro_py import paths
from roteiro_py.errors import RoteiroError, prefetch_command
from roteiro_py.guidance import printable


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: informational
    detail: str
    fix: str | None = None


def checks() -> list[Check]:
    from roteiro_py.vm.qemu import probe
    from roteiro_py.vm.qemu.assets import PROVISION_COMMAND, describe_assets, load_assets

    found: list[Check] = []
    qemu_path, version = probe.qemu_info()
    found.append(Check("qemu", qemu_path is not None,
                       f"{qemu_path} ({version})" if qemu_path else "qemu-system-x86_64 not found",
                       None if qemu_path else "apt-get install qemu-system-x86"))
    for tool, package in (("mkfs.ext4", "e2fsprogs"),):
        where = shutil.which(tool)
        found.append(Check(tool, where is not None, where or "not found",
                           None if where else f"apt-get install {package}"))
    assets = None
    try:
        assets = load_assets()
        for asset in describe_assets():
            found.append(Check(f"vm asset {asset.name}", True,
                               f"{asset.path} sha256:{asset.sha256[:16]}… ({asset.size} bytes)"))
    except RoteiroError as error:
        found.append(Check("vm assets", False, error.guidance().summary, PROVISION_COMMAND))
    accelerators = ("hvf", "tcg") if platform.system() == "Darwin" else ("kvm", "tcg")
    for accel in accelerators:
        if assets is None or qemu_path is None:
            found.append(Check(f"accel {accel}", False, "not probed: qemu or the VM assets are missing",
                               PROVISION_COMMAND))
            continue
        verdict = probe.probe(accel, assets)
        cached = " (cached verdict)" if verdict.cached else ""
        if accel == "tcg":
            detail = (f"{verdict.reason}{cached}; software emulation, not a security boundary: "
                      "used only with --accel tcg")
            found.append(Check("accel tcg", verdict.usable, detail))
        else:
            found.append(Check(f"accel {accel}", verdict.usable, f"{verdict.reason}{cached}",
                               None if verdict.usable else
                               "a host where hardware virtualization runs guests, or --accel tcg (opt-in)"))
    store = paths.store_root()
    try:
        from roteiro_py.store import Store

        references = Store(store).references() if store.exists() else []
        found.append(Check("image store", bool(references),
                           f"{store}: {len(references)} image(s)"
                           + "".join(f"\n      {printable(r.name)}" for r in references),
                           None if references else
                           "pylint-sandbox prefetch --analyzer clippy --image REF --allow-download"))
    except RoteiroError as error:
        found.append(Check("image store", False, error.guidance().summary))
    registry = paths.cargo_home() / "registry"
    found.append(Check("package cache", registry.is_dir(), str(registry),
                       None if registry.is_dir() else "pylint-sandbox fetch-deps PATH"))
    return found


def verified() -> list[Check]:
    """`doctor --verify`: the full check a lint does not make. Every stored image's blobs
    re-hashed (Store.is_present), every cached root filesystem re-hashed against the
    record sealed when it was built (a damaged one is removed: the next lint rebuilds it),
    and so is every dependency cache (by its sparse digest, depcache/store.py).
    A lint checks layers by size and the root filesystem by its stat identity
    (vm/qemu/rootfs_record.py says what that does not catch: this does)."""
    from roteiro_py.depcache.store import cache_dir as store_dir
    from roteiro_py.store import Store
    from roteiro_py.vm.qemu.rootfs_record import hash_sparse, verify_all

    found: list[Check] = []
    store = Store(paths.store_root())
    for reference in store.references() if store.root.exists() else []:
        presence = store.is_present(reference.name)
        found.append(Check(f"image {printable(reference.name)}", presence.present,
                           "every blob re-hashed" if presence else str(presence.detail),
                           None if presence else prefetch_command(reference.name)))
    images = verify_all(paths.cache_root() / "rootfs")
    damaged = [image.name for image, ok in images if not ok]
    found.append(Check("root filesystem cache", not damaged,
                       f"{len(images) - len(damaged)} of {len(images)} re-hashed and intact"
                       + (f"; removed (rebuilt by the next lint): {', '.join(damaged)}"
                          if damaged else "")))
    caches = verify_all(store_dir(), hash_sparse)
    broken = [cache.stem[:16] for cache, ok in caches if not ok]
    found.append(Check("dependency cache", not broken,
                       f"{len(caches) - len(broken)} of {len(caches)} re-hashed and intact"
                       + (f"; removed (rebuilt by the next lint that needs it): {', '.join(broken)}"
                          if broken else "")))
    return found


def run_doctor(*, verify: bool = False) -> int:
    results = checks() + (verified() if verify else [])
    marks = {True: "ok  ", False: "MISS", None: "info"}
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.text import Text

        console = Console()
        colors = {True: "green", False: "red", None: "cyan"}
        for check in results:
            console.print(Text.assemble((marks[check.ok], colors[check.ok]), f"  {check.name}: ",
                                        printable(check.detail, keep_newlines=True)))
            if check.fix:
                console.print(Text.assemble("        fix: ", (check.fix, "bold")))
    else:
        for check in results:
            sys.stdout.write(f"{marks[check.ok]}  {check.name}: "
                             f"{printable(check.detail, keep_newlines=True)}\n")
            if check.fix:
                sys.stdout.write(f"        fix: {check.fix}\n")
    return 0
