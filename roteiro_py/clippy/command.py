"""The exact argv run in the guest for the probe and for the lint, and what pins them.

Stated once here so the orchestrator, the report's `command` field and the tests agree.

Which clippy ran is the image's, and no file in the tree can change that (without the
rules below, a tree `.cargo/config.toml` with `[alias] clippy = ["run", ...]` turns both
the probe and the lint into the tree's own program: exit 0, "clippy 1.99.0", for a tree
with `compile_error!`). What holds it:
- The probes run in PROBE_CWD, outside the tree, so cargo reads no tree `.cargo/config.toml`
  and rustup no tree `rust-toolchain` file (both are found from the working directory up;
  cargo's other config file is `$CARGO_HOME/config.toml`, and the guest's CARGO_HOME is a
  fresh tmpfs holding only the read-only registry shares).
- The lint runs the `cargo-clippy` binary itself, never `cargo clippy`: a tree alias can
  shadow an external subcommand (cargo only warns), but not the built-in `check` that
  cargo-clippy runs, with RUSTC_WORKSPACE_WRAPPER set by it to the `clippy-driver` beside
  it (the variable outranks `build.rustc-workspace-wrapper`).
- PINNED_ENV outranks the config keys that would put another program in the compiler's
  place or load one into it: `build.rustc` (RUSTC), `build.rustc-wrapper` (RUSTC_WRAPPER
  set to NEUTRAL_WRAPPER, the image's `/usr/bin/env`: it execs the compiler it is given
  and does nothing else), and `build.rustflags` /
  `target.<triple>.rustflags` (CARGO_ENCODED_RUSTFLAGS empty: none). rustflags go because
  with `[env] RUSTC_BOOTSTRAP = {value = "1", force = true}` they pass
  `-Zcodegen-backend=<tree .so>` to clippy-driver on a stable toolchain (measured with
  cargo 1.95); a tree that needs `--cfg` flags from its config gets them no more.
  The wrapper is a real file rather than an empty RUSTC_WRAPPER (which also means "no
  wrapper") because cargo fingerprints its rustc info cache (`target/.rustc_info.json`)
  by the wrapper's mtime: with "" it logs `failed to calculate rustc fingerprint: failed
  to load metadata for path ''`, turns the cache off and probes rustc again on every run
  (5 rustc runs before the build, about 2.5 s of a warm lint under TCG; 0 with the cache;
  measured with cargo 1.95). A `--config build.rustc-wrapper=''` from the command line
  does the same. `/usr/bin/env` reads only option words and `NAME=VALUE` words before
  the program; cargo hands it the compiler's absolute path first (RUSTC, or the
  RUSTC_WORKSPACE_WRAPPER cargo-clippy sets), which is why PIN_SCRIPT refuses a sysroot
  holding `=`. An image without `/usr/bin/env` gets the empty RUSTC_WRAPPER (PIN_SCRIPT
  sets one or the other): pinned as well, only without the cache. The info cache lives in the target
  directory, which the tree's build scripts can already write; what it holds (rustc's
  version, cfg and file names) names no program cargo runs, and cargo fingerprints it by
  the compiler's and the wrappers' paths and mtimes, so another image never hits it.
  A new target directory (every default lint) is given the file the clippy probe left
  (`_WARM`, `_PREFILL`): cargo keys each answer by the rustc command line (wrappers, flags,
  target), so a tree's `--target` or build.target is a miss for that target's answers
  only, and a corrupt or foreign file is read as none (measured with cargo 1.95).
- No rustup proxy picks the toolchain from the tree. A rustup image runs `cargo-clippy`
  as a proxy that obeys the working directory's `rust-toolchain.toml`, whose
  `[toolchain] path = "<a directory in the tree>"` puts the tree's own `cargo-clippy` in
  place of the image's: exit 0 for a tree with `compile_error!`, on any rustup image
  without RUST_VERSION. Every step runs through PIN_SCRIPT, which asks
  `rustc --print sysroot` in SYSROOT_CWD (no tree file, and no file any step made, on the
  way up) or reads the answer a VM template sealed (SYSROOT_FILE), and execs
  `<sysroot>/bin/<program>` by absolute path with RUSTUP_TOOLCHAIN, RUSTC and CARGO set to
  that toolchain (RUSTUP_TOOLCHAIN outranks every toolchain file, and rustup accepts a
  path there; measured with rustup 1.29). The probes run the same wrapper, so the clippy
  whose version is reported is the one that lints. It needs the image's `/bin/sh`.
Not guaranteed: the tree's build scripts and proc macros run inside this build (a proc
macro runs inside clippy-driver), so what they print can still lie about findings, and a
nightly image honours the tree's `[unstable]` table and `cargo-features`.
The lint runs with the working directory at the cargo workspace root inside the guest
(no --manifest-path): rustc's `file_name`s are then relative to that root, which is the
`workspace` clippy/parse.py resolves them against. (They are relative to the workspace
root even when cargo is started in a member's directory; measured with cargo 1.95.)

Flags and why:
- --message-format=json: the findings are parsed, never scraped from human output.
- --offline: the guest has no network; without it cargo tries to update the index and
  fails with a network error instead of naming the missing package.
- --locked: the worktree is read-only and what is linted is exactly what is committed;
  a missing or stale Cargo.lock is refused (classify.py) rather than silently resolved.
- --no-deps (`lint.no_deps`): clippy's flag, placed before `--` as `cargo clippy --help`
  lists it; measured with clippy 1.95: `-p a --no-deps` lints `a` and only checks its path
  dependency `b`, whose warning `-p a` alone reports.
- --color=never: cargo's own stderr (classified by wording in classify.py) carries no
  colour escapes.

Which review found each forgery: docs/DESIGN_NOTES.md, section `roteiro_py/clippy/command.py`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from roteiro_py.errors import UsageError
from roteiro_py.vm.mounts import FRESH_CWD

#: What the guest runs for each `--message-format` (a second `--message-format` beside
#: clippy's `json`, cargo's documented combination), and what `short` prints: the
#: `rendered` text (clippy/stream.py gives the stream back; here, apart from it, so the
#: argv is built before any refusal without loading the report's models).
GUEST_RENDERING: dict[str, str | None] = {
    "json": None,
    "json-diagnostic-short": "json-diagnostic-short",
    "json-diagnostic-rendered-ansi": "json-diagnostic-rendered-ansi",
    "short": "json-diagnostic-short",
}

#: Where the probes run in the guest: a tmpfs every boot provides empty, outside the tree
#: and the scratch disk (which a kept cache carries from one run's build scripts to the
#: next), so no tree or build-script file is on the way up from it.
PROBE_CWD = FRESH_CWD
#: Where PIN_SCRIPT asks `rustc --print sysroot`: the guest's root, which no step can write
#: (guest_init.sh: the overlay's upper directory is root's, 0755), so rustup finds no
#: toolchain file there or above that a step left. Not PROBE_CWD: /tmp is the guest's for
#: the whole boot, not each step's, and in a VM whose later steps are pinned after the
#: tree's build scripts ran (the dependency cache's build) one of them could leave
#: `/tmp/rust-toolchain.toml` naming its own toolchain, which rustup obeyed wherever the
#: environment names none (an image without RUST_VERSION).
SYSROOT_CWD = "/"
#: The `build.rustc-wrapper` every step runs with (see above): a program of the image that
#: execs its arguments, so cargo's rustc info cache can fingerprint it.
NEUTRAL_WRAPPER = "/usr/bin/env"
#: The guest variable naming where the clippy probe keeps cargo's rustc info cache
#: (RUSTC_INFO_DIR; lint/run.py guest_env sets it for every step). Unset (a host run of
#: these scripts), nothing is warmed or copied.
RUSTC_INFO_VARIABLE = "ROTEIRO_RUSTC_INFO"
#: Under PROBE_CWD: the tmpfs every boot provides, so in a VM template it is the
#: template's RAM, saved with it and restored privately into each clone.
RUSTC_INFO_DIR = f"{PROBE_CWD}/.roteiro-rustc-info"
#: The file the warm-up leaves there: cargo's own `.rustc_info.json`.
RUSTC_INFO_FILE = "rustc_info.json"
#: The name of the file, in RUSTC_INFO_DIR, holding the image's sysroot as the clippy probe
#: found it (`_WARM`), one line.
SYSROOT_FILE = "sysroot"
#: The image's toolchain, with every proxy pinned to it (see above): the first lines of
#: PIN_SCRIPT and PROBE_SCRIPT. The sysroot is the one SYSROOT_FILE holds when that file
#: and its directory are not the guest user's and it cannot write them: what guest init
#: sealed in a VM template (guest_init.sh: the template steps' /tmp becomes root's and
#: read-only before the template is saved; /tmp's sticky bit keeps the user from renaming
#: it), so no step of a clone, the tree's build scripts included, can choose it. Neither
#: may be a link, and the variable must be absolute: `-O` and `-w` follow a link, so in a
#: VM where the directory is the user's (a cold boot, whose clippy probe made it: the
#: dependency cache's build runs pinned steps after the dependencies' build scripts) a
#: build script could put a link there to any directory it does not own holding a file
#: of that name with the text it chose (a share's: every file there is the host user's,
#: read-only, root's when the lint runs as root), and a relative name is read from the
#: step's working directory, the tree. Else (a cold boot, a host run, a file the user
#: owns or can write, a link) it is asked for in SYSROOT_CWD: one rustc start, ~0.4 s
#: under TCG. Either answer is checked the same way.
_SYSROOT = (
    f'w=${{{RUSTC_INFO_VARIABLE}:-}} s=\n'
    f'case $w in /*) if [ ! -L "$w" ] && [ ! -L "$w/{SYSROOT_FILE}" ] && [ -f "$w/{SYSROOT_FILE}" ] && '
    f'[ ! -O "$w" ] && [ ! -w "$w" ] && [ ! -O "$w/{SYSROOT_FILE}" ] && [ ! -w "$w/{SYSROOT_FILE}" ]; then '
    f'IFS= read -r s < "$w/{SYSROOT_FILE}" || s=; fi 2>/dev/null;; esac\n'
    '[ -n "$s" ] || '
    f"s=$(cd {shlex.quote(SYSROOT_CWD)} && rustc --print sysroot) || {{ st=$?; echo "
    "'pylint-sandbox: `rustc --print sysroot` failed outside the tree' >&2; "
    # killed by a signal (SIGKILL: an OOM kill or any kill -9): keep 128+N, which
    # lint/judgement.py reads as that signal
    '[ "$st" -gt 128 ] && exit "$st"; exit 127; }\n'
    'case $s in *=*) echo "pylint-sandbox: the sysroot $s holds \'=\'" >&2; exit 127;; '
    '/*) ;; *) echo "pylint-sandbox: the sysroot $s is not an absolute path" >&2; '
    "exit 127;; esac\n"
    f"if [ -x {NEUTRAL_WRAPPER} ]; then export RUSTC_WRAPPER={NEUTRAL_WRAPPER}; "
    "else export RUSTC_WRAPPER=; fi\n"
    'export RUSTUP_TOOLCHAIN="$s" RUSTC="$s/bin/rustc" CARGO="$s/bin/cargo"\n'
)
#: Run by the clippy probe (a template step) before it asks the version: cargo-clippy,
#: as the lint runs it (same environment, same pinned programs), on an empty library
#: crate made here in RUSTC_INFO_DIR, away from any tree, with its own target directory
#: and cargo home (the template has neither the scratch disk nor the cargo home mounted).
#: Cargo probes rustc (`-vV`, the target info) and writes the answers to
#: `.rustc_info.json`, which is kept and the rest removed (guest RAM); clippy-driver then
#: checks the crate, which leaves in the template's page cache what every lint's
#: clippy-driver reads first (the standard library's metadata, the compiler's code):
#: an empty crate's lint 0.87x (2.61 against 3.00 s, 9 rounds interleaved) for a
#: template built ~1.5 s longer (docs/PERFORMANCE.md, issue 25 lever 1c). The target
#: directory is made first, else cargo has nowhere to write the file. Its output is
#: dropped and its status ignored: a cargo that stops early only leaves no file (the
#: lint then probes as before), and the probe's own answer decides the step. The sysroot
#: this step pinned (`w` and `s` are _SYSROOT's) goes to SYSROOT_FILE beside it.
_WARM = (
    'if [ "$0" = cargo-clippy ] && [ -n "$w" ] && mkdir "$w" 2>/dev/null; then\n'
    f'  printf \'%s\\n\' "$s" > "$w/{SYSROOT_FILE}"\n'
    '  mkdir -p "$w/crate/src" "$w/target" && : > "$w/crate/src/lib.rs" && printf \'[package]\\n'
    'name = "w"\\nversion = "0.0.0"\\nedition = "2021"\\n\' > "$w/crate/Cargo.toml" &&\n'
    '  (cd "$w/crate" && CARGO_TARGET_DIR="$w/target" CARGO_HOME="$w/home" '
    '"$s/bin/cargo-clippy" clippy --offline) </dev/null >/dev/null 2>&1\n'
    f'  [ -f "$w/target/.rustc_info.json" ] && mv "$w/target/.rustc_info.json" "$w/{RUSTC_INFO_FILE}"\n'
    '  rm -rf "$w/crate" "$w/target" "$w/home"\n'
    'fi\n'
)
#: Run by every pinned step before its program: the warm-up's file copied into
#: CARGO_TARGET_DIR when that has no `.rustc_info.json` (nor a link by that name): a
#: kept scratch or a dependency cache may carry one, which is never replaced. Cargo then
#: finds its rustc answers there instead of running rustc (3 runs, ~2 s of an empty
#: crate's lint under TCG). Making the directory is what cargo would do; it then writes
#: no CACHEDIR.TAG there (a backup marker; nothing reads it on a scratch disk).
_PREFILL = (
    f'i=${{{RUSTC_INFO_VARIABLE}:-}}/{RUSTC_INFO_FILE} t=${{CARGO_TARGET_DIR:-}}\n'
    f'if [ -n "${{{RUSTC_INFO_VARIABLE}:-}}" ] && [ -n "$t" ] && [ -f "$i" ] && '
    '[ ! -e "$t/.rustc_info.json" ] && [ ! -L "$t/.rustc_info.json" ]; then\n'
    '  mkdir -p "$t" && cp "$i" "$t/.rustc_info.json"\n'
    'fi 2>/dev/null\n'
)
#: Run as `sh -c PIN_SCRIPT <program> <args>...`: `<program>` of the image's toolchain,
#: by absolute path.
PIN_SCRIPT = _SYSROOT + _PREFILL + 'exec "$s/bin/$0" "$@"\n'
#: The words before the program name in every step's argv but the probes'.
PIN_PREFIX: tuple[str, ...] = ("/bin/sh", "-c", PIN_SCRIPT)

#: The status of a probe whose program exited 0 having printed nothing (or only white
#: space) on stdout.
SILENT_PROBE_STATUS = 125
#: Run as `sh -c PROBE_SCRIPT <program> <args>...`: as PIN_SCRIPT, but a program that
#: exits 0 and prints nothing fails the step (SILENT_PROBE_STATUS, saying so on stderr).
#: The guest stops a job at its first failed step, so the tree's build never runs after
#: a probe that gave no answer: judged only afterwards (clippy/toolchain.py), it was
#: refused as ImageLacksLinter, but only once the tree's build scripts and proc macros had
#: run, for as long as the build took. The answer is held in a shell variable: a few
#: hundred bytes from a real toolchain, bounded for any other by the probe's deadline
#: (lint/run.py PROBE_TIMEOUT_S) and the VM's memory, and refused by the host past
#: toolchain.PROBE_LIMIT_BYTES. `$(...)` drops trailing newlines: one is printed back.
PROBE_SCRIPT = _SYSROOT + _WARM + (
    'o=$("$s/bin/$0" "$@"); st=$?\n'
    '[ -z "$o" ] || printf \'%s\\n\' "$o"\n'
    '[ "$st" -eq 0 ] || exit "$st"\n'
    "case $o in *[![:space:]]*) exit 0;; esac\n"
    'echo "pylint-sandbox: \\`$0 $*\\` exited 0 and printed nothing; the build does not run" >&2\n'
    f"exit {SILENT_PROBE_STATUS}\n"
)
#: The words before the program name in a probe's argv.
PROBE_PREFIX: tuple[str, ...] = ("/bin/sh", "-c", PROBE_SCRIPT)


def pinned(argv: Sequence[str]) -> tuple[str, ...]:
    """`argv` run by the image's own toolchain, whatever toolchain file the tree holds."""
    if not argv or "/" in argv[0]:
        raise ValueError(f"{argv!r} does not start with a toolchain program's name")
    return (*PIN_PREFIX, *argv)


