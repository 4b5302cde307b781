"""Every host child goes through the process layer: no module of the package but
`process/stream.py` starts a process by any other means.

`subprocess.run` and friends capture output without a bound, kill only the child (not
what it forked) and end a timeout in `TimeoutExpired`, which no boundary turns into a
refusal (exit 4). Issue 21 found mkfs.ext4, zstd and `qemu --version` started so; they
now run through `process/tool.py`. The scan reads the source (imports and calls), so a
new `import subprocess` anywhere fails here before it ships.
"""

from __future__ import annotations

import ast
from pathlib import Path

import roteiro_py

PACKAGE = Path(roteiro_py.__file__).parent

#: Modules that may start a process themselves, and why.
ALLOWED = {
    "process/stream.py": "the process layer itself: the one `subprocess.Popen`",
}
#: Modules that still do, each with the reason it is not moved; each must still do so
#: (an entry that no longer applies fails, so the list only shrinks).
EXCEPTIONS: dict[str, str] = {}

#: Modules whose import alone means starting processes outside the process layer.
SPAWNING_MODULES = frozenset({"subprocess", "pty", "multiprocessing", "asyncio.subprocess",
                              "concurrent.futures.process"})
#: `os` functions that start or replace a process.
SPAWNING_OS = frozenset({"system", "popen", "fork", "forkpty", "posix_spawn", "posix_spawnp",
                         "execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp",
                         "execvpe", "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv",
                         "spawnve", "spawnvp", "spawnvpe"})
#: `asyncio` functions that start a process.
SPAWNING_ASYNCIO = frozenset({"create_subprocess_exec", "create_subprocess_shell"})


def spawns(source: str) -> list[str]:
    """What in `source` starts a process (or imports what does), as `line: what`."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {alias.name}" for alias in node.names
                      if alias.name in SPAWNING_MODULES]
        elif isinstance(node, ast.ImportFrom):
            module = node.module or ""
            names = {alias.name for alias in node.names}
            if module in SPAWNING_MODULES or any(f"{module}.{name}" in SPAWNING_MODULES
                                                 for name in names) \
                    or (module == "os" and names & SPAWNING_OS) \
                    or (module == "asyncio" and names & (SPAWNING_ASYNCIO | {"subprocess"})):
                found.append(f"{node.lineno}: from {module} import {', '.join(sorted(names))}")
        elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) \
                and node.attr in {"os": SPAWNING_OS, "asyncio": SPAWNING_ASYNCIO}.get(
                    node.value.id, frozenset()):
            found.append(f"{node.lineno}: {node.value.id}.{node.attr}")
    return found


def package_spawns(root: Path) -> dict[str, list[str]]:
    """Each module under `root` that starts a process, by its path relative to `root`."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        hits = spawns(path.read_text(encoding="utf-8"))
        if hits:
            found[path.relative_to(root).as_posix()] = hits
    return found


def test_the_scan_sees_every_way_to_start_a_process() -> None:
    """The control arm: each form is found, so an empty scan of the package means something."""
    forms = {
        "import subprocess": 1, "import subprocess as sp": 1, "from subprocess import run": 1,
        "import pty": 1, "from multiprocessing import Process": 1,
        "from concurrent.futures import process": 1,
        "import os\nos.system('x')": 1, "import os\nos.execvp('x', [])": 1,
        "from os import posix_spawn": 1, "import asyncio\nasyncio.create_subprocess_exec('x')": 1,
        "from asyncio import subprocess": 1,
        "import os\nos.getpid()\nos.path.join('a')": 0, "import shutil\nshutil.which('x')": 0,
    }
    for source, count in forms.items():
        assert len(spawns(source)) == count, (source, spawns(source))


def test_only_the_process_layer_starts_processes() -> None:
    found = package_spawns(PACKAGE)
    outside = {module: hits for module, hits in found.items()
               if module not in ALLOWED and module not in EXCEPTIONS}
    assert outside == {}, ("start these through roteiro_py/process (tool.run_tool, or "
                           f"stream.spawn + collect): {outside}")


def test_every_listed_exception_still_applies() -> None:
    """A module that no longer starts processes leaves the lists: they only shrink."""
    found = package_spawns(PACKAGE)
    stale = [module for module in (*ALLOWED, *EXCEPTIONS)
             if (PACKAGE / module).exists() and module not in found]
    assert stale == []
