"""The CI scripts (ci/), run as a runner runs them, where no VM is needed: what an input
can and cannot do, the pull request's diff made with real git whatever the repository's
configuration says, the GitLab cache moved out of the tree and back, and the last step's
exit status. The lint itself under a runner's environment is tests/integration/ci/."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
CI = ROOT / "ci"
#: The image reference a lint is given: well formed, never provisioned (no lint here boots).
IMAGE = "registry.example/team/clippy@sha256:" + "a" * 64


def run(script: Path, env: dict[str, str], *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """`bash SCRIPT` with the tool's venv first on PATH, as the action's install step leaves it."""
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(script), *args], env={**os.environ, "PATH": path, **env}, cwd=cwd,
                          capture_output=True, text=True, timeout=120, check=False)


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


@pytest.fixture
def runner(tmp_path: Path) -> dict[str, str]:
    """A GitHub runner's environment around a copy of the example workspace."""
    workspace = tmp_path / "workspace"
    shutil.copytree(ROOT / "examples" / "demo-workspace", workspace, ignore=shutil.ignore_patterns("target"))
    for name in ("output", "summary", "env"):
        (tmp_path / name).write_text("")
    (tmp_path / "runner-temp").mkdir()
    return {"GITHUB_WORKSPACE": str(workspace), "GITHUB_OUTPUT": str(tmp_path / "output"),
            "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "GITHUB_ENV": str(tmp_path / "env"),
            "RUNNER_TEMP": str(tmp_path / "runner-temp"), "GITHUB_EVENT_NAME": "push", "INPUT_IMAGE": IMAGE}


# -- inputs are values ---------------------------------------------------------------------


def test_an_input_is_one_argument_never_shell_text(runner: dict[str, str], tmp_path: Path) -> None:
    workspace = Path(runner["GITHUB_WORKSPACE"])
    # Reports the tree committed, which an output must never describe as this run's.
    (workspace / "clippy.json").write_text('{"summary": {"total": 0}}')
    (workspace / "clippy.sarif").symlink_to("/etc/passwd")
    hostile = "-- $(touch pwned-a) `touch pwned-b` ; touch pwned-c && x | y > pwned-d *"
    done = run(CI / "github" / "lint.sh", {**runner, "INPUT_ARGS": hostile, "INPUT_PATH": "."})
    assert done.returncode == 2, done.stdout + done.stderr
    # The words arrived at the tool as written: it names the first one it refuses.
    assert "'$(touch' after `--` is not a lint-level flag" in done.stderr
    assert not [p for p in tmp_path.rglob("pwned-*")]
    assert not (workspace / "clippy.json").exists() and not (workspace / "clippy.sarif").is_symlink()
    assert outputs(tmp_path / "output") == {"exit-code": "2", "findings": "", "new-findings": "", "known-findings": "",
                                            "sarif": "", "report": ""}
    assert Path(runner["GITHUB_STEP_SUMMARY"]).read_text().startswith(
        "### clippy: no report (pylint-sandbox exited 2)")


def test_a_path_input_is_never_an_option(runner: dict[str, str], tmp_path: Path) -> None:
    done = run(CI / "github" / "lint.sh", {**runner, "INPUT_PATH": "--image=evil/x:latest"})
    assert done.returncode == 2, done.stdout + done.stderr
    # Read as a path inside the workspace (nothing there), not as an image option.
    assert f"The path {runner['GITHUB_WORKSPACE']}/--image=evil/x:latest does not exist" in done.stderr
    control = run(CI / "github" / "lint.sh", {**runner, "INPUT_ARGS": "--image=evil/x:latest"})
    assert control.returncode == 2 and "digest" in control.stderr  # as an argument, it is an option


def test_sarif_takes_true_or_false(runner: dict[str, str], tmp_path: Path) -> None:
    done = run(CI / "github" / "lint.sh", {**runner, "INPUT_SARIF": "yes"})
    assert done.returncode == 2
    assert done.stdout == "::error title=pylint-sandbox::the input sarif is 'yes': true or false\n"
    assert outputs(tmp_path / "output")["exit-code"] == "2"


def test_attest_takes_true_or_false_and_a_refused_lint_hands_nothing_to_attest(runner: dict[str, str],
                                                                               tmp_path: Path) -> None:
    done = run(CI / "github" / "lint.sh", {**runner, "INPUT_ATTEST": "yes"})
    assert done.returncode == 2
    assert done.stdout == "::error title=pylint-sandbox::the input attest is 'yes': true or false\n"
    (tmp_path / "output").write_text("")
    refused = run(CI / "github" / "lint.sh", {**runner, "INPUT_ATTEST": "true", "INPUT_PATH": "nowhere"})
    assert refused.returncode == 2, refused.stdout + refused.stderr
    written = (tmp_path / "output").read_text()
    # the action's attest step runs only on a predicate: none here, and no subject named
    assert "attestation=\npredicate=\nattest-subjects<<PYLINT_SANDBOX_EOF\n\nPYLINT_SANDBOX_EOF\n" in written
    assert not list((tmp_path / "runner-temp").rglob("*.json"))
    # control: attest false names no attestation output at all (unset reads as empty)
    (tmp_path / "output").write_text("")
    run(CI / "github" / "lint.sh", {**runner, "INPUT_PATH": "nowhere"})
    assert "predicate" not in (tmp_path / "output").read_text()


