"""No `.cargo/config.toml` in the tree chooses which clippy runs (clippy/command.py).

Each attack is a tree config that puts the tree's own program in the place of clippy or
the compiler. The lint step that lint.py builds (its argv and its environment, from
`steps_for` and `guest_env`) runs on the host's real cargo 1.95 in the attacking tree
and must report the crate's real `compile_error!`, with the tree's program never run.
The control arm runs the tree the way cargo is ordinarily run and shows that the attack
is live (the forged version, or the tree's program leaving its marker).
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.clippy.command import PINNED_ENV, PROBE_CWD
from roteiro_py.config import Settings
from roteiro_py.errors import Unenforceable, UsageError
from roteiro_py.vm.mounts import derive_mounts

DATA = Path(__file__).resolve().parents[2] / "data"
FORGED = DATA / "forged-toolchain"
REAL_ERROR = "the real clippy ran on forged-toolchain"


def toolchain_bin() -> str:
    done = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True,
                          check=True, timeout=60)
    return str(Path(done.stdout.strip()) / "bin")


class Image:
    """An image whose PATH leads to the host's real toolchain (as the test image's does)."""

    def __init__(self) -> None:
        self.config = {"config": {"Env": [f"PATH={toolchain_bin()}:/usr/bin:/bin"]}}


def tree_with(tmp_path: Path, config: str) -> Path:
    tree = tmp_path / "tree"
    shutil.copytree(FORGED, tree, ignore=shutil.ignore_patterns("target"))
    (tree / ".cargo" / "config.toml").write_text(config.replace("@TREE@", str(tree)))
    for name in ("wrap.sh", "rustc"):
        script = tree / name
        script.write_text(f'#!/bin/sh\ntouch {tree}/marker-{name}\nexec "$@"\n' if name == "wrap.sh"
                          else f'#!/bin/sh\ntouch {tree}/marker-{name}\nexec rustc "$@"\n')
        script.chmod(0o755)
    return tree


def run(argv: list[str] | tuple[str, ...], tree: Path, env: dict[str, str],
        tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {**env, "HOME": str(tmp_path / "home"), "CARGO_HOME": str(tmp_path / "cargo-home"),
           "CARGO_TARGET_DIR": str(tmp_path / "target")}
    return subprocess.run(argv, cwd=tree, env=env, capture_output=True, text=True, check=False,
                          timeout=240)


def lint_step(tree: Path) -> tuple[tuple[str, ...], dict[str, str]]:
    settings = Settings()
    argv = lint.clippy_command(settings)
    steps = lint.steps_for(lint.Tree(tree, tree, tree), settings, lint.guest_env(Image()),  # type: ignore[arg-type]
                           argv)
    assert steps[2].workspace == tree
    return steps[2].argv, dict(steps[2].env)


def ordinary_env() -> dict[str, str]:
    return {"PATH": f"{toolchain_bin()}:/usr/bin:/bin"}


ALIAS = (FORGED / ".cargo" / "config.toml").read_text()
ATTACKS = {
    # `cargo clippy` aliased to the tree's program: the review's forgery.
    "alias": (ALIAS, ["cargo", "clippy", "--version"], "clippy 1.99.0", None),
    "rustc-wrapper": ('[build]\nrustc-wrapper = "@TREE@/wrap.sh"\n', ["cargo", "check"], None,
                      "marker-wrap.sh"),
    "rustc-workspace-wrapper": ('[build]\nrustc-workspace-wrapper = "@TREE@/wrap.sh"\n',
                                ["cargo", "check"], None, "marker-wrap.sh"),
    "rustc": ('[build]\nrustc = "@TREE@/rustc"\n', ["cargo", "check"], None, "marker-rustc"),
    # A codegen backend is a shared object loaded into clippy-driver; on a stable toolchain
    # the forced RUSTC_BOOTSTRAP lets the -Z flag through.
    "codegen-backend": ('[env]\nRUSTC_BOOTSTRAP = { value = "1", force = true }\n'
                        '[target.x86_64-unknown-linux-gnu]\n'
                        'rustflags = ["-Zcodegen-backend=@TREE@/backend.so"]\n',
                        ["cargo", "clippy"], "couldn't load codegen backend", None),
}


@pytest.mark.parametrize("attack", sorted(ATTACKS))
def test_no_tree_config_replaces_clippy_or_the_compiler(attack: str, tmp_path: Path) -> None:
    config, ordinary, forged_output, marker = ATTACKS[attack]
    tree = tree_with(tmp_path, config)

    control = run(ordinary, tree, ordinary_env(), tmp_path)
    if forged_output is not None:
        assert forged_output in control.stdout + control.stderr
    if marker is not None:
        assert (tree / marker).exists(), control.stderr
        (tree / marker).unlink()

    argv, env = lint_step(tree)
    done = run(argv, tree, env, tmp_path)
    assert done.returncode == 101, done.stderr
    assert REAL_ERROR in done.stdout
    assert "clippy 1.99.0" not in done.stdout and '"success":true' not in done.stdout
    assert "codegen backend" not in done.stderr
    assert not list(tree.glob("marker-*"))


def test_the_lint_runs_cargo_clippy_itself_with_the_pins() -> None:
    argv, env = lint_step(FORGED)
    assert argv[:2] == ("cargo-clippy", "clippy")
    assert {name: env[name] for name in PINNED_ENV} == PINNED_ENV == {
        "RUSTC": "rustc", "RUSTC_WRAPPER": "", "CARGO_ENCODED_RUSTFLAGS": ""}


def test_the_probes_run_outside_the_tree_in_a_directory_the_vm_provides(tmp_path: Path) -> None:
    tree = tmp_path / "ws"
    tree.mkdir()
    settings = Settings()
    steps = lint.steps_for(lint.Tree(tree, tree, tree), settings, lint.guest_env(Image()),  # type: ignore[arg-type]
                           lint.clippy_command(settings))
    probes = steps[:2]
    assert [step.argv for step in probes] == [("cargo-clippy", "--version"), ("rustc", "-vV")]
    for probe in probes:
        assert probe.workspace == Path(PROBE_CWD) and not probe.workspace.is_relative_to(tree)
    grant = lint.grant_for(lint.Tree(tree, tree, tree), None, None)
    for step in steps:  # the mount table accepts every step's working directory
        derive_mounts(grant, step, scratch=lint.GUEST_SCRATCH, host_cargo_home=tmp_path / "c")
    elsewhere = lint.steps_for(lint.Tree(tmp_path, tmp_path / "other", tmp_path), settings,
                               {}, ["x"])[2]
    with pytest.raises(Unenforceable, match="other"):  # control: another directory is not
        derive_mounts(grant, elsewhere, scratch=lint.GUEST_SCRATCH, host_cargo_home=tmp_path / "c")


@pytest.mark.parametrize("workspace", [PROBE_CWD, "/"])
def test_a_workspace_holding_the_probes_directory_is_refused(workspace: str) -> None:
    """Shares keep their host paths: a tree at /tmp would be where the probes run."""
    tree = lint.Tree(Path(workspace), Path(workspace), Path(workspace))
    with pytest.raises(UsageError, match=PROBE_CWD):
        lint.steps_for(tree, Settings(), {}, ["x"])
    lint.steps_for(lint.Tree(Path(PROBE_CWD, "ws"), Path(PROBE_CWD, "ws"), Path(PROBE_CWD)),
                   Settings(), {}, ["x"])  # control: a tree below it is not


def test_a_relative_path_entry_from_the_image_is_dropped() -> None:
    class Relative:
        config = {"config": {"Env": ["PATH=bin:/opt/rust/bin::./tools:/usr/bin"]}}

    class Only:
        config = {"config": {"Env": ["PATH=.:bin"]}}

    assert lint.guest_env(Relative())["PATH"] == "/opt/rust/bin:/usr/bin"  # type: ignore[arg-type]
    assert lint.guest_env(Only())["PATH"] == lint.DEFAULT_GUEST_PATH  # type: ignore[arg-type]


def test_the_forging_tree_is_a_real_attack_on_cargo_clippy(tmp_path: Path) -> None:
    """Control for the whole file: the unpinned `cargo clippy` argv the lint used to run
    reports a clean build of a crate that does not compile."""
    tree = tree_with(tmp_path, ALIAS)
    old = ["cargo", "clippy", "--message-format=json", "--color=never", "--offline", "--locked"]
    done = run(old, tree, ordinary_env(), tmp_path)
    assert done.returncode == 0 and '"success":true' in done.stdout
    assert REAL_ERROR not in done.stdout
