"""What the guest is asked to do, and the one boot that does it.

The guest's whole environment is set here (never inherited from the host), the grant
names only the workspace, the vendored view and the scratch, and every step runs through
the toolchain the image pins (clippy/command.py). `run_job` boots within what is left
of the run's deadline.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py import config
from roteiro_py.errors import (
    DeadlineExceeded,
    Unenforceable,
    UsageError,
)
from roteiro_py.vocabulary import GUEST_SCRATCH

if TYPE_CHECKING:
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.lint.tree import Tree
    from roteiro_py.process.grants import GrantSet
    from roteiro_py.process.sandbox import Command
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm.api import JobOutcome, VmBackend
    from roteiro_py.vm.stamps import StampBook


#: Deadline of each toolchain probe step (`cargo-clippy --version`, `rustc -vV`).
PROBE_TIMEOUT_S = 120.0


#: CARGO_TARGET_DIR and HOME live on the scratch disk (GUEST_SCRATCH), the one writable place.
GUEST_TARGET_DIR = f"{GUEST_SCRATCH}/target"


GUEST_HOME = f"{GUEST_SCRATCH}/home"


#: Variables of the image's own config that the guest command keeps (PATH and rustup's);
#: everything else in the command's environment is set here. Nothing comes from the host.
IMAGE_ENV_KEPT = ("PATH", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "RUST_VERSION")


#: An image's variable of this many characters or more is dropped (a PATH is far shorter).
IMAGE_ENV_VALUE_LIMIT = 4096


DEFAULT_GUEST_PATH = "/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def guest_env(image: ResolvedImage) -> dict[str, str]:
    """The guest command's whole environment: set here, from the image's config and constants."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.clippy.command import PINNED_ENV, RUSTC_INFO_DIR, RUSTC_INFO_VARIABLE
    from roteiro_py.vm.mounts import GUEST_CARGO_HOME

    env: dict[str, str] = {"PATH": DEFAULT_GUEST_PATH}
    # Every level of the image's JSON is checked for its shape: `"config": null`, a list
    # or a string there was an AttributeError (exit 4) for an image a repository may name.
    section = image.config.get("config") if isinstance(image.config, dict) else None
    declared = section.get("Env") if isinstance(section, dict) else None
    for entry in declared if isinstance(declared, list) else []:
        if isinstance(entry, str) and "=" in entry:
            name, value = entry.split("=", 1)
            # printable: no newline, NUL or lone surrogate, which the job script cannot
            # carry (a ValueError there was exit 4 for a hostile image's config)
            if name in IMAGE_ENV_KEPT and value.isprintable() and len(value) < IMAGE_ENV_VALUE_LIMIT:
                env[name] = value
    # A relative PATH entry (or an empty one, which means `.`) would look `cargo` and
    # `rustc` up in the tree, the lint's working directory.
    env["PATH"] = ":".join(d for d in env["PATH"].split(":") if d.startswith("/")) or DEFAULT_GUEST_PATH
    if "RUST_VERSION" in env and "RUSTUP_TOOLCHAIN" not in env:
        # Official Rust images name their toolchain: the probe asks that one for its
        # sysroot. Whatever the image says, no tree toolchain file is obeyed: every step
        # runs through clippy/command.py's PIN_SCRIPT (an image without RUST_VERSION let a
        # tree `rust-toolchain.toml` replace clippy: review rev-tree).
        env["RUSTUP_TOOLCHAIN"] = env["RUST_VERSION"]
    env.update({
        **PINNED_ENV,
        "HOME": GUEST_HOME,
        "CARGO_HOME": GUEST_CARGO_HOME,
        "CARGO_TARGET_DIR": GUEST_TARGET_DIR,
        "CARGO_NET_OFFLINE": "true",
        "CARGO_TERM_COLOR": "never",
        "LANG": "C.UTF-8",
        "TMPDIR": "/tmp",
        # where the clippy probe (a VM template step) keeps cargo's rustc info cache for
        # every pinned step to copy into an empty target directory (clippy/command.py)
        RUSTC_INFO_VARIABLE: RUSTC_INFO_DIR,
    })
    return env