def probed(argv: Sequence[str]) -> tuple[str, ...]:
    """`argv` as `pinned`, failing when it exits 0 and prints nothing (PROBE_SCRIPT)."""
    return (*PROBE_PREFIX, *pinned(argv)[len(PIN_PREFIX):])


def unpinned(argv: Sequence[str]) -> list[str]:
    """The program and arguments of a `pinned` or `probed` argv, as a report shows what
    ran: a `--config` value without trailing spaces (meaningless to cargo, and noise in
    every message naming the step)."""
    words = list(argv)
    for prefix in (PIN_PREFIX, PROBE_PREFIX):
        if tuple(words[:len(prefix)]) == prefix:
            words = words[len(prefix):]
            break
    return [w.rstrip(" ") if i and words[i - 1] == "--config" else w for i, w in enumerate(words)]


#: `cargo-clippy --version` prints e.g. `clippy 0.1.95 (59807616e1 2026-04-14)`; the
#: lint runs the same binary.
PROBE_CLIPPY: tuple[str, ...] = probed(("cargo-clippy", "--version"))
#: `rustc -vV` prints `key: value` lines, among them `release:` and `host:`.
PROBE_RUSTC: tuple[str, ...] = probed(("rustc", "-vV"))
#: Variables that outrank the tree's `.cargo/config.toml` for the compiler (see above).
#: RUSTC is the `rustc` on the image's PATH, the one the probe asked (PIN_SCRIPT then sets
#: it to that rustc's absolute path).
PINNED_ENV: dict[str, str] = {"RUSTC": "rustc", "RUSTC_WRAPPER": NEUTRAL_WRAPPER,
                              "CARGO_ENCODED_RUSTFLAGS": ""}

