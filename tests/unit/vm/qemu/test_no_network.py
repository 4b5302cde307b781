"""The guest never has a network: no qemu command line the backend builds carries one.

machine.py promises "no network: `-nodefaults` and no `-netdev`/NIC, so the guest has only
`lo`", and mounts.py refuses every `net:` grant on the strength of it. The integration
test that checks `lo` is alone in the guest boots one machine shape on hosts that can boot;
this guard holds on any host and for every shape the backend builds: shares as images and
over 9p, the scratch read-write or read-only, the dependency cache, and the template's
boot and its clones. Each command line is the one the backend really spawns: `qemu` is a
stand-in script that writes down its arguments and exits (the property is about the
command line, not about qemu, and no VM may boot in a unit test), run through the real
`machine.boot` with its real process layer.
"""

from __future__ import annotations

import itertools
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from roteiro_py.process import Command, GrantSet
from roteiro_py.vm.assets.assets import Assets
from roteiro_py.vm.mounts import GUEST_SCRATCH, cargo_views_root
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import backend as qemu_backend
from roteiro_py.vm.qemu import job, machine, probe, template

#: The only devices machine.qemu_argv attaches: the serial ports' bus and ports, drives,
#: 9p shares. Anything else is a finding, so a NIC under a name not listed here is too.
DEVICES = frozenset({"virtio-serial-device", "virtserialport", "virtio-blk-device",
                     "virtio-9p-device"})
#: Options that give the guest a network interface, or the outside a way in to the
#: machine over the network (a VNC or SPICE display, a gdb stub, a TCP monitor), or that
#: read devices from elsewhere where this guard cannot see them.
NETWORK_OPTIONS = frozenset({"-netdev", "-nic", "-net", "-vnc", "-spice", "-gdb", "-s",
                             "-qmp", "-monitor", "-redir", "-readconfig", "-set"})
#: Without these qemu adds its default devices (a NIC among them) and reads the host's
#: own configuration files, which may add more: they are how the code says "none".
REQUIRED = ("-nodefaults", "-no-user-config")
#: `-object` types the backend uses (template.py's guest RAM in a file).
OBJECTS = frozenset({"memory-backend-file"})


def fields(value: str) -> tuple[str, dict[str, str]]:
    """A qemu option value: its leading bare word and its key=value pairs (`,,` is a comma)."""
    words = value.replace(",,", "\0").split(",")
    pairs: dict[str, str] = {}
    head = ""
    for index, word in enumerate(words):
        key, equals, val = word.partition("=")
        if not equals and index == 0:
            head = key.replace("\0", ",")
        else:
            pairs[key] = val.replace("\0", ",")
    return head, pairs


def network_findings(argv: Sequence[str]) -> list[str]:
    """What in qemu's `argv` could give the guest a network, or reach it over one; empty
    when nothing does. qemu reads `--option` as `-option`, and so does this."""
    words = ["-" + word.lstrip("-") if word.startswith("-") else word for word in argv[1:]]
    found = [f"{option} is missing" for option in REQUIRED if option not in words]
    for index, word in enumerate(words):
        value = words[index + 1] if index + 1 < len(words) else ""
        head, pairs = fields(value)
        if word in NETWORK_OPTIONS:
            found.append(f"{word} {value}")
        elif word == "-device" and (pairs.get("driver", head) not in DEVICES or "netdev" in pairs):
            found.append(f"-device {value}")
        elif word == "-chardev" and (head != "socket" or "path" not in pairs
                                     or {"host", "port"} & pairs.keys()):
            found.append(f"-chardev {value} (not a unix socket)")
        elif word == "-object" and pairs.get("qom-type", head) not in OBJECTS:
            found.append(f"-object {value}")
        elif word == "-incoming" and value != "defer":
            found.append(f"-incoming {value}")
        elif word == "-serial" and not value.startswith("chardev:"):
            found.append(f"-serial {value}")
    return found


# -- the command lines the backend spawns -----------------------------------------------

SHARES = {"no share": (), "image": ("tree",), "9p": ("registry",), "image and 9p": ("tree", "registry")}
DISKS = {"no scratch": (), "scratch rw": ("rw",), "scratch ro": ("ro",),
         "scratch rw and dependency cache": ("rw", "deps")}
SHAPES = [(shares, disks, "tcg") for shares, disks in itertools.product(SHARES, DISKS)] + [
    ("image and 9p", "scratch rw and dependency cache", "kvm")]


