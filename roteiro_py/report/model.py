"""The lint report: what a run found, on what, and how it was isolated.

The report is the interface between a lint run and everything that reads it (the
terminal, `--format json` consumers, GitHub code scanning), so it is a versioned
pydantic model (`schema_version`, bumped on any incompatible change) rather than a dict
assembled by each renderer.

Guarantees:
- Every string field that came from the guest or from the repository's files is passed
  through `safe.clean()` by a validator here, at construction and again when a report is
  loaded from JSON: renderers receive text with no control, format or bidi character in
  it (see safe.py for why).
- A path is relative to the repository root, POSIX-separated, with no `..` component and
  not absolute: the parser (clippy/parse.py) drops what it cannot make so, and the
  validator refuses anything else, so no renderer can emit a path out of the repository.
  (The parser refuses a raw backslash from the guest; one in a path here is the escape
  of a control character in a file name.)
- Times are UTC and serialised as RFC 3339 (`2026-04-14T10:00:00Z`).
- `summary` is derived from `findings` by `Summary.of()`; a test checks they agree.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from datetime import UTC, datetime
from pathlib import PurePosixPath
from typing import Annotated, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, PlainSerializer, model_validator

from roteiro_py.report.safe import clean

SCHEMA_VERSION: Literal[1] = 1

Level = Literal["error", "warning", "note", "help"]
LEVELS: tuple[Level, ...] = ("error", "warning", "note", "help")


def _line(text: str) -> str:
    return clean(text)


def _multiline(text: str) -> str:
    return clean(text, keep_newlines=True)


def _source(text: str) -> str:
    return clean(text, keep_newlines=True, keep_tabs=True)


def _label(text: str) -> str:
    return clean(text, keep_newlines=True, limit=MAX_LABEL_CHARS)


def repo_path(text: str) -> str:
    """`text` as a finding's path: clean, relative to the repository root, normalised, or
    ValueError. A diff's paths go through this too (compare/diff.py), so they compare
    equal to the findings' exactly."""
    text = clean(text, limit=4096)
    path = PurePosixPath(text)
    if not text or path.is_absolute() or ".." in path.parts or text != str(path):
        raise ValueError(f"not a normalised path relative to the repository root: {text!r}")
    return text


def _utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("a report time must carry its time zone")
    return value.astimezone(UTC)


def _rfc3339(value: datetime) -> str:
    return value.astimezone(UTC).isoformat(timespec="seconds").replace("+00:00", "Z")


SafeLine = Annotated[str, AfterValidator(_line)]
SafeText = Annotated[str, AfterValidator(_multiline)]
SafeSource = Annotated[str, AfterValidator(_source)]
RepoPath = Annotated[str, AfterValidator(repo_path)]
#: A span's label, as rustc puts it under the span (`expected `u32`, found `&str``).
SafeLabel = Annotated[str, AfterValidator(_label)]
UtcTime = Annotated[datetime, AfterValidator(_utc), PlainSerializer(_rfc3339, return_type=str)]
Position = Annotated[int, Field(ge=1)]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


# The bounds of one report, stated here for the parser that keeps at most this much of
# what the guest prints (clippy/parse.py) and for every report read back from a file
# (`render`, `--baseline`), which no parser bounded: a 17 MB saved report of 100,000
# findings took 2.2 s and 279 MiB to validate and 17 s to render (review).
#: Secondary spans kept per finding; rustc rarely gives more than a handful.
MAX_RELATED = 10
#: Characters of one span's label (`Finding.label`, `Location.message`); longer ones are
#: cut with the sanitiser's mark. A label is a phrase under a span, the longest of rustc's
#: name two types ("expected `A`, found `B`"): this keeps those whole and a guest's
#: megabyte label from being copied into every format up to eleven times a finding.
MAX_LABEL_CHARS = 1000
#: Findings kept per report; more are counted (`dropped_findings`), not kept. Real trees
#: with thousands of warnings stay far below it; a guest printing the 64 MiB output cap
#: in short diagnostics would otherwise build ~200,000 findings.
MAX_FINDINGS = 10_000
#: Notes and helps kept per finding (`Finding.children`).
MAX_CHILDREN = 8
#: Suggestions kept per finding (`Finding.fixes`): rustc offers one, sometimes a few
#: alternatives ("consider borrowing here" / "consider cloning").
MAX_FIXES = 4
#: Parts of one suggestion; one with more is not kept (never shown in part). Clippy's
#: largest measured: a handful (`manual_let_else`, `bool_assert_comparison` has three).
MAX_EDITS = 16
#: Build-script warnings kept per report; more are counted.
MAX_BUILD_SCRIPT_WARNINGS = 50


