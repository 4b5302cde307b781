"""One lint run: preflight in order, boot, probe, build, report.

The preflight checks run cheapest and most fundamental first, and each refuses before
anything more expensive starts:

    image configured -> pinned by digest -> hypervisor usable -> image present in the store
    -> package cache present (and a lockfile) -> scratch available

Only then is the root filesystem built (cached per manifest digest) and a VM booted.
In the one boot, the guest's toolchain is probed before the build (`cargo-clippy
--version`, `rustc -vV`, outside the tree: clippy/command.py), so an image without
clippy is "image lacks the linter" and never an empty report. Nothing here ever runs the
tree's code on the host; after the guest is gone the host reads only the staged copy the
guest saw (for snippets), never the tree itself. `[vm] timeout_s` bounds the whole run
from the first preflight to the report, the host's own work (copying the tree, building
images, parsing) included.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import stat
import sys
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Any

from roteiro_py import __version__, config, paths
from roteiro_py.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    DeadlineExceeded,
    ImageNotAllowed,
    LockfileWouldBeWritten,
    NoImageConfigured,
    NoPackageCache,
    OutputTooLarge,
    ProbeFailed,
    ScratchUnavailable,
    UsageError,
    VmFailed,
)
from roteiro_py.reference import ImageReference, parse_pinned

if TYPE_CHECKING:
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.process.grants import GrantSet
    from roteiro_py.process.sandbox import Command
    from roteiro_py.report.model import Report
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm import JobOutcome, VmBackend, VmOutcome

#: Deadline of each toolchain probe step (`cargo-clippy --version`, `rustc -vV`).
PROBE_TIMEOUT_S = 120.0
#: Where the scratch disk is mounted in the guest; CARGO_TARGET_DIR lives under it. Shares
#: keep their host paths in the guest, so this is a path no host tree uses: with
#: `/scratch` a worktree under /scratch/$USER (a common HPC layout) would be hidden by the
#: scratch disk, and cargo would lint whatever an earlier run left there.
GUEST_SCRATCH = "/.roteiro-scratch"
GUEST_TARGET_DIR = f"{GUEST_SCRATCH}/target"
GUEST_HOME = f"{GUEST_SCRATCH}/home"
#: Variables of the image's own config that the guest command keeps (PATH and rustup's);
#: everything else in the command's environment is set here. Nothing comes from the host.
IMAGE_ENV_KEPT = ("PATH", "RUSTUP_HOME", "RUSTUP_TOOLCHAIN", "RUST_VERSION")
#: An image's variable of this many characters or more is dropped (a PATH is far shorter).
IMAGE_ENV_VALUE_LIMIT = 4096
DEFAULT_GUEST_PATH = "/usr/local/cargo/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_LEVEL_RANK = {"error": 3, "warning": 2, "note": 1, "help": 0}
_FAIL_ON_RANK = {"error": 3, "warning": 2}


@dataclass(frozen=True)
class LintRequest:
    path: Path
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)
    output: Path | None = None


@dataclass(frozen=True)
class Tree:
    """Where things are on the host: what was asked for, the workspace, the repository."""

    asked: Path
    workspace: Path
    repo_root: Path

    @property
    def layout_workspace(self) -> PurePosixPath:
        return PurePosixPath(self.workspace.relative_to(self.repo_root).as_posix())


def locate(path: Path) -> Tree:
    from roteiro_py.deps import find_workspace_root

    asked = path.resolve()
    if not asked.exists():
        raise UsageError(f"The path {asked} does not exist.", hint="Pass the repository to lint.")
    workspace = find_workspace_root(asked)
    if workspace.is_relative_to(GUEST_SCRATCH):
        raise UsageError(f"The workspace {workspace} lies under {GUEST_SCRATCH}, where the guest mounts "
                         "its scratch disk.", hint="Move or copy the tree elsewhere to lint it.")
    repo_root = workspace
    for directory in (workspace, *workspace.parents):
        if (directory / ".git").exists():
            repo_root = directory
            break
    return Tree(asked=asked, workspace=workspace, repo_root=repo_root)


def repo_config_hint(resolved: config.Resolved, path: Path) -> Path:
    if resolved.repo_config is not None:
        return resolved.repo_config
    return config.config_file_for("repo", path)


def pinned_image(resolved: config.Resolved, path: Path) -> ImageReference:
    """Steps 1 and 2: an image is configured, pinned by digest, and (when the repository
    chose it) under the user's `lint.allowed_images`."""
    image = resolved.settings.lint.image
    if not image:
        raise NoImageConfigured(user_config=paths.user_config_path(),
                                repo_config=repo_config_hint(resolved, path))
    source = resolved.source_of("lint.image")
    reference = parse_pinned(image, source=str(source))
    allowed = resolved.settings.lint.allowed_images
    if source.kind == "repo" and allowed and not config.image_allowed(reference.name, allowed):
        raise ImageNotAllowed(str(reference), source.label, allowed,
                              str(resolved.source_of("lint.allowed_images")))
    return reference


