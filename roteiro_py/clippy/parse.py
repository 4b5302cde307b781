"""Clippy's JSON message stream, parsed into findings located in the repository.

Input is the guest's stdout as bytes: untrusted. Guarantees:
- Bounded: a line longer than MAX_LINE_BYTES is not parsed (counted); JSON nesting that
  blows the recursion limit is counted, not raised; every number and string is checked
  for type and range before use, and every string goes through the report model's
  sanitizer.
- Lines that are not JSON (cargo writes only JSON to stdout, but a hostile guest need
  not) and JSON that is not a cargo message are ignored and counted
  (`ignored_lines`), never fatal: one bad line must not hide the findings around it.
- Deduplicated: under --all-targets cargo checks a crate once per target (lib, test,
  bin) and rustc repeats each diagnostic for each; they are keyed on (code, level,
  message, primary location) and reported once.
- Bounded work after the VM: at most MAX_FINDINGS findings are kept (the rest are
  counted in `dropped_findings`, and the report says so), each source file is read once
  for all of its findings (report/snippet.py), and past `deadline` (the run's, [vm]
  timeout_s) parsing stops with errors.DeadlineExceeded: without it, 3,000 diagnostics
  pointing into one 8 MB file cost 73 s of host CPU after the deadline had passed.
- Summaries are not findings: rustc's "N warnings emitted" / "aborting due to ..." and
  `failure-note` lines ("For more information about this error, try ...") have no span
  and no code and restate the others. (cargo 1.95 already filters most; older ones did
  not.) A spanless diagnostic that is not such a summary is kept, with no location.
- Paths are relative to the repository root. rustc's `file_name` is relative to the cargo
  workspace root, which may be a subfolder (`PathLayout.workspace`); an absolute path is
  accepted only under the guest's mount of the repository (`PathLayout.guest_root`).
  After normalisation, a path that leaves the repository (`..` past the root, another
  absolute path, `<macro>` pseudo-files) is outside.
- Every label as cargo shows it (issue 23): the primary span's (`Finding.label`, "expected
  `u32`, found `&str`") and each secondary span's (`Finding.related`, "expected due to
  this"), each cut at MAX_LABEL_CHARS, at most MAX_RELATED secondary spans. rustc's
  `code.explanation` (the whole text of `rustc --explain`) is not kept: the code is, and
  the human report prints the explain line from it (report/human.py).
- Children as cargo shows them (issue 13): every part of a suggestion, not the first
  (`bool_assert_comparison` is three edits; its first alone read "suggestion: `assert`"),
  the notes ("`#[warn(...)]` on by default") and the doc link, each bounded
  (MAX_CHILDREN, MAX_FIXES, MAX_EDITS). A suggestion with a part outside the repository
  or an invalid span is not kept at all: half a fix would read as the whole one. Its
  lines before and after are computed from the staged copy (the snippet's reader, never
  the guest's `text`), only for edits within MAX_LINES lines of one file that do not
  overlap; otherwise the edits are kept without them.
- Build scripts' `cargo::warning=` lines reach cargo's stderr, not its JSON (measured
  with cargo 1.95: `warning: <package>@<version>: <text>`, replayed when the build
  script is fresh): `build_script_warnings()` reads them from stderr, at most
  MAX_BUILD_SCRIPT_WARNINGS distinct ones kept, the rest counted.
- A diagnostic whose primary span is outside the repository is located at its macro
  call site when one is inside (rustc's `expansion.span` chain, e.g. a lint inside a
  `std` macro used by the tree). Failing that it is dropped and counted
  (`outside_repository`): its location cannot be shown, annotated or fixed in this
  repository, and clippy caps lints of registry and out-of-workspace crates anyway, so
  what remains there are hard errors of dependencies, which classify.py keeps as the
  explanation of a failed build (`dropped_errors`) rather than as findings.
"""

from __future__ import annotations

import json
import posixpath
import re
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from pydantic import ValidationError

