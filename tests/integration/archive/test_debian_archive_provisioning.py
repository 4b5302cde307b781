"""Provisioning the VM assets from the real Debian archive with no apt, dpkg or kmod on PATH,
and from a local copy of it whose Packages, .deb or InRelease was altered by one byte (each
refused, nothing written). Needs the network (http://deb.debian.org); the ~70 MB kernel
.deb is fetched once per session into a temporary mirror that the other tests copy."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.vm.qemu import assets, debian_archive, debpkg

ARCHIVE = debian_archive.DEFAULT_ARCHIVE
SUITE = debian_archive.DEFAULT_SUITE
FORBIDDEN = ("apt-get", "apt-cache", "dpkg-deb", "dpkg", "depmod")


@pytest.fixture(scope="session")
def mirror(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A local archive in the dists/ pool/ layout, holding exactly what provisioning reads,
    fetched from the real archive; the PATH of this process has no apt tool while it runs."""
    root = tmp_path_factory.mktemp("mirror")
    old_path = os.environ["PATH"]
    os.environ["PATH"] = str(root / "no-tools")
    try:
        for tool in FORBIDDEN:
            assert shutil.which(tool) is None
        release = debian_archive.read_release(ARCHIVE, SUITE, time.time())
        inrelease = debian_archive.fetch(ARCHIVE, f"dists/{SUITE}/InRelease", debian_archive.MAX_INRELEASE_BYTES)
        (root / "dists" / SUITE).mkdir(parents=True)
        (root / "dists" / SUITE / "InRelease").write_bytes(inrelease)
        base = f"{debian_archive.COMPONENT}/binary-{debian_archive.ARCH}/Packages.xz"
        target = root / "dists" / SUITE / base
        target.parent.mkdir(parents=True)
        target.write_bytes(debian_archive.fetch(ARCHIVE, f"dists/{SUITE}/{base}", release.sha256[base][1]))
        packages = debian_archive.read_packages(release, lambda n: n in (assets.KERNEL_META_PACKAGE,
                                                                         assets.BUSYBOX_PACKAGE)
                                                or n.startswith("linux-image-"))
        kernel = debian_archive.versioned_dependency(packages[assets.KERNEL_META_PACKAGE],
                                                     r"linux-image-[0-9][^\s]*-amd64")
        for name in (kernel, assets.BUSYBOX_PACKAGE):
            dest = root / packages[name].filename
            dest.parent.mkdir(parents=True, exist_ok=True)
            debian_archive.download(ARCHIVE, packages[name], dest)
    finally:
        os.environ["PATH"] = old_path
    yield root


