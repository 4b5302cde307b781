"""A lint runs on Linux x86_64 only, and says so everywhere else (issue 14).

The decision (platform_support.py) is driven on a table of what Python reports on each
system. The command line is then run in a real interpreter where `platform_support.host()`
says another platform (only the tool's view is changed: the interpreter's own
`sys.platform` steers the standard library, which would then look for macOS modules):
`lint`,
`doctor` and `prefetch --vm-assets` refuse with exit 3 naming it, before the store, the VM
layer or the VM assets are even imported, while `config show` keeps working. Each has its
control arm: the same command on the real host (Linux x86_64) goes on past the check.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from roteiro_py import errors, platform_support, shipped
from roteiro_py.platform_support import PLATFORMS_DOC, SUPPORTED, Host

ROOT = Path(__file__).resolve().parents[2]

#: (sys.platform, platform.machine()) as each system reports it, and the name a message uses.
TABLE = [
    (("linux", "x86_64"), None),
    (("linux", "aarch64"), "Linux aarch64"),
    (("linux", "armv7l"), "Linux armv7l"),
    (("linux", "i686"), "Linux i686"),
    (("darwin", "arm64"), "macOS arm64"),
    (("darwin", "x86_64"), "macOS x86_64"),
    (("win32", "AMD64"), "Windows AMD64"),
    (("cygwin", "x86_64"), "Windows (Cygwin) x86_64"),
    (("freebsd14", "amd64"), "FreeBSD amd64"),
    (("linux", ""), "Linux of unknown architecture"),
]


@pytest.mark.parametrize(("reported", "refused_as"), TABLE, ids=lambda v: str(v))
def test_only_linux_x86_64_is_supported_and_a_refusal_names_the_platform(
        reported: tuple[str, str], refused_as: str | None) -> None:
    current = Host(*reported)
    refused = platform_support.refusal(current)
    if refused_as is None:  # control arm: the one platform that runs
        assert current.supported and refused is None
        platform_support.require_supported(current)
        return
    assert refused is not None and not current.supported
    assert refused.exit_code == errors.EXIT_REFUSED and refused.code == "platform-unsupported"
    text = refused.guidance().render_text()
    assert f"This host ({refused_as}) cannot run a lint: lints run only on {SUPPORTED}." in text
    assert PLATFORMS_DOC in text and "pylint-sandbox render REPORT.json" in text
    with pytest.raises(errors.PlatformUnsupported):
        platform_support.require_supported(current)


def test_this_host_is_read_when_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "platform", "darwin")
    monkeypatch.setattr(platform, "machine", lambda: "arm64")
    assert platform_support.host() == Host("darwin", "arm64")
    assert platform_support.refusal() is not None


def test_what_the_message_and_the_docs_say_runs_is_what_the_code_accepts() -> None:
    """SUPPORTED and PIDFD_KERNEL are stated once; the docs and the README say the same."""
    kernel = ".".join(str(part) for part in platform_support.PIDFD_KERNEL)
    doc = (ROOT / "docs" / "PLATFORMS.md").read_text()
    assert SUPPORTED in doc and f">= {kernel}" in doc
    # the message points at what an installed wheel prints: that document
    assert PLATFORMS_DOC == "`pylint-sandbox docs platforms`"
    assert shipped.DOCS["platforms"].source == "docs/PLATFORMS.md"
    readme = (ROOT / "README.md").read_text()
    assert SUPPORTED in readme and "docs/PLATFORMS.md" in readme
    assert "HVF (macOS)" not in readme
    assert Host("linux", "x86_64").name == SUPPORTED


#: Runs the command line in this interpreter with the platform the tool sees replaced by
#: argv[1] and argv[2] (nothing else), then says which heavy parts were imported.
PROBE = (
    "import sys\n"
    "from roteiro_py import platform_support\n"
    "system, machine = sys.argv[1], sys.argv[2]\n"
    "if system != '-':\n"
    "    platform_support.host = lambda: platform_support.Host(system, machine)\n"
    "from roteiro_py.cli.app import main\n"
    "code = main(sys.argv[3:])\n"
    "print('EXIT', code)\n"
    "print('LOADED', sorted(m for m in ('roteiro_py.store', 'roteiro_py.vm', "
    "'roteiro_py.vm.assets.assets') if m in sys.modules))\n"
)


def cli(tmp_path: Path, reported: tuple[str, str] | None, *args: str) -> subprocess.CompletedProcess[str]:
    system, machine = reported or ("-", "-")
    return subprocess.run([sys.executable, "-c", PROBE, system, machine, *args], cwd=tmp_path,
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)


def a_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "t"\nversion = "0.1.0"\n')
    (tree / "Cargo.lock").write_text("version = 4\n")
    (tree / "src" / "lib.rs").write_text("")
    return tree


PINNED = "ghcr.io/acme/clippy@sha256:" + "a" * 64


@pytest.mark.parametrize(("reported", "name"), [(("darwin", "arm64"), "macOS arm64"),
                                                (("linux", "aarch64"), "Linux aarch64"),
                                                (("win32", "AMD64"), "Windows AMD64")])
def test_lint_refuses_another_platform_with_exit_3_before_any_image_or_vm(
        tmp_path: Path, reported: tuple[str, str], name: str) -> None:
    tree = a_tree(tmp_path)
    refused = cli(tmp_path, reported, "lint", "clippy", str(tree), "--image", PINNED)
    assert "EXIT 3" in refused.stdout and "LOADED []" in refused.stdout, refused.stdout
    assert f"This host ({name}) cannot run a lint" in refused.stderr
    assert "Traceback" not in refused.stderr
    # control: on this host (Linux x86_64) the same command goes on to the image store and
    # the VM layer, and is refused there for another reason
    assert platform_support.host().supported
    went_on = cli(tmp_path, None, "lint", "clippy", str(tree), "--image", PINNED)
    assert "EXIT 3" in went_on.stdout and "cannot run a lint" not in went_on.stderr
    assert "roteiro_py.vm" in went_on.stdout, went_on.stdout


def test_prefetch_of_vm_assets_refuses_another_platform_before_anything(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # an archive that is not there: the control arm below must not reach Debian's
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_ARCHIVE", str(tmp_path / "no-archive"))
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_SECURITY_ARCHIVE", "")
    refused = cli(tmp_path, ("darwin", "arm64"), "prefetch", "--vm-assets")
    assert "EXIT 3" in refused.stdout and "'roteiro_py.vm.assets.assets'" not in refused.stdout
    assert "This host (macOS arm64) cannot run a lint" in refused.stderr
    # control: here it goes on to the assets, and fails only at the archive that is not there
    went_on = cli(tmp_path, None, "prefetch", "--vm-assets")
    assert "no-archive" in went_on.stderr, went_on.stderr
    assert "'roteiro_py.vm.assets.assets'" in went_on.stdout, went_on.stdout
    assert "cannot run a lint" not in went_on.stderr


def test_doctor_fails_the_platform_check_and_probes_nothing_else(tmp_path: Path) -> None:
    refused = cli(tmp_path, ("darwin", "arm64"), "doctor", "--format", "json")
    assert "EXIT 3" in refused.stdout
    report = json.loads(refused.stdout.split("EXIT")[0])
    assert not report["can_lint"]
    names = [check["name"] for check in report["checks"]]
    assert names == ["platform", "configuration"]  # no qemu, no accelerator, no hvf
    first = report["checks"][0]
    assert first["ok"] is False and first["required"] and "macOS arm64" in first["detail"]
    # control: on this host the platform passes and the rest is checked; hvf is no candidate
    here = cli(tmp_path, None, "doctor", "--format", "json")
    checks = json.loads(here.stdout.split("EXIT")[0])["checks"]
    assert checks[0] == {"name": "platform", "ok": True, "required": True, "detail": SUPPORTED,
                         "fix": None}
    names = [check["name"] for check in checks]
    assert "qemu" in names and "setpriv" in names and "accel kvm" in names
    assert not any("hvf" in check for check in names)


def test_config_show_still_works_on_another_platform(tmp_path: Path) -> None:
    shown = cli(tmp_path, ("darwin", "arm64"), "config", "show")
    assert "EXIT 0" in shown.stdout and "vm.accel" in shown.stdout, shown.stdout + shown.stderr


def test_the_platform_is_refused_before_the_lints_own_file_checks(tmp_path: Path) -> None:
    """Cheapest and most fundamental first: a missing --baseline is a usage error (2) on
    this host, but on one where no lint can run the platform is what is said (3)."""
    tree = a_tree(tmp_path)
    args = ("lint", "clippy", str(tree), "--image", PINNED, "--baseline", str(tmp_path / "none.json"))
    refused = cli(tmp_path, ("darwin", "arm64"), *args)
    assert "EXIT 3" in refused.stdout and "This host (macOS arm64)" in refused.stderr
    here = cli(tmp_path, None, *args)  # control
    assert "EXIT 2" in here.stdout and "cannot run a lint" not in here.stderr


def test_the_core_lint_refuses_too_when_called_directly(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lint() is also called without the command line (the benches, the dep-cache tests)."""
    from roteiro_py import lint

    request = lint.LintRequest(path=a_tree(tmp_path), flags={"lint.image": (PINNED, "--image")})
    monkeypatch.setattr(platform_support, "host", lambda: Host("linux", "aarch64"))
    with pytest.raises(errors.PlatformUnsupported, match="Linux aarch64"):
        lint.lint(request)
    monkeypatch.undo()  # control: on this host it goes on, and is refused for something else
    with pytest.raises(errors.RoteiroError) as later:
        lint.lint(request)
    assert not isinstance(later.value, errors.PlatformUnsupported)