#: The statuses of a completed `cargo clippy` run, measured with cargo 1.95: 0 when the
#: build finished (warnings only, or nothing), 101 when it did not (a deny-level lint,
#: a compile error, a failing build script, a refused lockfile, a cold cache). cargo
#: uses 101 for every error it reports; anything else (1 for a usage error, a signal)
#: means the run did not complete and is refused as UnexpectedStatus.
EXPECTED_STATUSES: tuple[int, ...] = (0, 101)

# Cargo's own feature name grammar (`[A-Za-z0-9_][A-Za-z0-9_+-.]*`), plus `pkg/feat`
# and `dep:name` forms; a value outside it could be read by cargo as another flag.
_FEATURE = re.compile(r"^(dep:)?[A-Za-z0-9_][A-Za-z0-9_+.-]*(/[A-Za-z0-9_][A-Za-z0-9_+.-]*)?$")


#: Package names as cargo takes them on `-p`/`--exclude` (a name, optionally `@version`
#: or a spec cargo parses; only the plain form, a glob of it (`'demo-*'`, matched by cargo
#: against the workspace) and `name@version` pass: anything else could be read by cargo as
#: another flag or a path).
_PACKAGE = re.compile(r"^[A-Za-z0-9_*?\[][A-Za-z0-9_*?\[\]!-]*(@[0-9A-Za-z.+-]+)?$")
#: Target names (`--bin NAME`, `--test NAME`, ...): cargo's target name grammar.
_TARGET_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]*$")
#: A target triple (`--target`): lowercase words joined by `-`; never a path to a JSON spec.
_TRIPLE = re.compile(r"^[a-z0-9_.]+(-[a-z0-9_.]+){1,4}$")
#: The target kinds selected by a bare flag, and those that take a name.
TARGET_KINDS = ("lib", "bins", "tests", "examples", "benches")
NAMED_TARGET_KINDS = ("bin", "test", "example", "bench")
#: The lint-level flags cargo clippy takes after `--`, long and short.
LEVEL_FLAGS = {"-W": "-W", "--warn": "-W", "-A": "-A", "--allow": "-A", "-D": "-D",
               "--deny": "-D", "-F": "-F", "--forbid": "-F"}
