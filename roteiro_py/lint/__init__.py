"""One lint run: preflight in order, boot, probe, build, report.

The preflight checks run cheapest and most fundamental first, and each refuses before
anything more expensive starts:

    platform (platform_support.py) -> image configured -> pinned by digest
    -> the packages and features asked for are the tree's (`check_selection`)
    -> hypervisor usable -> image present in the store
    -> package cache present (and a lockfile) -> the grant within what the backend
    can enforce, and the tree's copy within its caps (`check_grant`) -> the scratch
    disk's place (`check_scratch`)

Only then is the root filesystem built (cached per manifest digest) and a VM booted.
In the one boot, the guest's toolchain is probed before the build (`cargo-clippy
--version`, `rustc -vV`, outside the tree: clippy/command.py), so an image without
clippy is "image lacks the linter" and never an empty report. Nothing here ever runs the
tree's code on the host; after the guest is gone the host reads only the staged copy the
guest saw (for snippets), never the tree itself. `[vm] timeout_s` bounds the whole run
from the first preflight to the report, the host's own work (copying the tree, building
images, parsing) included.

The run says what it is doing through a `Progress` (roteiro_py/progress.py): the stages
here, and the backend's own (worktree, boot, toolchain, clippy) from inside run_steps.
`run_lint_command` owns the renderer and finishes it, whatever happens, before anything
else reaches stderr (a refusal, "interrupted") and before the report reaches stdout.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py import config
from roteiro_py.compare import compare, load_against
from roteiro_py.lint.attestation import (
    check_attest,
    gather,
    git_commit,
    request_parameters,
    write_attestation,
)
from roteiro_py.lint.caches import (
    cargo_in_use,
    guest_cargo,
    package_cache,
    root_filesystem,
    root_filesystem_in_use,
    scratch_disk,
    scratch_key,
)
from roteiro_py.lint.dep_cache import attached, dependency_cache
from roteiro_py.lint.judgement import build_report, cargo_stream, exit_code, judge_job, shown
from roteiro_py.lint.output import (
    OutputPlan,
    append_step_summary,
    check_outputs,
    deliver,
    plan_outputs,
    render_all,
    write_output,
)
from roteiro_py.lint.preflight import (
    check_output,
    check_scratch,
    check_selection,
    image_chosen_in,
    locate,
    member_of,
    pinned_image,
    refuse_early,
    repo_root_of,
)
from roteiro_py.lint.run import (
    DEFAULT_GUEST_PATH,
    GUEST_TARGET_DIR,
    IMAGE_ENV_KEPT,
    IMAGE_ENV_VALUE_LIMIT,
    ceiling_for,
    check_grant,
    clippy_command,
    grant_for,
    guest_env,
    run_job,
    steps_for,
    with_config,
)
from roteiro_py.lint.staging import report_left_out
from roteiro_py.lint.tree import Tree
from roteiro_py.platform_support import require_supported
from roteiro_py.progress import (
    CARGO_VIEW,
    DEP_CACHE,
    HYPERVISOR,
    IMAGE,
    REPORT,
    ROOTFS,
    SILENT,
    NotesOnly,
    Progress,
    for_stderr,
)
from roteiro_py.vocabulary import GUEST_SCRATCH

if TYPE_CHECKING:
    from roteiro_py.lint.fix import FixOptions
    from roteiro_py.report.attest import Facts
    from roteiro_py.report.model import Report
    from roteiro_py.vm.api import JobOutcome, VmBackend

__all__ = [
    "DEFAULT_GUEST_PATH", "GUEST_SCRATCH", "IMAGE_ENV_KEPT", "IMAGE_ENV_VALUE_LIMIT",
    "CargoStream", "LintRequest", "OutputPlan",
    "Tree", "build_report", "ceiling_for", "check_grant", "check_output", "check_outputs",
    "clippy_command", "deliver", "exit_code",
    "grant_for", "guest_cargo", "guest_env", "image_chosen_in", "judge_job", "lint", "locate",
    "package_cache", "pinned_image", "plan_outputs", "render_all", "report_left_out",
    "root_filesystem", "run_job", "run_lint_command",
    "scratch_disk", "scratch_key", "shown", "steps_for", "write_output",
]


@dataclass(frozen=True)
class LintRequest:
    """`formats`: each `--format FMT[=PATH]` as given; `output`: `--output`; `category`:
    `--category` (lint/output.py says how they combine)."""

    path: Path
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)
    output: Path | None = None
    #: A JSON report of an earlier run, and a unified diff: what the findings are judged
    #: against (roteiro_py/compare/); None when not given.
    baseline: Path | None = None
    diff: Path | None = None
    formats: tuple[str, ...] = ()
    category: str | None = None
    #: `--message-format`: cargo's own stream on stdout (clippy/stream.py); None: none.
    message_format: str | None = None
    #: `--fix[=patch]` and its --allow-* flags (lint/fix.py); None without --fix.
    fix: FixOptions | None = None

    @property
    def outputs(self) -> OutputPlan:
        patch = self.fix is not None and self.fix.mode == "patch"
        return plan_outputs(self.formats, self.output, self.category, self.message_format,
                            stdout_taken_by="--fix=patch" if patch else None)
    #: -v: every note and the run's details on stderr (progress.py says what they are).
    verbose: bool = False
    #: `--attest FILE`, `--attest-key KEY` (lint/attestation.py).
    attest: Path | None = None
    attest_key: Path | None = None


@dataclass
class CargoStream:
    """`--message-format`: the text for stdout, and the guest's records dropped."""

    text: str = ""
    dropped: int = 0


