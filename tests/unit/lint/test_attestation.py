"""lint/attestation.py `gather`: the tree is attested by the content digest of the staged
copy the guest read (equal to `tree-digest` of the worktree), and by its commit only when
the checkout was clean at one commit before the copy and after it; the assets are the
provisioned files' own digests, with the Debian package and signed index they came from."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest

from roteiro_py import config
from roteiro_py.lint.attestation import gather, git_commit
from roteiro_py.lint.tree import Tree
from roteiro_py.vm.api import Isolation, JobOutcome, StagedShare
from roteiro_py.vm.disks.tree_digest import tree_digest
from tests.data.realcargo import staged_copy
from tests.unit.lint.test_vcs import git, new_repo, own_home  # noqa: F401  (own_home: the fixture)


@pytest.fixture
def assets(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A provisioned-assets directory as `prefetch --vm-assets` records it."""
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "home"))
    from roteiro_py import paths
    from roteiro_py.vm.assets import assets as module

    where = paths.vm_assets_root()
    where.mkdir(parents=True)
    kernel, initrd = b"\x7fELF kernel", b"070701 initrd"

    files = {module.KERNEL_FILE: kernel, module.INITRD_FILE: initrd}
    for name, data in files.items():
        (where / name).write_bytes(data)
    manifest = {
        "sources": {"main": {"archive": "http://deb.example/debian", "suite": "bookworm",
                             "inrelease_date": "2026-11-08T10:00:00Z", "signing_key": "B8E5F13176D2A7A7"}},
        "packages": {"linux-image-6.1.0-41-amd64": {"version": "6.1.158-1", "sha256": "9" * 64,
                                                    "source": "main"},
                     "busybox-static": {"version": "1:1.35.0-4", "sha256": "8" * 64, "source": "main"}},
        "kernel_package": "linux-image-6.1.0-41-amd64", "kernel_release": "6.1.0-41-amd64",
        "busybox_package": "busybox-static",
        "files": {name: {"sha256": hashlib.sha256(data).hexdigest(), "size": len(data)}
                  for name, data in files.items()}}
    (where / module.MANIFEST).write_text(json.dumps(manifest))
    return {"kernel": hashlib.sha256(kernel).hexdigest(), "initrd": hashlib.sha256(initrd).hexdigest()}


def job_of(workspace: Path) -> JobOutcome:
    return JobOutcome(steps=(), isolation=Isolation("qemu", "tcg", False, "TCG"), completed=True,
                      boot_seconds=1.0, failure=None, console=b"",
                      staged=(StagedShare(host=workspace, copy=staged_copy(workspace)),))


def test_a_clean_checkout_is_attested_by_its_commit_and_its_copys_digest(
        tmp_path: Path, assets: dict[str, str]) -> None:
    repo = new_repo(tmp_path / "repo")
    tree = Tree(asked=repo, workspace=repo, repo_root=repo)
    before = git_commit(tree)
    facts = gather(job_of(repo), tree, config.Settings(), {"analyzer": "clippy"}, before)
    digest = facts.tree["digest"]
    assert digest["gitCommit"] == git(repo, "rev-parse", "HEAD").strip()
    assert digest["gitTree"] == git(repo, "rev-parse", "HEAD^{tree}").strip()
    assert "sha256:" + digest["roteiro-tree-v1"] == tree_digest(repo).digest  # tree-digest's own
    assert facts.lockfile_sha256 is None  # the fixture has none
    kernel, initrd = facts.assets
    assert kernel["digest"] == {"sha256": assets["kernel"]}
    assert kernel["annotations"]["package"] == "linux-image-6.1.0-41-amd64"
    assert kernel["annotations"]["version"] == "6.1.158-1"
    assert kernel["annotations"]["index"]["signingKey"] == "B8E5F13176D2A7A7"
    assert initrd["digest"] == {"sha256": assets["initrd"]}
    assert initrd["annotations"]["busybox"]["version"] == "1:1.35.0-4"