#: A lint name: `warnings`, a rustc lint or group, or `clippy::name` / `clippy::group`.
_LINT_NAME = re.compile(r"^([a-z][a-z0-9_]*::)?[a-z][a-z0-9_-]*$")


@dataclass(frozen=True)
class ClippyOptions:
    """The lint options that change what clippy builds and how it judges.

    `packages`, `workspace`, `exclude`: cargo's package selection; `targets`: entries of
    TARGET_KINDS or `kind:NAME` for NAMED_TARGET_KINDS; `target`: a triple the image's
    toolchain must have the standard library of; `levels`: lint-level flags, normalised
    pairs (`-D`, `warnings`), passed after `--`."""

    all_targets: bool = False
    features: tuple[str, ...] = ()
    all_features: bool = False
    no_default_features: bool = False
    packages: tuple[str, ...] = ()
    workspace: bool = False
    exclude: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    target: str | None = None
    levels: tuple[tuple[str, str], ...] = ()
    #: clippy's own `--no-deps`: lint only the selected packages, not their path
    #: dependencies (checked, not linted).
    no_deps: bool = False
    #: cargo's second `--message-format` value beside `json` (`json-diagnostic-short`,
    #: `json-diagnostic-rendered-ansi`): only what `rendered` holds, so the dependency
    #: cache's key leaves it out (`without_target_selection`). clippy/stream.py.
    rendering: str | None = None


