"""The decisions the conductor (lint/__init__.py) makes on its own: exit status, the
guest environment, the grant, the order of preflight refusals, and what a VM job that
fell short means."""

from __future__ import annotations

import dataclasses
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace

import pytest
from hypothesis import given
from hypothesis import strategies as st
from realcargo import make_report  # loaded by tests/unit/conftest.py

from roteiro_py import lint
from roteiro_py.errors import (
    DeadlineExceeded,
    ImageNotProvisioned,
    LockfileWouldBeWritten,
    NoImageConfigured,
    NoPackageCache,
    SandboxUnavailable,
    TagNotDigest,
)
from roteiro_py.lint import caches, judgement
from roteiro_py.process.grants import GrantSet
from roteiro_py.process.sandbox import Command
from roteiro_py.report.model import Finding
from roteiro_py.vm.api import Isolation, JobOutcome, VmBackend, VmOutcome
from roteiro_py.vm.options import VmOptions

PIN = "localhost/x/clippy@sha256:" + "c" * 64
LOCK_WITH_REGISTRY = (
    'version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\ndependencies = ["itoa"]\n'
    '[[package]]\nname = "itoa"\nversion = "1.0.15"\n'
    'source = "registry+https://github.com/rust-lang/crates.io-index"\n'
    f'checksum = "{"0" * 64}"\n')


def finding(level: str) -> Finding:
    return Finding(code="clippy::x", level=level, message="m", path="src/lib.rs", line=1, column=1,
                   end_line=1, end_column=2)


@pytest.mark.parametrize(
    ("levels", "build_succeeded", "fail_on", "expected"),
    [
        ([], True, "warning", 0),
        (["warning"], True, "warning", 1),
        (["warning"], True, "error", 0),
        (["error"], False, "error", 1),
        (["error"], False, "never", 0),
        (["note", "help"], True, "warning", 0),
        ([], False, "warning", 1),  # a failed build is never a clean tree
        ([], False, "error", 1),
    ],
)
def test_exit_code(levels: list[str], build_succeeded: bool, fail_on: str, expected: int) -> None:
    report = make_report([finding(level) for level in levels], build_succeeded=build_succeeded)
    assert lint.exit_code(report, fail_on) == expected


def test_signal_statuses() -> None:
    assert judgement._signal_of(137) == "SIGKILL"
    assert judgement._signal_of(143) == "SIGTERM"
    assert judgement._signal_of(101) is None and judgement._signal_of(128) is None and judgement._signal_of(0) is None


def test_guest_env_is_set_not_inherited(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "leak-me")
    monkeypatch.setenv("CARGO_HOME", "/host/cargo")

    class Image:
        config = {"config": {"Env": ["PATH=/opt/bin:/usr/bin", "RUSTUP_HOME=/opt/rustup",
                                     "LD_PRELOAD=/evil.so", "CARGO_HOME=/image/cargo"]}}

    env = lint.guest_env(Image())  # type: ignore[arg-type]
    assert env["PATH"] == "/opt/bin:/usr/bin" and env["RUSTUP_HOME"] == "/opt/rustup"
    assert env["CARGO_HOME"] == "/cargo-home" and env["CARGO_TARGET_DIR"].startswith("/.roteiro-scratch/")
    assert "LD_PRELOAD" not in env and "AWS_SECRET_ACCESS_KEY" not in env
    assert "leak-me" not in str(env) and "/host/cargo" not in str(env)


def test_grant_shares_the_workspace_and_the_cache_never_the_cargo_home_root(tmp_path: Path) -> None:
    tree = lint.Tree(asked=tmp_path / "ws", workspace=tmp_path / "ws", repo_root=tmp_path)
    assert {str(atom) for atom in lint.grant_for(tree, None, None)} == {
        f"fs:read:{tmp_path}/ws/**", f"fs:list:{tmp_path}/ws/**", "fs:write:/.roteiro-scratch/**",
        "proc:exec:cargo", "proc:exec:rustc"}
    grant = {str(atom) for atom in lint.grant_for(tree, tmp_path / "cargo" / "registry", None)}
    assert grant == {f"fs:read:{tmp_path}/ws/**", f"fs:list:{tmp_path}/ws/**",
                     f"fs:read:{tmp_path}/cargo/registry/**", "fs:write:/.roteiro-scratch/**",
                     "proc:exec:cargo", "proc:exec:rustc"}


