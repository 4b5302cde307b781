"""From what came back from the guest to a verdict: a report, or the refusal that says why
there is none. Every status and stream here came from the guest and is untrusted: a
step without a status is never a clean run, a signal status is named, output past the
cap is refused, so is output that did not all arrive (errors.OutputCut), and the exit
code follows the findings and `--fail-on`.
"""

from __future__ import annotations

import contextlib
import shlex
import signal
from datetime import datetime
from pathlib import PurePosixPath
from typing import TYPE_CHECKING

from roteiro_py import __version__, config
from roteiro_py.errors import (
    EXIT_FINDINGS,
    EXIT_OK,
    DeadlineExceeded,
    OutputCut,
    OutputTooLarge,
    ProbeFailed,
    VmFailed,
)
from roteiro_py.lint.preflight import image_chosen_in
from roteiro_py.reference import ImageReference

if TYPE_CHECKING:
    from pathlib import Path

    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.lint.tree import Tree
    from roteiro_py.process.sandbox import Command
    from roteiro_py.report.model import Report
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm.api import JobOutcome, VmOutcome


_LEVEL_RANK = {"error": 3, "warning": 2, "note": 1, "help": 0}


_FAIL_ON_RANK = {"error": 3, "warning": 2}


def _signal_of(status: int) -> str | None:
    """The signal a guest shell status of 128+N means, when N is a real signal."""
    if 128 < status <= 128 + 64:
        with contextlib.suppress(ValueError):
            return signal.Signals(status - 128).name
    return None


def shown(step: Command) -> str:
    """A step as a refusal names it: the toolchain program and its arguments, without the
    pinning wrapper (clippy/command.py) every step runs through."""
    # lazy: lint/__init__.py imports this stage at its top, so clippy/ and report/
    # (pydantic) would load on the refusals before any VM (bench/cli_startup.py)
    from roteiro_py.clippy.command import unpinned

    return shlex.join(unpinned(step.argv))


def judge_job(job: JobOutcome, steps: list[Command], *, reference: str) -> None:
    """Refuse when the VM did not get as far as a verdict on every step that ran, or when
    a step's output did not all arrive (its status would be judged over what was lost);
    `reference` is the image whose toolchain a probe refusal names."""
    for index, (outcome, step) in enumerate(zip(job.steps, steps, strict=False)):
        if outcome.timed_out and index < len(steps) - 1:
            raise ProbeFailed(reference, f"`{shown(step)}` did not finish within {step.timeout:g} s",
                              "the toolchain probe has a fixed deadline; `--timeout` sets clippy's")
        if outcome.timed_out:
            raise DeadlineExceeded(shown(step), step.timeout)
        if outcome.lost_streams:
            stream, why = outcome.lost_streams[0]
            raise OutputCut(stream, index + 1, shown(step), why)
    if not job.completed and job.failure and "deadline" in job.failure:
        step = steps[len(job.steps) - 1] if job.steps else steps[0]
        raise DeadlineExceeded(shown(step), step.timeout)


def build_report(job: JobOutcome, steps: list[Command], deadline: Deadline, tree: Tree,
                 resolved: config.Resolved, reference: ImageReference, image: ResolvedImage,
                 started: datetime, ended: datetime,
                 dependency_cache: dict[str, object] | None = None) -> Report:
    """Judge the job and make its report; snippets come from the staged workspace copy."""
    # lazy: clippy/ and report/ (pydantic), as in shown() above
    from roteiro_py.clippy.classify import ClippyRun, classify
    from roteiro_py.clippy.command import unpinned
    from roteiro_py.clippy.parse import PathLayout
    from roteiro_py.clippy.toolchain import ProbeOutput, toolchain_from_probe
    from roteiro_py.report.model import DependencyCache, Provenance, Report, ToolInfo
    from roteiro_py.report.model import Isolation as ReportIsolation

    settings = resolved.settings
    vm = settings.vm
    isolation = job.isolation
    judge_job(job, steps, reference=str(reference))
    if not job.steps:
        raise VmFailed(job.failure or "the guest ran no step", job.console.decode("utf-8", "replace"))
    missing = ProbeOutput(None, b"", b"")
    probes = [ProbeOutput(*_probe(outcome, str(reference))) for outcome in job.steps[:2]]
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
                  truncated=run.truncated, truncated_stream=_cut(run),
                  oom_kills=run.oom_kills),
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
        findings=result.findings, summary=result.summary(),
        dependency_cache=None if dependency_cache is None else DependencyCache.model_validate(dependency_cache),
        build_script_warnings=list(result.build_script_warnings))
    return report


