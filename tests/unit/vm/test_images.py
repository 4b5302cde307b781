"""Images the host builds for the guest (root filesystem, share images) and the qemu
command line that attaches them: no VM boots here."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shlex
import socket
import stat
import subprocess
import sys
import tarfile
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from roteiro_py import config, errors, paths, vocabulary
from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.assets.assets import Assets, kernel_format, load_assets
from roteiro_py.vm.disks import rootfs, rootfs_record, share_image
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_SCRATCH, cargo_views_root
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import backend as qemu_backend
from roteiro_py.vm.qemu import job, machine
from tests.integration.vm.oci_fixture import Layer, busybox_image

ROOT = Path(__file__).resolve().parents[3]


def debugfs(image: Path, request: str) -> str:
    return subprocess.run(["debugfs", "-R", request, str(image)], capture_output=True,
                          text=True, check=True).stdout


# -- root filesystem from layers ----------------------------------------------------------


def test_a_tar_zstd_layer_is_flattened(tmp_path: Path) -> None:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data in (("etc/zstd-layer", b"came through zstd\n"), ("bin/tool", b"#!x")):
            info = tarfile.TarInfo(name)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
    plain = tmp_path / "layer.tar"
    plain.write_bytes(raw.getvalue())
    subprocess.run(["zstd", "-q", "-19", str(plain), "-o", str(tmp_path / "layer.tar.zst")],
                   check=True)
    compressed = (tmp_path / "layer.tar.zst").read_bytes()
    assert compressed[:4] == b"\x28\xb5\x2f\xfd"  # really zstd, not a tar passed through
    (dest := tmp_path / "root").mkdir()
    layer = Layer("sha256:" + hashlib.sha256(compressed).hexdigest(), rootfs.MEDIA_ZSTD[0],
                  tmp_path / "layer.tar.zst")
    report = rootfs.flatten([layer], dest)
    assert (dest / "etc/zstd-layer").read_bytes() == b"came through zstd\n"
    assert os.stat(dest / "bin/tool").st_mode & 0o777 == 0o755 and report.files == 2
    # control arm: the same bytes declared as a plain tar are not readable as one
    (other := tmp_path / "x").mkdir()
    with pytest.raises(rootfs.UnsafeLayer):
        rootfs.flatten([Layer(layer.digest, rootfs.MEDIA_TAR[0], layer.path)], other)


BUILD_IN_CHILD = textwrap.dedent("""
    import json, os, sys, time
    sys.path.insert(0, {fixture!r})
    from tests.integration.vm.oci_fixture import Layer
    from roteiro_py.vm.disks import rootfs
    given = json.loads(sys.argv[1])
    layers = [Layer(d, m, __import__("pathlib").Path(p)) for d, m, p in given["layers"]]
    real = rootfs.flatten
    def slow(*args, **kwargs):  # widen the window in which two builds would overlap
        print("building", flush=True)
        time.sleep(1.5)
        return real(*args, **kwargs)
    rootfs.flatten = slow
    image = rootfs.rootfs_image(layers, given["digest"]).path
    print("image", image, os.stat(image).st_ino, flush=True)