def _job(steps: list[Command], outcomes: list[tuple[int | None, bool]], *, failure: str | None = None,
         completed: bool = True) -> JobOutcome:
    isolation = Isolation("qemu", "tcg", False, "TCG")
    now = datetime.now(UTC)
    done = tuple(VmOutcome(command=step, exit=code, stdout=b"", stderr=b"", timed_out=timed_out,
                           truncated=False, duration=1.0, started=now, ended=now, isolation=isolation)
                 for step, (code, timed_out) in zip(steps, outcomes, strict=False))
    return JobOutcome(steps=done, isolation=isolation, completed=completed, boot_seconds=1.0,
                      failure=failure, console=b"")


def test_a_step_past_its_deadline_is_refused_naming_it(tmp_path: Path) -> None:
    steps = [Command("cargo", ("clippy",), tmp_path, timeout=42.0)]
    with pytest.raises(DeadlineExceeded) as caught:
        lint.judge_job(_job(steps, [(None, True)]), steps, reference=PIN)
    assert "42 s" in caught.value.guidance().render_text()
    with pytest.raises(DeadlineExceeded):
        lint.judge_job(_job(steps, [], failure="killed at the deadline", completed=False), steps, reference=PIN)
    lint.judge_job(_job(steps, [(0, False)]), steps, reference=PIN)  # control: a finished step passes


def _request(tmp_path: Path, image: str | None, accel: str = "tcg") -> lint.LintRequest:
    return lint.LintRequest(path=tmp_path, flags={"lint.image": (image, "--image"),
                                                  "vm.accel": (accel, "--accel")})


def _workspace(tmp_path: Path) -> None:
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (tmp_path / "Cargo.lock").write_text(LOCK_WITH_REGISTRY)


