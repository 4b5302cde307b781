"""The lines a change added, read from the unified diff a CI wrote (`--diff FILE`).

The diff is parsed here, in Python: the tool never runs git (or anything else) in the
tree on the host. What it reads is hostile: the paths are the branch's file names and
the content lines are the branch's code, so

- the file is read through the one reader (untrusted.read_bounded: no link, no FIFO, at
  most MAX_DIFF_BYTES); a NUL byte anywhere is refused (not a text diff);
- every loop has a bound: MAX_DIFF_FILES files, MAX_DIFF_HUNKS hunks, MAX_ADDED_RUNS runs
  of consecutive added lines over the whole diff, MAX_PATH_CHARS characters a path; past
  one the diff is refused, naming the bound (a diff cut short would call findings on the
  lines it dropped "outside the diff", so nothing is guessed);
- a path is git's quoted or plain name, `a/`/`b/` stripped, then made exactly what a
  finding's path is (report.model.repo_path: sanitised, relative, normalised); an
  absolute path, a `..` component or anything else a finding could never carry is
  refused with the line it is on;
- in a `diff --git` section the names must carry git's `a/` and `b/` (the `diff --git`,
  `---` and `+++` lines; /dev/null has none): with `diff.mnemonicPrefix` (`+++ w/x.rs`),
  `diff.noprefix` or `--no-prefix` no added line's path would be a finding's, every
  finding would be "outside the diff" and the run would pass, so such a diff is refused
  with the line and the options that write it right. (A plain diff, with no `diff --git`
  line, has no convention to check: `b/` is stripped when there. compare/ checks that
  the files a diff adds lines to are in the tree, which `--relative` also fails.);
- text that names no file (no `diff --git` or `+++` line) is refused: it is not a diff.
  An empty file (nothing but whitespace) is the diff of a change that adds nothing, as
  `git diff BASE...HEAD` writes it for a pull request with no net change: no line is
  added, so no finding is in the diff, and every renderer says "adds no lines". (Until
  issue 23 it was refused, as what a `git diff ... > pr.diff || true` that failed writes;
  that made every such pull request fail the Action as a usage error. A command that
  writes the diff must fail its job when git fails: docs/ADOPTING.md says so.);
- a file whose lines the diff does not show (git's `Binary files A and B differ`, or a
  `GIT binary patch`) is never read as a file that added nothing. The branch chooses
  that: its `.gitattributes` can say `*.rs -diff` (and a NUL byte in a file does the
  same), and a warning on a line so hidden would be "outside the diff" and pass. A `.rs`
  file so hidden refuses the diff (`DiffError.hidden` names it; errors.DiffHidesLines
  gives the command that writes it with the branch's attributes ignored); any other file
  (an image, or a `#[path]`/`include!` source with another name) is recorded as changed
  whole (`ChangedLines.opaque`): a finding in it is in the diff;
- content lines are only counted, never kept: what is kept of a file is its added lines
  as runs (two arrays of line numbers), 16 bytes a run whatever the lines held. The
  slowest diff within the bounds, 32 MiB of one-character added lines (16M lines),
  parses in ~5 s; the diff that makes the most runs (2M), in ~1.3 s.

Read: `diff --git` sections with `rename from/to`, `--- `/`+++ ` (`/dev/null` for an
added or deleted file, a tab and a timestamp after a name, as GNU diff writes them),
hunks `@@ -a,b +c,d @@` whose counts say where each ends, `\\ No newline at end of file`,
CRLF line ends, an empty line in a hunk as an empty context line (editors strip the
space), binary entries as above, and anything else between files (index, modes, similarity)
skipped. A combined diff (`@@@`, a merge's) is refused: it has no one "new file".
"""

from __future__ import annotations

import io
import re
from array import array
from bisect import bisect_right
from dataclasses import dataclass, field

#: The largest diff read (a pull request's diff is rarely a few MiB).
MAX_DIFF_BYTES = 32 * 1024 * 1024
#: Files one diff may name (each `diff --git` section, or `+++` of a plain diff).
MAX_DIFF_FILES = 100_000
#: Hunks over the whole diff.
MAX_DIFF_HUNKS = 1_000_000
#: Runs of consecutive added lines over the whole diff (16 bytes each when kept).
MAX_ADDED_RUNS = 2_000_000
#: Characters of one path, as the report model bounds a finding's path.
MAX_PATH_CHARS = 4096

_HUNK = re.compile(rb"@@ -(\d{1,10})(?:,(\d{1,10}))? \+(\d{1,10})(?:,(\d{1,10}))? @@")
_C_ESCAPES = {ord("a"): 7, ord("b"): 8, ord("t"): 9, ord("n"): 10, ord("v"): 11, ord("f"): 12,
              ord("r"): 13, ord('"'): 34, ord("\\"): 92}


