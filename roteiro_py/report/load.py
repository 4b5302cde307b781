"""A saved JSON report, read as untrusted: the one reader `render` and `--baseline` share.

That file is an artifact anyone with write access to the job can replace, or a file of the
tree. `load_report` reads it through the one reader (untrusted.py `read_bounded`: no link,
only a regular file, at most MAX_REPORT_BYTES) and validates it with the report model,
which cleans every string again (report/model.py). An invalid file is a usage error (exit
2) naming the file and at most MAX_PROBLEMS places in it, never quoting its contents: a
link the tree planted could otherwise make the error message print a host file into the
CI log (links are refused for the same reason).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from pydantic import ValidationError

from roteiro_py.errors import ReportFileInvalid
from roteiro_py.report.model import Report
from roteiro_py.untrusted import FileRefused, read_bounded

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


def load_report(path: Path, *, limit: int | None = None,
                unusable: Callable[[Path, str, bool], Exception] | None = None) -> Report:
    """The report saved at `path`, validated, or the error `unusable(path, why, invalid)`
    makes (default ReportFileInvalid) saying why not: `invalid` when the file was read and
    is no report. The one reader of a saved report: `render` and `--baseline` both."""
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