@pytest.mark.parametrize("change", ["edit", "untracked", "commit during the run"])
def test_no_commit_is_attested_for_a_tree_that_was_not_that_commit(
        tmp_path: Path, assets: dict[str, str], change: str) -> None:
    repo = new_repo(tmp_path / "repo")
    (repo / "Cargo.lock").write_text("version = 4\n")
    git(repo, "add", "Cargo.lock")
    git(repo, "commit", "-qm", "lock")
    tree = Tree(asked=repo, workspace=repo, repo_root=repo)
    if change == "edit":
        (repo / "src" / "lib.rs").write_text("pub fn edited() {}\n")
    elif change == "untracked":
        (repo / "src" / "new.rs").write_text("\n")
    before = git_commit(tree)
    if change == "commit during the run":
        (repo / "src" / "lib.rs").write_text("pub fn later() {}\n")
        git(repo, "commit", "-qam", "later")
    facts = gather(job_of(repo), tree, config.Settings(), {}, before)
    assert "gitCommit" not in facts.tree["digest"]
    assert facts.tree["annotations"]["git"] == ("changed during the run" if change.startswith("commit")
                                                else "uncommitted changes")
    assert facts.tree["digest"]["roteiro-tree-v1"]  # the content digest is there all the same
    assert facts.lockfile_sha256 == hashlib.sha256(b"version = 4\n").hexdigest()


def test_a_tree_outside_git_is_said_so(tmp_path: Path, assets: dict[str, str]) -> None:
    plain = tmp_path / "plain"
    (plain / "src").mkdir(parents=True)
    (plain / "Cargo.toml").write_text("[package]\n")
    tree = Tree(asked=plain, workspace=plain, repo_root=plain)
    assert git_commit(tree) == "not a git work tree"


@pytest.mark.parametrize(("args", "said"), [
    (["--format", "json"], "no report is written to a file"),
    (["--format", "json=REPORT", "--attest-key", "RSA"], "not an Ed25519 key"),
    (["--format", "json=REPORT", "--attest-key", "MISSING"], "no such file"),
    (["--format", "json=ATTEST"], "names a report's file"),
    (["--format", "json=ALIAS"], "names a report's file"),  # the same file by another spelling
    (["--format", "json=LINKED"], "names a report's file"),  # through a linked directory
])
def test_an_attestation_that_cannot_be_made_is_refused_before_any_vm(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, args: list[str], said: str) -> None:
    from cryptography.hazmat.primitives.asymmetric import rsa
    from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat
    from typer.testing import CliRunner

    import roteiro_py.lint as lint
    from roteiro_py.cli import app as cli

    ran: list[object] = []
    monkeypatch.setattr(lint, "lint_attested", lambda *a: ran.append(a))  # a VM run, were it reached
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    (tmp_path / "rsa").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.PKCS8, NoEncryption()))
    names = {"REPORT": str(tmp_path / "r.json"), "RSA": str(tmp_path / "rsa"),
             "MISSING": str(tmp_path / "nope"), "ATTEST": str(tmp_path / "att.json"),
             "ALIAS": str(tmp_path / "sub" / ".." / "att.json"), "LINKED": str(tmp_path / "here" / "att.json")}
    (tmp_path / "sub").mkdir()
    (tmp_path / "here").symlink_to(tmp_path)
    given = [names.get(a, a.replace("ATTEST", names["ATTEST"]).replace("REPORT", names["REPORT"])
                       .replace("ALIAS", names["ALIAS"]).replace("LINKED", names["LINKED"])) for a in args]
    result = CliRunner().invoke(cli.app, ["lint", "clippy", str(tmp_path), "--image",
                                          "reg.example/c@sha256:" + "a" * 64, "--attest", names["ATTEST"],
                                          *given])
    assert result.exit_code == 2, result.output
    assert said in " ".join(result.output.split())
    assert ran == []
    # control: the same command with a report file and no key reaches the run
    CliRunner().invoke(cli.app, ["lint", "clippy", str(tmp_path), "--image", "reg.example/c@sha256:" + "a" * 64,
                                 "--attest", names["ATTEST"], "--format", f"json={names['REPORT']}"])
    assert len(ran) == 1


