"""Every user-facing failure: one class each, with its exit code and its guidance.

The exit codes are part of the interface: `vocabulary.EXIT_CODES` states them once
(re-exported here as EXIT_OK ... EXIT_READER_LEFT); `--help` prints that table and
README.md's "Exit codes" is checked against it. A finding gates the run when it is not
known from --baseline and not outside --diff; no refused run's report calls a tree clean;
141 is silent (roteiro_py/stdout.py).

The rule between 2 and 3: a value that is wrong in itself, whatever this host holds, is
usage (2): a flag, a variable or a configuration key, an image reference that is
malformed or names a tag where a digest is required, wherever it was written (a flag,
`config set`, the user's or the repository's file). A value that is well formed but that
this host, its store, the image, the policy or the run cannot honour is a refusal (3): no
image configured yet, an image not provisioned, one outside `lint.allowed_images`, no
usable hypervisor.

Each class names the thing it is about (an image, a path, a command) in its constructor
arguments, and turns them into a `Guidance` in one place, so a test can build every
refusal with distinctive values and check that each value comes out the other side.
Values from outside are passed through `printable()` first, and values that go into a
command line through `shlex.quote`.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
from collections.abc import Sequence
from pathlib import Path
from typing import ClassVar

from roteiro_py import vocabulary
from roteiro_py.guidance import Guidance, printable
from roteiro_py.invocation import Invocation
from roteiro_py.shipped import (
    LOCAL_TAG,
    build_command,
    dockerfile_command,
    dockerfile_lines,
    docs_command,
    prefetch_from_docker_command,
)
from roteiro_py.vocabulary import (
    MAX_MEMORY_MIB,
    MAX_TIMEOUT_S,
)

#: The number of lines of `Dockerfile.clippy` (the one `pylint-sandbox dockerfile clippy`
#: prints), stated here and nowhere else; a test checks it against the file, the package's
#: copy and the first dockerfile block of SANDBOXED_LINTING.md.
DOCKERFILE_LINES = 2

#: The exit statuses, stated in the leaf vocabulary.py (with EXIT_CODES, what each means)
#: so that --help can print them without loading this module.
EXIT_OK = vocabulary.EXIT_OK
EXIT_FINDINGS = vocabulary.EXIT_FINDINGS
EXIT_USAGE = vocabulary.EXIT_USAGE
EXIT_REFUSED = vocabulary.EXIT_REFUSED
EXIT_INTERNAL = vocabulary.EXIT_INTERNAL
EXIT_INTERRUPTED = vocabulary.EXIT_INTERRUPTED
EXIT_READER_LEFT = vocabulary.EXIT_READER_LEFT

_DIGEST_PLACEHOLDER = "sha256:<64 hex>"

#: Why the image a user reaches for first will not do (issue 21): the official Rust images
#: install their toolchain with `rustup-init --profile minimal` (rustc, cargo, rust-std),
#: so `cargo clippy` there is "no such command". Said by the refusals that offer the
#: Dockerfile, which names the base image and its version (stated only there).
OFFICIAL_IMAGE_LACKS_CLIPPY = (
    "An official Rust image (`rust:<version>`) will not do as it is: it installs its "
    "toolchain with `rustup --profile minimal`, which has no clippy component.")


def _dockerfile_block() -> tuple[str, str]:
    """The shipped Dockerfile, as a refusal prints it: a base plus the clippy component."""
    return (f"the {DOCKERFILE_LINES}-line Dockerfile of a clippy image (`{dockerfile_command()}` "
            "prints it)", "\n".join(dockerfile_lines()))


def _q(value: str | Path) -> str:
    return shlex.quote(printable(str(value)))


def _p(value: object) -> str:
    return printable(str(value))


def _sentence(text: str) -> str:
    """End a value-bearing phrase as a sentence, whatever punctuation the value carried."""
    return text.rstrip().rstrip(".") + "."


#: How much of a line from cargo or the guest a message quotes.
QUOTE_LIMIT = 300


def _said(who: str, text: str) -> str:
    """A note quoting what a tool said, bounded and escaped: `Cargo said: ...`."""
    return _sentence(f"{who}: {_p(text.strip()[:QUOTE_LIMIT]) or '(nothing)'}")


def prefetch_command(reference: str | None = None) -> str:
    if reference is None:
        return "pylint-sandbox prefetch --analyzer clippy --allow-download"
    return f"pylint-sandbox prefetch --analyzer clippy --image {_q(reference)} --allow-download"


def target_build_command(triple: str) -> str:
    """The shipped Dockerfile plus one `RUN rustup target add`, built as `build_command()`
    builds it (same tag, so `prefetch_from_docker_command()` pins it). The triple is
    quoted twice: docker build runs a RUN line with /bin/sh -c, and it is the guest that
    named it (rustc's "target may not be installed")."""
    line = shlex.quote(f"RUN rustup target add {shlex.quote(printable(triple))}")
    return (f"{{ {dockerfile_command()}; printf '%s\\n' {line}; }} | docker build -t {LOCAL_TAG} -")


def fetch_deps_command(tree: Path) -> str:
    return f"pylint-sandbox fetch-deps {_q(tree)}"


def _rerun(error: RoteiroError, option: str, now: int, most: int) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(notes, commands) suggesting the user's own command again with `option` doubled from
    `now`, or raised to `most`, the bound the setting takes (past it the pasted line was
    refused): the whole line when the boundary recorded it, else a note naming the option
    (a bare `pylint-sandbox lint clippy --memory N` would lint the current directory
    instead). Nothing when `now` is the bound already."""
    value = min(max(1, now * 2), most)
    if value <= now:
        return (), ()
    line = error.invocation.with_option(option, str(value)) if error.invocation else None
    if line is not None:
        return (), (line,)
    return (f"Run the same command again with `{option} {value}`.",), ()


class RoteiroError(Exception):
    """Base of every failure the command line turns into an exit code and a message."""

    exit_code: ClassVar[int] = EXIT_INTERNAL
    #: A stable identifier for machines (JSON output, tests); never reworded.
    code: ClassVar[str] = "internal"
    #: The command line the user ran, when the command line's boundary knows it (cli/app.py
    #: sets it for `lint clippy`): a suggested rerun repeats it (`rerun()`).
    invocation: Invocation | None = None

    def guidance(self) -> Guidance:
        return Guidance(summary=_sentence(_p(Exception.__str__(self)) or type(self).__name__))

    def __str__(self) -> str:
        if type(self).guidance is not RoteiroError.guidance:
            return self.guidance().summary
        return super().__str__()


# -- exit 2: usage and configuration ---------------------------------------------------


class UsageError(RoteiroError):
    exit_code = EXIT_USAGE
    code = "usage"

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def guidance(self) -> Guidance:
        return Guidance(summary=_p(self.message), notes=(self.hint,) if self.hint else ())


class ImageNotInStore(UsageError):
    """`cache remove-image` was given a reference no provisioned image has: `stored` are
    the provisioned ones (their full references, already bounded by the caller), of which
    MAX_STORED_SHOWN are named and the rest counted."""

    code = "image-not-in-store"

    def __init__(self, reference: str, store: Path, stored: Sequence[str]) -> None:
        shown = ", ".join(_p(name) for name in stored[:MAX_STORED_SHOWN])
        more = len(stored) - MAX_STORED_SHOWN
        if not stored:
            have = f"The store at {_p(store)} holds no provisioned image."
        else:
            have = (f"Provisioned: {shown}" + (f" and {more} more" if more > 0 else "")
                    + " (`pylint-sandbox cache list` shows each).")
        super().__init__(f"No image provisioned as {_p(reference)}: nothing was removed.",
                         hint=have)
        self.reference = reference
        self.stored = tuple(stored)


class PathNotFound(UsageError):
    """The PATH a command is about does not exist: `lint clippy PATH` and `doctor --path
    PATH` say it in the same words (issue 23: doctor said "this host can lint" it)."""

    code = "path-not-found"

    def __init__(self, path: Path) -> None:
        super().__init__(f"The path {path} does not exist.", hint="Pass the repository to lint.")
        self.path = path


class StdoutUnwritable(UsageError):
    """stdout cannot take what the command prints: it is closed (`>&-`), or a write failed
    for another reason than its reader leaving (ENOSPC on a full disk or /dev/full, EIO).
    The place to write is the problem, not the tool (roteiro_py/stdout.py).

    `command`: the command line the user ran, quoted (invocation.command_line()); `why`:
    the system's reason, None when stdout was closed before the command started."""

    code = "stdout-unwritable"

    def __init__(self, command: str, why: str | None) -> None:
        self.command = command
        self.why = why
        super().__init__(f"`{command}` prints on stdout, and stdout is closed." if why is None
                         else f"`{command}` could not write on stdout ({why}).",
                         hint=f"Print it somewhere it can be written: `{command} > FILE`.")


#: How many names a selection refusal lists (packages, features) before "and N more".
LISTED_NAMES = 10


def _listed(names: Sequence[str]) -> str:
    """`names` as a refusal lists them: the first LISTED_NAMES, escaped, then how many more."""
    shown = ", ".join(_p(name) for name in names[:LISTED_NAMES]) or "(none)"
    rest = len(names) - LISTED_NAMES
    return f"{shown} and {rest} more" if rest > 0 else shown


class UnknownPackage(UsageError):
    """`--package NAME` (or the package a PATH names) that is no package of the tree's
    Cargo.lock and no workspace member (lint/preflight.py check_selection): wrong as
    written, whatever the image holds. Before, the VM booted and cargo's refusal ended as
    exit 3 with advice about the image (issue 23 §3)."""

    code = "unknown-package"

    def __init__(self, name: str, workspace: Path, known: Sequence[str]) -> None:
        self.name = name
        self.workspace = workspace
        self.known = tuple(known)
        super().__init__(f"--package {_p(name)}: no package of that name in {_p(workspace)} "
                         "(its Cargo.lock and its workspace members).",
                         hint=f"Its packages: {_listed(self.known)}.")

    def guidance(self) -> Guidance:
        return Guidance(summary=self.message, notes=(
            _sentence(self.hint or ""),
            "Name a workspace member or one of its dependencies as Cargo.lock spells it, or "
            "lint every member with --workspace."))


class UnknownFeature(UsageError):
    """A `--features` name that no selected package defines ([features] keys and the
    optional dependencies `dep:` does not hide), or `pkg/feat` for a selected member
    without `feat` (lint/preflight.py check_selection), as cargo 1.95 refuses it."""

    code = "unknown-feature"

    def __init__(self, feature: str, packages: Sequence[str], defined: Sequence[str]) -> None:
        self.feature = feature
        self.packages = tuple(packages)
        self.defined = tuple(defined)
        which = (f"the package {_p(packages[0])} has no such feature" if len(packages) == 1
                 else f"none of the selected packages ({_listed(self.packages)}) has that feature")
        super().__init__(f"--features {_p(feature)}: {which}.",
                         hint=f"Features defined: {_listed(self.defined)}.")

    def guidance(self) -> Guidance:
        return Guidance(summary=self.message, notes=(
            _sentence(self.hint or ""),
            "An optional dependency is a feature of its own name unless a `dep:` entry in "
            "[features] hides it. Name a defined feature, choose the package that has it "
            "with --package, or use --all-features."))


class CargoRefusedSelection(UsageError):
    """cargo in the guest refused the package or feature selection before building
    anything (clippy/classify.py): a `-p` glob or spec that matches nothing, an inactive
    optional dependency, a feature of a dependency. Wrong as written, so a usage error,
    never a refusal about the image. `line`: cargo's own words, from the guest."""

    code = "cargo-refused-selection"

    def __init__(self, tree: Path, line: str) -> None:
        self.tree = tree
        self.line = line
        super().__init__(f"Cargo refused the package or feature selection for {_p(tree)}; "
                         "nothing was built.")

    def guidance(self) -> Guidance:
        return Guidance(summary=self.message, notes=(
            _said("Cargo said", self.line),
            "Fix the --package, --exclude or --features value it names (a package as "
            "Cargo.lock spells it, a feature its package defines), or lint with --workspace "
            "or --all-features."))


class ConfigError(RoteiroError):
    """A configuration file (or variable) that cannot be used, named to the key and line."""

    exit_code = EXIT_USAGE
    code = "config"

    def __init__(
        self,
        source: str | Path,
        problem: str,
        *,
        key: str | None = None,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        super().__init__(problem)
        self.source = source
        self.problem = problem
        self.key = key
        self.line = line
        self.column = column

    def guidance(self) -> Guidance:
        where = _p(self.source)
        if self.line is not None:
            where += f", line {self.line}"
            if self.column is not None:
                where += f", column {self.column}"
        about = f"key `{_p(self.key)}` in " if self.key else ""
        problem = _p(self.problem).rstrip(".")
        return Guidance(
            summary=f"Invalid configuration: {about}{where}: {problem}.",
            notes=("Fix or remove the value; `pylint-sandbox config show` lists every "
                   "effective value and where it came from.",),
        )


class ReportFileInvalid(RoteiroError):
    """A saved JSON report (`render REPORT.json`) that is not read or not a valid report.

    Anyone can write such a file (a CI artifact, a file of the tree), so `problem` names
    where and what is wrong (`findings.3.level: Input should be ...`), never its bytes.
    """

    exit_code = EXIT_USAGE
    code = "report-file-invalid"

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__()
        self.path = path
        self.problem = problem

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"{_p(self.path)} is not a pylint-sandbox JSON report: {_p(self.problem).rstrip('.')}.",
            notes=("Name a report written by `pylint-sandbox lint clippy --format json=FILE` "
                   "(a regular file, not a link), unchanged.",),
        )


class ReviewUnavailable(RoteiroError):
    """`review` cannot tell which pull request to review, or with what (commands/review.py):
    a variable of the Actions runner is missing or not what the runner writes."""

    exit_code = EXIT_USAGE
    code = "review-unavailable"

    def __init__(self, setting: str, problem: str) -> None:
        super().__init__(problem)
        self.setting = setting
        self.problem = problem

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"review cannot post: {_p(self.setting)} {_p(self.problem).rstrip('.')}.",
            notes=("`pylint-sandbox review` runs in a GitHub Actions job of a pull_request event, "
                   "with GITHUB_TOKEN in its environment (`env: GITHUB_TOKEN: ${{ github.token }}`) "
                   "and `permissions: pull-requests: write`; the runner sets GITHUB_REPOSITORY, "
                   "GITHUB_API_URL and GITHUB_EVENT_PATH.",),
        )