class World:
    """Files and a stand-in qemu in `tmp_path` for building one backend's machines."""

    def __init__(self, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, accel: str) -> None:
        self.tmp = tmp_path
        self.accel = accel
        # a vendored view's registry/ (cargo/vendor.py): what a lint shares over 9p
        self.tree, self.view = tmp_path / "tree", cargo_views_root() / ("0" * 32)
        (self.tree / "src").mkdir(parents=True)
        (self.tree / "src" / "main.rs").write_text("fn main() {}\n")
        (self.view / "registry" / "0").mkdir(parents=True)
        for name in ("rootfs.ext4", "scratch.ext4", "deps.ext4", "vmlinuz", "initrd"):
            (tmp_path / name).write_bytes(b"")  # qemu never opens them: it is not run
        self.log = tmp_path / "argv"
        self.log.mkdir()
        self.qemu = tmp_path / "bin" / "qemu-system-x86_64"
        self.qemu.parent.mkdir()
        self.qemu.write_text(
            "#!/bin/sh\n"
            'if [ "$1" = --version ]; then echo "QEMU emulator version 7.2.19"; exit 0; fi\n'
            f"""for word in "$@"; do printf '%s\\0' "$word"; done > {shlex.quote(str(self.log))}/argv.$$\n"""
            "exit 1\n")
        self.qemu.chmod(0o755)
        assets = Assets(tmp_path / "vmlinuz", tmp_path / "initrd", "k" * 64, "i" * 64,
                        "6.1.0-test", "provisioned")
        monkeypatch.setattr(qemu_backend, "load_assets", lambda kernel, initrd: assets)
        # The probe's verdict is given: it would boot a guest. A usable one, as on a host
        # where `accel` runs (test_accel_choice.py covers the others).
        monkeypatch.setattr(probe, "probe", lambda accel, found, **_: probe.Verdict(
            accel, True, "canary guest booted in 0.4 s", 0.4, "7.2.19", probe.CPU[accel]))

    def run(self, shares: str, disks: str, *, templated: bool) -> None:
        scratch = "rw" in DISKS[disks] or "ro" in DISKS[disks]
        deps = "deps" in DISKS[disks]
        backend = qemu_backend.QemuBackend(VmOptions(
            rootfs=self.tmp / "rootfs.ext4", scratch=self.tmp / "scratch.ext4" if scratch else None,
            accel=self.accel, template=templated, template_root=self.tmp / "templates",
            dep_cache=self.tmp / "deps.ext4" if deps else None,
            dep_cache_guest=f"{GUEST_SCRATCH}/deps" if deps else None), qemu=str(self.qemu))
        atoms = ["proc:exec:cargo"]
        if "tree" in SHARES[shares]:
            atoms += [f"fs:read:{self.tree}/**", f"fs:list:{self.tree}/**"]
        if "registry" in SHARES[shares]:
            atoms.append(f"fs:read:{self.view}/registry/**")
        if "rw" in DISKS[disks]:
            atoms.append(f"fs:write:{GUEST_SCRATCH}/**")
        if "ro" in DISKS[disks]:
            atoms.append(f"fs:read:{GUEST_SCRATCH}/**")
        cwd = self.tree if "tree" in SHARES[shares] else Path("/tmp")
        steps = [Command("cargo", ("--version",), cwd, {}), Command("cargo", ("clippy",), cwd, {})]
        backend.run_steps(steps, GrantSet.of(*atoms), template_steps=1 if templated else 0)

    def argvs(self) -> list[list[str]]:
        """Each command line qemu was started with, its own name first."""
        return [[str(self.qemu), *(word.decode() for word in path.read_bytes().split(b"\0")[:-1])]
                for path in sorted(self.log.iterdir())]


def plant_templates(monkeypatch: pytest.MonkeyPatch) -> None:
    """template._build builds the template for real, with the stand-in qemu, which never
    says "template-ready": the build's command line is written down and the build refused
    as unusable. A whole template then stands in for the one a booted guest would have
    saved (no guest boots here), so that the backend goes on to start a clone of it."""
    real = template._build

    def build(spec: Any, steps: Any, key: str, archive: bytes, directory: Path,
              until: float) -> template.Template:
        with pytest.raises(template.TemplateUnusable):
            real(spec, steps, key, archive, directory, until)
        return plant(directory, archive, spec.memory_mib)

    monkeypatch.setattr(template, "_build", build)


def plant(directory: Path, archive: bytes, memory_mib: int) -> template.Template:
    """A template `template.load` finds whole at `directory` (its name the key)."""
    import hashlib
    import json

    directory.mkdir(parents=True)  # the backend discards it when the clone fails
    state = b"saved state"
    (directory / template.STATE).write_bytes(state)
    with (directory / template.MEMORY).open("wb") as memory:
        memory.truncate(memory_mib << 20)
    (directory / template.ARCHIVE).write_bytes(archive)
    (directory / template.META).write_text(json.dumps({
        "format": template.FORMAT, "key": directory.name, "steps": [],
        "archive_bytes": len(archive), "state_sha256": hashlib.sha256(state).hexdigest()}))
    found = template.load(directory, directory.name, memory_mib)
    assert found is not None
    return found


def kind(argv: list[str]) -> str:
    if "-incoming" in argv:
        return "clone"
    return "template" if "-mon" in argv else "cold"