class DiffError(ValueError):
    """Why a diff is not used: `problem` as a phrase, and the line (1-based) it is on;
    `hidden`, when it is that the diff hides the lines of a Rust file, is that file."""

    def __init__(self, problem: str, line: int | None = None, *, hidden: str | None = None) -> None:
        super().__init__(problem)
        self.problem = problem
        self.line = line
        self.hidden = hidden


@dataclass
class _Runs:
    """One file's added lines as runs first..last (inclusive), in the order found."""

    firsts: array[int] = field(default_factory=lambda: array("q"))
    lasts: array[int] = field(default_factory=lambda: array("q"))

    def add(self, line: int) -> bool:
        """Record `line`; True when it started a new run."""
        if self.lasts and self.lasts[-1] == line - 1:
            self.lasts[-1] = line
            return False
        self.firsts.append(line)
        self.lasts.append(line)
        return True

    def settle(self) -> None:
        """Make the runs sorted and disjoint, so `touches` looks at one. A diff git wrote
        has them so already; a forged one can list a file's hunks twice or out of order."""
        firsts, lasts = self.firsts, self.lasts
        if all(lasts[i] + 1 < firsts[i + 1] for i in range(len(firsts) - 1)):
            return
        merged_firsts: array[int] = array("q")
        merged_lasts: array[int] = array("q")
        for first, last in sorted(zip(firsts, lasts, strict=True)):
            if merged_lasts and first <= merged_lasts[-1] + 1:
                merged_lasts[-1] = max(merged_lasts[-1], last)
            else:
                merged_firsts.append(first)
                merged_lasts.append(last)
        self.firsts, self.lasts = merged_firsts, merged_lasts

    def touches(self, first: int, last: int) -> bool:
        """Whether any of lines first..last is added (the runs are settled)."""
        index = bisect_right(self.firsts, last) - 1
        return index >= 0 and self.lasts[index] >= first


@dataclass
class ChangedLines:
    """What a diff changed: the lines it added, by path in the new tree, the files it
    renamed (old path -> new path), and the files it changed without showing their lines
    (binary entries: every line of them counts as added)."""

    added: dict[str, _Runs] = field(default_factory=dict)
    renamed: dict[str, str] = field(default_factory=dict)
    opaque: set[str] = field(default_factory=set)

    @property
    def files(self) -> int:
        """Files the diff adds lines to."""
        return sum(1 for runs in self.added.values() if runs.firsts)

    def touches(self, path: str, first: int, last: int) -> bool:
        """Whether the diff added any of lines first..last of `path` (the new tree's)."""
        if path in self.opaque:
            return True
        runs = self.added.get(path)
        return runs is not None and runs.touches(first, max(first, last))


def _unquote(value: bytes, number: int) -> tuple[bytes, bytes]:
    """A C-style quoted name as git writes one (`"a/caf\\303\\251 \\"x\\".rs"`): its bytes
    and what follows the closing quote."""
    out = bytearray()
    index = 1
    while index < len(value):
        byte = value[index]
        if byte == ord('"'):
            return bytes(out), value[index + 1:]
        if byte == ord("\\"):
            escape = value[index + 1: index + 2]
            octal = value[index + 1: index + 4]
            if re.fullmatch(rb"[0-3][0-7][0-7]", octal):
                out.append(int(octal, 8))
                index += 4
                continue
            if escape and escape[0] in _C_ESCAPES:
                out.append(_C_ESCAPES[escape[0]])
                index += 2
                continue
            raise DiffError("a quoted file name has an escape git does not write", number)
        out.append(byte)
        index += 1
    raise DiffError("a quoted file name has no closing quote", number)


#: What a refusal for a missing prefix says to do (errors.DiffUnusable shows the command).
_PREFIX_FIX = ("git wrote it with diff.mnemonicPrefix, diff.noprefix or --no-prefix; write it with "
               "--src-prefix=a/ --dst-prefix=b/")


def _shown(raw: bytes) -> str:
    """A name from the diff as a refusal quotes it (the guidance prints it safely)."""
    return repr(raw.decode("utf-8", errors="replace")[:200])


