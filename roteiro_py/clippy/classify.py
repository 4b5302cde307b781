"""What a finished `cargo clippy` run in the guest means: a report, or a refusal.

The one rule behind every branch: a run that did not lint the tree is never reported as
a clean tree. So the stream is trusted only when cargo's exit status, its closing
`build-finished` message and its diagnostics agree:

- status 0 and build-finished success: the report (warnings or nothing).
- status 101 and build-finished failure with at least one error-level finding in the
  repository (a compile error, a deny-level lint): the report, build_succeeded=False.
  A compile error in the user's code is a finding, not a failure of the tool.
- status 101 otherwise: cargo's stderr names why, and each reason is its own refusal:
  a cold package cache (ColdCache), a lockfile --locked would have to write
  (LockfileWouldBeWritten), a package or feature selection cargo refused before
  building anything (CargoRefusedSelection, a usage error), a compiler killed by a signal (KilledBySignal: called an
  out-of-memory kill only when the guest's kernel counted one, `oom_kills`), or
  anything else that produced no explaining diagnostic, typically a build script
  failing for a missing C library (BuildProducedNothing).
- a status outside EXPECTED_STATUSES, or a status and a build-finished that disagree:
  UnexpectedStatus.
- output cut at the limit: OutputTooLarge, before anything is parsed, because a
  truncated stream could have lost its errors and its build-finished.

The stderr wordings matched are those of real cargo 1.95, captured in
tests/data/cargo-stderr/ and reproduced live by
tests/unit/clippy/test_classify.py, plus the older lockfile wording ("needs to be
updated but --locked was passed").
"""

from __future__ import annotations

import re
import shlex
import signal as signals
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from roteiro_py.clippy.command import EXPECTED_STATUSES
from roteiro_py.clippy.parse import (
    Deadline,
    ParsedStream,
    PathLayout,
    build_script_warnings,
    parse_messages,
)
from roteiro_py.errors import (
    BuildProducedNothing,
    CargoRefusedSelection,
    ColdCache,
    KilledBySignal,
    LockfileWouldBeWritten,
    OutputTooLarge,
    TargetNotInImage,
    UnexpectedStatus,
)
from roteiro_py.report.model import BuildScriptWarning, Finding, Summary

_LOCKFILE = (
    re.compile(r"cannot (create|update) the lock file .* because --locked was passed"),
    re.compile(r"the lock file .* needs to be updated but --locked was passed"),
    re.compile(r"failed to write .*Cargo\.lock"),
)
_READ_ONLY = re.compile(r"Read-only file system|os error 30")
_COLD = (
    (re.compile(r"failed to unpack package `(?P<package>[^`\s]+)"), False),
    (re.compile(r"failed to download `(?P<package>[^`\s]+)"), True),
    (re.compile(r"no matching package named `(?P<package>[^`\s]+)` found"), True),
    (re.compile(r"failed to (?:load source for dependency|get) `(?P<package>[^`\s]+)`"), True),
    # a manifest's `registry = "<name>"` that neither the tree's .cargo/config.toml nor the
    # host's cargo configuration (given to the guest by cargo/vendor.py) defines
    (re.compile(r"registry index was not found in any configuration: `(?P<registry>[^`\s]+)`"), False),
)
_OFFLINE = re.compile(r"but --offline was specified|you're using offline mode|--offline")
_RUSTC_SIGNAL = re.compile(r"\(signal: \d+, (?P<name>SIG[A-Z0-9]+)")
#: cargo 1.95's refusals of a package or feature selection (tests/unit/clippy/
#: test_classify.py reproduces each live), each a whole line of bounded length.
_SELECTION = (
    re.compile(r"error: package ID specification `[^`]{1,300}` did not match any packages"),
    re.compile(r"error: package pattern\(s\) `[^`]{1,300}` not found in workspace `[^`]{1,600}`"),
    re.compile(r"error: none of the selected packages contains this feature: \S{1,300}"),
    re.compile(r"error: the package '[^']{1,300}' does not contain this feature: \S{1,300}"),
    re.compile(r"error: package `[^`]{1,600}` does not have feature `[^`]{1,300}`"),
    re.compile(r"error: feature `[^`]{1,300}` is not allowed to use explicit `dep:` syntax"),
)
#: Lines of stderr read for the first `error:` line, when judging a selection refusal.
SELECTION_LINES = 50
#: A line of cargo's that says it started building: a selection refusal has none before it.
_BUILT = re.compile(r"^\s*(Compiling|Checking|Fresh|Running)\b")
#: cargo's progress lines; a stderr of only these says nothing about why a run died.
_PROGRESS = re.compile(r"^\s*(Checking|Compiling|Finished|Locking|Blocking|Fresh|Running)\b")


