"""What the lint decides about its dependency cache without a VM: when a build is one to
publish, which failures are remembered, and how the guest is told to layer the cache."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from roteiro_py.clippy.command import ClippyOptions, build_part, clippy_argv, without_target_selection
from roteiro_py.lint.dep_cache import BUILD_CLEANUP, Verdict, judge_build
from roteiro_py.process.sandbox import Command
from roteiro_py.vm.api import Isolation, JobOutcome, VmOutcome
from roteiro_py.vm.mounts import MountTable, Share
from roteiro_py.vm.qemu import job

NOW = datetime.now(UTC)
ISOLATION = Isolation("qemu", "tcg", False, "tcg")


def step(exit: int | None, stdout: bytes = b"", failure: str | None = None,
         stderr: bytes = b"") -> VmOutcome:
    return VmOutcome(command=Command("x", (), Path("/tmp"), {}, timeout=1), exit=exit,
                     stdout=stdout, stderr=stderr, timed_out=exit is None, truncated=False,
                     duration=1.0, started=NOW, ended=NOW, failure=failure, isolation=ISOLATION)


def outcome(*steps: VmOutcome, completed: bool = True, failure: str | None = None) -> JobOutcome:
    return JobOutcome(steps=steps, isolation=ISOLATION, completed=completed, boot_seconds=1.0,
                      failure=failure, console=b"")


GOOD = (step(0), step(0), step(0), step(0, b"cleaned\n"))


def test_a_whole_build_is_published() -> None:
    assert judge_build(outcome(*GOOD), probes=2) == Verdict(True)


def test_what_cargo_could_build_is_published_with_a_note() -> None:
    """101 under --keep-going: every unit it could build is there, each fresh only for the
    inputs it was built from; the lint builds the rest itself."""
    judged = judge_build(outcome(step(0), step(0), step(101), step(0, b"cleaned\n")), probes=2)
    assert judged.publish and judged.note is not None and "builds those itself" in judged.note


@pytest.mark.parametrize(("job_outcome", "reason", "lasting"), [
    (outcome(step(0), step(1)), "toolchain probe", False),
    (outcome(step(0), step(0), step(1)), "cargo exited 1", True),
    (outcome(step(0), step(0), step(137)), "cargo exited 137", False),
    (outcome(step(0), step(0), step(None, failure="killed at the step's deadline of 9 s"),
             completed=False), "killed at the step's deadline", False),
    (outcome(step(0), step(0), completed=False, failure="the VM stopped: out of memory"),
     "out of memory", False),
    (outcome(step(0), step(0), step(0)), "removing the stubs' build", False),
    (outcome(step(0), step(0), step(101)), "removing the stubs' build", False),
    (outcome(step(0), step(0), step(0), step(0, b"")), "removing the stubs' build", False),
    (outcome(*GOOD, completed=False, failure="x"), "removing the stubs' build", False),
])
def test_a_build_short_of_whole_is_never_published(job_outcome: JobOutcome, reason: str,
                                                   lasting: bool) -> None:
    """Only a usage error (1) is remembered: it fails the same way every time; a deadline,
    a signal or a dead VM may not, and the next lint tries again."""
    judged = judge_build(job_outcome, probes=2)
    assert not judged.publish and judged.note is not None
    assert reason in judged.note and judged.lasting is lasting


CARGO_ERROR = (b"   Compiling itoa v1.0.15\nerror: could not find `Cargo.toml` in "
               b"`/root/.roteiro/cache/skeletons/ws-1` or any parent directory\n")


@pytest.mark.parametrize(("cleanup", "then"), [
    (step(1, stderr=b"nsenter: can't change directory to '/root/x': Permission denied\n"),
     "removing the stubs' build from it did not finish (it exited 1: nsenter: can't change"),
    (step(0, b"no target\n"), "cargo built nothing from the skeleton (exit 101): error: could not find"),
])
def test_a_failed_build_says_what_cargo_said(cleanup: VmOutcome, then: str) -> None:
    """As root, every build failed with cargo's "could not find `Cargo.toml`" (the guest
    could not reach the skeleton under /root) and the report said only "removing the
    stubs' build from it did not finish": the reason is cargo's own, first."""
    judged = judge_build(outcome(step(0), step(0), step(101, stderr=CARGO_ERROR), cleanup), probes=2)
    assert not judged.publish and judged.note is not None
    assert "error: could not find `Cargo.toml` in `/root/.roteiro/cache/skeletons/ws-1`" in judged.note
    assert then in judged.note and "Compiling" not in judged.note
    # control: a build that said nothing keeps the bare reason
    quiet = judge_build(outcome(step(0), step(0), step(101), cleanup), probes=2)
    assert quiet.note is not None and "could not find" not in quiet.note


def test_a_failed_probe_says_what_it_said() -> None:
    said = b"error: toolchain 'stable' is not installed\n"
    judged = judge_build(outcome(step(0), step(1, stderr=said)), probes=2)
    assert judged.note == ("the guest's toolchain probe did not succeed (it exited 1: "
                           "error: toolchain 'stable' is not installed)")
    quiet = judge_build(outcome(step(0)), probes=2)  # control: a probe that never ran
    assert quiet.note == "the guest's toolchain probe did not succeed"


def test_what_cargo_said_is_cut() -> None:
    long = b"error: " + b"x" * 5000 + b"\n"
    judged = judge_build(outcome(step(0), step(0), step(2, stderr=long)), probes=2)
    assert judged.note is not None and judged.note.startswith("cargo exited 2: error: xxx")
    assert judged.note.endswith("…") and len(judged.note) < 260


def test_the_cleanup_removes_the_stubs_fingerprints_by_name_and_every_incremental_dir() -> None:
    # the names are positional arguments, never spliced into the script
    assert '"$@"' in BUILD_CLEANUP and "*/.fingerprint/\"$name\"-*" in BUILD_CLEANUP
    assert "*/incremental" in BUILD_CLEANUP and BUILD_CLEANUP.endswith("echo cleaned")


def table(scratch_mode: str | None) -> MountTable:
    return MountTable((Share(Path("/ws"), "/ws"),), "/.roteiro-scratch" if scratch_mode else None,
                      scratch_mode, False)


def test_the_guest_layers_the_cache_last_once_the_scratch_is_mounted() -> None:
    script = job.mounts_script(table("rw"), images={0}, dep_cache="/.roteiro-scratch/target")
    lines = script.splitlines()
    assert lines[-1] == f"mount_depcache {job.DEPS_SERIAL} /.roteiro-scratch/target"
    assert lines.index(lines[-1]) > next(i for i, line in enumerate(lines) if line.startswith("mount_scratch"))
    assert "mount_depcache" not in job.mounts_script(table("rw"), images={0})  # control


@pytest.mark.parametrize("mode", ["ro", None])
def test_a_cache_is_layered_only_under_a_writable_scratch(mode: str | None) -> None:
    with pytest.raises(ValueError, match="writable scratch"):
        job.mounts_script(table(mode), dep_cache="/.roteiro-scratch/target")


def test_a_hostile_cache_directory_name_stays_one_shell_word() -> None:
    script = job.mounts_script(table("rw"), dep_cache="/.roteiro-scratch/t'; reboot -f; '")
    assert script.splitlines()[-1] == (
        "mount_depcache depcache '/.roteiro-scratch/t'\"'\"'; reboot -f; '\"'\"''")


@pytest.mark.parametrize("shell", ["sh", "busybox"])
def test_the_cleanup_removes_exactly_the_stubs_build_state(tmp_path: Path, shell: str) -> None:
    """Run by a real shell over a target directory shaped as cargo leaves it: each path
    package's `<name>-<hex>` fingerprint and build directories go, in every profile and
    target-triple directory; a registry crate whose name only starts the same stays."""
    import shutil
    import subprocess

    argv = [shutil.which(shell) or pytest.skip(f"no {shell}")]
    if shell == "busybox":
        argv.append("sh")
    target = tmp_path / "target"
    kept = ["debug/.fingerprint/member-macros-0123456789abcdef", "debug/.fingerprint/itoa-89abcdef01234567",
            "debug/build/itoa-89abcdef01234567", "debug/.fingerprint/member-x", "debug/deps/libmember-0123.rmeta"]
    gone = ["debug/.fingerprint/member-0123456789abcdef", "debug/build/member-fedcba9876543210",
            "x86_64-unknown-linux-gnu/debug/.fingerprint/member-0123456789abcdef",
            "debug/.fingerprint/other-0011223344556677", "debug/incremental/member-1/s-1",
            "release/incremental/x"]
    for rel in kept + gone:
        (target / rel).mkdir(parents=True)
    done = subprocess.run([*argv, "-c", BUILD_CLEANUP, "sh", "member", "other"], env={"CARGO_TARGET_DIR": str(target)},
                          capture_output=True, text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, "cleaned\n"), done.stderr
    assert all((target / rel).is_dir() for rel in kept)
    assert not any((target / rel).exists() for rel in gone)
    # no target directory at all: said so, nothing else done
    done = subprocess.run([*argv, "-c", BUILD_CLEANUP, "sh", "member"],
                          env={"CARGO_TARGET_DIR": str(tmp_path / "none")}, capture_output=True,
                          text=True, timeout=30, check=False)
    assert (done.returncode, done.stdout) == (0, "no target\n")


def test_a_build_that_made_no_target_dir_is_remembered() -> None:
    judged = judge_build(outcome(step(0), step(0), step(101), step(0, b"no target\n")), probes=2)
    assert not judged.publish and judged.lasting and "built nothing" in (judged.note or "")
    judged = judge_build(outcome(step(0), step(0), step(137), step(0, b"no target\n")), probes=2)
    assert not judged.publish and not judged.lasting  # control: a signal may not recur


def test_a_tree_whose_config_would_reach_the_build_is_not_given_a_cache(tmp_path: Path) -> None:
    """Decided on the host before any VM: a `[env]` in the tree's cargo config could run
    the tree's code in the dependency build, so the lint builds them itself, and says why.
    The backend is never asked for (no VM is started)."""
    import time
    from types import SimpleNamespace

    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.config_model import Settings
    from roteiro_py.lint.dep_cache import dependency_cache
    from roteiro_py.lint.tree import Tree

    tree = tmp_path / "ws"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "lib.rs").write_text("")
    (tree / "Cargo.toml").write_text('[package]\nname = "ws"\nversion = "0.1.0"\n')
    (tree / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "ws"\nversion = "0.1.0"\n')
    (tree / ".cargo").mkdir()
    (tree / ".cargo" / "config.toml").write_text('[env]\nPERL5OPT = "-Mx"\n')

    def no_vm(disk: Path) -> object:
        raise AssertionError("no VM may start")

    def use() -> object:
        return dependency_cache(
            settings=Settings(), tree=Tree(tree, tree, tree),
            image=SimpleNamespace(manifest_digest="sha256:" + "a" * 64),  # type: ignore[arg-type]
            argv=["cargo-clippy", "clippy"], env={}, registry=tmp_path / "registry", git=None,
            backend=no_vm, deadline=Deadline(at=time.monotonic() + 60, seconds=60))  # type: ignore[arg-type]

    unsafe = use()
    assert unsafe.state == "skipped" and unsafe.image is None  # type: ignore[attr-defined]
    assert "sets [env]" in (unsafe.reason or "")  # type: ignore[attr-defined]
    # control: the same tree with only a profile in its config gets as far as building
    (tree / ".cargo" / "config.toml").write_text('[profile.dev]\nopt-level = 1\n')
    with pytest.raises(AssertionError, match="no VM may start"):
        use()


# -- one cache for every target selection (SELECTIONS) ---------------------------------------


def test_every_target_selection_has_the_key_and_build_argv_of_none() -> None:
    """The key and the build take the lint's argv without its target selection (the
    build then runs each of SELECTIONS), so `--all-targets`, `--lib`, `--tests` or
    `--bin NAME` after a plain lint find the cache it built."""
    def free(**options: object) -> list[str]:
        return without_target_selection(build_part(clippy_argv(ClippyOptions(**options))))

    plain = free(features=("a",), levels=(("-D", "warnings"),))
    assert plain == build_part(clippy_argv(ClippyOptions(features=("a",))))
    for selection in ({"all_targets": True}, {"targets": ("lib",)}, {"targets": ("tests", "bin:tool")},
                      {"targets": ("example:demo", "benches")}):
        assert free(features=("a",), **selection) == plain, selection
    # control: what does shape the dependencies' units stays in
    assert free(features=("b",)) != plain
    assert free(features=("a",), packages=("core",)) != plain
    assert free(features=("a",), target="aarch64-unknown-linux-gnu") != plain


def test_two_selections_are_judged_each() -> None:
    """The build's job: 2 probes, cargo once per selection, the cleanup."""
    whole = outcome(step(0), step(0), step(0), step(0), step(0, b"cleaned\n"))
    assert judge_build(whole, probes=2, builds=2) == Verdict(True)
    partial = judge_build(outcome(step(0), step(0), step(0), step(101), step(0, b"cleaned\n")),
                          probes=2, builds=2)
    assert partial.publish and partial.note is not None and "could not build every" in partial.note
    # the second selection never finished: nothing is published, and it is no lasting failure
    cut = judge_build(outcome(step(0), step(0), step(0), step(None, failure="killed")), probes=2, builds=2)
    assert cut == Verdict(False, "the build did not finish: killed")
    # control: the same job read as one selection takes the second cargo for the cleanup
    assert not judge_build(whole, probes=2, builds=1).publish