class MalformedReference(RoteiroError):
    exit_code = EXIT_USAGE
    code = "malformed-reference"

    def __init__(self, reference: str, what: str) -> None:
        super().__init__(reference)
        self.reference = reference
        self.what = what

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The image reference {_p(self.reference)!r} is malformed: "
            f"{_p(self.what).rstrip('.')}.",
            notes=("A reference looks like registry.example/team/clippy:1.95@sha256: followed "
                   "by the 64 hex digits of the image manifest's digest.",),
        )


class BaselineUnusable(RoteiroError):
    """The `--baseline` file is not a JSON report this tool can read (checked before the
    lint starts, so a wrong path costs milliseconds, not a VM run)."""

    exit_code = EXIT_USAGE
    code = "baseline-unusable"

    def __init__(self, path: Path, problem: str) -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"--baseline {_p(self.path)} cannot be used: {_p(self.problem).rstrip('.')}.",
            notes=("A baseline is the JSON report of an earlier run (`--format json`), a regular "
                   "file (not a link) within the stated size; make it again on the base branch "
                   f"(`{docs_command('adopting')}`).",),
            commands=("pylint-sandbox lint clippy . --format json --output clippy-baseline.json",),
        )


#: The command that writes the change's diff as docs/ADOPTING.md gives it (a test runs
#: the guide's and checks this is the same): git's defaults spelled out, so no user or
#: repository configuration changes its shape, and no attribute the branch chose either
#: (its .gitattributes can say `*.rs -diff`): attributes are read from the empty tree
#: (`--attr-source`, git 2.40 or later), with no system or user attributes file, and no
#: textconv or external diff driver runs.
DIFF_COMMAND = ('GIT_ATTR_NOSYSTEM=1 git --attr-source="$(git hash-object -t tree /dev/null)" '
                "-c core.attributesFile=/dev/null diff --no-color --no-ext-diff --no-textconv "
                "--no-relative --src-prefix=a/ --dst-prefix=b/ -M origin/main...HEAD > pr.diff")


class DiffUnusable(RoteiroError):
    """The `--diff` file is not a unified diff this tool reads (checked before the lint)."""

    exit_code = EXIT_USAGE
    code = "diff-unusable"

    def __init__(self, path: Path, problem: str, line: int | None = None) -> None:
        super().__init__(problem)
        self.path = path
        self.problem = problem
        self.line = line

    def guidance(self) -> Guidance:
        where = f", line {self.line}" if self.line is not None else ""
        return Guidance(
            summary=f"--diff {_p(self.path)}{where} cannot be used: {_p(self.problem).rstrip('.')}.",
            notes=("A diff is git's unified diff of the change, with paths relative to the "
                   "repository root and git's a/ and b/ prefixes, written to a regular file "
                   f"(`{docs_command('adopting')}`).",),
            commands=(DIFF_COMMAND,),
        )


class DiffHidesLines(RoteiroError):
    """The `--diff` file shows a Rust file as binary (`Binary files ... differ`, a `GIT
    binary patch`): what it adds cannot be checked, and read as "nothing added" every
    finding in it would pass. Usage (2), as every diff that cannot be used."""

    exit_code = EXIT_USAGE
    code = "diff-hides-lines"

    def __init__(self, path: Path, hidden: str, line: int | None = None) -> None:
        super().__init__(hidden)
        self.path = path
        self.hidden = hidden
        self.line = line

    def guidance(self) -> Guidance:
        where = f", line {self.line}" if self.line is not None else ""
        return Guidance(
            summary=f"--diff {_p(self.path)}{where} hides the lines of {_p(self.hidden)}: git wrote it "
                    "as a binary file, so no line it adds can be checked.",
            notes=("The branch's own .gitattributes makes git do that (`*.rs -diff`), and so does a NUL "
                   "byte in the file; a diff read as adding nothing to it would let every new finding in "
                   "it pass.",
                   "Write the diff with the branch's attributes ignored (git 2.40 or later), as "
                   f"`{docs_command('adopting')}` gives it:"),
            commands=(DIFF_COMMAND,),
        )


