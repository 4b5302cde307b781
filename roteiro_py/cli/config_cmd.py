"""`pylint-sandbox config show|get|set|unset`: thin wrappers over config.py."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, cast

from roteiro_py import config
from roteiro_py.guidance import printable


def _text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, (list, bool)):
        return json.dumps(value)
    return printable(str(value))


def show(path: Path) -> int:
    resolved = config.resolve(path)
    rows = [(key, _text(resolved.value_of(key)), str(resolved.source_of(key)))
            for key in config.known_keys()]
    if sys.stdout.isatty():
        from rich.console import Console
        from rich.table import Table

        table = Table("key", "value", "from", box=None, pad_edge=False)
        for key, value, source in rows:
            table.add_row(key, value, source, style=None if source != "default" else "dim")
        Console().print(table)
    else:
        width = max(len(key) for key, _, _ in rows)
        for key, value, source in rows:
            sys.stdout.write(f"{key:<{width}}  {value}  ({printable(source)})\n")
    sys.stdout.write(f"# user config: {printable(str(resolved.user_config))}\n")
    repo = resolved.repo_config
    sys.stdout.write(f"# repo config: {printable(str(repo)) if repo else '(none found)'}\n")
    return 0


def get(key: str, path: Path) -> int:
    config.split_key(key)
    resolved = config.resolve(path)
    value = resolved.value_of(key)
    sys.stdout.write(f"{_text(value)}\n")
    return 0


def set_(key: str, value: str, scope: str, path: Path) -> int:
    file = config.config_file_for(cast(Literal["user", "repo"], scope), path)
    if scope == "repo":
        config.split_key(key)
        config.check_repo_key(file, key)
    had_comments = file.is_file() and any(
        line.lstrip().startswith("#") for line in file.read_text(errors="replace").splitlines())
    stored = config.set_value(file, key, value)
    sys.stdout.write(f"{key} = {_text(stored)}  (written to {printable(str(file))})\n")
    if had_comments:
        sys.stderr.write(f"note: comments in {printable(str(file))} were not kept.\n")
    return 0


def unset(key: str, scope: str, path: Path) -> int:
    file = config.config_file_for(cast(Literal["user", "repo"], scope), path)
    removed = config.unset_value(file, key)
    state = "removed from" if removed else "was not set in"
    sys.stdout.write(f"{key} {state} {printable(str(file))}\n")
    return 0
