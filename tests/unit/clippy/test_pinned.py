"""No `.cargo/config.toml` in the tree chooses which clippy runs (clippy/command.py).

Each attack is a tree config that puts the tree's own program in the place of clippy or
the compiler. The lint step that lint/run.py builds (its argv and its environment, from
`steps_for` and `guest_env`) runs on the host's real cargo 1.95 in the attacking tree
and must report the crate's real `compile_error!`, with the tree's program never run.
The control arm runs the tree the way cargo is ordinarily run and shows that the attack
is live (the forged version, or the tree's program leaving its marker).
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.clippy.command import (
    PIN_PREFIX,
    PINNED_ENV,
    PROBE_CWD,
    PROBE_PREFIX,
    RUSTC_INFO_VARIABLE,
    pinned,
    unpinned,
)
from roteiro_py.config import Settings
from roteiro_py.errors import Unenforceable, UsageError
from roteiro_py.lint import judgement
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
    if RUSTC_INFO_VARIABLE in env:  # the guest's /tmp: never the host's, shared by every test
        env[RUSTC_INFO_VARIABLE] = str(tmp_path / "rustc-info")
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
    assert argv[:len(PIN_PREFIX)] == PIN_PREFIX
    assert unpinned(argv)[:2] == ["cargo-clippy", "clippy"]
    assert {name: env[name] for name in PINNED_ENV} == PINNED_ENV == {
        "RUSTC": "rustc", "RUSTC_WRAPPER": "/usr/bin/env", "CARGO_ENCODED_RUSTFLAGS": ""}


def rustc_runs(done: subprocess.CompletedProcess[str]) -> int:
    """How many times cargo ran the compiler to learn about it (CARGO_LOG's
    `cargo::util::rustc` lines), and no other run."""
    return sum(1 for line in done.stderr.splitlines()
               if "cargo::util::rustc" in line and "running `" in line)


def test_the_pinned_lint_keeps_cargos_rustc_info_cache(tmp_path: Path) -> None:
    """A lint with a kept or dependency-cached target directory asks rustc nothing cargo
    already cached there (issue 25: about 2.5 s of every warm lint under TCG). The lint
    step as lint/run.py builds it, run twice on the host's real cargo 1.95."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\nedition = "2021"\n')
    (tree / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    (tree / "src" / "lib.rs").write_text("pub fn f() {}\n")
    argv, env = lint_step(tree)
    env["CARGO_LOG"] = "cargo::util::rustc=debug"
    first = run(argv, tree, env, tmp_path)
    assert first.returncode == 0 and rustc_runs(first) > 0, first.stderr[-2000:]
    assert (tmp_path / "target" / ".rustc_info.json").is_file()
    again = run(argv, tree, env, tmp_path)
    assert again.returncode == 0 and rustc_runs(again) == 0, again.stderr[-2000:]
    # control: the empty RUSTC_WRAPPER the pin used to be turns the cache off
    (tmp_path / "target" / ".rustc_info.json").unlink()
    empty = run(unpinned(argv), tree, {**env, "RUSTC_WRAPPER": ""}, tmp_path)
    assert empty.returncode == 0 and rustc_runs(empty) > 0, empty.stderr[-2000:]
    assert "rustc info cache disabled" in empty.stderr
    assert not (tmp_path / "target" / ".rustc_info.json").exists()


def test_the_probes_run_outside_the_tree_in_a_directory_the_vm_provides(tmp_path: Path) -> None:
    tree = tmp_path / "ws"
    tree.mkdir()
    settings = Settings()
    steps = lint.steps_for(lint.Tree(tree, tree, tree), settings, lint.guest_env(Image()),  # type: ignore[arg-type]
                           lint.clippy_command(settings))
    probes = steps[:2]
    assert [unpinned(step.argv) for step in probes] == [["cargo-clippy", "--version"], ["rustc", "-vV"]]
    assert all(step.argv[:len(PROBE_PREFIX)] == PROBE_PREFIX for step in probes)
    assert steps[2].argv[:len(PIN_PREFIX)] == PIN_PREFIX
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


# A rustup image without RUST_VERSION (PATH and RUSTUP_HOME only, e.g. debian + rustup.sh)
# ran `cargo-clippy` as a rustup proxy that obeyed the tree's `rust-toolchain.toml`:
# `[toolchain] path = "<a directory in the tree>"` replaced clippy, cargo and rustc with the
# tree's programs while the probes (outside the tree) still reported the image's clippy.
# Here the host's real rustup stands in for the image's (the guest runs the same proxy with
# the same argv and environment).
FORGED_LINE = '{"reason":"build-finished","success":true}'


def rustup_image_env() -> list[str]:
    proxy = shutil.which("cargo-clippy")
    rustup_home = Path(os.environ.get("RUSTUP_HOME", Path.home() / ".rustup"))
    if proxy is None or shutil.which("rustup") is None or not (rustup_home / "toolchains").is_dir():
        pytest.skip("needs a rustup-managed cargo-clippy on the host")
    return [f"PATH={Path(proxy).parent}:/usr/bin:/bin", f"RUSTUP_HOME={rustup_home}"]


def toolchain_file_tree(tmp_path: Path) -> Path:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\nedition = "2021"\n')
    (tree / "src" / "lib.rs").write_text(f'compile_error!("{REAL_ERROR}");\n')
    fake = tree / "fake" / "bin"
    fake.mkdir(parents=True)
    for name in ("cargo-clippy", "cargo", "rustc", "clippy-driver"):
        (fake / name).write_text(f"#!/bin/sh\necho '{FORGED_LINE}'\n")
        (fake / name).chmod(0o755)
    (tree / "rust-toolchain.toml").write_text(f'[toolchain]\npath = "{tree / "fake"}"\n')
    (tree / "Cargo.lock").write_text("version = 4\n\n[[package]]\nname = \"a\"\nversion = \"0.1.0\"\n")
    return tree


class RustupImage:
    def __init__(self, env: list[str]) -> None:
        self.config = {"config": {"Env": env}}


def test_the_trees_rust_toolchain_file_does_not_choose_the_toolchain(tmp_path: Path) -> None:
    image_env = rustup_image_env()
    tree = toolchain_file_tree(tmp_path)
    settings = Settings()
    env = lint.guest_env(RustupImage(image_env))  # type: ignore[arg-type]
    assert "RUST_VERSION" not in env and "RUSTUP_TOOLCHAIN" not in env
    steps = lint.steps_for(lint.Tree(tree, tree, tree), settings, env, lint.clippy_command(settings))

    # control: the unpinned lint argv the guest used to run is the tree's program
    control = run(unpinned(steps[2].argv), tree, dict(steps[2].env), tmp_path)
    assert control.returncode == 0 and control.stdout.strip() == FORGED_LINE, control

    done = run(steps[2].argv, tree, dict(steps[2].env), tmp_path)
    assert done.returncode == 101, done.stderr
    assert REAL_ERROR in done.stdout and FORGED_LINE not in done.stdout
    # the probes, run the same way, name the toolchain that linted
    for probe in steps[:2]:
        asked = run(probe.argv, probe.workspace, dict(probe.env), tmp_path)
        assert asked.returncode == 0 and FORGED_LINE not in asked.stdout, asked
    version = run(steps[0].argv, steps[0].workspace, dict(steps[0].env), tmp_path).stdout
    assert version.startswith("clippy 0.1."), version


def test_an_image_whose_rustc_cannot_answer_is_refused_by_the_probe(tmp_path: Path) -> None:
    """No sysroot, no lint: the wrapper exits 127 naming the question, which the probe
    turns into ImageLacksLinter, rather than falling back to whatever `cargo-clippy` is."""
    from roteiro_py.clippy.toolchain import ProbeOutput, parse_clippy_version
    from roteiro_py.errors import ImageLacksLinter

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cargo-clippy").write_text("#!/bin/sh\necho 'clippy 0.1.95'\n")
    (bin_dir / "cargo-clippy").chmod(0o755)
    env = {"PATH": f"{bin_dir}:/usr/bin:/bin"}
    probe = lint.steps_for(lint.Tree(tmp_path, tmp_path, tmp_path), Settings(), env, ["x"])[0]
    assert run(unpinned(probe.argv), tmp_path, env, tmp_path).stdout == "clippy 0.1.95\n"  # control
    done = run(probe.argv, probe.workspace, env, tmp_path)
    assert done.returncode == 127 and "rustc --print sysroot" in done.stderr, done
    with pytest.raises(ImageLacksLinter) as refused:
        parse_clippy_version(ProbeOutput(done.returncode, done.stdout.encode(), done.stderr.encode()),
                             reference="r")
    assert "rustc --print sysroot` failed outside the tree" in refused.value.output


def test_a_sysroot_query_killed_by_a_signal_keeps_its_status(tmp_path: Path) -> None:
    """An OOM kill of `rustc --print sysroot` was mapped to 127, so the run was reported as
    an unexpected status instead of a kill; 128+N is what lint/judgement.py reads as signal N."""
    from roteiro_py.clippy.command import pinned

    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    rustc = bin_dir / "rustc"
    rustc.write_text("#!/bin/sh\nkill -KILL $$\n")
    rustc.chmod(0o755)
    killed = subprocess.run(list(pinned(("cargo-clippy", "--version"))), capture_output=True,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30, check=False)
    assert judgement._signal_of(killed.returncode) == "SIGKILL", (killed.returncode, killed.stderr)
    rustc.write_text("#!/bin/sh\nexit 1\n")  # control: a plain failure is still 127
    failed = subprocess.run(list(pinned(("cargo-clippy", "--version"))), capture_output=True,
                            env={"PATH": f"{bin_dir}:/usr/bin:/bin"}, timeout=30, check=False)
    assert failed.returncode == 127 and b"failed outside the tree" in failed.stderr


def stub_toolchain(tmp_path: Path, clippy_says: str) -> dict[str, str]:
    """An image's PATH holding a `rustc` whose sysroot has a cargo-clippy printing
    `clippy_says` and exiting 0, and a rustc answering `-vV`."""
    sysroot = tmp_path / "sysroot"
    (sysroot / "bin").mkdir(parents=True)
    scripts = {
        "rustc": f'#!/bin/sh\n[ "$1" = --print ] && {{ echo {sysroot}; exit 0; }}\n'
                 'printf "rustc 1.95.0\\nrelease: 1.95.0\\nhost: x86_64-unknown-linux-gnu\\n"\n',
        "cargo-clippy": f"#!/bin/sh\nprintf '{clippy_says}'\n",
    }
    for name, text in scripts.items():
        (sysroot / "bin" / name).write_text(text)
        (sysroot / "bin" / name).chmod(0o755)
    return {"PATH": f"{sysroot / 'bin'}:/usr/bin:/bin"}


def test_the_pin_script_sets_the_wrapper_whatever_the_environment_says(tmp_path: Path) -> None:
    """PIN_SCRIPT itself exports RUSTC_WRAPPER (the image's /usr/bin/env here; an empty one
    on an image without it), so no step runs with a wrapper from anywhere else."""
    env = stub_toolchain(tmp_path, "x\\n")
    sysroot_bin = Path(env["PATH"].split(":")[0])
    (sysroot_bin / "cargo-clippy").write_text('#!/bin/sh\nprintf "%s\\n" "$RUSTC_WRAPPER"\n')
    from roteiro_py.clippy.command import NEUTRAL_WRAPPER, pinned

    for given in ({}, {"RUSTC_WRAPPER": str(tmp_path / "wrap.sh")}, {"RUSTC_WRAPPER": ""}):
        done = subprocess.run(list(pinned(("cargo-clippy", "--version"))), env={**env, **given},
                              capture_output=True, text=True, timeout=30, check=False)
        assert (done.returncode, done.stdout) == (0, NEUTRAL_WRAPPER + "\n"), (given, done)


def test_a_sysroot_holding_an_equals_sign_is_refused(tmp_path: Path) -> None:
    """NEUTRAL_WRAPPER (`env`) would read `<sysroot>/bin/rustc` as a variable to set, not
    as the program to run."""
    env = stub_toolchain(tmp_path / "a=b", "clippy 0.1.95\\n")
    probe = lint.steps_for(lint.Tree(tmp_path, tmp_path, tmp_path), Settings(), env, ["x"])[0]
    done = run(probe.argv, tmp_path, env, tmp_path)
    assert done.returncode == 127 and "holds '='" in done.stderr, done
    control = stub_toolchain(tmp_path / "ab", "clippy 0.1.95\\n")
    assert run(probe.argv, tmp_path, control, tmp_path).returncode == 0


@pytest.mark.parametrize("says", ["", "\\n", " \\t\\n\\n"])
def test_a_probe_that_exits_0_and_prints_nothing_fails_the_step(tmp_path: Path, says: str) -> None:
    """The step fails, so the guest (stop_on_failure) never starts the tree's build: judged
    only after the job, it was ImageLacksLinter once the build had run. The probe's argv
    as lint/run.py builds it, run by a real /bin/sh; the verdict is the one the host gives."""
    from roteiro_py.clippy.command import SILENT_PROBE_STATUS
    from roteiro_py.clippy.toolchain import ProbeOutput, parse_clippy_version
    from roteiro_py.errors import ImageLacksLinter

    env = stub_toolchain(tmp_path, says)
    probe = lint.steps_for(lint.Tree(tmp_path, tmp_path, tmp_path), Settings(), env, ["x"])[0]
    done = run(probe.argv, tmp_path, env, tmp_path)
    assert done.returncode == SILENT_PROBE_STATUS, done
    assert done.stderr == ("pylint-sandbox: `cargo-clippy --version` exited 0 and printed "
                           "nothing; the build does not run\n")
    with pytest.raises(ImageLacksLinter) as refused:
        parse_clippy_version(ProbeOutput(done.returncode, done.stdout.encode(),
                                         done.stderr.encode()), reference="r")
    assert "exited 0 and printed nothing" in refused.value.output


@pytest.mark.parametrize("says", ["clippy 0.1.95 (59807616e1 2026-04-14)\\n", "clippy 0.1.95", "x\\n\\n"])
def test_control_a_probe_that_answers_passes_its_answer_through(tmp_path: Path, says: str) -> None:
    env = stub_toolchain(tmp_path, says)
    clippy, rustc = lint.steps_for(lint.Tree(tmp_path, tmp_path, tmp_path), Settings(), env, ["x"])[:2]
    done = run(clippy.argv, tmp_path, env, tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, says.replace("\\n", "\n").rstrip("\n") + "\n", "")
    asked = run(rustc.argv, tmp_path, env, tmp_path)
    assert (asked.returncode, asked.stdout) == (
        0, "rustc 1.95.0\nrelease: 1.95.0\nhost: x86_64-unknown-linux-gnu\n"), asked


def empty_crate(where: Path) -> Path:
    (where / "src").mkdir(parents=True)
    (where / "Cargo.toml").write_text('[package]\nname = "empty"\nversion = "0.1.0"\nedition = "2021"\n')
    (where / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "empty"\nversion = "0.1.0"\n')
    (where / "src" / "lib.rs").write_text("")
    return where


def test_the_clippy_probe_leaves_cargos_rustc_answers_for_the_lint(tmp_path: Path) -> None:
    """The clippy probe (a VM template step) runs cargo-clippy once on a crate of its own,
    with the lint's environment, and keeps cargo's `.rustc_info.json`; the lint step copies
    it into its empty target directory and cargo runs rustc no more (issue 25). Real cargo
    1.95 on the host, the steps' argv and environment as lint/run.py builds them; only the
    guest's places are moved under tmp_path. The answer the probe prints is unchanged."""
    from roteiro_py.clippy.command import RUSTC_INFO_DIR, RUSTC_INFO_FILE, RUSTC_INFO_VARIABLE, SYSROOT_FILE

    tree = empty_crate(tmp_path / "tree")
    settings = Settings()
    steps = lint.steps_for(lint.Tree(tree, tree, tree), settings, lint.guest_env(Image()),  # type: ignore[arg-type]
                           lint.clippy_command(settings))
    clippy_probe, lint_step_ = steps[0], steps[2]
    # the template's key covers the probes' argv and environment (vm/qemu/template.py):
    # the warm-up's environment is the lint's, the variable included
    assert clippy_probe.env == lint_step_.env
    assert clippy_probe.env[RUSTC_INFO_VARIABLE] == RUSTC_INFO_DIR
    assert Path(RUSTC_INFO_DIR).parent == Path(PROBE_CWD)
    info = tmp_path / "rustc-info"  # where run() moves the guest's RUSTC_INFO_DIR
    (tmp_path / "probe-cwd").mkdir()
    moved = {**clippy_probe.env, RUSTC_INFO_VARIABLE: str(info), "HOME": str(tmp_path / "home"),
             "CARGO_HOME": str(tmp_path / "cargo-home")}
    probed_ = subprocess.run(clippy_probe.argv, cwd=tmp_path / "probe-cwd", env=moved,
                             capture_output=True, text=True, timeout=240, check=False)
    assert probed_.returncode == 0 and probed_.stdout.startswith("clippy 0.1."), probed_
    assert probed_.stderr == ""
    assert sorted(p.name for p in info.iterdir()) == [RUSTC_INFO_FILE, SYSROOT_FILE]  # the rest removed
    argv, env = lint_step_.argv, {**lint_step_.env, RUSTC_INFO_VARIABLE: str(info),
                                  "CARGO_LOG": "cargo::util::rustc=debug"}
    prefilled = run(argv, tree, env, tmp_path)
    assert prefilled.returncode == 0 and rustc_runs(prefilled) == 0, prefilled.stderr[-3000:]
    assert "rustc info cache hit" in prefilled.stderr
    # control: the same lint with no file to copy probes rustc
    shutil.rmtree(tmp_path / "target")
    (info / RUSTC_INFO_FILE).unlink()
    cold = run(argv, tree, env, tmp_path)
    assert cold.returncode == 0 and rustc_runs(cold) > 0, cold.stderr[-3000:]
    assert [m for m in prefilled.stdout.splitlines() if '"compiler-message"' in m] == \
        [m for m in cold.stdout.splitlines() if '"compiler-message"' in m]


@pytest.mark.parametrize("present", ["none", "own", "link", "no-variable", "no-warm-file"])
def test_the_lint_step_copies_the_warm_file_only_into_a_target_directory_without_one(
        tmp_path: Path, present: str) -> None:
    """A kept scratch or a dependency cache carries its own `.rustc_info.json`: never
    replaced (nor a link of that name followed); nothing is copied without the variable
    or without the warm-up's file."""
    from roteiro_py.clippy.command import RUSTC_INFO_FILE, RUSTC_INFO_VARIABLE, pinned

    env = stub_toolchain(tmp_path, "x\\n")
    sysroot_bin = Path(env["PATH"].split(":")[0])
    (sysroot_bin / "cargo-clippy").write_text(
        '#!/bin/sh\ncat "$CARGO_TARGET_DIR/.rustc_info.json" 2>/dev/null || echo absent\n')
    info, target = tmp_path / "info", tmp_path / "scratch" / "target"
    info.mkdir()
    if present != "no-warm-file":
        (info / RUSTC_INFO_FILE).write_text("warm\n")
    if present == "own":
        target.mkdir(parents=True)
        (target / ".rustc_info.json").write_text("own\n")
    if present == "link":
        target.mkdir(parents=True)
        (target / ".rustc_info.json").symlink_to(tmp_path / "elsewhere")
    env = {**env, "CARGO_TARGET_DIR": str(target)}
    if present != "no-variable":
        env[RUSTC_INFO_VARIABLE] = str(info)
    done = subprocess.run(list(pinned(("cargo-clippy", "clippy"))), env=env, cwd=tmp_path,
                          capture_output=True, text=True, timeout=30, check=False)
    expected = {"none": "warm\n", "own": "own\n"}.get(present, "absent\n")
    assert (done.returncode, done.stdout, done.stderr) == (0, expected, ""), done
    assert not (tmp_path / "elsewhere").exists()


#: The uid the sealing test runs the pinned step as: not root, not the file owner.
UNPRIVILEGED = 65534


@pytest.mark.skipif(os.geteuid() != 0, reason="sealing is root's: the test gives files to root and runs as another uid")
@pytest.mark.parametrize("state", ["sealed", "user-dir", "user-file", "writable-file", "writable-dir",
                                   "no-variable", "empty", "relative", "linked-dir", "linked-file",
                                   "relative-variable"])
def test_the_pin_reads_the_sysroot_only_from_a_sealed_file(state: str) -> None:
    """The sysroot a template's clippy probe found is read back, with no rustc run, only from
    a file and directory the step's user neither owns nor can write (what guest init seals in
    a VM template); anything else is asked of `rustc --print sysroot` as before, and the
    sealed answer is checked as that one is. The sealed file names one toolchain, the
    image's PATH another: which cargo-clippy ran says which answer the pin took. The step
    runs as an unprivileged uid under a real /bin/sh, as in the guest.

    A link is never sealed, whatever it points at: where the directory is the user's (a
    cold boot: the clippy probe made it) or absent, an earlier step's build script can
    put a link in its place, to any directory it does not own holding a file named as
    SYSROOT_FILE with the text it chooses (a share's, every file of which is the host
    user's and read-only: root's when the lint runs as root), and `-O`/`-w` follow the
    link (linked-dir). A relative variable would be read from the step's working
    directory, the tree."""
    import tempfile

    from roteiro_py.clippy.command import SYSROOT_FILE, pinned

    with tempfile.TemporaryDirectory() as name:
        top = Path(name)
        top.chmod(0o755)
        log = top / "log"
        log.mkdir(mode=0o777)
        log.chmod(0o777)
        for which in ("sealed", "asked"):
            (top / which / "bin").mkdir(parents=True)
            clippy = top / which / "bin" / "cargo-clippy"
            clippy.write_text(f"#!/bin/sh\necho {which}\n")
            clippy.chmod(0o755)
        rustc = top / "asked" / "bin" / "rustc"
        rustc.write_text(f'#!/bin/sh\necho "$*" >> {log}/rustc\necho {top / "asked"}\n')
        rustc.chmod(0o755)
        info = top / ("sealed-elsewhere" if state == "linked-dir" else "info")
        info.mkdir()
        answer = {"empty": "", "relative": "sealed"}.get(state, str(top / "sealed"))
        (info / SYSROOT_FILE).write_text(answer + "\n")
        (info / SYSROOT_FILE).chmod(0o644)
        if state == "user-dir":
            os.chown(info, UNPRIVILEGED, UNPRIVILEGED)
        if state == "user-file":
            os.chown(info / SYSROOT_FILE, UNPRIVILEGED, UNPRIVILEGED)
        if state == "writable-file":
            (info / SYSROOT_FILE).chmod(0o666)
        if state == "writable-dir":
            info.chmod(0o777)
        if state == "linked-dir":  # the user's link where the directory was
            (top / "info").symlink_to(info)
            os.chown(top / "info", UNPRIVILEGED, UNPRIVILEGED, follow_symlinks=False)
            info = top / "info"
        if state == "linked-file":  # the sealed directory's file a link to a sealed file
            (info / SYSROOT_FILE).rename(top / "sealed-file")
            (info / SYSROOT_FILE).symlink_to(top / "sealed-file")
        env = {"PATH": f"{top / 'asked' / 'bin'}:/usr/bin:/bin"}
        if state == "relative-variable":
            env[RUSTC_INFO_VARIABLE] = info.name  # the cwd is `top`: ./info is the sealed one
        elif state != "no-variable":
            env[RUSTC_INFO_VARIABLE] = str(info)
        done = subprocess.run(["setpriv", f"--reuid={UNPRIVILEGED}", f"--regid={UNPRIVILEGED}",
                               "--clear-groups", *pinned(("cargo-clippy", "--version"))],
                              env=env, cwd=top, capture_output=True, text=True, timeout=30, check=False)
        asked = (log / "rustc").read_text() if (log / "rustc").exists() else ""
        if state == "sealed":
            assert (done.returncode, done.stdout, done.stderr, asked) == (0, "sealed\n", "", ""), done
        elif state == "relative":  # sealed, but not an absolute path: refused as rustc's would be
            assert done.returncode == 127 and "is not an absolute path" in done.stderr, done
            assert asked == ""
        else:  # control: the same step with the file not sealed asks rustc
            assert (done.returncode, done.stdout, done.stderr) == (0, "asked\n", ""), done
            assert asked == "--print sysroot\n"


@pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("rustup") is None,
                    reason="needs root (a private /tmp in its own mount namespace) and rustup")
def test_a_toolchain_file_an_earlier_step_left_in_tmp_chooses_no_sysroot(tmp_path: Path) -> None:
    """/tmp is the guest's for a whole boot, not each step's: in a VM whose later steps are
    pinned after a tree's build scripts ran (the dependency cache's build, its second
    selection), one of them can leave `/tmp/rust-toolchain.toml` naming a toolchain of its
    own. Where the sysroot is asked of rustc (a cold boot; a clone reads the sealed one)
    and the environment names no RUSTUP_TOOLCHAIN (an image without RUST_VERSION), rustup
    obeys a toolchain file in the working directory or above it. Real rustup, real /bin/sh,
    a private tmpfs on /tmp as the guest's; the planting step runs as an unprivileged uid,
    the pinned step as root here only because rustup's home is under /root (which
    toolchain it picks does not depend on the uid). Control: the same file makes rustc in
    /tmp answer the planted toolchain, so the attack is live."""
    proxy = shutil.which("rustc")
    assert proxy is not None
    plant = ('mkdir -p /tmp/evil/bin && printf "#!/bin/sh\\necho /tmp/evil\\n" > /tmp/evil/bin/rustc && '
             'printf "#!/bin/sh\\necho tree\\n" > /tmp/evil/bin/cargo-clippy && chmod 755 /tmp/evil/bin/* && '
             'printf "[toolchain]\\npath = \\"/tmp/evil\\"\\n" > /tmp/rust-toolchain.toml')
    inner = ('mount -t tmpfs -o mode=1777 tmpfs /tmp || exit 3\n'
             f'setpriv --reuid={UNPRIVILEGED} --regid={UNPRIVILEGED} --clear-groups '
             f'sh -c {shlex.quote(plant)} || exit 4\n'
             'echo "control: $(cd /tmp && rustc --print sysroot)"\n'
             'exec "$@"\n')
    env = {"PATH": f"{Path(proxy).parent}:/usr/bin:/bin", "HOME": os.environ.get("HOME", "/root"),
           **{k: v for k, v in os.environ.items() if k in ("RUSTUP_HOME", "CARGO_HOME")}}
    done = subprocess.run(["unshare", "-m", "--propagation", "private", "sh", "-c", inner, "sh",
                           *pinned(("cargo-clippy", "--version"))],
                          env=env, cwd=tmp_path, capture_output=True, text=True, timeout=120, check=False)
    control, _, answer = done.stdout.partition("\n")
    assert control == "control: /tmp/evil", done
    assert done.returncode == 0 and answer.startswith("clippy 0.1.") and "tree" not in answer, done
