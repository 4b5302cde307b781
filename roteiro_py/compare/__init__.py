"""What a run's findings are judged against: a baseline report and the change's diff.

Adopting a linter on a repository that already has warnings needs two things a plain run
cannot give (docs/ADOPTING.md): the warnings already there must not fail every build
(`--baseline REPORT.json`), and a pull request should answer for the lines it adds
(`--diff FILE`). This module reads both (before the lint starts, so a wrong file costs
milliseconds, not a VM run) and marks each finding of a report:

- `baseline`: "known" when the baseline has a finding with the same fingerprint
  (report/fingerprint.py: stable under line shifts; a file the diff renames is looked up
  under its new name), "new" otherwise;
- `in_diff`: whether its primary span touches a line the diff adds (compare/diff.py).

A finding gates the run (`Finding.gating`) when it is not known and not outside the
diff; lint/judgement.py's `exit_code` counts only those. Nothing is dropped: every
finding stays in the report, marked, and the renderers decide what to show.

A diff that parses can still be of another directory: `git diff --relative` (or
diff.relative) in a subdirectory names paths relative to it, which no finding's path
(relative to the repository root) is, so every finding would be outside the diff and the
run would pass. Given the repository root, `load_against` looks for the files the diff
adds lines to in it and refuses the diff when none is there (`check_diff_in_tree`).

Both files are outside input: the baseline may be committed in the tree under review and
the diff holds the branch's file names and code. Each is read through the one reader
(no link, no FIFO, bounded), the baseline validated by the report model (every string
sanitised again, every path checked), and a file that fails any of it is a usage error
(exit 2) naming it, never an internal error.
"""

from __future__ import annotations

import os
import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py.compare.diff import MAX_DIFF_BYTES, ChangedLines, DiffError, parse_diff
from roteiro_py.errors import BaselineUnusable, DiffHidesLines, DiffUnusable
from roteiro_py.untrusted import FileRefused, read_bounded

if TYPE_CHECKING:
    from roteiro_py.report.model import Report

#: The largest baseline read: a report of MAX_FINDINGS (10,000) findings is ~10 MiB as
#: cargo phrases them; this leaves room for long messages and related spans.
MAX_BASELINE_BYTES = 64 * 1024 * 1024
#: lstat calls spent looking for a diff's files in the tree, each on a path of at most
#: diff.MAX_PATH_CHARS characters: a diff of this tree has its first file there (a few
#: calls); one of another directory misses at the first or second component of each.
MAX_TREE_LOOKUPS = 10_000

__all__ = ["MAX_BASELINE_BYTES", "MAX_TREE_LOOKUPS", "Against", "ChangedLines", "check_diff_in_tree", "compare",
           "load_against", "read_baseline", "read_diff"]


@dataclass(frozen=True)
class Against:
    """A baseline report and/or a diff, read and checked, with the names they were given by."""

    baseline: Report | None = None
    baseline_name: str | None = None
    changes: ChangedLines | None = None
    diff_name: str | None = None


def read_baseline(path: Path) -> Report:
    """The report in `path`, validated (report/load.py `load_report`, the one reader of a
    saved report), or BaselineUnusable naming the file and why."""
    # lazy: report/ is pydantic; the conductor imports compare/ at its top, so it would load
    # on the refusals before any VM (bench/cli_startup.py)
    from roteiro_py.report.load import load_report

    def unusable(path: Path, why: str, invalid: bool) -> Exception:
        return BaselineUnusable(path, f"it is not a JSON report of this tool ({why})" if invalid else why)

    return load_report(path, limit=MAX_BASELINE_BYTES, unusable=unusable)


def read_diff(path: Path) -> ChangedLines:
    """The lines the diff in `path` adds, or DiffUnusable naming the file, why and where
    (DiffHidesLines when what is wrong is that it hides a Rust file's lines)."""
    try:
        data = read_bounded(path, MAX_DIFF_BYTES)
    except FileNotFoundError:
        raise DiffUnusable(path, "it does not exist") from None
    except FileRefused as refused:
        raise DiffUnusable(path, refused.reason) from None
    try:
        return parse_diff(data)
    except DiffError as error:
        if error.hidden is not None:
            raise DiffHidesLines(path, error.hidden, error.line) from None
        raise DiffUnusable(path, error.problem, error.line) from None