class TagNotDigest(RoteiroError):
    """A reference with a tag and no digest where a pinned one is required: usage (2),
    like a malformed one; the text alone is wrong, whatever the store holds."""

    exit_code = EXIT_USAGE
    code = "tag-not-digest"

    def __init__(self, reference: str, source: str | None = None) -> None:
        super().__init__()
        self.reference = reference
        self.source = source

    def guidance(self) -> Guidance:
        origin = f" (from {_p(self.source)})" if self.source else ""
        return Guidance(
            summary=f"The image {_p(self.reference)!r}{origin} is named by tag, not by digest.",
            notes=(
                "A tag is a mutable pointer: whoever can push to it decides what runs the "
                "repository's build scripts. Pin the image by its manifest digest.",
                "`pylint-sandbox prefetch --analyzer clippy --from docker --image "
                "<tag>` prints the pinned reference of an image built locally.",
            ),
            snippet_title="use a pinned reference",
            snippet=f'[lint]\nimage = "{_p(self.reference)}@{_DIGEST_PLACEHOLDER}"',
        )


# -- exit 3: refusals ------------------------------------------------------------------


#: The promise every refusal of a lint keeps, said by the `Refusal` base in the first note
#: of every refusal's guidance, so no class can forget it (issue 14: eight of them did).
#: True of every refusal a lint meets: none comes with a report (a lint renders its report
#: only once `lint()` returned, lint/__init__.py), and none is followed by running anything
#: on this host in the VM's place. The guest may have run (the build ran in the VM); that
#: is not "instead". It is a lint's promise: another command (prefetch, fetch-deps, render)
#: makes no report to begin with, so its refusals do not say it (`Refusal.promised`).
NOTHING_RAN = "No report was made, and nothing ran on this host instead."


def _with_promise(guidance: Guidance, promised: bool = True) -> Guidance:
    notes = tuple(note for note in guidance.notes if note != NOTHING_RAN)
    return dataclasses.replace(guidance, notes=(NOTHING_RAN, *notes) if promised else notes)


class Refusal(RoteiroError):
    """The sandbox cannot give what was asked for; nothing ran on the host instead.

    Every subclass's `guidance()` is wrapped here (`__init_subclass__`) so that its first
    note is NOTHING_RAN: a class written tomorrow says it without knowing it must.
    `promised` is False when the command that met the refusal is not a lint: the command
    line's boundary (cli/app.py `_guard`) sets it, since one class (PlatformUnsupported,
    NoImageConfigured) is met by a lint and by prefetch alike. Issue 23: prefetch's
    refusals ended with "No report was made", of a command that makes none."""

    exit_code = EXIT_REFUSED
    code = "refused"
    promised: bool = True

    def __init_subclass__(cls, **kwargs: object) -> None:
        super().__init_subclass__(**kwargs)
        own = cls.__dict__.get("guidance")
        if own is None:
            return

        @functools.wraps(own)
        def guidance(self: Refusal) -> Guidance:
            return _with_promise(own(self), self.promised)

        cls.guidance = guidance  # type: ignore[method-assign]

    def guidance(self) -> Guidance:
        return _with_promise(super().guidance(), self.promised)


#: At most this many provisioned images are offered by a refusal that lists the store's
#: (`NoImageConfigured`); the rest are counted and `doctor` lists them all.
MAX_STORED_SHOWN = 3


def config_set_image_command(reference: str) -> str:
    """`pylint-sandbox config set lint.image '<reference>'` for a pinned reference.

    Always single-quoted, as a user pastes it; `reference` is one the grammar accepted
    (reference.parse_pinned), which holds no quote, and is escaped again here anyway."""
    text = printable(reference)
    quoted = f"'{text}'" if "'" not in text else shlex.quote(text)
    return f"pylint-sandbox config set lint.image {quoted}"


class NoImageConfigured(Refusal):
    """No `[lint] image`. When the store already holds provisioned images (the first run
    after `prefetch`), the way forward is the exact `config set` for them, not a
    placeholder: `stored` are their pinned references, newest first, parsed and bounded
    by the caller (lint/preflight.py `images_in_store`)."""

    code = "no-image-configured"

    def __init__(self, user_config: Path, repo_config: Path, stored: Sequence[str] = ()) -> None:
        super().__init__()
        self.user_config = user_config
        self.repo_config = repo_config
        self.stored = tuple(stored)

    def guidance(self) -> Guidance:
        where = (f"Set it in the repository's {_p(self.repo_config)} or in your "
                 f"{_p(self.user_config)} (or pass --image for one run).")
        pinned = ("There is no default image on purpose: the image is where the "
                  "repository's build scripts and proc macros execute and what the report "
                  "vouches for, so the tool never picks one for you; you choose it, by "
                  "digest, never by tag.")
        if self.stored:
            newest, *others = self.stored[:MAX_STORED_SHOWN]
            held = len(self.stored)
            notes = [where, pinned,
                     f"The image store already holds {held} provisioned image{'s' if held != 1 else ''}; "
                     f"the command below makes the newest, {_p(newest)}, yours."]
            notes += [f"Or: `{config_set_image_command(other)}`." for other in others]
            if held > MAX_STORED_SHOWN:
                notes.append(f"`pylint-sandbox doctor` lists the other {held - MAX_STORED_SHOWN}.")
            return Guidance(
                summary="No linter image is configured: `[lint] image` is not set.",
                notes=tuple(notes),
                snippet_title=f"or, for this repository only, add to {_p(self.repo_config)}",
                snippet=f'[lint]\nimage = "{_p(newest)}"',
                commands=(config_set_image_command(newest),),
            )
        return Guidance(
            summary="No linter image is configured: `[lint] image` is not set.",
            notes=(
                where, pinned,
                OFFICIAL_IMAGE_LACKS_CLIPPY,
                "To build one from the Dockerfile below, run the two commands at the end: the "
                "second prints the pinned reference and the `config set` that makes it yours.",
                "For an image in a registry, name it as below and provision it with "
                f"`{prefetch_command()}`; `{docs_command('threat-model')}` says what the image "
                "is trusted with.",
            ),
            blocks=(_dockerfile_block(),),
            snippet_title=f"or add to {_p(self.repo_config)}",
            snippet=f'[lint]\nimage = "registry.example/team/clippy@{_DIGEST_PLACEHOLDER}"',
            commands=(build_command(), prefetch_from_docker_command()),
        )


class ImageNotAllowed(Refusal):
    """The repository's own roteiro.toml chose an image outside the user's allowed list."""

    code = "image-not-allowed"

    def __init__(self, reference: str, chosen_in: str, allowed: Sequence[str], allowed_in: str) -> None:
        super().__init__()
        self.reference = reference
        self.chosen_in = chosen_in
        self.allowed = tuple(allowed)
        self.allowed_in = allowed_in

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The image {_p(self.reference)!r}, chosen by the repository's "
            f"{_p(self.chosen_in)}, is not under any prefix in `lint.allowed_images` "
            f"(from {_p(self.allowed_in)}).",
            notes=(
                "The repository is the code under review: the image it names is where its "
                "build scripts and proc macros run, so it must come from a registry you "
                "allow. Allowed: " + ", ".join(_p(entry) for entry in self.allowed) + ".",
                "If you trust this image, pass it with --image, set it in your own config, "
                "or add its registry/repository to `lint.allowed_images`; an image you "
                "choose yourself is not checked against the list.",
            ),
        )


class SandboxUnavailable(Refusal):
    """No hypervisor this run may use; never followed by running on the host."""

    code = "sandbox-unavailable"

    def __init__(
        self,
        reason: str,
        *,
        accel: str,
        findings: tuple[str, ...] = (),
        tcg_possible: bool = False,
        install: str | None = None,
    ) -> None:
        super().__init__()
        self.reason = reason
        self.accel = accel
        self.findings = findings
        self.tcg_possible = tcg_possible
        self.install = install

    def guidance(self) -> Guidance:
        notes = [_sentence(f"Found: {_p(finding)}") for finding in self.findings]
        commands: list[str] = []
        if self.install:
            commands.append(self.install)
        if self.tcg_possible:
            notes.append(
                "Software emulation (TCG) works on this host, but QEMU does not treat TCG as "
                "a security boundary, so it is used only when you opt in: --accel tcg, or "
                '`[vm] accel = "tcg"` in your user configuration.'
            )
        commands.append("pylint-sandbox doctor")
        return Guidance(
            summary=f"No usable sandbox for accel={_p(self.accel)}: "
            f"{_p(self.reason).rstrip('.')}.",
            notes=tuple(notes),
            commands=tuple(commands),
        )


class VmAssetsMissing(Refusal):
    code = "vm-assets-missing"

    def __init__(self, what: str, path: Path) -> None:
        super().__init__()
        self.what = what
        self.path = path

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The VM's {_p(self.what)} is not provisioned at {_p(self.path)}.",
            notes=("Assets are provisioned ahead of time and verified by digest; a run never "
                   "downloads them, from a Debian archive (`[vm] debian_archive`: a mirror or "
                   "a local copy). A host that reaches none can point `[vm] kernel` and "
                   "`[vm] initrd` at its own.",),
            commands=("pylint-sandbox prefetch --vm-assets",),
        )


