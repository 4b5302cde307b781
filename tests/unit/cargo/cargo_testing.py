"""What the cargo fetcher's tests share (imported as `tests.unit.cargo.cargo_testing`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from roteiro_py.cargo.lockfile import Pin, pin_of
from tests.support.https_server import HttpsServer

LOCKFILE = Path("/src/tree/Cargo.lock")
TREE = LOCKFILE.parent


@dataclass
class Registry:
    """A sparse registry served over https: its `server`, its files under `root`."""

    server: HttpsServer
    root: Path
    crates: dict[tuple[str, str], bytes]
    checksums: dict[tuple[str, str], str]

    @property
    def index(self) -> str:
        return self.server.url + "/"

    def pin(self, name: str, version: str, checksum: str | None = None) -> Pin:
        """The lockfile's pin of a crate of this registry (through the real lockfile reader)."""
        return pin_of(LOCKFILE, name, version, f"sparse+{self.index}",
                      checksum or self.checksums[(name, version)])


