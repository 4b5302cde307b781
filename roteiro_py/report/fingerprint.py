"""One fingerprint per finding: the same finding has the same one across runs and edits.

Every consumer that matches findings between runs uses this one function: GitLab Code
Quality (`fingerprint`, which its merge-request widget compares between the base and the
head pipeline), SARIF (`partialFingerprints`, next to the line hash code scanning
computes itself) and a baseline (`--baseline`). Were each to hash its own material, a
finding known to the baseline could be "new" to GitLab.

What it hashes (sha256, NUL-separated, behind a version tag):
- the lint code (`clippy::needless_return`, `E0308`; `rustc::<level>` for none),
- the repository-relative path ("" for a finding without a span),
- the message, with runs of whitespace folded to one space,
- the snippet's source text with each line's indentation and trailing blanks trimmed
  (re-indenting a block moves no finding), "" when there is none,
- an occurrence index among the findings of the report with all of the above equal,
  counted in the order of their positions in the file.

Never the line or column: a line inserted above a finding moves it, and it must stay the
same finding. Two identical findings in one file (the same lint on two equal lines) keep
distinct fingerprints through the occurrence index; an edit that swaps their order swaps
nothing visible. What does change it: editing the flagged line itself, its message
(clippy's wording changes between releases), renaming the file or the lint.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence

from roteiro_py.report.model import Finding

#: Bumped when the material changes: old fingerprints then never match new ones by chance.
VERSION = "roteiro-finding-v1"

_BLANKS = re.compile(r"\s+")


def _material(finding: Finding) -> tuple[str, ...]:
    code = finding.code or f"rustc::{finding.level}"
    message = _BLANKS.sub(" ", finding.message).strip()
    source = "\n".join(line.strip() for line in (finding.snippet or "").splitlines() if line.strip())
    return (code, finding.path or "", message, source)


def finding_fingerprint(finding: Finding, occurrence: int = 0) -> str:
    """The finding's fingerprint, 64 hex digits; `occurrence` is its index among the
    report's findings with the same material (`fingerprints()` counts it)."""
    digest = hashlib.sha256(VERSION.encode())
    for part in (*_material(finding), str(occurrence)):
        digest.update(b"\0" + part.encode("utf-8", errors="surrogatepass"))
    return digest.hexdigest()


def fingerprints(findings: Sequence[Finding]) -> list[str]:
    """The fingerprint of each finding, in the order given, with its occurrence index.

    Identical findings are counted in the order of their positions (line, then column),
    not of the report, so two runs that list them in another order agree.
    """
    order = sorted(range(len(findings)),
                   key=lambda i: (findings[i].line or 0, findings[i].column or 0, i))
    seen: Counter[tuple[str, ...]] = Counter()
    result = [""] * len(findings)
    for index in order:
        material = _material(findings[index])
        result[index] = finding_fingerprint(findings[index], seen[material])
        seen[material] += 1
    return result