def devices(argv: list[str], driver: str) -> list[dict[str, str]]:
    return [fields(argv[i + 1])[1] for i, word in enumerate(argv)
            if word == "-device" and fields(argv[i + 1])[0] == driver]


@pytest.mark.parametrize(("shares", "disks", "accel"), SHAPES)
def test_no_machine_the_backend_builds_has_a_network(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, shares: str, disks: str, accel: str) -> None:
    world = World(tmp_path, monkeypatch, accel)
    world.run(shares, disks, templated=False)
    plant_templates(monkeypatch)
    world.run(shares, disks, templated=True)
    argvs = world.argvs()
    # Control: every way of starting qemu was taken (the cold boot; the template's build and
    # its clone, each twice: a clone that fails is rebuilt once), with the devices asked for.
    assert sorted(kind(argv) for argv in argvs) == ["clone", "clone", "cold", "template", "template"]
    wanted = {job.ROOT_SERIAL} | ({job.SCRATCH_SERIAL} if DISKS[disks] else set()) \
        | ({job.DEPS_SERIAL} if "deps" in DISKS[disks] else set())
    for argv in argvs:
        assert (f"tcg,tb-size={machine.TCG_TB_SIZE_MIB}" if accel == "tcg" else accel) in argv
        serials = {d["serial"] for d in devices(argv, "virtio-blk-device")}
        assert wanted <= serials and len(serials - wanted) == ("tree" in SHARES[shares]), serials
        assert len(devices(argv, "virtio-9p-device")) == ("registry" in SHARES[shares])
        assert len(devices(argv, "virtserialport")) >= 5  # status and two streams per step
        # The property.
        assert network_findings(argv) == [], (kind(argv), argv)


DOCTORED = {
    "a user-mode netdev and its NIC": ["-netdev", "user,id=n0", "-device", "virtio-net-device,netdev=n0"],
    "a NIC in one option": ["-nic", "user,model=virtio-net-pci"],
    "the legacy -net": ["-net", "nic"],
    "a double-dash netdev": ["--netdev", "user,id=n0"],
    "an e1000 device": ["-device", "e1000"],
    "a NIC given by driver=": ["-device", "driver=virtio-net-device"],
    "a serial port wired to TCP": ["-chardev", "socket,id=t,host=127.0.0.1,port=4444,server=on"],
    "an incoming migration over TCP": ["-incoming", "tcp:0:4444"],
    "a VNC display": ["-vnc", ":0"],
    "a gdb stub": ["-s"],
    "a network filter object": ["-object", "filter-dump,id=f,netdev=n0,file=/tmp/x"],
}


@pytest.mark.parametrize("added", sorted(DOCTORED))
def test_the_guard_sees_a_network_added_to_a_real_command_line(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, added: str) -> None:
    """The control arm: the predicate the guard uses is not blind to a network."""
    world = World(tmp_path, monkeypatch, "tcg")
    world.run("image and 9p", "scratch rw and dependency cache", templated=False)
    (argv,) = world.argvs()
    assert network_findings(argv) == []
    doctored = [*argv, *DOCTORED[added]]
    assert network_findings(doctored), doctored
    for option in ("-nodefaults", "-no-user-config"):  # and one taken away
        assert network_findings([word for word in argv if word != option]) == [f"{option} is missing"]



def test_a_template_another_run_holds_is_not_discarded_when_this_runs_clone_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A clone that fails discards its template and builds it again (the control: with
    nobody else on it, the template is built and cloned twice), but not from under
    another run restoring from it (its lock held shared): this run then boots cold."""
    import subprocess
    import sys

    world = World(tmp_path, monkeypatch, "tcg")
    plant_templates(monkeypatch)
    world.run("no share", "no scratch", templated=True)
    first = world.argvs()
    assert sorted(kind(argv) for argv in first) == ["clone", "clone", "template", "template"]
    backing = next(fields(argv[i + 1])[1] for argv in first if kind(argv) == "clone"
                   for i, word in enumerate(argv) if word == "-object")
    directory = Path(backing["mem-path"]).parent
    assert not directory.exists()  # discarded after each failed clone
    plant(directory, b"", int(backing["size"].rstrip("M")))
    holder = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom pathlib import Path\nfrom roteiro_py.locks import shared_within\n"
         "with shared_within(Path(sys.argv[1]), until=None, seconds=0, waiting_for='x'):\n"
         "    print('held', flush=True); sys.stdin.readline()\n",
         str(template.lock_path(directory.parent, directory.name))],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        for path in world.log.iterdir():
            path.unlink()
        world.run("no share", "no scratch", templated=True)
        assert sorted(kind(argv) for argv in world.argvs()) == ["clone", "cold"]
        assert directory.is_dir(), "a template another run holds was discarded"
    finally:
        assert holder.stdin is not None and holder.stdout is not None
        holder.stdin.close()
        holder.wait(timeout=30)
        holder.stdout.close()
