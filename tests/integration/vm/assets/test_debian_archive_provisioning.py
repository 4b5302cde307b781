"""Provisioning the VM assets from the real Debian archives (bookworm and bookworm-security)
with no apt, dpkg or kmod on PATH, and from a local copy of them whose Packages, .deb or
InRelease was altered by one byte (each refused, nothing written). Needs the network
(http://deb.debian.org, http://security.debian.org). Everything is downloaded once per
session, by the real provisioning itself: what it fetches is recorded, as it passes, into a
local copy of each archive that the other tests read."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.vm.assets import assets, debian_archive, debpkg

ARCHIVE = debian_archive.DEFAULT_ARCHIVE
SECURITY = debian_archive.DEFAULT_SECURITY_ARCHIVE
SUITE = debian_archive.DEFAULT_SUITE
SECURITY_SUITE = debian_archive.security_suite(SUITE)
FORBIDDEN = ("apt-get", "apt-cache", "dpkg-deb", "dpkg", "depmod")


@dataclass(frozen=True)
class Provisioned:
    home: Path  # the ROTEIRO_HOME the real provisioning filled
    mirrors: dict[str, Path]  # kind -> local copy of what was read from that archive


@pytest.fixture(scope="session")
def provisioned(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Provisioned]:
    """The real provisioning, from both real archives, with no apt tool on PATH; every file
    it fetches is also written, byte for byte as it arrives, into a local copy of its
    archive in the dists/ pool/ layout (the fetch is the real one, only teed)."""
    root = tmp_path_factory.mktemp("provisioned")
    mirrors = {debian_archive.MAIN: root / "main", debian_archive.SECURITY: root / "security"}
    kinds = {ARCHIVE: debian_archive.MAIN, SECURITY: debian_archive.SECURITY}
    real_fetch = debian_archive.fetch

    def teed(archive: str, path: str, limit: int, sink: Callable[[bytes], object] | None = None,
             progress: debian_archive.Progress | None = None) -> bytes:
        dest = mirrors[kinds[archive]] / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        with dest.open("wb") as copy:
            def both(chunk: bytes) -> None:
                copy.write(chunk)
                if sink is not None:
                    sink(chunk)

            data = real_fetch(archive, path, limit, both, progress)
        return dest.read_bytes() if sink is None else data

    saved = {name: os.environ.get(name) for name in ("PATH", "ROTEIRO_HOME")}
    os.environ["PATH"] = str(root / "no-tools")
    os.environ["ROTEIRO_HOME"] = str(root / "home")
    debian_archive.fetch = teed  # type: ignore[assignment]
    try:
        for tool in FORBIDDEN:
            assert shutil.which(tool) is None
        assets.provision_assets(archive=ARCHIVE, suite=SUITE, security_archive=SECURITY)
    finally:
        debian_archive.fetch = real_fetch  # type: ignore[assignment]
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    yield Provisioned(root / "home", mirrors)


def flip_one_byte(path: Path, at: int) -> None:
    data = bytearray(path.read_bytes())
    path.unlink()  # the copy may be a hard link to the session mirror: never alter that
    data[at] ^= 0x01
    path.write_bytes(bytes(data))


def _kernel_of(release: debian_archive.Release) -> debian_archive.Package | None:
    packages = debian_archive.read_packages(release, lambda n: n.startswith("linux-image-"))
    meta = packages.get(assets.KERNEL_META_PACKAGE)
    if meta is None:
        return None
    return packages[debian_archive.versioned_dependency(meta, r"linux-image-[0-9][^\s]*-amd64")]


@pytest.mark.timeout(900)
def test_provisioning_from_both_real_archives_takes_the_newer_kernel(
        provisioned: Provisioned, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTEIRO_HOME", str(provisioned.home))
    manifest = json.loads((provisioned.home / "vm" / assets.MANIFEST).read_text())
    sources = manifest["sources"]
    assert (sources["main"]["archive"], sources["main"]["suite"]) == (ARCHIVE, SUITE)
    assert (sources["security"]["archive"], sources["security"]["suite"]) == (SECURITY, SECURITY_SUITE)
    for kind in debian_archive.KINDS:
        assert sources[kind]["signing_key"] in debian_archive.PINNED_KEYS
        assert sources[kind]["inrelease_epoch"] >= debian_archive.floor_epoch(kind)
    # The security archive's index is read where it really lies: under main/, though its
    # InRelease says `Components: updates/main`.
    assert (provisioned.mirrors["security"] / "dists" / SECURITY_SUITE / "main" / "binary-amd64").is_dir()
    # Which kernel is newer, found independently from the two recorded (verified) indexes.
    now = time.time()
    found = {kind: _kernel_of(debian_archive.read_release(str(provisioned.mirrors[kind]), suite, now,
                                                          kind=kind))
             for kind, suite in (("main", SUITE), ("security", SECURITY_SUITE))}
    candidates = [(kind, package) for kind, package in found.items() if package is not None]
    assert found["main"] is not None
    kind, newest = candidates[0]
    for other_kind, other in candidates[1:]:
        if debian_archive.compare_versions(other.version, newest.version) > 0:
            kind, newest = other_kind, other
    dpkg = shutil.which("dpkg", path="/usr/bin:/bin")
    if dpkg and found["security"] is not None:  # the order cross-checked with dpkg's own
        security_newer = subprocess.run([dpkg, "--compare-versions", found["security"].version, "gt",
                                         found["main"].version], check=False).returncode == 0
        assert (kind == "security") == security_newer
    assert manifest["kernel_package"] == newest.name
    assert manifest["packages"][newest.name] == {
        "version": newest.version, "filename": newest.filename, "sha256": newest.sha256,
        "size": newest.size, "source": kind, "archive": SECURITY if kind == "security" else ARCHIVE}
    assert manifest["kernel_release"] == newest.name.removeprefix("linux-image-")
    assert set(manifest["packages"]) == {newest.name, assets.BUSYBOX_PACKAGE}
    assert manifest["modules"][:5] == ["virtio_ring.ko", "virtio.ko", "virtio_mmio.ko", "virtio_blk.ko",
                                       "virtio_console.ko"]
    loaded = assets.load_assets()
    assert loaded.source == "provisioned" and assets.kernel_format(loaded.kernel) == "vmlinux"
    shown = assets.source_of_assets() or []
    assert shown[0].startswith(f"main: {ARCHIVE} {SUITE} (InRelease of ")
    assert shown[1].startswith(f"security: {SECURITY} {SECURITY_SUITE} (InRelease of ")
    assert f"{newest.name} {newest.version} from {kind}" in shown[2]


@pytest.mark.timeout(900)
def test_the_local_copy_provisions_and_each_altered_file_is_refused_with_nothing_written(
        provisioned: Provisioned, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    root = home / "vm"
    manifest = json.loads((provisioned.home / "vm" / assets.MANIFEST).read_text())
    kernel = manifest["packages"][manifest["kernel_package"]]
    suites = {"main": SUITE, "security": SECURITY_SUITE}
    cases = []
    for kind, suite in suites.items():
        inrelease = provisioned.mirrors[kind] / "dists" / suite / "InRelease"
        body_at = inrelease.read_bytes().index(b"Codename: ") + len(b"Codename: ") + 2
        cases += [(kind, "Packages", f"dists/{suite}/main/binary-amd64/Packages.xz", 100,
                   "Packages.xz does not match the SHA256"),
                  (kind, "InRelease body", f"dists/{suite}/InRelease", body_at, "no signature verified")]
    cases.append((kernel["source"], "kernel .deb", kernel["filename"], 5000,
                  "does not match the SHA256 and size in the package index"))
    for kind, case, rel, at, expected in cases:
        copy = tmp_path / f"{kind}-{case.replace(' ', '-')}"
        for each in suites:
            shutil.copytree(provisioned.mirrors[each], copy / each, copy_function=os.link)
        flip_one_byte(copy / kind / rel, at)
        with pytest.raises(errors.ArchiveRefused) as refused:
            assets.provision_assets(archive=str(copy / "main"), suite=SUITE,
                                    security_archive=str(copy / "security"))
        assert expected in refused.value.reason, (kind, case, refused.value.reason)
        assert refused.value.archive == str(copy / kind), (kind, case)
        assert str(copy / kind) in refused.value.guidance().summary
        assert sorted(p.name for p in root.iterdir()) == [".provision.lock"], (kind, case)
        shutil.rmtree(copy)
    # Control: the unaltered copies, named by file:// URLs, provision the same files.
    files = assets.provision_assets(archive=f"file://{provisioned.mirrors['main']}", suite=SUITE,
                                    security_archive=f"file://{provisioned.mirrors['security']}")
    assert {f.name: f.sha256 for f in files} == {f.name: f.sha256 for f in _described(provisioned.home)}
    # A replayed older index of either archive is refused once a newer one was used.
    for kind in suites:
        recorded = json.loads((root / assets.MANIFEST).read_text())
        recorded["sources"][kind]["inrelease_epoch"] += 86400
        (root / assets.MANIFEST).write_text(json.dumps(recorded))
        (root / assets.KERNEL_FILE).unlink(missing_ok=True)
        with pytest.raises(errors.ArchiveRefused, match="before the") as replayed:
            assets.provision_assets(archive=f"file://{provisioned.mirrors['main']}", suite=SUITE,
                                    security_archive=f"file://{provisioned.mirrors['security']}")
        assert replayed.value.archive == f"file://{provisioned.mirrors[kind]}"
        recorded["sources"][kind]["inrelease_epoch"] -= 86400
        (root / assets.MANIFEST).write_text(json.dumps(recorded))


def _described(home: Path) -> list[assets.AssetFile]:
    old = os.environ["ROTEIRO_HOME"]
    os.environ["ROTEIRO_HOME"] = str(home)
    try:
        return assets.describe_assets()
    finally:
        os.environ["ROTEIRO_HOME"] = old


@pytest.mark.timeout(600)
def test_the_module_order_from_modinfo_agrees_with_depmod(provisioned: Provisioned, tmp_path: Path) -> None:
    depmod = shutil.which("depmod") or shutil.which("/usr/sbin/depmod") or "/sbin/depmod"
    if not Path(depmod).exists():
        pytest.skip("depmod (kmod) is not installed: nothing to cross-check against")
    kernel_deb = next(deb for copy in provisioned.mirrors.values() for deb in copy.rglob("linux-image-[0-9]*.deb"))
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
