"""The pure parts of the VM backend: flattening, path escapes, mounts from grants, quoting."""

from __future__ import annotations

import hashlib
import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.assets import assets
from roteiro_py.vm.assets.initramfs import Entry, write_newc
from roteiro_py.vm.disks import rootfs
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, cargo_views_root, derive_mounts
from roteiro_py.vm.qemu import job
from tests.integration.vm.oci_fixture import Layer, busybox_image


def layer_of(tmp: Path, members: list[tuple[str, bytes, int, str]]) -> Layer:
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        for name, data, kind, link in members:
            info = tarfile.TarInfo(name)
            info.type = bytes([kind]) if isinstance(kind, int) else kind
            info.linkname = link
            info.size = len(data) if info.type == tarfile.REGTYPE else 0
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data) if info.type == tarfile.REGTYPE else None)
    path = tmp / f"layer{len(list(tmp.iterdir()))}.tar"
    path.write_bytes(raw.getvalue())
    return Layer("sha256:" + hashlib.sha256(raw.getvalue()).hexdigest(),
                 "application/vnd.oci.image.layer.v1.tar", path)


def test_flatten_honours_whiteouts_opaque_dirs_and_strips_setuid(tmp_path: Path) -> None:
    layers, _ = busybox_image(tmp_path / "oci")
    dest = tmp_path / "root"
    dest.mkdir()
    report = rootfs.flatten(layers, dest)
    assert not (dest / "gone" / "file").exists() and (dest / "gone").is_dir()
    assert sorted(p.name for p in (dest / "opaque").iterdir()) == ["new"]
    assert (dest / "etc" / "motd").read_text() == "layer two\n"
    assert os.stat(dest / "usr/bin/suid").st_mode & 0o7777 == 0o755
    assert report.stripped == ["usr/bin/suid"] and report.dropped == ["dev-node"]
    assert not (dest / "dev-node").exists()
    assert os.readlink(dest / "bin" / "sh") == "busybox"
    assert not list(dest.rglob(".wh.*"))


@pytest.mark.parametrize("name", ["/etc/passwd", "../escape", "a/../../escape", "./"])
def test_members_that_escape_refuse_the_image(tmp_path: Path, name: str) -> None:
    (tmp_path / "l").mkdir()
    layer = layer_of(tmp_path / "l", [(name, b"x", ord("0"), "")])
    with pytest.raises(rootfs.UnsafeLayer):
        rootfs.flatten([layer], tmp_path)


def test_writes_never_follow_a_symlink_planted_by_a_layer(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (tmp_path / "l").mkdir()
    dest = tmp_path / "root"
    dest.mkdir()
    layer = layer_of(tmp_path / "l", [("link", b"", ord("2"), str(outside)),
                                      ("link/pwned", b"x", ord("0"), "")])
    rootfs.flatten([layer], dest)
    assert list(outside.iterdir()) == []  # the write went into a real directory instead
    assert (dest / "link" / "pwned").read_bytes() == b"x" and not (dest / "link").is_symlink()
    hard = layer_of(tmp_path / "l", [("h", b"", ord("1"), "../../etc/passwd")])
    with pytest.raises(rootfs.UnsafeLayer):
        rootfs.flatten([hard], dest)


def test_whiteouts_and_hardlinks_never_pass_through_a_planted_symlink(tmp_path: Path) -> None:
    """A symlink in a middle component must not carry a removal or a link to the host."""
    victim = tmp_path / "victim"
    (victim / "sub").mkdir(parents=True)
    (victim / "sub" / "file").write_text("keep")
    (victim / "other").write_text("keep")
    (victim / "secret.txt").write_text("secret")
    (tmp_path / "l").mkdir()
    dest = tmp_path / "root"
    dest.mkdir()
    removals = layer_of(tmp_path / "l", [("x", b"", ord("2"), str(victim)),
                                          ("x/sub/.wh.file", b"", ord("0"), ""),
                                          ("x/.wh..wh..opq", b"", ord("0"), "")])
    rootfs.flatten([removals], dest)
    assert (victim / "sub" / "file").read_text() == "keep" and (victim / "other").exists()
    steal = layer_of(tmp_path / "l", [("y", b"", ord("2"), str(victim)),
                                       ("stolen", b"", ord("1"), "y/secret.txt")])
    with pytest.raises(rootfs.UnsafeLayer, match="symbolic link"):
        rootfs.flatten([steal], dest)
    assert not (dest / "stolen").exists() and os.stat(victim / "secret.txt").st_nlink == 1


def a_view(*kinds: str) -> Path:
    """A vendored view's directory (cargo/vendor.py makes them there) holding `kinds`."""
    view = cargo_views_root() / ("0" * 32)
    for kind in kinds:
        (view / kind).mkdir(parents=True, exist_ok=True)
    return view


def grant_for(tree: Path, view: Path, *extra: str) -> GrantSet:
    return GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**",
                       *(f"fs:read:{view}/{kind}/**" for kind in ("registry", "git")
                         if (view / kind).is_dir()),
                       "proc:exec:cargo", *extra)