def test_preflight_order_cheapest_first(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each refusal comes before the next check starts; the probe is stubbed to record calls
    (a fake only for ordering: the real probe is exercised by the integration tests)."""
    _workspace(tmp_path)
    calls: list[str] = []

    class Backend:
        def __init__(self, options: object) -> None:
            pass

        def isolation(self) -> Isolation:
            calls.append("probe")
            if accel["usable"]:
                return Isolation("qemu", "tcg", False, "TCG")
            raise SandboxUnavailable("no", accel="auto")

    accel = {"usable": False}
    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Backend})
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    with pytest.raises(NoImageConfigured):
        lint.lint(_request(tmp_path, None))
    with pytest.raises(TagNotDigest):
        lint.lint(_request(tmp_path, "x/clippy:1"))
    assert calls == []
    with pytest.raises(SandboxUnavailable):
        lint.lint(_request(tmp_path, PIN))
    assert calls == ["probe"]
    accel["usable"] = True
    with pytest.raises(ImageNotProvisioned):
        lint.lint(_request(tmp_path, PIN))
    monkeypatch.setattr("roteiro_py.store.Store.resolve",
                        lambda self, ref: SimpleNamespace(manifest_digest="sha256:" + "0" * 64))
    with pytest.raises(NoPackageCache):
        lint.lint(_request(tmp_path, PIN))
    (tmp_path / "Cargo.lock").unlink()
    with pytest.raises(LockfileWouldBeWritten):
        lint.lint(_request(tmp_path, PIN))


def test_cache_is_required_only_for_what_the_lockfile_pins(tmp_path: Path) -> None:
    from roteiro_py.cargo.store import packages_root
    from roteiro_py.errors import PackageRefused
    from tests.unit.cargo_support import crate_bytes, stored

    tree = lint.Tree(asked=tmp_path, workspace=tmp_path, repo_root=tmp_path)
    (tmp_path / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    assert lint.package_cache(tree) == (None, None)  # only path packages: nothing to share
    (tmp_path / "Cargo.lock").write_text(LOCK_WITH_REGISTRY)
    with pytest.raises(NoPackageCache, match="lacks itoa 1.0.15") as caught:  # the store lacks it
        lint.package_cache(tree)
    assert str(packages_root()) in caught.value.guidance().render_text()
    (tmp_path / "Cargo.lock").write_text(LOCK_WITH_REGISTRY + '[[package]]\nname = "g"\nversion = "0.1.0"\n'
                                         f'source = "git+https://example.invalid/g#{"a" * 40}"\n')
    with pytest.raises(NoPackageCache) as caught:
        lint.package_cache(tree)
    assert caught.value.missing == ("itoa 1.0.15", "g 0.1.0 (git aaaaaaaaaaaa)")
    # a pin fetch-deps would not fetch is refused naming it, not reported missing
    (tmp_path / "Cargo.lock").write_text(LOCK_WITH_REGISTRY.replace(f'checksum = "{"0" * 64}"\n', ""))
    with pytest.raises(PackageRefused, match="itoa 1.0.15"):
        lint.package_cache(tree)
    # control: once the store holds it, the guest gets a view of it
    checksum = stored(crate_bytes("itoa", "1.0.15"))
    (tmp_path / "Cargo.lock").write_text(LOCK_WITH_REGISTRY.replace("0" * 64, checksum))
    registry, git = lint.package_cache(tree)
    assert registry is not None and (registry / "0" / "itoa-1.0.15" / "src" / "lib.rs").is_file()
    assert git is None


def test_a_clippy_step_without_a_status_is_never_a_verdict(tmp_path: Path) -> None:
    """Output past the limit stops the VM: OutputTooLarge; a VM that died: VmFailed (not exit 4)."""
    from roteiro_py.errors import OutputTooLarge, VmFailed

    steps = [Command("cargo", ("clippy",), tmp_path)]
    flooded = _job(steps, [(None, False)], failure="output limit")
    for cut in ("stderr", "stdout"):  # the stream that passed the cap is the one named
        flooded = JobOutcome(steps=(VmOutcome(**{**flooded.steps[0].__dict__, "truncated": True,
                                                 "truncated_streams": (cut,)}),),
                             isolation=flooded.isolation, completed=False, boot_seconds=1.0,
                             failure="output limit", console=b"")
        with pytest.raises(OutputTooLarge) as caught:
            judgement._status(flooded.steps[0], flooded, 1 << 20)
        text = caught.value.guidance().render_text()
        assert str(1 << 20) in text and f"on the {cut} of `cargo clippy`" in text
    died = _job(steps, [(None, False)], failure="the VM ended before the step finished", completed=False)
    with pytest.raises(VmFailed, match="ended before"):
        judgement._status(died.steps[0], died, 1 << 20)
    assert judgement._status(_job(steps, [(137, False)]).steps[0], died, 1) == (None, "SIGKILL")
    assert judgement._status(_job(steps, [(101, False)]).steps[0], died, 1) == (101, None)


def test_stale_scratch_disks_are_swept_fresh_ones_kept(tmp_path: Path) -> None:
    import time

    from roteiro_py.vm.disks.share_image import STALE_SECONDS
    from roteiro_py.vocabulary import MAX_TIMEOUT_S

    old, fresh = tmp_path / "old.ext4", tmp_path / "fresh.ext4"
    week_long = tmp_path / "week-long.ext4"  # a live run given the longest deadline
    for disk in (old, fresh, week_long):
        disk.write_bytes(b"")
    past = time.time() - STALE_SECONDS - 60
    os.utime(old, (past, past))
    started = time.time() - MAX_TIMEOUT_S
    os.utime(week_long, (started, started))
    caches._sweep(tmp_path)
    assert not old.exists() and fresh.exists() and week_long.exists()


def test_a_probe_past_its_deadline_does_not_advise_raising_clippys_deadline(tmp_path: Path) -> None:
    from roteiro_py.errors import ProbeFailed

    steps = [Command("cargo", ("clippy", "--version"), tmp_path, timeout=120.0),
             Command("rustc", ("-vV",), tmp_path, timeout=120.0),
             Command("cargo", ("clippy",), tmp_path, timeout=1800.0)]
    with pytest.raises(ProbeFailed) as caught:
        lint.judge_job(_job(steps, [(None, True)]), steps, reference=PIN)
    text = caught.value.guidance().render_text()
    assert "120 s" in text and "--timeout 240" not in text


def test_an_official_rust_image_keeps_its_own_toolchain() -> None:
    class Image:
        config = {"config": {"Env": ["PATH=/usr/local/cargo/bin:/usr/bin", "RUSTUP_HOME=/usr/local/rustup",
                                     "RUST_VERSION=1.93.1"]}}

    assert lint.guest_env(Image())["RUSTUP_TOOLCHAIN"] == "1.93.1"  # type: ignore[arg-type]

    class Pinned:
        config = {"config": {"Env": ["RUST_VERSION=1.93.1", "RUSTUP_TOOLCHAIN=stable"]}}

    assert lint.guest_env(Pinned())["RUSTUP_TOOLCHAIN"] == "stable"  # type: ignore[arg-type]


class _Image:
    def __init__(self, config: object) -> None:
        self.config = config


@pytest.mark.parametrize("config", [{"config": None}, {"config": []}, {"config": "x"},
                                    {"config": {"Env": None}}, {"config": {"Env": "PATH=/x"}},
                                    {"config": {"Env": {"PATH": "/x"}}}, {"config": {"Env": [1, None, []]}},
                                    [], None])
def test_an_image_config_of_another_shape_is_the_default_environment(config: object) -> None:
    """`"config": null`, a list or a string was AttributeError in guest_env: exit 4 for an
    image a repository may name. Control: the same Env under a dict is read."""
    assert lint.guest_env(_Image(config))["PATH"] == lint.DEFAULT_GUEST_PATH  # type: ignore[arg-type]
    assert lint.guest_env(_Image({"config": {"Env": ["PATH=/opt/bin"]}}))["PATH"] == "/opt/bin"  # type: ignore[arg-type]


def test_an_image_variable_at_the_limit_is_dropped() -> None:
    under = "/" + "a" * (lint.IMAGE_ENV_VALUE_LIMIT - 2)
    at = "/" + "a" * (lint.IMAGE_ENV_VALUE_LIMIT - 1)
    assert lint.guest_env(_Image({"config": {"Env": [f"PATH={under}"]}}))["PATH"] == under  # type: ignore[arg-type]
    assert lint.guest_env(_Image({"config": {"Env": [f"PATH={at}"]}}))["PATH"] == lint.DEFAULT_GUEST_PATH  # type: ignore[arg-type]


_JSON = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=True) | st.text(),
                     lambda inner: st.lists(inner, max_size=4)
                     | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=12)
_ENTRY = st.one_of(_JSON, st.builds("{}={}".format, st.sampled_from(lint.IMAGE_ENV_KEPT), st.text()))


@given(st.one_of(_JSON,
                 st.fixed_dictionaries({"config": _JSON}),
                 st.fixed_dictionaries({"config": st.fixed_dictionaries({"Env": _JSON})}),
                 st.fixed_dictionaries({"config": st.fixed_dictionaries({"Env": st.lists(_ENTRY, max_size=6)})})))
def test_guest_env_of_any_image_config_is_an_environment_the_job_can_carry(config: object) -> None:
    from roteiro_py.vm.qemu.job import step_script

    env = lint.guest_env(_Image(config))  # type: ignore[arg-type]
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in env.items())
    assert all(d.startswith("/") for d in env["PATH"].split(":"))
    assert all(len(v) < lint.IMAGE_ENV_VALUE_LIMIT for v in env.values())
    step_script(Command(program="cargo-clippy", args=(), workspace=Path("/w"), env=env))


def test_a_pinned_step_is_named_by_its_program_not_the_wrapper(tmp_path: Path) -> None:
    """Every step runs through clippy/command.py's pinning wrapper; a refusal names what the
    user would recognise (`cargo-clippy clippy ...`), not the shell script around it."""
    from roteiro_py.config import Settings

    tree = lint.Tree(tmp_path, tmp_path, tmp_path)
    steps = lint.steps_for(tree, Settings(), {}, lint.clippy_command(Settings()))
    assert steps[2].argv[0] == "/bin/sh"  # control: the wrapper is what the guest runs
    with pytest.raises(DeadlineExceeded) as caught:
        lint.judge_job(_job(steps, [(0, False), (0, False), (None, True)]), steps, reference=PIN)
    text = caught.value.guidance().render_text()
    assert "cargo-clippy clippy --message-format=json" in text and "sysroot" not in text


class Said:
    """A Progress that records its stages and details (what -v would print)."""

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []

    def stage(self, name: str) -> None:
        self.events.append(("stage", name))

    def note(self, text: str) -> None:
        self.events.append(("note", text))

    def detail(self, text: str) -> None:
        self.events.append(("detail", text))

    def announce(self, text: str) -> None:
        self.events.append(("announce", text))

    def finish(self, stopped: bool = False) -> None:
        self.events.append(("finish", ""))


def test_verbose_details_say_what_chose_the_accelerator_and_the_image(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The conductor tells -v which setting chose what, under the stage it is in (the
    backend is stubbed: a real probe needs a VM)."""
    _workspace(tmp_path)

    class Backend:
        def __init__(self, options: object) -> None:
            pass

        def isolation(self) -> Isolation:
            return Isolation("qemu", "tcg", False, "QEMU microvm under TCG")

    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Backend})
    monkeypatch.setattr("roteiro_py.store.Store.resolve",
                        lambda self, ref: SimpleNamespace(manifest_digest="sha256:" + "0" * 64))
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    said = Said()
    request = lint.LintRequest(path=tmp_path, flags={"lint.image": (PIN, "--image"),
                                                     "vm.accel": ("tcg", "--accel")}, verbose=True)
    with pytest.raises(NoPackageCache):
        lint.lint(request, said)
    assert said.events == [
        ("stage", "hypervisor"), ("detail", "accel tcg (flag --accel): QEMU microvm under TCG"),
        ("stage", "image verified"),
        ("detail", f"image {PIN} (flag --image), manifest sha256:{'0' * 64}"),
        ("stage", "package cache")]
    # control: `[lint] quiet` silences a run, unless -v asks for it
    quiet = Said()
    monkeypatch.setenv("ROTEIRO_LINT_QUIET", "true")
    with pytest.raises(NoPackageCache):
        lint.lint(lint.LintRequest(path=tmp_path, flags=request.flags), quiet)
    assert quiet.events == []
    with pytest.raises(NoPackageCache):
        lint.lint(request, quiet)
    assert quiet.events[0] == ("stage", "hypervisor")