def validate_packages(names: Sequence[str], flag: str) -> tuple[str, ...]:
    for name in names:
        if not _PACKAGE.fullmatch(name):
            raise UsageError(f"{name!r} is not a package name for {flag}.",
                             hint="A package is named as in its Cargo.toml, optionally "
                             "`name@version`, or by a glob (`'demo-*'`).")
    return tuple(dict.fromkeys(names))


def validate_targets(entries: Sequence[str]) -> tuple[str, ...]:
    """Each entry a kind of TARGET_KINDS, or `kind:NAME` of NAMED_TARGET_KINDS."""
    for entry in entries:
        kind, _, name = entry.partition(":")
        if (not name and kind in TARGET_KINDS) or (
                name and kind in NAMED_TARGET_KINDS and _TARGET_NAME.fullmatch(name)):
            continue
        raise UsageError(f"{entry!r} is not a target selection.",
                         hint=f"Use one of {', '.join(TARGET_KINDS)}, or "
                         f"{', '.join(k + ':NAME' for k in NAMED_TARGET_KINDS)} "
                         "(--lib, --bins, --bin NAME, ...).")
    return tuple(dict.fromkeys(entries))


def validate_target(triple: str | None) -> str | None:
    if triple is not None and (not _TRIPLE.fullmatch(triple) or triple.endswith(".json")):
        raise UsageError(f"{triple!r} is not a target triple.",
                         hint="For example x86_64-unknown-linux-gnu; a target given as a "
                         "JSON file path is not taken.")
    return triple


