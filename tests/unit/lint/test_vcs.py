"""lint/vcs.py: the tree's git state read as data equals what `git status` says, and
reading it runs nothing the repository's configuration or the tree chooses.

git itself runs here only as the test's oracle and to build fixtures, in repositories of
the test's own, with a HOME and configuration of the test's own."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from roteiro_py import errors
from roteiro_py.lint import vcs


@pytest.fixture(autouse=True)
def own_home(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path_factory.mktemp("home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.delenv("GIT_CONFIG_GLOBAL", raising=False)
    (home / ".gitconfig").write_text("[user]\n\tname = t\n\temail = t@example.invalid\n"
                                     "[init]\n\tdefaultBranch = main\n")


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True,
                          text=True).stdout


def new_repo(path: Path, files: dict[str, str] | None = None) -> Path:
    path.mkdir(parents=True, exist_ok=True)
    git(path, "init", "-q")
    for name, text in (files or {"Cargo.toml": "[package]\nname = \"a\"\n", "src/lib.rs": "\n"}).items():
        (path / name).parent.mkdir(parents=True, exist_ok=True)
        (path / name).write_text(text)
    git(path, "add", "-A")
    git(path, "commit", "-qm", "first")
    return path


def oracle(repo: Path) -> tuple[set[str], set[str], set[str]]:
    """(staged, unstaged, untracked) as `git status --porcelain -z --untracked-files=all`."""
    out = git(repo, "status", "--porcelain=v1", "-z", "--untracked-files=all", "--no-renames")
    staged, unstaged, untracked = set(), set(), set()
    for record in filter(None, out.split("\0")):
        x, y, path = record[0], record[1], record[3:]
        if x == "?":
            untracked.add(path)
            continue
        if x != " ":
            staged.add(path)
        if y != " ":
            unstaged.add(path)
    return staged, unstaged, untracked


def ours(repo: Path) -> tuple[set[str], set[str], set[str]]:
    state = vcs.git_state(repo)
    assert state is not None
    return set(state.staged), set(state.unstaged), set(state.untracked)


def test_a_clean_checkout_names_its_commit_and_tree(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r")
    state = vcs.git_state(repo / "src")  # found from below, as git finds it
    assert state is not None and state.clean
    assert state.root == repo
    assert state.commit == git(repo, "rev-parse", "HEAD").strip()
    assert state.tree == git(repo, "rev-parse", "HEAD^{tree}").strip()


def test_no_repository_is_none(tmp_path: Path) -> None:
    (tmp_path / "plain").mkdir()
    assert vcs.git_state(tmp_path / "plain") is None


def test_each_kind_of_change_is_named(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", {"a.rs": "a\n", "b.rs": "b\n", "c.rs": "c\n", ".gitignore": "target/\n*.log\n"})
    (repo / "a.rs").write_text("a changed\n")           # unstaged
    (repo / "b.rs").write_text("b staged\n")
    git(repo, "add", "b.rs")                             # staged
    (repo / "c.rs").unlink()                             # deleted: unstaged
    (repo / "new").mkdir()
    (repo / "new" / "x.rs").write_text("x\n")           # untracked, in an untracked dir
    (repo / "target").mkdir()
    (repo / "target" / "junk").write_text("j\n")        # ignored
    (repo / "run.log").write_text("l\n")                # ignored
    state = vcs.git_state(repo)
    assert state is not None and not state.clean
    assert (set(state.staged), set(state.unstaged), set(state.untracked)) == oracle(repo)
    assert state.unstaged == ("a.rs", "c.rs") and state.staged == ("b.rs",)
    assert state.untracked == ("new/x.rs",)


def test_unborn_branch_has_no_commit_and_everything_staged(tmp_path: Path) -> None:
    repo = tmp_path / "r"
    repo.mkdir()
    git(repo, "init", "-q")
    (repo / "a.rs").write_text("a\n")
    git(repo, "add", "a.rs")
    state = vcs.git_state(repo)
    assert state is not None
    assert state.commit is None and state.tree is None and state.staged == ("a.rs",)


#: Operations on a repository of three files, each a step a user takes.
_OPS = st.lists(st.tuples(st.sampled_from(["edit", "stage", "delete", "add-new", "ignore-new", "restore",
                                           "commit", "touch", "chmod", "to-link", "dir-to-link"]),
                          st.sampled_from(["a.rs", "src/b.rs", "src/c.rs", "d/e.rs"])),
                max_size=8)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(ops=_OPS)
def test_any_sequence_of_changes_reads_as_git_status_does(tmp_path_factory: pytest.TempPathFactory,
                                                          ops: list[tuple[str, str]]) -> None:
    repo = new_repo(tmp_path_factory.mktemp("seq") / "r",
                    {"a.rs": "a\n", "src/b.rs": "b\n", "src/c.rs": "c\n", ".gitignore": "*.tmp\n"})
    for op, name in ops:
        path = repo / name
        if op == "edit":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(path.read_text() + "more\n" if path.exists() else "new\n")
        elif op == "stage":  # git refuses some (a path beyond a link): then nothing is staged
            subprocess.run(["git", "-C", str(repo), "add", "-A", "--", name], capture_output=True)
        elif op == "delete" and path.exists():
            path.unlink()
        elif op == "add-new":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".new.rs").write_text("n\n")
        elif op == "ignore-new":
            path.parent.mkdir(parents=True, exist_ok=True)
            path.with_suffix(".tmp").write_text("t\n")
        elif op == "restore":
            git(repo, "checkout", "-q", "HEAD", "--", ".")
        elif op == "commit":
            git(repo, "add", "-A")
            git(repo, "commit", "-q", "--allow-empty", "-m", "c")
        elif op == "touch" and path.exists():
            os.utime(path, (1, 1))  # the stat changes, the content does not: not a change
        elif op == "chmod" and path.is_file():
            path.chmod(path.stat().st_mode ^ 0o111)
        elif op == "to-link" and path.is_file() and not path.is_symlink():
            text = path.read_text()
            path.unlink()
            path.symlink_to(text.strip() or "x")
        elif op == "dir-to-link" and path.parent != repo and path.parent.is_dir() \
                and not path.parent.is_symlink():
            moved = repo / f"moved-{path.parent.name}"
            if not moved.exists():
                path.parent.rename(moved)
                path.parent.symlink_to(moved.name)  # the same files, reached through a link
    state = vcs.git_state(repo)
    assert state is not None
    assert ours(repo) == oracle(repo)
    assert state.clean == (oracle(repo) == (set(), set(), set()))
    assert state.commit == git(repo, "rev-parse", "HEAD").strip()


def test_reading_runs_no_filter_fsmonitor_or_hook_the_repository_names(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", {"a.rs": "a\n", ".gitattributes": "* filter=evil\n"})
    ran = tmp_path / "ran"
    ran.mkdir()
    script = tmp_path / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {ran}/$1\ncat\n")
    script.chmod(0o755)
    git(repo, "config", "filter.evil.clean", f"{script} filter")
    git(repo, "config", "filter.evil.smudge", f"{script} smudge")
    git(repo, "config", "core.fsmonitor", f"{script} fsmonitor")
    for hook in ("post-index-change", "pre-commit", "post-checkout"):
        (repo / ".git" / "hooks" / hook).write_text(f"#!/bin/sh\ntouch {ran}/{hook}\n")
        (repo / ".git" / "hooks" / hook).chmod(0o755)
    (repo / "a.rs").write_text("a changed\n")
    state = vcs.git_state(repo)
    assert state is not None and state.unstaged == ("a.rs",)
    assert sorted(p.name for p in ran.iterdir()) == []
    # control arm: git itself runs what was planted, so the plant is live
    git(repo, "status", "--porcelain")
    assert sorted(p.name for p in ran.iterdir()) != []


def test_a_tracked_file_become_a_fifo_is_changed_and_never_opened_for_reading(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r", {"a.rs": "a\n", "b.rs": "b\n"})
    (repo / "a.rs").unlink()
    os.mkfifo(repo / "a.rs")  # a blocking open would hang here
    state = vcs.git_state(repo)
    assert state is not None and state.unstaged == ("a.rs",)
    assert set(state.unstaged) == oracle(repo)[1]


def test_a_worktree_is_read_through_its_gitdir_file(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r")
    git(repo, "worktree", "add", "-q", str(tmp_path / "wt"), "-b", "side")
    (tmp_path / "wt" / "src" / "lib.rs").write_text("changed\n")
    state = vcs.git_state(tmp_path / "wt")
    assert state is not None and state.root == tmp_path / "wt"
    assert state.unstaged == ("src/lib.rs",) and state.commit == git(repo, "rev-parse", "HEAD").strip()


def test_an_index_past_its_bound_is_refused_never_guessed_clean(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repo(tmp_path / "r")
    size = (repo / ".git" / "index").stat().st_size
    monkeypatch.setattr(vcs, "MAX_INDEX_BYTES", size - 1)
    with pytest.raises(errors.VcsUnreadable, match="index"):
        vcs.git_state(repo)
    monkeypatch.setattr(vcs, "MAX_INDEX_BYTES", size)  # control: at the bound it reads
    assert vcs.git_state(repo) is not None


def test_a_corrupt_index_or_missing_object_is_refused(tmp_path: Path) -> None:
    repo = new_repo(tmp_path / "r")
    index = repo / ".git" / "index"
    good = index.read_bytes()
    index.write_bytes(good[:20] + b"\xff" * 40 + good[60:])
    with pytest.raises(errors.VcsUnreadable) as refused:
        vcs.git_state(repo)
    assert str(repo) in str(refused.value)
    index.write_bytes(good)
    head_tree = git(repo, "rev-parse", "HEAD^{tree}").strip()
    (repo / ".git" / "objects" / head_tree[:2] / head_tree[2:]).unlink()
    with pytest.raises(errors.VcsUnreadable):
        vcs.git_state(repo)


def test_long_lists_are_cut_and_say_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    repo = new_repo(tmp_path / "r")
    for n in range(7):
        (repo / f"u{n}.rs").write_text("u\n")
    monkeypatch.setattr(vcs, "MAX_LISTED", 3)
    state = vcs.git_state(repo)
    assert state is not None and state.truncated and len(state.untracked) == 3 and not state.clean


def test_a_name_in_the_tree_never_reaches_stderr_raw_through_dulwichs_log(tmp_path: Path) -> None:
    """dulwich logs "Ignoring <path>: it is a symbolic link" for a linked .gitignore, with
    the tree's path as it is: a directory named with ESC sequences rewrote the terminal
    (measured through `lint clippy --fix`, before its refusal). Its log is ours to keep quiet."""
    import sys
    repo = new_repo(tmp_path / "repo")
    evil = repo / "evil\x1b]0;PWNED\x07\x1b[2J"
    evil.mkdir()
    (evil / ".gitignore").symlink_to("/dev/null")
    (evil / "a.rs").write_text("x\n")
    probe = ("import sys; from pathlib import Path; from roteiro_py.lint.vcs import git_state; "
             "git_state(Path(sys.argv[1]))")
    result = subprocess.run([sys.executable, "-c", probe, str(repo)], capture_output=True, timeout=60,
                            cwd=Path(__file__).parents[3], check=False)
    assert result.returncode == 0, result.stderr
    assert b"\x1b" not in result.stderr
    state = vcs.git_state(repo)
    assert state is not None and f"{evil.name}/a.rs" in state.untracked  # control: still read
