"""What a run is doing, told as it happens.

A lint under TCG takes seconds to minutes; a run that prints nothing for that long looks
hung, to a person and to a CI job's watchdog alike. The conductor of a run and the VM
backend report stages through a `Progress`; how it is shown (a spinner on a terminal,
plain lines in a log, nothing with `-q`) is the renderer's business, never theirs.

Text handed to `note` may come from the guest (the crate cargo says it is checking):
every renderer sanitises it (roteiro_py/untrusted.py) before it reaches a terminal.
"""

from __future__ import annotations

from typing import Protocol

#: Stage names, in the order a run passes them (a run skips those it does not need).
IMAGE = "image verified"
ROOTFS = "root filesystem"
CARGO_VIEW = "package cache"
WORKTREE = "worktree copied"
BOOT = "boot"
RESTORE = "restore"
TOOLCHAIN = "toolchain"
CLIPPY = "clippy"
REPORT = "report"


class Progress(Protocol):
    def stage(self, name: str) -> None:
        """Stage `name` begins; the stage before it, if any, ends now."""
        ...

    def note(self, text: str) -> None:
        """What the current stage is busy with now (untrusted text is allowed)."""
        ...

    def finish(self) -> None:
        """The run is over (successfully or not): end the last stage, clear any spinner."""
        ...


class Silent:
    """Says nothing: `-q`, and every caller that was given no Progress."""

    def stage(self, name: str) -> None:
        pass

    def note(self, text: str) -> None:
        pass

    def finish(self) -> None:
        pass


SILENT: Progress = Silent()
