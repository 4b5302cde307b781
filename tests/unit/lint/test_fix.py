"""lint/fix.py: the tree is written only where the guest's bytes still are, never through
a link, all or nothing; and cargo fix's VCS gate, read from .git as data."""

from __future__ import annotations

import errno
import json
import os
import shutil
import subprocess
from collections.abc import Callable
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from roteiro_py.clippy.fix import FileFix
from roteiro_py.errors import DirtyTreeForFix, FixTargetUnsafe, HostileSuggestion, NoVcsForFix
from roteiro_py.lint.fix import FixOptions, FixSummary, check_vcs, go_again, run_fix, write_round
from roteiro_py.lint.tree import Tree
from roteiro_py.process.sandbox import Command
from roteiro_py.vm.api import Isolation, JobOutcome, StagedShare, VmOutcome


def _same(path: str) -> str:
    return path


def _tree(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    (root / "src").mkdir(parents=True)
    (root / "src" / "lib.rs").write_bytes(b"fn a() { return 1; }\n")
    (root / "src" / "main.rs").write_bytes(b"fn main() {}\n")
    return root


def test_a_round_is_written_in_place_keeping_each_file_mode(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    os.chmod(root / "src" / "lib.rs", 0o640)
    fix = FileFix("src/lib.rs", b"fn a() { return 1; }\n", b"fn a() { 1 }\n", applied=1)
    assert write_round(root, [fix], _same) == 1
    assert (root / "src" / "lib.rs").read_bytes() == b"fn a() { 1 }\n"
    assert (root / "src" / "lib.rs").stat().st_mode & 0o777 == 0o640
    assert sorted(p.name for p in (root / "src").iterdir()) == ["lib.rs", "main.rs"]  # no temp left


def test_a_file_changed_since_the_lint_refuses_the_round_and_nothing_is_written(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    (root / "src" / "main.rs").write_bytes(b"fn main() { edited(); }\n")
    fixes = [FileFix("src/lib.rs", b"fn a() { return 1; }\n", b"fn a() { 1 }\n", applied=1),
             FileFix("src/main.rs", b"fn main() {}\n", b"fn main() { x }\n", applied=1)]
    with pytest.raises(FixTargetUnsafe, match="src/main.rs: it changed since the lint staged it"):
        write_round(root, fixes, _same)
    assert (root / "src" / "lib.rs").read_bytes() == b"fn a() { return 1; }\n"  # the first, untouched
    # control: the same round on the unchanged tree is written
    (root / "src" / "main.rs").write_bytes(b"fn main() {}\n")
    assert write_round(root, fixes, _same) == 2


def test_a_round_is_written_whole_or_not_at_all_when_a_write_fails(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A file name near NAME_MAX (the tree chooses it) once made the temporary file beside
    it too long to create, after the round's first file was already replaced: half a
    round written, and a traceback. Every file is now written aside before any is renamed."""
    root = _tree(tmp_path)
    long = "b" * 240 + ".rs"
    (root / "src" / long).write_bytes(b"fn b() { return 2; }\n")
    fixes = [FileFix("src/lib.rs", b"fn a() { return 1; }\n", b"fn a() { 1 }\n", applied=1),
             FileFix(f"src/{long}", b"fn b() { return 2; }\n", b"fn b() { 2 }\n", applied=1)]
    assert write_round(root, fixes, _same) == 2
    assert (root / "src" / "lib.rs").read_bytes() == b"fn a() { 1 }\n"
    assert (root / "src" / long).read_bytes() == b"fn b() { 2 }\n"
    assert sorted(p.name for p in (root / "src").iterdir()) == sorted([long, "lib.rs", "main.rs"])
    # and a write that fails (the disk full on the second file: fault injected) leaves
    # every file of the round as it was, and no temporary file behind
    (root / "src" / "lib.rs").write_bytes(b"fn a() { return 1; }\n")
    (root / "src" / long).write_bytes(b"fn b() { return 2; }\n")
    synced = []

    def fsync(fd: int) -> None:
        synced.append(fd)
        if len(synced) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        real_fsync(fd)

    real_fsync = os.fsync
    monkeypatch.setattr(os, "fsync", fsync)
    with pytest.raises(FixTargetUnsafe, match="No space left"):
        write_round(root, fixes, _same)
    monkeypatch.undo()
    assert (root / "src" / "lib.rs").read_bytes() == b"fn a() { return 1; }\n"
    assert sorted(p.name for p in (root / "src").iterdir()) == sorted([long, "lib.rs", "main.rs"])


def test_a_link_on_the_way_or_at_the_end_is_never_written_through(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "lib.rs").write_bytes(b"fn a() { return 1; }\n")
    fix = FileFix("linked/lib.rs", b"fn a() { return 1; }\n", b"pwned\n", applied=1)
    (root / "linked").symlink_to(outside)
    with pytest.raises(FixTargetUnsafe, match="linked is not a directory reached without a link"):
        write_round(root, [fix], _same)
    (root / "src" / "link.rs").symlink_to(outside / "lib.rs")
    with pytest.raises(FixTargetUnsafe, match="symbolic link"):
        write_round(root, [FileFix("src/link.rs", fix.original, fix.fixed)], _same)
    assert (outside / "lib.rs").read_bytes() == b"fn a() { return 1; }\n"


@pytest.mark.parametrize("path", ["../ws2/src/lib.rs", "src/../src/lib.rs", "/etc/passwd", "src//lib.rs", ""])
def test_a_path_that_is_not_plain_is_refused(tmp_path: Path, path: str) -> None:
    root = _tree(tmp_path)
    with pytest.raises(FixTargetUnsafe, match="not a plain path"):
        write_round(root, [FileFix(path, b"fn a() { return 1; }\n", b"x\n")], _same)


def test_another_round_only_when_one_clashed_and_another_applied_at_most_four() -> None:
    """cargo's rustfix_crate: retry while progress is made on a file with errors, 4 rounds."""
    summary = FixSummary(rounds=1)
    clashed = [FileFix("f", b"", b"", applied=1, conflicts=1)]
    assert go_again(clashed, summary)
    assert not go_again([FileFix("f", b"", b"", applied=1)], summary)
    assert not go_again([FileFix("f", b"", b"", applied=0, conflicts=1)], summary)
    assert not go_again(clashed, FixSummary(rounds=4))


def _git(root: Path, *args: str) -> None:
    """git on the test's own fixture repository (never in the product)."""
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=root, check=True,
                   capture_output=True, timeout=60)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    root = _tree(tmp_path)
    _git(root, "init", "-q")
    _git(root, "add", ".")
    _git(root, "commit", "-qm", "c")
    return root


def test_no_vcs_is_refused_unless_allow_no_vcs(tmp_path: Path) -> None:
    root = _tree(tmp_path)
    with pytest.raises(NoVcsForFix, match="No VCS found for .*ws"):
        check_vcs(root, FixOptions())
    check_vcs(root, FixOptions(allow_no_vcs=True))
    check_vcs(root, FixOptions(mode="patch"))  # writes nothing: no gate


def test_a_clean_repository_passes(repo: Path) -> None:
    check_vcs(repo, FixOptions())


def test_a_dirty_tree_is_refused_listing_each_file_as_cargo_does(repo: Path) -> None:
    (repo / "src" / "lib.rs").write_bytes(b"changed\n")
    (repo / "new.rs").write_bytes(b"untracked\n")
    (repo / "src" / "main.rs").write_bytes(b"staged\n")
    _git(repo, "add", "src/main.rs")
    with pytest.raises(DirtyTreeForFix) as refused:
        check_vcs(repo, FixOptions())
    assert refused.value.guidance().details == (
        "* new.rs (dirty)", "* src/lib.rs (dirty)", "* src/main.rs (staged)")
    # --allow-staged: only the dirty ones remain; --allow-dirty allows both (cargo 1.95)
    with pytest.raises(DirtyTreeForFix) as refused:
        check_vcs(repo, FixOptions(allow_staged=True))
    assert refused.value.staged == () and refused.value.dirty == ("new.rs", "src/lib.rs")
    check_vcs(repo, FixOptions(allow_dirty=True))


def test_only_staged_changes_pass_with_allow_staged(repo: Path) -> None:
    (repo / "src" / "main.rs").write_bytes(b"staged\n")
    _git(repo, "add", "src/main.rs")
    with pytest.raises(DirtyTreeForFix):
        check_vcs(repo, FixOptions())
    check_vcs(repo, FixOptions(allow_staged=True))


def test_a_file_staged_then_changed_again_is_dirty_as_in_cargo(repo: Path) -> None:
    (repo / "src" / "main.rs").write_bytes(b"staged\n")
    _git(repo, "add", "src/main.rs")
    (repo / "src" / "main.rs").write_bytes(b"and changed again\n")
    with pytest.raises(DirtyTreeForFix) as refused:
        check_vcs(repo, FixOptions())
    assert (refused.value.dirty, refused.value.staged) == (("src/main.rs",), ())
    with pytest.raises(DirtyTreeForFix):
        check_vcs(repo, FixOptions(allow_staged=True))


# -- the rounds, with a stand-in for the VM: the real loop, writer and engine, and a guest
# -- whose streams are scripted (a hostile guest cannot be made on demand by a real one)

NOW = datetime.now(UTC)
ISOLATION = Isolation("qemu", "tcg", False, "tcg")


def _stream(*suggestions: tuple[int, int, str]) -> bytes:
    lines = []
    for start, end, text in suggestions:
        span = {"file_name": "src/lib.rs", "byte_start": start, "byte_end": end, "line_start": 1,
                "line_end": 1, "column_start": 1, "column_end": 1, "is_primary": True,
                "suggested_replacement": text, "suggestion_applicability": "MachineApplicable"}
        lines.append(json.dumps({"reason": "compiler-message", "package_id": "p", "target": {"name": "p"},
                                 "message": {"message": "m", "level": "warning", "spans": [], "children": [
                                     {"level": "help", "message": "h", "spans": [span], "children": []}]}}))
    return "\n".join(lines).encode()


class ScriptedGuest:
    """Each lint: stage a copy of the workspace (as share_image.py does), answer with the
    next scripted stream, and hand the job to `inspect` while the copy exists."""

    def __init__(self, root: Path, tmp: Path, streams: list[bytes], after_staging: Callable[[], None] = lambda: None):
        self.root, self.tmp, self.streams, self.after_staging = root, tmp, streams, after_staging
        self.lints = 0

    def __call__(self, inspect: Callable[[JobOutcome, Tree], None] | None) -> tuple[Any, Any]:
        staged = self.tmp / f"staged-{self.lints}"
        shutil.copytree(self.root, staged)
        stream = self.streams[min(self.lints, len(self.streams) - 1)]
        self.lints += 1
        self.after_staging()
        step = VmOutcome(command=Command("x", (), Path("/tmp"), {}, timeout=1), exit=0, stdout=stream,
                         stderr=b"", timed_out=False, truncated=False, duration=1.0, started=NOW, ended=NOW,
                         isolation=ISOLATION)
        job = JobOutcome(steps=(step, step, step), isolation=ISOLATION, completed=True, boot_seconds=1.0,
                         failure=None, console=b"", staged=(StagedShare(self.root, staged),))
        if inspect is not None:
            inspect(job, Tree(asked=self.root, workspace=self.root, repo_root=self.root))
        return f"report {self.lints}", "settings"


def _crate(tmp_path: Path, lib: bytes) -> Path:
    root = tmp_path / "crate"
    (root / "src").mkdir(parents=True)
    (root / "Cargo.toml").write_text('[package]\nname = "p"\nversion = "0.1.0"\n')
    (root / "src" / "lib.rs").write_bytes(lib)
    return root


def test_an_overlap_is_retried_in_a_second_round_then_one_lint_reports_what_remains(tmp_path: Path) -> None:
    """Round 1: two suggestions overlap, the later one is applied, the other clashes;
    round 2 lints the written tree and applies what it now suggests; no clash: the last
    lint is the report's. Three lints, two rounds, two suggestions (cargo's loop)."""
    root = _crate(tmp_path, b"abcdef\n")
    guest = ScriptedGuest(root, tmp_path, [_stream((0, 3, "X"), (2, 5, "Y")), _stream((0, 2, "Z")), b""])
    report, _, summary = run_fix(root, FixOptions(allow_no_vcs=True), guest)
    assert (root / "src" / "lib.rs").read_bytes() == b"ZYf\n"
    assert (guest.lints, summary.rounds, summary.applied, report) == (3, 2, 2, "report 3")


def test_a_hostile_suggestion_in_a_round_writes_nothing(tmp_path: Path) -> None:
    root = _crate(tmp_path, b"abcdef\n")
    guest = ScriptedGuest(root, tmp_path, [_stream((0, 1, "fine"), (3, 4000, "past the end"))])
    with pytest.raises(HostileSuggestion, match="src/lib.rs.*ends past the file's 7 bytes"):
        run_fix(root, FixOptions(allow_no_vcs=True), guest)
    assert (root / "src" / "lib.rs").read_bytes() == b"abcdef\n" and guest.lints == 1


def test_a_file_edited_while_the_vm_linted_is_not_overwritten(tmp_path: Path) -> None:
    root = _crate(tmp_path, b"abcdef\n")

    def edit() -> None:
        (root / "src" / "lib.rs").write_bytes(b"the user's edit\n")

    guest = ScriptedGuest(root, tmp_path, [_stream((0, 1, "X"))], after_staging=edit)
    with pytest.raises(FixTargetUnsafe, match="changed since the lint staged it"):
        run_fix(root, FixOptions(allow_no_vcs=True), guest)
    assert (root / "src" / "lib.rs").read_bytes() == b"the user's edit\n"


def test_patch_is_one_round_and_writes_nothing(tmp_path: Path) -> None:
    root = _crate(tmp_path, b"abcdef\n")
    guest = ScriptedGuest(root, tmp_path, [_stream((0, 3, "X"))])
    _, _, summary = run_fix(root, FixOptions(mode="patch"), guest)
    assert summary.patch == "--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1 +1 @@\n-abcdef\n+Xdef\n"
    assert (root / "src" / "lib.rs").read_bytes() == b"abcdef\n" and guest.lints == 1


def _error(target: str = "p") -> bytes:
    return json.dumps({"reason": "compiler-message", "package_id": "p", "target": {"name": target},
                       "message": {"message": "mismatched types", "level": "error", "spans": [],
                                   "children": []}}).encode()


def test_edits_that_break_the_build_are_backed_out_as_cargo_fix_does(tmp_path: Path) -> None:
    """The lint after the edits has an error the first had not: every file is written back
    and the tree as it was is linted for the report (round, check, re-lint: 3 lints)."""
    root = _crate(tmp_path, b"abcdef\n")
    guest = ScriptedGuest(root, tmp_path, [_stream((0, 1, "X")), _error(), b""])
    report, _, summary = run_fix(root, FixOptions(allow_no_vcs=True), guest)
    assert (root / "src" / "lib.rs").read_bytes() == b"abcdef\n"
    assert summary.backed_out and "backed out" in summary.line("apply")
    assert (guest.lints, report) == (3, "report 3")
    # control: an error the first lint already had (another target's) is not the edits' doing
    root2 = _crate(tmp_path / "2", b"abcdef\n")
    guest = ScriptedGuest(root2, tmp_path / "2", [_stream((0, 1, "X")) + b"\n" + _error("bin"), _error("bin")])
    _, _, summary = run_fix(root2, FixOptions(allow_no_vcs=True), guest)
    assert (root2 / "src" / "lib.rs").read_bytes() == b"Xbcdef\n"
    assert not summary.backed_out and guest.lints == 2


def test_a_back_out_restores_every_file_it_can_even_past_one_the_user_changed(tmp_path: Path) -> None:
    """Two files written, the edits break the build, and meanwhile the user edited the
    first: it is left as the user has it (never overwritten), and the second is still put
    back as it was; the summary names the file left."""
    root = _crate(tmp_path, b"abcdef\n")
    (root / "src" / "main.rs").write_bytes(b"fn main() {}\n")
    spans = [{"file_name": name, "byte_start": 0, "byte_end": 1, "line_start": 1, "line_end": 1,
              "column_start": 1, "column_end": 2, "is_primary": True, "suggested_replacement": "X",
              "suggestion_applicability": "MachineApplicable"} for name in ("src/lib.rs", "src/main.rs")]
    two = "\n".join(json.dumps({"reason": "compiler-message", "package_id": "p", "target": {"name": "p"},
                                "message": {"message": "m", "level": "warning", "spans": [], "children": [
                                    {"level": "help", "message": "h", "spans": [span], "children": []}]}})
                    for span in spans).encode()
    lints = []

    def user_edits_during_the_check() -> None:
        lints.append(1)
        if len(lints) == 2:
            (root / "src" / "lib.rs").write_bytes(b"the user's edit\n")

    guest = ScriptedGuest(root, tmp_path, [two, _error(), b""], after_staging=user_edits_during_the_check)
    _, _, summary = run_fix(root, FixOptions(allow_no_vcs=True), guest)
    assert (root / "src" / "lib.rs").read_bytes() == b"the user's edit\n"
    assert (root / "src" / "main.rs").read_bytes() == b"fn main() {}\n"
    assert summary.backed_out and "src/lib.rs" in summary.line("apply")


def test_the_patch_reaches_a_pipe_byte_for_byte_even_where_the_file_is_not_utf8(tmp_path: Path) -> None:
    """The diff of a file holding a byte that is not UTF-8 (the guest may suggest in any
    file it saw) carries it as patch(1) needs it, not as a UnicodeEncodeError traceback."""
    import sys
    root = _crate(tmp_path, b"// caf\xe9\nabcdef\n")
    guest = ScriptedGuest(root, tmp_path, [_stream((8, 11, "X"))])
    _, _, summary = run_fix(root, FixOptions(mode="patch"), guest)
    probe = ("import sys; from roteiro_py.lint.fix import print_patch; "
             "print_patch(sys.stdin.buffer.read().decode('utf-8', 'surrogateescape'))")
    printed = subprocess.run([sys.executable, "-c", probe], input=summary.patch.encode("utf-8", "surrogateescape"),
                             capture_output=True, timeout=60, cwd=Path(__file__).parents[3],
                             env={**os.environ, "PYTHONIOENCODING": "utf-8", "PYTHONUTF8": "1"})
    assert printed.returncode == 0, printed.stderr
    assert printed.stdout == b"--- a/src/lib.rs\n+++ b/src/lib.rs\n@@ -1,2 +1,2 @@\n // caf\xe9\n-abcdef\n+Xdef\n"
