"""An empty crate's lint runs no rustc probe: the VM template's clippy probe left cargo's
rustc info cache in guest RAM and the lint step copied it into the new target directory
(clippy/command.py `_WARM`, `_PREFILL`; issue 25). Real VM (TCG), real image, real cargo.

The observation is test-only and leaves every pin in place: the guest environment gets
CARGO_LOG=cargo::util::rustc=debug beside the variables lint/run.py sets (guest_env is
wrapped in this process), so the clippy step's stderr carries cargo's own account of its
rustc info cache: `running` for every rustc it ran to learn about the compiler. The
changed environment is a template key of its own (its probes' environment is in the key).
The control arm removes the warm-up's variable: the same lint then probes rustc.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import roteiro_py.lint
from roteiro_py.clippy.command import RUSTC_INFO_FILE, RUSTC_INFO_VARIABLE, SYSROOT_FILE
from roteiro_py.vm.api import JobOutcome
from tests.integration.lint.lint_support import Image


def empty_crate(where: Path) -> Path:
    (where / "src").mkdir(parents=True)
    (where / "Cargo.toml").write_text('[package]\nname = "empty"\nversion = "0.1.0"\nedition = "2021"\n')
    (where / "Cargo.lock").write_text('version = 4\n\n[[package]]\nname = "empty"\nversion = "0.1.0"\n')
    (where / "src" / "lib.rs").write_text("")
    return where


def rustc_runs(stderr: bytes) -> list[str]:
    return [line for line in stderr.decode(errors="replace").splitlines()
            if "cargo::util::rustc" in line and "running `" in line]


@pytest.fixture
def lint_logged(clippy_image: Image, monkeypatch: pytest.MonkeyPatch) -> Callable[[Path, bool], JobOutcome]:
    jobs: list[JobOutcome] = []
    real_run_job, real_guest_env = roteiro_py.lint.run_job, roteiro_py.lint.guest_env
    warm = [True]

    def spy(*args: Any, **kwargs: Any) -> JobOutcome:
        job = real_run_job(*args, **kwargs)
        jobs.append(job)
        return job

    def logged_env(image: Any) -> dict[str, str]:
        env = {**real_guest_env(image), "CARGO_LOG": "cargo::util::rustc=debug"}
        if not warm[0]:
            del env[RUSTC_INFO_VARIABLE]
        return env

    monkeypatch.setattr(roteiro_py.lint, "run_job", spy)
    monkeypatch.setattr(roteiro_py.lint, "guest_env", logged_env)

    def run(tree: Path, prefill: bool) -> JobOutcome:
        warm[0] = prefill
        flags: dict[str, tuple[Any, str]] = {
            "lint.image": (clippy_image.reference, "--image"), "vm.accel": ("tcg", "--accel")}
        report, _ = roteiro_py.lint.lint(roteiro_py.lint.LintRequest(path=tree, flags=flags))
        job = jobs[-1]
        assert job.completed and job.steps[-1].exit == 0, job.steps[-1].stderr[-3000:]
        assert job.template is not None  # a clone: the probes ran in the template
        assert not report.findings
        return job

    return run


def test_an_empty_crates_lint_runs_no_rustc_probe(tmp_path: Path,
                                                  lint_logged: Callable[[Path, bool], JobOutcome]) -> None:
    tree = empty_crate(tmp_path / "empty")
    prefilled = lint_logged(tree, True)
    stderr = prefilled.steps[-1].stderr
    assert rustc_runs(stderr) == [], stderr.decode(errors="replace")[-3000:]
    assert b"rustc info cache hit" in stderr
    again = lint_logged(tree, True)  # a second clone of the same template: the file is there again
    assert rustc_runs(again.steps[-1].stderr) == []
    # control: without the warm-up's variable the same lint probes rustc
    control = lint_logged(tree, False)
    assert control.template != prefilled.template
    probes = rustc_runs(control.steps[-1].stderr)
    assert len(probes) >= 2 and any("-vV" in line for line in probes), probes


def test_a_trees_build_script_can_change_nothing_the_template_left(
        tmp_path: Path, lint_logged: Callable[[Path, bool], JobOutcome]) -> None:
    """Guest init seals what the template's steps left in /tmp before the template is saved
    (guest_init.sh): the warm file and the sysroot every pinned step reads are root's and
    read-only in every clone, and /tmp's sticky bit keeps the guest user from renaming the
    directory holding them. A tree's build script tries each way to change them (it panics,
    failing the lint, where one succeeds) and says it ran; the next lint from the same
    template still finds the warm file. (tests/unit/clippy/test_pinned.py shows the pin
    reads the sysroot only from a file sealed so, and asks rustc otherwise.)"""
    hostile = empty_crate(tmp_path / "hostile")
    (hostile / "Cargo.toml").write_text('[package]\nname = "empty"\nversion = "0.1.0"\n'
                                        'edition = "2021"\nbuild = "build.rs"\n')
    (hostile / "build.rs").write_text(
        'use std::os::unix::fs::MetadataExt;\n'
        'fn main() {\n'
        f'    let dir = std::env::var("{RUSTC_INFO_VARIABLE}").unwrap();\n'
        f'    for name in ["", "/{RUSTC_INFO_FILE}", "/{SYSROOT_FILE}"] {{\n'
        '        let meta = std::fs::symlink_metadata(format!("{dir}{name}")).unwrap();\n'
        '        assert_eq!((meta.uid(), meta.mode() & 0o022), (0, 0), "{name}");\n'
        '    }\n'
        f'    assert!(std::fs::read(format!("{{dir}}/{RUSTC_INFO_FILE}")).unwrap().starts_with(b"{{"));\n'
        f'    assert!(std::fs::read(format!("{{dir}}/{SYSROOT_FILE}")).unwrap().starts_with(b"/"));\n'
        f'    assert!(std::fs::write(format!("{{dir}}/{RUSTC_INFO_FILE}"), "poisoned").is_err());\n'
        f'    assert!(std::fs::write(format!("{{dir}}/{SYSROOT_FILE}"), "/poisoned\\n").is_err());\n'
        f'    assert!(std::fs::remove_file(format!("{{dir}}/{SYSROOT_FILE}")).is_err());\n'
        '    assert!(std::fs::write(format!("{dir}/new"), "x").is_err());\n'
        '    assert!(std::fs::rename(&dir, format!("{dir}.moved")).is_err());\n'
        '    println!("cargo:warning=roteiro-seal-checked");\n'
        '}\n')
    poisoner = lint_logged(hostile, True)
    assert b"roteiro-seal-checked" in poisoner.steps[-1].stderr, poisoner.steps[-1].stderr[-3000:]
    assert rustc_runs(poisoner.steps[-1].stderr) == []
    after = lint_logged(empty_crate(tmp_path / "empty"), True)
    assert after.template == poisoner.template
    assert rustc_runs(after.steps[-1].stderr) == [], after.steps[-1].stderr.decode(errors="replace")[-3000:]
    assert b"rustc info cache hit" in after.steps[-1].stderr


def test_a_clones_lint_step_asks_no_rustc_for_its_sysroot(
        tmp_path: Path, clippy_image: Image, monkeypatch: pytest.MonkeyPatch) -> None:
    """The lint step of a template's clone takes the image's sysroot from the file guest init
    sealed (clippy/command.py `_SYSROOT`), not from `rustc --print sysroot`: with `rustc`
    off the lint step's PATH (the probes keep theirs, so the template is the ordinary one)
    the lint still runs, cargo-clippy, cargo and the compiler being named by absolute path
    from that sysroot. Control: without the variable naming the sealed directory the same
    step has to ask rustc, finds none, and fails with the pin's own words."""
    import dataclasses

    real_steps_for, real_guest_env = roteiro_py.lint.steps_for, roteiro_py.lint.guest_env
    warm = [True]
    outcomes: list[JobOutcome] = []
    real_run_job = roteiro_py.lint.run_job

    def steps_without_rustc(*args: Any, **kwargs: Any) -> list[Any]:
        steps = real_steps_for(*args, **kwargs)
        lint_step = steps[-1]
        env = {**lint_step.env, "PATH": "/usr/bin:/bin"}
        return [*steps[:-1], dataclasses.replace(lint_step, env=env)]

    def env_of(image: Any) -> dict[str, str]:
        env = real_guest_env(image)
        if not warm[0]:
            del env[RUSTC_INFO_VARIABLE]
        return env

    def spy(*args: Any, **kwargs: Any) -> JobOutcome:
        outcomes.append(real_run_job(*args, **kwargs))
        return outcomes[-1]

    monkeypatch.setattr(roteiro_py.lint, "steps_for", steps_without_rustc)
    monkeypatch.setattr(roteiro_py.lint, "guest_env", env_of)
    monkeypatch.setattr(roteiro_py.lint, "run_job", spy)
    flags: dict[str, tuple[Any, str]] = {
        "lint.image": (clippy_image.reference, "--image"), "vm.accel": ("tcg", "--accel")}
    tree = empty_crate(tmp_path / "empty")
    assert real_guest_env  # the image's PATH holds rustc (/usr/local/bin): the probes use it
    report, _ = roteiro_py.lint.lint(roteiro_py.lint.LintRequest(path=tree, flags=flags))
    job = outcomes[-1]
    assert job.template is not None and job.completed
    assert job.steps[-1].exit == 0, job.steps[-1].stderr[-3000:]
    assert not report.findings
    warm[0] = False
    with pytest.raises(Exception):  # noqa: B017 - whichever refusal names the failed step
        roteiro_py.lint.lint(roteiro_py.lint.LintRequest(path=tree, flags=flags))
    control = outcomes[-1]
    assert control.template is not None and control.template != job.template
    assert control.steps[-1].exit == 127, (control.steps[-1].exit, control.steps[-1].stderr[-3000:])
    assert b"`rustc --print sysroot` failed outside the tree" in control.steps[-1].stderr
