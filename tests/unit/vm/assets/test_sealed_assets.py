"""The kernel and initramfs are hashed once and sealed, then checked by one stat per lint
(vm/assets/assets.py `_verified`, issue 25): a copy written since is hashed again and
booted only if it holds the manifest's bytes; a record is never taken for the manifest."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

from roteiro_py import errors, paths
from roteiro_py.vm.assets import assets
from roteiro_py.vm.disks import rootfs_record

KERNEL = b"\x7fELF a kernel " * 4096
INITRD = b"070701 an initramfs " * 4096


def provisioned() -> Path:
    """A provisioned assets root: the two files and a manifest naming their sha256."""
    root = paths.vm_assets_root()
    root.mkdir(parents=True, exist_ok=True)
    files = {assets.KERNEL_FILE: KERNEL, assets.INITRD_FILE: INITRD}
    for name, data in files.items():
        (root / name).write_bytes(data)
    manifest = {"kernel_release": "6.1.0-test",
                "files": {name: {"sha256": hashlib.sha256(data).hexdigest()} for name, data in files.items()}}
    (root / assets.MANIFEST).write_text(json.dumps(manifest))
    return root


class Reads:
    """How many times the files were hashed (the lint's check, and a seal's)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        for module, name in ((assets, "sha256_file"), (rootfs_record, "_measure")):
            real = getattr(module, name)

            def counted(*args: object, _real: object = real) -> object:
                self.count += 1
                return _real(*args)  # type: ignore[operator]

            monkeypatch.setattr(module, name, counted)


def tamper(path: Path, data: bytes) -> None:
    """Other bytes of the same size, written in place with the mtime put back."""
    st = path.stat()
    os.chmod(path, 0o644)
    path.write_bytes(data)
    os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert path.stat().st_size == st.st_size


def test_sealed_assets_cost_one_stat_each(monkeypatch: pytest.MonkeyPatch) -> None:
    root = provisioned()
    reads = Reads(monkeypatch)
    first = assets.load_assets()
    assert reads.count > 0  # control: the first lint hashes and seals them
    assert (root / "vmlinux.json").is_file() and (root / "base.json").is_file()
    assert (root / assets.KERNEL_FILE).stat().st_mode & 0o777 == 0o444
    reads.count = 0
    again = assets.load_assets()
    assert reads.count == 0
    assert again == first and again.kernel_sha256 == hashlib.sha256(KERNEL).hexdigest()


@pytest.mark.parametrize("name", [assets.KERNEL_FILE, assets.INITRD_FILE])
def test_an_asset_tampered_after_sealing_is_refused(name: str) -> None:
    root = provisioned()
    assets.load_assets()
    original = (root / name).read_bytes()
    tamper(root / name, original[:-1] + b"\0")
    with pytest.raises(errors.VmAssetsMissing, match="does not match the manifest"):
        assets.load_assets()
    tamper(root / name, original)  # control: the manifest's bytes, written again, boot
    assert assets.load_assets().kernel_sha256 == hashlib.sha256(KERNEL).hexdigest()


def test_an_asset_replaced_by_a_copy_is_hashed_again() -> None:
    root = provisioned()
    assets.load_assets()
    kernel = root / assets.KERNEL_FILE
    st = kernel.stat()
    staged = root / "staged"
    staged.write_bytes(KERNEL[:-1] + b"\0")
    os.utime(staged, ns=(st.st_atime_ns, st.st_mtime_ns))
    os.replace(staged, kernel)  # same size and mtime, another inode
    with pytest.raises(errors.VmAssetsMissing, match="guest kernel"):
        assets.load_assets()


def test_a_record_of_other_bytes_is_not_the_manifest() -> None:
    """A record says which bytes the file held when it was sealed, not which bytes may
    boot: a file sealed holding other bytes (here by seal itself) is refused."""
    root = provisioned()
    kernel = root / assets.KERNEL_FILE
    kernel.write_bytes(KERNEL[:-1] + b"\0")
    rootfs_record.seal(kernel)
    assert rootfs_record.check(kernel) is not None  # the record matches the file
    with pytest.raises(errors.VmAssetsMissing, match="does not match the manifest"):
        assets.load_assets()


def test_a_touched_asset_is_hashed_and_sealed_again(monkeypatch: pytest.MonkeyPatch) -> None:
    root = provisioned()
    assets.load_assets()
    os.utime(root / assets.INITRD_FILE, ns=(1, 1))  # the same bytes, another mtime
    reads = Reads(monkeypatch)
    assets.load_assets()
    assert reads.count > 0
    reads.count = 0
    assets.load_assets()
    assert reads.count == 0
