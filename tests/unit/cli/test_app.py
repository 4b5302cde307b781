"""The real command line, as a user runs it: exit codes, messages, no tracebacks."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import typer

from roteiro_py.cli import app as cli

EXE = Path(sys.executable).with_name("pylint-sandbox")
HEX = "a" * 64


def run(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, **(env or {})}
    return subprocess.run([str(EXE), *args], cwd=cwd, env=full, capture_output=True, text=True,
                          timeout=60)


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr + result.stdout


def test_version_and_help(tmp_path: Path) -> None:
    result = run("--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.startswith("pylint-sandbox ")
    for args in (["--help"], ["lint", "clippy", "--help"], ["prefetch", "--help"],
                 ["config", "--help"], ["fetch-deps", "--help"], ["doctor", "--help"]):
        result = run(*args, cwd=tmp_path)
        assert result.returncode == 0, (args, result.stderr)
    help_text = run("lint", "clippy", "--help", cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    for option in ("--image", "--format", "--output", "--all-targets", "--features",
                   "--all-features", "--no-default-features", "--accel", "--cpus", "--memory",
                   "--timeout", "--fail-on", "--keep-cache", "--quiet"):
        assert option in help_text


def test_help_does_not_import_the_heavy_parts() -> None:
    probe = (
        "import sys\n"
        "from roteiro_py.cli.app import main\n"
        "code = main(['--help'])\n"
        "heavy = [m for m in ('pydantic', 'docker', 'roteiro_py.config', 'roteiro_py.lint') "
        "if m in sys.modules]\n"
        "print('HEAVY', heavy)\n"
    )
    result = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60)
    assert "HEAVY []" in result.stdout, result.stdout[-500:]


REFUSAL_PROBE = (
    "import sys\n"
    "from roteiro_py.cli.app import main\n"
    "print('EXIT', main(sys.argv[1:]))\n"
    "heavy = [m for m in ('roteiro_py.config_model', 'roteiro_py.store', 'roteiro_py.vm', "
    "'roteiro_py.report', 'roteiro_py.clippy') if m in sys.modules]\n"
    "print('HEAVY', heavy)\n"
)


@pytest.mark.parametrize(("image", "code"), [(None, 3), ("ghcr.io/acme/clippy:1.95", 2)])
def test_a_refusal_before_validation_builds_no_settings_model(tmp_path: Path, image: str | None,
                                                              code: int) -> None:
    """No image, or a tag: refused before the settings are validated (the models cost more
    to import and build than all of --help; bench/cli_startup.py). pydantic itself is
    imported by typer 0.29 to coerce any command's arguments, so it is not asserted."""
    args = ["lint", "clippy", str(tmp_path), *(["--image", image] if image else [])]
    result = subprocess.run([sys.executable, "-c", REFUSAL_PROBE, *args], capture_output=True,
                            text=True, timeout=60)
    assert f"EXIT {code}" in result.stdout and "HEAVY []" in result.stdout, result.stdout[-500:]
    # control: a pinned image goes on to validate (and is refused later, with no VM assets)
    pinned = [*args[:3], "--image", f"ghcr.io/acme/clippy@sha256:{HEX}"]
    result = subprocess.run([sys.executable, "-c", REFUSAL_PROBE, *pinned], capture_output=True,
                            text=True, timeout=60)
    assert "roteiro_py.config_model" in result.stdout, result.stdout[-500:]


NOT_PROVISIONED_PROBE = (
    "import sys\n"
    "from roteiro_py.vm.qemu import backend\n"
    "# no VM assets here: the hypervisor check passes as on a host that has them\n"
    "backend.QemuBackend.isolation = lambda self: backend.isolation_for('tcg')\n"
    "from roteiro_py.cli.app import main\n"
    "print('EXIT', main(sys.argv[1:]))\n"
    "print('REACHED', [m for m in ('roteiro_py.config_model', 'roteiro_py.store.layout') "
    "if m in sys.modules])\n"
    "print('HEAVY', sorted(m for m in sys.modules if m.split('.')[0] in ('rich', 'cryptography') "
    "or m.startswith(('roteiro_py.report', 'roteiro_py.clippy.parse', 'roteiro_py.image.rust_dist'))))\n"
)