from roteiro_py.errors import DeadlineExceeded
from roteiro_py.report.model import (
    DOC_URL,
    MAX_BUILD_SCRIPT_WARNINGS,
    MAX_CHILDREN,
    MAX_EDITS,
    MAX_FINDINGS,
    MAX_FIXES,
    MAX_RELATED,
    BuildScriptWarning,
    Child,
    Edit,
    Finding,
    Fix,
    Location,
)
from roteiro_py.report.snippet import MAX_LINE_CHARS, MAX_LINES, SnippetReader

#: rustc's longest diagnostics (long type names, embedded explanations) are tens of KiB.
MAX_LINE_BYTES = 1024 * 1024
#: Messages of dropped error-level diagnostics kept to explain a failed build (the first
#: ones; the rest are only counted in `outside_repository`): a guest repeating one error
#: 20,000 times once kept 20,000 of them for a summary that shows this many.
MAX_DROPPED_ERRORS = 8
_MAX_POSITION = 10_000_000
_MAX_EXPANSION_DEPTH = 32
#: Children of one diagnostic looked at; rustc attaches a handful (notes, helps, the
#: doc link, one child per suggestion).
_MAX_CHILDREN_SCANNED = 50

_SUMMARY = re.compile(
    r"^(aborting due to .*|\d+ warnings? emitted|.* generated \d+ warnings?.*"
    r"|for more information about (this|an) error.*|some errors have detailed explanations.*)$",
    re.IGNORECASE | re.DOTALL,
)
_LEVELS = {"error": "error", "error: internal compiler error": "error", "warning": "warning",
           "note": "note", "help": "help"}


#: A diagnostic code as rustc and clippy write them: a lint (`unused_variables`,
#: `clippy::needless_return`, `rustdoc::broken_intra_doc_links`) or an error (`E0308`).
#: Anything else from the guest is dropped: the code becomes a SARIF rule id and part of
#: its Markdown help, where it must not carry a link or markup.
_CODE = re.compile(r"[a-z][a-z0-9_]{0,99}(::[a-z][a-z0-9_]{0,99})?|E[0-9]{4}")


@dataclass(frozen=True)
class PathLayout:
    """Where the workspace is in the repository, and the repository in the guest.

    workspace:  the cargo workspace root relative to the repository root ("." if same).
    guest_root: the guest's absolute path of the repository root, if known.
    """

    workspace: PurePosixPath = PurePosixPath(".")
    guest_root: PurePosixPath | None = None

    def __post_init__(self) -> None:
        if self.workspace.is_absolute() or ".." in self.workspace.parts:
            raise ValueError(f"workspace must be inside the repository: {self.workspace}")
        if self.guest_root is not None and not self.guest_root.is_absolute():
            raise ValueError(f"guest_root must be absolute: {self.guest_root}")

    def repo_path(self, file_name: object) -> str | None:
        """`file_name` relative to the repository root, or None when it is outside."""
        if not isinstance(file_name, str) or not file_name or len(file_name) > 4096:
            return None
        if file_name.startswith("<") or "\x00" in file_name or "\\" in file_name:
            return None
        if file_name.startswith("/"):
            if self.guest_root is None:
                return None
            normal = posixpath.normpath(file_name)
            root = str(self.guest_root)
            if not normal.startswith(root.rstrip("/") + "/"):
                return None
            relative = normal[len(root.rstrip("/")) + 1:]
        else:
            relative = posixpath.normpath(posixpath.join(str(self.workspace), file_name))
        if relative in (".", "") or relative == ".." or relative.startswith(("../", "/")):
            return None
        # Only the workspace is shared with the guest (without its .git): a path anywhere
        # else in the repository names a file the guest never saw, and reading it for a
        # snippet would copy it into the report (a CI checkout's .git/config holds a token).
        workspace = str(self.workspace)
        if workspace != "." and not relative.startswith(workspace.rstrip("/") + "/"):
            return None
        if ".git" in relative.split("/"):
            return None
        return relative

    def workspace_path(self, repo_path: str) -> str:
        """`repo_path` (from `repo_path()`) relative to the workspace root."""
        workspace = str(self.workspace)
        return repo_path if workspace == "." else repo_path[len(workspace.rstrip("/")) + 1:]