def image_chosen_in(resolved: config.Resolved, tree: Tree) -> str:
    """Which setting chose the image, as the report states it: the flag, the variable, or
    the file (the repository's relative to its root, the user's with $HOME as ~)."""
    source = resolved.source_of("lint.image")
    if source.kind == "repo" and resolved.repo_config is not None:
        return os.path.relpath(resolved.repo_config, tree.repo_root)
    if source.kind == "user":
        home = str(Path.home())
        label = source.label
        return "~" + label[len(home):] if home != "/" and label.startswith(home + "/") else label
    return source.label


def package_cache(tree: Tree, deadline: Deadline | None = None) -> tuple[Path | None, Path | None]:
    """Step 5: the tree has a lockfile, and the guest's view of the cargo cache holds
    exactly what it pins (roteiro_py/cargo_view.py): (view registry/, view git/).

    A tree whose lockfile pins nothing from a registry or git (only path dependencies)
    gets no view at all. A pinned package the host cache lacks is NoPackageCache naming it.
    """
    from roteiro_py.cargo_view import cargo_view, pins

    lockfile = tree.workspace / "Cargo.lock"
    if not os.path.lexists(lockfile):
        raise LockfileWouldBeWritten(tree.workspace, f"{lockfile} does not exist")
    cargo_home = paths.cargo_home().resolve()
    pinned = pins(lockfile)
    for kind in sorted({pin.kind for pin in pinned}):
        if not (cargo_home / kind).is_dir():
            raise NoPackageCache(cargo_home / kind, tree.asked)
    view = cargo_view(lockfile, cargo_home, tree.asked, pinned=pinned,
                      until=deadline.at if deadline else None,
                      seconds=deadline.seconds if deadline else 0.0)
    if view is None:
        return None, None
    registry, git = view / "registry", view / "git"
    return (registry if registry.is_dir() else None), (git if git.is_dir() else None)


def scratch_key(tree: Tree, manifest_digest: str, features: list[str]) -> str:
    material = json.dumps([str(tree.workspace), manifest_digest, sorted(features)])
    return hashlib.sha256(material.encode()).hexdigest()[:32]


@contextlib.contextmanager
def scratch_disk(settings: config.Settings, key: str,
                 deadline: Deadline | None = None) -> Iterator[Path]:
    """Step 6: the writable scratch disk, discarded at the end unless keep_cache.

    A kept disk is locked for the run: two lints of the same key take turns, they never
    share one ext4 image (qemu would refuse the second, and a shared cache would let one
    build see the other half-written). Only making the disk is reported as the scratch
    being unavailable; what fails while it is in use propagates as itself.
    """
    from filelock import FileLock, Timeout

    from roteiro_py.vm.qemu.scratch import create_scratch

    size = settings.vm.scratch_mib
    if settings.lint.keep_cache:
        builds = paths.cache_root() / "builds"
        disk = builds / f"{key}.ext4"
        try:
            builds.mkdir(parents=True, exist_ok=True)
            # another lint of the same key is waited for within the run's deadline only
            lock = FileLock(str(builds / f"{key}.lock"), timeout=-1 if deadline is None
                            else max(deadline.at - time.monotonic(), 0.0))
            lock.acquire()
        except Timeout:
            assert deadline is not None
            raise DeadlineExceeded("waiting for another lint using the same kept cache",
                                   deadline.seconds, stopped="the VM was not started") from None
        except OSError as error:
            raise ScratchUnavailable(builds, error.strerror or str(error)) from None
        try:
            if not disk.is_file():
                create_scratch(disk, size)
            yield disk
        finally:
            lock.release()
        return
    scratch_dir = paths.cache_root() / "scratch"
    disk = scratch_dir / f"{uuid.uuid4().hex}.ext4"
    try:
        scratch_dir.mkdir(parents=True, exist_ok=True)
        _sweep(scratch_dir)
    except OSError as error:
        raise ScratchUnavailable(scratch_dir, error.strerror or str(error)) from None
    try:
        create_scratch(disk, size)
        yield disk
    finally:
        with contextlib.suppress(FileNotFoundError):
            disk.unlink()