@pytest.mark.parametrize("how", [".gitignore", "info/exclude", "skip-worktree"])
def test_no_commit_is_attested_for_a_copy_git_calls_clean_that_is_not_that_commit(
        tmp_path: Path, assets: dict[str, str], how: str) -> None:
    """git calls a tree clean that holds an ignored file (by the tree's own .gitignore or
    the repository's info/exclude) or an edit under the skip-worktree bit; the copy stages
    those bytes, so the guest linted a tree that commit does not describe."""
    repo = new_repo(tmp_path / "repo", {"Cargo.toml": "[package]\nname = \"a\"\n",
                                        "src/lib.rs": "\n", ".gitignore": "/src/extra.rs\n"})
    if how == ".gitignore":
        (repo / "src" / "extra.rs").write_text("pub fn planted() {}\n")
    elif how == "info/exclude":
        (repo / ".git" / "info").mkdir(exist_ok=True)
        (repo / ".git" / "info" / "exclude").write_text("/src/other.rs\n")
        (repo / "src" / "other.rs").write_text("pub fn planted() {}\n")
    else:
        git(repo, "update-index", "--skip-worktree", "src/lib.rs")
        (repo / "src" / "lib.rs").write_text("pub fn planted() {}\n")
    assert git(repo, "status", "--porcelain", "--untracked-files=all") == ""  # git: clean
    tree = Tree(asked=repo, workspace=repo, repo_root=repo)
    facts = gather(job_of(repo), tree, config.Settings(), {}, git_commit(tree))
    assert "gitCommit" not in facts.tree["digest"]
    assert "not that commit" in facts.tree["annotations"]["git"]


def test_a_clean_workspace_below_the_repository_root_keeps_its_commit(
        tmp_path: Path, assets: dict[str, str]) -> None:
    """The control of the test above: the copy of a workspace in a subdirectory, holding an
    executable file and a link, is its commit's content (an ignored file outside it too)."""
    repo = new_repo(tmp_path / "repo", {"crate/Cargo.toml": "[package]\nname = \"a\"\n",
                                        "crate/src/lib.rs": "\n", "crate/run.sh": "#!/bin/sh\n",
                                        ".gitignore": "/notes.txt\n"})
    (repo / "crate" / "run.sh").chmod(0o755)
    (repo / "crate" / "link").symlink_to("src/lib.rs")
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", "more")
    (repo / "notes.txt").write_text("ignored, and not in the copy\n")
    tree = Tree(asked=repo / "crate", workspace=repo / "crate", repo_root=repo)
    facts = gather(job_of(repo / "crate"), tree, config.Settings(), {}, git_commit(tree))
    assert facts.tree["digest"]["gitCommit"] == git(repo, "rev-parse", "HEAD").strip()


def test_no_commit_is_attested_for_a_workspace_holding_an_edited_submodule(
        tmp_path: Path, assets: dict[str, str]) -> None:
    """lint/vcs.py does not look into a submodule (a gitlink), so git's clean says nothing
    of an edit inside one; the copy stages the submodule's files, which the superproject's
    commit describes only by the gitlink."""
    sub = new_repo(tmp_path / "sub", {"lib.rs": "pub fn honest() {}\n"})
    repo = new_repo(tmp_path / "repo")
    git(repo, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(sub), "vendored")
    git(repo, "commit", "-qm", "submodule")
    (repo / "vendored" / "lib.rs").write_text("pub fn planted() {}\n")
    tree = Tree(asked=repo, workspace=repo, repo_root=repo)
    before = git_commit(tree)
    assert isinstance(before, tuple)  # clean as vcs.py reads it: the gitlink is not looked into
    facts = gather(job_of(repo), tree, config.Settings(), {}, before)
    assert "gitCommit" not in facts.tree["digest"]
    assert "vendored/lib.rs is not in the commit" in facts.tree["annotations"]["git"]
