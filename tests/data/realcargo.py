"""Runs the host's real `cargo clippy` with the argv the guest would run (command.py).

Shared by tests/unit/clippy and tests/unit/report (loaded by their conftest.py files):
the parser and the renderers are tested against what cargo 1.95 really prints, not a
hand-written restatement of it. Each run gets its own target directory and copy of the
crate, so nothing is written into the checkout.
"""

from __future__ import annotations

import atexit
import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from roteiro_py.clippy.command import ClippyOptions, clippy_argv

DATA = Path(__file__).resolve().parent
REPO = DATA.parent.parent
DEMO = REPO / "examples" / "demo-workspace"
EVIL = DATA / "evil-build"


@dataclass(frozen=True)
class CargoRun:
    argv: list[str]
    status: int
    stdout: bytes
    stderr: str


def copy_crate(source: Path, destination: Path) -> Path:
    shutil.copytree(source, destination, ignore=shutil.ignore_patterns("target"))
    return destination


def run_clippy(
    cwd: Path,
    options: ClippyOptions | None = None,
    *,
    target_dir: Path,
    cargo_home: Path | None = None,
    argv: list[str] | None = None,
) -> CargoRun:
    argv = argv if argv is not None else clippy_argv(options or ClippyOptions())
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARGO_")}
    env["CARGO_TARGET_DIR"] = str(target_dir)
    # The session's cargo home unless one is given: dropped with the other CARGO_*
    # variables, cargo fell back to $HOME/.cargo and wrote its package-cache locks and
    # .global-cache into the user's (tests/conftest.py's guard found it).
    env["CARGO_HOME"] = str(cargo_home if cargo_home is not None else os.environ["CARGO_HOME"])
    done = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, timeout=240, check=False)
    return CargoRun(argv, done.returncode, done.stdout, done.stderr.decode("utf-8", "replace"))


# -- session fixtures (imported into the conftest.py files) -----------------------------

from datetime import UTC, datetime  # noqa: E402

import pytest  # noqa: E402

from roteiro_py.clippy.classify import ClippyRun, classify  # noqa: E402
from roteiro_py.clippy.parse import PathLayout  # noqa: E402
from roteiro_py.report.model import (  # noqa: E402
    Finding,
    Isolation,
    Provenance,
    Report,
    Summary,
    Toolchain,
    ToolInfo,
)

DIGEST = "sha256:" + "5e" * 32


def make_report(findings: list[Finding], *, build_succeeded: bool = True,
                command: list[str] | None = None, workspace: str = ".") -> Report:
    return Report(
        tool=ToolInfo(name="pylint-sandbox", version="0.1.0"),
        provenance=Provenance(image_reference="registry.example/team/clippy:1.95",
                              image_digest=DIGEST),
        toolchain=Toolchain(clippy_version="0.1.95", clippy_commit="59807616e1",
                            clippy_date="2026-04-14", rustc_release="1.95.0",
                            host="x86_64-unknown-linux-gnu"),
        isolation=Isolation(backend="qemu", accelerator="kvm", hardware_isolated=True,
                            description="QEMU microvm with KVM, no network"),
        workspace=workspace,
        command=command or ["cargo", "clippy", "--message-format=json"],
        features=[],
        started=datetime(2026, 4, 14, 10, 0, tzinfo=UTC),
        ended=datetime(2026, 4, 14, 10, 1, 30, tzinfo=UTC),
        findings=findings,
        summary=Summary.of(findings, build_succeeded=build_succeeded),
    )


def staged_copy(workspace: Path) -> Path:
    """The workspace staged as the VM backend stages it (snippets are read from this)."""
    from roteiro_py.vm.disks.share_image import stage_tree

    area = tempfile.mkdtemp(prefix="staged-")
    atexit.register(shutil.rmtree, area, True)
    staged = Path(area) / "share0"
    staged.mkdir()
    stage_tree(workspace, staged)
    return staged


def report_of(run: CargoRun, repo_root: Path, workspace: str = ".") -> Report:
    result = classify(
        ClippyRun(command=run.argv, status=run.status, stdout=run.stdout, stderr=run.stderr,
                  memory_mib=1024, limit_bytes=1 << 26),
        tree=repo_root, image_reference="registry.example/team/clippy:1.95",
        layout=PathLayout(workspace=PurePosixPath(workspace)),
        staged=staged_copy(repo_root / workspace))
    report = make_report(result.findings, build_succeeded=result.build_succeeded,
                         command=run.argv, workspace=workspace)
    return report.model_copy(update={"summary": result.summary(),
                                     "build_script_warnings": list(result.build_script_warnings)})


@pytest.fixture(scope="session")
def demo_report(demo_all_targets: CargoRun, demo_copy: Path) -> Report:
    return report_of(demo_all_targets, demo_copy, "rust")


@pytest.fixture(scope="session")
def evil_report(evil_run: CargoRun, evil_copy: Path) -> Report:
    return report_of(evil_run, evil_copy)


@pytest.fixture(scope="session")
def demo_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The demo workspace under repo/rust/ of a scratch repository: a workspace in a
    subfolder, so every path check also checks relativity to the repository root."""
    repo = tmp_path_factory.mktemp("demo-repo")
    copy_crate(DEMO, repo / "rust")
    return repo


@pytest.fixture(scope="session")
def demo_default(demo_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> CargoRun:
    return run_clippy(demo_copy / "rust", target_dir=tmp_path_factory.mktemp("target"))


@pytest.fixture(scope="session")
def demo_all_targets(demo_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> CargoRun:
    return run_clippy(demo_copy / "rust", ClippyOptions(all_targets=True),
                      target_dir=tmp_path_factory.mktemp("target"))


@pytest.fixture(scope="session")
def evil_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return copy_crate(EVIL, tmp_path_factory.mktemp("evil-repo") / "evil")


@pytest.fixture(scope="session")
def evil_run(evil_copy: Path, tmp_path_factory: pytest.TempPathFactory) -> CargoRun:
    return run_clippy(evil_copy, target_dir=tmp_path_factory.mktemp("target"))
