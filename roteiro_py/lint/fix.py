"""`lint clippy --fix`: the guest's machine-applicable suggestions written into the tree,
and nothing of the tree run on the host.

Guarantees:
- cargo fix's gate first, before any VM (`check_vcs`): a tree in no git work tree is
  refused unless --allow-no-vcs; uncommitted changes unless --allow-dirty (which, as in
  cargo 1.95, allows staged changes too) or, for changes only in the index,
  --allow-staged. The state is read as data (lint/vcs.py): no git runs. `--fix=patch`
  writes nothing and needs no gate.
- Targets as `cargo clippy --fix` takes them: the lint's own selection. cargo fix's
  manual says it implies `--all-targets`; `cargo clippy --fix` 1.95 does not (measured
  on examples/demo-workspace: the `assert_eq!` in its `#[cfg(test)]` module is left,
  and `cargo clippy --all-targets` still reports it), so neither does --fix here.
- Edits come only from the guest's JSON and are judged by clippy/fix.py against the
  bytes of the staged copy the guest linted (read here, after the job, from the copy
  the run still holds: the guest cannot write it). A file is written only when its
  host bytes are still those bytes (else FixTargetUnsafe: it changed since), reached
  from the workspace root one component at a time with O_NOFOLLOW (no link, no `..`,
  only regular files), and replaced by a temporary file renamed over it in the same
  directory, with its mode kept. Every file of a round is checked, then written aside,
  before the first is renamed over: a refusal or a failed write writes nothing.
- A target that does not build is not fixed: cargo fix applies nothing to a unit whose
  rustc fails (unless --broken-code, which is not offered); the other units are fixed.
- Edits that break the build are backed out, as cargo fix does: when a lint after the
  edits has a unit with an error the first lint had not, every file written is put back
  as it was (only where it still holds --fix's bytes: one changed since is left, named
  on stderr, and the others are still put back) and the tree is linted again for the
  report.
- Rounds as cargo's `rustfix_crate`: another lint runs only when a suggestion of this
  round could not be applied (it overlapped one that was) and some were applied, at most
  MAX_ROUNDS rounds (cargo's `CARGO_FIX_MAX_RETRIES` default, 4). One final lint makes
  the report of what remains (cargo's last rustc run shows it too). `--fix=patch` is
  one round: it cannot lint a tree it has not written.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import stat
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal

from roteiro_py.clippy.fix import (
    MAX_FILE_BYTES,
    FileFix,
    apply_round,
    machine_applicable,
    unified_diff,
    units_with_errors,
)
from roteiro_py.clippy.parse import PathLayout
from roteiro_py.errors import DirtyTreeForFix, FixTargetUnsafe, HostileSuggestion, NoVcsForFix
from roteiro_py.lint.preflight import locate
from roteiro_py.lint.vcs import git_state
from roteiro_py.untrusted import FileRefused, read_bounded, sanitise

if TYPE_CHECKING:
    from roteiro_py import config
    from roteiro_py.clippy.fix import Suggestions
    from roteiro_py.lint.tree import Tree
    from roteiro_py.report.model import Report
    from roteiro_py.vm.api import JobOutcome

#: cargo's own bound on fix rounds (src/cargo/ops/fix.rs: CARGO_FIX_MAX_RETRIES, default 4).
MAX_ROUNDS = 4

FixMode = Literal["apply", "patch"]


@dataclass(frozen=True)
class FixOptions:
    """`--fix[=patch]` and cargo's three --allow-* flags."""

    mode: FixMode = "apply"
    allow_dirty: bool = False
    allow_staged: bool = False
    allow_no_vcs: bool = False


def check_vcs(root: Path, options: FixOptions) -> None:
    """Refuse as `cargo fix` refuses (module docstring); `root` is the workspace."""
    if options.mode == "patch" or options.allow_no_vcs:
        return
    state = git_state(root)
    if state is None:
        raise NoVcsForFix(root)
    if options.allow_dirty:
        return
    dirty = sorted({*state.unstaged, *state.untracked})
    staged = [] if options.allow_staged else sorted(set(state.staged) - set(dirty))
    if dirty or staged:
        raise DirtyTreeForFix(state.root, dirty, staged)


@dataclass
class Seen:
    """What one lint's job left for --fix: its suggestions and the staged bytes they name."""

    suggestions: Suggestions
    originals: dict[str, bytes]
    #: A repository-relative path as a workspace-relative one (PathLayout.workspace_path).
    relative: Callable[[str], str]


def seen_by_guest(job: JobOutcome, tree: Tree) -> Seen:
    """The job's machine-applicable suggestions and, for each file they name, the bytes of
    the staged copy the guest linted (clippy/fix.py judges them against these)."""

    layout = PathLayout(workspace=tree.layout_workspace,
                        guest_root=PurePosixPath(tree.repo_root.as_posix()))
    stdout = job.steps[2].stdout if len(job.steps) > 2 else b""
    found = machine_applicable(stdout, layout)
    staged = next((share.copy for share in job.staged if share.host == tree.workspace), None)
    originals: dict[str, bytes] = {}
    for path in {suggestion.path for suggestion in found.found}:
        if staged is None:
            raise HostileSuggestion(path, "the run kept no staged copy to check it against")
        try:
            with _walk(staged, layout.workspace_path(path)) as (parent, name):
                originals[path] = read_bounded(name, MAX_FILE_BYTES, dir_fd=parent)
        except (FileRefused, OSError) as error:
            raise HostileSuggestion(path, f"the guest saw no such file ({error})") from None
    return Seen(suggestions=found, originals=originals, relative=layout.workspace_path)