def test_mount_table_maps_shares_and_cargo_home(tmp_path: Path) -> None:
    tree, cargo = tmp_path / "tree", tmp_path / "cargo"
    tree.mkdir()
    view = a_view("registry")  # no git/: a lockfile without git pins has none, and none is granted
    cmd = Command("cargo", ("clippy",), tree)
    table = derive_mounts(grant_for(tree, view, "fs:write:/scratch/**"), cmd,
                          scratch="/scratch", host_cargo_home=cargo)
    assert [(s.host, s.guest) for s in table.shares] == [
        (view / "registry", f"{GUEST_CARGO_HOME}/registry"), (tree, str(tree))]
    assert table.scratch == "/scratch" and table.scratch_mode == "rw" and table.cargo_home
    script = job.mounts_script(table)
    assert script.index("mount_tmpfs_owned") < script.index(f"{GUEST_CARGO_HOME}/registry")


@pytest.mark.parametrize("atom, why", [
    ("net:egress:crates.io:443", "no network device"),
    ("secret:use:TOKEN", "no secret channel"),
    ("env:read:HOME", "never inherited"),
    ("fs:write:/etc/**", "only writable place"),
    ("fs:write:{tree}/**", "only writable place"),
    ("fs:read:{cargo}/**", "credentials.toml"),
    ("fs:read:/**", "credentials.toml"),
    ("fs:read:/proc/**", "a directory the VM itself provides"),
    ("fs:read:/cargo-home/**", "a directory the VM itself provides"),
    ("fs:read:{cargo}/registry/**", "no part of the host's cargo home is shared"),
    ("fs:read:{cargo}/git/**", "no part of the host's cargo home is shared"),
    ("fs:list:/elsewhere/**", "without letting its files be read"),
])
def test_unenforceable_atoms_are_refused_before_booting(tmp_path: Path, atom: str,
                                                        why: str) -> None:
    tree, cargo = tmp_path / "tree", tmp_path / "cargo"
    tree.mkdir()
    for kind in ("registry", "git"):  # the host's cargo home, filled as cargo fills it
        (cargo / kind).mkdir(parents=True)
    view = a_view("registry", "git")
    cmd = Command("cargo", ("clippy",), tree, {"TOKEN": "s3cret"})
    bad = atom.format(tree=tree, cargo=cargo)
    with pytest.raises(errors.Unenforceable) as refused:
        derive_mounts(grant_for(tree, view, bad), cmd, scratch="/scratch",
                      host_cargo_home=cargo)
    assert why in str(refused.value.why) and refused.value.atom.startswith(bad.split("*")[0])
    assert "s3cret" not in refused.value.command
    # control arm: without the bad atom the same grant is accepted
    derive_mounts(grant_for(tree, view), cmd, scratch="/scratch", host_cargo_home=cargo)


def test_the_refusal_of_the_cargo_home_root_advises_no_grant_that_is_refused_too(
        tmp_path: Path) -> None:
    """It said "grant <cargo>/registry/** and <cargo>/git/** instead": both are refused
    since the guest sees only a vendored view (issue 20)."""
    tree, cargo = tmp_path / "tree", tmp_path / "cargo"
    tree.mkdir()
    (cargo / "registry").mkdir(parents=True)
    cmd = Command("cargo", ("clippy",), tree)
    with pytest.raises(errors.Unenforceable) as root:
        derive_mounts(grant_for(tree, a_view(), f"fs:read:{cargo}/**"), cmd, scratch=None,
                      host_cargo_home=cargo)
    assert "credentials.toml" in root.value.why and f"{cargo}/registry" not in root.value.why
    with pytest.raises(errors.Unenforceable):  # what it used to advise is refused
        derive_mounts(grant_for(tree, a_view(), f"fs:read:{cargo}/registry/**"), cmd,
                      scratch=None, host_cargo_home=cargo)