def _name(value: bytes, number: int, *, prefix: bytes | None, required: bool = False) -> str | None:
    """The path a header names, as a finding's path would be; None for /dev/null. With
    `required` (a `diff --git` section's `---`/`+++`), a name without `prefix` is refused."""
    # lazy: report/ is pydantic; the conductor imports compare/ at its top
    # (compare/__init__.py read_baseline)
    from roteiro_py.report.model import repo_path

    if value.startswith(b'"'):
        raw, _ = _unquote(value, number)
    else:
        raw = value.split(b"\t", 1)[0]  # GNU diff's timestamp; git's tab after a name with a space
    if raw == b"/dev/null" and prefix is not None:
        return None
    if prefix is not None and raw.startswith(prefix):
        raw = raw[len(prefix):]
    elif prefix is not None and required:
        raise DiffError(f"the file name {_shown(raw)} does not start with `{prefix.decode()}` "
                        f"({_PREFIX_FIX})", number)
    text = raw.decode("utf-8", errors="replace")
    if len(text) > MAX_PATH_CHARS:
        raise DiffError(f"a file name is longer than {MAX_PATH_CHARS} characters", number)
    try:
        return repo_path(text)
    except ValueError:
        raise DiffError(f"the file name {text[:200]!r} is not a path relative to the repository "
                        "root (absolute, `..`, `.` or an empty component)", number) from None


#: A `.rs` file's new name, at the end of a binary entry's line (plain or quoted).
_RUST_TAIL = (b".rs", b'.rs"')


def _new_of_pair(rest: bytes, sep: bytes, number: int, *, in_git: bool) -> str | None:
    """The new file of `OLD<sep>NEW` as git writes a pair (`diff --git a/x b/x`, `Binary
    files a/x and b/x differ`, names quoted when they need it); None for /dev/null. Plain
    names can hold `sep`: the split is the one whose two names are the same file (git's
    own rule for `diff --git`), else the only one before a `b/`; none is refused."""
    if rest.endswith(b'"'):
        start = rest.rfind(sep + b'"')  # a quote inside a quoted name is escaped: this is NEW's
        if start < 0:
            raise DiffError("a binary entry's file names cannot be told apart", number)
        return _name(rest[start + len(sep):], number, prefix=b"b/", required=in_git)
    if rest.startswith(b'"'):
        _, tail = _unquote(rest, number)
        if not tail.startswith(sep):
            raise DiffError("a binary entry's file names cannot be told apart", number)
        return _name(tail[len(sep):], number, prefix=b"b/", required=in_git)
    if rest.endswith(sep + b"/dev/null"):
        return None
    if rest.startswith(b"/dev/null" + sep):
        return _name(rest[len(b"/dev/null" + sep):], number, prefix=b"b/", required=in_git)
    half, odd = divmod(len(rest) - len(sep), 2)
    if not odd and rest[half:half + len(sep)] == sep and rest[2:half] == rest[half + len(sep) + 2:]:
        return _name(rest[half + len(sep):], number, prefix=b"b/", required=in_git)
    split = rest.find(sep + b"b/")
    if split < 0 or rest.find(sep + b"b/", split + 1) >= 0:
        raise DiffError("a binary entry's file names cannot be told apart", number)
    return _name(rest[split + len(sep):], number, prefix=b"b/", required=in_git)


def _hidden(path: str | None, tail: bytes, number: int, changed: ChangedLines) -> None:
    """A binary entry of `path` (None: deleted): refused for a Rust file (`tail`, the end
    of the line naming it, says so whatever the names hold), else the file counts as
    changed whole."""
    if path is None:
        return
    if tail.endswith(_RUST_TAIL):
        raise DiffError(f"it hides the lines of {path[:200]!r}: git wrote it as binary, so no line "
                        "it adds can be checked", number, hidden=path)
    changed.opaque.add(path)


def _count(value: bytes | None) -> int:
    return 1 if value is None else int(value)