def _sweep(scratch_dir: Path) -> None:
    """Remove scratch disks left behind by runs killed without unwinding (SIGKILL, power loss)."""
    import time

    from roteiro_py.vm.qemu.shareimage import STALE_SECONDS

    cutoff = time.time() - STALE_SECONDS
    for leftover in scratch_dir.glob("*.ext4"):
        with contextlib.suppress(OSError):
            if leftover.lstat().st_mtime < cutoff:
                leftover.unlink()


def guest_env(image: ResolvedImage) -> dict[str, str]:
    """The guest command's whole environment: set here, from the image's config and constants."""
    from roteiro_py.clippy.command import PINNED_ENV
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
    })
    return env


def grant_for(tree: Tree, registry: Path | None, git: Path | None) -> GrantSet:
    from roteiro_py.process.grants import GrantSet

    # The workspace root, not the whole repository: cargo needs only the workspace (and a
    # repository also holds .git, virtualenvs and build output that the guest has no
    # business reading). Path dependencies outside the workspace root are not visible.
    atoms = [f"fs:read:{tree.workspace}/**", f"fs:list:{tree.workspace}/**",
             f"fs:write:{GUEST_SCRATCH}/**", "proc:exec:cargo", "proc:exec:rustc"]
    # `registry` and `git` are a cargo view's (package_cache), never the host's whole cache.
    atoms += [f"fs:read:{cache}/**" for cache in (registry, git) if cache is not None]
    return GrantSet.of(*atoms)


def clippy_command(settings: config.Settings) -> list[str]:
    """The guest's clippy command line; bad feature names are a usage error, raised early."""
    from roteiro_py.clippy.command import ClippyOptions, clippy_argv

    lint = settings.lint
    return clippy_argv(ClippyOptions(all_targets=lint.all_targets, features=tuple(lint.features),
                                     all_features=lint.all_features,
                                     no_default_features=lint.no_default_features))


def steps_for(tree: Tree, settings: config.Settings, env: dict[str, str], argv: list[str]) -> list[Command]:
    """The probes, run outside the tree (command.PROBE_CWD), then the lint in the workspace,
    each run by the toolchain the image pins, never one a tree toolchain file names."""
    from roteiro_py.clippy.command import PROBE_CLIPPY, PROBE_CWD, PROBE_RUSTC, pinned
    from roteiro_py.process.sandbox import Command

    def command(words: tuple[str, ...] | list[str], cwd: Path, timeout: float) -> Command:
        return Command(program=words[0], args=tuple(words[1:]), workspace=cwd, env=env,
                       timeout=timeout)

    probe_cwd = Path(PROBE_CWD)
    if probe_cwd.is_relative_to(tree.workspace):
        # Shares keep their host paths in the guest: the probes would run in the tree.
        raise UsageError(f"The workspace {tree.workspace} holds {PROBE_CWD}, where the guest probes "
                         "its toolchain away from the tree.", hint="Move or copy the tree elsewhere to lint it.")
    return [command(PROBE_CLIPPY, probe_cwd, PROBE_TIMEOUT_S),
            command(PROBE_RUSTC, probe_cwd, PROBE_TIMEOUT_S),
            command(pinned(argv), tree.workspace, float(settings.vm.timeout_s))]


def _signal_of(status: int) -> str | None:
    """The signal a guest shell status of 128+N means, when N is a real signal."""
    if 128 < status <= 128 + 64:
        with contextlib.suppress(ValueError):
            return signal.Signals(status - 128).name
    return None


def shown(step: Command) -> str:
    """A step as a refusal names it: the toolchain program and its arguments, without the
    pinning wrapper (clippy/command.py) every step runs through."""
    import shlex

    from roteiro_py.clippy.command import unpinned

    return shlex.join(unpinned(step.argv))


def judge_job(job: JobOutcome, steps: list[Command]) -> None:
    """Refuse when the VM did not get as far as a verdict on every step that ran."""
    for index, (outcome, step) in enumerate(zip(job.steps, steps, strict=False)):
        if outcome.timed_out and index < len(steps) - 1:
            raise ProbeFailed(f"`{shown(step)}` did not finish within {step.timeout:g} s",
                              "the toolchain probe has a fixed deadline; `--timeout` sets clippy's")
        if outcome.timed_out:
            raise DeadlineExceeded(shown(step), step.timeout)
    if not job.completed and job.failure and "deadline" in job.failure:
        step = steps[len(job.steps) - 1] if job.steps else steps[0]
        raise DeadlineExceeded(shown(step), step.timeout)


