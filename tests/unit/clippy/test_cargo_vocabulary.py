"""cargo's own vocabulary on `lint clippy`: package and target selection, `--target`, and
lint levels after `--`, each validated before it reaches the guest's cargo; run against
real host cargo where cargo decides (what a flag selects, what a missing target says)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from realcargo import copy_crate, run_clippy

from roteiro_py.clippy.classify import ClippyRun, classify
from roteiro_py.clippy.command import ClippyOptions, build_part, clippy_argv, lint_levels
from roteiro_py.clippy.parse import PathLayout
from roteiro_py.errors import TargetNotInImage, UsageError
from roteiro_py.lint.preflight import locate, member_of

ROOT = Path(__file__).resolve().parents[3]
DEMO = ROOT / "examples" / "demo-workspace"
BASE = ["cargo-clippy", "clippy", "--message-format=json", "--color=never", "--offline", "--locked"]


@pytest.mark.parametrize(("options", "tail"), [
    (ClippyOptions(packages=("demo-core",)), ["--package", "demo-core"]),
    (ClippyOptions(packages=("a", "b@1.0.0", "a")), ["--package", "a", "--package", "b@1.0.0"]),
    (ClippyOptions(workspace=True, exclude=("demo-app",)), ["--workspace", "--exclude", "demo-app"]),
    (ClippyOptions(targets=("lib", "bin:x", "tests", "example:e", "benches", "bench:b", "test:t",
                            "bins", "examples")),
     ["--lib", "--bin", "x", "--tests", "--example", "e", "--benches", "--bench", "b", "--test", "t",
      "--bins", "--examples"]),
    (ClippyOptions(target="aarch64-unknown-linux-gnu"), ["--target", "aarch64-unknown-linux-gnu"]),
    (ClippyOptions(packages=("demo-*",)), ["--package", "demo-*"]),  # a glob: cargo matches it
    # clippy's own flag, before `--` as `cargo clippy --help` lists it
    (ClippyOptions(no_deps=True, features=("a", "b"), levels=(("-D", "warnings"),)),
     ["--features", "a,b", "--no-deps", "--", "-D", "warnings"]),
    (ClippyOptions(levels=(("-D", "warnings"), ("-A", "clippy::needless_return"))),
     ["--", "-D", "warnings", "-A", "clippy::needless_return"]),
])
def test_each_selection_becomes_cargos_own_flag(options: ClippyOptions, tail: list[str]) -> None:
    assert clippy_argv(options) == BASE + tail


@pytest.mark.parametrize(("options", "says"), [
    (ClippyOptions(packages=("--manifest-path=/etc",)), "not a package name"),
    (ClippyOptions(packages=("a b",)), "not a package name"),
    (ClippyOptions(exclude=("x",)), "only be used together with --workspace"),
    (ClippyOptions(workspace=True, packages=("x",)), "cannot be used together"),
    (ClippyOptions(targets=("bin",)), "not a target selection"),
    (ClippyOptions(targets=("bin:--x",)), "not a target selection"),
    (ClippyOptions(targets=("lib",), all_targets=True), "--all-targets selects every target"),
    (ClippyOptions(target="../custom.json"), "not a target triple"),
    (ClippyOptions(target="X86_64-unknown-linux-gnu"), "not a target triple"),
    (ClippyOptions(target="x86_64-unknown-linux-gnu.json"), "not a target triple"),
    (ClippyOptions(target="x86_64-unknown-linux-gnu\n"), "not a target triple"),
    (ClippyOptions(packages=("a\n",)), "not a package name"),
    (ClippyOptions(targets=("bin:x\n",)), "not a target selection"),
])
def test_a_selection_cargo_would_read_otherwise_is_a_usage_error(options: ClippyOptions,
                                                                  says: str) -> None:
    with pytest.raises(UsageError, match=says):
        clippy_argv(options)


@pytest.mark.parametrize(("words", "pairs"), [
    (["-D", "warnings"], (("-D", "warnings"),)),
    (["-Dwarnings", "-Aclippy::needless_return"], (("-D", "warnings"), ("-A", "clippy::needless_return"))),
    (["--deny=clippy::pedantic", "--allow", "dead_code", "-W", "unused", "--forbid", "unsafe_code"],
     (("-D", "clippy::pedantic"), ("-A", "dead_code"), ("-W", "unused"), ("-F", "unsafe_code"))),
    ([], ()),
])
def test_lint_levels_are_taken_in_every_form_cargo_takes(words: list[str], pairs: tuple) -> None:
    assert lint_levels(words) == pairs


@pytest.mark.parametrize(("words", "named"), [
    (["-Zcodegen-backend=/tree/x.so"], "-Zcodegen-backend"),
    (["--cap-lints", "allow"], "--cap-lints"),
    (["-C", "opt-level=3"], "-C"),
    (["warnings"], "warnings"),
    (["-D"], "needs a lint name"),
    (["-D", "../x"], "not a lint name"),
    (["--deny=$(reboot)"], "not a lint name"),
    (["-D", "-Z"], "not a lint name"),
    (["-D", "warnings\n"], "not a lint name"),
])
def test_anything_but_a_lint_level_after_the_separator_is_refused_by_name(words: list[str],
                                                                          named: str) -> None:
    with pytest.raises(UsageError) as caught:
        lint_levels(words)
    assert named in caught.value.guidance().render_text()


def test_the_build_part_stops_at_the_lint_levels() -> None:
    argv = clippy_argv(ClippyOptions(packages=("a",), levels=(("-D", "warnings"),)))
    assert build_part(argv) == BASE + ["--package", "a"]
    assert build_part(BASE) == BASE  # control: no levels, all of it


def test_a_path_to_a_member_names_that_member(tmp_path: Path) -> None:
    demo = copy_crate(DEMO, tmp_path / "demo")
    assert member_of(locate(demo)) is None  # the workspace: its default members, as cargo
    assert member_of(locate(demo / "crates" / "demo-core")) == "demo-core"
    assert member_of(locate(demo / "crates" / "demo-core" / "src")) == "demo-core"
    assert member_of(locate(demo / "crates" / "demo-app" / "src" / "main.rs")) == "demo-app"
    assert member_of(locate(demo / "crates")) is None  # no member manifest on the way up
    # a member manifest that is a link is not read (the bounded reader refuses it)
    manifest = demo / "crates" / "demo-core" / "Cargo.toml"
    outside = tmp_path / "outside.toml"
    outside.write_text('[package]\nname = "not-from-the-tree"\n')
    manifest.unlink()
    manifest.symlink_to(outside)
    assert member_of(locate(demo / "crates" / "demo-core")) is None


def test_cargo_lints_only_the_member_a_path_names_and_levels_raise_findings(tmp_path: Path) -> None:
    """Real host cargo: `--package` from a member path selects what `cargo clippy` in that
    directory does, and `-D` raises the member's warnings to errors (cargo's own levels)."""
    demo = copy_crate(DEMO, tmp_path / "demo")
    core = clippy_argv(ClippyOptions(packages=(member_of(locate(demo / "crates" / "demo-core")) or "",)))
    in_dir = run_clippy(demo / "crates" / "demo-core", argv=BASE, target_dir=tmp_path / "t1")
    selected = run_clippy(demo, argv=core, target_dir=tmp_path / "t2")

    def linted(stdout: bytes) -> set[tuple[str, str, str]]:
        found = set()
        for line in stdout.splitlines():
            message = json.loads(line)
            if message.get("reason") == "compiler-message" and message["message"].get("code"):
                found.add((message["target"]["name"], message["message"]["code"]["code"],
                           message["message"]["level"]))
        return found

    assert linted(selected.stdout) == linted(in_dir.stdout) != set()
    assert {name for name, _, _ in linted(selected.stdout)} == {"demo_core"}
    denied = run_clippy(demo, argv=clippy_argv(ClippyOptions(packages=("demo-core",),
                                                             levels=(("-D", "warnings"),))),
                        target_dir=tmp_path / "t3")
    assert denied.status == 101
    assert {level for _, _, level in linted(denied.stdout)} == {"error"}
    assert {code for _, code, _ in linted(denied.stdout)} == {code for _, code, _ in linted(selected.stdout)}


def _uninstalled_target() -> str:
    done = subprocess.run(["rustup", "target", "list", "--installed"], capture_output=True,
                          text=True, timeout=60, check=False)
    for triple in ("riscv64gc-unknown-linux-gnu", "aarch64-unknown-linux-gnu", "s390x-unknown-linux-gnu"):
        if triple not in done.stdout.split():
            return triple
    pytest.skip("every candidate target is installed on this host")


@pytest.mark.skipif(shutil.which("rustup") is None, reason="needs rustup to know the installed targets")
def test_a_target_the_toolchain_lacks_is_refused_naming_it_and_the_image(tmp_path: Path) -> None:
    triple = _uninstalled_target()
    demo = copy_crate(DEMO, tmp_path / "demo")
    argv = clippy_argv(ClippyOptions(target=triple))
    done = run_clippy(demo, argv=argv, target_dir=tmp_path / "t")
    assert done.status == 101

    def judged(stdout: bytes, status: int) -> object:
        return classify(ClippyRun(command=argv, status=status, stdout=stdout, stderr=done.stderr,
                                  memory_mib=2048, limit_bytes=1 << 26),
                        tree=demo, image_reference="img@sha256:" + "a" * 64, layout=PathLayout())

    with pytest.raises(TargetNotInImage) as caught:
        judged(done.stdout, done.status)
    text = caught.value.guidance().render_text()
    assert triple in text and "img@sha256:" in text and "rustup target add" in text
    # control: the host's own target builds, and is a report
    host = run_clippy(demo, argv=BASE, target_dir=tmp_path / "h")
    assert host.status == 0 and judged(host.stdout, 0) is not None


def test_the_cli_takes_levels_after_the_separator_with_or_without_a_path(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("pylint-sandbox")
    env = {**os.environ, "ROTEIRO_HOME": str(tmp_path / "home")}
    image = "r.example/c@sha256:" + "a" * 64
    for argv in (["lint", "clippy", str(DEMO), "--image", image, "--", "-Zx"],
                 ["lint", "clippy", "--image", image, "--", "-Zx"]):
        done = subprocess.run([str(exe), *argv], capture_output=True, text=True, env=env, cwd=DEMO,
                              timeout=60, check=False)
        assert done.returncode == 2 and "'-Zx' after `--` is not a lint-level flag" in done.stderr
    # control: valid levels pass validation and the run goes on to the next check
    done = subprocess.run([str(exe), "lint", "clippy", "--image", image, "--", "-D", "warnings"],
                          capture_output=True, text=True, env=env, cwd=DEMO, timeout=60, check=False)
    assert done.returncode == 3 and "lint-level" not in done.stderr


def test_a_member_path_through_a_link_in_the_checkout_is_refused(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """A branch that makes `crates/foo` a link to another host directory must not get that
    directory linted (staged into the guest, quoted in the report)."""
    demo = copy_crate(DEMO, tmp_path / "demo")
    elsewhere = copy_crate(DEMO, tmp_path / "private")
    (demo / "crates" / "foo").symlink_to(elsewhere / "crates" / "demo-core")
    monkeypatch.chdir(demo)
    with pytest.raises(UsageError, match="symbolic link"):
        locate(Path("crates/foo"))
    with pytest.raises(UsageError, match="symbolic link"):
        locate(Path("crates/foo/src"))
    assert locate(Path("crates/demo-core")).workspace == demo  # control
    monkeypatch.chdir(tmp_path)
    assert locate(demo / "crates" / "demo-core").workspace == demo  # outside the working directory: the user's own path


def test_no_deps_lints_only_the_selected_package(tmp_path: Path) -> None:
    """Real cargo 1.95 with the argv built here: `--package demo-app` also lints the member
    it depends on (demo-core's findings: the control), `--no-deps` only demo-app."""
    copy = copy_crate(DEMO, tmp_path / "demo")

    def linted(no_deps: bool) -> set[str]:
        run = run_clippy(copy, ClippyOptions(packages=("demo-app",), no_deps=no_deps),
                         target_dir=tmp_path / "t")
        assert run.status == 0, run.stderr
        messages = [json.loads(line) for line in run.stdout.splitlines() if line.startswith(b"{")]
        return {span["file_name"].split("/src/")[0] for message in messages
                if message.get("reason") == "compiler-message"
                for span in message["message"]["spans"]}

    assert "crates/demo-core" in linted(False)
    assert linted(True) <= {"crates/demo-app"} and "crates/demo-core" not in linted(True)
