"""The tree a lint is about, as the host found it: what was asked for, the workspace root
cargo would use, and the repository root that holds it (lint/preflight.py `locate`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath


@dataclass(frozen=True)
class Tree:
    """Where things are on the host: what was asked for, the workspace, the repository."""

    asked: Path
    workspace: Path
    repo_root: Path

    @property
    def layout_workspace(self) -> PurePosixPath:
        return PurePosixPath(self.workspace.relative_to(self.repo_root).as_posix())