def lint(request: LintRequest) -> tuple[Report, config.Settings]:
    """Run the lint; returns the report, or raises the refusal that explains why not."""
    began = time.monotonic()
    resolved = config.resolve(request.path, flags=request.flags)
    settings = resolved.settings
    reference = pinned_image(resolved, request.path)                       # 1, 2
    # Imported only past the first refusals, which then cost no more than --help does.
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.store import Store
    from roteiro_py.vm import BACKENDS
    from roteiro_py.vm.qemu.rootfs import FlattenLimits, rootfs_image
    from roteiro_py.vm.qemu.shareimage import StageLimits, staging_area

    argv = clippy_command(settings)
    tree = locate(request.path)
    vm = settings.vm

    def backend(rootfs: Path, scratch: Path | None, identity: str = "") -> VmBackend:
        return BACKENDS[settings.lint.backend](
            rootfs=rootfs, scratch=scratch, scratch_guest=GUEST_SCRATCH, accel=vm.accel,
            cpus=vm.cpus, memory_mib=vm.memory_mib,
            kernel=Path(vm.kernel) if vm.kernel else None,
            initrd=Path(vm.initrd) if vm.initrd else None,
            output_limit=vm.output_limit_mib * 1024 * 1024, stage=StageLimits.of(vm),
            template=vm.template, rootfs_identity=identity)

    # The probe needs no root filesystem; its verdict is cached, so the backend that runs
    # the job below asks again for free.
    backend(Path(os.devnull), None).isolation()                           # 3
    image = Store.default().resolve(reference)                             # 4
    deadline = Deadline(at=began + vm.timeout_s, seconds=float(vm.timeout_s))
    registry, git = package_cache(tree, deadline)                          # 5
    env = guest_env(image)
    steps = steps_for(tree, settings, env, argv)
    grant = grant_for(tree, registry, git)
    key = scratch_key(tree, image.manifest_digest, settings.lint.features)
    started = datetime.now(UTC)
    with staging_area() as staging:  # the bytes the guest saw, kept for the snippets
        with scratch_disk(settings, key, deadline) as disk:                # 6
            rootfs = rootfs_image(image.layers, image.manifest_digest,
                                  FlattenLimits(until=deadline.at, seconds=deadline.seconds))
            job = run_job(backend(rootfs, disk, image.manifest_digest), steps, grant, deadline,
                          staging)
        ended = datetime.now(UTC)
        report_left_out(job)
        report = build_report(job, steps, deadline, tree, resolved, reference, image,
                              started, ended)
    return report, settings


def run_job(backend: VmBackend, steps: list[Command], grant: GrantSet, deadline: Deadline,
            staging: Path) -> JobOutcome:
    """The one boot, within what is left of the run's deadline."""
    left = deadline.at - time.monotonic()
    if left <= 0:
        raise DeadlineExceeded("preparing the run", deadline.seconds,
                               stopped="the VM was not started")
    try:
        # The probes (all steps but the last) run in PROBE_CWD and touch no share: a VM
        # template may run them once for every run of this image (vm/qemu/template.py).
        return backend.run_steps(steps, grant, stop_on_failure=True, deadline=left,
                                 staging=staging, template_steps=len(steps) - 1)
    except DeadlineExceeded as error:  # stated as the run's deadline, not what was left
        raise DeadlineExceeded(error.command, deadline.seconds, stopped=error.stopped) from None


def report_left_out(job: JobOutcome, *, shown: int = 5) -> None:
    """One line on stderr per copied share that left something out (shareimage.py)."""
    from roteiro_py.report.safe import clean

    for share in job.staged:
        if share.left_out:
            names = ", ".join(f"{clean(where)} ({why})" for where, why in share.left_out[:shown])
            more = len(share.left_out) - shown
            sys.stderr.write(f"pylint-sandbox: {len(share.left_out)} entries of "
                             f"{clean(str(share.host))} were not copied for the VM: {names}"
                             + (f" and {more} more" if more > 0 else "") + "\n")