def flip_one_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    path.unlink()  # the copy may be a hard link to the session mirror: never alter that
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.timeout(600)
def test_provisioning_from_the_real_archive_with_no_apt_tools(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("PATH", str(tmp_path / "no-tools"))
    assert all(shutil.which(tool) is None for tool in FORBIDDEN)
    files = {f.name: f for f in assets.provision_assets(True, archive=ARCHIVE, suite=SUITE)}
    assert set(files) == {assets.KERNEL_FILE, assets.INITRD_FILE, assets.BUSYBOX_FILE}
    manifest = json.loads((tmp_path / "home" / "vm" / assets.MANIFEST).read_text())
    assert manifest["archive"] == ARCHIVE and manifest["suite"] == SUITE
    assert manifest["signing_key"] in debian_archive.PINNED_KEYS
    assert set(manifest["packages"]) == {manifest["kernel_package"], assets.BUSYBOX_PACKAGE}
    assert manifest["modules"][:5] == ["virtio_ring.ko", "virtio.ko", "virtio_mmio.ko", "virtio_blk.ko",
                                       "virtio_console.ko"]
    loaded = assets.load_assets()
    assert loaded.source == "provisioned" and assets.kernel_format(loaded.kernel) == "vmlinux"


@pytest.mark.timeout(600)
def test_the_local_copy_provisions_and_each_altered_file_is_refused_with_nothing_written(
        mirror: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    root = home / "vm"
    packages_xz = f"dists/{SUITE}/main/binary-amd64/Packages.xz"
    debs = sorted(str(p.relative_to(mirror)) for p in (mirror / "pool").rglob("*.deb"))
    kernel_deb = next(d for d in debs if "/linux-image-" in d)
    inrelease = mirror / "dists" / SUITE / "InRelease"
    body_at = inrelease.read_bytes().index(b"Codename: ") + len(b"Codename: ") + 2
    for case, rel, at, expected in (
            ("Packages", packages_xz, 100, "Packages.xz does not match the SHA256"),
            ("kernel .deb", kernel_deb, 5000, "does not match the SHA256 and size in the package index"),
            ("InRelease body", f"dists/{SUITE}/InRelease", body_at, "no signature verified")):
        copy = tmp_path / case.replace(" ", "-")
        shutil.copytree(mirror, copy)
        flip_one_byte(copy / rel, at)
        with pytest.raises(errors.ArchiveRefused) as refused:
            assets.provision_assets(True, archive=str(copy), suite=SUITE)
        assert expected in refused.value.reason, (case, refused.value.reason)
        assert str(copy) in refused.value.guidance().summary
        assert sorted(p.name for p in root.iterdir()) == [".provision.lock"], case
        shutil.rmtree(copy)
    # Control: the unaltered copy, named by a file:// URL, provisions.
    files = assets.provision_assets(True, archive=f"file://{mirror}", suite=SUITE)
    assert {f.name for f in files} == {assets.KERNEL_FILE, assets.INITRD_FILE, assets.BUSYBOX_FILE}
    # A replayed older index of the same archive is refused once a newer one was used.
    manifest = json.loads((root / assets.MANIFEST).read_text())
    manifest["inrelease_epoch"] += 86400
    (root / assets.MANIFEST).write_text(json.dumps(manifest))
    (root / assets.KERNEL_FILE).unlink()
    with pytest.raises(errors.ArchiveRefused, match="before the"):
        assets.provision_assets(True, archive=f"file://{mirror}", suite=SUITE)


@pytest.mark.timeout(600)
def test_the_module_order_from_modinfo_agrees_with_depmod(mirror: Path, tmp_path: Path) -> None:
    depmod = shutil.which("depmod") or shutil.which("/usr/sbin/depmod") or "/sbin/depmod"
    if not Path(depmod).exists():
        pytest.skip("depmod (kmod) is not installed: nothing to cross-check against")
    kernel_deb = next((mirror / "pool").rglob("linux-image-[0-9]*.deb"))
    release = kernel_deb.name.split("_")[0].removeprefix("linux-image-")
    moddir = f"lib/modules/{release}/"
    unpacked = tmp_path / "unpacked"
    infos = {}
    for name, data in debpkg.read_members(kernel_deb, lambda n: n.startswith(moddir) and ".ko" in n):
        out = unpacked / name
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_bytes(data)
        infos[name.removeprefix(moddir)] = debpkg.modinfo(debpkg.module_bytes(name, data))
    subprocess.run([depmod, "-b", str(unpacked), release], check=True, timeout=300)
    theirs = (unpacked / moddir / "modules.dep").read_text()
    ours = debpkg.modules_dep(infos)
    closure_theirs = {line.split(":")[0]: set(line.split(":")[1].split()) for line in theirs.splitlines()}
    direct = {line.split(":")[0]: line.split(":")[1].split() for line in ours.splitlines()}

    def closure(path: str) -> set[str]:
        seen: set[str] = set()
        stack = list(direct[path])
        while stack:
            dep = stack.pop()
            if dep not in seen:
                seen.add(dep)
                stack.extend(direct[dep])
        return seen

    assert set(direct) == set(closure_theirs)
    assert len(direct) > 1000
    for path in direct:
        assert closure(path) == closure_theirs[path], path
    for wanted in (assets.WANTED_MODULES, ("ext4",), ("9p",)):
        mine = assets.module_load_order(ours, wanted)
        from_depmod = assets.module_load_order(theirs, wanted)
        assert set(mine) == set(from_depmod)
        for index, path in enumerate(mine):
            assert closure_theirs[path] <= set(mine[:index]), path
