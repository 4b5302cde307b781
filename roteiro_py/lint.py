"""One lint run: preflight in order, boot, probe, build, report.

The preflight checks run cheapest and most fundamental first, and each refuses before
anything more expensive starts:

    image configured -> pinned by digest -> hypervisor usable -> image present in the store
    -> package cache present -> scratch available

Only then does a VM boot. Nothing here ever runs the tree's code on the host.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from roteiro_py import config, paths
from roteiro_py.errors import NoImageConfigured
from roteiro_py.reference import ImageReference, parse_pinned


@dataclass(frozen=True)
class LintRequest:
    path: Path
    flags: dict[str, tuple[Any, str]] = field(default_factory=dict)
    output: Path | None = None


def repo_config_hint(resolved: config.Resolved, path: Path) -> Path:
    if resolved.repo_config is not None:
        return resolved.repo_config
    return config.config_file_for("repo", path)


def pinned_image(resolved: config.Resolved, path: Path) -> ImageReference:
    """Steps 1 and 2: an image is configured, and it is pinned by digest."""
    image = resolved.settings.lint.image
    if not image:
        raise NoImageConfigured(user_config=paths.user_config_path(),
                                repo_config=repo_config_hint(resolved, path))
    return parse_pinned(image, source=str(resolved.source_of("lint.image")))


def run_lint_command(request: LintRequest) -> int:
    resolved = config.resolve(request.path, flags=request.flags)
    pinned_image(resolved, request.path)
    raise NotImplementedError
