"""vm/disks/tree_digest.py: the digest `tree-digest PATH` recomputes from a worktree is the
one `lint clippy --attest` takes of the staged copy the guest read (share_image.py
stage_tree, the real copy), and it moves with every byte, mode and link the guest sees,
and with nothing the copy leaves out."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roteiro_py.errors import TreeTooLarge
from roteiro_py.vm.disks.share_image import StageLimits, stage_tree
from roteiro_py.vm.disks.tree_digest import tree_digest


def worktree(root: Path) -> Path:
    (root / "src" / "bin").mkdir(parents=True)
    (root / "Cargo.toml").write_text('[package]\nname = "demo"\nversion = "0.1.0"\n')
    (root / "src" / "lib.rs").write_text("pub fn f() {}\n")
    (root / "src" / "bin" / "run.rs").write_text("fn main() {}\n")
    (root / "build.sh").write_text("#!/bin/sh\n")
    (root / "build.sh").chmod(0o755)
    (root / "with space.txt").write_text("a name with a space\n")
    (root / "empty").mkdir()
    os.symlink("../etc/passwd", root / "link")
    (root / ".git").mkdir()
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / "target" / "debug").mkdir(parents=True)
    (root / "target" / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (root / "target" / "debug" / "big").write_bytes(b"x" * 1000)
    os.mkfifo(root / "fifo")
    return root


def staged(source: Path, into: Path) -> Path:
    into.mkdir()
    stage_tree(source, into)
    return into


def test_the_worktree_and_its_staged_copy_have_one_digest(tmp_path: Path) -> None:
    tree = worktree(tmp_path / "tree")
    copy = staged(tree, tmp_path / "copy")
    assert not (copy / ".git").exists() and not (copy / "target").exists()  # the copy's own rules
    assert tree_digest(tree).digest == tree_digest(copy).digest
    result = tree_digest(tree)
    assert result.digest.startswith("sha256:") and len(result.digest) == 71
    assert (result.files, result.symlinks) == (5, 1)
    assert result.left_out == 1  # the FIFO


@pytest.mark.parametrize("change", ["byte", "mode", "link", "new file", "new directory", "rename"])
def test_every_change_the_guest_would_see_moves_the_digest(tmp_path: Path, change: str) -> None:
    tree = worktree(tmp_path / "tree")
    before = tree_digest(tree).digest
    if change == "byte":
        (tree / "src" / "lib.rs").write_text("pub fn g() {}\n")
    elif change == "mode":
        (tree / "src" / "lib.rs").chmod(0o755)
    elif change == "link":
        os.unlink(tree / "link")
        os.symlink("../etc/shadow", tree / "link")
    elif change == "new file":
        (tree / "src" / "new.rs").write_text("")
    elif change == "new directory":
        (tree / "src" / "mod").mkdir()
    else:
        (tree / "src" / "lib.rs").rename(tree / "src" / "lab.rs")
    assert tree_digest(tree).digest != before


def test_what_the_copy_leaves_out_does_not_move_it(tmp_path: Path) -> None:
    tree = worktree(tmp_path / "tree")
    before = tree_digest(tree).digest
    (tree / ".git" / "index").write_bytes(b"DIRC")
    (tree / "target" / "debug" / "more").write_bytes(b"y")
    (tree / "src" / ".git").write_text("gitdir: ../.git/modules/x\n")  # a submodule's .git file
    assert tree_digest(tree).digest == before
    # control: a directory merely named target (no cargo marker) is source, and counts
    (tree / "src" / "target").mkdir()
    assert tree_digest(tree).digest != before


def test_a_tree_past_a_cap_is_refused_naming_the_setting(tmp_path: Path) -> None:
    tree = worktree(tmp_path / "tree")
    with pytest.raises(TreeTooLarge) as refused:
        tree_digest(tree, StageLimits(max_bytes=1 << 20, max_files=4, max_depth=8))
    assert "stage_max_files" in str(refused.value)
    with pytest.raises(TreeTooLarge) as refused:
        tree_digest(tree, StageLimits(max_bytes=10, max_files=100, max_depth=8))
    assert "stage_max_mib" in str(refused.value)
    # control: within the caps, the same tree is digested
    assert tree_digest(tree, StageLimits(max_bytes=1 << 20, max_files=100, max_depth=8)).files == 5


def documented_digest(root: Path, *, directories: bool = True) -> str:
    """docs/ATTESTATION.md's definition of roteiro-tree-v1, written again from its text
    alone (os.walk, no code of ours), so the page and the code cannot drift apart."""
    import hashlib
    import stat as stat_

    records: list[tuple[bytes, bytes]] = []
    for top, dirs, files in os.walk(root, followlinks=False):
        rel = Path(top).relative_to(root)
        kept = []
        for name in dirs:
            full = Path(top) / name
            cargo_target = name == "target" and any((full / m).exists() for m in ("CACHEDIR.TAG", ".rustc_info.json"))
            if name == ".git" or cargo_target:
                continue
            path = os.fsencode((rel / name).as_posix())
            if full.is_symlink():
                records.append((path, b"l " + hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest().encode()
                                + b" " + path + b"\0"))
                continue
            kept.append(name)
            if directories:
                records.append((path, b"d " + path + b"\0"))
        dirs[:] = kept
        for name in files:
            full = Path(top) / name
            path = os.fsencode((rel / name).as_posix())
            st = full.lstat()
            if name == ".git":
                continue
            if stat_.S_ISLNK(st.st_mode):
                target = hashlib.sha256(os.fsencode(os.readlink(full))).hexdigest().encode()
                records.append((path, b"l " + target + b" " + path + b"\0"))
            elif stat_.S_ISREG(st.st_mode):
                mode = b"755" if st.st_mode & stat_.S_IXUSR else b"644"
                content = hashlib.sha256(full.read_bytes()).hexdigest().encode()
                records.append((path, b"f " + mode + b" " + content + b" " + path + b"\0"))
    return "sha256:" + hashlib.sha256(b"".join(record for _, record in sorted(records))).hexdigest()


def test_the_documented_definition_is_the_one_computed(tmp_path: Path) -> None:
    tree = worktree(tmp_path / "tree")
    (tmp_path / "tree" / "src" / "a b").mkdir()
    (tmp_path / "tree" / "src" / "a b" / "x.rs").write_text("// a path with a space\n")
    os.symlink("lib.rs", tree / "src" / "alias")
    assert documented_digest(tree) == tree_digest(tree).digest
    (tree / "src" / "lib.rs").chmod(0o700)
    assert documented_digest(tree) == tree_digest(tree).digest
    # control: the comparison is exact; the definition less one kind of record differs
    assert documented_digest(tree, directories=False) != tree_digest(tree).digest


def test_the_shipped_command_walks_with_the_limits_the_lint_copied_by(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`tree-digest PATH` reproduces the digest of a tree the lint staged under the [vm]
    stage limits it was run with (here ROTEIRO_VM_STAGE_MAX_DEPTH, raised past the default
    128): the command reads the same settings, so it does not refuse what the lint copied."""
    from typer.testing import CliRunner

    from roteiro_py.cli import app as cli

    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ROTEIRO_VM_STAGE_MAX_DEPTH", "200")
    root = tmp_path / "deep"
    (root / "/".join(["d"] * 140)).mkdir(parents=True)
    staged = tmp_path / "staged"
    staged.mkdir()
    limits = StageLimits(max_bytes=1 << 30, max_files=100_000, max_depth=200)
    stage_tree(root, staged, limits)  # the lint's copy under the raised limit
    result = CliRunner().invoke(cli.app, ["tree-digest", str(root)])
    assert result.exit_code == 0, result.output
    assert result.output.split()[0] == tree_digest(staged, limits).digest
