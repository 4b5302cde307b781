"""`doctor` as a CI gate (issue 13): exit 0 only when this host can lint, JSON in a stable
schema; and the first run's refusal naming the images the store already holds.

The hypervisor cannot be made usable on demand here (KVM runs no guest on these machines,
and a TCG canary needs provisioned VM assets), so the test that needs every check to pass
replaces the VM assets' loader and the backend's probe, and says so; the store, the
configuration and the decision (`doctor.can_lint`, the exit status) are the real ones.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from roteiro_py import paths
from roteiro_py.commands import doctor
from roteiro_py.errors import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, MAX_STORED_SHOWN, NoImageConfigured, UsageError
from roteiro_py.lint.preflight import images_in_store
from roteiro_py.store import Store
from roteiro_py.vm.api import Isolation
from tests.unit.store import store_images

EXE = Path(sys.executable).with_name("pylint-sandbox")


def provisioned(name: str = "localhost/test/img", files: dict[str, bytes] | None = None) -> str:
    """A real (tiny) image provisioned into this test's store; its pinned reference."""
    store = Store(paths.store_root())
    store.ensure_layout()
    return str(store_images.provision(store, store_images.make_image(files or {"etc/x": name.encode()}), name))


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], cwd=cwd, env=dict(os.environ), capture_output=True,
                          text=True, timeout=120)


# -- doctor -------------------------------------------------------------------------------


def test_doctor_exits_3_in_json_when_this_host_cannot_lint(tmp_path: Path) -> None:
    """An empty ROTEIRO_HOME: no VM assets, no image. The JSON says which checks stop a lint."""
    result = run("doctor", "--format", "json", "--path", str(tmp_path), cwd=tmp_path)
    assert result.returncode == EXIT_REFUSED, result.stderr
    data = json.loads(result.stdout)
    assert data["schema_version"] == doctor.SCHEMA_VERSION and data["can_lint"] is False
    assert data["path"] == str(tmp_path.resolve())
    for check in data["checks"]:
        assert set(check) == {"name", "ok", "required", "detail", "fix"}
        assert check["ok"] in (True, False, None) and isinstance(check["required"], bool)
    failed = {c["name"] for c in data["checks"] if c["required"] and c["ok"] is False}
    assert {"vm assets", "sandbox", "image"} <= failed
    image = next(c for c in data["checks"] if c["name"] == "image")
    assert image["fix"] == "pylint-sandbox prefetch --analyzer clippy --allow-download"
    human = run("doctor", "--path", str(tmp_path), cwd=tmp_path)
    assert human.returncode == EXIT_REFUSED
    assert human.stdout.splitlines()[-1].startswith(f"this host cannot lint {tmp_path.resolve()}: ")
    assert "MISS  image: `[lint] image` is not set" in human.stdout


def _a_host_that_can_lint(monkeypatch: pytest.MonkeyPatch) -> str:
    """The VM assets' loader and the backend's probe replaced (see the module doc), an
    image provisioned and configured: the pinned reference."""
    from roteiro_py.vm.assets import assets
    from roteiro_py.vm.qemu import probe

    class Usable:  # the backend's probe, as on a host where KVM runs guests
        def __init__(self, options: object) -> None:
            pass

        def isolation(self) -> Isolation:
            return Isolation("qemu", "kvm", True, "QEMU microvm under KVM hardware virtualization")

    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Usable})
    monkeypatch.setattr(assets, "load_assets", lambda kernel=None, initrd=None: object())
    monkeypatch.setattr(probe, "qemu_info", lambda qemu="": ("/usr/bin/qemu-system-x86_64", "9.0"))
    monkeypatch.setattr(probe, "probe", lambda accel, found, **kw: probe.Verdict(
        accel, accel == "kvm", "canary guest booted in 0.1 s" if accel == "kvm" else "slow", 0.1, "9.0", "host"))
    monkeypatch.setattr("shutil.which", lambda tool: f"/usr/sbin/{tool}")
    reference = provisioned()
    (paths.user_config_path()).write_text(f'[lint]\nimage = "{reference}"\n')
    return reference