def _ordered(line: int | None, column: int | None, end_line: int | None,
             end_column: int | None, what: str) -> None:
    """A span ends where it starts or after (rustc's byte_start <= byte_end); a report
    read from a file is held to it too (an end before its start crashed the fingerprint)."""
    if line is None or end_line is None:
        return
    if end_line < line or (end_line == line and column is not None and end_column is not None
                           and end_column < column):
        raise ValueError(f"{what} ends before it starts")


class Location(_Model):
    """A span in the repository: 1-based lines, 1-based columns in Unicode code points."""

    path: RepoPath
    line: Position
    column: Position
    end_line: Position
    end_column: Position
    #: The span's label, as rustc puts it under the span ("expected due to this").
    message: SafeLabel | None = None

    @model_validator(mode="after")
    def _in_order(self) -> Location:
        _ordered(self.line, self.column, self.end_line, self.end_column, "a location")
        return self


#: How sure rustc is that a suggestion is right, as its JSON says (`suggestion_applicability`).
Applicability = Literal["MachineApplicable", "MaybeIncorrect", "HasPlaceholders", "Unspecified"]


def _https_url(text: str) -> str:
    text = clean(text, limit=500)
    if not DOC_URL.fullmatch(text):
        raise ValueError(f"not an https URL: {text!r}")
    return text


#: A documentation link as rustc and clippy give them (`https://rust-lang.github.io/...`,
#: `https://doc.rust-lang.org/...`): https, a host name, and URL characters only, so a
#: renderer can put it in a link without escaping it (no space, quote, angle bracket).
DOC_URL = re.compile(r"https://[A-Za-z0-9.-]{1,253}(:[0-9]{1,5})?(/[A-Za-z0-9._~:/?#@!$&*+,;=%-]*)?")

DocUrl = Annotated[str, AfterValidator(_https_url)]


class Edit(_Model):
    """One part of a suggestion: the span path:line:column..end_line:end_column (1-based,
    end exclusive, code points) replaced by `replacement` (which may be empty: a deletion)."""

    path: RepoPath
    line: Position
    column: Position
    end_line: Position
    end_column: Position
    replacement: SafeSource

    @model_validator(mode="after")
    def _in_order(self) -> Edit:
        _ordered(self.line, self.column, self.end_line, self.end_column, "an edit")
        return self


class Fix(_Model):
    """A suggestion whole, as cargo shows it: the help message that carried it and every
    one of its parts (`bool_assert_comparison` replaces `assert_eq` with `assert`, deletes
    `, true` and keeps `x`: three edits, one suggestion).

    before/after: the lines the edits touch (from `line`, read from the staged copy the
    guest linted, never from the guest), and the same lines with every edit applied; None
    when they could not be read or the edits span too many lines or files (clippy/parse.py).
    inline: cargo showed it as a label under its span (`^^^ help: <message>: `<code>``),
    not as lines before and after. rustc decides by a display style its JSON does not
    carry, so this is read from the diagnostic's `rendered` text: a hint for the terminal
    report's layout only, never a source of what the suggestion changes.
    """

    message: SafeText
    applicability: Applicability | None = None
    edits: list[Edit] = Field(max_length=MAX_EDITS)
    line: Position | None = None
    before: SafeSource | None = None
    after: SafeSource | None = None
    inline: bool = False


class Child(_Model):
    """A note or a help rustc attached to a diagnostic (cargo's `= note: ...`), with the
    place it points at when it has one in the repository."""

    level: Literal["note", "help"]
    message: SafeText
    location: Location | None = None


class Finding(_Model):
    """One diagnostic, deduplicated across targets, located in the repository.

    code:       `clippy::<lint>`, a rustc lint name (`unused_variables`), a rustc error
                code (`E0308`), or None for an uncoded rustc diagnostic.
    path:       None only for a diagnostic with no span at all (a crate-level one).
    snippet:    the source lines line..end_line (bounded), read from the host's copy of
                the tree, never from the guest; None when unreadable.
    suggestion: the replacement text of the first part of the first suggestion, if any
                (kept as it was for readers of older reports; `fixes` has them whole).
    help:       the first help message rustc attached (e.g. "try dereferencing it").
    label:      the primary span's label, as cargo shows it under the span's carets
                (`expected `u32`, found `&str``); None when rustc gave none, and in
                reports written before issue 23.
    related:    the diagnostic's other spans with their labels, in the repository.
    baseline:   "known" when the `--baseline` report has this finding (by fingerprint,
                report/fingerprint.py), "new" when it does not; None without a baseline.
    in_diff:    whether the primary span touches a line the `--diff` added; None
                without a diff, and for a finding with no span (no diff can place it).
    children:   the notes and helps rustc attached that carry no suggestion, in its
                order ("`#[warn(clippy::x)]` on by default", the doc link's help).
    fixes:      the suggestions, each with all its parts (see Fix).
    doc_url:    the lint's documentation ("for further information visit <url>").
    The last three are empty in reports written before issue 13; a renderer then shows
    `help` and `suggestion` as it did.
    """

    code: SafeLine | None
    level: Level
    message: SafeText
    path: RepoPath | None
    line: Position | None
    column: Position | None
    end_line: Position | None
    end_column: Position | None
    snippet: SafeSource | None = None
    suggestion: SafeSource | None = None
    help: SafeText | None = None
    label: SafeLabel | None = None
    related: list[Location] = Field(default_factory=list, max_length=MAX_RELATED)
    baseline: Literal["known", "new"] | None = None
    in_diff: bool | None = None
    children: list[Child] = Field(default_factory=list, max_length=MAX_CHILDREN)
    fixes: list[Fix] = Field(default_factory=list, max_length=MAX_FIXES)
    doc_url: DocUrl | None = None

    @property
    def gating(self) -> bool:
        """Whether this finding can fail the run: not known from the baseline, and not
        outside the diff. Every finding gates when no baseline and no diff was given."""
        return self.baseline != "known" and self.in_diff is not False

    @model_validator(mode="after")
    def _in_order(self) -> Finding:
        _ordered(self.line, self.column, self.end_line, self.end_column, "a finding")
        return self