class ImageNotProvisioned(Refusal):
    code = "image-not-provisioned"

    def __init__(self, reference: str, store: Path, detail: str | None = None) -> None:
        super().__init__()
        self.reference = reference
        self.store = store
        self.detail = detail

    def guidance(self) -> Guidance:
        notes = []
        if self.detail:
            notes.append(_sentence(f"Found: {_p(self.detail)}"))
        notes.append(f"A lint never pulls; images are provisioned into the store at "
                     f"{_p(self.store)} by prefetch.")
        return Guidance(
            summary=f"The image {_p(self.reference)} is not in the local store.",
            notes=tuple(notes),
            commands=(prefetch_command(self.reference),),
        )


class DownloadNotAllowed(Refusal):
    code = "download-not-allowed"

    def __init__(self, reference: str, source: str, what: str) -> None:
        super().__init__()
        self.reference = reference
        self.source = source
        self.what = what

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Prefetch would download {_p(self.what)} from {_p(self.source)}; "
            "downloading was not allowed.",
            notes=(f"Image: {_p(self.reference)}.",),
            commands=(prefetch_command(self.reference),),
        )


#: Images of an `oci:` layout a refusal lists; the rest are counted.
MAX_LAYOUT_IMAGES_SHOWN = 10


class LayoutImageNotChosen(RoteiroError):
    """`prefetch --from oci:PATH` given no digest, and the layout's index lists no image or
    several: which one to provision is not said (usage, 2; the command line lacks it).
    `images`: (ref name or None, digest) as the layout lists them, untrusted."""

    exit_code = EXIT_USAGE
    code = "layout-image-not-chosen"

    def __init__(self, layout: str, images: Sequence[tuple[str | None, str]]) -> None:
        super().__init__()
        self.layout = layout
        self.images = tuple(images)

    def guidance(self) -> Guidance:
        shown = [f"{_p(name) if name else '(no name)'} @ {_p(digest)}"
                 for name, digest in self.images[:MAX_LAYOUT_IMAGES_SHOWN]]
        rest = len(self.images) - len(shown)
        if not self.images:
            return Guidance(summary=f"The OCI layout {_p(self.layout)} lists no image in its index.json.",
                            notes=("Write the layout again (`skopeo copy`, `docker buildx --output "
                                   "type=oci`, `pylint-sandbox image build --output DIR`), or pass another.",))
        listing = "; ".join(shown) + (f"; and {rest} more" if rest else "")
        return Guidance(
            summary=f"The OCI layout {_p(self.layout)} holds {len(self.images)} images; "
                    "which one to provision was not said.",
            notes=(f"It lists: {listing}.",
                   "Name one by its digest with --image NAME@DIGEST (the name is what the "
                   "store will call it)."),
            commands=(f"pylint-sandbox prefetch --analyzer clippy --from {shlex.quote(self.layout)} "
                      f"--image {shlex.quote('localhost/clippy@' + self.images[0][1])}",),
        )


class PrefetchFailed(Refusal):
    code = "prefetch-failed"

    def __init__(self, reference: str, source: str, reason: str, *, note: str | None = None,
                 commands: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.reference = reference
        self.source = source
        self.reason = reason
        self.note = note  # a way forward particular to the source
        self.commands = commands

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Could not provision {_p(self.reference)} from {_p(self.source)}: "
            f"{_p(self.reason).rstrip('.')}.",
            notes=("Nothing partial was left in the store: the reference is not present.",
                   *((self.note,) if self.note else ())),
            commands=self.commands,
        )


class ArchiveRefused(Refusal):
    """A Debian archive whose index or packages did not verify: nothing was provisioned."""

    code = "archive-refused"

    def __init__(self, archive: str, suite: str, reason: str, *, setting: str = "debian_archive") -> None:
        super().__init__()
        self.archive = archive
        self.suite = suite
        self.reason = reason
        self.setting = setting  # the [vm] key that names this archive

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Refused the Debian archive {_p(self.archive)} (suite {_p(self.suite)}): "
            f"{_p(self.reason).rstrip('.')}.",
            notes=("Its InRelease must be signed by a pinned Debian archive key, and Packages "
                   "and each .deb must match the digests it lists; nothing was provisioned.",
                   "Check the mirror (a proxy or a partial copy can alter files), point "
                   f"`[vm] {self.setting}` at another mirror or a local copy, or set "
                   "`[vm] kernel` and `[vm] initrd` to files of your own."),
            commands=(f"pylint-sandbox config set vm.{self.setting} MIRROR-URL-OR-DIRECTORY",
                      "pylint-sandbox prefetch --vm-assets"),
        )


class ImageBuildRefused(Refusal):
    """`image build` could not make the image: a Debian archive that did not verify, a
    dependency nothing satisfies, a toolchain that lacks a binary. Nothing was stored."""

    code = "image-build-refused"

    def __init__(self, what: str, reason: str, *, commands: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.what = what
        self.reason = reason
        self.commands = commands

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Could not build the linter image from {_p(self.what)}: {_p(self.reason).rstrip('.')}.",
            notes=("The Debian root is taken only from an InRelease signed by a pinned Debian archive key, "
                   "and each .deb only if it matches the digests it lists; nothing was stored.",),
            commands=self.commands,
        )


class SecurityIndexStale(Refusal):
    """The security archive's InRelease is past its Valid-Until: nothing was provisioned."""

    code = "security-index-stale"

    def __init__(self, archive: str, suite: str, date: str, valid_until: str, valid_days: int) -> None:
        super().__init__()
        self.archive = archive
        self.suite = suite
        self.date = date
        self.valid_until = valid_until
        self.valid_days = valid_days  # Valid-Until minus Date, as the InRelease states them

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The Debian security archive {_p(self.archive)} (suite {_p(self.suite)}) "
            f"serves a stale index: its InRelease of {_p(self.date)} expired at "
            f"{_p(self.valid_until)} (Valid-Until).",
            notes=(f"The security archive signs its index valid for {self.valid_days} days only, "
                   "so a mirror that stopped syncing, or one replaying an old index, is refused; "
                   "a local (air-gapped) copy of it goes stale every "
                   f"{self.valid_days} days and must be refreshed from security.debian.org.",
                   "Refresh the copy, point `[vm] debian_security_archive` at a mirror that is "
                   "current, or set it to \"\" to read the main archive alone (the guest kernel "
                   "then lags the security fixes released since the last point release); "
                   "nothing was provisioned."),
            commands=("pylint-sandbox config set vm.debian_security_archive ''",
                      "pylint-sandbox prefetch --vm-assets"),
        )


class UnsafeImageLayer(Refusal):
    """A layer that would write outside the root filesystem, or cannot be read: refused whole."""

    code = "unsafe-image-layer"

    def __init__(self, digest: str, member: str, why: str) -> None:
        super().__init__()
        self.digest = digest
        self.member = member
        self.why = why

    def guidance(self) -> Guidance:
        member = f" (member {_p(self.member)!r})" if self.member else ""
        return Guidance(
            summary=f"The image layer {_p(self.digest)}{member} cannot be used: "
            f"{_p(self.why).rstrip('.')}.",
            notes=("Layers are extracted without following paths out of the root filesystem; "
                   "an image that needs that is refused rather than extracted in part.",),
        )


class CredentialHelperFailed(Refusal):
    """The docker credential helper the user's docker config names for a registry could not
    answer (store/auth.py): missing from PATH, failed, or answered what is not credentials.
    Its output is never quoted: it may hold what it was asked to keep."""

    code = "credential-helper-failed"

    def __init__(self, program: str, registry: str, config: Path, reason: str) -> None:
        super().__init__()
        self.program = program
        self.registry = registry
        self.config = config
        self.reason = reason

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The credential helper {_p(self.program)} could not give credentials for "
            f"{_p(self.registry)}: {_p(self.reason).rstrip('.')}.",
            notes=(f"The docker config {_p(self.config)} names it (`credHelpers` or `credsStore`), as "
                   "the docker client reads it; nothing was downloaded.",
                   "Install the helper or log in again; for a public image, remove the entry or "
                   "point DOCKER_CONFIG at a directory without it.",),
            commands=(f"{_q(self.program)} list", f"docker login {_q(self.registry)}"),
        )


class HostToolMissing(Refusal):
    """A host program the image store or the VM images need is not installed."""

    code = "host-tool-missing"

    def __init__(self, tool: str, package: str, purpose: str) -> None:
        super().__init__()
        self.tool = tool
        self.package = package
        self.purpose = purpose

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"{_p(self.tool)} is not installed on this host; it is needed to "
            f"{_p(self.purpose).rstrip('.')}.",
            notes=(f"Debian and Ubuntu ship it in the package {_p(self.package)}.",),
            commands=(f"apt-get install {_q(self.package)}", "pylint-sandbox doctor"),
        )


