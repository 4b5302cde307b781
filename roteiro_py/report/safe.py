"""The one place strings from the guest are made safe to print.

Everything in a finding came from the guest (message, code, path, related labels) or
from the repository's own files (the snippet): a build script or a proc macro decides
what rustc prints, and a repository decides what its source lines contain. None of it
may reach a terminal or a GitHub workflow command as control: an ESC starts CSI and OSC
sequences (ESC ] 8 ; ; makes a hyperlink that says one thing and points at another),
the C1 range 0x80-0x9f holds single-character CSI/OSC in some terminals, bidi overrides
reorder what the reader sees (CVE-2021-42574, "Trojan Source"), and a raw \\r or \\n ends
a workflow command early and starts a forged one.

`clean()` is applied by the report model's validators (report/model.py) to every
string field, so no renderer can forget it and a report reloaded from JSON is cleaned
again. It is stricter than `guidance.printable()`: every code point in the Unicode
categories Cc (controls), Cf (format: bidi marks and overrides, zero-width joiners),
Cs (lone surrogates), Co (private use), Zl and Zp (line and paragraph separators) is
shown as an escape; only \\n (where the field is multi-line) and \\t (in source lines)
survive. The escape is a backslash sequence, which contains no control, so cleaning is
idempotent. Length is bounded here too, since a guest can make a message megabytes long.
"""

from __future__ import annotations

import unicodedata

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

#: Above this a string is cut and marked, so one finding cannot fill a terminal or a log.
MAX_FIELD_CHARS = 4000


def _escape(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}" if code < 0x10000 else (
        f"\\U{code:08x}"
    )


def clean(
    text: str,
    *,
    keep_newlines: bool = False,
    keep_tabs: bool = False,
    limit: int = MAX_FIELD_CHARS,
) -> str:
    """Return `text` with every control or format character escaped and its length bounded."""
    if len(text) > limit:
        text = text[:limit] + "…[truncated]"
    kept = ("\n" if keep_newlines else "") + ("\t" if keep_tabs else "")
    out: list[str] = []
    for ch in text:
        unsafe = not (ch.isascii() and ch.isprintable()) and (
            unicodedata.category(ch) in _UNSAFE_CATEGORIES
        )
        out.append(_escape(ch) if unsafe and ch not in kept else ch)
    return "".join(out)


def is_clean(text: str, *, keep_newlines: bool = False, keep_tabs: bool = False) -> bool:
    """True when `clean()` would leave `text` as it is (length aside)."""
    return clean(text, keep_newlines=keep_newlines, keep_tabs=keep_tabs, limit=len(text)) == text