@dataclass(frozen=True)
class ClippyRun:
    """The clippy step's outcome as the process layer returned it.

    status:      the exit status, or None when killed by `signal_name`.
    truncated:   True when an output stream reached `limit_bytes` and was cut;
                 `truncated_stream` names it ("stdout", "stderr", or "output": unknown).
    """

    command: Sequence[str]
    status: int | None
    stdout: bytes
    stderr: str
    memory_mib: int
    limit_bytes: int
    signal_name: str | None = None
    truncated: bool = False
    truncated_stream: str = "output"
    #: Processes the guest kernel's OOM killer killed during the run (VmOutcome.oom_kills).
    oom_kills: int = 0


@dataclass(frozen=True)
class LintResult:
    """Findings a report can be built from (the run was judged complete)."""

    findings: list[Finding]
    build_succeeded: bool
    outside_repository: int
    ignored_lines: int
    dropped_findings: int = 0
    dependencies_fresh: int = 0
    dependencies_compiled: int = 0
    #: cargo's `warning: <package>@<version>: ...` lines (parse.build_script_warnings).
    build_script_warnings: tuple[BuildScriptWarning, ...] = ()
    build_script_warnings_seen: int = 0

    def summary(self) -> Summary:
        return Summary.of(self.findings, build_succeeded=self.build_succeeded,
                          outside_repository=self.outside_repository,
                          ignored_lines=self.ignored_lines,
                          dropped_findings=self.dropped_findings,
                          dependencies_fresh=self.dependencies_fresh,
                          dependencies_compiled=self.dependencies_compiled,
                          build_script_warnings=self.build_script_warnings_seen)


def _first(lines: list[str], pattern: re.Pattern[str]) -> str | None:
    return next((line for line in lines if pattern.search(line)), None)


def _refuse_from_stderr(stderr: str, tree: Path) -> None:
    """Raise the refusal cargo's stderr names, if it names one we know."""
    lines = stderr.splitlines()
    for pattern in _LOCKFILE:
        line = _first(lines, pattern)
        if line is not None:
            if pattern is _LOCKFILE[2] and not _READ_ONLY.search(stderr):
                continue
            raise LockfileWouldBeWritten(tree, line.removeprefix("error: "))
    for pattern, needs_offline in _COLD:
        line = _first(lines, pattern)
        if line is None or (needs_offline and not _OFFLINE.search(stderr)):
            continue
        match = pattern.search(line)
        package = match.groupdict().get("package") if match else None
        offline = _first(lines, _OFFLINE)
        said = line.removeprefix("error: ").strip()
        if offline is not None and offline.strip() not in said:
            said = f"{said}: {offline.strip()}"
        raise ColdCache(tree, package, said)


def _refuse_selection(stderr: str, tree: Path) -> None:
    """CargoRefusedSelection when cargo refused the package or feature selection before
    building anything: its first `error:` line (within SELECTION_LINES) is one of
    _SELECTION's, and no line before it says a package was built. The order matters: a
    build script's output comes after `Compiling`, so a tree cannot forge this (it could
    only turn its own failed build into a usage error, never into a report)."""
    for line in stderr.splitlines()[:SELECTION_LINES]:
        if _BUILT.match(line):
            return
        if line.startswith("error:"):
            if any(pattern.fullmatch(line.rstrip()) for pattern in _SELECTION):
                raise CargoRefusedSelection(tree, line.removeprefix("error: "))
            return


