"""The assets `prefetch --vm-assets` provisions from Debian's archive, with no apt tool on
PATH, boot a job that uses every module the guest loads: the root filesystem (virtio_blk,
ext4, overlay), the cargo registry share (9p over virtio), and the output ports
(virtio_console). tests/integration/vm/assets/ checks what is fetched and refused; this checks
that what is fetched runs. Needs the network (http://deb.debian.org)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.assets import assets
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_SCRATCH, cargo_views_root
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu.backend import QemuBackend

NO_APT = ("apt-get", "apt-cache", "dpkg-deb", "dpkg", "depmod")


@pytest.mark.timeout(600)
def test_assets_from_the_archive_boot_a_job_with_every_mount(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rootfs_image: Path) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    with monkeypatch.context() as bare:
        bare.setenv("PATH", str(tmp_path / "no-tools"))
        assert all(shutil.which(tool) is None for tool in NO_APT)
        assets.provision_assets()
    manifest = json.loads((home / "vm" / assets.MANIFEST).read_text())
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    registry = cargo_views_root() / ("0" * 32) / "registry"  # a vendored view's, as a lint grants
    (registry / "cache").mkdir(parents=True)
    (registry / "cache" / "pinned.crate").write_text("crate bytes\n")
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    grant = GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**",
                        f"fs:read:{registry}/**", f"fs:write:{GUEST_SCRATCH}/**", "proc:exec:sh")
    backend = QemuBackend(VmOptions(rootfs=rootfs_image, accel="tcg",
                                    scratch=scratch.create_scratch(tmp_path / "s.img", 64)))
    assert backend.assets().kernel == home / "vm" / assets.KERNEL_FILE  # the new ones, not the suite's
    script = (f"uname -r; cat Cargo.toml; cat {GUEST_CARGO_HOME}/registry/cache/pinned.crate; "
              f"echo w > {GUEST_SCRATCH}/w && cat {GUEST_SCRATCH}/w; cut -d' ' -f3 /proc/mounts | sort -u")
    outcome = backend.run(Command("sh", ("-c", script), tree, {"PATH": "/bin"}, timeout=60), grant)
    assert outcome.exit == 0, outcome
    lines = outcome.stdout.decode().splitlines()
    assert lines[0] == manifest["kernel_release"]
    assert lines[1:5] == ["[package]", "name = 'x'", "crate bytes", "w"]
    assert {"ext4", "overlay", "9p"} <= set(lines[5:]), lines
    assert os.environ["ROTEIRO_HOME"] == str(home)