""")


def test_two_processes_building_one_rootfs_both_succeed_with_one_image(tmp_path: Path) -> None:
    # One image, built once here: busybox_image's gzip layer embeds the time, so two
    # children building their own could get two digests and rightly two images.
    layers, digest = busybox_image(tmp_path / "oci")
    given = json.dumps({"digest": digest, "layers": [(la.digest, la.media_type, str(la.path))
                                                     for la in layers]})
    script = BUILD_IN_CHILD.format(fixture=str(ROOT))
    children = [subprocess.Popen([sys.executable, "-c", script, given],
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                 cwd=ROOT) for _ in range(2)]
    outputs = [child.communicate(timeout=120) for child in children]
    assert [c.returncode for c in children] == [0, 0], [err for _, err in outputs]
    said = "".join(out for out, _ in outputs)
    assert said.count("building") == 1, said  # the second waited on the lock and reused
    images = {line.split()[1] for line in said.splitlines() if line.startswith("image ")}
    inodes = {line.split()[2] for line in said.splitlines() if line.startswith("image ")}
    assert len(images) == 1 and len(inodes) == 1, said
    cache = Path(images.pop()).parent
    assert sorted(p.suffix for p in cache.iterdir()) == [".ext4", ".json", ".lock", ".used"]  # .used: its last use


# -- the [vm] kernel override ---------------------------------------------------------------


def test_a_kernel_override_that_qemu_cannot_boot_is_refused(tmp_path: Path) -> None:
    initrd = tmp_path / "initrd"
    initrd.write_bytes(b"070701")
    wrong = [tmp_path / "text", Path(sys.executable).resolve()]  # a text file, an x86-64 ELF
    wrong[0].write_text("not a kernel\n")
    for kernel in wrong:
        with pytest.raises(errors.VmAssetsMissing) as refused:
            load_assets(kernel=kernel, initrd=initrd)
        assert "neither an x86 bzImage nor" in refused.value.what
        with pytest.raises(errors.VmAssetsMissing):  # also with the provisioned initrd
            load_assets(kernel=kernel)


def pvh_elf(path: Path, note_type: int) -> Path:
    """The smallest file that is what qemu boots as a vmlinux: x86-64 ELF, PVH note."""
    name = b"Xen\0"
    note = (4).to_bytes(4, "little") + (4).to_bytes(4, "little") + \
        note_type.to_bytes(4, "little") + name + b"\0\0\x00\x01"
    header = bytearray(64)
    header[:6] = b"\x7fELF\x02\x01"
    header[18:20] = b"\x3e\x00"
    header[0x20:0x28] = (64).to_bytes(8, "little")  # e_phoff
    header[0x36:0x38] = (56).to_bytes(2, "little")  # e_phentsize
    header[0x38:0x3A] = (1).to_bytes(2, "little")  # e_phnum
    ph = bytearray(56)
    ph[0:4] = (4).to_bytes(4, "little")  # PT_NOTE
    ph[0x08:0x10] = (120).to_bytes(8, "little")
    ph[0x20:0x28] = len(note).to_bytes(8, "little")
    path.write_bytes(bytes(header) + bytes(ph) + note)
    return path


def test_a_kernel_override_qemu_can_boot_is_taken_as_given(tmp_path: Path) -> None:
    initrd = tmp_path / "initrd"
    initrd.write_bytes(b"070701")
    good = pvh_elf(tmp_path / "vmlinux", 18)
    assert kernel_format(good) == "vmlinux"
    assets = load_assets(kernel=good, initrd=initrd)
    assert assets.kernel == good and assets.source == "config"
    # control arm: the same ELF with another note type is not bootable, and is refused
    assert kernel_format(pvh_elf(tmp_path / "other", 17)) is None
    bz = tmp_path / "bzImage"
    bz.write_bytes(b"\0" * 0x202 + b"HdrS" + b"\0" * 64)
    assert kernel_format(bz) == "bzImage"


# -- share images ---------------------------------------------------------------------------


def test_staging_keeps_sources_and_symlinks_and_leaves_out_specials_git_and_target(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tree = tmp_path / "tree"
    (tree / "src" / "target").mkdir(parents=True)  # a module dir merely named target
    (tree / "src" / "target" / "mod.rs").write_text("// kept\n")
    (tree / "src" / "lib.rs").write_text("pub fn f() {}\n")
    (tree / "src" / "private.rs").write_text("// 0600 on the host\n")
    os.chmod(tree / "src" / "private.rs", 0o600)
    (tree / "build.sh").write_text("#!/bin/sh\n")
    os.chmod(tree / "build.sh", 0o4750)
    (tree / "secret.rs").write_text("unreadable\n")
    (tree / "escape").symlink_to("/etc/passwd")
    (tree / "dangling").symlink_to("../../nowhere")
    (tree / "target" / "debug").mkdir(parents=True)
    (tree / "target" / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (tree / ".git" / "objects").mkdir(parents=True)
    (tree / "sub" / "crate").mkdir(parents=True)
    (tree / "sub" / "crate" / ".git").write_text("gitdir: ../../.git/modules/x\n")
    os.mkfifo(tree / "fifo")
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(str(tree / "sock"))
    if os.geteuid() == 0:
        # root reads any file, so EACCES cannot be produced on demand: fake it for one name
        real_open = os.open

        def deny(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
            if path == "secret.rs":
                raise PermissionError(13, "Permission denied", path)
            return real_open(path, flags, mode, dir_fd=dir_fd)

        monkeypatch.setattr(share_image.os, "open", deny)
    else:
        os.chmod(tree / "secret.rs", 0)
    dest = tmp_path / "staged"
    dest.mkdir()
    report = share_image.stage_tree(tree, dest)
    monkeypatch.undo()
    sock.close()
    assert (dest / "src/target/mod.rs").read_text() == "// kept\n"
    assert os.readlink(dest / "escape") == "/etc/passwd"  # a link, never its host target
    assert os.readlink(dest / "dangling") == "../../nowhere"
    assert stat.S_IMODE(os.stat(dest / "src/private.rs").st_mode) == 0o644
    assert stat.S_IMODE(os.stat(dest / "build.sh").st_mode) == 0o755
    assert stat.S_IMODE(os.stat(dest / "src").st_mode) == 0o755
    assert dict(report.skipped) == {
        ".git/": "excluded", "fifo": "special", "secret.rs": "unreadable",
        "sock": "special", "sub/crate/.git": "excluded", "target/": "excluded"}
    present = sorted(str(p.relative_to(dest)) for p in dest.rglob("*"))
    assert present == ["build.sh", "dangling", "escape", "src", "src/lib.rs",
                       "src/private.rs", "src/target", "src/target/mod.rs", "sub",
                       "sub/crate"]


def test_a_share_image_holds_the_tree_and_is_removed_after_the_run(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (tree / "link").symlink_to("/etc/shadow")
    with share_image.tree_image(tree) as (image, report):
        assert report.files == 1 and report.symlinks == 1
        assert debugfs(image, "cat /src/main.rs") == "fn main() {}\n"
        assert "Type: symlink" in debugfs(image, "stat /link")
        assert "/etc/shadow" in debugfs(image, "stat /link")
        work = image.parent
        assert stat.S_IMODE(work.stat().st_mode) == 0o700
        assert sorted(p.name for p in work.iterdir()) == ["image.ext4"]  # staging removed
    assert not work.exists()


def test_share_images_left_by_killed_runs_are_swept(tmp_path: Path) -> None:
    from roteiro_py import paths

    base = paths.cache_root() / "vm-shares"
    (stale := base / "share-killed").mkdir(parents=True)
    (stale / "image.ext4").write_bytes(b"x")
    (running := base / "share-running").mkdir()
    old = stale.stat().st_mtime - share_image.STALE_SECONDS - 60
    os.utime(stale, (old, old))
    # A run given the longest deadline allowed is alive this long: 24 h once swept it.
    (week_long := base / "share-week-long").mkdir()
    started = time.time() - vocabulary.MAX_TIMEOUT_S
    os.utime(week_long, (started, started))
    (tree := tmp_path / "tree").mkdir()
    with share_image.tree_image(tree):
        assert not stale.exists() and running.is_dir()  # control arm: a live run's is kept
        assert week_long.is_dir()


def test_the_stale_age_exceeds_the_longest_deadline_a_run_may_have() -> None:
    config.VmSettings(timeout_s=vocabulary.MAX_TIMEOUT_S)
    with pytest.raises(ValueError, match=str(vocabulary.MAX_TIMEOUT_S)):
        config.VmSettings(timeout_s=vocabulary.MAX_TIMEOUT_S + 1)
    assert share_image.STALE_SECONDS > vocabulary.MAX_TIMEOUT_S


def test_mkfs_for_the_share_image_is_killed_at_the_runs_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # A real mkfs.ext4 cannot be made slow on demand: this stand-in sleeps, as one given
    # a tree of 200,000 files on a loaded host would. Before, nothing bounded it.
    fake = tmp_path / "bin" / "mkfs.ext4"
    fake.parent.mkdir()
    fake.write_text("#!/bin/sh\nexec sleep 60\n")
    fake.chmod(0o755)
    (tree := tmp_path / "tree").mkdir()
    (tree / "lib.rs").write_text("fn f() {}\n")
    vm = config.VmSettings()
    limits = share_image.StageLimits.of(vm, deadline=time.monotonic() + 60, deadline_s=1800.0)
    with share_image.tree_image(tree, limits=limits) as (image, _):  # control: real mkfs
        assert image.stat().st_size > 0
    monkeypatch.setenv("PATH", f"{fake.parent}:{os.environ['PATH']}")
    limits = share_image.StageLimits.of(vm, deadline=time.monotonic() + 1.0, deadline_s=1800.0)
    began = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as raised, share_image.tree_image(tree, limits=limits):
        pass
    assert time.monotonic() - began < 30
    assert "1800 s" in raised.value.guidance().render_text()


# -- read-only enforced by qemu, decided by the backend ---------------------------------------


def options(value: str) -> dict[str, str]:
    out = {}
    for word in value.replace(",,", "\0").split(","):
        key, _, val = word.partition("=")
        out[key] = val.replace("\0", ",")
    return out


def argv_of(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, grant_extra: str) -> list[str]:
    """The qemu argv the backend builds for a lint-shaped grant (boot() is replaced: this
    test is about the command line, and qemu_argv turns the spec into it)."""
    tree, view = tmp_path / "tree,odd", cargo_views_root() / ("0" * 32)  # a vendored view
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (view / "registry" / "0").mkdir(parents=True)
    (view / "git").mkdir()
    root_image = tmp_path / "rootfs.ext4"
    root_image.write_bytes(b"")
    disk = tmp_path / "scratch.ext4"
    disk.write_bytes(b"")
    seen: list[list[str]] = []

    def fake_boot(spec: machine.MachineSpec, **_: object) -> machine.MachineResult:
        argv = machine.qemu_argv(spec, tmp_path / "initrd", tmp_path / "sockets")
        for disk_ in spec.disks:  # the share images exist while qemu would run
            assert disk_.path.is_file(), disk_
        seen.append(argv)
        return machine.MachineResult({}, set(), [], b"", b"", 0, False, None, 0.0, 0.0)

    monkeypatch.setattr(qemu_backend, "boot", fake_boot)
    backend = qemu_backend.QemuBackend(VmOptions(rootfs=root_image, scratch=disk, accel="tcg"))
    backend._assets = Assets(tmp_path / "k", tmp_path / "i", "0", "0", "test", "config")
    backend._resolved = "tcg"
    grant = GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**",
                        f"fs:read:{view}/registry/**", f"fs:read:{view}/git/**",
                        "proc:exec:cargo", grant_extra)
    backend.run_steps([Command("cargo", ("clippy",), tree, {})], grant)
    return seen[0]


def test_every_share_and_the_root_are_attached_read_only_by_qemu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = argv_of(tmp_path, monkeypatch, f"fs:write:{GUEST_SCRATCH}/**")
    drives = {options(argv[i + 1])["id"]: options(argv[i + 1])
              for i, word in enumerate(argv) if word == "-drive"}
    fsdevs = [options(argv[i + 1]) for i, word in enumerate(argv) if word == "-fsdev"]
    blk = [options(argv[i + 1]) for i, word in enumerate(argv)
           if word == "-device" and argv[i + 1].startswith("virtio-blk-device")]
    serials = {d["serial"]: drives[d["drive"]] for d in blk}
    assert set(serials) == {job.ROOT_SERIAL, job.SCRATCH_SERIAL, job.share_serial(2)}
    for serial, drive in serials.items():
        wanted = None if serial == job.SCRATCH_SERIAL else "on"
        assert drive.get("readonly") == wanted, (serial, drive)
    assert serials[job.share_serial(2)]["file"].endswith("image.ext4")
    # the registry and git travel over 9p, each read-only in qemu
    assert sorted(Path(f["path"]).name for f in fsdevs) == ["git", "registry"]
    assert all(f.get("readonly") == "on" for f in fsdevs), fsdevs
    assert all(f"mount_tag={job.share_tag(i)}" in " ".join(argv) for i in (0, 1))


def test_a_scratch_only_read_is_attached_read_only_too(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    argv = argv_of(tmp_path, monkeypatch, f"fs:read:{GUEST_SCRATCH}/**")
    drives = [options(argv[i + 1]) for i, word in enumerate(argv) if word == "-drive"]
    assert len(drives) == 3 and all(d.get("readonly") == "on" for d in drives), drives


def test_the_mount_script_mounts_images_and_9p_shares_by_kind(tmp_path: Path) -> None:
    from roteiro_py.vm.mounts import MountTable, Share

    table = MountTable((Share(tmp_path / "reg", f"{GUEST_CARGO_HOME}/registry"),
                        Share(tmp_path / "tree", "/work/tree")), "/scratch", "rw", True)
    images = {i for i, s in enumerate(table.shares)
              if qemu_backend.share_transport(s) == "image"}
    script = job.mounts_script(table, images)
    assert images == {1}
    # a tree under GUEST_TREES (mounts.py), in a tmpfs mounted before it
    assert f"mount_image {job.share_serial(1)} /.roteiro-trees/work/tree\n" in script
    assert script.index("mount_trees /.roteiro-trees\n") < script.index("mount_image")
    assert (f"mount_share {job.share_tag(0)} {shlex.quote(GUEST_CARGO_HOME + '/registry')} "
            f"{job.NINEP_CACHE}\n") in script


# -- host tools ------------------------------------------------------------------------------


def test_a_missing_host_tool_is_a_refusal_naming_its_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from roteiro_py.vm.disks import scratch

    # control arm: with the host's PATH the tools run
    assert scratch.create_scratch(tmp_path / "ok.img", 16).stat().st_size == 16 << 20
    (empty := tmp_path / "empty-path").mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(errors.HostToolMissing) as refused:
        scratch.create_scratch(tmp_path / "scratch.img", 16)
    text = refused.value.guidance().render_text()
    assert "mkfs.ext4" in text and "apt-get install e2fsprogs" in text
    assert str(tmp_path / "scratch.img") in text and refused.value.exit_code == 3
    (tree := tmp_path / "tree").mkdir()
    with pytest.raises(errors.HostToolMissing, match="mkfs.ext4"):
        rootfs.make_ext4(tree, tmp_path / "rootfs.ext4")
    (tmp_path / "l.tar.zst").write_bytes(b"\x28\xb5\x2f\xfd")
    with pytest.raises(errors.HostToolMissing) as refused:
        rootfs.flatten([Layer("sha256:" + "2" * 64, rootfs.MEDIA_ZSTD[0],
                              tmp_path / "l.tar.zst")], tree)
    assert "apt-get install zstd" in refused.value.guidance().render_text()
    assert {tool for tool in rootfs.HOST_TOOL_PACKAGES} == {"mkfs.ext4", "e2fsck", "resize2fs", "zstd"}


def stub_tool(where: Path, name: str, script: str) -> Path:
    """A real program named `name` on a PATH of its own: a host tool that misbehaves."""
    where.mkdir(exist_ok=True)
    tool = where / name
    tool.write_text("#!/bin/sh\n" + script)
    tool.chmod(0o755)
    return tool


HANGS = "(while :; do echo x >> \"$MARKER\"; sleep 0.02; done) & sleep 60\n"


def assert_group_killed(marker: Path) -> None:
    size = marker.stat().st_size
    assert size > 0, "the stub's child never wrote, so this proves nothing"
    time.sleep(0.3)
    assert marker.stat().st_size == size, "what the tool forked outlived its deadline"


@pytest.mark.timeout(60)
def test_a_hung_mkfs_is_refused_at_its_deadline_and_its_group_killed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """mkfs.ext4 had no deadline at all for a scratch disk, nor for a root filesystem built
    without a run's deadline: a hung one hung the lint. Now each has one, and its end is a
    refusal (never subprocess.TimeoutExpired, exit 4)."""
    from roteiro_py.vm.disks import scratch

    # control arm: the real mkfs.ext4 makes the disk and the image
    assert scratch.create_scratch(tmp_path / "ok.img", 16).stat().st_size == 16 << 20
    (tree := tmp_path / "tree").mkdir()
    (tree / "f").write_text("x")
    rootfs.make_ext4(tree, tmp_path / "ok.ext4")
    assert debugfs(tmp_path / "ok.ext4", "cat /f") == "x"
    stub_tool(tmp_path / "bin", "mkfs.ext4", HANGS)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setattr(scratch, "SCRATCH_MKFS_TIMEOUT_S", 1.0)
    monkeypatch.setattr(rootfs, "MKFS_TIMEOUT_S", 1.0)
    for index, make in enumerate((lambda: scratch.create_scratch(tmp_path / "s.img", 16),
                                  lambda: rootfs.make_ext4(tree, tmp_path / "r.ext4"))):
        monkeypatch.setenv("MARKER", str(marker := tmp_path / f"marker{index}"))
        started = time.monotonic()
        with pytest.raises(errors.HostToolFailed) as refused:
            make()
        assert time.monotonic() - started < 5
        assert "within 1 s, and its process group was killed" in \
            refused.value.guidance().render_text()
        assert_group_killed(marker)
    # within a run's deadline it is the run's refusal, naming that deadline
    monkeypatch.setenv("MARKER", str(marker := tmp_path / "marker-share"))
    limits = share_image.StageLimits(max_bytes=1 << 20, max_files=100, max_depth=10,
                                    deadline=time.monotonic() + 1.0, deadline_s=321.0)
    with pytest.raises(errors.DeadlineExceeded) as late, \
            share_image.tree_image(tree, limits=limits):
        pass
    assert "321 s; the host killed mkfs.ext4" in late.value.guidance().render_text()
    assert_group_killed(marker)


@pytest.mark.timeout(60)
def test_a_hung_qemu_version_is_a_refusal_not_exit_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The template key asks `qemu --version` (30 s); past it was subprocess.TimeoutExpired,
    unhandled: exit 4. The probe and doctor report such a qemu as one without a version."""
    from roteiro_py.vm.qemu import probe, template

    answers = stub_tool(tmp_path / "ok", "qemu-ok", "echo 'QEMU emulator version 9.9.9'\n")
    assert template.qemu_identity(str(answers))[-1] == "QEMU emulator version 9.9.9"
    assert probe.qemu_info(str(answers)) == (str(answers), "9.9.9")  # the control arm
    hung = stub_tool(tmp_path / "bin", "qemu-hung", HANGS)
    monkeypatch.setattr(machine, "QEMU_VERSION_TIMEOUT_S", 1.0)
    monkeypatch.setenv("MARKER", str(marker := tmp_path / "marker"))
    with pytest.raises(errors.HostToolFailed) as refused:
        template.qemu_identity(str(hung))
    assert "qemu-hung could not ask qemu its version: it did not finish within 1 s" in \
        refused.value.guidance().render_text()
    assert_group_killed(marker)
    monkeypatch.setenv("MARKER", str(tmp_path / "marker2"))
    assert probe.qemu_info(str(hung)) == (str(hung), None)


