"""Clippy's machine-applicable suggestions as byte edits, applied as cargo fix applies them.

`lint clippy --fix` edits the host worktree with what the guest's rustc suggested. The
guest is hostile, so this module is the whole of what decides an edit, and it is pure:
bytes in, bytes out, no file opened (lint/fix.py reads and writes, through one door).

Guarantees:
- Only what cargo fix takes: replacements whose `suggestion_applicability` is
  `MachineApplicable`, grouped per diagnostic as rustfix's `collect_suggestions` groups
  them (every child's spans, one suggestion per diagnostic), ranged by rustc's
  `byte_start`/`byte_end` (rustfix's range: never the line and column, which are code
  points and would be a second, disagreeing reading of the same span).
- Bounded: at most MAX_SUGGESTIONS suggestions per round, MAX_REPLACEMENTS parts in one,
  MAX_PARTS parts in all, MAX_REPLACEMENT_BYTES bytes in one part, MAX_FILE_BYTES per file before and after; past
  any bound the round is refused (`HostileSuggestion`), never cut: half a round of fixes
  is a tree nobody asked for.
- Checked against the bytes the guest saw (the staged copy, read by the caller): a part
  whose range is reversed, past the end of its file (rustc's byte offsets are its source
  map's; past a file's end is another file's), or starts or ends inside a UTF-8
  character, or whose replacement is not UTF-8 or holds a NUL, refuses the round. So do
  two parts of one suggestion that overlap (rustc never suggests that).
- A suggestion naming a file outside the repository (rustc's `/rustc/...` sources, a
  registry crate) is skipped and counted, as cargo skips what it cannot read; one whose
  parts are in two files is skipped and counted, as cargo's `rustfix_and_fix` does
  ("rejecting as it changes multiple files").
- Overlaps between suggestions are resolved as rustfix 0.9 does (cargo 1.95): per file,
  suggestions are applied in reverse order of the stream (`suggestions.iter().rev()`),
  each whole or not at all; a part that overlaps one already applied fails its whole
  suggestion (counted in `conflicts`, retried in the next round), except the same range
  with the same text, which is taken as already done (`identical`, never retried: rustc
  repeats a diagnostic per target). An insertion (empty range) may touch a replacement
  but not another insertion at the same place.
"""

from __future__ import annotations

import bisect
import difflib
import json
import re
from dataclasses import dataclass, field

from roteiro_py.clippy.parse import MAX_LINE_BYTES, PathLayout
from roteiro_py.errors import HostileSuggestion

#: Suggestions taken from one lint's stream. The demo workspace has 9; a large crate's
#: first `cargo clippy --fix` a few hundred.
MAX_SUGGESTIONS = 10_000
#: Parts of one suggestion (rustc's largest, an import list rewritten, has tens).
MAX_REPLACEMENTS = 64
#: Parts of all the suggestions of one lint: a round of this many is decided in under 2 s
#: at worst (measured; 640,000 took 158 s), and a real first --fix has a few thousand.
MAX_PARTS = 65_536
#: Bytes of one part's replacement text.
MAX_REPLACEMENT_BYTES = 64 * 1024
#: Bytes of a file edited, before and after (a source file rustc reads is far smaller).
MAX_FILE_BYTES = 8 * 1024 * 1024
#: Children of one diagnostic and spans of one child looked at.
_MAX_SCANNED = 256


@dataclass(frozen=True)
class Replacement:
    """Bytes [start, end) of `path` (repository-relative) replaced by `text`."""

    path: str
    start: int
    end: int
    text: bytes


@dataclass(frozen=True)
class Suggestion:
    """One diagnostic's machine-applicable parts, all in `path`: applied whole or not at all."""

    path: str
    message: str
    replacements: tuple[Replacement, ...]


@dataclass
class Suggestions:
    """What one lint's stream suggests, and what was skipped as cargo skips it."""

    found: list[Suggestion] = field(default_factory=list)
    outside: int = 0
    multi_file: int = 0
    #: Suggestions of a unit whose rustc reported an error.
    broken: int = 0
    #: The units whose rustc reported an error (cargo fix backs out edits that add one).
    broken_units: frozenset[tuple[str, str, str]] = frozenset()


