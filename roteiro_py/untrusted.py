"""The one door out for text from outside: `sanitise()` for a value, `guard()` for an output.

Everything the tree, the image, a registry or the guest controls reaches a terminal, a CI
log or a report through `sanitise()`; `report.safe.clean()` (the report model's
validators) and `guidance.printable()` (refusals, config, progress) are names for it. It
lives in a module of its own, importing nothing heavy, because refusals need it on the
fast path (`roteiro_py.report` pulls in pydantic: 40 ms against 300 ms, `-X importtime`).

Two readers act on text, and `sanitise()` leaves neither anything to act on:
- A terminal: an ESC starts CSI and OSC sequences (ESC ] 8 ; ; makes a hyperlink that
  says one thing and points at another), the C1 range 0x80-0x9f holds single-character
  CSI/OSC in some terminals, bidi controls reorder what the reader sees (CVE-2021-42574,
  "Trojan Source"), zero-width and other invisible characters hide text. Every code point
  in the categories Cc, Cf, Cs, Co, Zl, Zp, and every other Default_Ignorable_Code_Point
  (variation selectors, Hangul fillers), is shown as a backslash escape (`\\x1b`,
  `\\u202e`); only `\\n` (where a field is multi-line) and `\\t` (in source lines) survive.
- The GitHub Actions runner (actions/runner, ActionCommand.TryParse and TryParseV2),
  which executes a log line as a command to itself (set-output, add-mask, stop-commands,
  add-matcher) when it CONTAINS `##[` anywhere (the legacy syntax) or starts, after
  .NET's TrimStart(), with `::`. `sanitise()` writes the `[` of `##[` as `\\x5b` and the
  first `:` of a line's leading `::` as `\\x3a`, the same escape scheme. The runner's
  culture-sensitive search ignores invisible characters, so `#<U+200B>#[` counts too:
  escaping those (above) is what keeps that one out.

The escapes contain only `\\`, `x`, `u`, `U` and hex digits, so sanitising twice is
sanitising once. Length is bounded here too (a guest can make a message megabytes long):
the result, its truncation mark included, is at most `limit` characters, so a second pass
does not cut again.

Fields are concatenated into lines (a path, `:`, a message), and a `##` ending one field
next to a `[` starting the next would form `##[` that neither field holds. `guard()` is the
last step at each door (report `render()`, the refusal printer, `config`): it breaks any
line of a finished output that the runner would read as a command, leaving the commands
the tool writes itself (the github format's annotations) and, in JSON, using an escape a
JSON reader decodes (`##\\u005b` inside a string is `##[` to it).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import tomllib
import unicodedata
from collections.abc import Iterable
from typing import Any

#: Above this a value is cut and marked, so one string cannot fill a terminal or a log.
MAX_FIELD_CHARS = 4000

_UNSAFE_CATEGORIES = frozenset({"Cc", "Cf", "Cs", "Co", "Zl", "Zp"})

#: Default_Ignorable_Code_Point (Unicode DerivedCoreProperties.txt) outside Cf: invisible
#: when shown and skipped by ICU's (so .NET's) culture-sensitive string search.
_IGNORABLE_RANGES = ((0x034F, 0x034F), (0x115F, 0x1160), (0x17B4, 0x17B5), (0x180B, 0x180F),
                     (0x2065, 0x2065), (0x3164, 0x3164), (0xFE00, 0xFE0F), (0xFFA0, 0xFFA0),
                     (0xFFF0, 0xFFF8), (0xE0000, 0xE0FFF))


def is_unsafe_char(ch: str) -> bool:
    """True for a code point that `sanitise()` never emits raw (`\\n` and `\\t` aside)."""
    if ch.isascii() and ch.isprintable():
        return False
    if unicodedata.category(ch) in _UNSAFE_CATEGORIES:
        return True
    code = ord(ch)
    return any(low <= code <= high for low, high in _IGNORABLE_RANGES)


def _escape(ch: str) -> str:
    code = ord(ch)
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def sanitise(
    text: str,
    *,
    keep_newlines: bool = False,
    keep_tabs: bool = False,
    limit: int = MAX_FIELD_CHARS,
) -> str:
    """`text` with nothing a terminal or a CI runner would act on, at most `limit` long.

    Without it a string from a hostile guest reaches the user's terminal as commands to
    it, or a CI log as commands to the runner (a forged annotation, a mask, an output).
    """
    if keep_newlines:
        text = text.replace("\r\n", "\n")
    # Each character becomes at least one: past limit + 1 nothing more can be kept.
    source = text[: limit + 1]
    pieces: list[str] = []
    tail = ""  # the last two characters written, to see `##` before a `[`
    line_start = True  # only whitespace since the start or the last kept newline
    for index, ch in enumerate(source):
        if ch == "\n" and keep_newlines or ch == "\t" and keep_tabs:
            piece = ch
        elif is_unsafe_char(ch):
            piece = _escape(ch)
        elif ch == "[" and tail == "##":
            piece = "\\x5b"
        elif ch == ":" and line_start and source[index + 1: index + 2] == ":":
            piece = "\\x3a"
        else:
            piece = ch
        pieces.append(piece)
        tail = (tail + piece)[-2:]
        line_start = piece == "\n" or (line_start and piece.isspace())
    if len(source) > limit or sum(map(len, pieces)) > limit:
        mark = f"…[truncated to {limit} characters]"
        budget = max(limit - len(mark), 0)
        kept: list[str] = []
        used = 0
        for piece in pieces:
            if used + len(piece) > budget:
                break
            kept.append(piece)
            used += len(piece)
        return "".join(kept) + mark
    return "".join(pieces)


def is_sanitised(text: str, *, keep_newlines: bool = False, keep_tabs: bool = False) -> bool:
    """True when `sanitise()` would leave `text` as it is (length aside)."""
    return sanitise(text, keep_newlines=keep_newlines, keep_tabs=keep_tabs,
                    limit=len(text)) == text


#: Where the runner ends a line (StreamReader.ReadLine: \\r, \\n, \\r\\n), and the other
#: breaks a log viewer might honour; `guard()` treats every one as a line end.
_LINE_BREAKS = re.compile(r"(\r\n|[\n\r\v\f\x1c-\x1e\x85\u2028\u2029])")
#: Blanks (.NET TrimStart() trims a subset of Python's) and SGR colour codes before `::`.
_LINE_LEAD = re.compile(r"(?:\s|\x1b\[[0-9;]*m)*")


def _guard_line(line: str, *, json: bool, allowed: Iterable[str]) -> str:
    bracket, colon = ("\\u005b", "\\u003a") if json else ("\\x5b", "\\x3a")
    line = line.replace("##[", "##" + bracket)
    lead = _LINE_LEAD.match(line)
    start = lead.end() if lead else 0
    if line.startswith("::", start):
        name = re.split(r"[ :]", line[start + 2:], maxsplit=1)[0]
        if name not in allowed:
            line = line[:start] + colon + line[start + 1:]
    return line


def guard(text: str, *, json: bool = False, allowed: Iterable[str] = ()) -> str:
    """Break every line of a finished output that a CI runner would read as a command.

    `allowed` names the commands the caller wrote on purpose (the github format's
    `::warning ...::`); with `json`, the escapes are valid inside a JSON string.
    """
    allowed = frozenset(allowed)
    parts = _LINE_BREAKS.split(text)
    # split() with a group alternates line, break, line, ...: guard the lines only.
    return "".join(part if index % 2 else _guard_line(part, json=json, allowed=allowed)
                   for index, part in enumerate(parts))


# -- the one reader of files from outside ----------------------------------------------


class FileRefused(Exception):
    """Why `read_bounded()` did not return a file's bytes.

    kind:   "link", "denied", "open", "special", "read" or "large", so each caller can
            word its refusal; reason: the same as a phrase ("it is a symbolic link").
    """

    def __init__(self, kind: str, reason: str) -> None:
        super().__init__(reason)
        self.kind = kind
        self.reason = reason


def read_bounded(path: str | os.PathLike[str], limit: int, *, follow_links: bool = False,
                 dir_fd: int | None = None) -> bytes:
    """The bytes of the regular file `path`, at most `limit` of them, or FileRefused.

    Every file the tree or the user's configuration names is read here: without it a
    manifest that is a link to /dev/zero was read whole (2.4 GB in 8 s), a FIFO blocked
    the open, and a link made a host file the configuration. O_NOFOLLOW refuses a link
    (unless the caller says a link is fine, as for the user's own files), O_NONBLOCK keeps
    a FIFO from blocking the open, fstat refuses anything but a regular file, and at most
    `limit` + 1 bytes are ever read. A file that does not exist raises FileNotFoundError.
    `dir_fd`: `path` is relative to that directory, opened by a walk that followed no link
    (depcache/skeleton.py), so no directory on the way can be swapped for a link.
    """
    flags = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | (0 if follow_links else os.O_NOFOLLOW)
    try:
        fd = os.open(path, flags, dir_fd=dir_fd)
    except FileNotFoundError:
        raise
    except ValueError:  # a NUL byte in a name the outside chose: exit 4 where it escaped
        raise FileRefused("open", "its name holds a NUL byte") from None
    except OSError as error:
        if error.errno == errno.ELOOP:
            raise FileRefused("link", "it is a symbolic link; only regular files are read") from None
        if isinstance(error, PermissionError):
            raise FileRefused("denied", "this user may not read it (permission denied)") from None
        raise FileRefused("open", f"it cannot be opened ({error.strerror or error})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise FileRefused("special", "it is not a regular file")
        chunks: list[bytes] = []
        size = 0
        while size <= limit and (chunk := os.read(fd, min(1 << 20, limit + 1 - size))):
            chunks.append(chunk)
            size += len(chunk)
    except OSError as error:
        raise FileRefused("read", f"reading it failed ({error.strerror or error})") from None
    finally:
        os.close(fd)
    if size > limit:
        raise FileRefused("large", f"it is larger than {limit} bytes")
    return b"".join(chunks)


def parse_toml(data: bytes) -> dict[str, Any]:
    """`data` as TOML, or FileRefused("toml", why) saying why not in words a refusal quotes.

    tomllib recurses once per nesting level: `a = [[[[...` a few thousand deep raised
    RecursionError (exit 4, "a bug"), and a 5,000-digit integer a bare ValueError (past
    Python's int-to-str digit limit, 4300). Every TOML file from outside (the tree's
    manifests and lockfile, the user's cargo configuration) is parsed here."""
    try:
        return tomllib.loads(data.decode("utf-8"))
    except UnicodeDecodeError:
        why = "it is not UTF-8"
    except tomllib.TOMLDecodeError as error:
        why = f"it is not valid TOML ({error})"
    except RecursionError:
        why = "its TOML is nested too deeply to parse"
    except ValueError:
        why = "it holds a number too long to read"
    raise FileRefused("toml", why)