def test_qemu_is_asked_its_version_once_per_binary(tmp_path: Path) -> None:
    """A lint asked `qemu --version` three times (the probe for the sandbox, again for the
    job's backend, the template's key): once per binary and process now. A binary
    replaced since is another binary, asked again."""
    from roteiro_py.vm.qemu import probe, template

    calls = tmp_path / "calls"
    qemu = stub_tool(tmp_path / "bin", "qemu-counted",
                     f"echo x >> {shlex.quote(str(calls))}\necho 'QEMU emulator version 9.9.9'\n")
    assert probe.qemu_info(str(qemu)) == (str(qemu), "9.9.9")
    assert probe.qemu_info(str(qemu)) == (str(qemu), "9.9.9")
    assert template.qemu_identity(str(qemu))[-1] == "QEMU emulator version 9.9.9"
    assert calls.read_text() == "x\n"
    # control: the same path, another binary (upgraded in place): asked, and believed
    replaced = tmp_path / "bin" / "qemu-new"
    replaced.write_text(f"#!/bin/sh\necho x >> {shlex.quote(str(calls))}\n"
                        "echo 'QEMU emulator version 10.0.0'\n")
    replaced.chmod(0o755)
    replaced.replace(qemu)
    assert probe.qemu_info(str(qemu)) == (str(qemu), "10.0.0")
    assert calls.read_text() == "x\nx\n"


