"""The command line: parse, call one core function, map the result or error to an exit code.

Nothing here decides anything about linting. The heavy parts (pydantic, the store, the VM
backend, the report) are imported inside the command functions, so `--help` costs only
Typer and rich (measured in the closing note of the foundation issue).

`main()` is the one boundary that turns exceptions into exit codes (see errors.py):
refusals render their guidance, usage errors exit 2, anything unexpected is one line plus
the path of a log holding the traceback (shown only with --debug, never with locals), and
stdout's reader leaving is 141, said by no one (roteiro_py/stdout.py).
"""

from __future__ import annotations

import copy
import os
import sys
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from typer._click import HelpFormatter  # typer carries its own click (see _invocation)
from typer.core import TyperGroup

from roteiro_py.shipped import DOCS
from roteiro_py.vocabulary import (
    DEFAULT_DEBIAN_ARCHIVE,
    DEFAULT_DEBIAN_SECURITY_ARCHIVE,
    DEFAULT_DEBIAN_SUITE,
    ENVIRONMENT,
    EXIT_CODES,
)

if TYPE_CHECKING:
    from roteiro_py.invocation import Invocation

#: The order `--help` lists the commands in: the one a user came for, then the others as
#: a first run meets them. Click lists a Typer's own commands before its groups (lint was
#: seventh); a command not named here comes after these, in the order it was declared.
COMMAND_ORDER = ("lint", "render", "review", "verify", "tree-digest", "image", "doctor", "prefetch",
                 "fetch-deps", "cache", "config", "docs", "dockerfile")


def first_sentence(text: str | None) -> str:
    """The first sentence of a command's docstring, whole. Click cuts a command's line in
    the listing to the terminal's width less the longest name (45 to 60 characters at
    80 columns: "Provision a linter image (and the VM assets) into the local...")."""
    flat = " ".join((text or "").split("\n\n", 1)[0].split())
    end = flat.find(". ")
    return flat if end < 0 else flat[:end + 1]


def _plain(text: str) -> str:
    """A vocabulary table's Markdown (README prints it) as --help's plain text."""
    return text.replace("`", "")