def test_doctor_exits_0_only_when_every_required_check_passes(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    reference = _a_host_that_can_lint(monkeypatch)
    assert doctor.run_doctor(path=tmp_path, format="json") == EXIT_OK
    data = json.loads(capsys.readouterr().out)
    assert data["can_lint"] is True
    checks = {c["name"]: c for c in data["checks"]}
    assert checks["image provisioned"]["ok"] is True and checks["sandbox"]["ok"] is True
    # informational failures (no package store here, TCG's probe) do not change the verdict
    assert checks["package store"]["ok"] is False and checks["package store"]["required"] is False
    assert checks["accel tcg"]["ok"] is False and checks["accel tcg"]["required"] is False

    # control: the same host with the image not configured cannot lint, and the fix is
    # the exact command for the image the store holds
    paths.user_config_path().unlink()
    assert doctor.run_doctor(path=tmp_path, format="json") == EXIT_REFUSED
    image = next(c for c in json.loads(capsys.readouterr().out)["checks"] if c["name"] == "image")
    assert image["ok"] is False and image["fix"] == f"pylint-sandbox config set lint.image '{reference}'"
    # and with it configured but gone from the store
    paths.user_config_path().write_text(f'[lint]\nimage = "localhost/other/img@sha256:{"e" * 64}"\n')
    assert doctor.run_doctor(path=tmp_path) == EXIT_REFUSED
    out = capsys.readouterr().out
    assert "MISS  image provisioned: The image localhost/other/img@sha256:" in out
    assert out.splitlines()[-1].endswith(": image provisioned")


def test_a_path_that_does_not_exist_is_a_usage_error_as_for_lint(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23: `doctor --path /nonexistent` said "this host can lint" it and exited 0.
    It is the usage error (2) `lint clippy` gives for the same path, in the same words."""
    reference = _a_host_that_can_lint(monkeypatch)
    gone = tmp_path / "gone"
    with pytest.raises(UsageError) as refused:
        doctor.run_doctor(path=gone, format="json")
    assert refused.value.exit_code == EXIT_USAGE
    assert refused.value.guidance().render_text() == (
        f"error: The path {gone} does not exist.\n  note: Pass the repository to lint.\n")
    assert capsys.readouterr().out == ""  # no checks, no verdict
    # control: the same host can lint a path that exists
    assert doctor.run_doctor(path=tmp_path, format="json") == EXIT_OK
    # through the command line, doctor's refusal is lint's, word for word
    human = run("doctor", "--path", str(gone), cwd=tmp_path)
    lint = run("lint", "clippy", str(gone), "--image", reference, cwd=tmp_path)
    assert (human.returncode, lint.returncode) == (EXIT_USAGE, EXIT_USAGE), (human.stderr, lint.stderr)
    assert human.stdout == "" and human.stderr == lint.stderr


def test_doctor_json_is_sanitised() -> None:
    hostile = doctor.Check("image \x1b[2J", False, "said \x1b]8;;http://x\x07::error::x\nnext ##[y]",
                           "fix \u202e", required=True)
    text = doctor.json_report([hostile], Path("."))
    assert "\x1b" not in text and "\u202e" not in text
    data = json.loads(text)
    assert data["can_lint"] is False and data["checks"][0]["detail"].startswith("said \\x1b]8")
    assert "\n" in data["checks"][0]["detail"]  # a multi-line detail stays one, escaped by JSON


# -- the first run: an image in the store, none configured ----------------------------------


def test_the_first_run_names_the_stored_image_with_the_exact_command(tmp_path: Path) -> None:
    reference = provisioned()
    refused = run("lint", "clippy", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == EXIT_REFUSED
    command = f"pylint-sandbox config set lint.image '{reference}'"
    assert command in refused.stderr.splitlines()[-1] and "<64 hex>" not in refused.stderr
    # the command is exact: run as printed, it configures that image
    done = subprocess.run([str(EXE), *shlex.split(command)[1:]], cwd=tmp_path, capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert run("config", "get", "lint.image", cwd=tmp_path).stdout.strip() == reference


def test_an_empty_store_keeps_the_placeholder_and_prefetch(tmp_path: Path) -> None:
    refused = run("lint", "clippy", str(tmp_path), cwd=tmp_path)
    assert refused.returncode == EXIT_REFUSED  # control for the test above
    assert "@sha256:<64 hex>" in refused.stderr and "config set lint.image" not in refused.stderr


def test_the_stores_images_are_listed_bounded_newest_first_and_only_pinned_names() -> None:
    references = [provisioned(f"localhost/test/img{i}", {"etc/x": bytes([i])}) for i in range(5)]
    store = Store(paths.store_root())
    assert sorted(images_in_store(store.root)) == sorted(r.name for r in store.references())
    index = json.loads((store.root / "index.json").read_text())
    good = index["manifests"][0]
    forged = [{**good, "annotations": {"org.opencontainers.image.ref.name": name}} for name in (
        "localhost/x:tag-only", "bad name\x1b[2J@sha256:" + "a" * 64, "evil'quote/x@sha256:" + "a" * 64,
        f"localhost/other@sha256:{'f' * 64}")]  # the last: its digest is not the descriptor's
    index["manifests"] += forged + ["not an entry", {"annotations": None}]
    (store.root / "index.json").write_text(json.dumps(index))
    assert images_in_store(store.root) == references[::-1]
    text = NoImageConfigured(Path("/u/config.toml"), Path("/r/roteiro.toml"),
                             images_in_store(store.root)).guidance().render_text()
    assert text.count("pylint-sandbox config set lint.image") == MAX_STORED_SHOWN
    assert f"`pylint-sandbox doctor` lists the other {5 - MAX_STORED_SHOWN}." in text
    assert f"pylint-sandbox config set lint.image '{references[-1]}'" in text.splitlines()[-1]
    assert references[0] not in text  # the oldest, past the bound
    assert "\x1b" not in text and "evil" not in text and "tag-only" not in text
    from roteiro_py.lint import preflight
    from roteiro_py.store.layout import REF_NAME

    assert preflight._REF_NAME == REF_NAME


def test_the_first_run_refusal_stays_off_the_store_package(tmp_path: Path) -> None:
    """It reads index.json itself: the store package is not imported on this fast path."""
    provisioned()
    probe = ("import sys\nfrom roteiro_py.cli.app import main\nprint('EXIT', main(sys.argv[1:]))\n"
             "print('STORE', 'roteiro_py.store' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", probe, "lint", "clippy", str(tmp_path)],
                            capture_output=True, text=True, timeout=60)
    assert "EXIT 3" in result.stdout and "STORE False" in result.stdout, result.stdout + result.stderr
    assert "config set lint.image" in result.stderr


def test_the_package_store_check_counts_what_the_lockfile_pins(tmp_path: Path) -> None:
    """doctor says how many of PATH's pinned packages the store holds, and the exact
    fetch-deps line when it lacks any (a lint of PATH would refuse, naming them)."""
    import hashlib

    from roteiro_py.cargo import store
    from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE

    data = b"not really a crate, but bytes with a checksum"
    checksum = hashlib.sha256(data).hexdigest()
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text('[package]\nname = "me"\nversion = "0.1.0"\n')
    (tree / "Cargo.lock").write_text(f'version = 4\n[[package]]\nname = "dep"\nversion = "1.0.0"\n'
                                     f'source = "{CRATES_IO_SOURCE}"\nchecksum = "{checksum}"\n')
    missing = doctor._packages(tree)
    # issue 23: "(1 manifests)"-style plurals; a count of one is singular
    assert missing.ok is False and "0 of the 1 package the lockfile pins" in missing.detail
    assert missing.fix == f"pylint-sandbox fetch-deps {tree}"
    store.keep_crate_bytes(data, checksum)
    present = doctor._packages(tree)  # control: once it is in the store
    assert present.ok is True and "1 of the 1 package the lockfile pins" in present.detail
    assert present.fix is None
    # control: two pins are plural
    (tree / "Cargo.lock").write_text((tree / "Cargo.lock").read_text() + (
        f'[[package]]\nname = "other"\nversion = "2.0.0"\n'
        f'source = "{CRATES_IO_SOURCE}"\nchecksum = "{"b" * 64}"\n'))
    assert "1 of the 2 packages the lockfile pins" in doctor._packages(tree).detail


def test_counts_of_one_are_singular(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 23: "1 image(s)", "1 layer(s)"; one image of one layer says so."""
    _a_host_that_can_lint(monkeypatch)
    checks = {check.name: check for check in doctor.checks(tmp_path)}
    assert checks["image provisioned"].detail.endswith(", 1 layer")
    assert checks["image store"].detail.splitlines()[0].endswith(": 1 image")
    # control: a second image is plural
    provisioned("localhost/test/second")
    assert doctor.checks(tmp_path)[-2].detail.splitlines()[0].endswith(": 2 images")


def test_accel_on_the_command_line_is_the_accelerator_checked(tmp_path: Path) -> None:
    """`doctor --accel X` answers for `lint clippy --accel X`: the flag outranks the user's
    configuration, as in a lint, and the sandbox check says where the value came from."""
    paths.user_config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.user_config_path().write_text('[vm]\naccel = "kvm"\n')

    def sandbox(*flags: str) -> str:
        done = run("doctor", "--format", "json", "--path", str(tmp_path), *flags, cwd=tmp_path)
        assert done.returncode == EXIT_REFUSED, done.stderr  # no image here either way
        return next(c["detail"] for c in json.loads(done.stdout)["checks"] if c["name"] == "sandbox")

    assert sandbox().startswith(f"vm.accel = kvm ({paths.user_config_path()})")  # control
    assert sandbox("--accel", "tcg").startswith("vm.accel = tcg (flag --accel)")
    assert sandbox("--accel", "auto").startswith("vm.accel = auto (flag --accel)")
    wrong = run("doctor", "--accel", "hvf", cwd=tmp_path)
    assert wrong.returncode == EXIT_USAGE and "hvf" in wrong.stderr