def test_the_not_provisioned_refusal_loads_no_report_console_or_cryptography(
        tmp_path: Path, roteiro_home: Path) -> None:
    """"image not provisioned" comes after the settings' validation and the hypervisor
    check, before any VM: the report's models, rich (the human report, the spinner on a
    terminal) and cryptography (signatures, checked only when provisioning) are for later
    or never, and cost as much as all of --help (bench/cli_startup.py)."""
    (tmp_path / "src").mkdir()
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "b"\nversion = "0.1.0"\n')
    (tmp_path / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "b"\nversion = "0.1.0"\n')
    (tmp_path / "src" / "lib.rs").write_text("")
    args = ["lint", "clippy", str(tmp_path), "--image", f"localhost/x@sha256:{HEX}", "--accel", "tcg"]
    result = subprocess.run([sys.executable, "-c", NOT_PROVISIONED_PROBE, *args], capture_output=True,
                            text=True, timeout=60, cwd=tmp_path)
    assert "EXIT 3" in result.stdout and "prefetch" in result.stderr, result.stdout + result.stderr[-800:]
    # control: the run got as far as validating the settings and reading the store
    assert "REACHED ['roteiro_py.config_model', 'roteiro_py.store.layout']" in result.stdout
    assert "HEAVY []" in result.stdout, result.stdout[-800:]


def test_a_bad_value_elsewhere_is_still_refused_before_the_missing_image(tmp_path: Path) -> None:
    """The early refusal is taken only when validation could not have refused first."""
    result = run("lint", "clippy", str(tmp_path), cwd=tmp_path, env={"ROTEIRO_VM_CPUS": "0"})
    assert result.returncode == 2 and "vm.cpus" in result.stderr, result.stderr
    result = run("lint", "clippy", str(tmp_path), "--image", "a:1", cwd=tmp_path,
                 env={"ROTEIRO_VM_CPUS": "0"})
    assert result.returncode == 2 and "vm.cpus" in result.stderr, result.stderr
    result = run("lint", "clippy", str(tmp_path), cwd=tmp_path, env={"ROTEIRO_VM_CPUS": "2"})
    assert result.returncode == 3, result.stderr  # control: a valid value, then no image


def test_tag_reference_exits_2_naming_it(tmp_path: Path) -> None:
    """A tag where a digest is required is what the user typed, like a malformed digest:
    usage, 2 (it was 3 until issue 13; errors.py states the rule)."""
    result = run("lint", "clippy", str(tmp_path), "--image", "ghcr.io/acme/clippy:1.95", cwd=tmp_path)
    assert result.returncode == 2
    assert "ghcr.io/acme/clippy:1.95" in result.stderr and "by tag, not by digest" in result.stderr
    assert_no_traceback(result)


def test_no_image_configured_exits_3_with_the_snippet(tmp_path: Path, roteiro_home: Path) -> None:
    result = run("lint", "clippy", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 3
    assert "[lint]" in result.stderr and 'image = "' in result.stderr
    assert str(roteiro_home / "config.toml") in result.stderr
    assert "pylint-sandbox prefetch --analyzer clippy" in result.stderr
    assert_no_traceback(result)


def test_malformed_config_exits_2_naming_file_and_line(tmp_path: Path) -> None:
    (tmp_path / "roteiro.toml").write_text('[lint]\nimage = "x\n')
    result = run("lint", "clippy", str(tmp_path), cwd=tmp_path)
    assert result.returncode == 2
    assert str(tmp_path / "roteiro.toml") in result.stderr and "line 2" in result.stderr
    assert_no_traceback(result)


def test_malformed_digest_exits_2_saying_what(tmp_path: Path) -> None:
    result = run("lint", "clippy", str(tmp_path), "--image", "x@sha256:abc", cwd=tmp_path)
    assert result.returncode == 2 and "3 hex digits" in result.stderr
    assert_no_traceback(result)


def test_usage_errors_exit_2(tmp_path: Path) -> None:
    assert run("lint", "clippy", "--cpus", "many", cwd=tmp_path).returncode == 2
    assert run("lint", "clippy", "--format", "xml", cwd=tmp_path).returncode == 2
    assert run("no-such-command", cwd=tmp_path).returncode == 2
    result = run("config", "set", "vm.cpus", "2", "--user", "--repo", cwd=tmp_path)
    assert result.returncode == 2 and "--user and --repo" in result.stderr


def test_config_round_trip_through_the_cli(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    assert run("config", "set", "vm.cpus", "3", cwd=tmp_path).returncode == 0
    refused = run("config", "set", "vm.accel", "tcg", "--repo", cwd=tmp_path)
    assert refused.returncode == 2 and "branch under review" in refused.stderr
    assert run("config", "set", "lint.all_targets", "true", "--repo", cwd=tmp_path).returncode == 0
    assert run("config", "set", "lint.image", f"localhost:5000/c@sha256:{HEX}", cwd=tmp_path).returncode == 0
    shown = run("config", "show", cwd=tmp_path).stdout
    assert "vm.cpus" in shown and str(tmp_path / "roteiro.toml") in shown
    assert f"localhost:5000/c@sha256:{HEX}" in shown and "config.toml" in shown
    assert run("config", "get", "vm.cpus", cwd=tmp_path).stdout.strip() == "3"
    assert run("config", "unset", "vm.cpus", cwd=tmp_path).returncode == 0
    assert run("config", "get", "vm.cpus", cwd=tmp_path).stdout.strip() == "2"
    result = run("config", "get", "vm.nope", cwd=tmp_path)
    assert result.returncode == 2 and "known keys" in result.stderr


def _guard_exit(call: object, capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    with pytest.raises(typer.Exit) as caught:
        cli._guard(call)  # type: ignore[arg-type]
    return caught.value.exit_code, capsys.readouterr().err


def test_internal_error_is_one_line_and_a_log(capsys: pytest.CaptureFixture[str],
                                               roteiro_home: Path) -> None:
    def broken() -> int:
        secret_local = "hunter2"  # noqa: F841 - must never be shown
        raise RuntimeError("unexpected state 12")

    code, err = _guard_exit(broken, capsys)
    assert code == 4
    assert err.count("\n") == 1 and "unexpected state 12" in err and "Traceback" not in err
    log = Path(err.split("traceback in ", 1)[1].rstrip(")\n"))
    assert log.is_relative_to(roteiro_home) and "RuntimeError" in log.read_text()
    assert "hunter2" not in log.read_text()


def test_debug_shows_the_traceback_without_locals(capsys: pytest.CaptureFixture[str]) -> None:
    cli._state["debug"] = True
    try:
        def broken() -> int:
            secret_local = "hunter2"  # noqa: F841
            raise RuntimeError("boom 7")

        code, err = _guard_exit(broken, capsys)
    finally:
        cli._state["debug"] = False
    assert code == 4 and "Traceback" in err and "hunter2" not in err


def test_interrupt_exits_130(capsys: pytest.CaptureFixture[str]) -> None:
    def interrupted() -> int:
        raise KeyboardInterrupt

    code, err = _guard_exit(interrupted, capsys)
    assert code == 130 and "interrupted" in err


def interruptible() -> None:
    """A child's SIGINT back at its default (see the test below)."""
    import signal

    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_sigint_to_the_real_process_exits_130(tmp_path: Path) -> None:
    import signal
    import time

    probe = ("import time, sys\nfrom roteiro_py.cli import app\n"
             "def slow() -> int:\n    print('ready', flush=True)\n    time.sleep(30)\n    return 0\n"
             "try:\n    app._guard(slow)\nexcept SystemExit as e:\n    sys.exit(e.code)\n"
             "except BaseException as e:\n    sys.exit(getattr(e, 'exit_code', 99))\n")
    # SIGINT at its default in the child whatever this run inherited: a suite started as a
    # background job (`.ci/run &`) has it ignored, and Python then never raises
    # KeyboardInterrupt (the test failed for that reason alone).
    with subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True,
                          preexec_fn=interruptible) as child:
        assert child.stdout is not None
        assert child.stdout.readline().strip() == "ready"
        child.send_signal(signal.SIGINT)
        started = time.monotonic()
        assert child.wait(timeout=10) == 130
        assert time.monotonic() - started < 5


def test_sigterm_unwinds_and_kills_what_the_command_started(tmp_path: Path) -> None:
    """A cancelled CI job sends SIGTERM: the stream's process group (qemu, in a lint) must die."""
    import signal
    import time

    marker = tmp_path / "grandchild.pid"
    probe = (
        "import sys\nfrom roteiro_py.cli import app\nfrom roteiro_py.process.stream import spawn, collect\n"
        "def slow() -> int:\n"
        f"    with spawn(['sh', '-c', 'echo $$ > {marker}; exec sleep 60'], timeout=120) as s:\n"
        "        print('ready', flush=True)\n"
        "        collect(s)\n"
        "    return 0\n"
        "try:\n    app._guard(slow)\nexcept BaseException as e:\n    sys.exit(getattr(e, 'exit_code', 99))\n")
    with subprocess.Popen([sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True) as child:
        assert child.stdout is not None and child.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 5
        while not marker.exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        pid = int(marker.read_text())
        os.kill(pid, 0)  # control: the grandchild is alive before the signal
        child.send_signal(signal.SIGTERM)
        assert child.wait(timeout=10) == 128 + signal.SIGTERM
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    raise AssertionError("the command's process group outlived SIGTERM")


def test_prefetch_prune_removes_unreferenced_blobs(tmp_path: Path, roteiro_home: Path) -> None:
    import hashlib
    import time

    from roteiro_py.store import Store

    Store(roteiro_home / "store").prune()  # lays out an empty store
    data = b"orphan blob"
    blob = roteiro_home / "store" / "blobs" / "sha256" / hashlib.sha256(data).hexdigest()
    blob.parent.mkdir(parents=True, exist_ok=True)
    blob.write_bytes(data)
    old = time.time() - 2 * 86400
    os.utime(blob, (old, old))
    result = run("prefetch", "--prune", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert f"pruned {len(data)} bytes" in result.stderr and not blob.exists()


def test_verbose_and_quiet_together_are_a_usage_error(tmp_path: Path) -> None:
    result = run("lint", "clippy", str(tmp_path), "-v", "-q", cwd=tmp_path)
    assert result.returncode == 2 and "--verbose and --quiet" in result.stderr
    result = run("lint", "clippy", str(tmp_path), "-v", cwd=tmp_path)
    assert result.returncode == 3 and "No linter image" in result.stderr  # control: -v alone runs
    help_text = run("lint", "clippy", "--help", cwd=tmp_path, env={"COLUMNS": "200"}).stdout
    for shown in ("--verbose", "-v,", "--color", "CARGO_TERM_COLOR"):
        assert shown in help_text


PINNED = f"ghcr.io/acme/clippy@sha256:{HEX}"


@pytest.mark.parametrize(("args", "env", "files", "code", "says"), [
    # what the user typed is wrong, wherever it was typed: usage, 2
    (["--image", "x@sha256:abc"], {}, {}, 2, "3 hex digits"),
    (["--image", "ghcr.io/acme/clippy:1.95"], {}, {}, 2, "by tag, not by digest"),
    ([], {"ROTEIRO_LINT_IMAGE": "ghcr.io/acme/clippy:1.95"}, {}, 2, "by tag, not by digest"),
    ([], {}, {"roteiro.toml": '[lint]\nimage = "ghcr.io/acme/clippy:1.95"\n'}, 2, "by tag, not by digest"),
    ([], {}, {"roteiro.toml": '[lint]\nimage = "ghcr.io/Acme/clippy@sha256:' + HEX + '"\n'}, 2, "malformed"),
    # a well-formed reference this host or its policy cannot honour: refused, 3
    ([], {}, {}, 3, "No linter image is configured"),
    ([], {"ROTEIRO_LINT_ALLOWED_IMAGES": "quay.io/ours/"}, {"roteiro.toml": f'[lint]\nimage = "{PINNED}"\n'},
     3, "lint.allowed_images"),
    (["--image", PINNED], {}, {"Cargo.toml": '[package]\nname = "a"\nversion = "0.1.0"\n'}, 3,
     "VM's asset manifest is not provisioned"),  # no VM assets in this ROTEIRO_HOME
])
def test_reference_errors_follow_one_rule(tmp_path: Path, args: list[str], env: dict[str, str],
                                          files: dict[str, str], code: int, says: str) -> None:
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    result = run("lint", "clippy", str(tmp_path), *args, cwd=tmp_path, env=env)
    assert result.returncode == code and says in result.stderr, result.stderr
    assert_no_traceback(result)


@pytest.mark.parametrize(("args", "code"), [
    (["config", "set", "lint.image", "ghcr.io/acme/clippy:1.95"], 2),
    (["config", "set", "lint.image", "x@sha256:abc"], 2),
    (["prefetch", "--image", "ghcr.io/acme/clippy:1.95"], 2),
    (["prefetch", "--image", "x@sha256:abc"], 2),
    (["config", "set", "lint.image", PINNED], 0),  # control: a pinned reference is taken
])
def test_the_same_mistake_is_2_in_every_command(tmp_path: Path, args: list[str], code: int) -> None:
    result = run(*args, cwd=tmp_path)
    assert result.returncode == code, result.stderr
    assert_no_traceback(result)


DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo-workspace"
PIN = "r.example/c@sha256:" + HEX


def guest_argv(monkeypatch: pytest.MonkeyPatch, *args: str) -> tuple[int, list[str], str]:
    """The exit code, the clippy argv the guest would run (built from what the command line
    handed the lint: its flags resolved by config, then lint/run.py clippy_command, as the
    conductor does) and the output. The lint itself is replaced by what records its
    request: it would boot a VM, which tests/integration does."""
    from typer.testing import CliRunner

    from roteiro_py import config, lint
    from roteiro_py.lint.preflight import locate, member_of

    seen: list[list[str]] = []

    def record(request: lint.LintRequest) -> int:
        settings = config.resolve(request.path, flags=request.flags).settings
        seen.append(lint.clippy_command(settings, member_of(locate(request.path))))
        return 0

    monkeypatch.setattr("roteiro_py.lint.run_lint_command", record)
    result = CliRunner().invoke(cli.app, ["lint", "clippy", "--image", PIN, *args])
    return result.exit_code, (seen[0] if seen else []), result.output


def test_cargos_flags_reach_the_guest_argv(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(DEMO)
    code, argv, _ = guest_argv(monkeypatch, "-F", "a b", "--features", "c,a", "-F", "d")
    assert code == 0 and argv[argv.index("--features") + 1] == "a,b,c,d"
    code, argv, _ = guest_argv(monkeypatch, "--no-deps", "-p", "demo-app", "--", "-D", "warnings")
    assert code == 0 and argv[-5:] == ["demo-app", "--no-deps", "--", "-D", "warnings"]
    code, argv, _ = guest_argv(monkeypatch, "--all-features", "--no-default-features")
    assert code == 0 and {"--all-features", "--no-default-features"} <= set(argv)
    code, argv, _ = guest_argv(monkeypatch)  # control: none of them unless asked
    assert code == 0 and not {"--features", "--no-deps", "--all-features"} & set(argv)


def test_manifest_path_selects_as_cargo_does(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.chdir(tmp_path)
    member = DEMO / "crates" / "demo-app" / "Cargo.toml"
    code, argv, _ = guest_argv(monkeypatch, "--manifest-path", str(member))
    assert code == 0 and argv[-2:] == ["--package", "demo-app"]
    code, argv, _ = guest_argv(monkeypatch, "--manifest-path", str(DEMO / "Cargo.toml"))
    assert code == 0 and "--package" not in argv  # the workspace root: its default members
    for args, says in (([str(DEMO), "--manifest-path", str(member)], "both say what to lint"),
                       (["--manifest-path", str(DEMO / "README.md")], "not a file named Cargo.toml"),
                       (["--manifest-path", str(tmp_path / "Cargo.toml")], "does not exist")):
        code, argv, output = guest_argv(monkeypatch, *args)
        assert (code, argv) == (2, []) and says in " ".join(output.split()), output


def test_an_unknown_package_or_feature_exits_2_naming_it(tmp_path: Path) -> None:
    """The real command line, through to the preflight: exit 2 before any VM (no
    hypervisor is needed to say so), where it was 3."""
    env = {"ROTEIRO_HOME": str(tmp_path / "home")}
    result = run("lint", "clippy", "--image", PIN, "-p", "demo-nope", cwd=DEMO, env=env)
    assert result.returncode == 2 and "--package demo-nope: no package of that name" in result.stderr
    assert "demo-app, demo-core" in result.stderr
    result = run("lint", "clippy", "--image", PIN, "-F", "nope-9", cwd=DEMO, env=env)
    assert result.returncode == 2 and "--features nope-9: none of the selected packages" in result.stderr
    assert_no_traceback(result)
    # control: a package it has goes on to the next check (the image, not provisioned here)
    result = run("lint", "clippy", "--image", PIN, "-p", "demo-core", cwd=DEMO, env=env)
    assert result.returncode == 3 and "--package" not in result.stderr


def test_fix_takes_no_value_or_patch_and_its_gate_comes_first(tmp_path: Path) -> None:
    """`--fix` alone is cargo's (its VCS gate refuses a tree with no git before anything
    else, exit 3); `--fix=patch` writes nothing and has no gate (the run goes on to the
    next refusal); anything else, or an --allow-* flag without --fix, is a usage error."""
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "p"\nversion = "0.1.0"\n')
    fixing = run("lint", "clippy", str(tmp_path), "--fix", cwd=tmp_path)
    assert fixing.returncode == 3 and "No VCS found for" in fixing.stderr and "--allow-no-vcs" in fixing.stderr
    patch = run("lint", "clippy", str(tmp_path), "--fix=patch", cwd=tmp_path)
    assert patch.returncode == 3 and "No VCS found" not in patch.stderr and "image" in patch.stderr
    bogus = run("lint", "clippy", str(tmp_path), "--fix=all", cwd=tmp_path)
    assert bogus.returncode == 2 and "--fix takes no value or `patch`" in bogus.stderr
    alone = run("lint", "clippy", str(tmp_path), "--allow-dirty", cwd=tmp_path)
    assert alone.returncode == 2 and "go with --fix" in alone.stderr
    attested = run("lint", "clippy", str(tmp_path), "--fix", "--attest", str(tmp_path / "a.json"), cwd=tmp_path)
    assert attested.returncode == 2 and "--attest and --fix cannot be used together" in attested.stderr
    streamed = run("lint", "clippy", str(tmp_path), "--fix=patch", "--message-format", "json", cwd=tmp_path)
    assert streamed.returncode == 2 and "--message-format and --fix cannot be used together" in streamed.stderr
    assert streamed.stdout == ""
    # --fix=patch owns stdout as --message-format does: a report there too is refused, not
    # silently dropped; with a file it is written (the run goes on to the next refusal)
    printed = run("lint", "clippy", str(tmp_path), "--fix=patch", "--format", "json", cwd=tmp_path)
    assert printed.returncode == 2 and "--fix=patch and --format json would both be printed on stdout" \
        in printed.stderr and printed.stdout == ""
    filed = run("lint", "clippy", str(tmp_path), "--fix=patch", "--format", f"json={tmp_path / 'r.json'}",
                cwd=tmp_path)
    assert filed.returncode == 3 and "would both be printed" not in filed.stderr
    for result in (fixing, patch, bogus, alone, attested, streamed, printed, filed):
        assert_no_traceback(result)


def test_a_run_builds_only_the_command_its_first_word_names(monkeypatch: pytest.MonkeyPatch,
                                                             tmp_path: Path) -> None:
    """Typer builds each command's click parameters from its signature on every run: a
    lint built all of them (~25 ms of CPU). It builds its own group's now (cli/app.py
    `_app_for`); completion, the program's help, an unknown word, the whole app."""
    import typer.main

    real = typer.main.get_params_from_function
    built: list[object] = []

    def counted(func: Callable[..., object]) -> object:
        built.append(func)
        return real(func)

    monkeypatch.setattr(typer.main, "get_params_from_function", counted)
    assert cli.main(["lint", "clippy", "--help"]) == 0
    assert cli.lint_clippy in built and cli.render not in built and cli.doctor not in built
    for args in (["--help"], ["lnt"]):  # control: the whole app, as before
        built.clear()
        cli.main(args)
        assert cli.lint_clippy in built and cli.render in built and cli.doctor in built, args
    built.clear()
    monkeypatch.setenv("_PYLINT_SANDBOX_COMPLETE", "bash_source")
    cli.main(["lint", "clippy", "--help"])
    assert cli.render in built