class _Group(TyperGroup):
    """Commands listed in COMMAND_ORDER, each with its whole first sentence."""

    def list_commands(self, ctx: typer.Context) -> list[str]:  # type: ignore[override]
        names = list(self.commands)
        return sorted(names, key=lambda name: (
            COMMAND_ORDER.index(name) if name in COMMAND_ORDER else len(COMMAND_ORDER), names.index(name)))

    def format_commands(self, ctx: typer.Context, formatter: HelpFormatter) -> None:  # type: ignore[override]
        rows = []
        for name in self.list_commands(ctx):
            command = self.get_command(ctx, name)
            if command is not None and not command.hidden:
                rows.append((name, command.short_help or first_sentence(command.help)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


class _Root(_Group):
    """The program's help ends with its exit statuses and the variables it reads, from the
    one table of each (vocabulary.py)."""

    def format_epilog(self, ctx: typer.Context, formatter: HelpFormatter) -> None:  # type: ignore[override]
        super().format_epilog(ctx, formatter)
        with formatter.section("Exit codes"):
            formatter.write_dl([(str(code), _plain(meaning)) for code, meaning in EXIT_CODES])
        with formatter.section("Environment"):
            formatter.write_dl([(name, _plain(meaning)) for name, meaning in ENVIRONMENT])


app = typer.Typer(
    name="pylint-sandbox",
    help="Lint a Rust repository with cargo clippy inside a disposable microVM.",
    cls=_Root,
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    pretty_exceptions_show_locals=False,
    # --install-completion / --show-completion: typer imports its completion code only
    # when one is used (--help measured: see tests/unit/cli/test_help.py)
    add_completion=True,
    # Plain help text: typer's rich help formatter imports rich.markdown and markdown-it,
    # which doubled the wall time of `--help` (measured: 288 ms -> see bench/cli_startup.py).
    rich_markup_mode=None,
    context_settings={"help_option_names": ["-h", "--help"]},
)
lint_app = typer.Typer(help="Lint a repository inside the sandbox.", cls=_Group, no_args_is_help=True,
                       rich_markup_mode=None)
config_app = typer.Typer(help="Show and change configuration.", cls=_Group, no_args_is_help=True,
                         rich_markup_mode=None)
cache_app = typer.Typer(help="List the caches lints keep and the provisioned images; prune the "
                             "caches (each is rebuilt when missing); remove an image, or all but one.",
                        cls=_Group, no_args_is_help=True, rich_markup_mode=None)
app.add_typer(lint_app, name="lint")
app.add_typer(config_app, name="config")
image_app = typer.Typer(help="Make linter images on this host.", cls=_Group, no_args_is_help=True,
                        rich_markup_mode=None)
app.add_typer(cache_app, name="cache")
app.add_typer(image_app, name="image")

_state = {"debug": False}
#: The words after the program name, as `main()` was given them: a suggested rerun
#: repeats them (roteiro_py/invocation.py); empty when the app was called another way.
_argv: list[tuple[str, ...]] = []


#: `--format`'s help: the formats are checked by the core (lint/output.py), since
#: FMT=PATH is not an enum a parser can check.
_FORMAT_HELP = ("Report format: human, json, sarif, github, gitlab or markdown; FMT=PATH writes it "
                "to PATH. Repeatable: every format from one run; at most one without =PATH (stdout).")
_OUTPUT_HELP = "Write the report to FILE, not stdout (the one --format without =PATH)."
_CATEGORY_HELP = ("SARIF runs[].automationDetails.id, so code scanning keeps several jobs' uploads "
                  "apart (letters, digits, ._:=/-).")
#: `lint clippy`'s and `render`'s, stated once.
_BASELINE_HELP = "A JSON report of an earlier run: findings already in it are known and do not fail the run."
_DIFF_HELP = ("A unified diff of the change (git diff BASE...HEAD): only findings on lines it adds "
              "fail the run.")
_COLOR_HELP = "Colour in the human report (default: CARGO_TERM_COLOR, else auto)."
_ACCEL_HELP = "Accelerator; tcg (software emulation, not a security boundary) only when chosen."


class Color(StrEnum):
    auto = "auto"
    always = "always"
    never = "never"


class Accel(StrEnum):
    auto = "auto"
    kvm = "kvm"
    tcg = "tcg"


class FailOn(StrEnum):
    warning = "warning"
    error = "error"
    never = "never"


class Analyzer(StrEnum):
    clippy = "clippy"


class MessageFormat(StrEnum):
    """`--message-format`: vocabulary.MESSAGE_FORMATS, each cargo's own spelling."""

    json = "json"
    json_diagnostic_short = "json-diagnostic-short"
    json_diagnostic_rendered_ansi = "json-diagnostic-rendered-ansi"
    short = "short"


class ListFormat(StrEnum):
    human = "human"
    json = "json"


class DocTopic(StrEnum):
    """shipped.DOCS, by name (a test checks they are the same)."""

    threat_model = "threat-model"
    adopting = "adopting"
    platforms = "platforms"
    report_schema = "report-schema"
    attestation = "attestation"


class CacheKind(StrEnum):
    """commands/cache.py `KINDS`, by the names `--kind` takes (a test checks they are the same)."""

    deps = "deps"
    template = "template"
    rootfs = "rootfs"
    build = "build"
    cargo_view = "cargo-view"
    image_build = "image-build"
    image = "image"


def _version(value: bool) -> None:
    if value:
        # lazy: the configuration is read only for --version, never for --help
        from roteiro_py.commands.version import version_text

        sys.stdout.write(version_text())
        raise typer.Exit(0)


@app.callback()
def _root(
    debug: Annotated[bool, typer.Option("--debug", help="Show tracebacks of internal errors.")] = False,
    version: Annotated[bool, typer.Option("--version", callback=_version, is_eager=True,
                                          help="Show the version and the configured image, and exit.")] = False,
) -> None:
    _state["debug"] = debug


@lint_app.command("clippy", context_settings={"allow_extra_args": True},
                  epilog="Lint levels go after `--`, as cargo clippy takes them: "
                  "pylint-sandbox lint clippy . -- -D warnings -A clippy::needless_return")
def lint_clippy(
    ctx: typer.Context,
    path: Annotated[Path, typer.Argument(help="The workspace, or a member inside it (that member is "
                                         "linted, as cargo clippy run in its directory).")] = Path("."),
    package: Annotated[list[str] | None, typer.Option(
        "--package", "-p", help="Lint this package (repeatable).")] = None,
    workspace: Annotated[bool | None, typer.Option("--workspace", help="Lint every member.")] = None,
    exclude: Annotated[list[str] | None, typer.Option(
        help="Leave this member out of --workspace (repeatable).")] = None,
    lib: Annotated[bool, typer.Option("--lib", help="Lint the library target.")] = False,
    bins: Annotated[bool, typer.Option("--bins", help="Lint every binary target.")] = False,
    bin: Annotated[list[str] | None, typer.Option("--bin", help="Lint this binary (repeatable).")] = None,
    tests: Annotated[bool, typer.Option("--tests", help="Lint every test target.")] = False,
    test: Annotated[list[str] | None, typer.Option("--test", help="Lint this test (repeatable).")] = None,
    examples: Annotated[bool, typer.Option("--examples", help="Lint every example.")] = False,
    example: Annotated[list[str] | None, typer.Option(
        "--example", help="Lint this example (repeatable).")] = None,
    benches: Annotated[bool, typer.Option("--benches", help="Lint every bench target.")] = False,
    bench: Annotated[list[str] | None, typer.Option("--bench", help="Lint this bench (repeatable).")] = None,
    target: Annotated[str | None, typer.Option(
        help="Target triple to check for (the image needs its standard library).")] = None,
    image: Annotated[str | None, typer.Option(help="Linter image, pinned by digest.")] = None,
    format: Annotated[list[str] | None, typer.Option("--format", metavar="FMT[=PATH]", help=_FORMAT_HELP)] = None,
    output: Annotated[Path | None, typer.Option(metavar="FILE", help=_OUTPUT_HELP)] = None,
    category: Annotated[str | None, typer.Option(metavar="NAME", help=_CATEGORY_HELP)] = None,
    message_format: Annotated[MessageFormat | None, typer.Option(
        "--message-format", metavar="FMT",
        help="Print cargo's own message stream on stdout, as `cargo clippy --message-format=FMT` "
        "does (json, json-diagnostic-short, json-diagnostic-rendered-ansi, short), with host paths; "
        "the report then only goes to files (--format FMT=PATH, --output).")] = None,
    baseline: Annotated[Path | None, typer.Option(
        "--baseline", metavar="REPORT.json",
        help="A JSON report of an earlier run: findings already in it are known and do not fail the run.")] = None,
    diff: Annotated[Path | None, typer.Option(
        "--diff", metavar="FILE",
        help="A unified diff of the change (git diff BASE...HEAD): only findings on lines it adds "
        "fail the run.")] = None,
    all_targets: Annotated[bool | None, typer.Option(
        "--all-targets", help="Lint tests, benches and examples too.")] = None,
    features: Annotated[list[str] | None, typer.Option(
        "--features", "-F", help="Cargo features to enable, comma- or space-separated (repeatable).")] = None,
    all_features: Annotated[bool | None, typer.Option("--all-features", help="Enable every feature.")] = None,
    no_default_features: Annotated[bool | None, typer.Option(
        "--no-default-features", help="Disable the default feature.")] = None,
    no_deps: Annotated[bool | None, typer.Option(
        "--no-deps", help="Lint only the selected packages, not their path dependencies.")] = None,
    manifest_path: Annotated[Path | None, typer.Option(
        "--manifest-path", metavar="PATH", help="The Cargo.toml of the package or workspace to "
        "lint, as cargo takes it (instead of the PATH argument).")] = None,
    accel: Annotated[Accel | None, typer.Option(
        help="Accelerator; tcg (software emulation, not a security boundary) only when chosen.")] = None,
    cpus: Annotated[int | None, typer.Option(help="Guest vCPUs.")] = None,
    memory: Annotated[int | None, typer.Option(help="Guest memory in MiB.")] = None,
    timeout: Annotated[int | None, typer.Option(help="Deadline for the run, in seconds.")] = None,
    fail_on: Annotated[FailOn | None, typer.Option(
        "--fail-on", help="Lowest level that makes the exit status 1.")] = None,
    keep_cache: Annotated[bool | None, typer.Option(
        "--keep-cache", help="Keep the build cache for later runs (trusted trees only).")] = None,
    dep_cache: Annotated[bool | None, typer.Option(
        "--dep-cache/--no-dep-cache",
        help="Reuse the dependencies built once per lockfile in a VM of their own (default: on).")] = None,
    quiet: Annotated[bool | None, typer.Option(
        "--quiet", "-q", help="Print no progress on stderr (refusals and warnings still).")] = None,
    verbose: Annotated[bool, typer.Option(
        "--verbose", "-v", help="Also print, on stderr, every note of each stage (the crates cargo "
        "checks), the settings that chose the image and accelerator, the image's digest, the "
        "root filesystem, the dependency cache's key and state, the VM template, and the "
        "command line run in the guest.")] = False,
    color: Annotated[Color | None, typer.Option(
        "--color", help="Colour in the human report (default: CARGO_TERM_COLOR, else auto).")] = None,
    attest: Annotated[Path | None, typer.Option(
        "--attest", metavar="FILE", help="Write an in-toto statement of the run's provenance, its "
        "subjects the report files written (docs/ATTESTATION.md).")] = None,
    attest_key: Annotated[Path | None, typer.Option(
        "--attest-key", metavar="KEY", help="Sign the --attest statement as a DSSE envelope with "
        "this Ed25519 private key (PEM or OpenSSH, unencrypted).")] = None,
    fix: Annotated[str | None, typer.Option(
        "--fix", metavar="[=patch]",
        help="Apply clippy's machine-applicable suggestions to the tree as cargo clippy --fix "
        "does (the VM computes them; nothing of the tree runs here). --fix=patch prints them "
        "as a unified diff on stdout instead (patch -p1 applies it).")] = None,
    allow_dirty: Annotated[bool, typer.Option(
        "--allow-dirty", help="--fix even if the working directory has changes.")] = False,
    allow_staged: Annotated[bool, typer.Option(
        "--allow-staged", help="--fix even if the working directory has staged changes.")] = False,
    allow_no_vcs: Annotated[bool, typer.Option(
        "--allow-no-vcs", help="--fix even if no VCS was detected.")] = False,
) -> None:
    """Run cargo clippy on PATH inside a disposable VM and report the findings."""
    from roteiro_py.lint import LintRequest, run_lint_command
    from roteiro_py.lint.preflight import manifest_directory

    if verbose and quiet:
        _guard(lambda: _usage("--verbose and --quiet cannot be used together."))
    if fix not in (None, "apply", "patch"):
        _guard(lambda: _usage(f"--fix takes no value or `patch`, not {fix!r}."))
    if fix is not None and attest is not None:
        _guard(lambda: _usage("--attest and --fix cannot be used together: the attestation would "
                              "name a tree the edits then change. Attest a lint of the fixed tree."))
    if fix is not None and message_format is not None:
        _guard(lambda: _usage("--message-format and --fix cannot be used together: cargo's stream "
                              "would describe the tree before the edits. Lint the fixed tree with "
                              "--message-format."))
    if fix is None and (allow_dirty or allow_staged or allow_no_vcs):
        _guard(lambda: _usage("--allow-dirty, --allow-staged and --allow-no-vcs go with --fix."))
    fixing = None
    if fix is not None:
        # here: the edit engine (clippy/, dulwich) loads only for --fix
        from roteiro_py.lint.fix import FixOptions

        fixing = FixOptions(mode="patch" if fix == "patch" else "apply", allow_dirty=allow_dirty,
                            allow_staged=allow_staged, allow_no_vcs=allow_no_vcs)
    levels = list(ctx.args)
    if str(path).startswith("-") and not path.exists():
        # `lint clippy -- -D warnings`: with no PATH, click hands the first word after
        # `--` to PATH; it is the first lint-level word, and PATH is the default.
        levels, path = [str(path), *levels], Path(".")
    selected = [kind for kind, on in (("lib", lib), ("bins", bins), ("tests", tests),
                                      ("examples", examples), ("benches", benches)) if on]
    selected += [f"{kind}:{name}" for kind, names in (("bin", bin), ("test", test),
                                                      ("example", example), ("bench", bench))
                 for name in names or ()]

    flags = {
        "lint.image": (image, "--image"),
        "lint.all_targets": (all_targets, "--all-targets"),
        "lint.features": (features or None, "--features"),
        "lint.all_features": (all_features, "--all-features"),
        "lint.no_default_features": (no_default_features, "--no-default-features"),
        "lint.fail_on": (fail_on.value if fail_on else None, "--fail-on"),
        "lint.keep_cache": (keep_cache, "--keep-cache"),
        "lint.dep_cache": (dep_cache, "--dep-cache" if dep_cache else "--no-dep-cache"),
        "lint.quiet": (quiet, "--quiet"),
        "lint.packages": (package or None, "--package"),
        "lint.workspace": (workspace, "--workspace"),
        "lint.exclude": (exclude or None, "--exclude"),
        "lint.no_deps": (no_deps, "--no-deps"),
        "lint.targets": (selected or None, "--lib/--bins/--bin/--tests/--examples/--benches"),
        "lint.target": (target, "--target"),
        "lint.levels": (levels or None, "lint levels after --"),
        "lint.color": (color.value if color else None, "--color"),
        "vm.accel": (accel.value if accel else None, "--accel"),
        "vm.cpus": (cpus, "--cpus"),
        "vm.memory_mib": (memory, "--memory"),
        "vm.timeout_s": (timeout, "--timeout"),
    }
    _guard(lambda: run_lint_command(LintRequest(path=manifest_directory(manifest_path, path),
                                                flags=flags, output=output,
                                                baseline=baseline, diff=diff,
                                                formats=tuple(format or ()), category=category,
                                                message_format=message_format.value if message_format else None,
                                                verbose=verbose, attest=attest,
                                                attest_key=attest_key, fix=fixing)),
           invocation=_invocation(ctx), lint=True)


@app.command("render")
def render(
    report: Annotated[Path, typer.Argument(help="A JSON report (--format json) of an earlier lint.")],
    format: Annotated[list[str] | None, typer.Option("--format", metavar="FMT[=PATH]", help=_FORMAT_HELP)] = None,
    output: Annotated[Path | None, typer.Option(metavar="FILE", help=_OUTPUT_HELP)] = None,
    category: Annotated[str | None, typer.Option(metavar="NAME", help=_CATEGORY_HELP)] = None,
    fail_on: Annotated[FailOn | None, typer.Option(
        "--fail-on", help="Lowest level that makes the exit status 1.")] = None,
    baseline: Annotated[Path | None, typer.Option("--baseline", metavar="REPORT.json", help=_BASELINE_HELP)] = None,
    diff: Annotated[Path | None, typer.Option("--diff", metavar="FILE", help=_DIFF_HELP)] = None,
    color: Annotated[Color | None, typer.Option("--color", help=_COLOR_HELP)] = None,
) -> None:
    """Render a saved JSON report in any format, as the lint would have: no VM, no image."""
    from roteiro_py.commands.render import RenderRequest, run_render

    flags = {"lint.fail_on": (fail_on.value if fail_on else None, "--fail-on"),
             "lint.color": (color.value if color else None, "--color")}
    _guard(lambda: run_render(RenderRequest(report=report, formats=tuple(format or ()), output=output,
                                            category=category, baseline=baseline, diff=diff, flags=flags)))


@app.command("verify")
def verify(
    reports: Annotated[list[Path], typer.Argument(help="Report files the attested run wrote.")],
    attestation: Annotated[Path, typer.Option(
        "--attestation", metavar="FILE", help="The attestation `lint clippy --attest` wrote.")],
    key: Annotated[Path | None, typer.Option(
        "--key", metavar="PUB", help="The Ed25519 public key (PEM or ssh-ed25519) whose "
        "signature must verify.")] = None,
    allow_unsigned: Annotated[bool, typer.Option(
        "--allow-unsigned", help="Verify without --key: the statement's signature is checked "
        "elsewhere (gh attestation verify); the output says it was not checked here.")] = False,
    require: Annotated[list[str] | None, typer.Option(
        "--require", metavar="K=V", help="A policy the run must meet: image=sha256:<hex>, "
        "isolation=kvm|tcg, commit=<sha> (repeatable; any unmet refuses, exit 3).")] = None,
) -> None:
    """Check that reports are what an attested lint wrote, and print its provenance."""
    from roteiro_py.commands.verify import VerifyRequest, run_verify

    _guard(lambda: run_verify(VerifyRequest(reports=tuple(reports), attestation=attestation,
                                            key=key, requires=tuple(require or ()),
                                            allow_unsigned=allow_unsigned)))


@app.command("tree-digest")
def tree_digest(
    path: Annotated[Path, typer.Argument(help="A worktree (the workspace a lint was given).")] = Path("."),
) -> None:
    """Print the content digest `lint clippy --attest` records of a tree (docs/ATTESTATION.md)."""
    from roteiro_py.commands.verify import run_tree_digest

    _guard(lambda: run_tree_digest(path))


@app.command("review")
def review(
    report: Annotated[Path, typer.Argument(help="A JSON report (--format json) of a lint of this pull request.")],
    tree: Annotated[Path, typer.Option(help="The checkout the report's paths are relative to.")] = Path("."),
    diff: Annotated[Path | None, typer.Option(
        metavar="FILE", help="The pull request's unified diff: comments go only on lines it adds.")] = None,
    annotate: Annotated[bool, typer.Option(
        "--annotate/--no-annotate", help="When the review cannot be posted, print the findings as "
        "annotations (--no-annotate: an earlier step already did).")] = True,
) -> None:
    """Post the findings as review comments on the pull request (GitHub Actions), with
    machine-applicable suggestions as suggested changes; annotations when the token may not write."""
    from roteiro_py.commands.review import ReviewRequest, run_review  # lazy: --help stays light

    _guard(lambda: run_review(ReviewRequest(report=report, tree=tree, diff=diff, annotate=annotate)))


@app.command("prefetch")
def prefetch(
    analyzer: Annotated[Analyzer | None, typer.Option(help="The analyzer whose image to provision.")] = None,
    image: Annotated[str | None, typer.Option(
        help="Image reference (default: the configured [lint] image; with --from oci:PATH and none "
        "configured, the layout's one image). From oci:PATH a name without a digest names the "
        "layout's one image.")] = None,
    allow_download: Annotated[bool, typer.Option(
        "--allow-download", help="Permit downloading the image from a registry. --vm-assets needs "
        "no permission (downloading is all it does) and accepts the flag.")] = False,
    from_: Annotated[str, typer.Option("--from", help="registry (default), docker, or oci:PATH.")] = "registry",
    vm_assets: Annotated[bool, typer.Option("--vm-assets", help="Provision the guest kernel and initramfs.")] = False,
    path: Annotated[Path, typer.Option(help="Repository whose configuration names the image.")] = Path("."),
    prune: Annotated[bool, typer.Option("--prune", help="Delete blobs no provisioned image uses.")] = False,
) -> None:
    """Provision a linter image (and the VM assets) into the local store; a lint never pulls."""
    from roteiro_py.commands.prefetch import run_prefetch

    _guard(lambda: run_prefetch(analyzer=analyzer.value if analyzer else None, image=image,
                                allow_download=allow_download, source=from_,
                                vm_assets=vm_assets, path=path, prune=prune))


@image_app.command("build")
def image_build(
    toolchain: Annotated[str | None, typer.Option(
        help="The installed rustup toolchain whose cargo, rustc and clippy go in the image "
        "(default: 1.95.0, unless --from-dist or --toolchain-file is given).")] = None,
    from_dist: Annotated[str | None, typer.Option(
        "--from-dist", metavar="SPEC", help="Fetch the toolchain from Rust's distribution instead, "
        "its signature checked against the Rust release key: 1.95.0, 1.95, stable, beta, nightly, "
        "nightly-2026-11-01 (the server: RUSTUP_DIST_SERVER, else static.rust-lang.org).")] = None,
    toolchain_file: Annotated[Path | None, typer.Option(
        "--toolchain-file", metavar="FILE", help="Fetch what a repository's rust-toolchain.toml "
        "(or rust-toolchain) pins, read as data: its channel, components and targets.")] = None,
    target: Annotated[list[str] | None, typer.Option(
        "--target", metavar="TRIPLE", help="Also the standard library for this target "
        "(repeatable; with --from-dist or --toolchain-file).")] = None,
    component: Annotated[list[str] | None, typer.Option(
        "--component", metavar="NAME", help="Also this rustup component (repeatable; with "
        "--from-dist or --toolchain-file).")] = None,
    output: Annotated[Path | None, typer.Option(
        help="Also write the OCI image layout to this directory (for `prefetch --from oci:DIR` elsewhere).")]
    = None,
    without_clippy: Annotated[bool, typer.Option(
        "--without-clippy", help="Leave out cargo-clippy and clippy-driver (an image that lacks the linter).")]
    = False,
    no_gcc: Annotated[bool, typer.Option(
        "--no-gcc", help="Leave out gcc and libc6-dev (crates with build scripts or proc macros then "
        "fail to lint).")] = False,
    archive: Annotated[str | None, typer.Option(
        help="Debian archive: a URL or a local directory (default: [vm] debian_archive, "
        f"{DEFAULT_DEBIAN_ARCHIVE} unless set).")] = None,
    suite: Annotated[str | None, typer.Option(
        help=f"Debian suite (default: [vm] debian_suite, {DEFAULT_DEBIAN_SUITE} unless set).")] = None,
    security_archive: Annotated[str | None, typer.Option(
        help="Debian security archive, suite SUITE-security; \"\" reads none (default: [vm] "
        f"debian_security_archive, {DEFAULT_DEBIAN_SECURITY_ARCHIVE} unless set).")] = None,
    force: Annotated[bool, typer.Option("--force", help="Build again even when the inputs are unchanged "
                                        "(to take Debian's security updates).")] = False,
    set_image: Annotated[bool, typer.Option(
        "--set-image/--no-set-image", help="With no image configured, make this one lint.image in "
        "your config.toml (default); --no-set-image only prints the `config set` line.")] = True,
) -> None:
    """Build a digest-pinned linter image (a verified Debian root and a Rust toolchain) and
    provision it into the store; prints its pinned reference."""
    from roteiro_py.commands.image import run_image_build  # lazy: the store and archive code stay out of --help

    _guard(lambda: run_image_build(toolchain_name=toolchain, output=output, with_clippy=not without_clippy,
                                   with_gcc=not no_gcc, archive=archive, suite=suite,
                                   security_archive=security_archive, force=force, from_dist=from_dist,
                                   toolchain_file_path=toolchain_file, targets=tuple(target or ()),
                                   components=tuple(component or ()), set_image=set_image))


@app.command("fetch-deps")
def fetch_deps(
    path: Annotated[Path, typer.Argument(help="The repository whose dependencies to fetch.")] = Path("."),
    from_dir: Annotated[Path | None, typer.Option(
        "--from", help="Take `.crate` files from this directory only (an air-gapped host); "
        "nothing is downloaded.")] = None,
) -> None:
    """Fill the package store with what PATH's Cargo.lock pins, reading nothing else of the tree."""
    from roteiro_py.commands.fetch_deps import run_fetch_deps

    _guard(lambda: run_fetch_deps(path, from_dir))


@app.command("doctor")
def doctor(
    verify: Annotated[bool, typer.Option(
        "--verify", help="Also re-hash every stored image and cached root filesystem "
        "(what a lint's checks cannot see: media corruption). Seconds per image.")] = False,
    format: Annotated[ListFormat, typer.Option("--format", help="Output format.")] = ListFormat.human,
    path: Annotated[Path, typer.Option(help="Repository whose configuration to check (image, accelerator).")]
    = Path("."),
    accel: Annotated[Accel | None, typer.Option(help=_ACCEL_HELP + " Checked as a lint with it would use it.")]
    = None,
) -> None:
    """Show what this host has for sandboxed linting, and what to do about what is missing.

    Exits 0 when a lint of PATH can run on this host, 3 when a required check fails,
    2 when PATH does not exist."""
    from roteiro_py.commands.doctor import run_doctor

    flags = {"vm.accel": (accel.value if accel else None, "--accel")}
    _guard(lambda: run_doctor(verify=verify, path=path, format=format.value, flags=flags))


@cache_app.command("list")
def cache_list(
    format: Annotated[ListFormat, typer.Option("--format", help="Output format.")] = ListFormat.human,
) -> None:
    """Every cache under $ROTEIRO_HOME/cache and every provisioned image in the store: kind,
    key, size on disk, last use, path (an image: its reference); a total."""
    from roteiro_py.commands.cache import run_list

    _guard(lambda: run_list(format=format.value))


@cache_app.command("prune")
def cache_prune(
    older_than: Annotated[float | None, typer.Option(
        "--older-than", metavar="DAYS", min=0, help="Remove caches last used more than DAYS ago.")] = None,
    max_size: Annotated[int | None, typer.Option(
        "--max-size", metavar="MIB", min=0,
        help="Remove the least recently used caches until the rest take MIB or less.")] = None,
    kind: Annotated[list[CacheKind] | None, typer.Option(
        "--kind", help="Only caches of this kind (repeatable; default: every kind).")] = None,
    all_: Annotated[bool, typer.Option("--all", help="Remove every cache no lint is using.")] = False,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Say what would go; remove nothing.")] = False,
) -> None:
    """Remove caches by age or size, oldest first; never one a running lint holds."""
    from roteiro_py.commands.cache import run_prune

    _guard(lambda: run_prune(older_than_days=older_than, max_size_mib=max_size,
                             kinds=[k.value for k in kind or []], everything=all_, dry_run=dry_run))


@cache_app.command("remove-image")
def cache_remove_image(
    reference: Annotated[str | None, typer.Argument(
        metavar="IMAGE_REF", help="The image's reference as `cache list` shows it.")] = None,
    all_except: Annotated[str | None, typer.Option(
        "--all-except", metavar="IMAGE_REF",
        help="Keep this image and the image build that made it; remove every other "
             "provisioned image and every other image build (what a CI job does before it "
             "saves the image cache).")] = None,
) -> None:
    """Remove one provisioned image: its blobs no other image uses, and the root filesystems
    built from it; never one a running lint holds. With --all-except IMAGE_REF, every
    provisioned image but that one, and every image build (cache/images/clippy-<tag>) but
    the one that built it; says what it removed and what a running lint kept."""
    from roteiro_py.commands.cache import run_remove_all_except, run_remove_image

    if (reference is None) == (all_except is None):
        _guard(lambda: _usage("`cache remove-image` takes IMAGE_REF or --all-except IMAGE_REF, "
                              "one of them."))
    elif all_except is not None:
        _guard(lambda: run_remove_all_except(reference=all_except))
    else:
        _guard(lambda: run_remove_image(reference=str(reference)))


#: `docs`' help, from the topic table (shipped.DOCS): every topic named, with what it is.
_DOCS_HELP = ("Print a document the package carries: " + "; ".join(
    f"{name} ({doc.about})" for name, doc in DOCS.items()) + ".\n\nWithout a TOPIC, the list.")


@app.command("docs", help=_DOCS_HELP, short_help=f"Print a document the package carries: {', '.join(DOCS)}.")
def docs(
    topic: Annotated[DocTopic | None, typer.Argument(help="What to print; without it, the list.")] = None,
) -> None:
    from roteiro_py.shipped import run_docs

    _guard(lambda: run_docs(topic.value if topic else None))


@app.command("dockerfile")
def dockerfile(
    analyzer: Annotated[Analyzer, typer.Argument(help="The analyzer whose linter image to describe.")],
) -> None:
    """Print the Dockerfile of the linter image on stdout, and on stderr how to build and pin it."""
    from roteiro_py.shipped import run_dockerfile

    _guard(lambda: run_dockerfile(analyzer.value))


def _usage(message: str) -> int:
    from roteiro_py.errors import UsageError

    raise UsageError(message)


def _scope(user: bool, repo: bool) -> str:
    if user and repo:
        from roteiro_py.errors import UsageError

        raise UsageError("--user and --repo cannot be used together.")
    return "repo" if repo else "user"


@config_app.command("show")
def config_show(
    path: Annotated[Path, typer.Option(help="Repository to resolve for.")] = Path("."),
) -> None:
    """Print every effective value and where it came from."""
    from roteiro_py.commands.config import show

    _guard(lambda: show(path))


@config_app.command("get")
def config_get(
    key: Annotated[str, typer.Argument(help="section.key, e.g. lint.image")],
    path: Annotated[Path, typer.Option(help="Repository to resolve for.")] = Path("."),
) -> None:
    """Print one effective value."""
    from roteiro_py.commands.config import get

    _guard(lambda: get(key, path))


@config_app.command("set")
def config_set(
    key: Annotated[str, typer.Argument(help="section.key, e.g. lint.image")],
    value: Annotated[str, typer.Argument(help="The value (TOML syntax for lists, numbers, booleans).")],
    user: Annotated[bool, typer.Option("--user", help="Write the user's config.toml (default).")] = False,
    repo: Annotated[bool, typer.Option("--repo", help="Write the repository's roteiro.toml.")] = False,
    path: Annotated[Path, typer.Option(help="Repository for --repo.")] = Path("."),
) -> None:
    """Set a value in the user's or the repository's configuration file."""
    from roteiro_py.commands.config import set_

    _guard(lambda: set_(key, value, _scope(user, repo), path))


@config_app.command("unset")
def config_unset(
    key: Annotated[str, typer.Argument(help="section.key, e.g. lint.image")],
    user: Annotated[bool, typer.Option("--user", help="Change the user's config.toml (default).")] = False,
    repo: Annotated[bool, typer.Option("--repo", help="Change the repository's roteiro.toml.")] = False,
    path: Annotated[Path, typer.Option(help="Repository for --repo.")] = Path("."),
) -> None:
    """Remove a value from the user's or the repository's configuration file."""
    from roteiro_py.commands.config import unset

    _guard(lambda: unset(key, _scope(user, repo), path))


def _print_error(error: BaseException) -> None:
    """The refusal printer: the guidance, through `guard()` like every other output door.

    Its values are already printable (errors.py), but guest stderr quoted in a note sits
    next to the tool's own words, and a CI log reads stderr as closely as stdout.
    """
    from roteiro_py.errors import RoteiroError
    from roteiro_py.untrusted import guard

    assert isinstance(error, RoteiroError)
    guidance = error.guidance()
    if sys.stderr.isatty() and not os.environ.get("NO_COLOR"):
        from roteiro_py.progress import stderr_console

        # Rendered for this terminal (its width wraps lines), then guarded, then written.
        console = stderr_console()
        with console.capture() as captured:
            console.print(guidance.render_rich(), crop=False)  # commands stay whole
        sys.stderr.write(guard(captured.get()))
    else:
        sys.stderr.write(guard(guidance.render_text()))


def _log_internal(error: BaseException) -> Path | None:
    import traceback

    from roteiro_py import paths

    log_dir = paths.roteiro_home() / "logs"
    try:
        log_dir.mkdir(parents=True, exist_ok=True)
        log = log_dir / f"internal-{os.getpid()}.log"
        log.write_text("".join(traceback.format_exception(error)))
        return log
    except OSError:
        return None


class Terminated(BaseException):
    """SIGTERM or SIGHUP, raised in the main thread so every `finally` and `with` runs.

    Without it Python dies on SIGTERM (a cancelled CI job, `timeout`) without unwinding:
    qemu, which leads its own process group, would keep running the hostile build until
    its deadline, and the scratch disk would stay behind.
    """

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_terminated(signum: int, _frame: object) -> None:
    raise Terminated(signum)


def _invocation(ctx: typer.Context) -> Invocation | None:
    """What the user ran, with the grammar of `ctx`'s command, for a rerun to repeat."""
    from roteiro_py.invocation import Invocation

    if not _argv:
        return None
    # typer carries its own click: its options are told by their kind's name.
    options = [param for param in ctx.command.params if param.param_type_name == "option"]
    return Invocation(
        words=_argv[-1],
        options=frozenset(name for param in options for name in (*param.opts, *param.secondary_opts)),
        takes_value=frozenset(name for param in options
                              if not getattr(param, "is_flag", False) and not getattr(param, "count", False)
                              for name in param.opts),
    )


def _guard(call: Callable[[], int], *, invocation: Invocation | None = None, lint: bool = False) -> NoReturn:
    """Run one command's core and exit with its code; the one place errors become codes.

    `invocation`: the command line, given to the error so its rerun repeats it. `lint`: the
    command is a lint, whose refusals promise that no report was made and nothing ran on
    this host instead (errors.NOTHING_RAN); no other command's do (errors.Refusal.promised).
    stdout's reader leaving (stdout.ReaderLeft, a BaseException) passes through to `main()`,
    which also meets it in --help and --version."""
    import signal

    from roteiro_py.errors import EXIT_INTERNAL, EXIT_INTERRUPTED, Refusal, RoteiroError

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, _raise_terminated)
    try:
        code = call()
    except KeyboardInterrupt:
        sys.stderr.write("interrupted\n")
        code = EXIT_INTERRUPTED
    except Terminated as stop:
        sys.stderr.write(f"terminated by {signal.Signals(stop.signum).name}; the VM was stopped\n")
        code = 128 + stop.signum
    except RoteiroError as error:
        if invocation is not None:
            error.invocation = invocation
        if isinstance(error, Refusal):
            error.promised = lint
        _print_error(error)
        if _state["debug"]:
            import traceback

            traceback.print_exception(error)
        code = error.exit_code
    except Exception as error:
        log = _log_internal(error)
        where = f" (traceback in {log})" if log else ""
        from roteiro_py.untrusted import guard, sanitise

        # The message of an unexpected error may quote anything, a guest's bytes included.
        sys.stderr.write(guard(f"internal error: {type(error).__name__}: "
                               f"{sanitise(str(error))}{sanitise(where)}\n"))
        if _state["debug"]:
            import traceback

            traceback.print_exception(error)
        code = EXIT_INTERNAL
    raise typer.Exit(code)


def _fix_value(args: list[str]) -> list[str]:
    """`--fix` alone as `--fix=apply`: cargo's `--fix` takes no value and ours takes an
    optional one (`--fix=patch`), which Typer's options cannot say. Words after `--` are
    cargo's lint levels and are left alone."""
    end = args.index("--") if "--" in args else len(args)
    return [("--fix=apply" if word == "--fix" and at < end else word) for at, word in enumerate(args)]


def main(argv: list[str] | None = None) -> int:
    """Entry point: Typer parses (usage errors exit 2), commands exit through `_guard`.

    stdout's failures end here, whichever command or option (--help, --version) wrote:
    its reader leaving is `ReaderLeft` (exit 141, silent: it is no error of the tool's,
    so it passes through `_guard`), a closed or full stdout a StdoutUnwritable (exit 2);
    roteiro_py/stdout.py says how they are told from a child's broken pipe. What is still
    buffered is flushed here, where its failure can still choose the exit status; at
    interpreter exit it would be "Exception ignored" and exit 120."""
    from roteiro_py import stdout

    args = sys.argv[1:] if argv is None else argv
    _argv.append(tuple(args))
    restore = stdout.install(args)
    try:
        code = _run(_fix_value(args))
        sys.stdout.flush()
    except stdout.ReaderLeft:
        from roteiro_py.errors import EXIT_READER_LEFT

        code = EXIT_READER_LEFT
    except Exception as error:
        from roteiro_py.errors import StdoutUnwritable

        if not isinstance(error, StdoutUnwritable):  # raised by --help/--version, or the last flush
            raise
        _print_error(error)
        code = error.exit_code
    finally:
        _argv.pop()
        restore()
    return code


#: The variable click's shell completion is asked through: it walks the whole tree.
_COMPLETE_VAR = "_PYLINT_SANDBOX_COMPLETE"


def _app_for(args: list[str]) -> typer.Typer:
    """The app with, of its commands and groups, only the one `args` names first: Typer
    builds every command's click parameters from its signature on each run (~25 ms of CPU
    for all, ~10 for `lint`'s: bench/cli_startup.py), and only that one can run. The
    root (its callback, options and settings) is the same object. Any other first word (an
    option, a typo to suggest for, none) and shell completion get the whole app, as does
    a name that is not one of its own."""
    first = args[0] if args else None
    named = [info for info in app.registered_commands if info.name == first]
    groups = [info for info in app.registered_groups if info.name == first]
    if first is None or _COMPLETE_VAR in os.environ or len(named) + len(groups) != 1:
        return app
    pruned = copy.copy(app)
    pruned.registered_commands, pruned.registered_groups = named, groups
    return pruned


def _run(args: list[str]) -> int:
    try:
        _app_for(args)(args=args, prog_name="pylint-sandbox")
    except SystemExit as exit_:
        if exit_.code is None:
            return 0
        return exit_.code if isinstance(exit_.code, int) else 1
    return 0
