"""`pylint-sandbox render REPORT.json`: a saved JSON report in any format, with no VM.

A CI job lints once, keeps `--format json=report.json` as an artifact, and a later step
(or another job) renders SARIF, annotations, GitLab's report or a summary from it:
`render` writes exactly what the lint would have written from the same report (a test
compares them byte for byte), through the same door (lint/output.py), with the same
exit-status rule (`--fail-on`, lint/judgement.py). It boots nothing, reads no image and
runs nothing: it reads one file.

That file is untrusted: an artifact anyone with write access to the job can replace, or
a file of the tree. `load_report` reads it through the one reader (untrusted.py
`read_bounded`: no link, only a regular file, at most MAX_REPORT_BYTES) and validates it
with the report model, which cleans every string again (report/model.py). An invalid
file is a usage error (exit 2) naming the file and at most MAX_PROBLEMS places in it,
never quoting its contents: a link the tree planted could otherwise make the error
message print a host file into the CI log (links are refused for the same reason).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py import config
from roteiro_py.errors import ReportFileInvalid
from roteiro_py.lint.judgement import exit_code
from roteiro_py.lint.output import append_step_summary, check_outputs, deliver, plan_outputs, render_all
from roteiro_py.untrusted import FileRefused, read_bounded

if TYPE_CHECKING:
    from roteiro_py.report.model import Report

#: The largest report read. One a lint writes within the default limits stays far below:
#: its guest text is at most about the 64 MiB of guest output it came from (`[vm]
#: output_limit_mib`; cargo's JSON spends 6 bytes on a control character, the report 5),
#: its snippets at most 10,000 findings (clippy/parse.py MAX_FINDINGS) x 6.5 KB (five
#: lines of escapes, measured), plus some 600 bytes of fields a finding: ~140 MB.
MAX_REPORT_BYTES = 256 * 1024 * 1024
#: Places in an invalid report named in the error.
MAX_PROBLEMS = 3
#: Characters of one validation message shown.
_PROBLEM_CHARS = 200


@dataclass(frozen=True)
class RenderRequest:
    report: Path
    formats: tuple[str, ...] = ()
    output: Path | None = None
    category: str | None = None
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)


def load_report(path: Path, *, limit: int | None = None,
                unusable: Callable[[Path, str, bool], Exception] | None = None) -> Report:
    """The report saved at `path`, validated, or the error `unusable(path, why, invalid)`
    makes (default ReportFileInvalid) saying why not: `invalid` when the file was read and
    is no report. The one reader of a saved report: `render` and `--baseline` both."""
    from pydantic import ValidationError

    from roteiro_py.report.model import Report

    def refuse(path: Path, why: str, invalid: bool) -> Exception:
        return ReportFileInvalid(path, why)

    make = unusable or refuse
    try:
        data = read_bounded(path, MAX_REPORT_BYTES if limit is None else limit)
    except FileNotFoundError:
        raise make(path, "it does not exist", False) from None
    except FileRefused as refused:
        raise make(path, refused.reason, False) from None
    try:
        return Report.model_validate_json(data)
    except ValidationError as invalid:
        problems = invalid.errors(include_url=False, include_input=False, include_context=False)
        shown = [_problem(problem["loc"], problem["type"], problem["msg"])
                 for problem in problems[:MAX_PROBLEMS]]
        more = len(problems) - len(shown)
        raise make(path, "; ".join(shown) + (f"; and {more} more" if more > 0 else ""), True) from None


def _problem(loc: tuple[int | str, ...], kind: str, message: str) -> str:
    """Where and what, bounded; our own validators' messages quote the value after a
    colon (report/model.py `_repo_path`), which is the file's text: left out."""
    if kind == "value_error":
        message = message.split(": ", 1)[0]
    where = ".".join(str(part) for part in loc) or "the document"
    return f"{where}: {message}"[:_PROBLEM_CHARS]


def run_render(request: RenderRequest) -> int:
    """Render the saved report to every output asked for; the exit status of a lint."""
    plan = plan_outputs(request.formats, request.output, request.category)
    check_outputs(plan)
    settings = config.resolve(Path("."), flags=request.flags).settings
    targets = plan.resolved(settings.lint.format)
    report = load_report(request.report)
    try:
        deliver(render_all(report, targets, category=plan.category))
    finally:
        skipped = append_step_summary(report)
        if skipped:
            sys.stderr.write(skipped)
    return exit_code(report, settings.lint.fail_on)
