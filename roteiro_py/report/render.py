"""`render(report, format)`: the one entry point the command line uses for output.

Every field is clean (model.py), but a renderer joins fields into lines, and a `##` that
ends one next to a `[` that starts the next is a workflow command neither holds; so the
finished text goes through `guard()` here, whatever the format (untrusted.py).
"""

from __future__ import annotations

from roteiro_py.report.github import OWN_COMMANDS, render_github
from roteiro_py.report.gitlab import render_gitlab
from roteiro_py.report.markdown import render_markdown
from roteiro_py.report.model import Report
from roteiro_py.report.sarif import render_sarif
from roteiro_py.untrusted import guard
from roteiro_py.vocabulary import FORMATS as FORMATS
from roteiro_py.vocabulary import Format


def render(report: Report, format: Format, *, width: int = 100, color: bool = False,
           category: str | None = None) -> str:
    """The report as text in `format`; `width` and `color` apply to human only, `category`
    (SARIF's automationDetails.id) to sarif only."""
    if format == "human":
        # lazy: rich loads for this format only (report/plain.py)
        from roteiro_py.report.human import render_human

        return guard(render_human(report, width=width, color=color))
    if format == "json":
        return guard(report.model_dump_json(indent=2) + "\n", json=True)
    if format == "sarif":
        return guard(render_sarif(report, category=category), json=True)
    if format == "github":
        # The annotations are the format: the tool's own `::warning ...::` lines stay.
        return guard(render_github(report), allowed=OWN_COMMANDS)
    if format == "gitlab":
        return guard(render_gitlab(report), json=True)
    if format == "markdown":
        return guard(render_markdown(report))
    raise ValueError(f"unknown report format {format!r}; expected one of {FORMATS}")


def render_summary(report: Report, *, with_findings: bool = True, links: str | None = None) -> str:
    """What `$GITHUB_STEP_SUMMARY` receives: the markdown format (report/markdown.py),
    or without the lists of lints and findings when the step's summary has no room;
    `links` as render_markdown takes it."""
    return guard(render_markdown(report, with_findings=with_findings, links=links))