def lint_levels(words: Sequence[str]) -> tuple[tuple[str, str], ...]:
    """What came after `--`, as cargo clippy takes it: `-D warnings`, `-Dwarnings`,
    `--deny=clippy::pedantic`, `--allow name`. Only lint-level flags and lint names pass:
    anything else (a `-Z` flag, `--cap-lints`, `-C`, a path) is a usage error naming it,
    since the words reach clippy-driver for every member."""
    pairs: list[tuple[str, str]] = []
    index = 0
    while index < len(words):
        word = words[index]
        flag, value = word, None
        if word.startswith("--") and "=" in word:
            flag, value = word.split("=", 1)
        elif len(word) > 2 and word[:2] in LEVEL_FLAGS and not word.startswith("--"):
            flag, value = word[:2], word[2:]
        if flag not in LEVEL_FLAGS:
            raise UsageError(f"{word!r} after `--` is not a lint-level flag.",
                             hint="After `--` only -W/-A/-D/-F (or --warn/--allow/--deny/"
                             "--forbid) with a lint name pass, as in `-- -D warnings -A "
                             "clippy::needless_return`.")
        if value is None:
            index += 1
            if index == len(words):
                raise UsageError(f"{word!r} after `--` needs a lint name.")
            value = words[index]
        if not _LINT_NAME.fullmatch(value):
            raise UsageError(f"{value!r} after {word!r} is not a lint name.",
                             hint="A lint is `warnings`, a rustc lint or group, or "
                             "`clippy::NAME`.")
        pairs.append((LEVEL_FLAGS[flag], value))
        index += 1
    return tuple(pairs)