def test_the_template_detail_says_how_the_vm_started() -> None:
    job = JobOutcome(steps=(), isolation=Isolation("qemu", "tcg", False, "t"), completed=True,
                     boot_seconds=1.0, failure=None, console=b"")
    assert lint.template_detail(job, template=False) == "the VM booted cold ([vm] template = false)"
    assert lint.template_detail(job, template=True) == "the VM booted cold"
    restored = dataclasses.replace(job, template="k" * 16)
    assert lint.template_detail(restored, template=True) == f"the VM was restored from template {'k' * 16}"
    built = dataclasses.replace(restored, template_built_seconds=12.34)
    assert lint.template_detail(built, template=True).endswith(", built by this run in 12.3 s")


def _qemu_sandbox() -> VmBackend:
    """The backend lint() asks before it prepares anything, built as lint() builds it."""
    from roteiro_py.vm import BACKENDS

    return BACKENDS["qemu"](VmOptions(rootfs=Path(os.devnull)))


def _steps(tree: lint.Tree) -> list[Command]:
    from roteiro_py import config

    settings = config.resolve(tree.asked, layers=config.read_layers(
        tree.asked, flags={"lint.image": (PIN, "--image")})).settings
    return lint.steps_for(tree, settings, {}, lint.clippy_command(settings))