@pytest.mark.parametrize(("base", "says"), [
    ("", "a pull_request event without GITHUB_BASE_REF"),
    ("main", "could not make the diff of this pull request against origin/main"),  # no repository, no origin
])
def test_a_pull_request_whose_diff_cannot_be_made_is_refused(runner: dict[str, str], tmp_path: Path, base: str,
                                                             says: str) -> None:
    """Not linted without the diff: that would fail the pull request on findings it did not add."""
    done = run(CI / "github" / "lint.sh", {**runner, "GITHUB_EVENT_NAME": "pull_request", "GITHUB_BASE_REF": base})
    assert done.returncode == 3, done.stdout + done.stderr
    assert f"::error title=pylint-sandbox::{says}" in done.stdout
    assert outputs(tmp_path / "output")["exit-code"] == "3"
    none = run(CI / "github" / "lint.sh", {**runner, "GITHUB_EVENT_NAME": "pull_request", "GITHUB_BASE_REF": base,
                                           "INPUT_DIFF": "none", "INPUT_ARGS": "--no-such-flag"})
    assert none.returncode == 2 and "No such option: --no-such-flag" in none.stderr  # control: diff none skips it


@pytest.mark.parametrize(("code", "status", "says"), [
    ("0", 0, ""),
    ("1", 1, "clippy findings at or above fail-on (error)"),
    ("3", 3, "refused to lint (exit 3)"),
    ("", 1, "ended without an exit status (its outcome: failure)"),
    ("1; rm -rf /", 1, "ended without an exit status"),
])
def test_the_last_step_fails_the_job_with_the_lints_status(code: str, status: int, says: str) -> None:
    done = run(CI / "github" / "finish.sh", {"EXIT_CODE": code, "LINT_OUTCOME": "failure", "FAIL_ON": "error"})
    assert done.returncode == status
    assert (says in done.stdout and done.stdout.startswith("::error title=pylint-sandbox::")) if says else (
        done.stdout == "")


# -- the pull request's diff ---------------------------------------------------------------


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=True, timeout=60,
                          env={**os.environ, **GIT_ENV}).stdout


#: Only git's own variables: merged with os.environ where a command runs, never copied at
#: import (the suite's hermetic CARGO_HOME is set after collection; a copy made here sent
#: the scripts' cargo to the user's own cargo home).
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def make_diff(repo: Path, base: str, out: Path) -> subprocess.CompletedProcess[str]:
    script = f'source {str(CI / "common.sh")!r}; cd "$1"; make_pr_diff "$2" "$3"'
    return subprocess.run(["bash", "-c", script, "-", str(repo), base, str(out)], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV}, timeout=60, check=False)


def test_the_diff_is_the_pull_requests_in_gits_default_shape(tmp_path: Path) -> None:
    """origin/main is fetched by the script (the checkout lacks it), the diff is HEAD's
    against the merge base (not what main did since), and a repository configuration that
    would change its shape (no prefixes, colour, an external diff tool, relative paths)
    changes nothing."""
    origin = tmp_path / "origin"
    origin.mkdir()
    git(origin, "init", "-q", "-b", "main")
    (origin / "a.rs").write_text("fn a() {}\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "base")
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", "--single-branch", "--branch", "main", str(origin), str(checkout))
    git(checkout, "checkout", "-qb", "feature")
    (checkout / "sub").mkdir()
    (checkout / "sub" / "b.rs").write_text("fn b() {}\n")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "feature")
    (origin / "later.rs").write_text("fn later() {}\n")  # main moves on after the branch point
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "later")
    git(checkout, "update-ref", "-d", "refs/remotes/origin/main")  # as a CI checkout: no base ref
    for key, value in (("diff.noprefix", "true"), ("diff.mnemonicPrefix", "true"), ("color.ui", "always"),
                       ("color.diff", "always"), ("diff.external", "/bin/false"), ("diff.relative", "true")):
        git(checkout, "config", key, value)
    out = tmp_path / "pr.diff"
    done = make_diff(checkout / "sub", "main", out)
    assert done.returncode == 0, done.stderr
    text = out.read_text()
    assert "diff --git a/sub/b.rs b/sub/b.rs\n" in text and "+fn b() {}\n" in text
    assert "later.rs" not in text and "a.rs" not in text.replace("b.rs", "")  # the merge base, three dots
    assert "\x1b[" not in text
    # control: the configuration is in force for a plain `git diff`: the external tool runs
    # (and fails), and without it the paths lose their prefixes and become relative
    plain = subprocess.run(["git", "diff", "origin/main...HEAD"], cwd=checkout / "sub", env={**os.environ, **GIT_ENV},
                           capture_output=True, text=True, timeout=60, check=False)
    assert plain.returncode != 0
    internal = git(checkout / "sub", "diff", "--no-ext-diff", "origin/main...HEAD")
    assert "diff --git b.rs b.rs" in internal and "\x1b[" in internal


def hiding_branch(tmp_path: Path) -> Path:
    """A checkout of a pull request whose branch adds `*.rs -diff` to .gitattributes with a
    new line of Rust (the review's attack), and names a diff driver for notes.txt that the
    runner's git configuration defines as a textconv (a driver no branch can define, but
    whose output a diff must not show either)."""
    origin = tmp_path / "origin"
    (origin / "src").mkdir(parents=True)
    git(origin, "init", "-q", "-b", "main")
    (origin / "src" / "lib.rs").write_text("pub fn a() {}\n")
    git(origin, "add", ".")
    git(origin, "commit", "-qm", "base")
    checkout = tmp_path / "checkout"
    git(tmp_path, "clone", "-q", str(origin), str(checkout))
    git(checkout, "checkout", "-qb", "feature")
    (checkout / ".gitattributes").write_text("*.rs -diff\nnotes.txt diff=hide\n")
    (checkout / "src" / "lib.rs").write_text("pub fn a() {}\npub fn b() { let x = 1; }\n")
    (checkout / "notes.txt").write_text("the secret line\n")
    git(checkout, "add", ".")
    git(checkout, "commit", "-qm", "feature")
    git(checkout, "config", "diff.hide.textconv", "sed s/secret/HIDDEN/")
    return checkout