def _tree_file(root: Path, path: str, allowed: int) -> tuple[bool | None, int]:
    """Whether `path` is a regular file reached from `root` through directories only, and
    the lstat calls that took; None when `allowed` calls did not decide it."""
    parts = path.split("/")
    current = root
    for index, part in enumerate(parts):
        if index == allowed:
            return None, index
        current = current / part
        try:
            mode = os.lstat(current).st_mode
        except (OSError, ValueError):  # missing, unreadable, or a name the OS refuses
            return False, index + 1
        if index == len(parts) - 1:
            return stat.S_ISREG(mode), index + 1
        if not stat.S_ISDIR(mode):  # a link, a file: nothing under it is the tree's
            return False, index + 1
    return False, len(parts)


def check_diff_in_tree(changes: ChangedLines, root: Path, diff: Path) -> None:
    """DiffUnusable when the diff adds lines to files and none of them is a regular file
    under `root` (the repository root, which findings' paths are relative to).

    The tree is hostile: each path is looked up one component at a time with lstat, and
    only directories lead on, so a link of the tree (to a directory or a file, inside it
    or out) is never followed and never counts; nothing is opened or read. At most
    MAX_TREE_LOOKUPS lookups: the files not reached by then are not looked for, and the
    refusal says how many were."""
    paths = [path for path, runs in changes.added.items() if runs.firsts]
    if not paths:
        return  # a change that only deletes or renames: nothing to look for
    lookups = decided = 0
    for path in paths:
        found, spent = _tree_file(root, path, MAX_TREE_LOOKUPS - lookups)
        lookups += spent
        if found:
            return
        if found is None:
            break
        decided += 1
    files = f"{len(paths)} file{'s' if len(paths) != 1 else ''}"
    which = f"the {files}" if decided == len(paths) else f"the first {decided} of the {files}"
    raise DiffUnusable(diff, f"none of {which} it adds lines to is a file in the repository at {root} "
                             f"(the first: {paths[0][:200]!r}); its paths must be relative to the repository "
                             "root: was it written with --relative or diff.relative in a subdirectory, or "
                             "of another repository?")


def load_against(baseline: Path | None, diff: Path | None, *, root: Path | None = None) -> Against | None:
    """Both files read and checked (None when neither was given): the step before a lint.
    With `root` (the repository's), the diff's files are looked for in it too."""
    if baseline is None and diff is None:
        return None
    known = read_baseline(baseline) if baseline is not None else None
    changes = read_diff(diff) if diff is not None else None
    if changes is not None and diff is not None and root is not None:
        check_diff_in_tree(changes, root, diff)
    return Against(baseline=known, baseline_name=baseline.name if baseline is not None else None,
                   changes=changes, diff_name=diff.name if diff is not None else None)


def compare(report: Report, against: Against | None) -> Report:
    """`report` with every finding marked against the baseline and the diff, its summary
    counting the marks, and what it was compared with stated (`Report.comparison`)."""
    if against is None:
        return report
    # lazy: report/ is pydantic (read_baseline says why)
    from roteiro_py.report.fingerprint import fingerprints
    from roteiro_py.report.model import Comparison, Summary

    changes = against.changes
    known: set[str] | None = None
    if against.baseline is not None:
        renamed = changes.renamed if changes is not None else {}
        known = set(fingerprints(against.baseline.findings, renamed=renamed))
    marked = []
    for finding, fingerprint in zip(report.findings, fingerprints(report.findings), strict=True):
        update: dict[str, object] = {}
        if known is not None:
            update["baseline"] = "known" if fingerprint in known else "new"
        if changes is not None and finding.path is not None and finding.line is not None:
            update["in_diff"] = changes.touches(finding.path, finding.line, finding.end_line or finding.line)
        marked.append(finding.model_copy(update=update))
    counted = Summary.of(marked, build_succeeded=report.summary.build_succeeded)
    summary = report.summary.model_copy(update={"known": counted.known, "outside_diff": counted.outside_diff})
    comparison = Comparison(
        baseline=against.baseline_name,
        baseline_findings=len(against.baseline.findings) if against.baseline is not None else 0,
        diff=against.diff_name, diff_files=changes.files if changes is not None else 0)
    return report.model_copy(update={"findings": marked, "summary": summary, "comparison": comparison})