#: What a clippy lint runs, as its grant names it; all a checker may run (checker_ceiling).
CHECKER_PROGRAMS = ("cargo", "rustc")


def grant_for(tree: Tree, registry: Path | None, git: Path | None) -> GrantSet:
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.process.grants import GrantSet

    # The workspace root, not the whole repository: cargo needs only the workspace (and a
    # repository also holds .git, virtualenvs and build output that the guest has no
    # business reading). Path dependencies outside the workspace root are not visible.
    atoms = [f"fs:read:{tree.workspace}/**", f"fs:list:{tree.workspace}/**",
             f"fs:write:{GUEST_SCRATCH}/**", *(f"proc:exec:{p}" for p in CHECKER_PROGRAMS)]
    # `registry` and `git` are a vendored view's (cargo/vendor.py), never a host cache.
    atoms += [f"fs:read:{cache}/**" for cache in (registry, git) if cache is not None]
    return GrantSet.of(*atoms)


def ceiling_for(tree: Tree, registry: Path | None, git: Path | None) -> GrantSet:
    """The most a checker over `tree` may ever be granted (process/grants.py
    `checker_ceiling`), with the same tree, cargo view and scratch as `grant_for`."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.process.grants import checker_ceiling

    return checker_ceiling(tree.workspace, CHECKER_PROGRAMS, GUEST_SCRATCH,
                           sources=[cache for cache in (registry, git) if cache is not None])


def check_grant(grant: GrantSet, sandbox: VmBackend, steps: list[Command], command: str,
                backend: str, *, checker: GrantSet) -> None:
    """Refuse a grant the backend cannot enforce for these steps, or that a checker may
    never have, before anything is prepared for the run: errors.Unenforceable.

    First the grant against what the backend states it can enforce (`VmBackend.ceiling`,
    `GrantSet.within`, as the tests ask it), naming every atom beyond; then against
    `checker` (`ceiling_for`: the tree read-only, its dependencies' vendored view, the
    scratch, cargo and rustc), which no backend's capabilities widen; then the backend's
    own mount table for these steps (`VmBackend.check`, what `run_steps` asks), which also
    refuses the trees it never shares although the ceiling's `fs:read:/**` admits them: a
    workspace holding the cargo home (a CI job's `CARGO_HOME` inside its checkout), one
    that is /tmp. Without the last, those were refused only after the root filesystem and
    the dependency cache were built (minutes, the first time). The backend's check also
    meets its copy's refusals of the tree (errors.TreeTooLarge, errors.TreeIncomplete),
    which pass through as themselves. `command` is the step as a refusal names it."""
    ceiling = sandbox.ceiling()
    if not grant.within(ceiling).allows:
        beyond = " ".join(str(atom) for atom in grant.beyond(ceiling))
        raise Unenforceable(beyond, command, f"beyond what the {backend} backend can enforce "
                            f"({ceiling}); nothing was prepared or booted")
    if not grant.within(checker).allows:
        beyond = " ".join(str(atom) for atom in grant.beyond(checker))
        raise Unenforceable(beyond, command, "beyond what a checker may ever be granted "
                            f"({checker}: process/grants.py checker_ceiling); nothing was "
                            "prepared or booted")
    try:
        sandbox.check(steps, grant)
    except Unenforceable as refused:
        why = (refused.why or "").rstrip(".")
        raise Unenforceable(refused.atom, command, f"{why} (the {backend} backend's mount "
                            "table); nothing was prepared or booted", fix=refused.fix) from None


def clippy_command(settings: config.Settings, member: str | None = None,
                   rendering: str | None = None) -> list[str]:
    """The guest's clippy command line; bad names or flags are a usage error, raised early.
    `member`: the package a PATH inside the workspace names (preflight.member_of), linted
    alone as `cargo clippy` run in its directory would, unless packages are chosen.
    `rendering`: what `rendered` holds for `--message-format` (clippy/stream.py)."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.clippy.command import ClippyOptions, clippy_argv, lint_levels

    lint = settings.lint
    packages = tuple(lint.packages) or ((member,) if member and not lint.workspace else ())
    return clippy_argv(ClippyOptions(
        all_targets=lint.all_targets, features=tuple(lint.features),
        all_features=lint.all_features, no_default_features=lint.no_default_features,
        packages=packages, workspace=lint.workspace, exclude=tuple(lint.exclude),
        targets=tuple(lint.targets), target=lint.target, levels=lint_levels(lint.levels),
        no_deps=lint.no_deps, rendering=rendering))


def with_config(argv: list[str], config_args: tuple[str, ...]) -> list[str]:
    """The clippy argv with `--config` arguments (the vendored view's `[source]` tables,
    cargo/vendor.py) right after the subcommand, before the part that shapes the build ends: cargo-clippy
    hands them to `cargo check`, and the dependency cache is keyed by them too."""
    if not config_args:
        return argv
    if argv[:2] != ["cargo-clippy", "clippy"]:
        raise ValueError(f"{argv[:2]!r} is not the clippy argv")
    return [*argv[:2], *config_args, *argv[2:]]


def steps_for(tree: Tree, settings: config.Settings, env: dict[str, str], argv: list[str]) -> list[Command]:
    """The probes, run outside the tree (command.PROBE_CWD), then the lint in the workspace,
    each run by the toolchain the image pins, never one a tree toolchain file names."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.clippy.command import PROBE_CLIPPY, PROBE_CWD, PROBE_RUSTC, pinned
    from roteiro_py.process.sandbox import Command

    def command(words: tuple[str, ...] | list[str], cwd: Path, timeout: float) -> Command:
        return Command(program=words[0], args=tuple(words[1:]), workspace=cwd, env=env,
                       timeout=timeout)

    probe_cwd = Path(PROBE_CWD)
    if probe_cwd.is_relative_to(tree.workspace):
        # A step names the tree by its host path: the probes' /tmp would name the tree.
        raise UsageError(f"The workspace {tree.workspace} holds {PROBE_CWD}, where the guest probes "
                         "its toolchain away from the tree.", hint="Move or copy the tree elsewhere to lint it.")
    return [command(PROBE_CLIPPY, probe_cwd, PROBE_TIMEOUT_S),
            command(PROBE_RUSTC, probe_cwd, PROBE_TIMEOUT_S),
            command(pinned(argv), tree.workspace, float(settings.vm.timeout_s))]


def run_job(backend: VmBackend, steps: list[Command], grant: GrantSet, deadline: Deadline,
            staging: Path | None, stamps: StampBook | None = None,
            template_steps: int | None = None, stop_on_failure: bool = True) -> JobOutcome:
    """The one boot, within what is left of the run's deadline; the worktree's copy
    carries `stamps` and the guest's clock starts past them (vm/stamps.py).
    `template_steps`: how many first steps (the probes) a VM template may have run;
    default all but the last. `stop_on_failure`: no step runs after one that failed."""
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("preparing the run", deadline.seconds,
                               stopped="the VM was not started")
    try:
        # The probes run in PROBE_CWD and touch no share: a VM template may run them once
        # for every run of this image (vm/qemu/template.py).
        return backend.run_steps(steps, grant, stop_on_failure=stop_on_failure, deadline=left,
                                 staging=staging, stamps=stamps,
                                 clock=None if stamps is None else stamps.clock,
                                 template_steps=len(steps) - 1 if template_steps is None
                                 else template_steps)
    except DeadlineExceeded as error:  # stated as the run's deadline, not what was left
        raise DeadlineExceeded(error.command, deadline.seconds, stopped=error.stopped) from None
