"""The guest kernel, busybox, kernel modules and base initramfs: provisioned, never fetched at run.

Guarantees:
- A run only reads assets recorded in `manifest.json` under `paths.vm_assets_root()`, and
  checks each file's sha256 against the manifest before use; a missing or altered file is
  `errors.VmAssetsMissing`, whose guidance names `pylint-sandbox prefetch --vm-assets`.
  Nothing here downloads but `provision_assets`, which only that command calls: a lint
  never does. It needs no `--allow-download` (issue 23): provisioning is the command's only
  job, the archive is the user's own setting (`[vm] debian_archive`: a repository's
  roteiro.toml cannot name one, unlike an image's registry), intact assets are never
  fetched again, and there is no local source to choose instead, as `--from docker` is for
  an image. The flag is accepted with `--vm-assets`, and changes nothing for it.
- The kernel is Debian's generic `linux-image-*-amd64` (it has 9p, ext4, overlay and
  virtio as modules; the cloud flavour lacks 9p), with busybox from `busybox-static`,
  fetched from a Debian archive without apt (debian_archive.py: signed InRelease, then
  Packages by its digest, then each .deb by its digest) and read in memory (debpkg.py):
  no package is installed, nothing runs as a maintainer script, and the host needs no
  apt, dpkg or kmod, so a GitHub-hosted Ubuntu runner provisions the same files a
  Debian host does. What is booted is the uncompressed ELF `vmlinux` extracted from the bzImage:
  the guest would otherwise spend ~2.5 s per boot decompressing xz under TCG (VM_NOTES:
  a minimal boot went from 4.0 s to 1.5 s).
- The modules the mounts need are loaded in dependency order computed from each module's
  `.modinfo` `depends=` (what depmod reads to write modules.dep; the .deb ships none).
  `crc32c_generic` is listed explicitly: it is only a soft dependency of ext4, but
  mkfs.ext4 turns on metadata_csum and the mount fails without it (VM_NOTES).
- Two archives are read: the main one (`[vm] debian_archive`, suite `[vm] debian_suite`)
  and the security one (`[vm] debian_security_archive`, suite `SUITE-security`; an empty
  setting reads none), each verified down from its own signed InRelease. The kernel is
  the highest Debian version of the package `linux-image-amd64` names in either index,
  and busybox the highest `busybox-static` found; each .deb is fetched from the archive
  that listed it. Without the security archive the kernel is the last point release's,
  weeks to months behind its security fixes.
- The kernel and initramfs are hashed once, not on every lint: `_verified` seals each
  as the root filesystem is sealed (vm/disks/rootfs_record.py: 0444, its sha256 and stat
  identity in a record beside it, `vmlinux.json`, `base.json`) and a later lint compares
  one stat with the record, and the record's digest with the manifest's. A file written,
  replaced or touched since (size, mtime, ctime or inode changed) is hashed again and
  used only if its bytes are the manifest's, never on the record's word. Hashing both
  (72 MB) cost 0.2-0.33 s of every lint here (docs/PERFORMANCE.md, issue 25). A host that
  cannot write the record (a read-only ROTEIRO_HOME) hashes on every lint, as before.
- The manifest records, per archive, the InRelease's Date; an older one from the same
  archive and suite is refused (a mirror replaying an old index to pin an old kernel),
  as is one older than the tool's `debian_archive.DATE_FLOOR` on a first provisioning.
- `[vm] debian_archive` and the security archive may be mirrors or local directories (an
  air-gapped host); `[vm] kernel` / `[vm] initrd` override the provisioned files
  altogether (a host that can reach no Debian archive); such files are hashed, not
  checked against a manifest.
"""

from __future__ import annotations

import hashlib
import json
import lzma
import os
import re
import tempfile
import time
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from roteiro_py import errors, paths
from roteiro_py.vm.assets import debian_archive, debpkg
from roteiro_py.vm.assets.initramfs import Entry, write_newc
from roteiro_py.vm.disks import rootfs_record

KERNEL_META_PACKAGE = "linux-image-amd64"
BUSYBOX_PACKAGE = "busybox-static"