def build_report(job: JobOutcome, steps: list[Command], deadline: Deadline, tree: Tree,
                 resolved: config.Resolved, reference: ImageReference, image: ResolvedImage,
                 started: datetime, ended: datetime) -> Report:
    """Judge the job and make its report; snippets come from the staged workspace copy."""
    from roteiro_py.clippy.classify import ClippyRun, classify
    from roteiro_py.clippy.command import unpinned
    from roteiro_py.clippy.parse import PathLayout
    from roteiro_py.clippy.toolchain import ProbeOutput, toolchain_from_probe
    from roteiro_py.report.model import Isolation as ReportIsolation
    from roteiro_py.report.model import Provenance, Report, ToolInfo

    settings = resolved.settings
    vm = settings.vm
    isolation = job.isolation
    judge_job(job, steps)
    if not job.steps:
        raise VmFailed(job.failure or "the guest ran no step", job.console.decode("utf-8", "replace"))
    missing = ProbeOutput(None, b"", b"")
    probes = [ProbeOutput(*_probe(outcome)) for outcome in job.steps[:2]]
    toolchain = toolchain_from_probe(probes[0], probes[1] if len(probes) > 1 else missing,
                                     reference=str(reference))
    if len(job.steps) < 3:
        raise VmFailed(job.failure or "the guest did not run clippy",
                       job.console.decode("utf-8", "replace"))
    run = job.steps[2]
    limit_bytes = vm.output_limit_mib * 1024 * 1024
    status, killed = _status(run, job, limit_bytes)
    result = classify(
        ClippyRun(command=unpinned(steps[2].argv), status=status, stdout=run.stdout,
                  stderr=run.stderr.decode("utf-8", "replace"), memory_mib=vm.memory_mib,
                  limit_bytes=limit_bytes, signal_name=killed,
                  truncated=run.truncated, truncated_stream="stdout"),
        tree=tree.asked, image_reference=str(reference),
        layout=PathLayout(workspace=tree.layout_workspace,
                          guest_root=PurePosixPath(tree.repo_root.as_posix())),
        staged=next((s.copy for s in job.staged if s.host == tree.workspace), None),
        deadline=deadline)
    features = list(settings.lint.features)
    if settings.lint.all_features:
        features = ["(all)"]
    report = Report(
        tool=ToolInfo(name="pylint-sandbox", version=__version__),
        provenance=Provenance(image_reference=image.reference, image_digest=image.manifest_digest,
                              image_chosen_by=resolved.source_of("lint.image").kind,
                              image_chosen_in=image_chosen_in(resolved, tree)),
        toolchain=toolchain,
        isolation=ReportIsolation(backend=isolation.backend, accelerator=isolation.accelerator,
                                  hardware_isolated=isolation.hardware_isolated,
                                  description=isolation.description),
        workspace=tree.layout_workspace.as_posix(),
        command=unpinned(steps[2].argv), features=features, started=started, ended=ended,
        findings=result.findings, summary=result.summary())
    return report


def _probe(outcome: VmOutcome) -> tuple[int | None, bytes, bytes]:
    if outcome.exit is None:
        raise ProbeFailed(f"`{shown(outcome.command)}` did not finish",
                          outcome.failure or outcome.stderr.decode("utf-8", "replace"))
    return outcome.exit, outcome.stdout, outcome.stderr


def _status(outcome: VmOutcome, job: JobOutcome, limit_bytes: int) -> tuple[int | None, str | None]:
    """The clippy step's status, or the refusal for a step the guest never reported on.

    A step without a status was cut short: its output passed the limit (the VM is then
    stopped) or the VM died (a guest kernel panic, qemu killed). Neither is a verdict.
    """
    if outcome.exit is None:
        if outcome.truncated:
            raise OutputTooLarge("output (all streams together)", limit_bytes)
        raise VmFailed(outcome.failure or job.failure or "the guest reported no status for clippy",
                       job.console.decode("utf-8", "replace"))
    killed = _signal_of(outcome.exit)
    return (None, killed) if killed else (outcome.exit, None)


def exit_code(report: Report, fail_on: str) -> int:
    """0 when nothing is at or above `fail_on`; 1 otherwise. A failed build is never clean."""
    if fail_on == "never":
        return EXIT_OK
    threshold = _FAIL_ON_RANK[fail_on]
    worst = max((_LEVEL_RANK.get(f.level, 0) for f in report.findings), default=-1)
    if not report.summary.build_succeeded:
        worst = max(worst, _LEVEL_RANK["error"])
    return EXIT_FINDINGS if worst >= threshold else EXIT_OK


