"""What the guest's toolchain says it is, parsed from the probe's output.

The probe runs `cargo-clippy --version` and `rustc -vV` in the guest (command.py). Their
output is the guest's to choose, so it is bounded (PROBE_LIMIT_BYTES) and must match the
formats those tools print exactly; anything else is refused (ProbeFailed) rather than
put into a report as the "toolchain" that produced it. A clippy that is missing or does
not answer (a failed probe, or one that exits 0 and prints nothing) is ImageLacksLinter:
the way forward is a different image, not a retry. Both refusals name the image. A probe
that prints nothing already failed in the guest (command.PROBE_SCRIPT: its status is
SILENT_PROBE_STATUS), which stopped the job before the tree's build.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import ValidationError

from roteiro_py.clippy.command import SILENT_PROBE_STATUS
from roteiro_py.errors import ImageLacksLinter, ProbeFailed
from roteiro_py.process.sandbox import diagnostics
from roteiro_py.report.model import Toolchain

#: Each probe prints well under 1 KiB; more than this is not a toolchain answering.
PROBE_LIMIT_BYTES = 4096

_CLIPPY = re.compile(
    r"^clippy (?P<version>\d+\.\d+\.\d+(?:-[0-9A-Za-z.-]+)?)"
    r"(?: \((?P<commit>[0-9a-f]{7,40}) (?P<date>\d{4}-\d{2}-\d{2})\))?$"
)
_KEY_VALUE = re.compile(r"^(?P<key>[A-Za-z][A-Za-z -]{0,30}): (?P<value>\S{1,200})$")
_MISSING = ("no such command", "is not installed", "command not found", "not found")


@dataclass(frozen=True)
class ProbeOutput:
    """One probe command's result as the process layer returned it."""

    status: int | None
    stdout: bytes
    stderr: bytes

    def diagnostics(self) -> str:
        """stderr, then stdout, as `Outcome.diagnostics` quotes a command."""
        return diagnostics(self.stdout, self.stderr)


def _text(data: bytes, what: str, reference: str) -> str:
    if len(data) > PROBE_LIMIT_BYTES:
        raise ProbeFailed(reference, what, f"{len(data)} bytes of output, more than {PROBE_LIMIT_BYTES}")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ProbeFailed(reference, what, f"output is not UTF-8: {exc}") from None


def parse_clippy_version(probe: ProbeOutput, *, reference: str) -> dict[str, str | None]:
    """The fields of `cargo-clippy --version`; ImageLacksLinter when clippy is not there:
    a failed probe, or one that exits 0 and prints nothing (a stub, an empty wrapper: no
    clippy answered, so the way forward is another image, not `doctor`)."""
    what = "`cargo-clippy --version`"
    stdout = _text(probe.stdout, what, reference).strip()
    stderr = _text(probe.stderr, what, reference).strip()
    if probe.status != 0 or not stdout:
        raise ImageLacksLinter(reference, probe.diagnostics())
    lines = stdout.splitlines()
    match = _CLIPPY.match(lines[0]) if len(lines) == 1 else None
    if match is None:
        if any(marker in (stdout + stderr).lower() for marker in _MISSING):
            raise ImageLacksLinter(reference, probe.diagnostics())
        raise ProbeFailed(reference, what, stdout or stderr)
    return {"clippy_version": match["version"], "clippy_commit": match["commit"],
            "clippy_date": match["date"]}


def parse_rustc_vv(probe: ProbeOutput, *, reference: str) -> dict[str, str | None]:
    """`release` and `host` (required) and `commit-hash` from `rustc -vV`; exiting 0 with
    nothing on stdout is ImageLacksLinter, as for clippy's probe."""
    what = "`rustc -vV`"
    stdout = _text(probe.stdout, what, reference)
    stderr = _text(probe.stderr, what, reference)
    lines = stdout.strip().splitlines()
    silent = probe.status in (0, SILENT_PROBE_STATUS) and not lines
    if probe.status != 0 and not silent:
        raise ProbeFailed(reference, what, f"exit status {probe.status}: {probe.diagnostics()}")
    if not lines:
        raise ImageLacksLinter(reference, stderr, probe="rustc -vV")
    if not lines[0].startswith("rustc "):
        raise ProbeFailed(reference, what, stdout)
    fields: dict[str, str] = {}
    for line in lines[1:]:
        match = _KEY_VALUE.match(line)
        if match is None:
            raise ProbeFailed(reference, what, f"unexpected line {line!r}")
        if match["key"] in fields:
            raise ProbeFailed(reference, what, f"{match['key']!r} given twice")
        fields[match["key"]] = match["value"]
    for key in ("release", "host"):
        if key not in fields:
            raise ProbeFailed(reference, what, f"no `{key}:` line in {stdout!r}")
    return {"rustc_release": fields["release"], "host": fields["host"],
            "rustc_commit": fields.get("commit-hash")}


def toolchain_from_probe(clippy: ProbeOutput, rustc: ProbeOutput, *, reference: str) -> Toolchain:
    """The validated Toolchain, or ImageLacksLinter / ProbeFailed."""
    fields = {**parse_clippy_version(clippy, reference=reference), **parse_rustc_vv(rustc, reference=reference)}
    try:
        return Toolchain.model_validate(fields)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ProbeFailed(reference, "the toolchain's answers", problems) from None