@dataclass
class ParsedStream:
    """What the message stream said, after validation and dedupe."""

    findings: list[Finding] = field(default_factory=list)
    #: None when no `build-finished` message came; otherwise its `success`.
    build_success: bool | None = None
    outside_repository: int = 0
    #: Messages of the first MAX_DROPPED_ERRORS error-level diagnostics dropped as outside
    #: the repository.
    dropped_errors: list[str] = field(default_factory=list)
    ignored_lines: int = 0
    #: Findings past MAX_FINDINGS: counted, not kept.
    dropped_findings: int = 0
    #: cargo's compiler-artifact messages for packages from a registry or git (not the
    #: tree's own): those it found fresh, and those it compiled in this run. What the
    #: dependency cache saved is read from cargo's own `fresh` (roteiro_py/depcache/).
    dependencies_fresh: int = 0
    dependencies_compiled: int = 0
    #: The target triple rustc said "may not be installed" (E0463 for `std`/`core`): the
    #: image lacks that target's standard library (lint --target).
    missing_target: str | None = None
    summaries_skipped: int = 0
    duplicates: int = 0


def _int(value: object) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 1 <= value <= _MAX_POSITION else None


def _str(value: object) -> str | None:
    return value if isinstance(value, str) else None


def _span_location(span: object, layout: PathLayout) -> tuple[str, int, int, int, int] | None:
    """(path, line, column, end line, end column) of `span`, or None if outside/invalid."""
    for _ in range(_MAX_EXPANSION_DEPTH):
        if not isinstance(span, dict):
            return None
        path = layout.repo_path(span.get("file_name"))
        line, column = _int(span.get("line_start")), _int(span.get("column_start"))
        if path is not None and line is not None and column is not None:
            end_line = _int(span.get("line_end")) or line
            end_column = _int(span.get("column_end")) or column
            if end_line < line:
                end_line, end_column = line, column
            return path, line, column, end_line, end_column
        expansion = span.get("expansion")
        span = expansion.get("span") if isinstance(expansion, dict) else None
    return None


_NOT_INSTALLED = re.compile(r"the `([a-z0-9_.]+(?:-[a-z0-9_.]+){1,4})` target may not be installed")


def _missing_target(children: object) -> str | None:
    """The triple of rustc's "the `T` target may not be installed" note, if one says so."""
    for child in children[:50] if isinstance(children, list) else []:
        message = child.get("message") if isinstance(child, dict) else None
        found = _NOT_INSTALLED.fullmatch(message) if isinstance(message, str) else None
        if found is not None:
            return found[1]
    return None


_DOC_LINK = "for further information visit "
_COLOUR = re.compile(r"\x1b\[[0-9;]{0,32}m")
_APPLICABILITY = frozenset({"MachineApplicable", "MaybeIncorrect", "HasPlaceholders", "Unspecified"})


def _span_here(span: object, layout: PathLayout) -> tuple[str, int, int, int, int] | None:
    """(path, line, column, end line, end column) of `span` itself, never its macro call
    site: a replacement applies to the span it names, nowhere else."""
    if not isinstance(span, dict):
        return None
    path = layout.repo_path(span.get("file_name"))
    line, column = _int(span.get("line_start")), _int(span.get("column_start"))
    end_line, end_column = _int(span.get("line_end")), _int(span.get("column_end"))
    if path is None or line is None or column is None or end_line is None or end_column is None:
        return None
    if (end_line, end_column) < (line, column):
        return None
    return path, line, column, end_line, end_column


def _applied(lines: list[str], first: int, edits: list[Edit]) -> str | None:
    """`lines` (numbered from `first`) with `edits` applied, or None when an edit falls
    outside them or two overlap. Columns are code points, end exclusive (rustc's)."""
    offsets = [0]
    for text in lines:
        offsets.append(offsets[-1] + len(text) + 1)
    joined = "\n".join(lines)

    def at(line: int, column: int) -> int | None:
        index = line - first
        if not 0 <= index < len(lines) or column - 1 > len(lines[index]):
            return None
        return offsets[index] + column - 1

    spans: list[tuple[int, int, str]] = []
    for edit in edits:
        start, end = at(edit.line, edit.column), at(edit.end_line, edit.end_column)
        if start is None or end is None or end < start:
            return None
        spans.append((start, end, edit.replacement))
    spans.sort()
    for (_, end, _), (start, _, _) in zip(spans, spans[1:], strict=False):
        if start < end:
            return None
    for start, end, replacement in reversed(spans):
        joined = joined[:start] + replacement + joined[end:]
    return joined