def check_output(output: Path | None) -> None:
    """Refuse an `--output` that cannot be written, before anything is booted.

    Found only after the lint, a directory or a missing parent cost the whole run and
    ended as an internal error (IsADirectoryError, exit 4)."""
    if output is None:
        return
    if output.is_dir():
        raise UsageError(f"--output {output} is a directory.", hint="Name a file to write the report to.")
    parent = output.parent
    if not parent.is_dir():
        raise UsageError(f"--output {output}: the directory {parent} does not exist.",
                         hint="Create it first, or name a file in an existing directory.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"--output {output}: the directory {parent} is not writable.",
                         hint="Name a file in a directory you can write to.")


def write_output(output: Path, text: str) -> None:
    """Put the report at `output`, or refuse naming it (UsageError) if that fails.

    A regular file (or a new name) gets the report beside it, renamed into place: a run
    that fails while writing (disk full, interrupted) never leaves a half-written report
    behind; an existing file keeps its mode (a private 0600 report once became 0644).
    A character device or a FIFO named directly (`--output /dev/null`) is written through,
    never renamed over: as root, that once replaced the device with a file.

    A link is written through only when it leads to this process's own stdout or stderr
    or to /dev/null (`--output /dev/stdout`); any other link is replaced by the report.
    The tree under review can commit `clippy.sarif -> ../../.bashrc` (or a link to a
    device or a daemon's FIFO), and a CI step writing `--output clippy.sarif` in the
    checkout would otherwise write text the guest chose into a host file. A failure (a
    sticky directory's file of another user, ENOSPC) is reported as this path's problem;
    after a whole lint it used to be an OSError, exit 4."""
    try:
        try:
            existing: os.stat_result | None = os.lstat(output)
        except FileNotFoundError:
            existing = None
        if existing is not None and stat.S_ISLNK(existing.st_mode):
            try:
                final: os.stat_result | None = os.stat(output)
            except OSError:
                final = None  # dangling: the link itself is replaced below
            if final is not None and _own_stream(final):
                _write_into(output, text, final)
                return
            existing = None  # the link is replaced by a new file with the default mode
        elif existing is not None and (stat.S_ISCHR(existing.st_mode) or stat.S_ISFIFO(existing.st_mode)):
            _write_into(output, text, existing)
            return
        elif existing is not None and not stat.S_ISREG(existing.st_mode):
            raise UsageError(f"--output {output} is neither a regular file, a character device "
                             "nor a FIFO.", hint="Name a file to write the report to.")
        mode = stat.S_IMODE(existing.st_mode) if existing else 0o644 & ~_umask()
        paths.replace_file(output, text.encode("utf-8"), mode)
    except OSError as error:
        raise UsageError(
            f"--output {output}: the report could not be written "
            f"({error.strerror or error}).",
            hint="The lint ran; name a file you can write (with room for the report) and "
                 "run it again, or leave out --output to print the report.") from None


#: /dev/null's device number on Linux (major 1, minor 3).
_DEV_NULL = os.makedev(1, 3)


def _own_stream(st: os.stat_result) -> bool:
    """What a link may lead to and still be written through: /dev/null, or the file,
    pipe or terminal this process's stdout or stderr already is."""
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == _DEV_NULL:
        return True
    for fd in (1, 2):
        try:
            own = os.fstat(fd)
        except OSError:
            continue
        if (own.st_dev, own.st_ino) == (st.st_dev, st.st_ino):
            return True
    return False


def _write_into(output: Path, text: str, checked: os.stat_result) -> None:
    """Write into what `output` names, never creating a file (no O_CREAT: a link swapped
    to a missing path fails) and only if the opened file is the one that was checked."""
    fd = os.open(output, os.O_WRONLY | os.O_NOCTTY | os.O_CLOEXEC)
    with os.fdopen(fd, "w", encoding="utf-8") as handle:
        now = os.fstat(handle.fileno())
        if (now.st_dev, now.st_ino) != (checked.st_dev, checked.st_ino):
            raise UsageError(f"--output {output} changed while the report was written.",
                             hint="Name a file to write the report to.")
        if stat.S_ISREG(now.st_mode):
            handle.truncate(0)
        handle.write(text)


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def run_lint_command(request: LintRequest) -> int:
    check_output(request.output)                                           # 0: cheapest
    report, settings = lint(request)
    from roteiro_py.report.render import render

    fmt = settings.lint.format
    to_terminal = request.output is None and sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    width = os.get_terminal_size().columns if to_terminal else 100
    text = render(report, fmt, width=width, color=to_terminal)
    if request.output is not None:
        write_output(request.output, text)
    else:
        sys.stdout.write(text)
    return exit_code(report, settings.lint.fail_on)