#: What the guest's mounts need, in the order named; dependencies are pulled in first.
#: virtio_console carries the output/status ports, virtio_blk the root, scratch and share
#: images, 9p the cargo registry share, overlay the writable layer over the read-only root.
WANTED_MODULES = (
    "virtio_ring", "virtio", "virtio_mmio", "virtio_blk", "virtio_console",
    "crc32c_generic", "ext4", "overlay", "9pnet_virtio", "9p",
)

MANIFEST = "manifest.json"
KERNEL_FILE = "vmlinux"
INITRD_FILE = "base.cpio"
BUSYBOX_FILE = "busybox"

#: The command that provisions them; stated once here and in errors.VmAssetsMissing.
PROVISION_COMMAND = "pylint-sandbox prefetch --vm-assets"

Progress = Callable[[str], None]


@dataclass(frozen=True)
class Assets:
    """Verified files a boot uses; the digests identify the probe verdicts cached for them."""

    kernel: Path
    initrd: Path
    kernel_sha256: str
    initrd_sha256: str
    kernel_release: str
    source: str  # "provisioned" or "config"


@dataclass(frozen=True)
class AssetFile:
    name: str
    path: Path
    sha256: str
    size: int


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _read_manifest(root: Path) -> dict[str, object] | None:
    try:
        data = json.loads((root / MANIFEST).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _verified(root: Path, manifest: dict[str, object], name: str, what: str) -> AssetFile:
    files = manifest.get("files")
    entry = files.get(name) if isinstance(files, dict) else None
    path = root / name
    if not isinstance(entry, dict) or not path.is_file():
        raise errors.VmAssetsMissing(what, path)
    expected = entry.get("sha256")
    sealed = rootfs_record.check(path)  # one stat; hashed again if written since its seal
    if sealed is not None and sealed.digest == f"sha256:{expected}":
        return AssetFile(name, path, str(expected), sealed.identity.size)
    actual = sha256_file(path)
    if actual != expected:
        raise errors.VmAssetsMissing(f"{what} (its sha256 does not match the manifest)", path)
    _seal(path, actual)
    return AssetFile(name, path, actual, path.stat().st_size)


def _seal(path: Path, digest: str) -> None:
    """Record `path` (rootfs_record.seal) when it still holds `digest`, the manifest's; a
    file that changed under the hash gets no record (the next lint hashes it again), and
    one that cannot be recorded (a read-only home) is hashed on every lint."""
    try:
        record = rootfs_record.seal(path)
    except OSError:
        return
    if record.digest != f"sha256:{digest}":
        rootfs_record.record_path(path).unlink(missing_ok=True)


def kernel_format(path: Path) -> str | None:
    """"bzImage", "vmlinux" (an x86-64 ELF with the PVH entry note qemu needs to boot it),
    or None for anything qemu's x86 `-kernel` cannot boot.

    Without this check a `[vm] kernel` pointing at the wrong file (a module, a program, an
    arm64 Image) is found out only when qemu refuses it at the probe, in qemu's words
    ("Error loading uncompressed kernel without PVH ELF Note").
    """
    with path.open("rb") as handle:
        head = handle.read(4096)
        if head[0x202:0x206] == b"HdrS":
            return "bzImage"
        if head[:4] != b"\x7fELF" or head[4:6] != b"\x02\x01" or head[18:20] != b"\x3e\x00":
            return None
        phoff = int.from_bytes(head[0x20:0x28], "little")
        phentsize = int.from_bytes(head[0x36:0x38], "little")
        phnum = int.from_bytes(head[0x38:0x3A], "little")
        handle.seek(phoff)
        table = handle.read(phentsize * min(phnum, 64))
        for index in range(min(phnum, 64)):
            ph = table[index * phentsize:(index + 1) * phentsize]
            if len(ph) < 0x28 or int.from_bytes(ph[0:4], "little") != 4:  # PT_NOTE
                continue
            handle.seek(int.from_bytes(ph[0x08:0x10], "little"))
            notes = handle.read(min(int.from_bytes(ph[0x20:0x28], "little"), 1 << 16))
            at = 0
            while at + 12 <= len(notes):
                namesz, descsz, kind = (int.from_bytes(notes[at + i:at + i + 4], "little")
                                        for i in (0, 4, 8))
                if notes[at + 12:at + 12 + namesz] == b"Xen\0" and kind == 18:
                    return "vmlinux"  # XEN_ELFNOTE_PHYS32_ENTRY: the PVH entry point
                at += 12 + (namesz + 3) // 4 * 4 + (descsz + 3) // 4 * 4
    return None


def _checked_kernel(kernel: Path) -> None:
    if not kernel.is_file():
        raise errors.VmAssetsMissing("kernel named by [vm] kernel", kernel)
    if kernel_format(kernel) is None:
        raise errors.VmAssetsMissing(
            "kernel named by [vm] kernel (that file is neither an x86 bzImage nor an x86-64 "
            "vmlinux with a PVH entry note, so qemu cannot boot it)", kernel)


def load_assets(kernel: Path | None = None, initrd: Path | None = None) -> Assets:
    """The assets a boot uses, verified; `kernel`/`initrd` are the `[vm]` overrides."""
    root = paths.vm_assets_root()
    manifest = _read_manifest(root)
    if kernel is not None:
        _checked_kernel(kernel)
    if kernel is not None and initrd is not None:
        for given, what in ((kernel, "kernel"), (initrd, "initramfs")):
            if not given.is_file():
                raise errors.VmAssetsMissing(f"{what} named by [vm] {what[:6]}", given)
        return Assets(kernel, initrd, sha256_file(kernel), sha256_file(initrd), "config",
                      "config")
    if manifest is None:
        raise errors.VmAssetsMissing("asset manifest", root / MANIFEST)
    release = str(manifest.get("kernel_release", "unknown"))
    if kernel is not None:
        if not kernel.is_file():
            raise errors.VmAssetsMissing("kernel named by [vm] kernel", kernel)
        kfile = AssetFile("kernel", kernel, sha256_file(kernel), kernel.stat().st_size)
        release = "config"
    else:
        kfile = _verified(root, manifest, KERNEL_FILE, "guest kernel")
    if initrd is not None:
        if not initrd.is_file():
            raise errors.VmAssetsMissing("initramfs named by [vm] initrd", initrd)
        ifile = AssetFile("initrd", initrd, sha256_file(initrd), initrd.stat().st_size)
    else:
        ifile = _verified(root, manifest, INITRD_FILE, "base initramfs")
    source = "provisioned" if kernel is None and initrd is None else "config"
    return Assets(kfile.path, ifile.path, kfile.sha256, ifile.sha256, release, source)


def describe_assets() -> list[AssetFile]:
    """Every provisioned file with its recorded digest, for `doctor` (no verification)."""
    root = paths.vm_assets_root()
    manifest = _read_manifest(root) or {}
    files = manifest.get("files")
    out: list[AssetFile] = []
    if isinstance(files, dict):
        for name, entry in sorted(files.items()):
            if isinstance(entry, dict):
                out.append(AssetFile(name, root / name, str(entry.get("sha256")),
                                     int(entry.get("size", 0))))
    return out


# -- provisioning ------------------------------------------------------------------------


def _recorded_sources(manifest: dict[str, object]) -> dict[str, dict[str, object] | None]:
    """The archives a manifest says it read, by kind (None: deliberately not read). A
    manifest written before the security archive was read names its one archive at the top."""
    sources = manifest.get("sources")
    if isinstance(sources, dict):
        return {kind: entry if isinstance(entry, dict) else None for kind, entry in sources.items()
                if kind in debian_archive.KINDS}
    if isinstance(manifest.get("archive"), str):
        return {debian_archive.MAIN: manifest}
    return {}


def source_of_assets() -> list[str] | None:
    """Where the provisioned assets came from, for `doctor`: a line per archive (archive,
    suite, index date, signing key), then the packages and the archive each came from, as
    the manifest records them; None if it records none."""
    manifest = _read_manifest(paths.vm_assets_root()) or {}
    sources = _recorded_sources(manifest)
    packages = manifest.get("packages")
    if not sources or not isinstance(packages, dict):
        return None
    lines = []
    for kind in debian_archive.KINDS:
        entry = sources.get(kind)
        if entry is None:
            lines.append(f"{kind}: not read" + (" ([vm] debian_security_archive is empty)"
                                                 if kind in sources else ""))
            continue
        lines.append(f"{kind}: {entry.get('archive')} {entry.get('suite')} (InRelease of "
                     f"{entry.get('inrelease_date')}, signed by {entry.get('signing_key')})")
    lines.append(", ".join(f"{name} {entry.get('version')}"
                           + (f" from {entry['source']}" if "source" in entry else "")
                           for name, entry in sorted(packages.items()) if isinstance(entry, dict)))
    return lines


def extract_vmlinux(bzimage: bytes) -> bytes:
    """The uncompressed ELF kernel inside a bzImage (xz or gzip payload)."""
    for magic, decompress in ((b"\xfd7zXZ\x00", "xz"), (b"\x1f\x8b\x08", "gz")):
        start = bzimage.find(magic)
        while start != -1:
            try:
                if decompress == "xz":
                    out = lzma.LZMADecompressor(format=lzma.FORMAT_XZ).decompress(
                        bzimage[start:])
                else:
                    out = zlib.decompressobj(wbits=31).decompress(bzimage[start:])
            except (lzma.LZMAError, zlib.error, EOFError):
                out = b""
            if out.startswith(b"\x7fELF"):
                return out
            start = bzimage.find(magic, start + 1)
    raise ValueError("no ELF kernel found inside the bzImage")


def module_load_order(modules_dep: str, wanted: tuple[str, ...]) -> list[str]:
    """Relative .ko paths in an order where each module follows all of its dependencies.

    modules.dep lines are `path: dep dep ...`; the dependencies are themselves listed with
    their own dependencies, so a depth-first walk that emits after recursing is enough.
    """
    deps: dict[str, list[str]] = {}
    by_name: dict[str, str] = {}
    for line in modules_dep.splitlines():
        if ":" not in line:
            continue
        path, rest = line.split(":", 1)
        deps[path] = rest.split()
        name = Path(path).name.split(".ko")[0].replace("-", "_")
        by_name[name] = path
    order: list[str] = []

    def visit(path: str, stack: tuple[str, ...]) -> None:
        if path in order:
            return
        if path in stack:
            raise ValueError(f"module dependency cycle at {path}")
        for dep in deps.get(path, []):
            visit(dep, (*stack, path))
        order.append(path)

    for name in wanted:
        found = by_name.get(name.replace("-", "_"))
        if found is None:
            raise ValueError(f"kernel module {name} is not in modules.dep")
        visit(found, ())
    return order


def build_base_initrd(busybox: bytes, modules: list[tuple[str, bytes]]) -> bytes:
    """busybox at /bin/busybox, the modules under /lib/modules, their order in a list file.

    The guest init (guest_init.sh) is not in here: it travels with each run's job archive,
    so a change to it takes effect without re-provisioning.
    """
    entries = [Entry.directory(d) for d in ("bin", "lib", "lib/modules", "etc")]
    entries.append(Entry.file("bin/busybox", busybox, 0o755))
    entries.append(Entry.symlink("bin/sh", "busybox"))
    names = []
    for name, data in modules:
        entries.append(Entry.file(f"lib/modules/{name}", data))
        names.append(name)
    entries.append(Entry.file("etc/modules.load", ("\n".join(names) + "\n").encode()))
    return write_newc(entries)


@dataclass(frozen=True)
class _Source:
    kind: str  # debian_archive.MAIN or SECURITY
    archive: str
    suite: str

    @property
    def setting(self) -> str:
        return "debian_security_archive" if self.kind == debian_archive.SECURITY else "debian_archive"


def _refused(source: _Source, exc: Exception) -> errors.RoteiroError:
    if isinstance(exc, debian_archive.Stale) and source.kind == debian_archive.SECURITY:
        return errors.SecurityIndexStale(source.archive, source.suite, debian_archive.when(exc.date),
                                         debian_archive.when(exc.valid_until),
                                         round((exc.valid_until - exc.date) / 86400))
    if isinstance(exc, debian_archive.ArchiveError) and not exc.refused:
        if source.kind != debian_archive.SECURITY:
            return errors.PrefetchFailed("VM assets", f"the Debian archive {source.archive}", str(exc))
        return errors.PrefetchFailed(
            "VM assets", f"the Debian security archive {source.archive}", str(exc),
            note="A host that cannot reach it can point `[vm] debian_security_archive` at a "
            "mirror or a local copy of it, or set it to \"\" to read the main archive alone "
            "(the guest kernel then lags the security fixes since the last point release).",
            commands=("pylint-sandbox config set vm.debian_security_archive MIRROR-URL-OR-DIRECTORY",
                      "pylint-sandbox config set vm.debian_security_archive ''"))
    return errors.ArchiveRefused(source.archive, source.suite, str(exc), setting=source.setting)


def _sources(archive: str, suite: str, security_archive: str) -> list[_Source]:
    found = [_Source(debian_archive.MAIN, archive, suite)]
    if security_archive:
        found.append(_Source(debian_archive.SECURITY, security_archive,
                             debian_archive.security_suite(suite)))
    return found


def _not_older(previous: dict[str, object], release: debian_archive.Release) -> None:
    """Refuse an InRelease dated before the one the last provisioning read from the same
    archive and suite."""
    entry = _recorded_sources(previous).get(release.kind)
    if entry is None or (entry.get("archive"), entry.get("suite")) != (release.archive, release.suite):
        return
    recorded = entry.get("inrelease_epoch")
    if isinstance(recorded, int) and release.date < recorded:
        raise debian_archive.ArchiveError(
            f"InRelease is dated {debian_archive.when(release.date)}, before the "
            f"{debian_archive.when(recorded)} this host already provisioned from: an old index "
            "replayed", refused=True)


def _wanted(name: str) -> bool:
    return name in (KERNEL_META_PACKAGE, BUSYBOX_PACKAGE) or name.startswith("linux-image-")


def _highest(found: list[tuple[_Source, debian_archive.Package]]) -> tuple[_Source, debian_archive.Package]:
    """The highest version (dpkg's order); on a tie the first read, the main archive's."""
    best = found[0]
    for candidate in found[1:]:
        if debian_archive.compare_versions(candidate[1].version, best[1].version) > 0:
            best = candidate
    return best


def _kernel_contents(deb: Path, release: str) -> tuple[bytes, list[tuple[str, bytes]], list[str]]:
    """The bzImage and the wanted modules (dependencies first) read out of the kernel .deb.

    Two passes over the package: the first reads every module's .modinfo (the package holds
    ~4000 modules, ~400 MB, that are not kept), the second keeps only the modules the load
    order names.
    """
    boot = f"boot/vmlinuz-{release}"
    moddir = f"lib/modules/{release}/"

    def is_module(name: str) -> bool:
        return name.startswith(moddir) and re.search(r"\.ko(\.xz|\.gz|\.zst)?$", name) is not None

    bzimage = b""
    infos: dict[str, dict[str, str]] = {}
    for name, data in debpkg.read_members(deb, lambda n: n == boot or is_module(n)):
        if name == boot:
            bzimage = data
        else:
            infos[name.removeprefix(moddir)] = debpkg.modinfo(debpkg.module_bytes(name, data))
    if not bzimage:
        raise debpkg.DebError(f"the kernel package has no {boot}")
    order = module_load_order(debpkg.modules_dep(infos), WANTED_MODULES)
    wanted = {moddir + rel for rel in order}
    found = {name.removeprefix(moddir): debpkg.module_bytes(name, data)
             for name, data in debpkg.read_members(deb, wanted.__contains__)}
    modules = [(re.sub(r"\.ko(\.xz|\.gz|\.zst)?$", ".ko", Path(rel).name), found[rel]) for rel in order]
    return bzimage, modules, order


def provision_assets(progress: Progress | None = None,
                     archive: str = debian_archive.DEFAULT_ARCHIVE,
                     suite: str = debian_archive.DEFAULT_SUITE,
                     security_archive: str = debian_archive.DEFAULT_SECURITY_ARCHIVE) -> list[AssetFile]:
    """Fill `paths.vm_assets_root()` (idempotent), and return the files with their digests.

    Already provisioned and intact -> nothing is downloaded. Otherwise the packages come
    from the Debian `archive`
    and `security_archive` ("" reads none; each a URL or a local directory), each verified
    down from its own signed InRelease (debian_archive.py); any mismatch is
    errors.ArchiveRefused naming the archive, a security InRelease past its Valid-Until is
    errors.SecurityIndexStale, and nothing is written. The kernel and busybox are the
    highest versions either index lists. An InRelease dated before the one the previous
    provisioning recorded for the same archive and suite is refused too (a mirror
    replaying an old index to pin an old kernel).
    Runs under a lock so two prefetches cannot interleave; each file is written to a
    temporary name and renamed, and the manifest is written last. A run (which takes no
    lock) that reads between the renames, or after a crash between them, finds a file
    that does not match the manifest and refuses it (VmAssetsMissing); it never boots a
    file the manifest does not vouch for.
    """
    say = progress or (lambda _message: None)
    root = paths.vm_assets_root()
    root.mkdir(parents=True, exist_ok=True)
    sources = _sources(archive, suite, security_archive)
    with FileLock(str(root / ".provision.lock")):
        manifest = _read_manifest(root)
        if manifest is not None:
            try:
                _verified(root, manifest, KERNEL_FILE, "guest kernel")
                _verified(root, manifest, INITRD_FILE, "base initramfs")
                say("VM assets already provisioned and intact")
                return describe_assets()
            except errors.VmAssetsMissing:
                say("VM assets incomplete or altered: provisioning again")
        now = time.time()
        at = sources[0]  # the archive a failure is reported against
        try:
            releases: list[debian_archive.Release] = []
            kernels: list[tuple[_Source, debian_archive.Package]] = []
            busyboxes: list[tuple[_Source, debian_archive.Package]] = []
            for at in sources:
                say(f"reading dists/{at.suite}/InRelease from {at.archive}")
                release = debian_archive.read_release(at.archive, at.suite, now, kind=at.kind)
                _not_older(manifest or {}, release)
                packages = debian_archive.read_packages(release, _wanted)
                releases.append(release)
                if KERNEL_META_PACKAGE in packages:
                    name = debian_archive.versioned_dependency(
                        packages[KERNEL_META_PACKAGE], r"linux-image-[0-9][^\s]*-amd64")
                    if name not in packages:
                        raise debian_archive.ArchiveError(f"the package index has no {name}",
                                                          refused=True)
                    kernels.append((at, packages[name]))
                if BUSYBOX_PACKAGE in packages:
                    busyboxes.append((at, packages[BUSYBOX_PACKAGE]))
            at = sources[0]
            for name, found in ((KERNEL_META_PACKAGE, kernels), (BUSYBOX_PACKAGE, busyboxes)):
                if not found:
                    raise debian_archive.ArchiveError(
                        f"the package index{'es' if len(sources) > 1 else ''} of "
                        f"{' and '.join(s.suite for s in sources)} list no {name}", refused=True)
            chosen = (_highest(kernels), _highest(busyboxes))
            kernel_name = chosen[0][1].name
            kernel_release = kernel_name.removeprefix("linux-image-")
            with tempfile.TemporaryDirectory(prefix="vm-assets-", dir=root) as tmp_name:
                tmp = Path(tmp_name)
                debs = {}
                for at, package in chosen:
                    say(f"downloading {package.name} {package.version} ({package.size} bytes) "
                        f"from {at.archive}")
                    debs[package.name] = tmp / f"{package.name}.deb"
                    debian_archive.download(at.archive, package, debs[package.name])
                at = chosen[0][0]
                say(f"reading {kernel_name}")
                bzimage, modules, order = _kernel_contents(debs[kernel_name], kernel_release)
                at = chosen[1][0]
                busybox = dict(debpkg.read_members(debs[BUSYBOX_PACKAGE],
                                                   lambda n: n == "bin/busybox")).get("bin/busybox")
                if busybox is None:
                    raise debpkg.DebError(f"{BUSYBOX_PACKAGE} has no bin/busybox")
                at = chosen[0][0]
                say("extracting the uncompressed vmlinux")
                vmlinux = extract_vmlinux(bzimage)
        except (debian_archive.ArchiveError, debpkg.DebError, ValueError) as exc:
            raise _refused(at, exc) from exc
        say(f"building the base initramfs ({len(modules)} modules)")
        initrd = build_base_initrd(busybox, modules)
        files: dict[str, dict[str, object]] = {}
        for name, data in ((KERNEL_FILE, vmlinux), (INITRD_FILE, initrd), (BUSYBOX_FILE, busybox)):
            staged = root / f".{name}.tmp"
            staged.write_bytes(data)
            os.replace(staged, root / name)
            files[name] = {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
        recorded: dict[str, dict[str, object] | None] = dict.fromkeys(debian_archive.KINDS)
        for release in releases:
            recorded[release.kind] = {"archive": release.archive, "suite": release.suite,
                                      "inrelease_date": debian_archive.when(release.date),
                                      "inrelease_epoch": release.date,
                                      "signing_key": release.fingerprint}
        document = {
            "sources": recorded,
            "packages": {p.name: {"version": p.version, "filename": p.filename, "sha256": p.sha256,
                                  "size": p.size, "source": s.kind, "archive": s.archive}
                         for s, p in chosen},
            "kernel_package": kernel_name,
            "kernel_release": kernel_release,
            "busybox_package": BUSYBOX_PACKAGE,
            "modules": [name for name, _data in modules],
            "module_paths": order,
            "files": files,
        }
        staged = root / f".{MANIFEST}.tmp"
        staged.write_text(json.dumps(document, indent=2) + "\n")
        os.replace(staged, root / MANIFEST)
        say(f"VM assets provisioned in {root}")
        return describe_assets()



def asset_descriptors(kernel: Path | None = None, initrd: Path | None = None) -> list[dict[str, object]]:
    """The kernel and initramfs a boot uses (`[vm] kernel`/`initrd` overrides, else the
    provisioned ones, verified as `load_assets` verifies them), as in-toto resource
    descriptors for an attestation (report/attest.py): each file's sha256 and, for a
    provisioned one, the Debian package and version it came from with the signed index
    (archive, suite, InRelease date, signing key) that listed it. Overrides are named as
    `[vm]` files, with no package: nothing vouches for where they came from."""
    assets = load_assets(kernel, initrd)
    manifest = (_read_manifest(paths.vm_assets_root()) or {}) if assets.source == "provisioned" else {}
    packages = manifest.get("packages")
    sources = _recorded_sources(manifest)

    def origin(name: object) -> dict[str, object]:
        entry = packages.get(name) if isinstance(packages, dict) and isinstance(name, str) else None
        if not isinstance(entry, dict):
            return {}
        index = sources.get(str(entry.get("source", debian_archive.MAIN))) or {}
        return {"package": str(name), "version": str(entry.get("version")),
                "debSha256": str(entry.get("sha256")),
                "index": {"archive": str(index.get("archive")), "suite": str(index.get("suite")),
                          "inreleaseDate": str(index.get("inrelease_date")),
                          "signingKey": str(index.get("signing_key"))}}

    kernel_notes: dict[str, object] = {"source": assets.source, "release": assets.kernel_release}
    initrd_notes: dict[str, object] = {"source": assets.source}
    if manifest:
        kernel_notes.update(origin(manifest.get("kernel_package")))
        initrd_notes["busybox"] = origin(manifest.get("busybox_package", BUSYBOX_PACKAGE))
        initrd_notes["modulesFrom"] = str(manifest.get("kernel_package"))
    return [{"name": "kernel", "digest": {"sha256": assets.kernel_sha256}, "annotations": kernel_notes},
            {"name": "initramfs", "digest": {"sha256": assets.initrd_sha256},
             "annotations": initrd_notes}]
