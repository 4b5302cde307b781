"""The real command line (`pylint-sandbox ...`, roteiro_py/cli/app.py `main`) with only
the VM run replaced: `lint()` returns the report saved at $SAVED_REPORT.

Usage: python saved_lint_cli.py ARGS...   (the same arguments as pylint-sandbox)

Everything around the run is the real code: option parsing, the output plan and its
checks, rendering, writing, the step summary and the exit status. The settings are
resolved as the real `lint()` resolves them; each call appends a line to $LINT_CALLS,
so a test can count the runs. A VM-free stand-in, because a real lint needs a guest.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import roteiro_py.lint as lint_package  # noqa: E402
from roteiro_py import config  # noqa: E402
from roteiro_py.progress import SILENT, Progress  # noqa: E402


def saved_lint(request: lint_package.LintRequest, progress: Progress = SILENT) -> object:
    from roteiro_py.report.model import Report

    with open(os.environ["LINT_CALLS"], "a") as calls:
        calls.write("lint\n")
    settings = config.resolve(request.path, flags=request.flags).settings
    request.outputs.resolved(settings.lint.format)
    return Report.model_validate_json(Path(os.environ["SAVED_REPORT"]).read_bytes()), settings


lint_package.lint = saved_lint  # type: ignore[assignment]

if __name__ == "__main__":
    from roteiro_py.cli.app import main

    sys.exit(main(sys.argv[1:]))
