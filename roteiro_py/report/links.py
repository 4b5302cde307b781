"""Where a finding's lint is documented, as a URL built only from names that are safe.

SARIF's `helpUri`, the github annotations and the step summary link to the same page.
The code comes from the guest (or from a saved report, which anyone can write), so a URL
is built only from a code that is a lint name or an error code as rustc spells them
(`_CLIPPY`, `_ERROR`, `_RUSTC`, as clippy/parse.py admits them): anything else gets no
link, never a quoted one, because a link is markup in Markdown.

Clippy's own links are versioned (`rust-1.95.0/index.html#lint`), and so are these,
from the probed rustc release, so the page describes the lint that ran.

A finding's file on GitHub (`blob_base`, `blob_url`) is built from the job's
GITHUB_SERVER_URL, GITHUB_REPOSITORY and GITHUB_SHA. The runner sets them, but a step
before ours can overwrite any of them through $GITHUB_ENV, so each is held to the shape
GitHub gives it (an https origin, `owner/name`, 40 or 64 hex digits) and anything else
gets no link. The path is the report's (clean, relative, no `..`: report/model.py) and
is percent-encoded whole but for `/`, so no character of it is markup in a link.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from urllib.parse import quote

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


#: An origin as GITHUB_SERVER_URL gives it (https://github.com, a GHES host): no path,
#: no user, no query; URL characters only.
_SERVER = re.compile(r"https://[A-Za-z0-9](?:[A-Za-z0-9.-]{0,251}[A-Za-z0-9])?(?::[0-9]{1,5})?")
#: GITHUB_REPOSITORY: GitHub's owner names (letters, digits, `-`) and repository names
#: (letters, digits, `.`, `_`, `-`; never `.` or `..`).
_REPOSITORY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,38}/(?!\.\.?$)[A-Za-z0-9._-]{1,100}")
#: GITHUB_SHA: a commit id, SHA-1 or SHA-256.
_SHA = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


def blob_base(environ: Mapping[str, str]) -> str | None:
    """`<server>/<owner>/<name>/blob/<sha>` from a GitHub job's variables, or None when
    one is missing or not of its shape (module docstring)."""
    server = environ.get("GITHUB_SERVER_URL", "").removesuffix("/")
    repository = environ.get("GITHUB_REPOSITORY", "")
    sha = environ.get("GITHUB_SHA", "")
    if not (_SERVER.fullmatch(server) and _REPOSITORY.fullmatch(repository) and _SHA.fullmatch(sha)):
        return None
    return f"{server}/{repository}/blob/{sha}"


def blob_url(base: str, path: str, line: int | None) -> str:
    """The file `path` (a report's, relative to the repository root) at `base`, at `line`."""
    return f"{base}/{quote(path, safe='/')}" + (f"#L{line}" if line else "")
