"""The sandbox boundary: a command, the grant it runs under, and what came of it.

Every way of running a command (the VM backends, `Unconfined`) has one shape,
`Sandbox.run(command, grant) -> Outcome`, so the lint does not know which one it has.
The contract a member keeps:

* A command that ran and failed is an `Outcome`, not an exception; so is one that was
  killed at its deadline (`timed_out`, `exit` None). Callers decide what a status means.
* A sandbox that cannot confine the command to the grant raises `errors.Unenforceable`
  before anything runs. It never runs with less confinement than asked: a downgrade the
  caller did not see is how "sandboxed" lints end up running a repository's build
  scripts on the host.
* A program that cannot be started is `errors.SpawnFailed`; a sandbox that cannot be
  brought up at all is `errors.SandboxUnavailable`.
"""

from __future__ import annotations

import shlex
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from types import MappingProxyType
from typing import Protocol

from roteiro_py.process.grants import GrantSet

#: The default deadline of a command, in seconds.
DEFAULT_TIMEOUT = 300.0

#: At most this many bytes of each stream, and characters in all, make a `diagnostics`
#: view: a refusal quotes far less (errors.QUOTE_LIMIT), and an output of megabytes is
#: not decoded to find that out.
DIAGNOSTICS_LIMIT = 4096


def diagnostics(stdout: bytes, stderr: bytes, limit: int = DIAGNOSTICS_LIMIT) -> str:
    """What a command said about how it went: stderr, then stdout, for a message to quote.

    Tools report failure on stderr, so it comes first, and stdout follows because some
    print their complaint there (`cargo-clippy` when it is not installed, a shell's
    usage). Each stream is cut to `limit` bytes before it is decoded (invalid UTF-8 is
    replaced) and the whole to `limit` characters. The text is the command's, so it is
    not printable yet: a refusal passes it through `printable()` like any outside value.
    """
    said = (stream[:limit].decode("utf-8", "replace").strip() for stream in (stderr, stdout))
    return "\n".join(text for text in said if text)[:limit]


@dataclass(frozen=True)
class Command:
    """A program to run: what, with which arguments, where, with which variables, how long.

    `env` holds the only variables the command gets beyond a sandbox's bare essentials;
    it is copied into a read-only mapping, so the caller changing its dict afterwards
    does not change what was checked.
    """

    program: str
    args: tuple[str, ...]
    workspace: Path
    env: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
    timeout: float = DEFAULT_TIMEOUT

    def __post_init__(self) -> None:
        object.__setattr__(self, "args", tuple(self.args))
        object.__setattr__(self, "env", MappingProxyType(dict(self.env)))
        if self.timeout <= 0:
            raise ValueError(f"timeout must be positive, not {self.timeout}")

    @property
    def argv(self) -> tuple[str, ...]:
        return (self.program, *self.args)

    def display(self) -> str:
        """The command line as it may be shown or logged: variables by name, never value.

        Values passed through `env` are where tokens travel; a refusal or a log line
        that printed them would leak exactly what the sandbox keeps from the child.
        """
        names = " ".join(f"{name}=…" for name in sorted(self.env))
        return f"{names} {shlex.join(self.argv)}".strip()


@dataclass(frozen=True)
class Outcome:
    """What came of running a command: status, output, and when."""

    command: Command
    #: The exit status as `returncode` (negative: killed by that signal); None when the
    #: run was killed by us (deadline) or did not end cleanly (see `failure`).
    exit: int | None
    stdout: bytes
    stderr: bytes
    timed_out: bool
    #: Whether output was cut at the sandbox's limit.
    truncated: bool
    duration: float
    started: datetime
    ended: datetime
    #: Why the run did not end with a clean exit (a read or wait that failed, the
    #: deadline), or None.
    failure: str | None = None

    @property
    def succeeded(self) -> bool:
        """Exit status 0, within the deadline, with all output read."""
        return not self.timed_out and self.failure is None and self.exit == 0

    def diagnostics(self, limit: int = DIAGNOSTICS_LIMIT) -> str:
        """stderr, then stdout, bounded and decoded, for a message that quotes the command
        (the module function `diagnostics` says how)."""
        return diagnostics(self.stdout, self.stderr, limit)


class Sandbox(Protocol):
    def run(self, command: Command, grant: GrantSet) -> Outcome:
        """Run `command` confined to `grant`, or refuse before running it."""
        ...
