"""The words and bounds every layer shares, stated once: the choice lists (accelerators,
exit-status thresholds, report formats, colours), the limits of a run's resources, the
guest path of the scratch disk, and the Debian archive the VM assets come from by
default. A leaf: it imports nothing of ours, so the settings model, the errors and the
backends can all read it without a cycle.
"""

from __future__ import annotations

import re
from typing import Literal, get_args

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
