"""The process layer: grants, the Sandbox protocol, `Unconfined`, and framed streaming.

Import from here; the submodules are `grants` (what a command may touch), `sandbox` (the
boundary every backend implements), `unconfined` (no isolation, by explicit opt-in) and
`stream` (spawning a child and reading it as frames under a deadline) and `tool` (a
trusted host program run to its end through `stream`, or a refusal).
"""

from roteiro_py.process.grants import (
    Containment,
    GrantAtom,
    GrantSet,
    MalformedGrant,
    checker_ceiling,
    workspace_grant,
)
from roteiro_py.process.sandbox import Command, Outcome, Sandbox
from roteiro_py.process.stream import (
    Collected,
    Exit,
    Failed,
    Frame,
    Output,
    Stream,
    collect,
    spawn,
    spawn_sandboxed,
)
from roteiro_py.process.unconfined import OUTPUT_LIMIT, Unconfined

__all__ = [
    "OUTPUT_LIMIT",
    "Collected",
    "Command",
    "Containment",
    "Exit",
    "Failed",
    "Frame",
    "GrantAtom",
    "GrantSet",
    "MalformedGrant",
    "Outcome",
    "Output",
    "Sandbox",
    "Stream",
    "Unconfined",
    "checker_ceiling",
    "collect",
    "spawn",
    "spawn_sandboxed",
    "workspace_grant",
]
