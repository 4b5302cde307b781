"""The status port: what the guest's init says about a job, read as untrusted lines.

guest_init.sh writes one line an event on a virtio-serial port the job's commands cannot
reach: `ready`, `start I`, `oom I N`, `exit I RC T`, `clock EPOCH`, `error ...`, `done`.
Every number is bounded by its digits before int() sees it, so a hostile guest can neither
make a huge integer nor a verdict out of a malformed line (tests/unit/vm/qemu/test_hostile_host_side.py).
"""

from __future__ import annotations

from base64 import b64decode, b64encode
from dataclasses import dataclass

from roteiro_py.vm.qemu.machine import MachineResult

#: The guest's "clock EPOCH" status line is read only with at most this many digits
#: (epoch seconds have 10 until the year 2286); lint/freshness.py bounds the value.
CLOCK_DIGITS = 12
#: The guest's "oom I N" line is read only with at most this many digits in N.
OOM_DIGITS = 6
#: The guest's "exit I RC T" line is read only with at most this many digits in RC: a
#: shell's `$?` is 0-255. A longer one is no verdict (it was any int() would take, up to
#: 4300 digits, printed whole in UnexpectedStatus's summary).
EXIT_DIGITS = 3


@dataclass(frozen=True)
class GuestStatus:
    """What init said about one job.

    starts: step -> seconds from boot it started; exits: step -> (seconds, status, timed
    out); ready: seconds to "ready", None when it never got there; done: init finished the
    job; error: init's own failure; clock: the guest's clock (epoch seconds) at the end;
    ooms: step -> processes the guest kernel's OOM killer killed during it
    (guest_init.sh `oom_kills`)."""

    starts: dict[int, float]
    exits: dict[int, tuple[float, int, bool]]
    ready: float | None
    done: bool
    error: str | None
    clock: int | None
    ooms: dict[int, int]


@dataclass(frozen=True)
class StepRecord:
    """A template step's outcome, as kept beside the template."""

    exit: int | None
    stdout: bytes
    stderr: bytes
    duration: float
    timed_out: bool
    truncated: bool

    def to_json(self) -> dict[str, object]:
        return {"exit": self.exit, "stdout": b64encode(self.stdout).decode(),
                "stderr": b64encode(self.stderr).decode(), "duration": self.duration,
                "timed_out": self.timed_out, "truncated": self.truncated}

    @staticmethod
    def from_json(data: object) -> StepRecord:
        if not isinstance(data, dict):
            raise ValueError("not an object")
        code = data["exit"]
        if code is not None and not isinstance(code, int):
            raise ValueError("bad exit")
        return StepRecord(code, b64decode(str(data["stdout"])), b64decode(str(data["stderr"])),
                          float(data["duration"]), bool(data["timed_out"]),
                          bool(data["truncated"]))


def read_status(result: MachineResult) -> GuestStatus:
    """What init said on the status port, each line read only in the shape above; any
    other line is ignored."""
    starts: dict[int, float] = {}
    ooms: dict[int, int] = {}
    exits: dict[int, tuple[float, int, bool]] = {}
    ready: float | None = None
    clock: int | None = None
    done = False
    error: str | None = None
    for at, line in result.status:
        words = line.split()
        try:
            if words == ["ready"]:
                ready = at
            elif words == ["done"]:
                done = True
            elif len(words) == 2 and words[0] == "clock" and words[1].isascii() \
                    and words[1].isdigit() and len(words[1]) <= CLOCK_DIGITS:
                clock = int(words[1])
            elif len(words) == 2 and words[0] == "start":
                starts[int(words[1])] = at
            elif len(words) == 3 and words[0] == "oom" and words[2].isascii() \
                    and words[2].isdigit() and len(words[2]) <= OOM_DIGITS:
                ooms[int(words[1])] = int(words[2])
            elif len(words) == 4 and words[0] == "exit" and words[2].isascii() \
                    and words[2].isdigit() and len(words[2]) <= EXIT_DIGITS:
                exits[int(words[1])] = (at, int(words[2]), words[3] == "1")
            elif words and words[0] == "error":
                error = "the guest's init failed: " + " ".join(words[1:])[:300]
        except ValueError:
            continue
    return GuestStatus(starts, exits, ready, done, error, clock, ooms)


def step_records(result: MachineResult, nsteps: int) -> tuple[list[StepRecord], str | None]:
    """A template boot's step outcomes, and the guest init's error if it reported one."""
    said = read_status(result)
    records = []
    for index in range(nsteps):
        if index not in said.starts or index not in said.exits:
            break
        at, status, timed_out = said.exits[index]
        records.append(StepRecord(
            None if timed_out else status, result.channels.get(f"stdout{index}", b""),
            result.channels.get(f"stderr{index}", b""), round(at - said.starts[index], 3),
            timed_out, bool({f"stdout{index}", f"stderr{index}"} & result.truncated)))
    return records, said.error