def _check(grant: GrantSet, tree: lint.Tree, registry: Path | None = None,
           git: Path | None = None) -> None:
    lint.check_grant(grant, _qemu_sandbox(), _steps(tree), "cargo clippy", "qemu",
                     checker=lint.ceiling_for(tree, registry, git))


@pytest.mark.parametrize("extra", ["net:egress:crates.io:443", "fs:write:{ws}/**", "env:read:HOME",
                                   "secret:use:TOKEN", "fs:write:/tmp/**", "gpu:use:0"])
def test_a_grant_beyond_what_the_backend_can_enforce_is_refused_naming_it(
        tmp_path: Path, extra: str) -> None:
    """check_grant asks what the tests ask of a grant (`within` a ceiling), in production,
    against what the qemu backend says it can enforce; mounts.py refuses the same atoms,
    but only once the root filesystem, the dependency cache and the tree's image exist."""
    from roteiro_py.errors import Unenforceable
    from roteiro_py.process.grants import GrantAtom
    from roteiro_py.vm.mounts import derive_mounts

    (tmp_path / "ws").mkdir()
    tree = lint.Tree(asked=tmp_path / "ws", workspace=tmp_path / "ws", repo_root=tmp_path)
    normal = lint.grant_for(tree, None, None)
    _check(normal, tree)  # control: the lint's own grant
    atom = GrantAtom.parse(extra.format(ws=tree.workspace))
    beyond = GrantSet(normal.atoms | {atom})
    with pytest.raises(Unenforceable) as refused:
        _check(beyond, tree)
    assert refused.value.atom == str(atom) and refused.value.exit_code == 3
    text = refused.value.guidance().render_text()
    assert str(atom) in text and "qemu backend" in text and "nothing was prepared or booted" in text
    # the backend's own mount table agrees: it refuses the atom too, and takes the rest
    step = Command("cargo", ("clippy",), tree.workspace)
    derive_mounts(normal, step, scratch=lint.GUEST_SCRATCH, host_cargo_home=tmp_path / "c")
    with pytest.raises(Unenforceable):
        derive_mounts(beyond, step, scratch=lint.GUEST_SCRATCH, host_cargo_home=tmp_path / "c")


@pytest.mark.parametrize("extra", ["fs:read:{home}/**", "proc:exec:curl",
                                   "proc:exec:*"])
