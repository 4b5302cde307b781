"""Real QEMU guests under TCG (and one under KVM, on a host where KVM runs them). Each boot
costs 3-7 s here, so one boot carries several checks where that does not weaken them: each
step of a job has its own status and output, and the guest init kills every process of the
command's user between steps."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.api import VmOutcome
from roteiro_py.vm.assets import assets
from roteiro_py.vm.disks import scratch
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_SCRATCH, GUEST_TREES, cargo_views_root
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import probe
from roteiro_py.vm.qemu.backend import QemuBackend, isolation_for


def tree_hashes(root: Path) -> dict[str, str]:
    out = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        digest = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else ""
        out[str(path.relative_to(root))] = f"{oct(st.st_mode)}:{digest}"
    return out


def qemu_processes(marker: str) -> list[str]:
    """The qemu processes whose command line holds `marker`: a test passes its own scratch
    disk's path (under its tmp_path), so another run's qemu booting the same provisioned
    kernel at the same time is not counted as this test's leftover."""
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


#: A tree, a vendored view's registry/, a scratch disk, the grant of a lint, and a TCG backend.
World = tuple[Path, Path, Path, GrantSet, QemuBackend]


@pytest.fixture
def world(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, rootfs_image: Path) -> Iterator[World]:
    """The guest's cargo share is a vendored view's registry/ (what a lint grants,
    roteiro_py/cargo/vendor.py), made here by hand under the provisioned home's views; the
    host's cargo home, holding credentials.toml, is never shared."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (tree / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    view = cargo_views_root() / uuid.uuid4().hex  # the home is shared: a name of this test's
    registry = view / "registry"
    (registry / "cache").mkdir(parents=True)
    (registry / "cache" / "crate.crate").write_text("crate bytes\n")
    cargo = tmp_path / "cargo-home"
    cargo.mkdir()
    (cargo / "credentials.toml").write_text("[registry]\ntoken = 'SECRET-TOKEN'\n")
    monkeypatch.setenv("CARGO_HOME", str(cargo))
    monkeypatch.setenv("ROTEIRO_HOST_ONLY_SECRET", "leaked")
    disk = scratch.create_scratch(tmp_path / "scratch.img", 64)
    grant = GrantSet.of(f"fs:read:{tree}/**", f"fs:list:{tree}/**",
                        f"fs:read:{registry}/**", f"fs:write:{GUEST_SCRATCH}/**",
                        "proc:exec:sh")
    backend = QemuBackend(VmOptions(rootfs=rootfs_image, scratch=disk, accel="tcg"))
    try:
        yield tree, registry, disk, grant, backend
    finally:
        shutil.rmtree(view, ignore_errors=True)


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
echo scratch-control > $SCRATCH/control && echo "scratch ok"
""".replace("$SCRATCH", GUEST_SCRATCH)

#: Lines that, if they reached the status port, would change what the host reads: step 3's
#: status, and OOM evidence for this step (5) and the next (6).
FORGED = r"oom 5 9\noom 6 9\nexit 3 0 0\nexit 5 0 0\n"
FORGE = r"""
for d in /dev/vport* /dev/hvc* /dev/console /dev/ttyS* /dev/virtio-ports/* /dev/tty; do
  [ -e "$d" ] || continue
  printf '%s' "$FORGED" > "$d" 2>/dev/null && echo "wrote $d"
done
# The status port's device numbers are visible in sysfs (the control: the attempt below is
# a real one); a node made from them would reach it, but the user has no CAP_MKNOD and
# every place it can write is nodev.
for p in /sys/class/virtio-ports/*; do
  read -r name < "$p/name"; [ "$name" = status ] && read -r dev < "$p/dev"
done
echo "status port $dev"
for d in /tmp /dev/shm $SCRATCH /cargo-home; do
  if mknod "$d/port" c "${dev%%:*}" "${dev#*:}" 2>/dev/null; then
    echo "made $d/port"
    printf '%s' "$FORGED" > "$d/port" 2>/dev/null && echo "wrote $d/port"
    rm -f "$d/port"
  fi
done
ls /dev
exit 7
""".replace("$FORGED", "'" + FORGED.replace("\\n", "\n") + "'").replace("$SCRATCH", GUEST_SCRATCH)