@pytest.mark.parametrize("base", ["tmp", "/dev/shm"])
def test_a_tree_anywhere_is_mounted_under_guest_trees_and_named_by_its_host_path(
        tmp_path: Path, base: str) -> None:
    """Where a host tree is says nothing about where the guest mounts it: under GUEST_TREES,
    whose directories the guest init makes (0755), never the image's (/root: 0700). A
    step's working directory, arguments and environment name it by its host path, and its
    output names it so again. The same path in the guest made /root/proj unlintable (the
    real VM lints from each place in tests/integration/lint/test_places_lint.py)."""
    from roteiro_py.vm.mounts import GUEST_TREES

    root = tmp_path if base == "tmp" else Path(tempfile.mkdtemp(dir=base))
    try:
        tree = root / "a b" / "é"
        tree.mkdir(parents=True)
        step = Command("sh", ("-c", "x", str(tree), f"{tree}/src", f"{tree}x", "/tmp"), tree,
                       {"M": f"{tree}/Cargo.toml", "T": "/tmp"})
        grant = GrantSet.of(f"fs:read:{tree}/**", "proc:exec:cargo")
        table = derive_mounts(grant, step, scratch=None, host_cargo_home=tmp_path / "cargo")
    finally:
        if base != "tmp":
            shutil.rmtree(root)
    (share,) = table.shares
    placed = GUEST_TREES + str(tree)
    assert share.guest == str(tree) and share.mount_point == placed
    script = job.step_script(step, table)
    out = subprocess.run(["busybox", "sh", "-c", script + 'for w in "$@"; do echo "<$w>"; done'],
                         capture_output=True, text=True, check=True).stdout
    assert f"<-w/newroot{placed}>" in out and f"<{placed}>" in out and f"<{placed}/src>" in out
    assert f"<M={placed}/Cargo.toml>" in out
    # control: a path that is not the tree's, or only begins like it, is the guest's own
    assert f"<{tree}x>" in out and "</tmp>" in out and "<T=/tmp>" in out
    said = json.dumps({"file": f"{placed}/src/lib.rs", "text": f"error in `{placed}`",
                       "package_id": f"path+file://{placed}#x@0.1.0"}, ensure_ascii=False).encode()
    assert json.loads(table.host_bytes(said)) == {"file": f"{tree}/src/lib.rs",
                                                 "text": f"error in `{tree}`",
                                                 "package_id": f"path+file://{tree}#x@0.1.0"}
    assert table.host_text(f"cannot make mount point {placed}") == f"cannot make mount point {tree}"
    # control: the name inside another path is that path's own, not the prefix
    kept = f"src{GUEST_TREES}/x a{GUEST_TREES}/y {GUEST_TREES}x é{GUEST_TREES}/z".encode()
    assert table.host_bytes(kept) == kept


@pytest.mark.parametrize("place", ["/dev", "/proc", "/cargo-home"])
def test_a_tree_that_is_a_directory_the_vm_provides_is_refused(place: str) -> None:
    """A step's `/dev/null` or `/cargo-home/registry` would name both the guest's own
    directory and the tree's; a tree under them is fine (above). (A tree that is /tmp, where
    the probes run, is refused before: tests/unit/clippy/test_pinned.py.)"""
    grant = GrantSet.of(f"fs:read:{place}/**", "proc:exec:cargo")
    with pytest.raises(errors.Unenforceable) as refused:
        derive_mounts(grant, Command("cargo", (), Path(place)), scratch=None,
                      host_cargo_home=Path("/nonexistent-cargo-home"))
    assert "a directory the VM itself provides" in str(refused.value.why)


def test_step_script_quotes_every_value_as_one_word(tmp_path: Path) -> None:
    cmd = Command("prog", ("$(reboot)", "a b", "'q'"), Path("/w d"),
                  {"V": "x'; poweroff -f; '"}, timeout=2.5)
    script = job.step_script(cmd)
    out = subprocess.run(["busybox", "sh", "-c", script + 'for w in "$@"; do echo "<$w>"; done'],
                         capture_output=True, text=True, check=True).stdout
    assert "<V=x'; poweroff -f; '>" in out and "<$(reboot)>" in out and "<a b>" in out
    assert "<-w/newroot/w d>" in out and "<'q'>" in out and "STEP_TIMEOUT=3" in script
    with pytest.raises(ValueError):
        job.step_script(Command("p", (), Path("/"), {"BAD-NAME": "x"}))