def lint(request: LintRequest, progress: Progress = SILENT, stream: CargoStream | None = None,
         inspect: Callable[[JobOutcome, Tree], None] | None = None) -> tuple[Report, config.Settings]:
    """Run the lint; returns the report, or raises the refusal that explains why not.
    Each cache the run uses is held (its lock shared) from its check until the run's VMs
    are done, in `held`: no `cache prune` removes one meanwhile (roteiro_py/locks.py).
    `stream`: filled with cargo's own stream when the request has a `message_format`.
    `inspect` sees the job while its staged copy still exists (lint/fix.py reads it)."""
    report, settings, _ = lint_attested(request, progress, stream, inspect)
    return report, settings


def lint_attested(request: LintRequest, progress: Progress = SILENT, stream: CargoStream | None = None,
                  inspect: Callable[[JobOutcome, Tree], None] | None = None,
                  ) -> tuple[Report, config.Settings, Facts | None]:
    """`lint`, with the facts an attestation needs beyond the report when `--attest` was
    given (lint/attestation.py `gather`), else None."""
    with contextlib.ExitStack() as held:
        return _lint(request, progress, held, stream, inspect)


def _lint(request: LintRequest, progress: Progress, held: contextlib.ExitStack,
          stream: CargoStream | None = None, inspect: Callable[[JobOutcome, Tree], None] | None = None,
          ) -> tuple[Report, config.Settings, Facts | None]:
    began = time.monotonic()
    require_supported()                                                    # 0: the host itself
    layers = config.read_layers(request.path, flags=request.flags)
    refuse_early(layers, request.path)  # 1, 2 when they need no validation (~ --help)
    resolved = config.resolve(request.path, layers=layers)
    settings = resolved.settings
    request.outputs.resolved(settings.lint.format)  # `--category` without SARIF: before any VM
    if settings.lint.quiet and not request.verbose:  # known only once resolved; -v outranks it
        progress = SILENT
    reference = pinned_image(resolved, request.path)                       # 1, 2
    # Imported only past the first refusals, which then cost no more than --help does.
    from roteiro_py.clippy.command import GUEST_RENDERING
    from roteiro_py.store import Store
    from roteiro_py.vm import BACKENDS
    from roteiro_py.vm.disks.share_image import staging_area
    from roteiro_py.vm.options import VmOptions

    tree = locate(request.path)
    member = member_of(tree)
    argv = clippy_command(settings, member, GUEST_RENDERING.get(request.message_format or "json"))
    check_selection(tree, settings.lint, member)  # the tree's packages and features, as data
    vm = settings.vm

    def backend(rootfs: Path, scratch: Path | None, identity: str = "",
                dep_cache: Path | None = None, shown: Progress = progress) -> VmBackend:
        return BACKENDS[settings.lint.backend](VmOptions.of(
            vm, rootfs=rootfs, rootfs_identity=identity, scratch=scratch, dep_cache=dep_cache,
            dep_cache_guest=GUEST_TARGET_DIR if dep_cache else None, progress=shown))

    # The probe needs no root filesystem; its verdict is cached, so the backend that runs
    # the job below asks again for free. This is a preflight: it refuses early and tells
    # -v; the report states the isolation the job's own backend had (job.isolation).
    progress.stage(HYPERVISOR)
    sandbox = backend(Path(os.devnull), None)
    expected = sandbox.isolation()                                         # 3
    progress.detail(f"accel {vm.accel} ({resolved.source_of('vm.accel')}): {expected.description}")
    progress.stage(IMAGE)
    store = Store.default()
    image = store.resolve(reference)                                       # 4
    progress.detail(f"image {reference} ({resolved.source_of('lint.image')}), "
                    f"manifest {image.manifest_digest}")
    # lazy: clippy/parse.py loads the report's models, which no refusal up to here needs
    # ("image not provisioned" among them: bench/cli_startup.py)
    from roteiro_py.clippy.parse import Deadline

    deadline = Deadline(at=began + vm.timeout_s, seconds=float(vm.timeout_s))
    progress.stage(CARGO_VIEW)
    cargo = held.enter_context(cargo_in_use(tree, deadline))               # 5
    registry, git = cargo.registry, cargo.git
    argv = with_config(argv, cargo.config_args)  # the vendored view's [source] tables, if any
    env = guest_env(image)
    steps = steps_for(tree, settings, env, argv)
    from roteiro_py.clippy.command import unpinned  # here: importing lint stays light

    progress.detail(f"the guest will run, in {tree.workspace}: {shlex.join(unpinned(argv))}")
    grant = grant_for(tree, registry, git)
    # before anything is built: the grant (and the checker ceiling), the tree's copy (the
    # backend's check), the scratch's place
    check_grant(grant, sandbox, steps, shlex.join(unpinned(argv)), settings.lint.backend,
                checker=ceiling_for(tree, registry, git))                  # 5
    check_scratch(settings)                                                # 6
    started = datetime.now(UTC)
    progress.stage(ROOTFS)
    rootfs = held.enter_context(root_filesystem_in_use(image, store.root, deadline))
    progress.detail(f"root filesystem {rootfs.path}")
    progress.stage(DEP_CACHE)  # found, or built in a VM of its own (minutes, once per key)
    deps = dependency_cache(settings=settings, tree=tree, image=image, argv=argv, env=env,
                            registry=registry, git=git, deadline=deadline, progress=progress,
                            backend=lambda disk: backend(rootfs.path, disk, rootfs.digest,
                                                         shown=NotesOnly(progress)))
    progress.detail(f"dependency cache {deps.state}" + (f" {deps.key}" if deps.key else "")
                    + (f": {deps.reason}" if deps.reason else ""))
    # held (shared) until the VM is done with it: no prune takes it in between
    git_before = git_commit(tree) if request.attest is not None else ""  # before the copy
    with attached(deps, deadline) as deps, staging_area() as staging:
        key = scratch_key(tree, image.manifest_digest, settings.lint.features,
                          deps.key if deps.image is not None else None)
        with scratch_disk(settings, key, deadline) as scratch:             # 6
            progress.detail(f"scratch disk {scratch.disk}"
                            + (" (kept: --keep-cache)" if settings.lint.keep_cache else " (used once)"))
            job = run_job(backend(rootfs.path, scratch.disk, rootfs.digest, dep_cache=deps.image),
                          steps, grant, deadline, staging, scratch.book)
            progress.detail(template_detail(job, vm.template))
            scratch.settle(job)  # a kept cache is trusted next time only if this completed
        ended = datetime.now(UTC)
        progress.stage(REPORT)
        report_left_out(job)
        report = build_report(job, steps, deadline, tree, resolved, reference, image,
                              started, ended, deps.for_report())
        facts = None if request.attest is None else gather(  # the staged copy exists until here
            job, tree, settings, request_parameters(request.path, request.flags, request.formats,
                                                    settings), git_before)
        if stream is not None and request.message_format is not None:
            stream.text, stream.dropped = cargo_stream(job, tree, request.message_format, registry, git)
        if inspect is not None:
            inspect(job, tree)
    # lazy: once the report is made, as the one note it adds (image/toolchain_file.py)
    from roteiro_py.lint.toolchain_pin import report_toolchain_pin

    report_toolchain_pin(tree, report.toolchain)  # the tree pins another toolchain: one note
    return report, settings, facts


