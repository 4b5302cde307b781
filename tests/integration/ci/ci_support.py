"""Helpers for the CI script tests (imported as `tests.integration.ci.ci_support`)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

#: git with no user or system configuration, and an identity for its commits.
#: Only git's own variables: merged with os.environ where a command runs, never copied at
#: import (the suite's hermetic CARGO_HOME is set after collection; a copy made here sent
#: the scripts' cargo to the user's own cargo home).
GIT_ENV = {"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@example.invalid"}


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, env={**os.environ, **GIT_ENV}, capture_output=True,
                          text=True, check=True, timeout=60).stdout