def test_a_grant_the_backend_could_give_but_a_checker_may_never_have_is_refused(
        tmp_path: Path, extra: str) -> None:
    """The qemu backend can share any host directory read-only and runs any program in
    the VM, so its ceiling and its mount table both admit a read of the user's home or a
    `curl`: only process/grants.py's checker ceiling says a checker reads its tree and
    its dependencies and runs cargo and rustc, nothing else. It promised that, but no
    production code asked it (issue 21): these grants passed check_grant."""
    from roteiro_py.errors import Unenforceable
    from roteiro_py.process.grants import GrantAtom

    (tmp_path / "ws").mkdir()
    (tmp_path / "home" / ".ssh").mkdir(parents=True)
    tree = lint.Tree(asked=tmp_path / "ws", workspace=tmp_path / "ws", repo_root=tmp_path)
    normal = lint.grant_for(tree, None, None)
    _check(normal, tree)  # control: the lint's own grant
    atom = GrantAtom.parse(extra.format(home=tmp_path / "home"))
    beyond = GrantSet(normal.atoms | {atom})
    _qemu_sandbox().check(_steps(tree), beyond)  # the backend alone would run it
    with pytest.raises(Unenforceable) as refused:
        _check(beyond, tree)
    assert refused.value.atom == str(atom)
    assert refused.value.why == (
        f"beyond what a checker may ever be granted ({lint.ceiling_for(tree, None, None)}: "
        "process/grants.py checker_ceiling); nothing was prepared or booted")


def test_the_lints_grant_with_its_package_cache_is_within_the_ceiling(tmp_path: Path) -> None:
    from roteiro_py.errors import Unenforceable
    from roteiro_py.process.grants import GrantAtom
    from roteiro_py.vm.mounts import cargo_views_root

    (tmp_path / "ws").mkdir()
    tree = lint.Tree(asked=tmp_path / "ws", workspace=tmp_path / "ws", repo_root=tmp_path)
    view = cargo_views_root() / "k"
    for kind in ("registry", "git"):
        (view / kind).mkdir(parents=True)
    grant = lint.grant_for(tree, view / "registry", view / "git")
    _check(grant, tree, view / "registry", view / "git")
    # every atom beyond is named, not only the first
    two = GrantSet(grant.atoms | {GrantAtom.parse("net:egress:a.example:443"),
                                  GrantAtom.parse("env:read:HOME")})
    with pytest.raises(Unenforceable) as refused:
        _check(two, tree, view / "registry", view / "git")
    assert refused.value.atom == "env:read:HOME net:egress:a.example:443"


@pytest.mark.parametrize("cargo_home", ["ws/.cargo", "ws"])
def test_a_workspace_the_backend_never_shares_is_refused_before_anything_is_built(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cargo_home: str) -> None:
    """The ceiling's `fs:read:/**` admits every tree, but the mount table never shares one
    holding the cargo home's root (credentials.toml): a CI job's CARGO_HOME inside its
    checkout. check_grant asks the backend's own table (`check`), so this is refused
    before the root filesystem and the dependency cache are built, not after; and it is
    the refusal the run itself would meet (`mounts`, with its scratch disk)."""
    from roteiro_py.errors import Unenforceable
    from roteiro_py.vm.qemu.backend import QemuBackend

    (tmp_path / "ws" / ".cargo").mkdir(parents=True)
    tree = lint.Tree(asked=tmp_path / "ws", workspace=tmp_path / "ws", repo_root=tmp_path)
    grant, steps = lint.grant_for(tree, None, None), _steps(tree)
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "elsewhere"))
    _check(grant, tree)  # control: the same tree, with the cargo home outside it
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / cargo_home))
    with pytest.raises(Unenforceable) as refused:
        _check(grant, tree)
    text = refused.value.guidance().render_text()
    ws, home = tmp_path / "ws", tmp_path / cargo_home
    # The way forward is the user's to take (move CARGO_HOME), not "grant .../registry/**":
    # the grant is the program's (issue 21).
    assert text == (
        f"error: The sandbox cannot enforce the grant `fs:list:{ws}/**` for `cargo clippy`.\n"
        "  note: No report was made, and nothing ran on this host instead.\n"
        f"  note: Why: {ws} holds the cargo home {home} (CARGO_HOME), whose root holds "
        "credentials.toml; no part of the host's cargo home is shared with the VM "
        "(the qemu backend's mount table); nothing was prepared or booted.\n"
        f"  note: Move CARGO_HOME out of {ws} (in CI: to a directory outside the checkout).\n")
    run = QemuBackend(VmOptions(rootfs=Path(os.devnull), scratch=tmp_path / "scratch.img"))
    with pytest.raises(Unenforceable) as at_run:
        run.mounts(steps, grant)  # what run_steps asks, once everything was built
    assert at_run.value.atom == refused.value.atom