PLANT = f"""
echo warm-data > {GUEST_SCRATCH}/warm.txt
cp /bin/busybox {GUEST_SCRATCH}/suid && chmod 4755 {GUEST_SCRATCH}/suid && stat -c '%a' {GUEST_SCRATCH}/suid
mknod {GUEST_SCRATCH}/node c 1 3 2>&1 || echo "mknod refused"
ln -s /etc/shadow {GUEST_SCRATCH}/link && readlink {GUEST_SCRATCH}/link
"""


@pytest.mark.timeout(240)
def test_one_boot_enforces_read_only_env_network_status_and_credentials(world: World) -> None:
    tree, registry, disk, grant, backend = world
    before = tree_hashes(tree)
    reg_before = tree_hashes(registry)
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
    assert tree_hashes(tree) == before and tree_hashes(registry) == reg_before
    assert env.stdout == b"GIVEN=value with space\nand line\nPATH=/bin\n"
    assert b"ROTEIRO_HOST_ONLY_SECRET" not in env.stdout
    assert net.stdout == b"lo\n" and net.exit == 0
    assert three.exit == 3 and missing.exit == 127
    assert forge.exit == 7, forge
    assert b"vport" not in forge.stdout and b"console" not in forge.stdout
    assert b"wrote " not in forge.stdout, forge.stdout
    assert re.search(rb"status port \d+:\d+\n", forge.stdout), forge.stdout  # control
    assert [step.oom_kills for step in job.steps] == [0] * len(job.steps)  # none forged
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
    again = backend.run(sh(f"cat {GUEST_SCRATCH}/warm.txt; ls {GUEST_SCRATCH}", tree), grant)
    assert again.exit == 0 and again.stdout.startswith(b"warm-data\n"), again