class HostToolFailed(Refusal):
    """A trusted host program (mkfs.ext4, zstd, `qemu --version`) started but came to no end
    this run can use: it passed its deadline and its process group was killed, or its
    output could not be read (roteiro_py/process/tool.py). It was exit 4, an unhandled
    subprocess.TimeoutExpired, until every host child went through the process layer."""

    code = "host-tool-failed"

    def __init__(self, tool: str, purpose: str, reason: str) -> None:
        super().__init__()
        self.tool = tool
        self.purpose = purpose
        self.reason = reason

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"{_p(self.tool)} could not {_p(self.purpose).rstrip('.')}: "
            f"{_p(self.reason).rstrip('.')}.",
            notes=("It is a program of this host, not of the tree: a host under heavy load "
                   "or a tool that hangs does this. Run the same command again; `pylint-sandbox "
                   "doctor` checks the host's tools.",),
            commands=("pylint-sandbox doctor",),
        )


class NoPackageCache(Refusal):
    code = "no-package-cache"

    def __init__(self, path: Path, tree: Path, missing: str | Sequence[str] | None = None,
                 total: int | None = None) -> None:
        super().__init__()
        self.path = path
        self.tree = tree
        #: The pinned packages the cache lacks ("itoa 1.0.15"), the first MISSING_NAMED of
        #: them, when they were looked for.
        self.missing = ((missing,) if isinstance(missing, str) else tuple(missing or ()))[:MISSING_NAMED]
        #: How many pinned packages the cache lacks in all.
        self.total = max(total or 0, len(self.missing))

    def guidance(self) -> Guidance:
        named = ", ".join(_p(m) for m in self.missing)
        more = self.total - len(self.missing)
        if more:
            named += f" and {more} more"
        summary = (f"The package store at {_p(self.path)} lacks {named}, which the "
                   f"lockfile pins." if self.missing else f"No package store at {_p(self.path)}.")
        return Guidance(
            summary=summary,
            notes=("The VM has no network: the packages the tree depends on come from the "
                   "package store, unpacked and checked per lockfile; the guest sees only "
                   "the packages the lockfile pins, and a lint never downloads.",
                   "`pylint-sandbox fetch-deps` fills the store from the lockfile alone "
                   "(nothing of the tree runs, and no host cargo or Rust is needed).",),
            commands=(fetch_deps_command(self.tree),),
        )


#: How many missing packages a NoPackageCache names (the rest are counted).
MISSING_NAMED = 5


class SourceReplacementRefused(Refusal):
    """A host cargo `[source]` replacement that fetch-deps cannot follow (cargo/sources.py)."""

    code = "source-replacement-refused"

    def __init__(self, file: Path, key: str, why: str, tree: Path | None = None) -> None:
        super().__init__()
        self.file = file
        self.key = key
        self.why = why
        #: The tree whose lockfile needed the source, for the command to run once fixed.
        self.tree = tree

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The host's cargo configuration {_p(self.file)} replaces a source the "
            f"lockfile uses in a way fetch-deps cannot follow: {_p(self.key)}: "
            f"{_p(self.why).rstrip('.')}.",
            notes=("`fetch-deps` downloads a package through the host's replacement of its "
                   "registry (a mirror), over https, and keeps it only when it hashes to the "
                   "lockfile's checksum; the guest never reads the host's cargo configuration.",
                   f"Change or remove {_p(self.key)} in {_p(self.file)} (a registry mirror "
                   "works when it is named by its sparse+https:// URL), then fetch again.",),
            commands=(fetch_deps_command(self.tree or Path("PATH")),),
        )


class PackageRefused(Refusal):
    """A package the lockfile pins that is not fetched or not given to the guest: a source
    other than https, no or a wrong checksum, too large, a git submodule that leaves https
    (roteiro_py/cargo/). Nothing of it is kept."""

    code = "package-refused"

    def __init__(self, lockfile: Path, package: str, why: str, tree: Path | None = None) -> None:
        super().__init__()
        self.lockfile = lockfile
        self.package = package
        self.why = why
        #: The tree to fetch again once fixed (the lockfile's directory when not given).
        self.tree = tree or lockfile.parent

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The lockfile {_p(self.lockfile)} pins {_p(self.package)}, which is not "
            f"fetched: {_p(self.why).rstrip('.')}.",
            notes=(PACKAGES_FETCHED,
                   "Change the dependency in the tree (or ask the branch's author to), or "
                   "remove what was kept for it, then fetch again.",),
            commands=(fetch_deps_command(self.tree),),
        )


#: What fetch-deps fetches and how it checks it, said once for every refusal about a package.
PACKAGES_FETCHED = ("Only the lockfile is read to decide what to fetch (no manifest, no cargo "
                    "configuration of the tree, no host cargo): registry packages over https, "
                    "kept only when their sha256 equals the lockfile's checksum, and git "
                    "packages over https at their pinned commit.")


class PackageSourceUnreachable(Refusal):
    """A registry or git host that a fetch could not reach, or that answered nonsense."""

    code = "package-source-unreachable"

    def __init__(self, where: str, package: str, why: str, tree: Path) -> None:
        super().__init__()
        self.where = where
        self.package = package
        self.why = why
        self.tree = tree

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Fetching {_p(self.package)} from {_p(self.where)} failed: "
            f"{_p(self.why).rstrip('.')}.",
            notes=(PACKAGES_FETCHED,
                   "On a host without that network (air-gapped), copy the `.crate` files in "
                   "by hand: `fetch-deps --from DIR` takes `<name>-<version>.crate` files "
                   "from DIR and keeps each whose sha256 equals the lockfile's checksum.",),
            commands=(fetch_deps_command(self.tree),
                      f"pylint-sandbox fetch-deps {_q(self.tree)} --from DIR"),
        )


#: What a toolchain from Rust's distribution must be, said once for every refusal about one.
RUST_DIST_CHECKED = ("A toolchain from Rust's distribution is taken only when its channel manifest "
                     "is signed by the Rust release key shipped with this tool (fingerprint "
                     "108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE) and each package's sha256 is the "
                     "one the manifest lists; nothing was stored.")


class ToolchainSpecInvalid(UsageError):
    """A toolchain named in a way this tool does not read: not `1.95.0`, `stable`, `beta`,
    `nightly`, optionally dated (`nightly-2026-11-01`), nor a target triple it accepts."""

    code = "toolchain-spec-invalid"

    def __init__(self, value: str, why: str, where: str = "--from-dist") -> None:
        super().__init__(f"{where} {value!r}: {why}")
        self.value = value
        self.why = why
        self.where = where

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The toolchain {_p(self.value)} ({_p(self.where)}) is not one this tool can "
            f"fetch: {_p(self.why).rstrip('.')}.",
            notes=("Name a release (`1.95.0`), a channel (`stable`, `beta`, `nightly`) or a "
                   "dated channel (`nightly-2026-11-01`), as rustup does; targets are triples "
                   "(`aarch64-unknown-linux-gnu`).",),
        )


class ToolchainRefused(Refusal):
    """A toolchain from Rust's distribution whose manifest or packages did not verify (a
    signature, a sha256, a size, an unsafe archive member): nothing was stored."""

    code = "toolchain-refused"

    def __init__(self, toolchain: str, server: str, why: str) -> None:
        super().__init__()
        self.toolchain = toolchain
        self.server = server
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Refused the Rust toolchain {_p(self.toolchain)} from {_p(self.server)}: "
            f"{_p(self.why).rstrip('.')}.",
            notes=(RUST_DIST_CHECKED,
                   "Check the server (a proxy or a partial mirror can alter files): "
                   "RUSTUP_DIST_SERVER names a mirror, unset it for static.rust-lang.org."),
        )