def test_the_branchs_gitattributes_do_not_shape_the_diff(tmp_path: Path) -> None:
    """make_pr_diff and the guide's command write the Rust file's added line, where git's
    plain diff in the same checkout writes "Binary files ... differ" (the control arm: the
    attributes are in force), and run no textconv driver."""
    from roteiro_py.compare.diff import DiffError, parse_diff
    from roteiro_py.errors import DIFF_COMMAND

    checkout = hiding_branch(tmp_path)
    plain = git(checkout, "diff", "--no-color", "--no-ext-diff", "--no-relative", "--src-prefix=a/",
                "--dst-prefix=b/", "-M", "origin/main...HEAD")
    assert "Binary files a/src/lib.rs and b/src/lib.rs differ" in plain and "+the HIDDEN line" in plain
    with pytest.raises(DiffError) as refused:  # and the lint refuses that diff
        parse_diff(plain.encode())
    assert refused.value.hidden == "src/lib.rs"
    out = tmp_path / "pr.diff"
    done = make_diff(checkout, "main", out)
    assert done.returncode == 0, done.stderr
    guide = subprocess.run(["bash", "-c", DIFF_COMMAND.replace(" > pr.diff", "")], cwd=checkout, capture_output=True,
                           text=True, env={**os.environ, **GIT_ENV}, timeout=60, check=True).stdout
    for text in (out.read_text(), guide):
        assert "Binary files" not in text and "+pub fn b() { let x = 1; }\n" in text
        assert "+the secret line\n" in text and "HIDDEN" not in text
        assert {path: list(runs.firsts) for path, runs in parse_diff(text.encode()).added.items()} == {
            ".gitattributes": [1], "notes.txt": [1], "src/lib.rs": [2]}


