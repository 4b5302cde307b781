"""`Unconfined`: runs a command on this machine with no isolation, and says so.

It exists for tests and for the host-side steps that need no sandbox; its name is what
it is, and it cannot be built by accident (`i_understand_this_is_not_a_sandbox=True`).
It enforces exactly three things:

* the working directory is the command's workspace;
* the deadline: the command's process group is killed when it passes;
* a cleared environment: `ESSENTIAL_VARIABLES` from ours, plus `Command.env`, nothing
  else, so tokens in the caller's environment do not reach the child.

Everything else it cannot confine, so it accepts only the grant it does not need to
confine (`workspace_grant`: read and list the workspace, run the program) and refuses
any other atom with `errors.Unenforceable` before spawning. Even that grant is not
enforced: the child can read the whole machine. Accepting it means "this is what was
asked", not "this is all that can happen".

Output is capped at `OUTPUT_LIMIT` bytes, stdout and stderr together, keeping the start and cutting on a
UTF-8 character boundary, so a runaway child cannot exhaust memory and a cut never
leaves half a character for a decoder to turn into U+FFFD.
"""

from __future__ import annotations

import os
import time
from datetime import UTC, datetime

from roteiro_py import errors
from roteiro_py.process.grants import GrantAtom, GrantSet, workspace_grant
from roteiro_py.process.sandbox import Command, Outcome
from roteiro_py.process.stream import collect, spawn_sandboxed

#: Bytes kept over stdout and stderr together; the rest is dropped and the outcome flagged `truncated`.
OUTPUT_LIMIT = 256 * 1024

#: The only variables taken from our environment; locale and temporary-directory ones so
#: tools behave, PATH and HOME so they are found and find their configuration.
ESSENTIAL_VARIABLES = ("PATH", "HOME", "LANG", "LC_ALL", "TMPDIR", "TMP", "TEMP")


def utf8_prefix(data: bytes) -> bytes:
    """`data` without a multibyte UTF-8 sequence left incomplete at its end.

    Without it, output cut at a byte count ends in the first bytes of a character and
    every decoder shows a replacement character (or raises) where the cut fell.
    """
    for back in range(1, min(4, len(data)) + 1):
        byte = data[-back]
        if byte & 0xC0 != 0x80:  # not a continuation byte: the last character starts here
            if byte >= 0xF0:
                need = 4
            elif byte >= 0xE0:
                need = 3
            elif byte >= 0xC0:
                need = 2
            else:
                need = 1
            return data if back >= need else data[:-back]
    return data


class Unconfined:
    """Runs commands on this machine with no isolation. Not a sandbox."""

    def __init__(self, *, i_understand_this_is_not_a_sandbox: bool) -> None:
        if i_understand_this_is_not_a_sandbox is not True:
            raise ValueError(
                "Unconfined runs commands on this machine with no isolation; construct it "
                "with i_understand_this_is_not_a_sandbox=True"
            )

    def refusal(self, command: Command, grant: GrantSet) -> errors.Unenforceable | None:
        """The refusal `run` would raise for this grant, or None if it would run."""
        allowed = workspace_grant(command.workspace, command.program)
        beyond = grant.beyond(allowed)
        if beyond:
            return errors.Unenforceable(
                str(beyond[0]), command.display(),
                "Unconfined runs on this machine with no isolation: it accepts only reading "
                "and listing the workspace and running the named program",
            )
        execute = GrantAtom.parse(f"proc:exec:{command.program}")
        if not grant.admits(execute).allows:
            return errors.Unenforceable(
                str(execute), command.display(), "the grant does not include running the program")
        return None

    def run(self, command: Command, grant: GrantSet) -> Outcome:
        refusal = self.refusal(command, grant)
        if refusal is not None:
            raise refusal
        env = {name: os.environ[name] for name in ESSENTIAL_VARIABLES if name in os.environ}
        env.update(command.env)
        started, clock = datetime.now(UTC), time.monotonic()
        collected = collect(spawn_sandboxed(
            command.argv, env=env, cwd=command.workspace, timeout=command.timeout,
            max_bytes=OUTPUT_LIMIT,
        ))
        duration, ended = time.monotonic() - clock, datetime.now(UTC)
        cut = collected.truncated_streams
        return Outcome(
            command=command,
            exit=collected.exit,
            stdout=utf8_prefix(collected.stdout) if "stdout" in cut else collected.stdout,
            stderr=utf8_prefix(collected.stderr) if "stderr" in cut else collected.stderr,
            timed_out=collected.timed_out,
            truncated=collected.truncated,
            duration=duration,
            started=started,
            ended=ended,
            failure=collected.failure,
        )
