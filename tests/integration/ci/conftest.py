"""Fixtures for running the CI scripts with real lints: the provisioned ROTEIRO_HOME and the
clippy image of tests/integration/lint (lint_support.py, shared), and a copy of the example
workspace made a git repository with an `origin`, as a CI checkout is."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.ci.ci_support import git
from tests.integration.lint.lint_support import HOME, ROOT, Image, build_image, provision, provision_vm_assets


@pytest.fixture(scope="session")
def clippy_image() -> Image:
    provision_vm_assets()
    return provision(build_image("clippy-1.95.0"))


@pytest.fixture(autouse=True)
def roteiro_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite's empty per-test home: these tests share the provisioned one."""
    monkeypatch.setenv("ROTEIRO_HOME", str(HOME))
    yield HOME


@pytest.fixture
def checkout(tmp_path: Path) -> Path:
    """The example workspace committed on `main` and pushed to a bare `origin`, checked out
    as a CI job gets it: the commit, with no origin/main ref (the scripts fetch what they need)."""
    origin = tmp_path / "origin.git"
    work = tmp_path / "workspace"
    shutil.copytree(ROOT / "examples" / "demo-workspace", work, ignore=shutil.ignore_patterns("target"))
    git(work, "init", "-q", "-b", "main")
    git(work, "add", ".")
    git(work, "commit", "-qm", "the example workspace")
    git(tmp_path, "clone", "-q", "--bare", str(work), str(origin))
    git(work, "remote", "add", "origin", str(origin))
    return work
