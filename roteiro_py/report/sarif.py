"""SARIF 2.1.0 for GitHub code scanning.

Valid against the official OASIS schema (tests/data/sarif/, checked by a test) and
carrying what code scanning requires or uses beyond it:
- a non-empty `ruleId` on every result, and a rule for it with `shortDescription`,
  `help` text and, for clippy lints and rustc error codes, a `helpUri` to the docs
  (report/links.py: versioned like clippy's own links, built only from safe names);
- `partialFingerprints.primaryLocationLineHash`, so an alert survives unrelated edits:
  a hash of the rule, the file and the primary line's content without whitespace, with
  `:<n>` counting identical ones (the format GitHub's own upload action computes); and
  beside it FINGERPRINT_KEY, the finding fingerprint every other consumer (GitLab, a
  baseline) uses (report/fingerprint.py), so one finding is one finding everywhere;
- `automationDetails.id` from `--category` when given: code scanning replaces the alerts
  of an earlier upload with the same category, so two jobs (two feature sets, two
  workspaces) uploading without distinct categories would close each other's alerts;
- `tool.driver.semanticVersion` from the probed clippy version;
- relative URIs under `uriBaseId` %SRCROOT% (no host path is written);
- every label rustc gave (issue 23): the primary span's as the location's `message` and
  after the result's message (code scanning shows the result's), each secondary span's as
  its `relatedLocations` entry's `message` (SARIF 2.1.0 §3.28.5, §3.27.22);
- `level` error / warning / note (rustc's note and help become note);
- `baselineState` "unchanged" / "new" when the run had a `--baseline`, and the result's
  `properties.inDiff` when it had a `--diff` (every finding stays in the log, marked).
Columns are Unicode code points (`columnKind`), which is what rustc counts.
A finding without a span (a crate-level diagnostic) is placed at line 1 of the
workspace's Cargo.toml, because code scanning rejects a result without a location.
"""

from __future__ import annotations

import hashlib
import json
import posixpath
import re
from collections import Counter
from typing import Any
from urllib.parse import quote

from roteiro_py.report.fingerprint import fingerprints
from roteiro_py.report.links import RUSTC_LINTS, doc_url
from roteiro_py.report.model import Finding, Location, Report

SARIF_SCHEMA_URI = (
    "https://docs.oasis-open.org/sarif/sarif/v2.1.0/errata01/os/schemas/sarif-schema-2.1.0.json"
)
_LEVEL = {"error": "error", "warning": "warning", "note": "note", "help": "note"}
#: A finding the --baseline report has is "unchanged" to SARIF; one it lacks is "new".
_BASELINE_STATE = {"known": "unchanged", "new": "new"}
_ERROR_CODE = re.compile(r"^E\d{4}$")
#: `runs[].automationDetails.id` as GitHub's upload reads it: a category, then `/`.
#: Letters, digits and `._:=/-` only (checked where `--category` is parsed).
CATEGORY = re.compile(r"[A-Za-z0-9._:=/-]{1,100}")
#: The key of this tool's own fingerprint in `partialFingerprints` (report/fingerprint.py).
FINGERPRINT_KEY = "roteiroFindingFingerprint/v1"


def rule_id(finding: Finding) -> str:
    return finding.code or f"rustc::{finding.level}"


def _rule(rule: str, report: Report) -> dict[str, Any]:
    entry: dict[str, Any] = {"id": rule, "name": rule}
    uri = doc_url(rule, report.toolchain.rustc_release)
    if rule.startswith("clippy::"):
        lint = rule.removeprefix("clippy::")
        entry["shortDescription"] = {"text": f"clippy lint {lint}"}
        if uri is None:
            entry["help"] = {"text": f"A clippy lint named `{lint}`."}
        else:
            entry["help"] = {"text": f"See the clippy documentation of `{lint}`: {uri}",
                             "markdown": f"See the clippy documentation of [`{lint}`]({uri})."}
            entry["helpUri"] = uri
    elif _ERROR_CODE.match(rule):
        uri = f"https://doc.rust-lang.org/error_codes/{rule}.html"
        entry["shortDescription"] = {"text": f"rustc error {rule}"}
        entry["help"] = {"text": f"See the explanation of {rule}: {uri} "
                                 f"(or run `rustc --explain {rule}`)."}
        entry["helpUri"] = uri
    elif rule.startswith("rustc::"):
        entry["shortDescription"] = {"text": f"rustc {rule.removeprefix('rustc::')} "
                                             "without a code"}
        entry["help"] = {"text": "A compiler diagnostic without a lint name or error code; "
                                 "its message says what is wrong."}
    else:
        uri = RUSTC_LINTS
        entry["shortDescription"] = {"text": f"rustc lint {rule}"}
        entry["help"] = {"text": f"See the rustc lint listing for `{rule}`: {uri}"}
        entry["helpUri"] = uri
    return entry