class ToolchainStale(ToolchainRefused):
    """An undated channel's manifest, validly signed, dated before the floor this host
    holds it to (image/rust_dist.py `check_floor`): the newest date already accepted for
    the channel (`recorded_from` the server that served it, `record` the file that says
    so), or `max_age_days` before `today` by this host's clock. A release line (`1.95`) has
    the record alone, and `release` is the one accepted (`1.95.1`): a line is never dated,
    so the way forward names that release. A signature says Rust made a manifest, not that
    it is the newest: an older one replayed is a downgrade."""

    code = "toolchain-stale"

    def __init__(self, channel: str, server: str, date: str, floor: str, *, today: str, max_age_days: int,
                 recorded_from: str | None = None, record: Path | None = None,
                 release: str | None = None) -> None:
        super().__init__(channel, server, f"its signed manifest is of {date}, older than {floor}")
        self.channel = channel
        self.date = date
        self.floor = floor
        self.today = today
        self.max_age_days = max_age_days
        self.recorded_from = recorded_from
        self.record = record
        self.release = release

    def guidance(self) -> Guidance:
        if self.recorded_from is not None:
            source = (f"the newest {_p(self.channel)} manifest this host already accepted (from "
                      f"{_p(self.recorded_from)}, recorded in {_p(str(self.record))})")
            cause = (f"{_p(self.server)} is behind the server that served {_p(self.floor)}, or replays an "
                     "old manifest" if self.recorded_from != self.server else
                     f"{_p(self.server)} served {_p(self.floor)} before and an older one now: an old "
                     "manifest replayed, or a mirror restored from an old copy")
            pin = self.floor
        else:
            source = (f"{self.max_age_days} days before today ({_p(self.today)} by this host's clock), more "
                      f"than the {self.max_age_days} days an undated {_p(self.channel)} manifest may lag")
            cause = (f"{_p(self.server)} has stopped syncing or replays an old manifest, or this host's "
                     f"clock is ahead (it says today is {_p(self.today)})")
            pin = self.date
        if self.release is not None:  # a release line: never dated, its release is named
            pinned = self.release
            way = (f"To build the {_p(pinned)} toolchain this host already accepted, name that release: "
                   f"`--from-dist {_p(pinned)}`, or `channel = \"{_p(pinned)}\"` in rust-toolchain.toml")
        else:
            pinned = f"{self.channel}-{pin}"
            way = (f"To build the {_p(pin)} toolchain this host already accepted" if self.recorded_from is not None
                   else f"To build from this manifest of {_p(pin)} anyway")
            way += (f", name it by its date: `--from-dist {_p(pinned)}`, or `channel = \"{_p(pinned)}\"` in "
                    "rust-toolchain.toml (or name a release, `1.95.0`)")
        if self.recorded_from is not None and self.recorded_from != self.server:
            way += (f"; or fetch from the server that served it: `RUSTUP_DIST_SERVER={_q(self.recorded_from)} "
                    f"pylint-sandbox image build --from-dist {_q(self.channel)}`")
        return Guidance(
            summary=f"Refused the Rust toolchain {_p(self.channel)} from {_p(self.server)}: its signed "
                    f"manifest is of {_p(self.date)}, older than {_p(self.floor)}, {source}.",
            notes=(f"A signature says Rust made a manifest, not that it is the newest: {cause}. "
                   "An undated channel (stable, beta, nightly) is taken only if its manifest is "
                   "no older than the newest this host accepted for it, nor than the channel's "
                   "maximum age, and a release line (1.95) if no older than the newest accepted; "
                   "a dated channel or a release is taken as named, however old.",
                   way + ".", RUST_DIST_CHECKED),
            commands=(f"pylint-sandbox image build --from-dist {_q(pinned)}",),
        )


class VcsUnreadable(Refusal):
    """A git repository holding the tree whose state could not be read as data (an index
    past its bound, a format or object the reader does not know): lint/vcs.py never
    guesses a tree clean."""

    code = "vcs-unreadable"

    def __init__(self, repository: Path, why: str) -> None:
        super().__init__()
        self.repository = repository
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Could not read the git repository at {_p(str(self.repository))}: "
            f"{_p(self.why).rstrip('.')}.",
            notes=("Its state is read as data, never by running git on the tree; "
                   "`git status` there shows what it holds.",),
        )


class ToolchainIncomplete(Refusal):
    """The channel's manifest verified but lacks a component or target that was asked for
    (a nightly without clippy, a target Rust does not build for that release)."""

    code = "toolchain-incomplete"

    def __init__(self, toolchain: str, missing: str, target: str) -> None:
        super().__init__()
        self.toolchain = toolchain
        self.missing = missing
        self.target = target

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The Rust toolchain {_p(self.toolchain)} has no {_p(self.missing)} for "
            f"{_p(self.target)}.",
            notes=(RUST_DIST_CHECKED,
                   "Pick a release or a nightly date that has it (a nightly without clippy "
                   "is common), or leave the component or target out."),
        )


class ToolchainUnreachable(Refusal):
    """Rust's distribution server (or a mirror) could not be reached, or broke off."""

    code = "toolchain-unreachable"

    def __init__(self, toolchain: str, server: str, why: str) -> None:
        super().__init__()
        self.toolchain = toolchain
        self.server = server
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Fetching the Rust toolchain {_p(self.toolchain)} from {_p(self.server)} "
            f"failed: {_p(self.why).rstrip('.')}.",
            notes=(RUST_DIST_CHECKED,
                   "On a host that cannot reach static.rust-lang.org, set RUSTUP_DIST_SERVER "
                   "to a mirror you can reach (its files are checked the same way)."),
        )


class ScratchUnavailable(Refusal):
    code = "scratch-unavailable"

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__()
        self.path = path
        self.reason = reason

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The scratch space at {_p(self.path)} is unavailable: "
            f"{_p(self.reason).rstrip('.')}.",
            notes=("The build's only writable place is a scratch disk under $ROTEIRO_HOME; "
                   "free space there or point ROTEIRO_HOME elsewhere.",),
        )


class CacheContended(Refusal):
    """A cache this run built was removed each time before the run could hold it
    (locks.held_shared): something prunes the caches as fast as the run builds them."""

    code = "cache-contended"

    def __init__(self, what: str, path: Path, attempts: int) -> None:
        super().__init__()
        self.what = what
        self.path = path
        self.attempts = attempts

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The {_p(self.what)} at {_p(self.path)} was removed {self.attempts} "
            "times between this run building it and using it.",
            notes=("A `cache prune` (or another tool removing caches under $ROTEIRO_HOME) is "
                   "running alongside this lint; a cache a run holds is never removed, but "
                   "one it has only just built is not held yet.",
                   "Run the lint again once that has finished."),
            commands=("pylint-sandbox cache list",),
        )


class ImageInUse(Refusal):
    """`cache remove-image` found the image held by a running lint (its use lock, store/
    layout.py `Store.in_use`): it removes nothing then, rather than waiting or pulling the
    image's layers or root filesystem from under that lint's VM."""

    code = "image-in-use"

    def __init__(self, reference: str) -> None:
        super().__init__()
        self.reference = reference

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The image {_p(self.reference)} is in use by a running lint: nothing "
            "was removed.",
            notes=("Remove it again once that lint has finished.",),
            commands=(f"pylint-sandbox cache remove-image {shlex.quote(printable(self.reference))}",),
        )


class ImageLacksLinter(Refusal):
    """The image's clippy is missing or does not answer: a probe failed, or exited 0 and
    printed nothing (clippy/toolchain.py). The way forward is another image, not a retry."""

    code = "image-lacks-linter"

    def __init__(self, reference: str, output: str, probe: str = "cargo-clippy --version") -> None:
        super().__init__()
        self.reference = reference
        self.output = output
        #: The probe that showed it, as the guest ran it.
        self.probe = probe

    def guidance(self) -> Guidance:
        # `rustc -vV` answering nothing came after cargo-clippy answered: what is missing
        # then is the compiler clippy runs, and the summary must not say clippy is.
        clippy = self.probe.startswith("cargo-clippy")
        missing = "`cargo clippy`" if clippy else \
            f"`rustc` (`{_p(self.probe)}` answered nothing), which `cargo clippy` runs"
        return Guidance(
            summary=f"The image {_p(self.reference)} has no working {missing}.",
            notes=(_said(f"`{_p(self.probe)}` in the guest said", self.output),
                   *((OFFICIAL_IMAGE_LACKS_CLIPPY,) if clippy else ()),
                   "Build an image from the Dockerfile below and pin its digest: the "
                   "commands below build it and print the pinned reference.",),
            blocks=(_dockerfile_block(),),
            commands=(build_command(), prefetch_from_docker_command()),
        )


class ProbeFailed(Refusal):
    """The image's toolchain answered its probe in a way no real toolchain does (or not
    within the probe's deadline); named by the image it came from."""

    code = "probe-failed"

    def __init__(self, reference: str, what: str, detail: str) -> None:
        super().__init__()
        self.reference = reference
        self.what = what
        self.detail = detail

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Probing the toolchain of the image {_p(self.reference)} failed: "
            f"{_p(self.what).rstrip('.')}.",
            notes=(_said("What came back", self.detail),
                   "The probe runs the image's own `cargo-clippy --version` and `rustc -vV`, "
                   "outside the tree; an image whose toolchain answers otherwise is not "
                   "trusted to name the toolchain in a report.",),
            commands=("pylint-sandbox doctor",),
        )


class ColdCache(Refusal):
    """cargo in the guest looked for a package its vendored view lacks. The view holds every
    package the lockfile pins (a lint checks that before boot, cargo/vendor.py), so cargo
    wanted one the lockfile does not pin: the lockfile is out of date with the manifests,
    or a manifest names a registry the guest cannot resolve to the one the lockfile pins."""

    code = "cold-cache"

    def __init__(self, tree: Path, package: str | None, line: str) -> None:
        super().__init__()
        self.tree = tree
        self.package = package
        self.line = line

    def guidance(self) -> Guidance:
        what = f"the package {_p(self.package)}" if self.package else "a dependency"
        return Guidance(
            summary=f"Cargo in the VM looked for {what}, which the lockfile of {_p(self.tree)} "
            "does not pin.",
            notes=(_said("Cargo said", self.line),
                   "The VM cannot fetch what is missing: it has no network device, by design, "
                   "since the tree's build scripts and proc macros run in it. It is given "
                   "every package the lockfile pins, and nothing else.",
                   "Ask the branch's author to commit a Cargo.lock that matches its manifests. "
                   "If a manifest names a registry (`registry = \"<name>\"`), define it as "
                   "[registries.<name>] index in $CARGO_HOME/config.toml or in the tree's "
                   ".cargo/config.toml. Then fetch what the lockfile pins:",),
            commands=(fetch_deps_command(self.tree),),
        )