def _judged(tmp_path: Path, isolation: Isolation, clippy: tuple[int | None, bytes],
            **step: object) -> object:
    """build_report (the code that decides what a report says) over a job as a VM backend
    hands it back; only the VM run is made up (a real one: tests/integration)."""
    import time

    from roteiro_py import config
    from roteiro_py.clippy.parse import Deadline

    tmp_path.mkdir(exist_ok=True)
    _workspace(tmp_path)
    layers = config.read_layers(tmp_path, flags={"lint.image": (PIN, "--image")})
    resolved = config.resolve(tmp_path, layers=layers)
    tree = lint.Tree(asked=tmp_path, workspace=tmp_path, repo_root=tmp_path)
    steps = lint.steps_for(tree, resolved.settings, {}, lint.clippy_command(resolved.settings))
    now = datetime.now(UTC)
    said = [(0, b"clippy 0.1.95 (59807616e1 2026-04-14)\n"),
            (0, b"rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\nhost: x86_64-unknown-linux-gnu\n"
                b"release: 1.95.0\n"), clippy]
    outcomes = tuple(VmOutcome(**{"command": command, "exit": code, "stdout": out, "stderr": b"",
                                  "timed_out": False, "truncated": False, "duration": 1.0,
                                  "started": now, "ended": now, "isolation": isolation,
                                  **(step if index == 2 else {})})  # type: ignore[arg-type]
                     for index, (command, (code, out)) in enumerate(zip(steps, said, strict=True)))
    job = JobOutcome(steps=outcomes, isolation=isolation, completed=True, boot_seconds=1.0,
                     failure=None, console=b"")
    image = SimpleNamespace(reference=PIN, manifest_digest=PIN.split("@")[1])
    return judgement.build_report(job, steps, Deadline(time.monotonic() + 60, 60.0), tree, resolved,
                                  lint.pinned_image(resolved, tmp_path), image, now, now)  # type: ignore[arg-type]


CLEAN = (0, b'{"reason":"build-finished","success":true}\n')


@pytest.mark.parametrize("accel", ["tcg", "kvm"])
def test_the_reports_isolation_is_the_one_the_job_ran_with(tmp_path: Path, accel: str) -> None:
    """Not a preflight guess: whatever the backend that ran the job says it had (lint()'s
    preflight probe says only what -v prints)."""
    from roteiro_py.vm.qemu.backend import isolation_for

    report = _judged(tmp_path, isolation_for(accel), CLEAN)
    assert report.isolation.model_dump() == dataclasses.asdict(isolation_for(accel))  # type: ignore[attr-defined]
    assert report.isolation.hardware_isolated is (accel == "kvm")  # type: ignore[attr-defined]


def test_the_judgement_passes_the_vms_evidence_to_the_refusals(tmp_path: Path) -> None:
    """The stream that passed the cap and the kernel's OOM kills reach the refusal."""
    from roteiro_py.errors import KilledBySignal, OutputTooLarge

    tcg = Isolation("qemu", "tcg", False, "TCG")
    with pytest.raises(KilledBySignal) as killed:
        _judged(tmp_path / "a", tcg, (137, b""), oom_kills=2)
    assert killed.value.oom_kills == 2 and "--memory" in killed.value.guidance().render_text()
    with pytest.raises(KilledBySignal) as killed:
        _judged(tmp_path / "b", tcg, (137, b""))
    assert killed.value.oom_kills == 0 and "--memory" not in killed.value.guidance().render_text()  # control
    with pytest.raises(OutputTooLarge) as flooded:
        _judged(tmp_path / "c", tcg, (0, CLEAN[1]), truncated=True, truncated_streams=("stderr",))
    assert flooded.value.stream == "stderr"