def _shown_inline(message: str, edits: list[Edit], rendered: str) -> bool:
    """Whether cargo's text shows this one-part suggestion as a label under its span,
    `help: <message>: `<code>`` at a line's end (rustc's emitter, `primary_span_formatted`)."""
    if len(edits) != 1 or "\n" in edits[0].replacement:
        return False
    rendered = _COLOUR.sub("", rendered)  # --message-format json-diagnostic-rendered-ansi
    code = edits[0].replacement.strip()
    label = f" help: {message}: `{code}`" if code else f" help: {message}"
    return any(line.endswith(label) for line in rendered.splitlines())


def _fix(message: str, spans: list[dict[str, object]], layout: PathLayout,
         snippets: SnippetReader | None, rendered: str = "") -> Fix | None:
    """One suggestion whole, or None when any part of it cannot be kept."""
    if len(spans) > MAX_EDITS:
        return None
    edits: list[Edit] = []
    for span in spans:
        where = _span_here(span, layout)
        replacement = span.get("suggested_replacement")
        if where is None or not isinstance(replacement, str):
            return None
        path, line, column, end_line, end_column = where
        try:
            edits.append(Edit(path=path, line=line, column=column, end_line=end_line,
                              end_column=end_column, replacement=replacement))
        except ValidationError:
            return None
    if not edits:
        return None
    applicability = next((a for a in (span.get("suggestion_applicability") for span in spans)
                          if isinstance(a, str) and a in _APPLICABILITY), None)
    first = min(edit.line for edit in edits)
    last = max(edit.end_line for edit in edits)
    before = after = None
    if snippets is not None and len({edit.path for edit in edits}) == 1 and last - first < MAX_LINES:
        text = snippets.snippet(layout.workspace_path(edits[0].path), first, last)
        lines = text.split("\n") if text is not None else []
        # a line cut at the reader's bound is not the line the columns count in
        if text is not None and all(len(line) < MAX_LINE_CHARS for line in lines):
            after = _applied(lines, first, edits)
            before = text if after is not None else None
    try:
        return Fix.model_validate({"message": message, "applicability": applicability, "edits": edits,
                                   "line": first if before is not None else None,
                                   "before": before, "after": after,
                                   "inline": _shown_inline(message, edits, rendered)})
    except ValidationError:
        return None


@dataclass
class _Children:
    """What a diagnostic's children say, bounded: see the module docstring."""

    children: list[Child] = field(default_factory=list)
    fixes: list[Fix] = field(default_factory=list)
    doc_url: str | None = None


def _children(raw: object, layout: PathLayout, snippets: SnippetReader | None,
              rendered: str = "") -> _Children:
    out = _Children()
    if not isinstance(raw, list):
        return out
    for child in raw[:_MAX_CHILDREN_SCANNED]:
        if not isinstance(child, dict):
            continue
        level, message, spans = child.get("level"), _str(child.get("message")), child.get("spans")
        if level not in ("note", "help") or not message or not isinstance(spans, list):
            continue
        suggested = [span for span in spans[:_MAX_CHILDREN_SCANNED] if isinstance(span, dict)
                     and isinstance(span.get("suggested_replacement"), str)]
        if suggested:
            fix = _fix(message, suggested, layout, snippets, rendered)
            if fix is not None and len(out.fixes) < MAX_FIXES:
                out.fixes.append(fix)
            continue
        if level == "help" and not spans and message.startswith(_DOC_LINK) and out.doc_url is None:
            url = message.removeprefix(_DOC_LINK).strip()
            if DOC_URL.fullmatch(url):
                out.doc_url = url
        if len(out.children) >= MAX_CHILDREN:
            continue
        primary = next((s for s in spans if isinstance(s, dict) and s.get("is_primary") is True), None)
        where = _span_location(primary, layout) if primary is not None else None
        try:
            location = None if where is None else Location(
                path=where[0], line=where[1], column=where[2], end_line=where[3], end_column=where[4])
            out.children.append(Child(level=level, message=message, location=location))
        except ValidationError:
            continue
    return out