def validate_features(features: tuple[str, ...]) -> tuple[str, ...]:
    """Return `features` split on commas and spaces, each checked against cargo's grammar."""
    names: list[str] = []
    for entry in features:
        for name in re.split(r"[,\s]+", entry.strip()):
            if not name:
                continue
            if not _FEATURE.fullmatch(name):
                raise UsageError(
                    f"{name!r} is not a cargo feature name.",
                    hint="Feature names are letters, digits, `_`, `-`, `+` and `.`, "
                    "optionally `package/feature`.",
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def clippy_argv(options: ClippyOptions) -> list[str]:
    """The argv of the lint, to run with the guest's working directory at the workspace.
    Lint levels come last, after `--` (LEVELS_SEPARATOR): what precedes it is what shapes
    the build (the dependency cache is keyed by and built with that part only)."""
    features = validate_features(options.features)
    if features and options.all_features:
        raise UsageError("--features and --all-features cannot be used together.")
    packages = validate_packages(options.packages, "--package")
    exclude = validate_packages(options.exclude, "--exclude")
    if exclude and not options.workspace:
        raise UsageError("--exclude can only be used together with --workspace.")
    if options.workspace and packages:
        raise UsageError("--package and --workspace cannot be used together.")
    targets = validate_targets(options.targets)
    if targets and options.all_targets:
        raise UsageError("--all-targets selects every target; it cannot be combined with "
                         f"--{targets[0].replace(':', ' ')}.")
    target = validate_target(options.target)
    # cargo-clippy skips its first argument, the subcommand name cargo passes it.
    argv = ["cargo-clippy", "clippy", "--message-format=json", "--color=never", "--offline", "--locked"]
    if options.rendering is not None:
        if options.rendering not in RENDERINGS:
            raise ValueError(f"{options.rendering!r} is not a rendering of cargo's JSON")
        argv.append(f"--message-format={options.rendering}")
    if options.workspace:
        argv.append("--workspace")
    for name in packages:
        argv += ["--package", name]
    for name in exclude:
        argv += ["--exclude", name]
    if options.all_targets:
        argv.append("--all-targets")
    for entry in targets:
        kind, _, name = entry.partition(":")
        argv += [f"--{kind}", name] if name else [f"--{kind}"]
    if target is not None:
        argv += ["--target", target]
    if options.all_features:
        argv.append("--all-features")
    elif features:
        argv += ["--features", ",".join(features)]
    if options.no_default_features:
        argv.append("--no-default-features")
    if options.no_deps:
        # cargo-clippy's own flag (`cargo clippy --help`: "Common options"), before `--`:
        # it takes it out of cargo's arguments and hands it to clippy-driver
        argv.append("--no-deps")
    if options.levels:
        argv.append(LEVELS_SEPARATOR)
        for flag, name in options.levels:
            argv += [flag, name]
    return argv


#: The `rendered` forms cargo's JSON may carry (ClippyOptions.rendering).
RENDERINGS = ("json-diagnostic-short", "json-diagnostic-rendered-ansi")


#: Where the build's arguments end and the lint levels (for clippy-driver) begin.
LEVELS_SEPARATOR = "--"


def without_target_selection(argv: Sequence[str]) -> list[str]:
    """A build argv (`build_part`) without its target selection: `--all-targets`, the
    TARGET_KINDS flags and the NAMED_TARGET_KINDS flags with their names, as clippy_argv
    writes them, and without a `rendering` (what `rendered` holds builds nothing else).
    The dependency cache is keyed and built by it (lint/dep_cache.py): one
    build serves every target selection of the same packages, features and triple."""
    flags = {"--all-targets", *(f"--{kind}" for kind in TARGET_KINDS),
             *(f"--message-format={rendering}" for rendering in RENDERINGS)}
    named = {f"--{kind}" for kind in NAMED_TARGET_KINDS}
    kept: list[str] = []
    words = iter(argv)
    for word in words:
        if word in named:
            next(words, None)  # its NAME
        elif word not in flags:
            kept.append(word)
    return kept


def build_part(argv: Sequence[str]) -> list[str]:
    """The part of a clippy argv that shapes what is built (before LEVELS_SEPARATOR)."""
    words = list(argv)
    return words[:words.index(LEVELS_SEPARATOR)] if LEVELS_SEPARATOR in words else words