def _physical(path: str, line: int, column: int | None, end_line: int | None,
              end_column: int | None, snippet: str | None = None) -> dict[str, Any]:
    region: dict[str, Any] = {"startLine": line}
    if column is not None:
        region["startColumn"] = column
    if end_line is not None:
        region["endLine"] = end_line
    if end_column is not None and (end_line is None or end_line > line or
                                   column is None or end_column >= column):
        region["endColumn"] = end_column
    if snippet is not None:
        region["snippet"] = {"text": snippet}
    return {"physicalLocation": {
        "artifactLocation": {"uri": quote(path), "uriBaseId": "%SRCROOT%"},
        "region": region,
    }}


def _related(index: int, location: Location) -> dict[str, Any]:
    entry = _physical(location.path, location.line, location.column, location.end_line,
                      location.end_column)
    entry["id"] = index
    if location.message:
        entry["message"] = {"text": location.message}
    return entry


def _line_hash(rule: str, finding: Finding, path: str) -> str:
    content = (finding.snippet or "").split("\n", 1)[0] if finding.snippet else finding.message
    digest = hashlib.sha256("\0".join((rule, path, re.sub(r"\s+", "", content))).encode())
    return digest.hexdigest()[:16]


def render_sarif(report: Report, *, category: str | None = None) -> str:
    """The SARIF log; `category` (`--category`, CATEGORY) becomes the run's
    `automationDetails.id`, so code scanning keeps several jobs' uploads apart."""
    rules: dict[str, int] = {}
    rule_entries: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    occurrences: Counter[str] = Counter()
    manifest = posixpath.normpath(posixpath.join(report.workspace, "Cargo.toml"))
    for finding, fingerprint in zip(report.findings, fingerprints(report.findings), strict=True):
        rule = rule_id(finding)
        if rule not in rules:
            rules[rule] = len(rule_entries)
            rule_entries.append(_rule(rule, report))
        if finding.path is not None and finding.line is not None:
            path = finding.path
            location = _physical(path, finding.line, finding.column, finding.end_line,
                                 finding.end_column, finding.snippet)
        else:
            path = manifest
            location = _physical(path, 1, None, None, None)
        line_hash = _line_hash(rule, finding, path)
        occurrences[line_hash] += 1
        text = finding.message
        if finding.label:  # the primary span's label, on the location and in the message
            location["message"] = {"text": finding.label}
            text += f"\n{finding.label}"
        if finding.help:
            text += f"\nhelp: {finding.help}"
        result: dict[str, Any] = {
            "ruleId": rule,
            "ruleIndex": rules[rule],
            "level": _LEVEL[finding.level],
            "message": {"text": text},
            "locations": [location],
            "partialFingerprints": {
                "primaryLocationLineHash": f"{line_hash}:{occurrences[line_hash]}",
                FINGERPRINT_KEY: fingerprint},
        }
        if finding.baseline is not None:
            result["baselineState"] = _BASELINE_STATE[finding.baseline]
        if finding.in_diff is not None:
            result["properties"] = {"inDiff": finding.in_diff}
        if finding.related:
            result["relatedLocations"] = [_related(i, loc)
                                          for i, loc in enumerate(finding.related, start=1)]
        results.append(result)
    toolchain = report.toolchain
    driver: dict[str, Any] = {
        "name": "clippy",
        "semanticVersion": toolchain.clippy_version,
        "version": " ".join(filter(None, (toolchain.clippy_version, toolchain.clippy_commit,
                                          toolchain.clippy_date))),
        "informationUri": "https://github.com/rust-lang/rust-clippy",
        "rules": rule_entries,
    }
    run: dict[str, Any] = {
        "tool": {"driver": driver, "extensions": [
            {"name": report.tool.name, "version": report.tool.version}]},
        "invocations": [{
            "executionSuccessful": True,
            "commandLine": " ".join(report.command),
            "arguments": report.command,
            "startTimeUtc": report.model_dump(mode="json")["started"],
            "endTimeUtc": report.model_dump(mode="json")["ended"],
        }],
        "columnKind": "unicodeCodePoints",
        "results": results,
        "properties": {
            "buildSucceeded": report.summary.build_succeeded,
            "droppedFindings": report.summary.dropped_findings,
            "image": report.provenance.model_dump(mode="json"),
            "toolchain": toolchain.model_dump(mode="json"),
            "isolation": report.isolation.model_dump(mode="json"),
            "features": report.features,
            "dependencyCache": None if report.dependency_cache is None
            else report.dependency_cache.model_dump(mode="json"),
            "comparison": None if report.comparison is None
            else report.comparison.model_dump(mode="json"),
        },
    }
    if category is not None:
        if not CATEGORY.fullmatch(category):
            raise ValueError(f"not a SARIF category: {category!r}")
        run["automationDetails"] = {"id": category if category.endswith("/") else category + "/"}
    log = {"$schema": SARIF_SCHEMA_URI, "version": "2.1.0", "runs": [run]}
    return json.dumps(log, indent=2) + "\n"
