"""`pylint-sandbox render REPORT.json`: a saved JSON report in any format, with no VM.

A CI job lints once, keeps `--format json=report.json` as an artifact, and a later step
(or another job) renders SARIF, annotations, GitLab's report or a summary from it:
`render` writes exactly what the lint would have written from the same report (a test
compares them byte for byte), through the same door (lint/output.py), with the same
exit-status rule (`--fail-on`, lint/judgement.py). It boots nothing, reads no image and
runs nothing: it reads one file.

That file is untrusted: it is read by report/load.py, the one reader of a saved report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roteiro_py import config
from roteiro_py.lint.judgement import exit_code
from roteiro_py.lint.output import append_step_summary, check_outputs, deliver, plan_outputs, render_all


@dataclass(frozen=True)
class RenderRequest:
    report: Path
    formats: tuple[str, ...] = ()
    output: Path | None = None
    category: str | None = None
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)


def run_render(request: RenderRequest) -> int:
    """Render the saved report to every output asked for; the exit status of a lint."""
    plan = plan_outputs(request.formats, request.output, request.category)
    check_outputs(plan)
    settings = config.resolve(Path("."), flags=request.flags).settings
    targets = plan.resolved(settings.lint.format)
    # lazy: report/ is pydantic and every renderer; the output refusals above come first
    from roteiro_py.report.load import load_report

    report = load_report(request.report)
    try:
        deliver(render_all(report, targets, category=plan.category))
    finally:
        skipped = append_step_summary(report)
        if skipped:
            sys.stderr.write(skipped)
    return exit_code(report, settings.lint.fail_on)