def cargo_stream(job: JobOutcome, tree: Tree, message_format: str, registry: Path | None,
                 git: Path | None) -> tuple[str, int]:
    """`--message-format`: cargo's stream as clippy wrote it in the guest, every path a host
    path or absent (clippy/stream.py), as printed on stdout, and how many records of the
    guest's were dropped. Called once the report is made: the clippy step ran and its
    output all arrived (judge_job, build_report)."""
    # lazy: clippy/ and the VM's places, as in shown() above
    from roteiro_py.clippy.stream import StreamPaths, map_stream, render_stream, resolves_inside
    from roteiro_py.vm.mounts import GUEST_CARGO_HOME

    sources = tuple((f"{GUEST_CARGO_HOME}/{name}", view.as_posix())
                    for name, view in (("registry", registry), ("git", git)) if view is not None)
    paths = StreamPaths(PurePosixPath(tree.workspace.as_posix()), sources,
                        resolves_inside=resolves_inside(tree.workspace))
    stream = map_stream(job.steps[2].stdout, paths, ansi=message_format == "json-diagnostic-rendered-ansi")
    return render_stream(stream, message_format), stream.dropped


def _probe(outcome: VmOutcome, reference: str) -> tuple[int | None, bytes, bytes]:
    if outcome.exit is None:
        raise ProbeFailed(reference, f"`{shown(outcome.command)}` did not finish",
                          outcome.failure or outcome.diagnostics())
    return outcome.exit, outcome.stdout, outcome.stderr


def _cut(outcome: VmOutcome) -> str:
    """The stream(s) of a step that passed the output cap, as OutputTooLarge names them."""
    return " and ".join(outcome.truncated_streams) or "output"


def _status(outcome: VmOutcome, job: JobOutcome, limit_bytes: int) -> tuple[int | None, str | None]:
    """The clippy step's status, or the refusal for a step the guest never reported on.

    A step without a status was cut short: its output passed the limit (the VM is then
    stopped) or the VM died (a guest kernel panic, qemu killed). Neither is a verdict.
    """
    if outcome.exit is None:
        if outcome.truncated:
            raise OutputTooLarge(_cut(outcome), limit_bytes, shown(outcome.command))
        raise VmFailed(outcome.failure or job.failure or "the guest reported no status for clippy",
                       job.console.decode("utf-8", "replace"))
    killed = _signal_of(outcome.exit)
    return (None, killed) if killed else (outcome.exit, None)


def exit_code(report: Report, fail_on: str) -> int:
    """The lint's exit status, from the report alone (README.md, "Exit codes"):

    1 when a finding that gates the run (`Finding.gating`: not known from `--baseline`,
    and on a line `--diff` adds when a diff was given) is at or above `fail_on`, or when
    the build failed (a failed build is never clean, whatever the baseline or the diff
    say: its errors may lie outside the diff, or be known, and the tree still does not
    build), or when the run was compared with a baseline or a diff and findings past the
    report's cap went uncompared; 0 otherwise, and always 0 with `fail_on == "never"`.
    """
    if fail_on == "never":
        return EXIT_OK
    threshold = _FAIL_ON_RANK[fail_on]
    worst = max((_LEVEL_RANK.get(f.level, 0) for f in report.findings if f.gating), default=-1)
    if not report.summary.build_succeeded:
        worst = max(worst, _LEVEL_RANK["error"])
    if report.comparison is not None and report.summary.dropped_findings:
        # Findings past the report's cap were counted, never compared: any of them may be
        # new, and a pull request could place its own last (review). Not judged is not clean.
        return EXIT_FINDINGS
    return EXIT_FINDINGS if worst >= threshold else EXIT_OK
