"""`pylint-sandbox render REPORT.json`: a saved JSON report in any format, with no VM.

A CI job lints once, keeps `--format json=report.json` as an artifact, and a later step
(or another job) renders SARIF, annotations, GitLab's report or a summary from it:
`render` writes exactly what the lint would have written from the same report (a test
compares them byte for byte), through the same door (lint/output.py), with the same
exit-status rule (`--fail-on`, lint/judgement.py). It boots nothing, reads no image and
runs nothing: it reads one file.

`--baseline` and `--diff` judge the saved findings as a lint given them would
(roteiro_py/compare/, the same reader and the same marks), and `--color` colours the
human report as the lint's does (`lint.color`, CARGO_TERM_COLOR): a job can lint once and
judge the one report against each pull request's diff. A diff is looked for in the
repository `render` runs in, when it runs in one (as a lint looks in the linted tree).

That file is untrusted: it is read by report/load.py, the one reader of a saved report.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roteiro_py import config
from roteiro_py.compare import compare, load_against
from roteiro_py.lint.judgement import exit_code
from roteiro_py.lint.output import append_step_summary, check_outputs, deliver, plan_outputs, render_all
from roteiro_py.lint.preflight import repo_root_of


@dataclass(frozen=True)
class RenderRequest:
    report: Path
    formats: tuple[str, ...] = ()
    output: Path | None = None
    category: str | None = None
    #: A JSON report of an earlier run and a unified diff to judge the findings against
    #: (roteiro_py/compare/), as `lint clippy --baseline/--diff`; None when not given.
    baseline: Path | None = None
    diff: Path | None = None
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)


def run_render(request: RenderRequest) -> int:
    """Render the saved report to every output asked for; the exit status of a lint."""
    plan = plan_outputs(request.formats, request.output, request.category)
    check_outputs(plan)
    # a wrong file costs ms, as in a lint; a diff's files are looked for in this repository
    against = load_against(request.baseline, request.diff,
                           root=repo_root_of(Path(".")) if request.diff is not None else None)
    settings = config.resolve(Path("."), flags=request.flags).settings
    targets = plan.resolved(settings.lint.format)
    # lazy: report/ is pydantic and every renderer; the output refusals above come first
    from roteiro_py.report.load import load_report

    report = compare(load_report(request.report), against)
    try:
        deliver(render_all(report, targets, category=plan.category, color=settings.lint.color))
    finally:
        skipped = append_step_summary(report)
        if skipped:
            sys.stderr.write(skipped)
    return exit_code(report, settings.lint.fail_on)