def template_detail(job: JobOutcome, template: bool) -> str:
    """How the lint's VM started, as -v says it (vm/qemu/template.py)."""
    if job.template is None:
        return "the VM booted cold" + ("" if template else " ([vm] template = false)")
    built = (f", built by this run in {job.template_built_seconds:.1f} s"
             if job.template_built_seconds else "")
    return f"the VM was restored from template {job.template}{built}"


def run_lint_command(request: LintRequest) -> int:
    require_supported()  # before any file is looked at: no VM can run on this host at all
    plan = request.outputs
    check_outputs(plan)                                                    # 0: cheapest
    key = check_attest(request.attest, request.attest_key, plan.targets)
    # 0: a wrong file costs ms; a diff's files are looked for in the repository (no link followed)
    against = load_against(request.baseline, request.diff,
                           root=repo_root_of(request.path) if request.diff is not None else None)
    progress = for_stderr(verbose=request.verbose)
    stopped = True
    stream = CargoStream()
    summary = None
    try:
        facts: Facts | None = None
        wanted = stream if request.message_format is not None else None
        if request.fix is not None:
            # lazy: the edit engine and dulwich load for --fix only
            from roteiro_py.lint.fix import run_fix
            report, settings, summary = run_fix(
                request.path, request.fix, lambda inspect: lint(request, progress, inspect=inspect))
        elif request.attest is not None:
            report, settings, facts = lint_attested(request, progress, wanted)
        else:  # `stream` only when asked for: lint()'s stand-ins in the tests take the two
            report, settings = lint(request, progress, wanted) if wanted else lint(request, progress)
        report = compare(report, against)  # known / new, in the diff or not: marked, never dropped
        # rich judges the console (report/human.py screen_for): a pty reporting 0 columns
        # once made the report vanish under our own os.get_terminal_size()
        rendered = render_all(report, plan.resolved(settings.lint.format), category=plan.category,
                              color=settings.lint.color)
        stopped = False
    finally:
        # Before the report, a refusal, "interrupted" or a traceback: no spinner is left
        # drawing over them, and the terminal gets its cursor back; the stage a refusal
        # ended is marked stopped, never left reading as done.
        progress.finish(stopped=stopped)
    if summary is not None and request.fix is not None:
        sys.stderr.write(summary.line(request.fix.mode))
        if request.fix.mode == "patch":  # the diff is stdout's; the report goes to files only
            rendered = [(target, text) for target, text in rendered if target.path is not None]
            # lazy: lint/fix.py (the edit engine, dulwich) loads for --fix only, as run_fix above
            from roteiro_py.lint.fix import print_patch
            print_patch(summary.patch)
    try:
        deliver(rendered)
        if request.attest is not None and facts is not None:
            write_attestation(report, facts, rendered, request.attest, key)
        if request.message_format is not None:
            if stream.dropped:
                sys.stderr.write(f"pylint-sandbox: left out of cargo's stream: {stream.dropped} line(s) "
                                 "from the guest (not cargo's shape, past a bound, or with no host "
                                 "path where cargo always writes one: SANDBOXED_LINTING.md)\n")
            sys.stdout.write(stream.text)
    finally:
        skipped = append_step_summary(report)
        if skipped:
            sys.stderr.write(skipped)
    return exit_code(report, settings.lint.fail_on)