class BuildScriptWarning(_Model):
    """A `cargo::warning=` line of a build script, as cargo printed it on stderr
    (`warning: <package>@<version>: <message>`): not a diagnostic of rustc, never a
    finding (no lint level applies to it), but cargo shows it and so does the report."""

    package: SafeLine
    version: SafeLine
    message: SafeText


class Summary(_Model):
    counts: dict[Level, int]
    total: int
    build_succeeded: bool
    #: Diagnostics whose every span lay outside the repository (a registry crate, the
    #: standard library): counted, not reported; see clippy/parse.py.
    outside_repository: int = 0
    #: Lines of clippy's stdout that were not JSON, or JSON that was not a cargo message.
    ignored_lines: int = 0
    #: Findings past the cap of one report (clippy/parse.py MAX_FINDINGS): counted, not
    #: reported. A report with any is incomplete, and every renderer says so.
    dropped_findings: int = 0
    #: Units of the dependencies (registry and git packages) cargo found fresh, and those
    #: it compiled in this run (its compiler-artifact messages' `fresh`).
    dependencies_fresh: int = Field(0, ge=0)
    dependencies_compiled: int = Field(0, ge=0)
    #: Findings the `--baseline` report has (`Finding.baseline == "known"`).
    known: int = Field(0, ge=0)
    #: Findings on no line the `--diff` added (`Finding.in_diff is False`), known or new.
    outside_diff: int = Field(0, ge=0)
    #: Distinct build-script warnings cargo printed; the report keeps the first
    #: clippy/parse.py MAX_BUILD_SCRIPT_WARNINGS of them (`Report.build_script_warnings`).
    build_script_warnings: int = Field(0, ge=0)

    @classmethod
    def of(
        cls,
        findings: list[Finding],
        *,
        build_succeeded: bool,
        outside_repository: int = 0,
        ignored_lines: int = 0,
        dropped_findings: int = 0,
        dependencies_fresh: int = 0,
        dependencies_compiled: int = 0,
        build_script_warnings: int = 0,
    ) -> Summary:
        counted = Counter(finding.level for finding in findings)
        return cls(
            counts={level: counted.get(level, 0) for level in LEVELS},
            total=len(findings),
            build_succeeded=build_succeeded,
            outside_repository=outside_repository,
            ignored_lines=ignored_lines,
            dropped_findings=dropped_findings,
            dependencies_fresh=dependencies_fresh,
            dependencies_compiled=dependencies_compiled,
            known=sum(finding.baseline == "known" for finding in findings),
            outside_diff=sum(finding.in_diff is False for finding in findings),
            build_script_warnings=build_script_warnings,
        )


class ToolInfo(_Model):
    name: str
    version: str


class Provenance(_Model):
    """The linter image, by the reference configured and its manifest digest, and which
    setting chose it: a flag, an environment variable, the user's config, or the
    repository's own roteiro.toml (the code under review). `image_chosen_in` names the
    flag, the variable or the file (the repository's relative to its root). Both are None
    only in reports written before they existed."""

    image_reference: SafeLine
    image_digest: Annotated[str, Field(pattern=r"^sha256:[0-9a-f]{64}$")]
    image_chosen_by: Literal["flag", "env", "user", "repo"] | None = None
    image_chosen_in: SafeLine | None = None


