"""Real QEMU guests under TCG. Each boot costs 3-7 s here, so one boot carries several
checks where that does not weaken them: each step of a job has its own status and output,
and the guest init kills every process of the command's user between steps."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.mounts import GUEST_CARGO_HOME
from roteiro_py.vm.qemu import assets, probe, scratch
from roteiro_py.vm.qemu.backend import QemuBackend


def tree_hashes(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = f"{oct(st.st_mode)}:{digest}"
    return out


def qemu_processes(marker: str) -> list[str]:
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                cmd = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:
                continue
            if "qemu-system" in cmd and marker in cmd:
                found.append(cmd)
    return found


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rootfs_image: Path):
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (tree / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    cargo = tmp_path / "cargo-home"
    (cargo / "registry" / "cache").mkdir(parents=True)
    (cargo / "registry" / "cache" / "crate.crate").write_text("crate bytes\n")
    (cargo / "credentials.toml").write_text("[registry]\ntoken = 'SECRET-TOKEN'\n")
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    monkeypatch.setenv("ROTEIRO_HOST_ONLY_SECRET", "leaked")
    disk = scratch.create_scratch(tmp_path / "scratch.img", 64)
    grant = GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**",
                        f"fs:read:{cargo}/registry/**", "fs:write:/scratch/**",
                        "proc:exec:sh")
    backend = QemuBackend(rootfs=rootfs_image, scratch=disk, accel="tcg")
    return tree, cargo, disk, grant, backend


def sh(script: str, cwd: Path, timeout: float = 30, **env: str) -> Command:
    return Command("sh", ("-c", script), cwd, {"PATH": "/bin", **env}, timeout=timeout)


WRITE_ATTEMPTS = r"""
cd "$1"
try() { if "$@" 2>/dev/null; then echo "WROTE: $*"; else echo "refused: $*"; fi; }
attempt() {
  try touch new-file; try sh -c 'echo x >> Cargo.toml'; try rm src/main.rs; try mkdir newdir
  try chmod 777 Cargo.toml; try mv Cargo.toml moved; try ln -s /etc/passwd link
  try ln Cargo.toml hard
}
attempt
mount -o remount,rw "$1" 2>&1; mount -o remount,rw / 2>&1
attempt
echo scratch-control > /scratch/control && echo "scratch ok"
"""

FORGE = r"""
for d in /dev/vport* /dev/hvc* /dev/console /dev/ttyS* /dev/virtio-ports/* /dev/tty; do
  [ -e "$d" ] || continue
  printf 'exit 0 0 0\nexit 1 0 0\ndone\n' > "$d" 2>/dev/null && echo "wrote $d"
done
ls /dev
exit 7
"""

PLANT = r"""
echo warm-data > /scratch/warm.txt
cp /bin/busybox /scratch/suid && chmod 4755 /scratch/suid && stat -c '%a' /scratch/suid
mknod /scratch/node c 1 3 2>&1 || echo "mknod refused"
ln -s /etc/shadow /scratch/link && readlink /scratch/link
"""


@pytest.mark.timeout(240)
def test_one_boot_enforces_read_only_env_network_status_and_credentials(world) -> None:
    tree, cargo, disk, grant, backend = world
    before = tree_hashes(tree)
    reg_before = tree_hashes(cargo)
    steps = [
        Command("sh", ("-c", WRITE_ATTEMPTS, "sh", str(tree)), tree, {"PATH": "/bin"},
                timeout=60),
        Command("env", (), tree, {"PATH": "/bin", "GIVEN": "value with space\nand line"}),
        sh("ls /sys/class/net", tree),
        sh("exit 3", tree),
        sh("no-such-program", tree),
        sh(FORGE, tree),
        sh(f"touch {GUEST_CARGO_HOME}/registry/cache/x 2>&1; "
           f"echo y >> {GUEST_CARGO_HOME}/registry/cache/crate.crate 2>&1; "
           f"cat {GUEST_CARGO_HOME}/registry/cache/crate.crate; "
           f"ls -a {GUEST_CARGO_HOME}; find / -name credentials.toml 2>/dev/null; "
           "find / -path /proc -prune -o -path /sys -prune -o -type f -print 2>/dev/null | "
           "xargs grep -l SECRET-TOKEN 2>/dev/null; id", tree),
        sh(PLANT, tree),
    ]
    job = backend.run_steps(steps, grant, stop_on_failure=False)
    assert job.completed, (job.failure, job.console[-2000:])
    assert job.isolation.accelerator == "tcg" and not job.isolation.hardware_isolated
    assert "not a hardware security boundary" in job.isolation.description
    writes, env, net, three, missing, forge, creds, plant = job.steps
    out = writes.stdout.decode()
    assert "WROTE" not in out, out
    assert out.count("refused:") == 16, out
    assert "scratch ok" in out  # control arm: writing is observable where it is allowed
    assert tree_hashes(tree) == before and tree_hashes(cargo) == reg_before
    assert env.stdout == b"GIVEN=value with space\nand line\nPATH=/bin\n"
    assert b"ROTEIRO_HOST_ONLY_SECRET" not in env.stdout
    assert net.stdout == b"lo\n" and net.exit == 0
    assert three.exit == 3 and missing.exit == 127
    assert forge.exit == 7, forge
    assert b"vport" not in forge.stdout and b"console" not in forge.stdout
    c = creds.stdout.decode()
    assert "Read-only file system" in c and "crate bytes\n" in c
    assert "credentials.toml" not in c and "SECRET-TOKEN" not in c
    assert "uid=1000" in c
    assert plant.exit == 0 and b"4755" in plant.stdout and b"/etc/shadow" in plant.stdout
    assert b"mknod refused" in plant.stdout or b"Operation not permitted" in plant.stdout
    # The planted files exist only inside the image, which the host never mounts:
    inside = subprocess.run(["debugfs", "-R", "stat /suid", str(disk)], capture_output=True,
                            text=True, check=True).stdout
    assert "Mode:  04755" in inside  # the plant happened ...
    assert not list(disk.parent.glob("suid")) and not (disk.parent / "link").exists()
    assert disk.is_file() and not disk.is_symlink()  # ... and on the host it is one file

    # Warm run: a second boot sees what the first wrote to the scratch.
    again = backend.run(sh("cat /scratch/warm.txt; ls /scratch", tree), grant)
    assert again.exit == 0 and again.stdout.startswith(b"warm-data\n"), again


@pytest.mark.timeout(240)
def test_forty_megabytes_come_back_byte_exact(world) -> None:
    tree, _, _, grant, backend = world
    size = 40_000_000
    line = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!\n"
    expected = (line * (size // len(line) + 1))[:size]
    outcome = backend.run(sh(f"yes '{line[:-1].decode()}' | head -c {size}", tree,
                             timeout=200), grant)
    assert outcome.exit == 0 and not outcome.truncated
    assert len(outcome.stdout) == size and outcome.stdout == expected


@pytest.mark.timeout(120)
def test_deadlines_kill_on_time_keep_partial_output_and_leave_nothing(world) -> None:
    tree, _, _, grant, backend = world
    steps = [sh("echo first; sleep 100", tree, timeout=2),   # the guest's step deadline
             sh("echo second; sleep 100", tree, timeout=100)]  # the host's job deadline
    started = time.monotonic()
    job = backend.run_steps(steps, grant, stop_on_failure=False, deadline=20)
    elapsed = time.monotonic() - started
    first, second = job.steps
    assert first.timed_out and first.exit is None and first.stdout == b"first\n"
    assert 1.5 < first.duration < 4.0, first.duration
    assert second.timed_out and second.exit is None and second.stdout == b"second\n"
    assert not job.completed and "deadline" in (job.failure or "")
    assert 19.5 < elapsed < 23.0, elapsed
    assert qemu_processes(str(assets.load_assets().kernel)) == []


@pytest.mark.timeout(60)
def test_kvm_probe_reports_unusable_within_seconds(vm_home: Path) -> None:
    a = assets.load_assets()
    started = time.monotonic()
    abort = probe.probe("kvm", a, use_cache=False)           # -cpu host: qemu aborts
    hang = probe.probe("kvm", a, cpu="qemu64", use_cache=False)  # default model: hangs
    assert time.monotonic() - started < probe.KVM_DEADLINE + 5
    assert not abort.usable and "SIGABRT" in abort.reason and "kvm_buf_set_msrs" in abort.reason
    assert not hang.usable and "silent hang" in hang.reason
    with pytest.raises(errors.SandboxUnavailable) as refused:
        QemuBackend(rootfs=Path("/nonexistent"), accel="auto").isolation()
    assert refused.value.tcg_possible and refused.value.accel == "auto"
    assert any("kvm" in f for f in refused.value.findings)