_BUILD_SCRIPT_WARNING = re.compile(
    r"warning: (?P<package>[A-Za-z0-9_-]{1,64})@(?P<version>[0-9]+\.[0-9]+\.[0-9]+[0-9A-Za-z.+-]{0,64}): "
    r"(?P<message>.*)")


def build_script_warnings(stderr: str) -> tuple[list[BuildScriptWarning], int]:
    """The `cargo::warning=` lines in cargo's stderr, in order, repeats dropped: the first
    MAX_BUILD_SCRIPT_WARNINGS distinct ones, and how many there were (past the cap each
    line is counted). stderr is the guest's, bounded by `[vm] output_limit_mib`; a line
    is matched only whole, from its start."""
    kept: list[BuildScriptWarning] = []
    seen: set[tuple[str, str, str]] = set()  # at most MAX_BUILD_SCRIPT_WARNINGS entries
    past = 0
    for line in stderr.splitlines():
        if not line.startswith("warning: "):
            continue
        match = _BUILD_SCRIPT_WARNING.fullmatch(line[:8192])
        if match is None:
            continue
        key = (match["package"], match["version"], match["message"])
        if key in seen:
            continue
        if len(kept) >= MAX_BUILD_SCRIPT_WARNINGS:
            past += 1  # past the cap each line counts: remembering them all is unbounded
            continue
        seen.add(key)
        try:
            kept.append(BuildScriptWarning(package=key[0], version=key[1], message=key[2]))
        except ValidationError:
            continue
    return kept, len(kept) + past


def _suggestion_and_help(children: object) -> tuple[str | None, str | None]:
    suggestion: str | None = None
    help_text: str | None = None
    if not isinstance(children, list):
        return None, None
    for child in children[:50]:
        if not isinstance(child, dict):
            continue
        message = _str(child.get("message"))
        if (help_text is None and child.get("level") == "help" and message
                and not message.startswith("for further information visit")):
            help_text = message
        spans = child.get("spans")
        if suggestion is None and isinstance(spans, list):
            for span in spans[:50]:
                if isinstance(span, dict) and isinstance(span.get("suggested_replacement"), str):
                    suggestion = span["suggested_replacement"]
                    break
    return suggestion, help_text


@dataclass(frozen=True)
class Deadline:
    """The run's deadline as time.monotonic() `at`, and its length for the refusal."""

    at: float
    seconds: float