@pytest.mark.timeout(240)
def test_forty_megabytes_come_back_byte_exact(world: World) -> None:
    tree, _, _, grant, backend = world
    size = 40_000_000
    line = b"0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ!\n"
    expected = (line * (size // len(line) + 1))[:size]
    outcome = backend.run(sh(f"yes '{line[:-1].decode()}' | head -c {size}", tree,
                             timeout=200), grant)
    assert outcome.exit == 0 and not outcome.truncated
    assert len(outcome.stdout) == size and outcome.stdout == expected


@pytest.mark.timeout(120)
def test_deadlines_kill_on_time_keep_partial_output_and_leave_nothing(world: World) -> None:
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
    assert qemu_processes(str(backend.options.scratch)) == []


#: Every way the probe words "this accelerator cannot run our guest" (probe.py).
UNUSABLE_REASONS = ("/dev/kvm", "without booting the canary", "(a silent hang)", "is not installed")


@pytest.mark.timeout(180)
def test_auto_runs_under_kvm_where_its_probe_boots_and_refuses_elsewhere(world: World) -> None:
    """`auto` on this host, whichever kind it is, decided by a fresh run of the real KVM probe.

    Where KVM boots the canary (a CI runner), a job under `auto` runs under KVM and its
    isolation says hardware. Where it does not (the development hosts: a PVM nested
    hypervisor makes qemu abort with `-cpu host` or hang with the default model; a host
    with no /dev/kvm), `auto` refuses before booting the job, offers TCG by name, and never
    runs the job under it. Either way each probe answers within its own deadline. The
    verdicts this host cannot give are driven through the same decision in
    tests/unit/vm/qemu/test_accel_choice.py.
    """
    tree, _, disk, grant, tcg_backend = world
    found = assets.load_assets()
    verdicts = []
    for cpu in (probe.CPU["kvm"], "qemu64"):  # what runs, and qemu's default model
        started = time.monotonic()
        verdict = probe.probe("kvm", found, cpu=cpu, use_cache=False)
        assert time.monotonic() - started < probe.KVM_DEADLINE + 2.5, verdict
        if not verdict.usable:
            assert any(words in verdict.reason for words in UNUSABLE_REASONS), verdict.reason
        verdicts.append(verdict)
    # What the backend will decide on: the probe stored this verdict (or, without /dev/kvm,
    # finds it again without a boot), and the refusal below quotes it.
    kvm = verdicts[0]
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):  # a host with no KVM at all: known without a boot
        assert not kvm.usable, kvm
    auto = QemuBackend(VmOptions(rootfs=tcg_backend.options.rootfs, scratch=disk, accel="auto"))
    if kvm.usable:
        outcome = auto.run(sh("echo ran", tree), grant)
        assert outcome.exit == 0 and outcome.stdout == b"ran\n", outcome
        assert isinstance(outcome, VmOutcome)
        assert outcome.isolation == isolation_for("kvm") and outcome.isolation.hardware_isolated
        return
    started = time.monotonic()
    with pytest.raises(errors.SandboxUnavailable) as refused:
        auto.run(sh("echo ran", tree), grant)
    # KVM's verdict is cached; what is left is at most TCG's probe, for the refusal to say
    # whether TCG would work.
    assert time.monotonic() - started < probe.TCG_DEADLINE + 2.5
    assert refused.value.accel == "auto" and f"kvm: {kvm.reason}" in refused.value.findings
    assert refused.value.tcg_possible, refused.value.findings  # TCG boots here (this module's other tests)
    assert "--accel tcg" in refused.value.guidance().render_text()
    assert qemu_processes(str(disk)) == []


@pytest.mark.timeout(120)
def test_a_step_past_the_output_cap_is_truncated_and_stops_the_vm(world: World) -> None:
    tree, _, _, grant, backend = world
    limit = 1 << 20
    capped = QemuBackend(replace(backend.options, output_limit=limit))
    steps = [sh("echo started >&2; yes flood", tree, timeout=100),  # never ends by itself
             sh("echo never", tree)]
    started = time.monotonic()
    job = capped.run_steps(steps, grant, deadline=60)
    elapsed = time.monotonic() - started
    assert len(job.steps) == 1, job.steps  # the VM stopped: the second step never started
    flood = job.steps[0]
    assert flood.truncated and flood.exit is None and not flood.timed_out
    assert flood.stderr == b"started\n"  # the other stream of the step is kept
    assert flood.truncated_streams == ("stdout",)  # the one that passed it is named
    # the cap is a total over every stream, the other stream's bytes included
    assert len(flood.stdout) + len(flood.stderr) == limit
    assert flood.stdout.startswith(b"flood\nflood\n")
    assert not job.completed and f"passed the limit of {limit} bytes" in (job.failure or "")
    assert elapsed < 40, elapsed  # stopped at the cap, not at the 60 s deadline
    assert qemu_processes(str(capped.options.scratch)) == []


@pytest.mark.timeout(120)
def test_a_kernel_override_boots_and_a_wrong_one_is_refused_before_booting(
        world: World, tmp_path: Path) -> None:
    tree, _, _, grant, backend = world
    mine = tmp_path / "my-vmlinux"
    mine.write_bytes(assets.load_assets().kernel.read_bytes())
    custom = QemuBackend(replace(backend.options, kernel=mine))
    outcome = custom.run(sh("echo booted; uname -r", tree), grant)
    assert outcome.exit == 0 and outcome.stdout.startswith(b"booted\n"), outcome
    assert custom.assets().kernel == mine and custom.assets().source == "config"
    wrong = QemuBackend(replace(backend.options, kernel=Path("/bin/busybox").resolve()))
    started = time.monotonic()
    with pytest.raises(errors.VmAssetsMissing) as refused:
        wrong.run(sh("echo booted", tree), grant)
    assert time.monotonic() - started < 2.0  # refused before any qemu started
    assert "neither an x86 bzImage nor" in refused.value.what


@pytest.mark.timeout(120)
def test_the_worktree_arrives_as_a_read_only_image_and_the_registry_over_9p(world: World) -> None:
    tree, _, _, grant, backend = world
    (tree / "escape").symlink_to("/etc/passwd")  # resolves in the guest, never on the host
    (tree / "src" / "private.rs").write_text("// 0600 on the host\n")
    os.chmod(tree / "src" / "private.rs", 0o600)
    (tree / ".git").mkdir()
    (tree / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (tree / "target").mkdir()
    (tree / "target" / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    os.mkfifo(tree / "fifo")
    outcome = backend.run(sh(f"cat escape; ls -a; cat src/private.rs; id -u; "
                             # the guest mounts a tree under GUEST_TREES; its output names
                             # it by its host path again (vm/mounts.py host_bytes)
                             f"grep -e ' {GUEST_TREES}{tree} ' -e ' {GUEST_CARGO_HOME}/registry ' "
                             "/proc/mounts", tree), grant)
    assert outcome.exit == 0, outcome
    out = outcome.stdout.decode()
    assert "user:x:1000:1000::/tmp:/bin/sh" in out  # the guest's /etc/passwd ...
    assert Path("/etc/passwd").read_text().splitlines()[0] not in out  # ... not the host's
    listing = out.split("\n")
    assert "src" in listing and "Cargo.toml" in listing
    assert not {".git", "target", "fifo"} & set(listing), listing
    assert "// 0600 on the host\n1000\n" in out  # readable by the guest's user
    mounts = [line.split() for line in out.splitlines() if line.startswith("/dev/") or
              " 9p " in line]
    kinds = {fields[1]: (fields[2], fields[3].split(",")) for fields in mounts}
    assert kinds[str(tree)][0] == "ext4" and "ro" in kinds[str(tree)][1], kinds
    registry = kinds[f"{GUEST_CARGO_HOME}/registry"]
    assert registry[0] == "9p" and "ro" in registry[1], kinds
    assert "loose" in registry[1], kinds  # job.NINEP_CACHE, shown by the kernel as "loose"


@pytest.mark.timeout(240)
def test_an_image_whose_tmp_is_a_link_cannot_redirect_init_mounts(world: World, tmp_path: Path) -> None:
    """A hostile image's `tmp -> /` would make init (root) mount a tmpfs over its own root
    and the worktree share outside the chroot; init refuses before any step runs."""
    import tarfile

    from roteiro_py.vm.disks import rootfs
    from tests.integration.vm.oci_fixture import _add, _blob, busybox_image

    tree, _, disk, grant, _ = world
    layers, digest = busybox_image(tmp_path / "oci")
    evil = _blob(tmp_path / "oci", lambda tar: _add(tar, "tmp", kind=tarfile.SYMTYPE, link="/"),
                 "application/vnd.oci.image.layer.v1.tar")
    image = rootfs.rootfs_image([*layers, evil], "sha256:" + hashlib.sha256(
        (digest + evil.digest).encode()).hexdigest()).path
    backend = QemuBackend(VmOptions(rootfs=image, scratch=disk, accel="tcg"))
    job = backend.run_steps([sh("echo RAN", tree)], grant)
    assert not job.steps and not job.completed
    assert "path /tmp passes through a symbolic link" in (job.failure or ""), job.failure


@pytest.mark.timeout(240)
def test_the_guest_starts_at_the_given_clock_and_sees_the_copys_stamps(world: World) -> None:
    """vm/stamps.py: the copy's stamps survive mkfs.ext4 into the guest, the guest's clock
    starts past them (CLOCK), and init reports its clock at the end. A generation ten
    days ahead of the host shows the clock was set, not left at the host's RTC."""
    from roteiro_py.vm.stamps import StampBook

    tree, _, _, grant, backend = world
    book = StampBook(generation=int(time.time()) + 10 * 86400)
    started = time.monotonic()
    job = backend.run_steps([sh("date +%s; stat -c '%Y %n' . src src/main.rs Cargo.toml", tree)],
                            grant, stamps=book)
    elapsed = time.monotonic() - started
    assert job.completed, job.failure
    lines = job.steps[0].stdout.decode().split("\n")
    now = int(lines[0])
    assert book.clock <= now <= book.clock + elapsed
    assert lines[1:5] == [f"{book.generation} {name}" for name in (".", "src", "src/main.rs", "Cargo.toml")]
    assert job.guest_clock is not None and now <= job.guest_clock <= book.clock + elapsed
    assert book.seen()[str(tree)]["src/main.rs"] == (
        hashlib.sha256(b"fn main() {}\n").hexdigest(), book.generation)


@pytest.mark.timeout(240)
def test_only_the_kernels_oom_kill_is_counted_as_one(world: World) -> None:
    """Status 137 is any SIGKILL. The guest's init counts the kernel's OOM kills during
    each step (/proc/vmstat), the evidence errors.KilledBySignal needs before it says
    "out of memory". Control: a step that SIGKILLs itself has 137 and no OOM kill."""
    tree, _, _, grant, backend = world
    steps = [sh("kill -9 $$", tree),
             sh('x=$(head -c 1000000000 /dev/zero | tr "\\0" a); echo "${#x}"', tree, timeout=150)]
    job = backend.run_steps(steps, grant, stop_on_failure=False, deadline=200)
    killed, starved = job.steps
    assert (killed.exit, killed.oom_kills) == (137, 0)
    assert starved.exit == 137 and starved.oom_kills >= 1, (starved, job.console[-2000:])