@contextlib.contextmanager
def _walk(root: Path, relative: str) -> Iterator[tuple[int, str]]:
    """(fd of the directory holding `relative`, its last name), reached from `root` one
    component at a time, never through a link; the fd is closed on exit."""
    parts = relative.split("/")
    if not relative or any(part in ("", ".", "..") for part in parts):
        raise FixTargetUnsafe(relative, "its path is not a plain path inside the workspace")
    flags = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(root, flags)
    try:
        for part in parts[:-1]:
            try:
                child = os.open(part, flags, dir_fd=fd)
            except OSError as error:
                raise FixTargetUnsafe(relative, f"{part} is not a directory reached without a "
                                      f"link ({error.strerror})") from None
            os.close(fd)
            fd = child
        yield fd, parts[-1]
    finally:
        os.close(fd)


@dataclass
class _Target:
    fix: FileFix
    parent: int
    name: str
    mode: int


def write_round(workspace: Path, fixes: list[FileFix], relative: Callable[[str], str]) -> int:
    """Write every changed file of the round, or none: each is checked (its host bytes are
    still the staged bytes, it is a regular file reached without a link) before the
    first is written. Returns how many files were written."""

    changed = [fix for fix in fixes if fix.fixed != fix.original]
    with contextlib.ExitStack() as stack:
        targets: list[_Target] = []
        for fix in changed:
            parent, name = stack.enter_context(_walk(workspace, relative(fix.path)))
            try:
                now = read_bounded(name, MAX_FILE_BYTES, dir_fd=parent)
                mode = os.stat(name, dir_fd=parent, follow_symlinks=False).st_mode
            except (FileRefused, OSError) as error:
                raise FixTargetUnsafe(fix.path, str(error)) from None
            if now != fix.original:
                raise FixTargetUnsafe(fix.path, "it changed since the lint staged it")
            targets.append(_Target(fix, parent, name, stat.S_IMODE(mode)))
        aside: list[tuple[_Target, str]] = []
        try:  # every file written aside first: a failed write leaves the whole round unwritten
            for target in targets:
                aside.append((target, _write_aside(target)))
        except OSError as error:
            for written, name in aside:
                with contextlib.suppress(OSError):
                    os.unlink(name, dir_fd=written.parent)
            raise FixTargetUnsafe(targets[len(aside)].fix.path, str(error)) from None
        for target, name in aside:
            os.rename(name, target.name, src_dir_fd=target.parent, dst_dir_fd=target.parent)
    return len(changed)


def _write_aside(target: _Target) -> str:
    """The fixed bytes in a new file beside the target (same directory), returned by name:
    short and random, so neither a name near NAME_MAX nor one the tree planted stops it."""
    for _ in range(16):
        name = f".rfix-{secrets.token_hex(8)}.tmp"
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                         target.mode, dir_fd=target.parent)
        except FileExistsError:
            continue
        break
    else:
        raise FileExistsError(f"no free temporary name beside {target.name}")
    try:
        os.fchmod(fd, target.mode)
        view = memoryview(target.fix.fixed)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        os.unlink(name, dir_fd=target.parent)
        raise
    os.close(fd)
    return name


@dataclass
class FixSummary:
    """What --fix did: rounds linted, suggestions applied, files written, and what was left."""

    rounds: int = 0
    applied: int = 0
    files: set[str] = field(default_factory=set)
    conflicts: int = 0
    skipped: int = 0
    broken: int = 0
    backed_out: bool = False
    #: Files a back-out left as they are: changed since --fix wrote them (never overwritten).
    not_restored: list[str] = field(default_factory=list)
    patch: str = ""

    def line(self, mode: FixMode) -> str:
        if self.backed_out:
            left = ""
            if self.not_restored:
                left = ("; left as they are, changed since --fix wrote them (not restored): "
                        + ", ".join(sanitise(path, limit=300) for path in self.not_restored))
            return (f"pylint-sandbox: --fix backed out its {self.applied} suggestion(s) in "
                    f"{len(self.files)} file(s): the fixed code did not build where the original "
                    f"did (as cargo fix); the report is of the tree as it was{left}\n")
        did = "would apply" if mode == "patch" else "applied"
        text = (f"pylint-sandbox: --fix {did} {self.applied} suggestion(s) to {len(self.files)} "
                f"file(s) in {self.rounds} round(s)")
        if self.conflicts:
            text += f"; {self.conflicts} overlapping one(s) left for a next run"
        if self.broken:
            text += (f"; {self.broken} not applied to a target that does not build "
                     "(as cargo fix)")
        if self.skipped:
            text += f"; {self.skipped} skipped as cargo skips them (outside the workspace or in two files)"
        return text + "\n"


