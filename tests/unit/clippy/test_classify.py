"""clippy/classify.py: every outcome of a clippy run, from real cargo 1.95 wherever cargo
can be made to produce it here (warnings, deny lint, compile error, failing build script,
missing/stale/read-only lockfile, cold cache, a killed cargo, a usage error)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
from pathlib import Path, PurePosixPath
from typing import TypeVar

import pytest
from realcargo import DATA, DEMO, CargoRun, copy_crate, run_clippy

from roteiro_py.clippy.classify import ClippyRun, LintResult, classify
from roteiro_py.clippy.command import EXPECTED_STATUSES, ClippyOptions, clippy_argv
from roteiro_py.clippy.parse import PathLayout
from roteiro_py.errors import (
    EXIT_USAGE,
    BuildProducedNothing,
    CargoRefusedSelection,
    ColdCache,
    KilledBySignal,
    LockfileWouldBeWritten,
    OutputTooLarge,
    RoteiroError,
    UnexpectedStatus,
)

IMAGE = "registry.example/clippy@sha256:" + "ab" * 32
STDERR = DATA / "cargo-stderr"
ITOA_LOCK = """version = 4

[[package]]
name = "itoa"
version = "1.0.19"
source = "registry+https://github.com/rust-lang/crates.io-index"
checksum = "3bd1574e617a9a6c1f8f8181bd7e841e1f20e4277607ef28945765188d6284d4"