def _signal_name(run: ClippyRun) -> str:
    if run.signal_name:
        return run.signal_name
    return "a signal"


def _stderr_with(stream: ParsedStream, stderr: str) -> str:
    extra = [f"error outside the repository: {message}" for message in stream.dropped_errors]
    return "\n".join([stderr.rstrip(), *extra]) if extra else stderr


def classify(
    run: ClippyRun,
    *,
    tree: Path,
    image_reference: str,
    layout: PathLayout,
    staged: Path | None = None,
    deadline: Deadline | None = None,
) -> LintResult:
    """Judge `run` and parse its findings; raise the refusal when it did not lint the tree.

    tree:      the host path the user asked to lint (named in refusals).
    staged:    the staged copy of the workspace the guest linted, for snippets (None:
               no snippets); never the host tree (report/snippet.py says why).
    deadline:  the run's deadline; parsing past it is DeadlineExceeded.
    """
    command = shlex.join(run.command)
    if run.truncated:
        raise OutputTooLarge(run.truncated_stream, run.limit_bytes, command)
    has_errors_on_stderr = any(
        line.strip() and not _PROGRESS.match(line) for line in run.stderr.splitlines()
    )
    if run.status is None:
        if not has_errors_on_stderr:
            raise KilledBySignal(_signal_name(run), run.memory_mib, command, run.oom_kills)
        number = getattr(signals, run.signal_name or "", None)
        status = 128 + int(number) if number is not None else -1
        raise UnexpectedStatus(command, status, EXPECTED_STATUSES, run.stderr)

    stream = parse_messages(run.stdout, layout, staged=staged, deadline=deadline)
    errors = [finding for finding in stream.findings if finding.level == "error"]
    if stream.missing_target is not None and run.status != 0:
        raise TargetNotInImage(stream.missing_target, image_reference)
    if run.status == 101 and not stream.findings and stream.build_success is None:
        _refuse_selection(run.stderr, tree)
    if run.status != 0:
        _refuse_from_stderr(run.stderr, tree)
    if run.status not in EXPECTED_STATUSES:
        raise UnexpectedStatus(command, run.status, EXPECTED_STATUSES, run.stderr)

    if run.status == 0:
        if stream.build_success is True:
            return _result(stream, run.stderr, succeeded=True)
        if stream.build_success is None:
            raise BuildProducedNothing(image_reference, run.stderr)
        raise UnexpectedStatus(command, run.status, EXPECTED_STATUSES,
                               "cargo exited 0 but reported a failed build\n" + run.stderr)

    killed = _RUSTC_SIGNAL.search(run.stderr)
    if killed is not None and not errors:
        raise KilledBySignal(killed["name"], run.memory_mib, command, run.oom_kills)
    if stream.build_success is True:
        raise UnexpectedStatus(command, run.status, EXPECTED_STATUSES,
                               "cargo reported a finished build but exited "
                               f"{run.status}\n" + run.stderr)
    if not errors:
        raise BuildProducedNothing(image_reference, _stderr_with(stream, run.stderr))
    return _result(stream, run.stderr, succeeded=False)


def _result(stream: ParsedStream, stderr: str, *, succeeded: bool) -> LintResult:
    warnings, seen = build_script_warnings(stderr)
    return LintResult(findings=stream.findings, build_succeeded=succeeded,
                      build_script_warnings=tuple(warnings), build_script_warnings_seen=seen,
                      outside_repository=stream.outside_repository,
                      ignored_lines=stream.ignored_lines,
                      dropped_findings=stream.dropped_findings,
                      dependencies_fresh=stream.dependencies_fresh,
                      dependencies_compiled=stream.dependencies_compiled)