def print_patch(patch: str) -> None:
    """--fix=patch's diff on stdout: to a file or a pipe byte for byte (patch(1) applies
    it); to a terminal with what a terminal would act on escaped: the text is the tree's
    and the guest's. A byte of the file that is not UTF-8 (held as a surrogate) is written
    as that byte: the text layer's strict encoder would raise on it."""
    if sys.stdout.isatty():
        sys.stdout.write(sanitise(patch, keep_newlines=True, keep_tabs=True, limit=len(patch) + 1))
        sys.stdout.flush()
        return
    sys.stdout.flush()
    sys.stdout.buffer.write(patch.encode("utf-8", "surrogateescape"))
    sys.stdout.buffer.flush()


def one_round(seen: Seen, summary: FixSummary) -> list[FileFix]:
    """Judge one lint's suggestions (clippy/fix.py); empty when there is nothing to do."""
    summary.rounds += 1
    summary.skipped += seen.suggestions.outside + seen.suggestions.multi_file
    summary.broken += seen.suggestions.broken
    fixes = apply_round(seen.suggestions.found, seen.originals)
    summary.applied += sum(fix.applied for fix in fixes)
    summary.conflicts = sum(fix.conflicts for fix in fixes)
    summary.files.update(fix.path for fix in fixes if fix.fixed != fix.original)
    return fixes


def go_again(fixes: list[FileFix], summary: FixSummary) -> bool:
    """cargo's rule: another round only when a suggestion failed and another was applied."""
    progress = any(fix.conflicts and fix.applied for fix in fixes)
    return progress and summary.rounds < MAX_ROUNDS


#: One lint as the conductor runs it (lint/__init__.py `lint`), with its `inspect` hook.
Linter = Callable[[Callable[["JobOutcome", "Tree"], None] | None], "tuple[Report, config.Settings]"]


def run_fix(path: Path, options: FixOptions, lint: Linter) -> tuple[Report, config.Settings, FixSummary]:
    """Lint, judge and write rounds as the module docstring says; the report returned is
    the last lint's: what remains after the edits (or, with --fix=patch, before them)."""
    check_vcs(locate(path).workspace, options)  # before any VM, as cargo fix
    summary = FixSummary()
    seen: list[tuple[Seen, Path]] = []
    written = Written()

    def keep(job: JobOutcome, tree: Tree) -> None:
        seen.append((seen_by_guest(job, tree), tree.workspace))

    while True:
        seen.clear()
        report, settings = lint(keep)
        if not seen:
            return report, settings, summary
        guest, workspace = seen[0]
        if written.broke(guest.suggestions.broken_units):
            return (*written.back_out(lint, summary), summary)
        fixes = one_round(guest, summary)
        if options.mode == "patch":
            summary.patch = unified_diff(fixes)
            return report, settings, summary
        if write_round(workspace, fixes, guest.relative) == 0:
            return report, settings, summary
        written.record(workspace, fixes, guest.relative)
        if not go_again(fixes, summary):
            break
    errors: list[frozenset[tuple[str, str, str]]] = []
    report, settings = lint(lambda job, _: errors.append(
        units_with_errors(job.steps[2].stdout if len(job.steps) > 2 else b"")))
    if errors and written.broke(errors[0]):
        return (*written.back_out(lint, summary), summary)
    return report, settings, summary


@dataclass
class Written:
    """The files --fix wrote, with their bytes before its first edit and after its last,
    and the units that did not build before it: cargo fix backs every edit out when the
    fixed code fails to build where the original did not (`fix_maybe_exec_rustc`)."""

    workspace: Path | None = None
    files: dict[str, tuple[bytes, bytes, Callable[[str], str]]] = field(default_factory=dict)
    broken_before: frozenset[tuple[str, str, str]] | None = None

    def broke(self, broken_now: frozenset[tuple[str, str, str]]) -> bool:
        """Whether a lint after the edits has a unit with an error the first lint had not."""
        if self.broken_before is None:
            self.broken_before = broken_now
            return False
        return bool(self.files) and not broken_now <= self.broken_before

    def record(self, workspace: Path, fixes: list[FileFix], relative: Callable[[str], str]) -> None:
        self.workspace = workspace
        for fix in fixes:
            if fix.fixed != fix.original:
                first = self.files.get(fix.path, (fix.original, b"", relative))[0]
                self.files[fix.path] = (first, fix.fixed, relative)

    def back_out(self, lint: Linter, summary: FixSummary) -> tuple[Report, config.Settings]:
        """Write every file back as it was (only where it still holds --fix's bytes), then
        lint the tree as it was for the report."""
        assert self.workspace is not None
        for path, (original, fixed, relative) in self.files.items():
            try:  # one file the user changed since must not keep the others fixed
                write_round(self.workspace, [FileFix(path, fixed, original)], relative)
            except FixTargetUnsafe:
                summary.not_restored.append(path)
        summary.backed_out = True
        return lint(None)
