"""The words and bounds every layer shares, stated once: the choice lists (accelerators,
exit-status thresholds, report formats, colours), the limits of a run's resources, the
guest path of the scratch disk, and the Debian archive the VM assets come from by
default. A leaf: it imports nothing of ours, so the settings model, the errors and the
backends can all read it without a cycle.
"""

from __future__ import annotations

import re
import signal
from typing import Literal, get_args

#: The exit statuses, part of the interface. EXIT_CODES says what each means, once: the
#: CLI's --help prints it, README's "Exit codes" table is checked against it
#: (tests/unit/cli/test_help.py), errors.py gives each failure class one of them.
EXIT_OK = 0
EXIT_FINDINGS = 1
EXIT_USAGE = 2
EXIT_REFUSED = 3
EXIT_INTERNAL = 4
EXIT_INTERRUPTED = 130
#: What a shell shows for `cat` killed by SIGPIPE; a command whose reader left ends so.
EXIT_READER_LEFT = 128 + signal.SIGPIPE

EXIT_CODES: tuple[tuple[int, str], ...] = (
    (EXIT_OK, "the lint ran and no finding that gates the run is at or above `--fail-on`"),
    (EXIT_FINDINGS, "the lint ran and a finding that gates the run is at or above `--fail-on`, "
                    "or the build failed; with `--message-format`, cargo's stream is on stdout "
                    "whole for 0 and 1 alike"),
    (EXIT_USAGE, "usage or configuration error: a flag, a setting or an image reference wrong "
                 "as written, a package or feature the tree does not have"),
    (EXIT_REFUSED, "refused: a preflight check, the sandbox, or a run that could not produce a "
                   "report to trust"),
    (EXIT_INTERNAL, "internal error: one line, and where the log with the traceback is "
                    "(`--debug` shows it)"),
    (EXIT_INTERRUPTED, "interrupted"),
    (EXIT_READER_LEFT, "the reader of stdout stopped early (`| head`), as `cat` ends; for "
                       "`lint clippy` too, whose verdict then never reached the reader "
                       "(`set -o pipefail` shows 141, never a pass)"),
)

#: The environment variables the tool itself reads, and what for (--help prints them;
#: tests/unit/cli/test_help.py checks every variable the code reads by name is here).
#: The last four the host side of cargo reads as cargo does (cargo documents them).
ENVIRONMENT: tuple[tuple[str, str], ...] = (
    ("ROTEIRO_HOME", "the store, the caches, the VM assets, logs and config.toml (default ~/.roteiro)"),
    ("ROTEIRO_<SECTION>_<KEY>", "any setting, above the files and below a flag: ROTEIRO_LINT_IMAGE, "
                                "ROTEIRO_VM_ACCEL, ROTEIRO_VM_MEMORY_MIB, ..."),
    ("CARGO_TERM_COLOR", "colour of the human report when --color is not given (auto, always, never)"),
    ("NO_COLOR", "no colour in refusals on a terminal"),
    ("CI, TERM", "CI set or TERM=dumb: plain progress lines, no spinner or bars"),
    ("GITHUB_STEP_SUMMARY", "a lint or a render appends a Markdown summary to this file"),
    ("GITHUB_SERVER_URL, GITHUB_REPOSITORY, GITHUB_SHA", "the step summary links each finding to its "
                                                         "file at that commit"),
    ("GITHUB_TOKEN, GITHUB_API_URL, GITHUB_EVENT_PATH", "review posts to that pull request's API with "
                                                        "that token"),
    ("RUSTUP_DIST_SERVER", "where image build fetches Rust's distribution, as rustup reads it"),
    ("RUSTUP_HOME", "where image build --toolchain finds the installed rustup toolchains (default ~/.rustup)"),
    ("DOCKER_CONFIG", "where prefetch reads registry credentials (config.json)"),
    ("CARGO_HOME", "cargo's configuration and credentials, read by fetch-deps and the package store"),
    ("SSL_CERT_FILE, HTTPS_PROXY", "the CA and the proxy of the host's downloads, as cargo honours them"),
    ("CARGO_HTTP_CAINFO, CARGO_HTTP_PROXY", "cargo's CA and proxy, for fetch-deps"),
    ("CARGO_REGISTRIES_CRATES_IO_PROTOCOL", "sparse or git for crates.io, as cargo reads it"),
    ("CARGO_REGISTRY_GLOBAL_CREDENTIAL_PROVIDERS", "how fetch-deps finds registry tokens, as cargo does"),
)

#: At most this many `lint.allowed_images` entries.
MAX_ALLOWED_IMAGES = 256
#: An allowed-images entry: a host (optionally with a port), then repository components.
IMAGE_PREFIX = re.compile(r"[A-Za-z0-9.:\[\]-]{1,255}(/[a-z0-9._-]{1,255})*/?")

#: No `hvf`: macOS is not a platform a lint runs on (platform_support.py, docs/PLATFORMS.md).
Accel = Literal["auto", "kvm", "tcg"]
ACCELS: tuple[str, ...] = get_args(Accel)
FailOn = Literal["warning", "error", "never"]
FAIL_ON: tuple[str, ...] = get_args(FailOn)
#: The report formats (report/render.py renders each).
Format = Literal["human", "json", "sarif", "github", "gitlab", "markdown"]
FORMATS: tuple[str, ...] = get_args(Format)
#: `lint clippy --message-format`: cargo's own stream on stdout (roteiro_py/clippy/stream.py).
MessageFormat = Literal["json", "json-diagnostic-short", "json-diagnostic-rendered-ansi", "short"]
MESSAGE_FORMATS: tuple[str, ...] = get_args(MessageFormat)
#: cargo's own values for `--color` and CARGO_TERM_COLOR.
Color = Literal["auto", "always", "never"]
COLORS: tuple[str, ...] = get_args(Color)


#: Where the guest mounts the scratch disk (vm/mounts.py, the guest's places, names it
#: there): a path no host tree uses, since a tree under it would name two places in the
#: guest (`/scratch` would collide with a worktree under /scratch/$USER). Stated here, in
#: a leaf, because lint names it before the first refusals, when nothing of roteiro_py.vm
#: may load yet (tests/unit/cli/test_app.py: a refusal loads no VM code).
GUEST_SCRATCH = "/.roteiro-scratch"


#: The longest deadline a run may be given (`[vm] timeout_s`, --timeout): a week.
MAX_TIMEOUT_S = 7 * 24 * 3600
#: The most memory a guest may be given (`[vm] memory_mib`, --memory): 1 TiB.
MAX_MEMORY_MIB = 1 << 20


#: Where `prefetch --vm-assets` reads the guest kernel and busybox (vm/assets/debian_archive.py):
#: Debian's redirector, and a suite pinned by codename, not "stable", so a new Debian release
#: does not change the guest kernel (and its module layout) under a user who did not ask.
DEFAULT_DEBIAN_ARCHIVE = "http://deb.debian.org/debian"
DEFAULT_DEBIAN_SUITE = "bookworm"
#: Where kernel security updates land between point releases (suite `SUITE-security`);
#: an empty `[vm] debian_security_archive` reads none.
DEFAULT_DEBIAN_SECURITY_ARCHIVE = "http://security.debian.org/debian-security"
