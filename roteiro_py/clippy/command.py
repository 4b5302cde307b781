"""The exact argv run in the guest for the probe and for the lint, and what pins them.

Stated once here so the orchestrator, the report's `command` field and the tests agree.

Which clippy ran is the image's, and no file in the tree can change that (the review's
forgery: a tree `.cargo/config.toml` with `[alias] clippy = ["run", ...]` turned both the
probe and the lint into the tree's own program: exit 0, "clippy 1.99.0", for a tree with
`compile_error!`). What holds it:
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
  empty: no wrapper, measured with cargo 1.95), and `build.rustflags` /
  `target.<triple>.rustflags` (CARGO_ENCODED_RUSTFLAGS empty: none). rustflags go because
  with `[env] RUSTC_BOOTSTRAP = {value = "1", force = true}` they pass
  `-Zcodegen-backend=<tree .so>` to clippy-driver on a stable toolchain (measured with
  cargo 1.95); a tree that needs `--cfg` flags from its config gets them no more.
- No rustup proxy picks the toolchain from the tree. A rustup image runs `cargo-clippy`
  as a proxy that obeys the working directory's `rust-toolchain.toml`, whose
  `[toolchain] path = "<a directory in the tree>"` put the tree's own `cargo-clippy` in
  place of the image's: exit 0 for a tree with `compile_error!` (review rev-tree, on any
  rustup image without RUST_VERSION). Every step runs through PIN_SCRIPT, which asks
  `rustc --print sysroot` in PROBE_CWD (no tree file on the way up) and execs
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
- --color=never: cargo's own stderr (classified by wording in classify.py) carries no
  colour escapes.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence
from dataclasses import dataclass

from roteiro_py.errors import UsageError
from roteiro_py.vm.mounts import FRESH_CWD

#: Where the probes run in the guest: a tmpfs every boot provides empty, outside the tree
#: and the scratch disk (which a kept cache carries from one run's build scripts to the
#: next), so no tree or build-script file is on the way up from it.
PROBE_CWD = FRESH_CWD
#: Run as `sh -c PIN_SCRIPT <program> <args>...`: the image's toolchain, asked for in
#: PROBE_CWD, runs `<program>` by absolute path with every proxy pinned to it (see above).
PIN_SCRIPT = (
    f"s=$(cd {shlex.quote(PROBE_CWD)} && rustc --print sysroot) || {{ st=$?; echo "
    "'pylint-sandbox: `rustc --print sysroot` failed outside the tree' >&2; "
    # killed by a signal (an OOM kill): keep 128+N, which lint/judgement.py reads as that signal
    '[ "$st" -gt 128 ] && exit "$st"; exit 127; }\n'
    'case $s in /*) ;; *) echo "pylint-sandbox: the sysroot $s is not an absolute path" >&2; '
    "exit 127;; esac\n"
    'export RUSTUP_TOOLCHAIN="$s" RUSTC="$s/bin/rustc" CARGO="$s/bin/cargo"\n'
    'exec "$s/bin/$0" "$@"\n'
)
#: The words before the program name in every step's argv.
PIN_PREFIX: tuple[str, ...] = ("/bin/sh", "-c", PIN_SCRIPT)


def pinned(argv: Sequence[str]) -> tuple[str, ...]:
    """`argv` run by the image's own toolchain, whatever toolchain file the tree holds."""
    if not argv or "/" in argv[0]:
        raise ValueError(f"{argv!r} does not start with a toolchain program's name")
    return (*PIN_PREFIX, *argv)


def unpinned(argv: Sequence[str]) -> list[str]:
    """The program and arguments of a `pinned` argv, as a report shows what ran."""
    words = list(argv)
    return words[len(PIN_PREFIX):] if tuple(words[:len(PIN_PREFIX)]) == PIN_PREFIX else words


#: `cargo-clippy --version` prints e.g. `clippy 0.1.95 (59807616e1 2026-04-14)`; the
#: lint runs the same binary.
PROBE_CLIPPY: tuple[str, ...] = pinned(("cargo-clippy", "--version"))
#: `rustc -vV` prints `key: value` lines, among them `release:` and `host:`.
PROBE_RUSTC: tuple[str, ...] = pinned(("rustc", "-vV"))
#: Variables that outrank the tree's `.cargo/config.toml` for the compiler (see above).
#: RUSTC is the `rustc` on the image's PATH, the one the probe asked (PIN_SCRIPT then sets
#: it to that rustc's absolute path).
PINNED_ENV: dict[str, str] = {"RUSTC": "rustc", "RUSTC_WRAPPER": "", "CARGO_ENCODED_RUSTFLAGS": ""}

#: The statuses of a completed `cargo clippy` run, measured with cargo 1.95: 0 when the
#: build finished (warnings only, or nothing), 101 when it did not (a deny-level lint,
#: a compile error, a failing build script, a refused lockfile, a cold cache). cargo
#: uses 101 for every error it reports; anything else (1 for a usage error, a signal)
#: means the run did not complete and is refused as UnexpectedStatus.
EXPECTED_STATUSES: tuple[int, ...] = (0, 101)

# Cargo's own feature name grammar (`[A-Za-z0-9_][A-Za-z0-9_+-.]*`), plus `pkg/feat`
# and `dep:name` forms; a value outside it could be read by cargo as another flag.
_FEATURE = re.compile(r"^(dep:)?[A-Za-z0-9_][A-Za-z0-9_+.-]*(/[A-Za-z0-9_][A-Za-z0-9_+.-]*)?$")


@dataclass(frozen=True)
class ClippyOptions:
    """The lint options that change what clippy builds."""

    all_targets: bool = False
    features: tuple[str, ...] = ()
    all_features: bool = False
    no_default_features: bool = False


def validate_features(features: tuple[str, ...]) -> tuple[str, ...]:
    """Return `features` split on commas and spaces, each checked against cargo's grammar."""
    names: list[str] = []
    for entry in features:
        for name in re.split(r"[,\s]+", entry.strip()):
            if not name:
                continue
            if not _FEATURE.match(name):
                raise UsageError(
                    f"{name!r} is not a cargo feature name.",
                    hint="Feature names are letters, digits, `_`, `-`, `+` and `.`, "
                    "optionally `package/feature`.",
                )
            if name not in names:
                names.append(name)
    return tuple(names)


def clippy_argv(options: ClippyOptions) -> list[str]:
    """The argv of the lint, to run with the guest's working directory at the workspace."""
    features = validate_features(options.features)
    if features and options.all_features:
        raise UsageError("--features and --all-features cannot be used together.")
    # cargo-clippy skips its first argument, the subcommand name cargo passes it.
    argv = ["cargo-clippy", "clippy", "--message-format=json", "--color=never", "--offline", "--locked"]
    if options.all_targets:
        argv.append("--all-targets")
    if options.all_features:
        argv.append("--all-features")
    elif features:
        argv += ["--features", ",".join(features)]
    if options.no_default_features:
        argv.append("--no-default-features")
    return argv