def test_a_git_without_attr_source_still_makes_the_diff_and_the_lint_refuses_what_it_hides(tmp_path: Path) -> None:
    """git before 2.40 (the GitLab template's bookworm image has 2.39) rejects
    --attr-source. This git is real, behind a stand-in that rejects the option as 2.39
    does (no older git runs here): the diff is still made, the log says why it may hide
    a file, and the Rust file it hides refuses the diff instead of passing."""
    from roteiro_py.compare.diff import DiffError, parse_diff

    checkout = hiding_branch(tmp_path)
    bin_dir = tmp_path / "old-git"
    bin_dir.mkdir()
    real = shutil.which("git")
    assert real is not None
    (bin_dir / "git").write_text(
        "#!/bin/bash\nfor a in \"$@\"; do case \"$a\" in --attr-source*) echo \"unknown option: $a\" >&2; "
        f"exit 129;; esac; done\nexec {real} \"$@\"\n")
    (bin_dir / "git").chmod(0o755)
    out = tmp_path / "pr.diff"
    script = f'source {str(CI / "common.sh")!r}; cd "$1"; make_pr_diff "$2" "$3"'
    done = subprocess.run(["bash", "-c", script, "-", str(checkout), "main", str(out)], capture_output=True, text=True,
                          env={**os.environ, **GIT_ENV, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert "has no --attr-source (git 2.40)" in done.stderr
    text = out.read_text()
    assert "Binary files a/src/lib.rs and b/src/lib.rs differ" in text and "HIDDEN" not in text
    with pytest.raises(DiffError) as refused:
        parse_diff(text.encode())
    assert refused.value.hidden == "src/lib.rs"
    # control: with the real git, no note, and the same branch's diff is read
    assert "--attr-source" not in make_diff(checkout, "main", out).stderr
    assert "src/lib.rs" in parse_diff(out.read_bytes()).added


@pytest.mark.parametrize("base", ["-x", "a..b", "main\nother", "ref:x", ""])
def test_a_base_that_is_no_branch_name_is_refused(tmp_path: Path, base: str) -> None:
    git(tmp_path, "init", "-q")
    done = make_diff(tmp_path, base, tmp_path / "pr.diff")
    assert done.returncode == 2
    assert "is not a branch name git accepts" in done.stderr
    assert not (tmp_path / "pr.diff").exists()


# -- the GitLab cache ------------------------------------------------------------------------


@pytest.fixture
def gitlab(tmp_path: Path) -> dict[str, str]:
    project = tmp_path / "project"
    project.mkdir()
    git(project, "init", "-q")
    (project / "Cargo.toml").write_text("[workspace]\n")
    git(project, "add", ".")
    git(project, "commit", "-qm", "c")
    return {"CI_PROJECT_DIR": str(project), "ROTEIRO_HOME": str(tmp_path / "home"),
            "CARGO_HOME": str(tmp_path / "cargo"), "PYLINT_SANDBOX_CACHE": ".pylint-sandbox-cache", **{
                k: v for k, v in GIT_ENV.items() if k.startswith("GIT_")}}


PARTS = {"roteiro/store": "home/store", "roteiro/vm": "home/vm", "roteiro/cache/rootfs": "home/cache/rootfs",
         "roteiro/packages": "home/packages"}
#: The dependency caches' archive in the GitLab cache (ci/common.sh pack_deps; its holes:
#: tests/unit/ci/test_deps_archive.py).
DEPS_PACKED = "roteiro/deps-packed"


def test_the_gitlab_cache_leaves_the_tree_before_the_lint_and_comes_back(gitlab: dict[str, str],
                                                                          tmp_path: Path) -> None:
    cache = tmp_path / "project" / ".pylint-sandbox-cache"
    for part in PARTS:
        (cache / part).mkdir(parents=True)
        (cache / part / "marker").write_text(part)
    (earlier := tmp_path / "earlier").mkdir()
    (earlier / "marker").write_text("deps")
    (cache / DEPS_PACKED).mkdir(parents=True)
    subprocess.run(["tar", "-cf", str(cache / DEPS_PACKED / "deps.tar"), "-C", str(earlier), "."], check=True)
    done = run(CI / "gitlab" / "cache.sh", gitlab, "restore")
    assert done.returncode == 0, done.stderr
    for part, where in PARTS.items():
        assert (tmp_path / where / "marker").read_text() == part
        assert not (cache / part).exists()  # nothing of the cache is left in the tree
    deps = tmp_path / "home" / "cache" / "deps"
    assert (deps / "marker").read_text() == "deps" and not (cache / DEPS_PACKED).exists()
    (deps / "new").write_text("built by this job")
    done = run(CI / "gitlab" / "cache.sh", gitlab, "save")
    assert done.returncode == 0, done.stderr
    for part, where in PARTS.items():
        assert (cache / part / "marker").read_text() == part and not (tmp_path / where).exists()
    listed = subprocess.run(["tar", "-tf", str(cache / DEPS_PACKED / "deps.tar")], capture_output=True, text=True,
                            check=True).stdout.split()
    assert {"./marker", "./new"} <= set(listed), listed


def test_a_kept_home_wins_and_the_archived_copy_leaves_the_tree(gitlab: dict[str, str], tmp_path: Path) -> None:
    """A shell executor keeps ROTEIRO_HOME between jobs: that one is current."""
    cache = tmp_path / "project" / ".pylint-sandbox-cache" / "roteiro" / "store"
    cache.mkdir(parents=True)
    (cache / "marker").write_text("archived")
    (tmp_path / "home" / "store").mkdir(parents=True)
    (tmp_path / "home" / "store" / "marker").write_text("kept")
    assert run(CI / "gitlab" / "cache.sh", gitlab, "restore").returncode == 0
    assert (tmp_path / "home" / "store" / "marker").read_text() == "kept" and not cache.exists()


@pytest.mark.parametrize("plant", ["tracked", "link"])
def test_a_cache_the_tree_planted_is_refused(gitlab: dict[str, str], tmp_path: Path, plant: str) -> None:
    project = tmp_path / "project"
    planted = tmp_path / "elsewhere"
    (planted / "roteiro" / "store").mkdir(parents=True)
    if plant == "tracked":
        shutil.copytree(planted, project / ".pylint-sandbox-cache")
        (project / ".pylint-sandbox-cache" / "roteiro" / "store" / "x").write_text("from the branch")
        git(project, "add", ".")
        git(project, "commit", "-qm", "plant")
    else:
        (project / ".pylint-sandbox-cache").symlink_to(planted)
    done = run(CI / "gitlab" / "cache.sh", gitlab, "restore")
    assert done.returncode == 3
    assert "a cache the tree chose is never used" in done.stderr
    assert not (tmp_path / "home").exists()  # nothing moved
    saved = run(CI / "gitlab" / "cache.sh", gitlab, "save")
    assert saved.returncode == 0 and "not saving" in saved.stderr
    # nothing the tree chose is left for GitLab to archive (a link is removed, not followed)
    assert not os.path.lexists(project / ".pylint-sandbox-cache") and (planted / "roteiro" / "store").is_dir()


def chown_tree(root: Path, uid: int) -> None:
    for path in [root, *root.rglob("*")]:
        os.lchown(path, uid, uid)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving the checkout to another uid needs root")
@pytest.mark.parametrize("plant", ["tracked", "untracked"])
def test_a_git_that_cannot_say_refuses_the_restore(gitlab: dict[str, str], tmp_path: Path, plant: str) -> None:
    """The job's uid is not the cloner's: git refuses the checkout ("dubious ownership").
    cache.sh hid git's error and read it as "not tracked", so a branch's committed cache
    was moved into ROTEIRO_HOME and saved for later pipelines. Now: refused, git's own
    words shown, nothing moved, and nothing left in the tree for GitLab to archive. The
    control arm: the same checkout, owned by the job's user again, restores an untracked
    cache (and still refuses the tracked one)."""
    project = tmp_path / "project"
    cache = project / ".pylint-sandbox-cache" / "roteiro" / "store"
    cache.mkdir(parents=True)
    (cache / "marker").write_text(plant)
    if plant == "tracked":
        git(project, "add", ".")
        git(project, "commit", "-qm", "a cache of the branch's own")
    env = {**gitlab, "SUDO_UID": ""}  # git trusts sudo's caller: not here
    chown_tree(project, 12345)
    done = run(CI / "gitlab" / "cache.sh", env, "restore")
    assert done.returncode == 3, done.stderr
    assert "dubious ownership" in done.stderr  # git's words, no longer hidden
    assert "git could not say whether the repository itself has .pylint-sandbox-cache/" in done.stderr
    assert not (tmp_path / "home").exists() and (cache / "marker").read_text() == plant  # nothing moved
    saved = run(CI / "gitlab" / "cache.sh", env, "save")
    assert saved.returncode == 0 and "not saving" in saved.stderr
    assert not (project / ".pylint-sandbox-cache").exists() and not (tmp_path / "home").exists()
    # control: owned by this user, git answers
    chown_tree(project, os.geteuid())
    if plant == "tracked":
        git(project, "checkout", "--", ".")
    else:
        cache.mkdir(parents=True)
        (cache / "marker").write_text(plant)
    done = run(CI / "gitlab" / "cache.sh", env, "restore")
    if plant == "tracked":
        assert done.returncode == 3 and "(tracked by git)" in done.stderr
    else:
        assert done.returncode == 0, done.stderr
        assert (tmp_path / "home" / "store" / "marker").read_text() == "untracked"


@pytest.mark.parametrize(("value", "made"), [
    (".", "{pwd}"), ("", "{pwd}"), ("./", "{pwd}"), ("./crates/x", "{pwd}/crates/x"), ("sub", "{pwd}/sub"),
    ("/abs/tree", "/abs/tree"), ("--image=x", "{pwd}/--image=x"), ("./--image=x", "{pwd}/--image=x"),
])
def test_a_path_input_is_made_absolute_without_a_trailing_dot(tmp_path: Path, value: str, made: str) -> None:
    """Issue 23: the default path "." became "$PWD/.", and the log asked "can this runner
    lint /builds/p/.?". Still absolute (never an option), and "." is the directory itself."""
    done = subprocess.run(["bash", "-c", f'source {CI / "common.sh"}; as_path "$1"', "bash", value],
                          cwd=tmp_path, capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == made.format(pwd=tmp_path)


@pytest.mark.parametrize(("base", "name"), [
    ("main", "origin_main...HEAD.diff"), ("release/1.x", "origin_release_1.x...HEAD.diff"),
    ("a/../../b", "origin_a_.._.._b...HEAD.diff"), ("x" * 300, "pull-request.diff"),
])
def test_the_pull_requests_diff_is_named_for_what_it_is(base: str, name: str) -> None:
    """Issue 23: the summary named the diff `pylint-sandbox-pr.Xy12Ab.diff` (the temporary
    file). One file name, whatever the branch: no `/` can make it a path elsewhere."""
    done = subprocess.run(["bash", "-c", f'source {CI / "common.sh"}; diff_name "$1"', "bash", base],
                          capture_output=True, text=True, timeout=30, check=True)
    assert done.stdout == name and "/" not in done.stdout


def test_a_failed_sarif_upload_is_said_in_the_log_and_the_summary(runner: dict[str, str], tmp_path: Path) -> None:
    """Issue 23: a private repository without code scanning failed the upload in silence
    (the step is continue-on-error); action.yml runs this only when it failed."""
    summary = Path(runner["GITHUB_STEP_SUMMARY"])
    summary.write_text("### clippy: 3 findings\n")
    done = run(CI / "github" / "sarif-skipped.sh", runner)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("::warning title=pylint-sandbox::the SARIF upload to code scanning failed")
    assert done.stdout.count("\n") == 1 and "Advanced Security" in done.stdout
    assert summary.read_text().startswith("### clippy: 3 findings\n\n**SARIF upload skipped**: the SARIF upload")
    # a summary that is a link is not written through (the runner's never is one)
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    linked = tmp_path / "linked"
    linked.symlink_to(victim)
    again = run(CI / "github" / "sarif-skipped.sh", {**runner, "GITHUB_STEP_SUMMARY": str(linked)})
    assert again.returncode == 0 and again.stdout.startswith("::warning ") and victim.read_text() == "keep\n"


def _common(function: str, *args: str, cwd: Path) -> str:
    """One function of ci/common.sh, run by bash in `cwd`, its stdout."""
    done = subprocess.run(["bash", "-c", f'source "{CI / "common.sh"}"; {function} "$@"', "bash", *args],
                          cwd=cwd, capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def test_image_build_takes_the_toolchain_file_rustup_would_read_inside_the_checkout(tmp_path: Path) -> None:
    """`image: build` builds what the repository pins for the linted path: the nearest
    rust-toolchain.toml (or legacy rust-toolchain) from the path up to the checkout."""
    checkout = tmp_path / "checkout"
    member = checkout / "crates" / "a"
    member.mkdir(parents=True)
    (tmp_path / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.80.0"\n')  # above the checkout
    assert _common("toolchain_file", str(member), str(checkout), cwd=checkout) == ""
    (checkout / "rust-toolchain").write_text("1.94.0\n")
    assert _common("toolchain_file", str(member), str(checkout), cwd=checkout) == str(checkout / "rust-toolchain")
    (checkout / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.95.0"\n')  # rustup prefers it
    assert _common("toolchain_file", str(member), str(checkout), cwd=checkout) == str(checkout / "rust-toolchain.toml")
    (member / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "nightly"\n')  # the nearest wins
    assert _common("toolchain_file", str(member), str(checkout), cwd=checkout) == str(member / "rust-toolchain.toml")


def test_the_built_images_cache_key_follows_the_toolchain_files_bytes(tmp_path: Path) -> None:
    (tmp_path / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.95.0"\n')
    first = _common("image_key", "build", str(tmp_path), "pylint-sandbox 0.1.0", cwd=tmp_path)
    assert _common("image_key", "build", str(tmp_path), "pylint-sandbox 0.1.0", cwd=tmp_path) == first
    (tmp_path / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.96.0"\n')
    changed = _common("image_key", "build", str(tmp_path), "pylint-sandbox 0.1.0", cwd=tmp_path)
    other_tool = _common("image_key", "build", str(tmp_path), "pylint-sandbox 0.2.0", cwd=tmp_path)
    pinned = _common("image_key", IMAGE, str(tmp_path), "pylint-sandbox 0.1.0", cwd=tmp_path)
    assert len({first, changed, other_tool, pinned}) == 4 and all(len(k.strip()) == 32 for k in (first, pinned))


def test_build_is_no_image_reference_for_the_tool(tmp_path: Path) -> None:
    """tool_env never hands `build` to the tool as an image: it would be refused as a
    malformed reference; a reference is passed through (control)."""
    script = f'source "{CI / "common.sh"}"; tool_env "$1" auto; printf "%s" "${{ROTEIRO_LINT_IMAGE-unset}}"'
    said = [subprocess.run(["bash", "-c", script, "bash", image], capture_output=True, text=True, timeout=60,
                           check=True, env={**os.environ, "ROTEIRO_LINT_IMAGE": ""}).stdout
            for image in ("build", IMAGE)]
    assert said == ["", IMAGE]


@pytest.mark.parametrize("plant", ["fifo", "zero", "large"])
def test_the_built_images_cache_key_reads_the_toolchain_file_bounded_and_never_through_a_link(
        tmp_path: Path, plant: str) -> None:
    """image_key hashed the tree's toolchain file with `cat`, which follows a link and
    reads a FIFO: a rust-toolchain.toml that is a FIFO or a link to /dev/zero held the
    job's install step for ever (the tool itself refuses both). Now only a regular file
    that is no link is read, and at most 64 KiB + 1 of it (more is refused by the tool)."""
    checkout = tmp_path / "checkout"
    checkout.mkdir()
    file = checkout / "rust-toolchain.toml"
    if plant == "fifo":
        os.mkfifo(file)
    elif plant == "zero":
        file.symlink_to("/dev/zero")
    else:
        file.write_bytes(b"#" * (64 << 20))
    script = f'source "{CI / "common.sh"}"; set -o pipefail; image_key build "$1" "pylint-sandbox 0.1.0"'
    process = subprocess.Popen(["bash", "-c", script, "bash", str(checkout)], cwd=checkout, text=True,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True)
    try:
        out, _ = process.communicate(timeout=20)
    finally:
        if process.poll() is None:  # its reader of the FIFO or /dev/zero with it
            os.killpg(process.pid, 9)
            process.wait()
    assert process.returncode == 0 and len(out.strip()) == 32


# -- the action's cache keys, evaluated as the runner and actions/cache evaluate them -------


def _expression(text: str, context: dict[str, str]) -> str:
    """One GitHub expression of the shapes action.yml's cache steps use: a context value
    (`steps.ID.outputs.NAME`, `runner.os`; unset reads as ''), a quoted string,
    `format('...{0}...', ...)`, `hashFiles(...)` (context["hashFiles"]), and `A == B`,
    `A != B` (each 'true' or 'false'). Anything else fails the test."""
    import re

    token = r"'(?:[^']|'')*'|==|!=|[(),]|[A-Za-z_][A-Za-z0-9_.-]*"
    tokens = re.findall(token, text)
    assert not re.sub(token, "", text).strip(), text  # nothing this reading does not know
    position = 0

    def take() -> str:
        nonlocal position
        position += 1
        return tokens[position - 1]

    def value() -> str:
        token = take()
        if token.startswith("'"):
            return token[1:-1].replace("''", "'")
        if token in ("format", "hashFiles"):
            assert take() == "("
            args = [value()]
            while take() == ",":
                args.append(value())
            if token == "hashFiles":
                return context["hashFiles"]
            return re.sub(r"\{(\d+)\}", lambda m: args[1 + int(m.group(1))], args[0])
        assert re.fullmatch(r"(steps\.[a-z-]+\.outputs\.[a-z-]+|runner\.os)", token), token
        return context.get(token, "")

    left = value()
    if position < len(tokens):
        operator = take()
        right = value()
        left = str((left == right) == (operator == "==")).lower()
    assert position == len(tokens), text
    return left


def _interpolate(text: str, context: dict[str, str]) -> str:
    import re

    return re.sub(r"\$\{\{(.*?)\}\}", lambda m: _expression(m.group(1), context), text)


def _restore(saved: list[str], key: str, restore_keys: list[str]) -> str:
    """actions/cache's match (docs.github.com, "Cache key matching"): `key` exactly, else
    the newest cache whose key starts with `key`, else each of `restore_keys` in turn,
    exactly then the newest by prefix. '' when nothing matches."""
    for wanted in [key, *restore_keys]:
        if wanted in saved:
            return wanted
        prefixed = [k for k in saved if k.startswith(wanted)]
        if prefixed:
            return prefixed[-1]  # saved is in creation order
    return ""


def _stub_tool(tmp_path: Path) -> Path:
    """A `pylint-sandbox` standing in for the tool where prepare.sh runs it: `image build`
    prints $STUB_BUILT (the reference a build made), everything else succeeds."""
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    (bin_dir / "pylint-sandbox").write_text(
        '#!/bin/bash\ncase "$1" in\n  image) echo "building" >&2; printf \'%s\\n\' "$STUB_BUILT" ;;\n'
        '  --version) echo "pylint-sandbox 0.1.0" ;;\nesac\nexit 0\n')
    (bin_dir / "pylint-sandbox").chmod(0o755)
    return bin_dir


def _job(action: dict, saved: list[str], built: str, runner: dict[str, str], tmp_path: Path,
         bin_dir: Path, image: str = "build") -> dict[str, str | None]:
    """One job of the action with `image: IMAGE`, whose prepare step builds `built`: the
    image and dependency caches restored from `saved` as actions/cache would, prepare.sh
    run, and each save step's `if:` and key evaluated as the runner would. Returns the keys
    saved (None: that save did not run) and appends them to `saved`."""
    by_id = {s["id"]: s for s in action["runs"]["steps"] if "id" in s}
    by_name = {s["name"]: s for s in action["runs"]["steps"]}
    workspace = Path(runner["GITHUB_WORKSPACE"])
    install_key = _common("image_key", image, str(workspace), "pylint-sandbox 0.1.0", cwd=workspace).strip()
    context = {"runner.os": "Linux", "hashFiles": "f" * 64, "steps.install.outputs.image-key": install_key}
    names = [s.get("name") for s in action["runs"]["steps"]]

    def restore(step_id: str) -> None:
        spec = by_id[step_id]["with"]
        key = _interpolate(spec["key"], context)
        restore_keys = [_interpolate(line, context) for line in spec.get("restore-keys", "").splitlines() if line]
        matched = _restore(saved, key, restore_keys)
        context.update({f"steps.{step_id}.outputs.cache-primary-key": key,
                        f"steps.{step_id}.outputs.cache-matched-key": matched,
                        f"steps.{step_id}.outputs.cache-hit": str(matched == key).lower()})

    def prepare() -> None:
        output = tmp_path / "prepare-output"
        output.write_text("")
        env = {**runner, "GITHUB_OUTPUT": str(output), "INPUT_IMAGE": image, "STUB_BUILT": built,
               "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        env.update({name: _interpolate(value, context) for name, value in by_id["prepare"].get("env", {}).items()
                    if not name.startswith("INPUT_")})
        done = subprocess.run(["bash", str(CI / "github" / "prepare.sh")], env={**os.environ, **env},
                              capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        context.update({f"steps.prepare.outputs.{k}": v for k, v in outputs(output).items()})

    for step_id in sorted(("image-cache", "deps-cache", "prepare"),
                          key=lambda i: names.index(by_id[i]["name"])):
        prepare() if step_id == "prepare" else restore(step_id)
    result: dict[str, str | None] = {}
    for cache, name in (("image", "Save the image store and root filesystems"),
                        ("deps", "Save the dependency caches")):
        save = by_name[name]
        runs = _expression(save["if"], context) == "true"
        result[cache] = _interpolate(save["with"]["key"], context) if runs else None
    saved.extend(key for key in result.values() if key is not None)
    return result


def test_a_built_image_is_cached_under_its_digest_and_its_dependency_caches_with_it(
        runner: dict[str, str], tmp_path: Path) -> None:
    """`image: build` from a moving toolchain (no rust-toolchain.toml: the runner's stable;
    or `channel = "stable"`): the image cache was keyed on the toolchain file's bytes alone,
    so after the runner's stable moved the key still hit, every job built the new image
    (minutes), and, the key having hit, never saved it; the dependency caches, keyed on the
    same, were rebuilt under the VM and never saved either. Now both are saved under the
    digest the prepare step built: a new digest is a new save, the same one restored none."""
    import yaml  # type: ignore[import-untyped]

    action = yaml.safe_load((ROOT / "action.yml").read_text())
    bin_dir = _stub_tool(tmp_path)
    home = tmp_path / "home"
    (home / "vm").mkdir(parents=True)
    (home / "vm" / "manifest.json").write_text("{}")
    runner = {**runner, "ROTEIRO_HOME": str(home)}
    one = "localhost/roteiro/clippy:1.94.0@sha256:" + "1" * 64
    two = "localhost/roteiro/clippy:1.95.0@sha256:" + "2" * 64
    saved: list[str] = []
    first = _job(action, saved, one, runner, tmp_path, bin_dir)
    assert first["image"] is not None and first["deps"] is not None  # nothing to restore: both saved
    assert _job(action, saved, one, runner, tmp_path, bin_dir) == {"image": None, "deps": None}
    moved = _job(action, saved, two, runner, tmp_path, bin_dir)  # the runner's stable moved on
    assert moved["image"] is not None and moved["image"] != first["image"]
    assert moved["deps"] is not None and moved["deps"] != first["deps"]
    # the next job restores the newest image, built with the same digest: nothing to save
    assert _job(action, saved, two, runner, tmp_path, bin_dir) == {"image": None, "deps": None}
    assert saved == [first["image"], first["deps"], moved["image"], moved["deps"]]
    # the digest is in the key as it is in the reference (the log's), not a hash of it
    assert moved["image"].endswith("-" + "2" * 32) and first["image"].endswith("-" + "1" * 32)

    # control: a pinned image is keyed as before, on the install step's key alone, and saved
    # only when that exact key was not restored (the stand-in's build is never asked for)
    pinned: list[str] = []
    once = _job(action, pinned, one, runner, tmp_path, bin_dir, image=IMAGE)
    key = _common("image_key", IMAGE, runner["GITHUB_WORKSPACE"], "pylint-sandbox 0.1.0",
                  cwd=Path(runner["GITHUB_WORKSPACE"])).strip()
    assert once["image"] == f"pylint-sandbox-image-Linux-{key}"
    assert once["deps"] == f"pylint-sandbox-deps-Linux-{key}-{'f' * 64}"
    assert _job(action, pinned, two, runner, tmp_path, bin_dir, image=IMAGE) == {"image": None, "deps": None}


@pytest.mark.parametrize(("built", "image_key", "status", "says"), [
    ("localhost/roteiro/clippy:1.95.0", "c" * 32, 4, "printed no pinned reference"),
    ("x@sha256:" + "2" * 64 + "\nimage-key=forged", "c" * 32, 4, "printed no pinned reference"),
    ("x@sha256:" + "2" * 64, "", 2, "IMAGE_KEY is not the install step's image-key"),
    ("x@sha256:" + "2" * 64, "c" * 32 + "\nimage-key=forged", 2, "IMAGE_KEY is not the install step's image-key"),
])
def test_the_prepare_step_keys_only_a_pinned_build_under_the_install_key(
        runner: dict[str, str], tmp_path: Path, built: str, image_key: str, status: int, says: str) -> None:
    """What becomes a cache key is a digest's hex digits after the install step's hex key,
    one line, or nothing: the job stops before any key is written."""
    bin_dir = _stub_tool(tmp_path)
    output = Path(runner["GITHUB_OUTPUT"])
    env = {**runner, "INPUT_IMAGE": "build", "STUB_BUILT": built, "IMAGE_KEY": image_key,
           "ROTEIRO_HOME": str(tmp_path / "home"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(CI / "github" / "prepare.sh")], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == status and says in done.stdout, done.stdout + done.stderr
    assert "image-key" not in output.read_text()


def test_the_prepare_step_stops_when_the_vm_assets_have_no_manifest(
        runner: dict[str, str], tmp_path: Path) -> None:
    """The vm-key was computed inside printf's argument, where a failing sha256sum does not
    stop a set -e script: with no manifest the step exited 0 and wrote an empty vm-key, and
    the VM assets were saved under the bare prefix. Now the step fails."""
    bin_dir = _stub_tool(tmp_path)
    output = Path(runner["GITHUB_OUTPUT"])
    env = {**runner, "INPUT_IMAGE": IMAGE, "IMAGE_KEY": "c" * 32,
           "ROTEIRO_HOME": str(tmp_path / "home"), "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", str(CI / "github" / "prepare.sh")], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode != 0 and "vm-key" not in output.read_text(), done.stdout + done.stderr
    # control: with a manifest the same step writes its key
    (tmp_path / "home" / "vm").mkdir(parents=True)
    (tmp_path / "home" / "vm" / "manifest.json").write_text("{}")
    output.write_text("")
    done = subprocess.run(["bash", str(CI / "github" / "prepare.sh")], env={**os.environ, **env},
                          capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert re.search(r"^vm-key=[0-9a-f]{32}$", output.read_text(), re.M)


# -- the image cache keeps only the image the lint used -------------------------------------


def test_keep_image_leaves_only_the_image_the_lint_used(runner: dict[str, str]) -> None:
    """keep-image.sh (before the image cache's save) runs the tool's `cache remove-image
    --all-except` on the image the lint used: prepare's for `image: build`, else the pinned
    input; a build that gave none removes nothing."""
    from roteiro_py.store import Store
    from tests.unit.store.store_images import make_image, provision

    store = Store.default()  # the test's own $ROTEIRO_HOME, which the script inherits
    old, new, pinned = (provision(store, make_image({name: name.encode() * 1000}), f"localhost/t/{name}")
                        for name in ("old", "new", "pinned"))
    script = CI / "github" / "keep-image.sh"
    refused = run(script, {**runner, "INPUT_IMAGE": "build", "BUILT_IMAGE": ""})
    assert refused.returncode == 2 and "the prepare step gave no image" in refused.stdout
    assert len(store.references()) == 3
    built = run(script, {**runner, "INPUT_IMAGE": "build", "BUILT_IMAGE": str(new)})
    assert built.returncode == 0, built.stdout + built.stderr
    assert [ref.name for ref in store.references()] == [str(new)]
    assert f"removed image {old}:" in built.stdout and f"removed image {pinned}:" in built.stdout
    # a pinned input: that one is kept
    provision(store, make_image({"pinned": b"pinned" * 1000}), "localhost/t/pinned")
    kept = run(script, {**runner, "INPUT_IMAGE": str(pinned), "BUILT_IMAGE": ""})
    assert kept.returncode == 0, kept.stdout + kept.stderr
    assert [ref.name for ref in store.references()] == [str(pinned)]


def test_the_gitlab_image_cache_keeps_only_the_image_the_lint_recorded(
        gitlab: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """GitLab saves the image cache under roteiro.toml's key after every job, whatever was
    restored: `cache.sh save` keeps only the image lint.sh recorded, so an image built
    before a toolchain moved (or another pinned one) is not archived again with each job."""
    from roteiro_py.store import Store
    from tests.unit.store.store_images import make_image, provision

    monkeypatch.setenv("ROTEIRO_HOME", gitlab["ROTEIRO_HOME"])
    store = Store.default()
    old, new = (provision(store, make_image({name: name.encode() * 1000}), f"localhost/t/{name}")
                for name in ("old", "new"))
    cache = tmp_path / "project" / ".pylint-sandbox-cache"
    # control: no record (the lint stopped before provisioning): nothing is removed
    assert run(CI / "gitlab" / "cache.sh", gitlab, "restore").returncode == 0
    unrecorded = run(CI / "gitlab" / "cache.sh", gitlab, "save")
    assert unrecorded.returncode == 0, unrecorded.stderr
    assert len(Store(cache / "roteiro" / "store").references()) == 2
    assert run(CI / "gitlab" / "cache.sh", gitlab, "restore").returncode == 0
    record = tmp_path / "home" / "ci-lint-image"
    record.write_text(f"{new}\n")
    saved = run(CI / "gitlab" / "cache.sh", gitlab, "save")
    assert saved.returncode == 0, saved.stderr
    assert f"removed image {old}:" in saved.stdout
    assert [ref.name for ref in Store(cache / "roteiro" / "store").references()] == [str(new)]
    assert not record.exists()


def test_the_gitlab_lint_records_the_image_it_provisioned_and_never_an_earlier_jobs(
        gitlab: dict[str, str], tmp_path: Path) -> None:
    bin_dir = tmp_path / "stub-bin"
    bin_dir.mkdir()
    (bin_dir / "pylint-sandbox").write_text(  # config get answers as the tool: the env's image
        '#!/bin/bash\ncase "$1" in\n  image) printf \'%s\\n\' "$STUB_BUILT" ;;\n'
        '  config) printf \'%s\\n\' "${ROTEIRO_LINT_IMAGE:-(unset)}" ;;\n'
        '  doctor) exit "${STUB_DOCTOR:-0}" ;;\nesac\nexit 0\n')
    (bin_dir / "pylint-sandbox").chmod(0o755)
    built = "localhost/roteiro/clippy:1.95.0@sha256:" + "2" * 64
    env = {**gitlab, "PYLINT_SANDBOX_IMAGE": "build", "STUB_BUILT": built, "PYLINT_SANDBOX_DIFF": "none",
           "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    record = tmp_path / "home" / "ci-lint-image"
    record.parent.mkdir(parents=True)
    record.write_text("localhost/roteiro/clippy:1.94.0@sha256:" + "1" * 64 + "\n")  # an earlier job's
    stopped = run(CI / "gitlab" / "lint.sh", {**env, "STUB_DOCTOR": "3"})
    assert stopped.returncode == 3 and not record.exists()
    done = run(CI / "gitlab" / "lint.sh", env)
    assert done.returncode == 0, done.stdout + done.stderr
    assert record.read_text() == built + "\n"
