"""`--keep-cache` is warm and never stale: real VM (TCG), real image, real cargo.

The lint runs in this process so that the test can read the clippy step's own output
(cargo's `compiler-artifact` messages say `"fresh"` per unit) and can act at the exact
point between the worktree's copy and the guest's build (share_image.make_ext4 runs on the
finished copy, before qemu starts). What decides is the real code: the copy's stamps
(vm/stamps.py), the manifest (lint/freshness.py), the guest's clock, cargo's fingerprints.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import roteiro_py.lint
from roteiro_py.vm.api import JobOutcome
from roteiro_py.vm.disks import share_image
from tests.integration.lint.lint_support import HOME, Image

MEMBERS = {"demo_core", "demo-app"}  # cargo target names: a lib, a bin
EDIT = (b"return x * 2;", b"return x * 1;")  # same size; adds clippy::identity_op


@dataclass
class Run:
    codes: set[str]
    fresh: dict[str, bool]


def fresh_units(stdout: bytes) -> dict[str, bool]:
    """Target name -> cargo's "fresh" for every workspace member cargo reported."""
    units: dict[str, bool] = {}
    for line in stdout.splitlines():
        try:
            message = json.loads(line)
        except ValueError:
            continue
        if message.get("reason") == "compiler-artifact" and \
                str(message.get("package_id", "")).startswith("path+file://"):
            units[message["target"]["name"]] = message["fresh"]
    return units


@pytest.fixture
def lint_warm(clippy_image: Image, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path], Run]:
    jobs: list[JobOutcome] = []
    real_run_job = roteiro_py.lint.run_job

    def spy(*args: Any, **kwargs: Any) -> JobOutcome:
        job = real_run_job(*args, **kwargs)
        jobs.append(job)
        return job

    monkeypatch.setattr(roteiro_py.lint, "run_job", spy)

    def run(tree: Path) -> Run:
        flags: dict[str, tuple[Any, str]] = {
            "lint.image": (clippy_image.reference, "--image"), "vm.accel": ("tcg", "--accel"),
            "lint.keep_cache": (True, "--keep-cache")}
        report, _ = roteiro_py.lint.lint(roteiro_py.lint.LintRequest(path=tree, flags=flags))
        job = jobs[-1]
        assert job.completed and job.steps[-1].exit == 0, job.steps[-1].stderr[-2000:]
        return Run({f.code for f in report.findings if f.code}, fresh_units(job.steps[-1].stdout))

    return run


@pytest.fixture
def kept(demo: Path) -> Any:
    builds = HOME / "cache" / "builds"
    before = set(builds.glob("*")) if builds.exists() else set()
    yield
    for left in set(builds.glob("*")) - before:
        left.unlink()


def test_a_warm_relint_checks_no_member_again(demo: Path, lint_warm: Callable[[Path], Run],
                                              kept: None) -> None:
    cold = lint_warm(demo)
    assert set(cold.fresh) == MEMBERS and not any(cold.fresh.values()), cold.fresh  # control
    warm = lint_warm(demo)
    assert warm.fresh == dict.fromkeys(MEMBERS, True)
    assert warm.codes == cold.codes and "clippy::needless_return" in warm.codes


@pytest.mark.parametrize("restore_mtime", [False, True], ids=["plain", "mtime-restored"])
def test_an_edit_between_the_copy_and_the_build_is_seen_by_the_next_run(
        demo: Path, lint_warm: Callable[[Path], Run], kept: None,
        monkeypatch: pytest.MonkeyPatch, restore_mtime: bool) -> None:
    lib = demo / "crates" / "demo-core" / "src" / "lib.rs"
    original = lib.read_bytes()
    edited = original.replace(*EDIT)
    assert edited != original and len(edited) == len(original)
    lint_warm(demo)  # the kept cache, built from the original
    before = lib.stat()
    real_make_ext4 = share_image.make_ext4

    def edit_then_image(*args: Any, **kwargs: Any) -> None:
        """The copy is finished, the guest has not started: edit the tree now."""
        lib.write_bytes(edited)
        if restore_mtime:
            os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))
        real_make_ext4(*args, **kwargs)

    monkeypatch.setattr(share_image, "make_ext4", edit_then_image)
    windowed = lint_warm(demo)
    monkeypatch.setattr(share_image, "make_ext4", real_make_ext4)
    assert lib.read_bytes() == edited
    if restore_mtime:
        assert lib.stat().st_mtime_ns == before.st_mtime_ns and lib.stat().st_size == before.st_size
    # That run linted the bytes it copied, which its manifest now records.
    assert "clippy::identity_op" not in windowed.codes
    assert windowed.fresh == dict.fromkeys(MEMBERS, True)
    after = lint_warm(demo)
    assert "clippy::identity_op" in after.codes
    assert after.fresh == {"demo_core": False, "demo-app": False}  # the app depends on it