def _offset(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_FILE_BYTES:
        return None
    return value


def _parts(diag: dict[str, object], layout: PathLayout, out: Suggestions) -> list[Replacement] | None:
    """The MachineApplicable parts of `diag` (rustfix's `collect_span` over every child),
    None when it has none or they cannot be applied here (counted)."""
    parts: list[Replacement] = []
    outside = False
    children = diag.get("children")
    for child in children[:_MAX_SCANNED] if isinstance(children, list) else []:
        spans = child.get("spans") if isinstance(child, dict) else None
        for span in spans[:_MAX_SCANNED] if isinstance(spans, list) else []:
            if not isinstance(span, dict) or span.get("suggestion_applicability") != "MachineApplicable":
                continue
            text = span.get("suggested_replacement")
            if not isinstance(text, str):
                continue
            path = layout.repo_path(span.get("file_name"))
            if path is None:
                outside = True
                continue
            start, end = _offset(span.get("byte_start")), _offset(span.get("byte_end"))
            if start is None or end is None:
                raise HostileSuggestion(path, "its byte range is not two offsets within "
                                        f"{MAX_FILE_BYTES} bytes")
            try:
                data = text.encode("utf-8")
            except UnicodeEncodeError:
                raise HostileSuggestion(path, "its replacement is not UTF-8") from None
            if len(data) > MAX_REPLACEMENT_BYTES:
                raise HostileSuggestion(path, f"a replacement of {len(data)} bytes (at most "
                                        f"{MAX_REPLACEMENT_BYTES})")
            if b"\x00" in data:
                raise HostileSuggestion(path, "its replacement holds a NUL byte")
            parts.append(Replacement(path=path, start=start, end=end, text=data))
            if len(parts) > MAX_REPLACEMENTS:
                raise HostileSuggestion(path, f"one suggestion of more than {MAX_REPLACEMENTS} parts")
    if outside:
        out.outside += 1
        return None
    if len({part.path for part in parts}) > 1:
        out.multi_file += 1
        return None
    return parts or None


def _unit(message: dict[str, object]) -> tuple[str, str, str]:
    """The compilation unit a message is from: cargo fix runs one rustc per unit."""
    target = message.get("target")
    target = target if isinstance(target, dict) else {}
    return (str(message.get("package_id"))[:512], str(target.get("name"))[:256],
            str(target.get("kind"))[:256])


def _messages(stdout: bytes) -> list[dict[str, object]]:
    out = []
    for raw in stdout.split(b"\n"):
        if not raw.strip() or len(raw) > MAX_LINE_BYTES:
            continue
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            continue
        if (isinstance(message, dict) and message.get("reason") == "compiler-message"
                and isinstance(message.get("message"), dict)):
            out.append(message)
    return out


def _broken(messages: list[dict[str, object]]) -> frozenset[tuple[str, str, str]]:
    return frozenset(_unit(m) for m in messages if isinstance(m["message"], dict)
                     and str(m["message"].get("level", "")).startswith("error"))


def units_with_errors(stdout: bytes) -> frozenset[tuple[str, str, str]]:
    """The units (package, target) whose rustc reported an error in this stream."""
    return _broken(_messages(stdout))


def machine_applicable(stdout: bytes, layout: PathLayout) -> Suggestions:
    """Every MachineApplicable suggestion in cargo's `--message-format=json` stdout, in
    the stream's order; raises HostileSuggestion for one that cannot be honest. A unit
    (package and target) with an error is not fixed: cargo fix applies nothing when its
    rustc fails (`rustfix_and_fix`), and counts nothing for it (`broken`)."""
    messages = _messages(stdout)
    broken = _broken(messages)
    out = Suggestions(broken_units=broken)
    total = 0
    for message in messages:
        diag = message["message"]
        assert isinstance(diag, dict)
        parts = _parts(diag, layout, out)
        if parts is None:
            continue
        if _unit(message) in broken:
            out.broken += 1
            continue
        if len(out.found) >= MAX_SUGGESTIONS:
            raise HostileSuggestion(parts[0].path, f"more than {MAX_SUGGESTIONS} suggestions in one lint")
        total += len(parts)
        if total > MAX_PARTS:
            raise HostileSuggestion(parts[0].path, f"more than {MAX_PARTS} parts of suggestions in one lint")
        title = diag.get("message")
        out.found.append(Suggestion(path=parts[0].path, message=title if isinstance(title, str) else "",
                                    replacements=tuple(parts)))
    return out


def _boundary(data: bytes, offset: int) -> bool:
    """`offset` does not fall inside a UTF-8 character of `data` (a continuation byte)."""
    return offset == len(data) or not 0x80 <= data[offset] <= 0xBF


def check(suggestion: Suggestion, original: bytes) -> None:
    """Refuse a suggestion that cannot be an edit of `original`, the bytes the guest saw."""
    if len(original) > MAX_FILE_BYTES:
        raise HostileSuggestion(suggestion.path, f"the file is larger than {MAX_FILE_BYTES} bytes")
    ranges = []
    for part in suggestion.replacements:
        if part.path != suggestion.path:
            raise HostileSuggestion(part.path, f"one part is in {suggestion.path}, another here")
        if part.start < 0:
            raise HostileSuggestion(part.path, f"its range starts at {part.start}, before the file")
        if part.start > part.end:
            raise HostileSuggestion(part.path, f"its range {part.start}..{part.end} is reversed")
        if part.end > len(original):
            raise HostileSuggestion(part.path, f"its range {part.start}..{part.end} ends past the "
                                    f"file's {len(original)} bytes, in another file")
        if not (_boundary(original, part.start) and _boundary(original, part.end)):
            raise HostileSuggestion(part.path, f"its range {part.start}..{part.end} splits a "
                                    "UTF-8 character")
        ranges.append((part.start, part.end))
    ranges.sort()
    for (start, end), (later, later_end) in zip(ranges, ranges[1:], strict=False):
        if later < end or (start == end == later == later_end):
            raise HostileSuggestion(suggestion.path, f"two of its parts overlap at {later}..{end}")


@dataclass
class _Part:
    start: int
    end: int
    text: bytes


class _Edits:
    """rustfix's `Data` (replace.rs): replaced ranges kept sorted, none overlapping, with
    their keys beside them for bisect (one insertion per part: a round of n parts is
    decided in about n log n comparisons, never n squared)."""

    def __init__(self) -> None:
        self.parts: list[_Part] = []
        self.keys: list[tuple[int, int]] = []

    def clash(self, start: int, end: int, text: bytes) -> str | None:
        """None when [start, end) may be replaced; else "identical" (the part it meets
        has the same text: rustfix's `is_identical`) or "overlap" (replace_range)."""
        taken, at = self.parts, bisect.bisect_left(self.keys, (start, end))
        if at > 0 and start < taken[at - 1].end:
            return "identical" if taken[at - 1].text == text else "overlap"
        if at < len(taken) and (end > taken[at].start or (taken[at].start, taken[at].end) == (start, end)):
            return "identical" if taken[at].text == text else "overlap"
        return None

    def apply(self, suggestion: Suggestion) -> str | None:
        """Apply every part or none; returns None, "identical" or "overlap". The parts of
        one suggestion never meet each other (`check` refused that), so each is judged
        against what was applied before it alone."""
        for part in suggestion.replacements:
            why = self.clash(part.start, part.end, part.text)
            if why is not None:
                return why
        for part in suggestion.replacements:
            at = bisect.bisect_left(self.keys, (part.start, part.end))
            self.keys.insert(at, (part.start, part.end))
            self.parts.insert(at, _Part(part.start, part.end, part.text))
        return None

    def render(self, original: bytes) -> bytes:
        out, at = [], 0
        for part in self.parts:
            out.append(original[at:part.start])
            out.append(part.text)
            at = part.end
        out.append(original[at:])
        return b"".join(out)


@dataclass
class FileFix:
    """One file's round: its bytes as the guest saw them and with the edits applied."""

    path: str
    original: bytes
    fixed: bytes
    applied: int = 0
    conflicts: int = 0
    identical: int = 0


def apply_round(suggestions: list[Suggestion], originals: dict[str, bytes]) -> list[FileFix]:
    """Every suggestion checked (all before any is applied), then applied per file as
    rustfix does; `originals` holds the staged bytes of each file a suggestion names."""
    by_file: dict[str, list[Suggestion]] = {}
    for suggestion in suggestions:
        check(suggestion, originals[suggestion.path])
        by_file.setdefault(suggestion.path, []).append(suggestion)
    fixes = []
    for path, group in by_file.items():
        edits, fix = _Edits(), FileFix(path=path, original=originals[path], fixed=originals[path])
        for suggestion in reversed(group):
            outcome = edits.apply(suggestion)
            if outcome is None:
                fix.applied += 1
            elif outcome == "identical":
                fix.identical += 1
            else:
                fix.conflicts += 1
        fix.fixed = edits.render(fix.original)
        if len(fix.fixed) > MAX_FILE_BYTES:
            raise HostileSuggestion(path, f"the fixed file would be larger than {MAX_FILE_BYTES} bytes")
        fixes.append(fix)
    return fixes


#: A diff header name written as it is; any other is quoted as git quotes it.
_PLAIN_NAME = re.compile(r"[A-Za-z0-9._/+-]+")


def _diff_name(prefix: str, path: str) -> str:
    """`prefix/path` for a diff header, C-quoted as git writes it (GNU patch reads it back)
    unless it is plain: a tree's file name may hold a newline (a forged header: another
    file for patch to write), a tab or a space (the name ends there for patch), or ESC."""
    name = f"{prefix}/{path}"
    if _PLAIN_NAME.fullmatch(name):
        return name
    out = []
    for byte in name.encode("utf-8", "surrogateescape"):
        if byte in b'"\\':
            out.append("\\" + chr(byte))
        elif 0x20 <= byte < 0x7F:
            out.append(chr(byte))
        else:
            out.append(f"\\{byte:03o}")
    return '"' + "".join(out) + '"'


def _lines(text: str) -> list[str]:
    """`text` split after each `\\n` only, as patch(1) reads lines (str.splitlines() also
    splits at a form feed, U+2028, a lone CR...: a hunk patch cannot apply)."""
    pieces = text.split("\n")
    return [piece + "\n" for piece in pieces[:-1]] + ([pieces[-1]] if pieces[-1] else [])


def unified_diff(fixes: list[FileFix]) -> str:
    """The round as a unified diff `patch -p1` applies from the repository root."""
    chunks = []
    for fix in fixes:
        if fix.fixed == fix.original:
            continue
        before = _lines(fix.original.decode("utf-8", "surrogateescape"))
        after = _lines(fix.fixed.decode("utf-8", "surrogateescape"))
        lines = list(difflib.unified_diff(before, after, _diff_name("a", fix.path),
                                          _diff_name("b", fix.path)))
        for line in lines:
            chunks.append(line if line.endswith("\n") else line + "\n\\ No newline at end of file\n")
    return "".join(chunks)