class Toolchain(_Model):
    """What the guest's toolchain said it is (clippy/toolchain.py validates it)."""

    clippy_version: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")]
    clippy_commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None
    clippy_date: Annotated[str, Field(pattern=r"^\d{4}-\d{2}-\d{2}$")] | None = None
    rustc_release: Annotated[str, Field(pattern=r"^\d+\.\d+\.\d+(-[0-9A-Za-z.-]+)?$")]
    rustc_commit: Annotated[str, Field(pattern=r"^[0-9a-f]{7,40}$")] | None = None
    host: Annotated[str, Field(pattern=r"^[a-z0-9_]+(-[a-z0-9_.]+){1,4}$")]


class Isolation(_Model):
    """How the guest was isolated, as the VM backend describes itself (passed by roteiro_py/lint)."""

    backend: SafeLine
    accelerator: SafeLine
    hardware_isolated: bool
    description: SafeLine


class DependencyCache(_Model):
    """Whether the run's dependencies came from a dependency cache (roteiro_py/depcache/):
    "used" (one built earlier for the same key), "built" (built by this command, in a VM
    of its own, then used) or "skipped" (`reason` says why: the run built them itself).
    `key` names the cache file under $ROTEIRO_HOME/cache/deps/."""

    state: Literal["used", "built", "skipped"]
    key: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    reason: SafeLine | None = None
    #: Seconds this command spent building it ("built" only).
    build_seconds: float | None = Field(None, ge=0)


class Comparison(_Model):
    """What the findings were judged against (roteiro_py/compare/, docs/ADOPTING.md): the
    `--baseline` report and the `--diff`, each by its file name (never a host path), with
    how many findings the baseline holds and how many files the diff adds lines to."""

    baseline: SafeLine | None = None
    baseline_findings: int = Field(0, ge=0)
    diff: SafeLine | None = None
    diff_files: int = Field(0, ge=0)


class Report(_Model):
    schema_version: Literal[1] = SCHEMA_VERSION
    tool: ToolInfo
    provenance: Provenance
    toolchain: Toolchain
    isolation: Isolation
    #: The cargo workspace's directory relative to the repository root ("." for the root).
    workspace: SafeLine = "."
    command: list[SafeLine]
    features: list[SafeLine] = Field(default_factory=list)
    started: UtcTime
    ended: UtcTime
    findings: list[Finding] = Field(max_length=MAX_FINDINGS)
    summary: Summary
    #: None only in reports written before the dependency cache existed.
    dependency_cache: DependencyCache | None = None
    #: None when the run was judged against neither a baseline nor a diff.
    comparison: Comparison | None = None
    #: What the tree's build scripts said through cargo (empty before issue 13).
    build_script_warnings: list[BuildScriptWarning] = Field(default_factory=list,
                                                            max_length=MAX_BUILD_SCRIPT_WARNINGS)


#: Where the published schema lives in the repository (and, as `docs report-schema`, in
#: the wheel: roteiro_py/shipped.py).
SCHEMA_FILE = "docs/report.schema.json"


def json_schema() -> str:
    """The JSON Schema (draft 2020-12) of a `--format json` report, as the model writes it.

    Published as docs/report.schema.json so a consumer validates a report without this
    package; tests/unit/report/test_schema.py checks the committed file is this text and
    that real reports validate against it. Regenerate with `scripts/report-schema`."""
    schema = Report.model_json_schema(mode="serialization")
    schema = {"$schema": "https://json-schema.org/draft/2020-12/schema",
              "description": f"A pylint-sandbox report, schema_version {SCHEMA_VERSION} "
                             "(`pylint-sandbox lint clippy --format json`).", **schema}
    return json.dumps(schema, indent=2, sort_keys=True) + "\n"


def comparison_phrase(report: Report, hidden: str) -> str | None:
    """What the findings were judged against, counted, for a renderer's closing lines;
    `hidden` says what became of those that do not gate ("not shown", "not annotated").
    None when the run was compared with nothing."""
    compared = report.comparison
    if compared is None:
        return None
    findings = report.findings
    gating = sum(finding.gating for finding in findings)
    known = sum(finding.baseline == "known" for finding in findings)
    outside = sum(finding.in_diff is False and finding.baseline != "known" for finding in findings)
    new = "new " if compared.baseline is not None else ""
    parts = []
    if compared.baseline is not None:
        parts.append(f"{gating} new" + (" in the diff" if compared.diff is not None else ""))
        parts.append(f"{known} known (in the baseline {compared.baseline}, {hidden})")
    else:
        parts.append(f"{gating} in the diff")
    if compared.diff is not None:
        files = f"{compared.diff_files} file{'s' if compared.diff_files != 1 else ''}"
        # an empty diff (no net change), or one that only deletes or renames
        adds = f"adds lines to {files}" if compared.diff_files else "adds no lines"
        parts.append(f"{outside} {new}outside the diff ({compared.diff} {adds}, {hidden})")
    if report.summary.dropped_findings:
        parts.append(f"{report.summary.dropped_findings} past the report's cap not compared "
                     "(the run fails: any of them may be new)")
    return ", ".join(parts)