class LockfileWouldBeWritten(Refusal):
    code = "lockfile-would-be-written"

    def __init__(self, tree: Path, line: str) -> None:
        super().__init__()
        self.tree = tree
        self.line = line

    def guidance(self) -> Guidance:
        # No command here runs host cargo on the tree's manifests: regenerating a lockfile
        # resolves the sources the tree chose (`git = "file:///..."`, `ssh://`) with the
        # host's network, files and credentials. The branch's author owns the lockfile.
        return Guidance(
            summary=f"Linting {_p(self.tree)} would write Cargo.lock: it is missing or out "
            "of date.",
            notes=(_said("Cargo said", self.line),
                   "The worktree is mounted read-only and the lint runs --locked: what is "
                   "linted is exactly what is committed.",
                   "Ask the branch's author to commit an up-to-date Cargo.lock, then fetch "
                   "what it pins as below. pylint-sandbox never resolves a tree's "
                   "dependencies with host cargo: that would contact whatever sources the "
                   "tree names, with this host's files and credentials.",),
            commands=(fetch_deps_command(self.tree),),
        )


class TreeFileRefused(Refusal):
    """A file of the tree that the host reads (a manifest, the lockfile) is not read."""

    code = "tree-file-refused"

    def __init__(self, path: Path, why: str) -> None:
        super().__init__()
        self.path = path
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The tree's file {_p(self.path)} was not read: {_p(self.why).rstrip('.')}.",
            notes=("Manifests and the lockfile are read on the host, so they must be regular "
                   "files (not links, devices or FIFOs) within the stated bounds, readable "
                   "by this user, and valid UTF-8 TOML.",
                   "Fix or remove the file in the tree (or ask the branch's author to), then "
                   "run the same command again.",),
        )


class KilledBySignal(Refusal):
    """The clippy step (or a compiler under it) died of a signal and explained nothing.

    It is called an out-of-memory kill only with evidence: `oom_kills`, the processes the
    guest kernel's OOM killer killed during the step, as the guest's init counted them
    (guest_init.sh `oom_kills`). Status 137 alone is any SIGKILL, a build script's own
    `kill -9` included, and more memory would not help that."""

    code = "killed-by-signal"

    def __init__(self, signal_name: str, memory_mib: int, command: str, oom_kills: int = 0) -> None:
        super().__init__()
        self.signal_name = signal_name
        self.memory_mib = memory_mib
        self.command = command
        self.oom_kills = oom_kills

    def guidance(self) -> Guidance:
        killed = f"`{_p(self.command)}` was killed by {_p(self.signal_name)} in the guest"
        if self.oom_kills <= 0:
            return Guidance(
                summary=f"{killed}, and nothing explained why.",
                notes=("The guest's kernel counted no out-of-memory kill during the step, so "
                       "nothing shows that it ran out of memory: the build itself (a build "
                       "script, a proc macro) or something it ran may have sent the signal.",),
            )
        notes, commands = _rerun(self, "--memory", self.memory_mib, MAX_MEMORY_MIB)
        return Guidance(
            summary=f"{killed}: the guest ran out of memory.",
            notes=(f"The guest's kernel killed {self.oom_kills} process"
                   f"{'es' if self.oom_kills != 1 else ''} for lack of memory during the step; "
                   f"the guest has {self.memory_mib} MiB. Raise it with --memory or "
                   "`[vm] memory_mib`.", *notes),
            commands=commands,
        )


class UnexpectedStatus(Refusal):
    code = "unexpected-status"

    def __init__(self, command: str, status: int, expected: tuple[int, ...], stderr: str) -> None:
        super().__init__()
        self.command = command
        self.status = status
        self.expected = expected
        self.stderr = stderr

    def guidance(self) -> Guidance:
        expected = " or ".join(str(code) for code in self.expected)
        tail = [_p(line) for line in self.stderr.strip().splitlines()[-8:] if line.strip()]
        return Guidance(
            summary=f"`{_p(self.command)}` exited with status {self.status}; a completed run "
            f"exits with {expected}.",
            notes=("A build that failed is never reported as a clean tree.",),
            details=tuple(tail),
        )


class DeadlineExceeded(Refusal):
    code = "deadline-exceeded"

    def __init__(self, command: str, seconds: float, *,
                 stopped: str = "the VM was killed") -> None:
        super().__init__()
        self.command = command
        self.seconds = seconds
        #: What was cut short: the VM, or the host's own work (copying, parsing) that the
        #: same `[vm] timeout_s` covers.
        self.stopped = stopped

    def guidance(self) -> Guidance:
        notes, commands = _rerun(self, "--timeout", int(self.seconds), MAX_TIMEOUT_S)
        return Guidance(
            summary=f"`{_p(self.command)}` did not finish within its deadline of "
            f"{self.seconds:g} s; {_p(self.stopped)}.",
            notes=("A build cut short is never reported as a clean tree.",
                   "Raise the deadline with --timeout or `[vm] timeout_s` if the tree needs "
                   "longer (software emulation is 10 to 40 times slower than the host).", *notes),
            commands=commands,
        )


class VmFailed(Refusal):
    code = "vm-failed"

    def __init__(self, reason: str, console: str) -> None:
        super().__init__()
        self.reason = reason
        self.console = console

    def guidance(self) -> Guidance:
        tail = [_p(line) for line in self.console.strip().splitlines()[-8:] if line.strip()]
        return Guidance(
            summary=f"The VM did not complete the job: {_p(self.reason).rstrip('.')}.",
            notes=("The last lines of the guest's console follow.",) if tail else (),
            details=tuple(tail),
            commands=("pylint-sandbox doctor",),
        )


class OutputTooLarge(Refusal):
    """The guest's output passed `[vm] output_limit_mib`, one cap for all of a run's step
    streams together (vm/qemu/machine.py `Channels`); `stream` is the one that passed it
    ("stdout", "stderr", or "output" when the VM did not say), `command` its step."""

    code = "output-too-large"

    def __init__(self, stream: str, limit_bytes: int, command: str | None = None) -> None:
        super().__init__()
        self.stream = stream
        self.limit_bytes = limit_bytes
        self.command = command

    def guidance(self) -> Guidance:
        of = f" of `{_p(self.command)}`" if self.command else ""
        return Guidance(
            summary=f"The guest's output passed the limit of {self.limit_bytes} bytes (all "
            f"streams together) on the {_p(self.stream)}{of}; the run was stopped.",
            notes=("Output from the guest is untrusted and bounded. Raise the limit with "
                   "`[vm] output_limit_mib` if the tree really produces that much.",),
        )


class OutputCut(Refusal):
    """A step's stdout or stderr did not arrive whole from the guest: a read of its socket
    failed, or the socket was still open when the reader stopped waiting after qemu
    exited (vm/qemu/machine.py `Channels.cut`). The status the guest reported is then
    over output that was partly lost, and no verdict is made from it."""

    code = "output-cut"

    def __init__(self, stream: str, step: int, command: str, why: str) -> None:
        super().__init__()
        self.stream = stream
        #: The step's place in the job, counted from 1 (the probes come first).
        self.step = step
        self.command = command
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The {_p(self.stream)} of step {self.step}, `{_p(self.command)}`, did not "
            f"arrive whole from the guest: {_p(self.why).rstrip('.')}.",
            notes=("The status the step exited with is not reported over output that was "
                   "partly lost: what was lost could be the errors that decide the run.",
                   "It is this host failing to read the VM's output, not the tree: run the "
                   "same command again; if it recurs, `pylint-sandbox doctor` checks the host.",),
            commands=("pylint-sandbox doctor",),
        )


class TreeTooLarge(Refusal):
    """The tree passed a cap of the copy the guest reads (vm/disks/share_image.py)."""

    code = "tree-too-large"

    def __init__(self, tree: Path, what: str, setting: str, limit: int) -> None:
        super().__init__()
        self.tree = tree
        self.what = what
        self.setting = setting
        self.limit = limit

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The tree {_p(self.tree)} holds {_p(self.what)}, past the limit of "
            f"{self.limit} (`[vm] {_p(self.setting)}`); nothing was linted.",
            notes=("The tree is copied for the VM with bounded work and disk. Remove what "
                   "the build does not need from the workspace, or raise the limit if the "
                   "tree really is that large.",),
            commands=(f"pylint-sandbox config set vm.{_p(self.setting)} {self.limit * 2}",),
        )


class TreeIncomplete(Refusal):
    """Something cargo needs could not be copied for the guest (share_image._needed)."""

    code = "tree-incomplete"

    def __init__(self, tree: Path, left_out: list[tuple[str, str]]) -> None:
        super().__init__()
        self.tree = tree
        self.left_out = left_out

    def guidance(self) -> Guidance:
        shown = [f"{_p(where)} ({_p(why)})" for where, why in self.left_out[:8]]
        more = len(self.left_out) - len(shown)
        return Guidance(
            summary=f"{len(self.left_out)} file(s) of {_p(self.tree)} that cargo needs could "
            "not be copied for the VM; nothing was linted.",
            notes=("A manifest, a lockfile, a build script or a file under a package's src/ "
                   "that is unreadable, not a regular file, or on another filesystem would "
                   "make the guest's build fail over a file you can see. Make it readable, "
                   "or move it into the tree.",)
            + ((f"and {more} more",) if more else ()),
            details=tuple(shown),
        )


