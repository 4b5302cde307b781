"""GitLab Code Quality: the subset of the Code Climate issue format GitLab reads.

GitLab's merge-request widget and pipeline tab read a JSON array (the job's
`artifacts:reports:codequality` file) of objects with, per its documentation
("Code Quality report format"), exactly these fields, each required:

    description          a human-readable description of the finding (string)
    check_name           a unique name of the check (string)
    fingerprint          a unique fingerprint of the finding (string)
    severity             info, minor, major, critical or blocker
    location.path        the file, relative to the repository root (no `./`)
    location.lines.begin the first line (integer)

Anything else is ignored by GitLab, so nothing else is written (a tool's own fields in
the Code Climate spec, `type` or `categories`, would only be noise here).

The fingerprint is the finding fingerprint (report/fingerprint.py): GitLab decides which
findings a merge request introduced or resolved by comparing the fingerprints of the
base and head pipelines, so a line number in it would report every finding below an
inserted line as fixed and new again.

Severity: rustc errors (the build failed) `critical`, warnings `minor`, notes and help
`info`. A finding without a span is placed at line 1 of the workspace's Cargo.toml,
as in SARIF, because GitLab requires a location.
"""

from __future__ import annotations

import json
import posixpath
from typing import Any

from roteiro_py.report.fingerprint import fingerprints
from roteiro_py.report.model import Report

SEVERITY = {"error": "critical", "warning": "minor", "note": "info", "help": "info"}
#: GitLab's severities, lowest first (its documentation lists no other).
SEVERITIES = ("info", "minor", "major", "critical", "blocker")


def render_gitlab(report: Report) -> str:
    manifest = posixpath.normpath(posixpath.join(report.workspace, "Cargo.toml"))
    if manifest.startswith(("../", "/")):  # a saved report's workspace is not checked
        manifest = "Cargo.toml"
    issues: list[dict[str, Any]] = []
    for finding, fingerprint in zip(report.findings, fingerprints(report.findings), strict=True):
        description = finding.message
        if finding.label:  # the primary span's label ("expected `u32`, found `&str`")
            description += f"\n{finding.label}"
        if finding.help:
            description += f"\nhelp: {finding.help}"
        located = finding.path is not None and finding.line is not None
        issues.append({
            "description": description,
            "check_name": finding.code or f"rustc::{finding.level}",
            "fingerprint": fingerprint,
            "severity": SEVERITY[finding.level],
            "location": {"path": finding.path if located else manifest,
                         "lines": {"begin": finding.line if located else 1}},
        })
    return json.dumps(issues, indent=2) + "\n"
