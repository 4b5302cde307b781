"""A finding's fingerprint: the identity it keeps while the code around it moves.

`--baseline` (roteiro_py/compare/) tells a known finding from a new one by it, and a format
that needs a stable identity per finding (GitLab Code Quality's `fingerprint`) uses the
same function, so a finding is the same finding to every consumer.

The fingerprint is the sha256 (hex) of, JSON-encoded so no field can run into the next:
- RECIPE, so that a later change of what goes in can never match an old fingerprint;
- the lint code (`clippy::needless_return`, `E0308`; "" for an uncoded diagnostic);
- the path relative to the repository root ("" for a finding with no span);
- the message, every run of whitespace made one space;
- the source text of the primary span (the snippet from column to end_column), every run
  of whitespace made one space ("" when there is no snippet);
- the occurrence: 0 for the first of the findings of one file with all of the above the
  same, 1 for the next, in the order of their positions.

Never the line or the column: lines inserted above a finding, or the block around it
re-indented, leave its fingerprint as it was (a baseline keyed on positions would call
every finding below any edit new). Not the level: `-D warnings` makes a warning an
error, and it is still the same finding. The occurrence keeps two identical findings in
one file apart: with one of them in a baseline, one is known and the other new (which of
the two is which follows their order, not their history).

A renamed file keeps its findings' fingerprints when the caller passes the new name as
`path` (compare/ does, for the baseline's findings, from the diff's `rename from/to`).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence

from roteiro_py.report.model import Finding

#: Names the recipe above; change it whenever what goes into a fingerprint changes.
RECIPE = "pylint-sandbox/finding-fingerprint/1"

_WHITESPACE = re.compile(r"\s+")


def _squeezed(text: str) -> str:
    return _WHITESPACE.sub(" ", text).strip()


def span_text(finding: Finding) -> str:
    """The source text of the finding's primary span, as far as its snippet holds it.

    The snippet is the whole lines line..end_line (at most five, report/snippet.py); the
    span is column..end_column of them (1-based code points, end exclusive, as rustc
    counts). "" without a snippet or a column.
    """
    if finding.snippet is None or finding.line is None or finding.column is None:
        return ""
    lines = finding.snippet.split("\n")
    last = max((finding.end_line or finding.line) - finding.line, 0)  # the model orders them too
    end_column = finding.end_column
    if last >= len(lines):  # the snippet stops before the span does: keep what it has
        last, end_column = len(lines) - 1, None
    picked = lines[: last + 1]
    if end_column is not None:
        picked[-1] = picked[-1][: max(end_column - 1, 0)]
    picked[0] = picked[0][finding.column - 1:]
    return "\n".join(picked)


def _material(finding: Finding, path: str | None) -> tuple[str, str, str, str]:
    return (finding.code or "", path or "", _squeezed(finding.message), _squeezed(span_text(finding)))


def finding_fingerprint(finding: Finding, occurrence: int = 0, *, path: str | None = None) -> str:
    """The fingerprint of `finding` (see the module docstring), as 64 hex digits.

    `occurrence` is its index among the findings of its file with the same material;
    `fingerprints()` counts it for a whole report, and a single finding is occurrence 0.
    `path` replaces the finding's own path (a baseline's finding in a renamed file).
    """
    material = _material(finding, finding.path if path is None else path)
    encoded = json.dumps([RECIPE, *material, occurrence], ensure_ascii=True)
    return hashlib.sha256(encoded.encode("ascii")).hexdigest()


def fingerprints(findings: Sequence[Finding], *, renamed: Mapping[str, str] | None = None) -> list[str]:
    """The fingerprint of each finding, in the order given, occurrences counted.

    Occurrences are counted in the order of the findings' positions (line, then column),
    whatever order the report lists them in. `renamed` maps an old path to the new one:
    a finding in a file the diff renamed is fingerprinted under its new name. No two
    findings of one call get the same fingerprint.
    """
    renamed = renamed or {}
    paths = [renamed.get(f.path, f.path) if f.path is not None else None for f in findings]
    order = sorted(range(len(findings)),
                   key=lambda i: (findings[i].line or 0, findings[i].column or 0, i))
    seen: Counter[tuple[str, str, str, str]] = Counter()
    result = [""] * len(findings)
    for index in order:
        material = _material(findings[index], paths[index])
        result[index] = finding_fingerprint(findings[index], seen[material], path=paths[index] or "")
        seen[material] += 1
    return result