[[package]]
name = "needs-itoa"
version = "0.1.0"
dependencies = [
 "itoa",
]
"""


def judge(run: CargoRun | None = None, tree: Path = Path("/t"), *, status: int | None = None,
          stdout: bytes = b"", stderr: str = "", signal_name: str | None = None,
          truncated: bool = False, truncated_stream: str = "output", oom_kills: int = 0) -> LintResult:
    if run is not None:
        status, stdout, stderr = run.status, run.stdout, run.stderr
    return classify(
        ClippyRun(command=run.argv if run else clippy_argv(ClippyOptions()), status=status,
                  stdout=stdout, stderr=stderr, memory_mib=1536, limit_bytes=64 << 20,
                  signal_name=signal_name, truncated=truncated, truncated_stream=truncated_stream,
                  oom_kills=oom_kills),
        tree=tree, image_reference=IMAGE, layout=PathLayout())


def crate(root: Path, name: str, lib: str, *, build: str | None = None,
          lock: bool = True, deps: str = "") -> Path:
    path = root / name
    (path / "src").mkdir(parents=True)
    (path / "Cargo.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n\n'
        f"[dependencies]\n{deps}\n[workspace]\n")
    (path / "src" / "lib.rs").write_text(lib)
    if build is not None:
        (path / "build.rs").write_text(build)
    if lock:
        subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=path, check=True)
    return path


E = TypeVar("E", bound=RoteiroError)


def sound(error: E) -> E:
    """The refusal renders without defects (guidance.py's own shape checks)."""
    assert error.guidance().defects() == []
    return error


def test_expected_statuses_are_what_cargo_returns(demo_default: CargoRun, tmp_path: Path) -> None:
    bad = crate(tmp_path, "bad", "pub fn f() -> i32 { \"x\" }\n")
    failed = run_clippy(bad, target_dir=tmp_path / "t")
    assert (demo_default.status, failed.status) == EXPECTED_STATUSES


def test_warnings_only_is_a_successful_report(demo_default: CargoRun) -> None:
    result = judge(demo_default)
    assert result.build_succeeded and len(result.findings) == 3
    assert result.summary().counts == {"error": 0, "warning": 3, "note": 0, "help": 0}


def test_deny_level_lint_is_a_finding_of_a_failed_build(tmp_path: Path) -> None:
    path = crate(tmp_path, "deny", "pub fn f(x: i32) -> bool { x == x }\n"
                                   "pub fn g() -> i32 { return 1; }\n")
    run = run_clippy(path, target_dir=tmp_path / "t")
    assert run.status == 101
    result = judge(run)
    assert not result.build_succeeded
    assert {(f.code, f.level) for f in result.findings} == {
        ("clippy::eq_op", "error"), ("clippy::needless_return", "warning")}


def test_compile_error_is_a_finding_never_a_clean_tree(tmp_path: Path) -> None:
    path = crate(tmp_path, "cerr", "pub fn f() -> i32 { \"x\" }\n")
    result = judge(run_clippy(path, target_dir=tmp_path / "t"))
    assert not result.build_succeeded
    assert [(f.code, f.level, f.line) for f in result.findings] == [("E0308", "error", 1)]


def test_failing_build_script_produced_nothing(tmp_path: Path) -> None:
    path = crate(tmp_path, "native", "", build='fn main() { eprintln!("openssl not found"); '
                                              "std::process::exit(1); }\n")
    run = run_clippy(path, target_dir=tmp_path / "t")
    with pytest.raises(BuildProducedNothing) as caught:
        judge(run)
    assert "openssl not found" in sound(caught.value).stderr


def test_error_only_outside_the_repository_produced_nothing(evil_copy: Path,
                                                            tmp_path: Path) -> None:
    """Real: rustc's deny-level lint fires in build-script-generated code (OUT_DIR)."""
    run = run_clippy(evil_copy, ClippyOptions(features=("strict",)), target_dir=tmp_path)
    assert run.status == 101
    with pytest.raises(BuildProducedNothing) as caught:
        judge(run)
    assert "error outside the repository: unicode codepoint" in sound(caught.value).stderr


@pytest.mark.parametrize("stale", [False, True])
def test_missing_or_stale_lockfile_would_be_written(tmp_path: Path, stale: bool) -> None:
    path = crate(tmp_path, "nolock", "", lock=stale)
    if stale:
        crate(path, "dep", "")
        text = (path / "Cargo.toml").read_text().replace(
            "[dependencies]\n", '[dependencies]\ndep = { path = "dep" }\n')
        (path / "Cargo.toml").write_text(text.replace("\n[workspace]\n", "\n[workspace]\n"))
        (path / "dep" / "Cargo.toml").write_text(
            (path / "dep" / "Cargo.toml").read_text().replace("[workspace]\n", ""))
    run = run_clippy(path, target_dir=tmp_path / "t")
    with pytest.raises(LockfileWouldBeWritten) as caught:
        judge(run, path)
    word = "update" if stale else "create"
    assert f"cannot {word} the lock file" in sound(caught.value).line


@pytest.mark.skipif(shutil.which("unshare") is None or os.geteuid() != 0,
                    reason="a read-only bind mount needs unshare as root")
def test_read_only_lockfile_write_failure(tmp_path: Path) -> None:
    """Without --locked cargo tries to write Cargo.lock; the read-only mount refuses."""
    path = crate(tmp_path, "ro", "", lock=False)
    script = (f"mount --bind {path} {path} && mount -o remount,bind,ro {path} && "
              f"cd {path} && CARGO_TARGET_DIR={tmp_path}/t cargo clippy "
              "--message-format=json --offline")
    done = subprocess.run(["unshare", "-rm", "sh", "-c", script], capture_output=True,
                          check=False)
    stderr = done.stderr.decode()
    assert done.returncode == 101 and "Read-only file system" in stderr
    with pytest.raises(LockfileWouldBeWritten) as caught:
        judge(status=101, stdout=done.stdout, stderr=stderr)
    assert "failed to write" in sound(caught.value).line
    captured = (STDERR / "lockfile-read-only.txt").read_text()
    with pytest.raises(LockfileWouldBeWritten):
        judge(status=101, stderr=captured)


def test_cold_cache_live_with_an_empty_cargo_home(tmp_path: Path) -> None:
    path = crate(tmp_path, "needs-itoa", "", deps='itoa = "1"\n', lock=False)
    (path / "Cargo.lock").write_text(ITOA_LOCK)
    (tmp_path / "home").mkdir()
    run = run_clippy(path, target_dir=tmp_path / "t", cargo_home=tmp_path / "home")
    with pytest.raises(ColdCache) as caught:
        judge(run, path)
    assert sound(caught.value).package == "itoa"
    assert "offline" in caught.value.line


@pytest.mark.parametrize("sample", ["cold-cache-offline-specified.txt",
                                    "cold-cache-failed-to-unpack.txt"])
def test_cold_cache_captured_wordings(sample: str) -> None:
    """Captured from cargo 1.95 (README in tests/data/cargo-stderr): producing them needs a
    CARGO_HOME filled from crates.io, which a test run must not download."""
    with pytest.raises(ColdCache) as caught:
        judge(status=101, stderr=(STDERR / sample).read_text())
    assert sound(caught.value).package == "itoa"


def test_cargo_killed_with_nothing_on_stderr(tmp_path: Path) -> None:
    """A real cargo, killed by SIGKILL as the guest's OOM killer would."""
    copy = copy_crate(DEMO, tmp_path / "demo")
    env = {**os.environ, "CARGO_TARGET_DIR": str(tmp_path / "t")}
    child = subprocess.Popen(clippy_argv(ClippyOptions()), cwd=copy, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    child.send_signal(signal.SIGKILL)
    stdout, stderr = child.communicate()
    assert child.returncode == -signal.SIGKILL
    with pytest.raises(KilledBySignal) as caught:
        judge(status=None, stdout=stdout, stderr=stderr.decode(), signal_name="SIGKILL")
    # no evidence of memory: not called an out-of-memory kill, no --memory rerun
    assert caught.value.oom_kills == 0 and not caught.value.guidance().commands
    assert "--memory" not in caught.value.guidance().render_text()
    with pytest.raises(KilledBySignal) as caught:
        judge(status=None, stdout=stdout, stderr=stderr.decode(), signal_name="SIGKILL",
              oom_kills=2)
    # Outside the command line's boundary the rerun is a note (tests/unit/test_rerun.py
    # has the whole line the boundary makes).
    assert sound(caught.value).memory_mib == 1536 and "--memory 3072" in str(
        caught.value.guidance().notes)


def test_rustc_killed_under_cargo_is_killed_by_signal() -> None:
    """cargo's wording when its rustc child dies; a fake, since an OOM cannot be ordered."""
    stderr = ("    Checking big v0.1.0 (/w)\nerror: could not compile `big` (lib)\n\n"
              "Caused by:\n  process didn't exit successfully: `clippy-driver rustc ...` "
              "(signal: 9, SIGKILL: kill)\n")
    with pytest.raises(KilledBySignal) as caught:
        judge(status=101, stdout=b'{"reason":"build-finished","success":false}\n',
              stderr=stderr)
    assert caught.value.signal_name == "SIGKILL" and caught.value.oom_kills == 0
    with pytest.raises(KilledBySignal) as caught:
        judge(status=101, stdout=b'{"reason":"build-finished","success":false}\n',
              stderr=stderr, oom_kills=1)
    assert caught.value.oom_kills == 1 and "ran out of memory" in caught.value.guidance().summary


def test_usage_error_is_an_unexpected_status(demo_copy: Path, tmp_path: Path) -> None:
    argv = [*clippy_argv(ClippyOptions()), "--no-such-flag"]
    run = run_clippy(demo_copy / "rust", target_dir=tmp_path, argv=argv)
    assert run.status not in EXPECTED_STATUSES
    with pytest.raises(UnexpectedStatus) as caught:
        judge(run)
    assert sound(caught.value).expected == EXPECTED_STATUSES


def test_truncated_output_is_refused_before_parsing(demo_default: CargoRun) -> None:
    with pytest.raises(OutputTooLarge):
        judge(status=0, stdout=demo_default.stdout, truncated=True)
    with pytest.raises(OutputTooLarge) as caught:
        judge(status=0, stdout=demo_default.stdout, truncated=True, truncated_stream="stderr")
    assert "on the stderr of `" in caught.value.guidance().render_text()


def test_a_stream_without_build_finished_is_not_clean(demo_default: CargoRun) -> None:
    """A hostile or broken guest: status 0 but the closing message is missing."""
    cut = b"\n".join(line for line in demo_default.stdout.splitlines()
                     if b"build-finished" not in line)
    with pytest.raises(BuildProducedNothing):
        judge(status=0, stdout=cut)


@pytest.mark.parametrize(("status", "success"), [(0, "false"), (101, "true")])
def test_status_and_build_finished_must_agree(status: int, success: str) -> None:
    with pytest.raises(UnexpectedStatus):
        judge(status=status, stdout=b'{"reason":"build-finished","success":%s}' % success.encode())


def test_workspace_layout_is_passed_through(demo_default: CargoRun) -> None:
    result = classify(ClippyRun(command=demo_default.argv, status=0, stdout=demo_default.stdout,
                                stderr="", memory_mib=1, limit_bytes=1),
                      tree=Path("/t"), image_reference=IMAGE,
                      layout=PathLayout(workspace=PurePosixPath("rust")))
    assert all(f.path and f.path.startswith("rust/crates/") for f in result.findings)


def test_a_registry_no_configuration_names_is_the_lockfile_refusal_not_a_failed_build() -> None:
    """cargo 1.95's wording for `x = { registry = "nope" }` with no [registries.nope]: it
    read as BuildProducedNothing ("the image lacks native build dependencies"), which sent
    the user to the wrong place (found porting the integration tests to issue 20)."""
    stderr = ("error: failed to parse manifest at `/w/Cargo.toml`\n\nCaused by:\n"
              "  registry index was not found in any configuration: `nope`\n")
    with pytest.raises(ColdCache) as caught:
        judge(status=101, stderr=stderr)
    text = caught.value.guidance().render_text()
    assert caught.value.package is None and "`nope`" in text and "[registries.<name>]" in text


@pytest.mark.parametrize(("options", "said"), [
    (ClippyOptions(packages=("nope-5",)), "package ID specification `nope-5` did not match any packages"),
    (ClippyOptions(packages=("zz*",)), "package pattern(s) `zz*` not found in workspace"),
    (ClippyOptions(features=("nope-6",)), "the package 'sel' does not contain this feature: nope-6"),
    (ClippyOptions(features=("hidden",)), "package `sel v0.1.0"),
    (ClippyOptions(features=("dep:hidden",)), "feature `dep:hidden` is not allowed to use explicit `dep:` syntax"),
])
def test_a_selection_cargo_refuses_is_a_usage_error(tmp_path: Path, options: ClippyOptions,
                                                    said: str) -> None:
    """Real cargo 1.95 refusing a package or feature before building anything: exit 2
    quoting it (issue 23 §3: it was BuildProducedNothing, exit 3, advice about the image)."""
    crate(tmp_path, "hidden", "")
    path = crate(tmp_path, "sel", "", deps='hidden = { path = "../hidden", optional = true }\n'
                 '[features]\nwith-hidden = ["dep:hidden"]\n')
    run = run_clippy(path, options, target_dir=tmp_path / "t")
    assert run.status == 101 and said in run.stderr
    with pytest.raises(CargoRefusedSelection) as caught:
        judge(run, tree=path)
    assert sound(caught.value).exit_code == EXIT_USAGE
    assert said in caught.value.guidance().render_text()
    # control: the same crate with what it has is linted
    fine = run_clippy(path, ClippyOptions(features=("with-hidden",)), target_dir=tmp_path / "t")
    assert judge(fine, tree=path).build_succeeded


def test_a_build_script_cannot_forge_a_selection_refusal(tmp_path: Path) -> None:
    """The tree's build script prints cargo's words after `Compiling`: still a failed build
    that produced nothing (exit 3), never a usage error."""
    forged = "error: package ID specification `x` did not match any packages"
    path = crate(tmp_path, "forge", "", build=f'fn main() {{ eprintln!("{forged}"); '
                                            "std::process::exit(1); }\n")
    run = run_clippy(path, target_dir=tmp_path / "t")
    assert forged in run.stderr  # control: the words reach the stream cargo-clippy prints
    with pytest.raises(BuildProducedNothing):
        judge(run, tree=path)