class _Parser:
    def __init__(self, layout: PathLayout, snippets: SnippetReader | None) -> None:
        self.layout = layout
        self.snippets = snippets
        self.out = ParsedStream()
        self.seen: set[tuple[object, ...]] = set()

    def line(self, raw: bytes) -> None:
        if not raw.strip():
            return
        if len(raw) > MAX_LINE_BYTES:
            self.out.ignored_lines += 1
            return
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            self.out.ignored_lines += 1
            return
        reason = message.get("reason") if isinstance(message, dict) else None
        if reason == "compiler-message":
            if not self.diagnostic(message.get("message")):
                self.out.ignored_lines += 1
        elif reason == "build-finished":
            success = message.get("success")
            if isinstance(success, bool):
                self.out.build_success = success
            else:
                self.out.ignored_lines += 1
        elif reason == "compiler-artifact":
            self.artifact(message)
        elif reason == "build-script-executed":
            return
        else:
            self.out.ignored_lines += 1

    def artifact(self, message: dict[str, object]) -> None:
        """Count a dependency's unit as fresh or compiled; the tree's own are not counted.

        A package id names its source: `registry+...`/`git+...` (cargo >= 1.77's
        `<source>#name@version`, and the older `name version (<source>)`); the tree's
        packages are `path+...`. Anything else is not a dependency's."""
        package = message.get("package_id")
        fresh = message.get("fresh")
        if not isinstance(package, str) or not isinstance(fresh, bool):
            self.out.ignored_lines += 1
            return
        source = package.rsplit("(", 1)[-1] if package.endswith(")") else package
        if not source.startswith(("registry+", "sparse+", "git+")):
            return
        if fresh:
            self.out.dependencies_fresh += 1
        else:
            self.out.dependencies_compiled += 1

    def diagnostic(self, diag: object) -> bool:
        """Record one rustc diagnostic; False when it is not one."""
        if not isinstance(diag, dict):
            return False
        raw_level = diag.get("level")
        level = _LEVELS.get(raw_level) if isinstance(raw_level, str) else None
        message = _str(diag.get("message"))
        spans = diag.get("spans")
        if message is None or not isinstance(spans, list):
            return False
        if raw_level == "failure-note":
            self.out.summaries_skipped += 1
            return True
        if level is None:
            return False
        code_obj = diag.get("code")
        code = _str(code_obj.get("code")) if isinstance(code_obj, dict) else None
        if code == "E0463" and self.out.missing_target is None:
            self.out.missing_target = _missing_target(diag.get("children"))
        if code is not None and not _CODE.fullmatch(code):
            code = None  # not a lint name or an error code: never let the guest name a rule
        if not spans and code is None and _SUMMARY.match(message):
            self.out.summaries_skipped += 1
            return True

        primary = next((s for s in spans if isinstance(s, dict) and s.get("is_primary") is True),
                       None)
        location = _span_location(primary, self.layout) if primary is not None else None
        if spans and location is None:
            self.out.outside_repository += 1
            if level == "error" and len(self.out.dropped_errors) < MAX_DROPPED_ERRORS:
                self.out.dropped_errors.append(message[:300])
            return True

        key = (code, level, message, location)
        if key in self.seen:
            self.out.duplicates += 1
            return True
        if len(self.out.findings) >= MAX_FINDINGS:
            self.out.dropped_findings += 1
            return True
        self.seen.add(key)

        related: list[Location] = []
        for span in spans:
            if len(related) >= MAX_RELATED:
                break
            if span is primary or not isinstance(span, dict):
                continue
            other = _span_location(span, self.layout)
            if other is not None and other != location:
                path, line, column, end_line, end_column = other
                try:
                    related.append(Location(path=path, line=line, column=column,
                                            end_line=end_line, end_column=end_column,
                                            message=_str(span.get("label")) or None))
                except ValidationError:
                    continue
        suggestion, help_text = _suggestion_and_help(diag.get("children"))
        attached = _children(diag.get("children"), self.layout, self.snippets,
                             _str(diag.get("rendered")) or "")
        where: dict[str, object] = {}
        snippet = None
        if location is not None:
            path, line, column, end_line, end_column = location
            where = {"path": path, "line": line, "column": column, "end_line": end_line,
                     "end_column": end_column}
            if self.snippets is not None:
                snippet = self.snippets.snippet(self.layout.workspace_path(path), line, end_line)
        try:
            self.out.findings.append(Finding.model_validate({
                "code": code, "level": level, "message": message, "path": None, "line": None,
                "column": None, "end_line": None, "end_column": None, **where,
                "snippet": snippet, "suggestion": suggestion, "help": help_text,
                "label": (_str(primary.get("label")) if isinstance(primary, dict) else None) or None,
                "related": related, "children": attached.children, "fixes": attached.fixes,
                "doc_url": attached.doc_url,
            }))
        except ValidationError:
            return False
        return True


def parse_messages(
    stdout: bytes, layout: PathLayout, *, staged: Path | None = None,
    deadline: Deadline | None = None,
) -> ParsedStream:
    """Parse cargo's `--message-format=json` stdout.

    staged:   the staged copy of the workspace the guest linted (share_image.py), for
              snippets; None for none. Never the host tree (see report/snippet.py).
    deadline: past it, DeadlineExceeded.
    """
    parser = _Parser(layout, SnippetReader(staged) if staged is not None else None)
    start = 0
    while start <= len(stdout):
        end = stdout.find(b"\n", start)
        end = len(stdout) if end < 0 else end
        if deadline is not None and time.monotonic() > deadline.at:
            raise DeadlineExceeded("reading clippy's output", deadline.seconds,
                                   stopped="the report was not made")
        parser.line(stdout[start:end])
        start = end + 1
    return parser.out
