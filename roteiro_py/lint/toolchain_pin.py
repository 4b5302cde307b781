"""A lint whose tree pins another toolchain than the image's says so, in one note.

rustup reads a tree's `rust-toolchain.toml` (or the legacy `rust-toolchain`) from the
directory cargo runs in and its parents; in the guest no rustup runs, and the image's
toolchain lints whatever the tree pins. Findings differ between releases (new lints, fixed
false positives), so a run that used another toolchain than the project pins says so on
stderr with the command that builds a matching image, and a pin that cannot be read is
said too: nothing is silent. It is a note, never a refusal: the image, pinned by digest,
is what the user chose to lint with.

The file is looked for from the directory asked for up to the repository root, never
above it (a file in the host's home is not the tree's), and read as data by
image/toolchain_file.py. Which versions count as the pin's (rustup's rules as far as a
version string can tell): `1.94` matches every 1.94.x, `1.94.1` only itself, `stable`
any release without a pre-release part, `beta` a beta, `nightly` a nightly, and a dated
nightly one whose clippy commit date lies at most MAX_NIGHTLY_LAG_DAYS before that date (a
nightly is built from the day before's commits). A dated stable or beta cannot be told
from a version, and the note says that instead.
"""

from __future__ import annotations

import re
import shlex
import sys
from datetime import date
from pathlib import Path

from roteiro_py import errors
from roteiro_py.image import toolchain_file
from roteiro_py.image.channel import ChannelSpec
from roteiro_py.lint.tree import Tree
from roteiro_py.report.model import Toolchain
from roteiro_py.untrusted import sanitise

#: A dated nightly's rustc carries the date of the commit it was built from: the day
#: before, or a few days before when the nightly reused an earlier build.
MAX_NIGHTLY_LAG_DAYS = 3

_RELEASE = re.compile(r"[0-9]+\.[0-9]+(\.[0-9]+)?")


def pinned_file(tree: Tree) -> Path | None:
    """The toolchain file rustup would read for `tree.asked`, inside the repository."""
    start = tree.asked if tree.asked.is_dir() else tree.asked.parent
    directory = start
    while True:
        found = toolchain_file.find(directory)
        if found is not None:
            return found
        if directory == tree.repo_root or directory.parent == directory:
            return None
        if not directory.is_relative_to(tree.repo_root):
            return None
        directory = directory.parent


def matches(spec: ChannelSpec, toolchain: Toolchain) -> bool | None:
    """Whether `toolchain` is what `spec` names; None when a version cannot tell."""
    base, _, pre = toolchain.rustc_release.partition("-")
    channel = spec.channel
    if _RELEASE.fullmatch(channel):
        return pre == "" and (base == channel or base.startswith(channel + "."))
    kind = {"stable": "", "beta": "beta", "nightly": "nightly"}.get(channel)
    if kind is None or pre.split(".")[0] != kind:
        return False
    if spec.date is None:
        return True
    if channel != "nightly" or toolchain.clippy_date is None:
        return None
    try:  # the clippy date is the guest's, checked for its shape only (report/model.py)
        lag = (date.fromisoformat(spec.date) - date.fromisoformat(toolchain.clippy_date)).days
    except ValueError:
        return None
    return 0 <= lag <= MAX_NIGHTLY_LAG_DAYS


def pin_note(tree: Tree, toolchain: Toolchain) -> str | None:
    """The note for this run, or None when the tree pins nothing or pins this toolchain."""
    path = pinned_file(tree)
    if path is None:
        return None
    shown = sanitise(str(path.relative_to(tree.repo_root)))
    used = f"rustc {toolchain.rustc_release}"
    build = ("pylint-sandbox image build --toolchain-file "
             + shlex.quote(sanitise(str(path))))
    try:
        pinned = toolchain_file.read(path)
    except errors.TreeFileRefused as refused:
        return (f"note: {shown} could not be read ({sanitise(refused.why)}); this lint used "
                f"the image's {used}.")
    verdict = matches(pinned.spec, toolchain)
    if verdict:
        return None
    if verdict is None:
        return (f"note: {shown} pins {pinned.spec}; this lint used the image's {used}, and "
                f"whether that is the same release cannot be told from its version. To lint with "
                f"what the project pins: {build}")
    return (f"note: {shown} pins {pinned.spec}; this lint used the image's {used}, and "
            f"findings can differ between toolchains. To lint with what the project pins: {build}")


def report_toolchain_pin(tree: Tree, toolchain: Toolchain) -> None:
    """Print the note, if any, on stderr (before the report reaches stdout)."""
    note = pin_note(tree, toolchain)
    if note is not None:
        sys.stderr.write(f"pylint-sandbox: {note}\n")
