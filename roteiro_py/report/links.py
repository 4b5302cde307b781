"""Where a finding's lint is documented, as a URL built only from names that are safe.

SARIF's `helpUri`, the github annotations and the step summary link to the same page.
The code comes from the guest (or from a saved report, which anyone can write), so a URL
is built only from a code that is a lint name or an error code as rustc spells them
(`_CLIPPY`, `_ERROR`, `_RUSTC`, as clippy/parse.py admits them): anything else gets no
link, never a quoted one, because a link is markup in Markdown.

Clippy's own links are versioned (`rust-1.95.0/index.html#lint`), and so are these,
from the probed rustc release, so the page describes the lint that ran.
"""

from __future__ import annotations

import re

_CLIPPY = re.compile(r"clippy::([a-z][a-z0-9_]{0,99})")
_ERROR = re.compile(r"E[0-9]{4}")
_RUSTC = re.compile(r"[a-z][a-z0-9_]{0,99}")
#: A rustc release as Toolchain validates it (report/model.py).
_RELEASE = re.compile(r"\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?")

RUSTC_LINTS = "https://doc.rust-lang.org/rustc/lints/listing/index.html"


def doc_url(code: str | None, rustc_release: str) -> str | None:
    """The documentation of `code` (a clippy lint, a rustc error code or lint), or None."""
    if code is None:
        return None
    if clippy := _CLIPPY.fullmatch(code):
        version = f"rust-{rustc_release}" if _RELEASE.fullmatch(rustc_release) else "master"
        return f"https://rust-lang.github.io/rust-clippy/{version}/index.html#{clippy.group(1)}"
    if _ERROR.fullmatch(code):
        return f"https://doc.rust-lang.org/error_codes/{code}.html"
    if _RUSTC.fullmatch(code):
        return RUSTC_LINTS
    return None