class BuildProducedNothing(Refusal):
    code = "build-produced-nothing"

    def __init__(self, reference: str, stderr: str) -> None:
        super().__init__()
        self.reference = reference
        self.stderr = stderr

    def guidance(self) -> Guidance:
        tail = [_p(line) for line in self.stderr.strip().splitlines()[-8:] if line.strip()]
        return Guidance(
            summary="The build produced no lint results: cargo reported no finished build.",
            notes=(f"The image {_p(self.reference)} must be able to build the tree, not just "
                   "lint it: native build dependencies (a C compiler, pkg-config, -dev "
                   "libraries) must be in the image.",
                   "A build that failed is never reported as a clean tree.",),
            details=tuple(tail),
        )


class TargetNotInImage(Refusal):
    """`--target T` for an image whose toolchain lacks T's standard library (rustc's E0463
    "the `T` target may not be installed")."""

    code = "target-not-in-image"

    def __init__(self, triple: str, reference: str) -> None:
        super().__init__()
        self.triple = triple
        self.reference = reference

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"The image {_p(self.reference)} has no standard library for the target "
                    f"{_p(self.triple)}.",
            notes=("A lint never downloads anything, in the guest least of all: the target's "
                   "standard library must be in the image.",
                   "Add it where the image is built (below: the Dockerfile "
                   f"`{dockerfile_command()}` prints, plus `rustup target add`), provision the "
                   "new image, and pin it; or lint without --target.",
                   "A build that could not start is never reported as a clean tree."),
            commands=(target_build_command(self.triple), prefetch_from_docker_command()),
        )


class Unenforceable(Refusal):
    """A sandbox asked for a grant it cannot confine the command to; refused before running."""

    code = "unenforceable"

    def __init__(self, atom: str, command: str, why: str | None = None, *,
                 fix: str | None = None) -> None:
        super().__init__()
        self.atom = atom
        self.command = command
        self.why = why
        #: What the user can change (a grant is the program's, not theirs to widen).
        self.fix = fix

    def guidance(self) -> Guidance:
        notes = [_sentence(f"Why: {_p(self.why)}")] if self.why else []
        notes += [_sentence(_p(self.fix))] if self.fix else []
        return Guidance(
            summary=f"The sandbox cannot enforce the grant `{_p(self.atom)}` for "
            f"`{_p(self.command)}`.",
            notes=tuple(notes),
        )


class SpawnFailed(Refusal):
    code = "spawn-failed"

    def __init__(self, program: str, reason: str) -> None:
        super().__init__()
        self.program = program
        self.reason = reason

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"Could not start {_p(self.program)}: {_p(self.reason).rstrip('.')}.",
            commands=("pylint-sandbox doctor",),
        )


class PlatformUnsupported(Refusal):
    """A host a lint cannot run on (roteiro_py/platform_support.py decides), refused before
    anything starts; never followed by running with less confinement."""

    code = "platform-unsupported"

    def __init__(self, platform: str, supported: str, doc: str, *, reason: str | None = None) -> None:
        super().__init__()
        self.platform = platform
        self.supported = supported
        self.doc = doc
        self.reason = reason

    def guidance(self) -> Guidance:
        why = _p(self.reason).rstrip(".") if self.reason else f"lints run only on {_p(self.supported)}"
        return Guidance(
            summary=f"This host ({_p(self.platform)}) cannot run a lint: {why}.",
            notes=(f"A lint boots a QEMU x86 microvm under KVM (or TCG, by explicit opt-in), "
                   f"waits on it with pidfd and ties it to this process with util-linux's "
                   f"setpriv: that is {_p(self.supported)} and nothing else, and nothing runs "
                   "with less confinement instead.",
                   "Commands that start no VM work here: config, render, cache, fetch-deps.",
                   f"What runs, and what aarch64 Linux and macOS would need: {_p(self.doc)}.",
                   f"Lint on a {_p(self.supported)} host (a CI runner such as ubuntu-latest) "
                   "with --format json, and read its report here:"),
            commands=("pylint-sandbox render REPORT.json",),
        )


# -- exit 4 ----------------------------------------------------------------------------


class AttestationRefused(RoteiroError):
    """`verify` does not accept an attestation for these reports (report/attest.py,
    commands/verify.py): a signature that does not verify, a report that is no subject, a
    `--require` the provenance does not meet, or a file that is not an attestation at all.
    `what` names the file or the requirement, `why` says what was found; both come from
    outside and are escaped here. Exit 3: the gate refused, as a lint's refusals do."""

    exit_code = EXIT_REFUSED
    code = "attestation-refused"

    def __init__(self, what: str, why: str, hint: str | None = None) -> None:
        super().__init__()
        self.what = what
        self.why = why
        self.hint = hint

    def guidance(self) -> Guidance:
        return Guidance(summary=_sentence(f"Refused {_p(self.what)}: {_p(self.why)}"),
                        notes=("The reports were not accepted: nothing here says who made them, "
                               "or how.",) + ((_p(self.hint),) if self.hint else ()),
                        commands=(docs_command("attestation"),))


class AttestKeyUnusable(UsageError):
    """`--attest-key` or `verify --key` names a file that is not an unencrypted Ed25519 key
    of the kind asked for (a private key in PEM or OpenSSH form; a public key in PEM or
    `ssh-ed25519 ...` form). The key's bytes are never quoted."""

    code = "attest-key-unusable"

    def __init__(self, flag: str, path: Path, why: str) -> None:
        super().__init__(_sentence(f"{flag} {printable(str(path))}: {why}"),
                         hint="Make one with: ssh-keygen -t ed25519 -N '' -f attest-key "
                         "(the public half is attest-key.pub).")


class InternalError(RoteiroError):
    """A state the code did not expect: a bug, reported as one line plus the log's path."""

    exit_code = EXIT_INTERNAL
    code = "internal-error"


# -- lint clippy --fix: the host tree is edited only when every edit is sound -------------

#: Files a refusal of `--fix` lists before it counts the rest.
MAX_FIX_FILES_SHOWN = 20
NOTHING_WRITTEN = "Nothing was written to the tree."


class HostileSuggestion(Refusal):
    """A suggestion the guest sent cannot be an honest edit of the file it names (a range
    past its end, reversed, splitting a character, overlapping itself, enormous): the
    round is refused before any file is written (roteiro_py/clippy/fix.py)."""

    code = "hostile-suggestion"

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.path = path
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"A suggestion for {_p(self.path)} was refused: {_p(self.why).rstrip('.')}.",
            notes=(NOTHING_WRITTEN,
                   "No toolchain suggests such an edit: the guest's output was not what rustc "
                   "writes. Lint without --fix and read the findings, or run "
                   "`--fix=patch` and review the diff."),
        )


class FixTargetUnsafe(Refusal):
    """A file `--fix` would write is not the plain file the guest saw: it changed since the
    lint staged it, it is reached through a link, or it is not a regular file."""

    code = "fix-target-unsafe"

    def __init__(self, path: str, why: str) -> None:
        super().__init__(path, why)
        self.path = path
        self.why = why

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"--fix will not write {_p(self.path)}: {_p(self.why).rstrip('.')}.",
            notes=(NOTHING_WRITTEN,
                   "The edits were computed from the copy of the tree the VM linted; they are "
                   "applied only to that same content, never through a link or outside the "
                   "workspace. Run the lint again on the tree as it is now."),
        )


class NoVcsForFix(Refusal):
    """`--fix` on a tree in no git work tree, as `cargo fix` refuses it."""

    code = "no-vcs-for-fix"

    def __init__(self, root: Path) -> None:
        super().__init__(root)
        self.root = root

    def guidance(self) -> Guidance:
        return Guidance(
            summary=f"No VCS found for {_p(self.root)}, and --fix can potentially perform "
            "destructive changes.",
            notes=(NOTHING_WRITTEN,
                   "As cargo fix: pass --allow-no-vcs to edit it anyway, or --fix=patch to "
                   "print the edits as a diff instead."),
        )


class DirtyTreeForFix(Refusal):
    """`--fix` on a git work tree with uncommitted changes, as `cargo fix` refuses it:
    `dirty` (changed in the work tree, or untracked) unless --allow-dirty, `staged`
    (changed in the index) unless --allow-staged; each file listed as cargo lists it."""

    code = "dirty-tree-for-fix"

    def __init__(self, root: Path, dirty: Sequence[str], staged: Sequence[str]) -> None:
        super().__init__(root)
        self.root = root
        self.dirty = tuple(dirty)
        self.staged = tuple(staged)

    def guidance(self) -> Guidance:
        listed = [f"* {_p(name)} (dirty)" for name in self.dirty]
        listed += [f"* {_p(name)} (staged)" for name in self.staged]
        more = len(listed) - MAX_FIX_FILES_SHOWN
        return Guidance(
            summary=f"The working directory {_p(self.root)} has uncommitted changes, and "
            "--fix can potentially perform destructive changes.",
            notes=(NOTHING_WRITTEN,
                   "As cargo fix: pass --allow-dirty or --allow-staged to suppress this, or "
                   "commit the changes to these files:"),
            details=(*listed[:MAX_FIX_FILES_SHOWN], *([f"and {more} more"] if more > 0 else [])),
        )
