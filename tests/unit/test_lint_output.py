"""`--output` is checked before anything runs and written whole or not at all; the run's
deadline is checked before the boot."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.clippy.parse import Deadline
from roteiro_py.errors import DeadlineExceeded, UsageError

EXE = Path(sys.executable).with_name("pylint-sandbox")


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ})


@pytest.mark.parametrize("where", ["directory", "missing-parent/report.sarif"])
def test_an_unwritable_output_is_a_usage_error_before_anything_runs(
        tmp_path: Path, roteiro_home: Path, where: str) -> None:
    tree = tmp_path / "crate"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (tmp_path / "directory").mkdir()
    # No image is configured: had the lint started first, this would be exit 3 (no image);
    # with one, it used to end after the whole lint in IsADirectoryError (exit 4).
    result = run("lint", "clippy", str(tree), "--output", str(tmp_path / where), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert str(tmp_path / where) in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr
    # control: a writable --output lets the run go on to its first check (an image)
    ok = run("lint", "clippy", str(tree), "--output", str(tmp_path / "report.sarif"),
             cwd=tmp_path)
    assert ok.returncode == 3 and "[lint]" in ok.stderr
    assert not (tmp_path / "report.sarif").exists()


def test_the_report_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("previous report\n")
    with pytest.raises(UnicodeEncodeError):  # fails half way through writing
        lint.write_output(target, "x" * 100_000 + "\ud800")
    assert target.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temp left
    lint.write_output(target, "new report\n")  # control
    assert target.read_text() == "new report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_check_output_accepts_what_can_be_written(tmp_path: Path) -> None:
    lint.check_output(None)
    lint.check_output(tmp_path / "new.sarif")
    with pytest.raises(UsageError, match="is a directory"):
        lint.check_output(tmp_path)


def test_a_run_whose_deadline_passed_before_the_boot_is_refused(tmp_path: Path) -> None:
    late = Deadline(at=time.monotonic() - 1, seconds=77)
    with pytest.raises(DeadlineExceeded) as refused:
        lint.run_job(None, [], None, late, tmp_path)  # type: ignore[arg-type]
    assert "77 s" in refused.value.guidance().summary
    assert "the VM was not started" in refused.value.guidance().summary