def test_newc_archive_is_read_back_by_cpio(tmp_path: Path) -> None:
    data = write_newc([Entry.directory("d"), Entry.file("d/f", b"hello", 0o600),
                       Entry.symlink("d/l", "f")])
    listing = subprocess.run(["cpio", "-itv"], input=data, capture_output=True,
                             check=True).stdout.decode()
    assert "d/f" in listing and "d/l -> f" in listing and "-rw-------" in listing


def test_module_order_puts_dependencies_first() -> None:
    dep = ("kernel/fs/ext4/ext4.ko: kernel/lib/crc16.ko kernel/fs/jbd2/jbd2.ko\n"
           "kernel/lib/crc16.ko:\nkernel/fs/jbd2/jbd2.ko:\n")
    order = assets.module_load_order(dep, ("ext4",))
    assert order[-1] == "kernel/fs/ext4/ext4.ko" and len(order) == 3
    with pytest.raises(ValueError):
        assets.module_load_order(dep, ("nonexistent",))


def test_missing_assets_name_the_prefetch_command(tmp_path: Path) -> None:
    with pytest.raises(errors.VmAssetsMissing) as missing:
        assets.load_assets()
    assert assets.PROVISION_COMMAND in missing.value.guidance().commands


def test_a_hang_verdict_expires_an_abort_does_not(tmp_path: Path) -> None:
    from dataclasses import asdict

    from roteiro_py.vm.qemu import probe

    def stored(name: str, usable: bool, reason: str, age: float) -> Path:
        path = tmp_path / name
        verdict = probe.Verdict("kvm", usable, reason, 6.0, "7.2", "host")
        path.write_text(__import__("json").dumps(asdict(verdict)))
        when = __import__("time").time() - age
        os.utime(path, (when, when))
        return path

    old = probe.HANG_VERDICT_TTL_S + 60
    assert probe.cached_verdict(stored("hang-old", False, "printed nothing (a silent hang)", old)) is None
    assert probe.cached_verdict(stored("hang-new", False, "printed nothing (a silent hang)", 10)) is not None
    assert probe.cached_verdict(stored("abort-old", False, "qemu was killed by signal 6", old)) is not None
    assert probe.cached_verdict(stored("ok-old", True, "canary guest booted", old)) is not None
    assert probe.cached_verdict(tmp_path / "missing") is None


def test_a_sigkilled_caller_takes_qemu_with_it(tmp_path: Path) -> None:
    """Run by tied_to_caller, a child of the stream layer dies with a SIGKILLed caller."""
    import signal
    import time

    pidfile = tmp_path / "child.pid"
    for tied, should_survive in ((False, True), (True, False)):  # control arm first
        pidfile.unlink(missing_ok=True)
        argv = ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 60"]
        code = (
            "import sys, time\nfrom roteiro_py.process.stream import spawn\n"
            "from roteiro_py.vm.qemu.machine import tied_to_caller\n"
            f"argv = {argv!r}\nargv = tied_to_caller(argv) if {tied} else argv\n"
            "s = spawn(argv, timeout=120)\nprint('ready', flush=True)\ntime.sleep(60)\n")
        with subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True) as caller:
            assert caller.stdout is not None and caller.stdout.readline().strip() == "ready"
            deadline = time.monotonic() + 5
            # the shell creates the file before it writes the pid: wait for the whole line
            while not (pidfile.exists() and pidfile.read_text().endswith("\n")) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            child = int(pidfile.read_text())
            caller.send_signal(signal.SIGKILL)
            caller.wait(timeout=10)
        time.sleep(0.5)
        stat_file = Path(f"/proc/{child}/stat")
        alive = stat_file.exists() and stat_file.read_text().split()[2] != "Z"
        if alive:
            os.kill(child, signal.SIGKILL)
        assert alive == should_survive, ("tied" if tied else "untied", alive)


def test_without_setpriv_qemu_is_refused_not_started_untied(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """It used to run qemu without the parent-death signal when setpriv was missing."""
    from roteiro_py.vm.qemu.machine import tied_to_caller

    tied = tied_to_caller(["qemu-system-x86_64", "-version"])  # control: setpriv is here
    assert Path(tied[0]).name == "setpriv" and tied[1:4] == ["--pdeathsig", "KILL", "--"]
    monkeypatch.setenv("PATH", str(tmp_path))  # a real PATH without util-linux
    with pytest.raises(errors.HostToolMissing) as refused:
        tied_to_caller(["qemu-system-x86_64", "-version"])
    assert refused.value.tool == "setpriv" and refused.value.package == "util-linux"