def parse_diff(data: bytes) -> ChangedLines:
    """The lines `data` (a unified diff) adds and the files it renames, or DiffError."""
    if len(data) > MAX_DIFF_BYTES:
        raise DiffError(f"it is larger than {MAX_DIFF_BYTES} bytes")
    nul = data.find(b"\0")
    if nul >= 0:
        raise DiffError(f"it has a NUL byte (at offset {nul}); a diff is text", data.count(b"\n", 0, nul) + 1)
    changed = ChangedLines()
    files = hunks = runs = 0
    runs_of: _Runs | None = None      # the current file's, once its `+++` named it
    has_new = False                   # the current section's `+++` was read
    in_git = False                    # the current section began with `diff --git`
    rename_from: str | None = None
    section_names = b""               # the current `diff --git` line's names
    section_new: str | None = None    # its `rename to`, when it has one
    deleted = False                   # its `deleted file mode`
    old_left = new_left = 0           # lines of the current hunk still to come
    line_number = 0                   # the new file's line the next line of a hunk is
    number = 0
    for number, line in enumerate(io.BytesIO(data), start=1):
        line = line.removesuffix(b"\n")
        if old_left or new_left:
            mark = line[:1]
            if mark in (b" ", b"", b"\r"):
                old_left -= 1
                new_left -= 1
                line_number += 1
            elif mark == b"-":
                old_left -= 1
            elif mark == b"+":
                new_left -= 1
                if runs_of is None:
                    raise DiffError("a hunk adds lines to /dev/null", number)
                if runs_of.add(line_number):
                    runs += 1
                    if runs > MAX_ADDED_RUNS:
                        raise DiffError(f"it has more than {MAX_ADDED_RUNS} runs of added lines", number)
                line_number += 1
            elif mark == b"\\":
                continue
            elif line.startswith(b"\x1b["):
                raise DiffError("it has colour codes; write it with `git diff --no-color`", number)
            else:
                raise DiffError("a hunk ends before the line counts of its header say it does", number)
            if old_left < 0 or new_left < 0:
                raise DiffError("a hunk has more lines than its header says", number)
            continue
        line = line.removesuffix(b"\r")
        if line.startswith(b"diff --git ") or line.startswith(b"diff --cc ") or line.startswith(b"diff --combined "):
            if not line.startswith(b"diff --git "):
                raise DiffError("it is a combined diff (of a merge); diff the merge base with the "
                                "head instead (`git diff BASE...HEAD`)", number)
            names = line[len(b"diff --git "):]
            if not names.startswith((b"a/", b'"a/')):
                raise DiffError(f"the names {_shown(names)} do not start with `a/` and `b/` "
                                f"({_PREFIX_FIX})", number)
            files += 1
            if files > MAX_DIFF_FILES:
                raise DiffError(f"it names more than {MAX_DIFF_FILES} files", number)
            runs_of, has_new, in_git, rename_from = None, False, True, None
            section_names, section_new, deleted = names, None, False
        elif line.startswith(b"deleted file mode ") and in_git:
            deleted = True
        elif line.startswith(b"Binary files ") and line.endswith(b" differ"):
            pair = line[len(b"Binary files "):-len(b" differ")]
            if not in_git:  # GNU diff -r: the entry is the file's whole section
                files += 1
                if files > MAX_DIFF_FILES:
                    raise DiffError(f"it names more than {MAX_DIFF_FILES} files", number)
            path = section_new if section_new is not None and not pair.endswith(b" and /dev/null") \
                else _new_of_pair(pair, b" and ", number, in_git=in_git)
            _hidden(path, pair, number, changed)
        elif line == b"GIT binary patch" and in_git:
            path = None if deleted else section_new if section_new is not None \
                else _new_of_pair(section_names, b" ", number, in_git=True)
            _hidden(path, section_names, number, changed)
        elif line.startswith(b"--- ") and in_git:
            _name(line[4:], number, prefix=b"a/", required=True)  # only checked: the old name
        elif line.startswith(b"rename from "):
            rename_from = _name(line[len(b"rename from "):], number, prefix=None)
        elif line.startswith(b"rename to ") and rename_from is not None:
            target = _name(line[len(b"rename to "):], number, prefix=None)
            assert target is not None
            changed.renamed[rename_from] = target
            rename_from, section_new = None, target
        elif line.startswith(b"+++ "):
            if has_new or not in_git:  # a plain diff: no `diff --git` line between files
                files += 1
                if files > MAX_DIFF_FILES:
                    raise DiffError(f"it names more than {MAX_DIFF_FILES} files", number)
            has_new = True
            path = _name(line[4:], number, prefix=b"b/", required=in_git)
            runs_of = None if path is None else changed.added.setdefault(path, _Runs())
        elif line.startswith(b"@@@"):
            raise DiffError("it is a combined diff (of a merge); diff the merge base with the "
                            "head instead (`git diff BASE...HEAD`)", number)
        elif line.startswith(b"@@ "):
            header = _HUNK.match(line)
            if header is None:
                raise DiffError("a hunk header is not `@@ -a,b +c,d @@`", number)
            if not has_new:
                raise DiffError("a hunk comes before the `+++` line naming its file", number)
            hunks += 1
            if hunks > MAX_DIFF_HUNKS:
                raise DiffError(f"it has more than {MAX_DIFF_HUNKS} hunks", number)
            old_left, new_left = _count(header.group(2)), _count(header.group(4))
            line_number = int(header.group(3))
        elif line.startswith(b"\x1b["):
            raise DiffError("it has colour codes; write it with `git diff --no-color`", number)
    if old_left or new_left:
        raise DiffError("it ends inside a hunk (was it cut short?)", number)
    if not files and data.strip():
        raise DiffError("it has no `diff --git` or `+++` line: not a unified diff")
    for file_runs in changed.added.values():
        file_runs.settle()
    return changed
