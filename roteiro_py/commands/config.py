"""`pylint-sandbox config show|get|set|unset`: thin wrappers over config.py.

A value can come from the repository's roteiro.toml, which the tree under review wrote:
it is text, never markup (a rich table cell given a `str` parses `[link=...]` and
`[reverse]`), and every line goes out through `guard()` like a report (untrusted.py).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any, Literal, TextIO, cast

from roteiro_py import config
from roteiro_py.errors import EXIT_OK, EXIT_USAGE
from roteiro_py.guidance import printable
from roteiro_py.untrusted import guard


def _text(value: Any) -> str:
    if value is None:
        return "(unset)"
    if isinstance(value, (list, bool)):
        return printable(json.dumps(value))
    return printable(str(value))


def _write(text: str, *, stream: TextIO | None = None) -> None:
    (stream or sys.stdout).write(guard(text))


def _table(rows: list[tuple[str, str, str]]) -> str:
    """The rows as a terminal table: rich styles of our own, the cells as plain Text."""
    # lazy: rich only for `config show`'s table; get, set and unset print plain text
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    table = Table("key", "value", "from", box=None, pad_edge=False)
    for key, value, source in rows:
        table.add_row(Text(key), Text(value), Text(source),
                      style=None if source != "default" else "dim")
    console = Console(highlight=False, markup=False, emoji=False)
    with console.capture() as captured:
        console.print(table)
    return captured.get()


def show(path: Path) -> int:
    """Every effective value and its source. A value a file or variable sets that cannot be
    used does not stop the rest from showing (issue 23: one bad key in a roteiro.toml
    failed the whole command): its row shows what applies without it, marked, each
    refusal follows on stderr as a lint would give it, and the exit status is 2."""
    resolved, refused = config.resolve_leniently(path)
    marked = {item.key for item in refused if item.key is not None}
    rows = [(key, _text(resolved.value_of(key)), printable(str(resolved.source_of(key)))
             + ("; REFUSED, see below" if key in marked else ""))
            for key in config.known_keys()]
    if sys.stdout.isatty():
        _write(_table(rows))
    else:
        width = max(len(key) for key, _, _ in rows)
        for key, value, source in rows:
            _write(f"{key:<{width}}  {value}  ({source})\n")
    _write(f"# user config: {printable(str(resolved.user_config))}\n")
    repo = resolved.repo_config
    _write(f"# repo config: {printable(str(repo)) if repo else '(none found)'}\n")
    for item in refused:
        _write(item.error.guidance().render_text(), stream=sys.stderr)
    return EXIT_USAGE if refused else EXIT_OK


def get(key: str, path: Path) -> int:
    config.split_key(key)
    resolved = config.resolve(path)
    value = resolved.value_of(key)
    _write(f"{_text(value)}\n")
    return 0


def set_(key: str, value: str, scope: str, path: Path) -> int:
    file = config.config_file_for(cast(Literal["user", "repo"], scope), path)
    if scope == "repo":
        config.split_key(key)
        config.check_repo_key(file, key)
    had_comments = file.is_file() and any(
        line.lstrip().startswith("#") for line in file.read_text(errors="replace").splitlines())
    stored = config.set_value(file, key, value)
    _write(f"{printable(key)} = {_text(stored)}  (written to {printable(str(file))})\n")
    if had_comments:
        _write(f"note: comments in {printable(str(file))} were not kept.\n", stream=sys.stderr)
    return 0


def unset(key: str, scope: str, path: Path) -> int:
    file = config.config_file_for(cast(Literal["user", "repo"], scope), path)
    removed = config.unset_value(file, key)
    state = "removed from" if removed else "was not set in"
    _write(f"{printable(key)} {state} {printable(str(file))}\n")
    return 0
