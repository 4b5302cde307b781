"""A tree's pinned toolchain (`rust-toolchain.toml`, or the legacy one-line `rust-toolchain`),
read as untrusted data, so an image can be built with what the project pins.

Guarantees:
- The file is read through the project's one bounded reader (`untrusted.read_bounded`:
  no link, no FIFO or device, at most `MAX_FILE_BYTES`) and parsed by its bounded TOML
  parser; nothing of the tree is run, and rustup is never asked (it would act on the
  file: a `path` toolchain runs whatever binaries the tree names).
- Only what rustup documents is understood, and anything else is refused naming the file
  and the key (errors.TreeFileRefused, exit 3): `[toolchain]` with `channel` (a release,
  a channel or a dated channel: channel.parse_spec), `components` and `targets`
  (lists of at most `MAX_LIST` names, each a component or target name, and at most
  channel.MAX_REQUESTED of both together, what one fetch takes), `profile`
  (`minimal`, `default`, `complete`). A `path` toolchain, an unknown key, a value of the
  wrong type or over `MAX_VALUE_CHARS` characters, and a file without a channel are
  refused: the image cannot be built from what was not understood.
- `rust-toolchain.toml` wins over `rust-toolchain` when both exist, as rustup decides.

`profile` is reported, not expanded: an image always gets rust_dist.REQUIRED (rustc, cargo,
rust-std, clippy) plus the components listed, whatever the profile, since clippy is what it
is for and rustup's profiles would add documentation it never reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roteiro_py import errors
from roteiro_py.image.channel import MAX_REQUESTED, NAME, ChannelSpec, parse_spec
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

#: rustup's file names, in the order rustup looks for them in one directory.
FILE_NAMES = ("rust-toolchain.toml", "rust-toolchain")
#: A toolchain file is a few lines; this bounds what is read of one.
MAX_FILE_BYTES = 64 << 10
#: At most this many components, or targets, are read from one file.
MAX_LIST = 64
MAX_VALUE_CHARS = 64
PROFILES = ("minimal", "default", "complete")
KEYS = ("channel", "components", "targets", "profile")


@dataclass(frozen=True)
class ToolchainFile:
    """What a tree pins: where it says so, the channel, and what it adds to it."""

    path: Path
    spec: ChannelSpec
    components: tuple[str, ...] = ()
    targets: tuple[str, ...] = ()
    profile: str | None = None


def find(directory: Path) -> Path | None:
    """The toolchain file in `directory` that rustup would read, or None."""
    for name in FILE_NAMES:
        candidate = directory / name
        if candidate.is_symlink() or candidate.exists():
            return candidate
    return None


def read(path: Path) -> ToolchainFile:
    """`path` (a `rust-toolchain.toml` or legacy `rust-toolchain`), or errors.TreeFileRefused."""
    try:
        data = read_bounded(path, MAX_FILE_BYTES)
    except FileRefused as refused:
        raise errors.TreeFileRefused(path, refused.reason) from None
    except FileNotFoundError:
        raise errors.TreeFileRefused(path, "it does not exist") from None
    if path.name == "rust-toolchain" and not data.lstrip().startswith(b"["):
        return _legacy(path, data)
    try:
        document = parse_toml(data)
    except FileRefused as refused:
        raise errors.TreeFileRefused(path, refused.reason) from None
    return _parse(path, document)


def _legacy(path: Path, data: bytes) -> ToolchainFile:
    """The one-line form: a channel and nothing else (rustup reads no more from it)."""
    try:
        lines = [line.strip() for line in data.decode("utf-8").splitlines() if line.strip()]
    except UnicodeDecodeError:
        raise errors.TreeFileRefused(path, "it is not UTF-8") from None
    if len(lines) != 1:
        raise errors.TreeFileRefused(path, "the legacy form holds exactly one line, a channel")
    return ToolchainFile(path, _spec(path, lines[0]))


def _spec(path: Path, value: object) -> ChannelSpec:
    text = _text(path, "channel", value)
    try:
        return parse_spec(text, "channel")
    except errors.ToolchainSpecInvalid as invalid:
        raise errors.TreeFileRefused(path, f"its channel {text!r} is not understood: {invalid.why} "
                                     "(a release such as 1.95.0, stable, beta or nightly, "
                                     "optionally dated)") from None


def _text(path: Path, key: str, value: object) -> str:
    if not isinstance(value, str):
        raise errors.TreeFileRefused(path, f"[toolchain] {key} is not a string")
    if len(value) > MAX_VALUE_CHARS:
        raise errors.TreeFileRefused(path, f"[toolchain] {key} is longer than {MAX_VALUE_CHARS} characters")
    return value


def _names(path: Path, key: str, value: object) -> tuple[str, ...]:
    if not isinstance(value, list):
        raise errors.TreeFileRefused(path, f"[toolchain] {key} is not a list of names")
    if len(value) > MAX_LIST:
        raise errors.TreeFileRefused(path, f"[toolchain] {key} lists more than {MAX_LIST} names")
    names = tuple(_text(path, key, item) for item in value)
    for name in names:
        if not NAME.fullmatch(name):
            raise errors.TreeFileRefused(path, f"[toolchain] {key} holds {name!r}, which is not a name")
    return tuple(dict.fromkeys(names))


def _parse(path: Path, document: dict[str, Any]) -> ToolchainFile:
    unknown = [key for key in document if key != "toolchain"]
    if unknown:
        raise errors.TreeFileRefused(path, f"the top-level key {unknown[0][:MAX_VALUE_CHARS]!r} is not "
                                     "understood (only [toolchain] is)")
    table = document.get("toolchain")
    if not isinstance(table, dict):
        raise errors.TreeFileRefused(path, "it has no [toolchain] table")
    if "path" in table:
        raise errors.TreeFileRefused(path, "[toolchain] path names a toolchain on the host, which is "
                                     "never used: an image is built from Rust's distribution only")
    for key in table:
        if key not in KEYS:
            raise errors.TreeFileRefused(path, f"[toolchain] {key[:MAX_VALUE_CHARS]!r} is not understood "
                                         f"(only {', '.join(KEYS)} are)")
    if "channel" not in table:
        raise errors.TreeFileRefused(path, "[toolchain] has no channel")
    profile = table.get("profile")
    if profile is not None and _text(path, "profile", profile) not in PROFILES:
        raise errors.TreeFileRefused(path, f"[toolchain] profile {profile!r} is not one of {', '.join(PROFILES)}")
    components = _names(path, "components", table.get("components", []))
    targets = _names(path, "targets", table.get("targets", []))
    if len(components) + len(targets) > MAX_REQUESTED:  # what one fetch takes: the file's, not a usage error
        raise errors.TreeFileRefused(path, f"[toolchain] lists more than {MAX_REQUESTED} targets and "
                                     "components together")
    return ToolchainFile(path, _spec(path, table["channel"]), components, targets, profile)
