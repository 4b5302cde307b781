"""The VM backend protocol, and the values every backend hands back (the registry of
backends is vm/__init__.py `BACKENDS`; the one options object every backend is built
from is vm/options.py `VmOptions`).

A backend is a `Sandbox` (`run(command, grant) -> Outcome`) that boots a disposable
virtual machine per run. On top of the single-command protocol it offers `run_steps`:
one boot running a short sequence of commands (the lint probes `cargo-clippy --version`
and `rustc -vV`, then runs clippy), each with its own exit status and output, because a
boot costs ~2 s under TCG (VM_NOTES) and three boots would triple that.

What a backend guarantees (the qemu member documents how):
- It states the most it can enforce as grant atoms (`ceiling()`), and answers for one
  job's grant and steps what `run_steps` would refuse (`check()`: the paths it never
  shares); a lint asks both before it prepares anything (lint/run.py `check_grant`).
- It refuses, with `errors.Unenforceable` and before booting, every grant atom it cannot
  enforce: `net:*` (there is no network device), `secret:*`, `env:read:*` (the guest's
  environment is set, never inherited), any `fs:write` outside the scratch disk, and
  domains it does not know.
- A step names a read-only share by its host path (its working directory, arguments and
  environment values), and its output names it so: where the guest really mounts it is
  the backend's business (the qemu backend: under `vm/mounts.py` GUEST_TREES, wherever
  the tree is on the host, /root and /dev/shm included).
- The isolation a run had is stated by the backend that obtained it, as an `Isolation`
  carried by every outcome, so a report can say "TCG, not a hardware boundary" without
  guessing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from roteiro_py.process.grants import GrantSet
from roteiro_py.process.sandbox import Command, Outcome

if TYPE_CHECKING:
    from roteiro_py.vm.stamps import StampBook

@dataclass(frozen=True)
class Isolation:
    """How a run was isolated, in the words of the backend that isolated it."""

    backend: str
    accelerator: str
    hardware_isolated: bool
    description: str


@dataclass(frozen=True)
class VmOutcome(Outcome):
    """An `Outcome` from inside a VM, with the isolation that run had."""

    isolation: Isolation | None = None
    #: Which of the step's streams ("stdout", "stderr") passed the output cap, when
    #: `truncated`: what errors.OutputTooLarge names. Empty when unknown (a step a VM
    #: template ran records only that it was cut).
    truncated_streams: tuple[str, ...] = ()
    #: Processes the guest kernel's OOM killer killed while the step ran, as the guest's
    #: init counted them (/proc/vmstat); 0 when none, or when not known (a template's
    #: step). The only evidence that a step killed by SIGKILL ran out of memory.
    oom_kills: int = 0
    #: (stream, why) for each of the step's streams that did not arrive whole from the
    #: guest (a read of it failed, or it never reached its end): the status is then over
    #: output that was partly lost, `failure` says so, and a lint refuses it
    #: (errors.OutputCut).
    lost_streams: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class StagedShare:
    """A read-only share that reached the guest as a copy made for this run.

    copy:     the copied tree, kept in the caller's `staging` directory (the bytes the
              guest saw); None when the caller passed no staging directory.
    left_out: (relative path, why) of what the copy left out that was not excluded by
              design: "unreadable", "special", "other filesystem".
    """

    host: Path
    copy: Path | None
    left_out: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class JobOutcome:
    """What came of one boot running a sequence of steps.

    `steps` has one entry per step that started, in order; a step that never started
    (an earlier one failed with stop_on_failure, or the VM died) has none. `completed`
    is True only when the guest's init reported that it finished the job: a run killed
    at its deadline, or whose output passed the limit, is not completed.
    """

    steps: tuple[VmOutcome, ...]
    isolation: Isolation
    completed: bool
    #: Seconds from starting the hypervisor to the guest reporting it is ready to run
    #: the first step; None when it never got there.
    boot_seconds: float | None
    #: Why the job did not complete (deadline, output limit, guest init error), or None.
    failure: str | None
    #: The tail of the guest's kernel console, for diagnosing a boot that failed.
    console: bytes
    #: The shares that travelled as copies, in share order.
    staged: tuple[StagedShare, ...] = ()
    #: The guest's clock (epoch seconds) once its steps were done, as its init reported
    #: it; None when it never said (vm/stamps.py: the next run's stamps must pass it).
    guest_clock: int | None = None
    #: The key of the VM template this run was restored from (vm/qemu/template.py), or
    #: None when it booted cold; the first `template_steps` outcomes are then the
    #: template's, run once when it was built.
    template: str | None = None
    #: Seconds spent building that template in this run (the first run of a key), else 0.
    template_built_seconds: float = 0.0

    @property
    def restored(self) -> bool:
        return self.template is not None


class VmBackend(Protocol):
    """A Sandbox that runs each job in a fresh VM."""

    name: str

    def isolation(self) -> Isolation:
        """The isolation runs will have (probing the hypervisor if not yet done)."""
        ...

    def ceiling(self) -> GrantSet:
        """The most this backend can confine a command to; a grant beyond it is refused."""
        ...

    def check(self, steps: Sequence[Command], grant: GrantSet) -> None:
        """Refuse where `run_steps` would refuse `grant` for these steps, looking only at
        the host's paths: no image, disk or boot is needed. errors.Unenforceable for the
        grant; the refusals of a share's copy (errors.TreeTooLarge, errors.TreeIncomplete)
        for a backend that copies trees."""
        ...

    def run(self, command: Command, grant: GrantSet) -> Outcome:
        """One command in one boot (the Sandbox protocol)."""
        ...

    def run_steps(self, steps: Sequence[Command], grant: GrantSet, *,
                  stop_on_failure: bool = True, deadline: float | None = None,
                  staging: Path | None = None, clock: int | None = None,
                  stamps: StampBook | None = None, template_steps: int = 0) -> JobOutcome:
        """Several commands in one boot; each is checked against `grant` before booting.

        `deadline` (seconds) bounds all of it, the host's preparation included;
        `staging` is a directory the caller owns where copies of the shares are kept
        (`JobOutcome.staged`) until the caller removes it. `stamps` decides the times the
        copies carry and records them (vm/stamps.py; default: a fresh book); `clock`
        (epoch seconds) is the guest's clock at boot (default: `stamps.clock`).
        `template_steps`: the first that many steps touch no per-run share and may be run
        once in a VM template whose clones run the rest (their outcomes are then the
        template's)."""
        ...
