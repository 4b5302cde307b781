"""`render(report, format)`: the one entry point the command line uses for output."""

from __future__ import annotations

from typing import Literal, get_args

from roteiro_py.report.github import render_github
from roteiro_py.report.human import render_human
from roteiro_py.report.model import Report
from roteiro_py.report.sarif import render_sarif

Format = Literal["human", "json", "sarif", "github"]
FORMATS: tuple[str, ...] = get_args(Format)


def render(report: Report, format: Format, *, width: int = 100, color: bool = False) -> str:
    """The report as text in `format`; `width` and `color` apply to human only."""
    if format == "human":
        return render_human(report, width=width, color=color)
    if format == "json":
        return report.model_dump_json(indent=2) + "\n"
    if format == "sarif":
        return render_sarif(report)
    if format == "github":
        return render_github(report)
    raise ValueError(f"unknown report format {format!r}; expected one of {FORMATS}")