def test_a_skeleton_cargo_refuses_is_still_no_target_after_the_warm_file_is_copied(
        tmp_path: Path) -> None:
    """The build step as dep_cache._build makes it (lint/run.py steps_for, the lint's
    environment, clippy/command.py PIN_SCRIPT), run by the host's real cargo on a skeleton
    whose manifest cargo refuses, with the clippy probe's warm file present (as in every
    clone of a template): cargo creates no target directory, but the pinned step copies
    the warm file into one it makes. The cleanup must still say "no target", so that the
    build is remembered as failed with cargo's own error, not published as a cache that
    holds nothing (judge_build: a 101 with "cleaned" is published)."""
    import shutil
    import subprocess

    from roteiro_py import lint
    from roteiro_py.clippy.command import RUSTC_INFO_FILE, RUSTC_INFO_VARIABLE
    from roteiro_py.config import Settings
    from roteiro_py.lint.dep_cache import BUILD_ARGS

    if shutil.which("cargo") is None or shutil.which("rustc") is None:
        pytest.skip("no host cargo")
    sysroot = subprocess.run(["rustc", "--print", "sysroot"], capture_output=True, text=True,
                             check=True, timeout=60).stdout.strip()
    image = type("Image", (), {"config": {"config": {"Env": [f"PATH={sysroot}/bin:/usr/bin:/bin"]}}})()
    skeleton = tmp_path / "skeleton"
    (skeleton / "src").mkdir(parents=True)
    (skeleton / "src" / "lib.rs").write_text("")
    (skeleton / "Cargo.toml").write_text('[package]\nname = "ws"\nversion = "0.1.0"\nedition = 1\n')
    settings = Settings()
    steps = lint.steps_for(lint.Tree(skeleton, skeleton, skeleton), settings, lint.guest_env(image),  # type: ignore[arg-type]
                           [*lint.clippy_command(settings), *BUILD_ARGS])
    info, target = tmp_path / "rustc-info", tmp_path / "scratch" / "target"
    info.mkdir()
    (info / RUSTC_INFO_FILE).write_text("{}\n")  # what the template's warm-up left
    env = {**steps[-1].env, RUSTC_INFO_VARIABLE: str(info), "HOME": str(tmp_path / "home"),
           "CARGO_HOME": str(tmp_path / "cargo-home"), "CARGO_TARGET_DIR": str(target)}
    built = subprocess.run(list(steps[-1].argv), cwd=skeleton, env=env, capture_output=True,
                           timeout=240, check=False)
    assert built.returncode == 101 and b"edition" in built.stderr, built
    shells = [["/bin/sh"], *([[shutil.which("busybox") or "", "sh"]] if shutil.which("busybox") else [])]

    def clean() -> subprocess.CompletedProcess[bytes]:
        said = [subprocess.run([*shell, "-c", BUILD_CLEANUP, "sh", "ws"], env=env,
                               capture_output=True, timeout=30, check=False) for shell in shells]
        assert len({(done.returncode, done.stdout) for done in said}) == 1, said
        return said[0]

    cleanup = clean()
    assert (cleanup.returncode, cleanup.stdout) == (0, b"no target\n"), cleanup
    judged = judge_build(outcome(step(0), step(0), step(101, stderr=built.stderr),
                                 step(0, cleanup.stdout)), probes=2, builds=1)
    assert not judged.publish and judged.lasting and "built nothing" in (judged.note or "")
    # control: a build that made its layout is cleaned (and published), the file kept
    (target / "debug" / "deps").mkdir(parents=True)
    cleanup = clean()
    assert (cleanup.returncode, cleanup.stdout) == (0, b"cleaned\n"), cleanup
    assert (target / ".rustc_info.json").read_text() == "{}\n"
