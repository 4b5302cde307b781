"""The lint report: its model (model.py), the one sanitizer for guest strings (safe.py),
snippets read from the host's copy of the tree (snippet.py), the one finding fingerprint
(fingerprint.py), and the renderers (human, json, sarif, github, gitlab, markdown) behind
`render()`."""

from roteiro_py.report.model import (
    SCHEMA_VERSION,
    Comparison,
    Finding,
    Isolation,
    Location,
    Provenance,
    Report,
    Summary,
    Toolchain,
    ToolInfo,
)
from roteiro_py.report.render import FORMATS, render

__all__ = [
    "FORMATS",
    "SCHEMA_VERSION",
    "Comparison",
    "Finding",
    "Isolation",
    "Location",
    "Provenance",
    "Report",
    "Summary",
    "ToolInfo",
    "Toolchain",
    "render",
]
