"""The worktree copy for the VM (share_image.stage_tree): bounded, one filesystem, honest
about what it left out, and refusing when cargo needs what it left out."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.config import VmSettings
from roteiro_py.vm.api import JobOutcome, StagedShare
from roteiro_py.vm.disks import share_image
from roteiro_py.vm.disks.share_image import StageLimits, stage_tree

MIB = 1024 * 1024


def limits(**changes: int) -> StageLimits:
    vm = VmSettings().model_copy(update=changes)
    return StageLimits.of(vm)


def staged(tmp_path: Path) -> Path:
    dest = tmp_path / "staged"
    dest.mkdir()
    return dest


def disk_usage(root: Path) -> int:
    return sum(p.lstat().st_blocks * 512 for p in root.rglob("*"))


def test_a_sparse_file_counts_at_its_size_and_is_refused_past_the_cap(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "lib.rs").write_text("pub fn f() {}\n")
    with (tree / "holes.bin").open("wb") as handle:
        handle.truncate(200 * MIB)  # no blocks on disk: the old copy wrote 200 MB of zeros
    assert (tree / "holes.bin").stat().st_blocks == 0
    dest = staged(tmp_path)
    with pytest.raises(errors.TreeTooLarge) as refused:
        stage_tree(tree, dest, limits(stage_max_mib=64))
    text = str(refused.value.guidance().summary)
    assert refused.value.limit == 64 and "64" in text and "stage_max_mib" in text
    assert str(tree) in text
    assert disk_usage(dest) < 2 * MIB
    # control: the same tree under a cap that admits it is copied whole, holes and all
    (again := tmp_path / "again").mkdir()
    report = stage_tree(tree, again, limits(stage_max_mib=256))
    assert report.bytes == 200 * MIB + len("pub fn f() {}\n")
    assert (again / "holes.bin").stat().st_size == 200 * MIB


def test_a_file_that_grows_past_the_cap_while_copied_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The cap is checked against what is read, not only the size fstat saw.
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.rs").write_bytes(b"x" * (2 * MIB))
    real_fstat = os.fstat

    def shrunk(fd: int) -> os.stat_result:  # fake: a file cannot be grown on cue mid-copy
        st = real_fstat(fd)
        if st.st_size == 2 * MIB:
            return os.stat_result((*st[:6], 10, *st[7:]))
        return st

    monkeypatch.setattr(share_image.os, "fstat", shrunk)
    with pytest.raises(errors.TreeTooLarge):
        stage_tree(tree, staged(tmp_path), limits(stage_max_mib=1))
    monkeypatch.undo()
    (ok := tmp_path / "ok").mkdir()
    assert stage_tree(tree, ok, limits(stage_max_mib=3)).bytes == 2 * MIB  # control


def test_the_number_of_entries_is_capped(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    for index in range(50):
        (tree / f"f{index}.rs").write_text("//\n")
    with pytest.raises(errors.TreeTooLarge) as refused:
        stage_tree(tree, staged(tmp_path), limits(stage_max_files=20))
    assert refused.value.setting == "stage_max_files"
    assert "more than 20 files" in refused.value.guidance().summary
    (ok := tmp_path / "ok").mkdir()
    assert stage_tree(tree, ok, limits(stage_max_files=50)).files == 50  # control


def nest(root: Path, depth: int) -> None:
    """`depth` directories named d, one in the other, and x.rs at the bottom (no
    recursion: pathlib's mkdir(parents=True) itself recurses past Python's limit)."""
    fds = [os.open(root, os.O_RDONLY | os.O_DIRECTORY)]
    try:
        for _ in range(depth):
            os.mkdir("d", dir_fd=fds[-1])
            fds.append(os.open("d", os.O_RDONLY | os.O_DIRECTORY, dir_fd=fds[-1]))
        os.close(os.open("x.rs", os.O_WRONLY | os.O_CREAT, 0o644, dir_fd=fds[-1]))
    finally:
        for fd in fds:
            os.close(fd)


def unnest(root: Path, depth: int) -> None:
    for level in range(depth, -1, -1):
        inner = root / ("d/" * level)
        if level == depth:
            (inner / "x.rs").unlink()
        else:
            (inner / "d").rmdir()


def remove_deep(root: Path) -> None:
    """Remove `root` however deep it nests, without recursion: each directory's entries are
    moved up into `root` and it is removed there. pytest's tmp cleanup (shutil.rmtree,
    recursive on Python 3.11) raises RecursionError on a 1,500-deep tree."""
    top = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    moved = 0
    try:
        while names := os.listdir(top):
            for name in names:
                if not stat.S_ISDIR(os.stat(name, dir_fd=top, follow_symlinks=False).st_mode):
                    os.unlink(name, dir_fd=top)
                    continue
                os.chmod(name, 0o700, dir_fd=top)
                inner = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=top)
                try:
                    for entry in os.listdir(inner):
                        moved += 1
                        os.rename(entry, f".up{moved}", src_dir_fd=inner, dst_dir_fd=top)
                finally:
                    os.close(inner)
                os.rmdir(name, dir_fd=top)
    finally:
        os.close(top)
    os.rmdir(root)


def test_deep_nesting_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    nest(tree, 1500)  # 1,500 levels raised RecursionError (exit 4)
    dest = staged(tmp_path)
    try:
        with pytest.raises(errors.TreeTooLarge) as refused:
            stage_tree(tree, dest)
    finally:
        # Were the depth cap gone, the copy would be ~1,000 deep: remove both here, or
        # pytest's own cleanup of tmp_path fails on them.
        unnest(tree, 1500)
        remove_deep(dest)
    default = VmSettings().stage_max_depth
    assert refused.value.setting == "stage_max_depth" and refused.value.limit == default
    assert f"nested more than {default} deep" in refused.value.guidance().summary
    # control: nesting at the cap is copied whole
    nest(tree, default)
    (ok := tmp_path / "ok").mkdir()
    report = stage_tree(tree, ok)
    assert report.dirs == default and report.files == 1
    assert (ok / ("d/" * default) / "x.rs").is_file()


def test_past_the_deadline_the_copy_stops(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.rs").write_text("//\n")
    late = StageLimits.of(VmSettings(), deadline=time.monotonic() - 1, deadline_s=42)
    with pytest.raises(errors.DeadlineExceeded) as refused:
        stage_tree(tree, staged(tmp_path), late)
    assert "42 s" in refused.value.guidance().summary
    in_time = StageLimits.of(VmSettings(), deadline=time.monotonic() + 60, deadline_s=60)
    (ok := tmp_path / "ok").mkdir()
    assert stage_tree(tree, ok, in_time).files == 1  # control


STAGE_IN_NAMESPACE = """
import json, os, subprocess, sys
from pathlib import Path
from roteiro_py.vm.disks.share_image import stage_tree
tree, dest = Path(sys.argv[1]), Path(sys.argv[2])
subprocess.run(["mount", "-t", "tmpfs", "none", str(tree / "mnt")], check=True)
(tree / "mnt" / "other.rs").write_text("on another filesystem\\n")
report = stage_tree(tree, dest)
print(json.dumps({"skipped": report.skipped, "files": report.files}))
"""


def test_other_filesystems_are_left_out_and_reported(tmp_path: Path) -> None:
    if not shutil.which("unshare") or subprocess.run(
            ["unshare", "-rm", "true"], capture_output=True, check=False).returncode != 0:
        pytest.skip("no mount namespace here to put a mount point inside a tree")
    tree = tmp_path / "tree"
    (tree / "mnt").mkdir(parents=True)
    (tree / "same.rs").write_text("same filesystem\n")
    dest = staged(tmp_path)
    done = subprocess.run(["unshare", "-rm", sys.executable, "-c", STAGE_IN_NAMESPACE,
                           str(tree), str(dest)], capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[4])})
    result = json.loads(done.stdout)
    assert result["skipped"] == [["mnt/", "other filesystem"]]
    assert (dest / "same.rs").read_text() == "same filesystem\n"  # control: same fs copied
    assert not (dest / "mnt").exists()


def deny_open(monkeypatch: pytest.MonkeyPatch, denied: set[str]) -> None:
    """Fake EACCES for some names: the tests run as root, who reads any file."""
    real_open = os.open

    def deny(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        if path in denied:
            raise PermissionError(13, "Permission denied", path)
        return real_open(path, flags, mode, dir_fd=dir_fd)

    monkeypatch.setattr(share_image.os, "open", deny)


def package(tree: Path) -> Path:
    (tree / "crate" / "src" / "util").mkdir(parents=True)
    (tree / "crate" / "Cargo.toml").write_text("[package]\nname = 'c'\n")
    (tree / "crate" / "src" / "lib.rs").write_text("mod util;\n")
    (tree / "crate" / "src" / "util" / "secret.rs").write_text("// unreadable\n")
    (tree / "docs").mkdir()
    (tree / "docs" / "notes.md").write_text("unreadable, and nothing cargo reads\n")
    (tree / "Cargo.lock").write_text("version = 3\n")
    return tree


@pytest.mark.parametrize(("denied", "needed"), [
    ("Cargo.toml", "crate/Cargo.toml"),
    ("Cargo.lock", "Cargo.lock"),
    ("secret.rs", "crate/src/util/secret.rs"),
    ("util", "crate/src/util/"),
])
def test_what_cargo_needs_and_could_not_be_copied_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, denied: str, needed: str) -> None:
    tree = package(tmp_path / "tree")
    deny_open(monkeypatch, {denied})
    with pytest.raises(errors.TreeIncomplete) as refused:
        stage_tree(tree, staged(tmp_path))
    assert refused.value.left_out == [(needed, "unreadable")]
    assert f"{needed} (unreadable)" in refused.value.guidance().details


def test_what_cargo_does_not_need_is_left_out_and_said(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    from roteiro_py.lint import report_left_out

    tree = package(tmp_path / "tree")
    os.mkfifo(tree / "crate" / "pipe")
    deny_open(monkeypatch, {"notes.md"})
    dest = staged(tmp_path)
    report = stage_tree(tree, dest)
    monkeypatch.undo()
    assert sorted(report.left_out()) == [("crate/pipe", "special"), ("docs/notes.md", "unreadable")]
    assert (dest / "crate" / "src" / "util" / "secret.rs").is_file()  # control: copied
    job = JobOutcome(steps=(), isolation=None, completed=True, boot_seconds=None,  # type: ignore[arg-type]
                     failure=None, console=b"",
                     staged=(StagedShare(tree, dest, tuple(report.left_out())),))
    report_left_out(job)
    err = capsys.readouterr().err
    assert f"2 entries of {tree} were not copied for the VM" in err
    assert "docs/notes.md (unreadable)" in err and "crate/pipe (special)" in err


def test_a_kept_staged_copy_outlives_the_image_and_is_the_callers(tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "a.rs").write_text("fn a() {}\n")
    with share_image.staging_area() as area:
        with share_image.tree_image(tree, keep=area / "share0") as (image, _):
            assert image.is_file()
        assert not image.exists()  # the image is gone with its block ...
        assert (area / "share0" / "a.rs").read_text() == "fn a() {}\n"  # ... the copy is kept
    assert not area.exists()


def test_a_target_swapped_for_a_link_is_not_judged_by_where_the_link_points(tmp_path: Path) -> None:
    # The state a race between the lstat and the exclusion check produces, set up directly:
    # `target` was a directory when listed, and is now a link to a cargo target elsewhere.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    tree = tmp_path / "tree"
    (tree / "real-target").mkdir(parents=True)
    (tree / "target").symlink_to(elsewhere)
    as_listed = os.stat(tree / "real-target")  # what the lstat saw: a directory
    fd = os.open(tree, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert not share_image.excluded(fd, "target", as_listed)
        os.rename(tree / "target", tree / "link")
        os.rename(tree / "real-target", tree / "target")
        (tree / "target" / "CACHEDIR.TAG").write_text("Signature\n")
        assert share_image.excluded(fd, "target", as_listed)  # control: a real target is
    finally:
        os.close(fd)