def zstd_layer(tmp_path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Layer:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for info, data in members:
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    plain = tmp_path / "layer.tar"
    plain.write_bytes(raw.getvalue())
    packed = tmp_path / "layer.tar.zst"
    subprocess.run(["zstd", "-q", "-f", str(plain), "-o", str(packed)], check=True)
    return Layer("sha256:" + hashlib.sha256(packed.read_bytes()).hexdigest(),
                 rootfs.MEDIA_ZSTD[0], packed)


@pytest.mark.timeout(60)
def test_a_hung_zstd_is_refused_at_the_runs_deadline(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """zstd had no deadline: the flatten checks the deadline between members and chunks, so
    a zstd that wrote nothing blocked the read for ever. Now its group is killed when the
    run's deadline passes, and the refusal is the run's."""
    layer = zstd_layer(tmp_path, [(tarfile.TarInfo("etc/x"), b"through zstd\n")])
    (control := tmp_path / "control").mkdir()
    rootfs.flatten([layer], control, rootfs.FlattenLimits(until=time.monotonic() + 30,
                                                          seconds=30))
    assert (control / "etc/x").read_bytes() == b"through zstd\n"
    stub_tool(tmp_path / "bin", "zstd", HANGS)
    monkeypatch.setenv("PATH", f"{tmp_path / 'bin'}:{os.environ['PATH']}")
    monkeypatch.setenv("MARKER", str(marker := tmp_path / "marker"))
    (dest := tmp_path / "root").mkdir()
    started = time.monotonic()
    with pytest.raises(errors.DeadlineExceeded) as late:
        rootfs.flatten([layer], dest, rootfs.FlattenLimits(until=time.monotonic() + 1.0,
                                                           seconds=123))
    assert time.monotonic() - started < 5
    assert "123 s" in late.value.guidance().render_text()
    assert_group_killed(marker)


def test_zstd_output_past_its_bound_refuses_the_layer(tmp_path: Path) -> None:
    """What zstd writes is bounded (rootfs.decompressed_bound): tar headers cost no byte of
    the flatten's budget, so a layer of big pax headers was read whole, however large."""
    info = tarfile.TarInfo("etc/x")
    info.pax_headers = {"comment": "c" * 900_000}  # under tarheaders.MAX_HEADER_DATA
    layer = zstd_layer(tmp_path, [(info, b"x")])
    limits = rootfs.FlattenLimits(max_bytes=1000, max_entries=10)
    assert rootfs.decompressed_bound(limits) == 1000 + 10 * rootfs.TAR_BYTES_PER_ENTRY
    (dest := tmp_path / "root").mkdir()
    with pytest.raises(rootfs.UnsafeLayer, match=f"more than {rootfs.decompressed_bound(limits)} "
                       "bytes"):
        rootfs.flatten([layer], dest, limits)
    # control arm: within a bound that holds it, the same layer flattens
    (other := tmp_path / "other").mkdir()
    rootfs.flatten([layer], other, rootfs.FlattenLimits(max_bytes=1000, max_entries=1000))
    assert (other / "etc/x").read_bytes() == b"x"


HOLD_LOCK = textwrap.dedent("""
    import sys, time
    from filelock import FileLock
    with FileLock(sys.argv[1]):
        print("held", flush=True)
        time.sleep(60)
""")


def test_a_killed_builds_directory_is_swept_but_a_live_builds_is_not(tmp_path: Path) -> None:
    """A SIGKILLed flatten left its temporary directory (up to 16 GiB) in the cache for
    ever; the next use of the cache removes it, sparing a build still running."""
    from roteiro_py import paths

    cache = paths.cache_root() / "rootfs"
    cache.mkdir(parents=True)
    dead, live, mine = "d" * 64, "e" * 64, "f" * 64
    (cache / f".{dead}-k1ll3d" / "tree").mkdir(parents=True)
    (cache / f".{dead}-k1ll3d" / "tree" / "big").write_bytes(b"x" * 4096)
    (cache / f".{mine}-k1ll3d").mkdir()  # an earlier build of this very image
    (cache / f".{live}-running").mkdir()
    (cache / f"{mine}.ext4").write_bytes(b"built")
    rootfs_record.seal(cache / f"{mine}.ext4")  # a cache hit: no mkfs needed
    holder = subprocess.Popen([sys.executable, "-c", HOLD_LOCK, str(cache / f"{live}.lock")],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        assert rootfs.rootfs_image([], f"sha256:{mine}").path == cache / f"{mine}.ext4"
        assert (cache / f".{live}-running").is_dir(), "a running build's directory was taken"
    finally:
        holder.kill()
        holder.wait()
        assert holder.stdout is not None
        holder.stdout.close()
    assert not (cache / f".{dead}-k1ll3d").exists()
    assert not (cache / f".{mine}-k1ll3d").exists()
    rootfs.rootfs_image([], f"sha256:{mine}")  # its builder gone, the next use sweeps it
    assert not (cache / f".{live}-running").exists()


def test_the_root_filesystems_mkfs_and_lock_are_bounded_by_the_runs_deadline(
        tmp_path: Path, roteiro_home: Path, monkeypatch: pytest.MonkeyPatch,
        hold_lock: Callable[[Path], Callable[[], None]]) -> None:
    """The flatten was bounded by the run's deadline, but mkfs.ext4 of the root filesystem
    (minutes for a big image) and the wait for another run's build of it were not. The
    mkfs.ext4 here is a stand-in that sleeps (a fake, said so: a real one that slow needs
    gigabytes); the control arm builds with the real one once the lock is free."""
    from roteiro_py.vm.disks import rootfs

    slow = tmp_path / "mkfs.ext4"
    slow.write_text('#!/bin/sh\nsleep 6\n')
    slow.chmod(0o755)
    digest = "sha256:" + "ab" * 32
    # the stand-in only inside this block: undoing the test's whole monkeypatch here
    # also undid its ROTEIRO_HOME, and the control arm below wrote to the real one
    with monkeypatch.context() as stand_in:
        stand_in.setattr(rootfs, "host_tool", lambda tool, purpose: str(slow))
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded) as late:
            rootfs.rootfs_image([], digest, rootfs.FlattenLimits(until=time.monotonic() + 1.0, seconds=61.0))
        assert time.monotonic() - started < 4
        assert "building the root filesystem image" in late.value.guidance().render_text()
        lock = paths.cache_root() / "rootfs" / f"{'ab' * 32}.lock"
        release = hold_lock(lock)
        started = time.monotonic()
        with pytest.raises(errors.DeadlineExceeded) as waited:
            rootfs.rootfs_image([], digest, rootfs.FlattenLimits(until=time.monotonic() + 1.0,
                                                                 seconds=61.0))
        assert time.monotonic() - started < 4
        assert "waiting for another run" in waited.value.guidance().render_text()
        release()
    # control: the real mkfs.ext4, the lock free, time enough
    image = rootfs.rootfs_image([], digest, rootfs.FlattenLimits(until=time.monotonic() + 120,
                                                                 seconds=120.0))
    assert image.path.is_file() and image.path.stat().st_size > 0
    assert image.path.is_relative_to(roteiro_home)


@pytest.mark.parametrize("case", ["fine", "files", "depth", "bytes", "incomplete"])
def test_check_tree_meets_what_the_copy_meets_and_writes_nothing(tmp_path: Path, case: str) -> None:
    """`check_tree` (the lint's preflight, before the root filesystem) is the copy's own
    walk: the same refusal for the same tree, the same counts, and no byte written."""
    from roteiro_py.vm.disks.share_image import StageLimits, check_tree, stage_tree

    tree = tmp_path / "tree"
    (tree / "src" / "a" / "b").mkdir(parents=True)
    (tree / "Cargo.toml").write_text("[package]\n")
    (tree / "src" / "lib.rs").write_text("x" * 1000)
    (tree / "link").symlink_to("src")
    limits = StageLimits(max_bytes=1 << 20, max_files=50, max_depth=8)
    if case == "files":
        limits = StageLimits(max_bytes=1 << 20, max_files=3, max_depth=8)
    elif case == "depth":
        limits = StageLimits(max_bytes=1 << 20, max_files=50, max_depth=2)
    elif case == "bytes":
        limits = StageLimits(max_bytes=500, max_files=50, max_depth=8)
    elif case == "incomplete":
        os.mkfifo(tree / "src" / "a" / "build.rs")
    copy = tmp_path / "copy"
    copy.mkdir()
    outcomes: list[object] = []
    for walk in (lambda: check_tree(tree, limits), lambda: stage_tree(tree, copy, limits)):
        try:
            report = walk()
            outcomes.append((report.files, report.dirs, report.symlinks, report.bytes, report.skipped))
        except (errors.TreeTooLarge, errors.TreeIncomplete) as refused:
            outcomes.append(refused.guidance().render_text())
        if len(outcomes) == 1:
            assert list(copy.iterdir()) == []  # check_tree wrote nothing
    assert outcomes[0] == outcomes[1]
    assert isinstance(outcomes[0], tuple) is (case == "fine")  # control: the refusals are met
