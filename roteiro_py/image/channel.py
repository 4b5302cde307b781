"""A Rust toolchain as rustup names one (`1.95.0`, `stable`, `nightly-2026-04-01`), and the
names of targets and components, read as untrusted text. Apart from rust_dist.py, which
fetches and verifies toolchains (https, tar, OpenPGP): a lint reads a tree's
rust-toolchain.toml (toolchain_file.py) without loading any of that (bench/cli_startup.py).
"""

from __future__ import annotations

import re
import time
from dataclasses import dataclass

from roteiro_py import errors

#: `1.95.0`, `1.95`, `1.96.0-beta.3`, or a channel; a date only after a channel name.
VERSION = re.compile(r"\d{1,3}\.\d{1,4}(\.\d{1,4})?(-beta(\.\d{1,3})?)?")
_SPEC = re.compile(r"(?P<channel>stable|beta|nightly|" + VERSION.pattern + r")(-(?P<date>\d{4}-\d{2}-\d{2}))?")
#: A target triple or component name as Rust's manifests spell them.
NAME = re.compile(r"[a-z0-9][a-z0-9_.-]{0,63}")
#: At most this many targets and extra components may be asked for (one fetch's worth).
MAX_REQUESTED = 64


@dataclass(frozen=True)
class ChannelSpec:
    """A toolchain as rustup names one: a release or channel, optionally dated."""

    channel: str
    date: str | None = None

    def __str__(self) -> str:
        return f"{self.channel}-{self.date}" if self.date else self.channel

    @property
    def manifest_path(self) -> str:
        name = f"channel-rust-{self.channel}.toml"
        return f"dist/{self.date}/{name}" if self.date else f"dist/{name}"


def parse_spec(text: str, where: str = "--from-dist") -> ChannelSpec:
    """`text` as a ChannelSpec, or errors.ToolchainSpecInvalid (exit 2) saying why not."""
    match = _SPEC.fullmatch(text) if len(text) <= 64 else None
    if match is None:
        raise errors.ToolchainSpecInvalid(text[:64], "not a release, a channel or a dated channel", where)
    channel, date = match["channel"], match["date"]
    if date is not None:
        if VERSION.fullmatch(channel):
            raise errors.ToolchainSpecInvalid(text, "a release is not dated (a date goes with "
                                              "stable, beta or nightly)", where)
        try:
            time.strptime(date, "%Y-%m-%d")
        except ValueError:
            raise errors.ToolchainSpecInvalid(text, f"{date} is not a date", where) from None
    return ChannelSpec(channel, date)


def check_name(value: str, what: str, where: str) -> str:
    if not NAME.fullmatch(value):
        raise errors.ToolchainSpecInvalid(value[:64], f"not a {what} name", where)
    return value