def test_lint_meets_that_refusal_before_the_root_filesystem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """lint() itself, with the real qemu backend deciding: only the hypervisor probe and the
    image store are stubbed (a probe boots a VM; the store would need an image), and the
    root filesystem, the first expensive stage, records that it was reached."""
    from roteiro_py.errors import Unenforceable
    from roteiro_py.vm.qemu.backend import QemuBackend

    repo = tmp_path / "repo"
    (repo / ".cargo").mkdir(parents=True)
    (repo / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (repo / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    monkeypatch.setattr(QemuBackend, "isolation", lambda self: Isolation("qemu", "tcg", False, "TCG"))
    monkeypatch.setattr("roteiro_py.store.Store.resolve",
                        lambda self, ref: SimpleNamespace(manifest_digest="sha256:" + "0" * 64, config={}))
    reached = []

    def root_filesystem(*args: object) -> None:
        reached.append("rootfs")
        raise RuntimeError("the root filesystem was reached")

    monkeypatch.setattr(lint, "root_filesystem_in_use", root_filesystem)  # what lint() holds
    monkeypatch.setenv("CARGO_HOME", str(repo / ".cargo"))
    with pytest.raises(Unenforceable, match="for `cargo-clippy clippy --message-format=json") as refused:
        lint.lint(_request(repo, PIN))
    assert "Move CARGO_HOME out of" in refused.value.guidance().render_text()
    assert reached == []
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))  # control
    with pytest.raises(RuntimeError, match="root filesystem was reached"):
        lint.lint(_request(repo, PIN))
    assert reached == ["rootfs"]


def _unbuilt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, list[str]]:
    """A repository lint() would take as far as the root filesystem, whose building (the
    first expensive stage: the dependency cache and the boot follow it) is recorded and
    stopped; only the hypervisor probe and the image store are stubbed, as above."""
    from roteiro_py.vm.qemu.backend import QemuBackend

    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (repo / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    (repo / "src" / "lib.rs").write_text("")
    monkeypatch.setattr(QemuBackend, "isolation", lambda self: Isolation("qemu", "tcg", False, "TCG"))
    monkeypatch.setattr("roteiro_py.store.Store.resolve",
                        lambda self, ref: SimpleNamespace(manifest_digest="sha256:" + "0" * 64, config={}))
    monkeypatch.setenv("CARGO_HOME", str(tmp_path / "cargo-home"))
    reached: list[str] = []

    def root_filesystem(*args: object) -> None:
        reached.append("rootfs")
        raise RuntimeError("the root filesystem was reached")

    monkeypatch.setattr(lint, "root_filesystem_in_use", root_filesystem)
    return repo, reached


def _timed_refusal(request: lint.LintRequest) -> tuple[Exception, float]:
    began = time.monotonic()
    with pytest.raises(Exception) as refused:
        lint.lint(request)
    return refused.value, time.monotonic() - began


@pytest.mark.parametrize("case", ["too many files", "too large", "incomplete", "scratch"])
def test_the_trees_copy_and_the_scratch_refuse_before_the_root_filesystem(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str) -> None:
    """Cheapest refusal first (issue 21, item 8): the copy's caps (TreeTooLarge), what cargo
    needs left out of it (TreeIncomplete) and the scratch disk's place (ScratchUnavailable)
    were met only once the root filesystem and the dependency cache were built (minutes
    the first time, in a VM for the cache); with nothing built (a fresh ROTEIRO_HOME) they
    now come before the root filesystem, in well under a second of host work."""
    from roteiro_py import paths
    from roteiro_py.errors import ScratchUnavailable, TreeIncomplete, TreeTooLarge

    repo, reached = _unbuilt(tmp_path, monkeypatch)
    flags = {"lint.image": (PIN, "--image"), "vm.accel": ("tcg", "--accel")}
    control, _ = _timed_refusal(lint.LintRequest(path=repo, flags=flags))
    assert "root filesystem was reached" in str(control) and reached == ["rootfs"]  # control
    reached.clear()
    expected: type[Exception]
    if case == "too many files":
        flags["vm.stage_max_files"] = (3, "--stage-max-files")
        expected = TreeTooLarge
    elif case == "too large":
        (repo / "src" / "data.bin").write_bytes(b"x" * (2 << 20))
        flags["vm.stage_max_mib"] = (1, "--stage-max-mib")
        expected = TreeTooLarge
    elif case == "incomplete":
        os.mkfifo(repo / "src" / "build.rs")  # left out of the copy ("special"); cargo needs it
        expected = TreeIncomplete
    else:
        (paths.cache_root() / "scratch").rmdir()  # made by the control run
        (paths.cache_root() / "scratch").write_text("a file where the scratch disks go")
        expected = ScratchUnavailable
    refused, seconds = _timed_refusal(lint.LintRequest(path=repo, flags=flags))
    assert isinstance(refused, expected), refused
    assert reached == [] and seconds < 5, (reached, seconds)
    assert not (paths.cache_root() / "rootfs").exists()
