"""The layout holds: no import cycle, a root of foundation modules, `lint/` apart from qemu,
and docs/ARCHITECTURE.md naming every file of the package.

The import graph is read from the source with `ast`, every import counted, those inside a
function included: a function-level import is how a cycle hides. The import contract in
pyproject.toml (`lint-imports`, run by scripts/test) states the layers; these tests state
the properties the layers exist for, and each has its control arm.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "roteiro_py"


def modules(package: Path = PACKAGE) -> dict[str, Path]:
    """Every module of the package by its dotted name (a package by its own name)."""
    found = {}
    for path in sorted(package.rglob("*.py")):
        parts = list(path.relative_to(package.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        found[".".join(parts)] = path
    return found


def _targets(node: ast.Import | ast.ImportFrom, here: str, is_package: bool,
             mods: Mapping[str, Path]) -> list[str]:
    """What one import statement imports: `from pkg import mod` imports the module, not
    also the package's other names; `from mod import name`, the module."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    base = node.module or ""
    if node.level:
        parts = here.split(".") if is_package else here.split(".")[:-1]
        parts = parts[: len(parts) - node.level + 1]
        base = ".".join(parts + ([base] if base else []))
    return [f"{base}.{alias.name}" if f"{base}.{alias.name}" in mods else base for alias in node.names]


def import_graph(mods: Mapping[str, Path]) -> dict[str, set[str]]:
    """module -> the modules of ours it imports (anywhere in the file)."""
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        edges = graph.setdefault(name, set())
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if not isinstance(node, ast.Import | ast.ImportFrom):
                continue
            edges.update(target for target in _targets(node, name, path.name == "__init__.py", mods)
                         if target in mods and target != name)
    return graph


def cycles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for start in graph:
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            for nxt in edges:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                    break
                if nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
            else:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
    return found


def test_no_import_cycle() -> None:
    assert cycles(import_graph(modules())) == []


def test_the_cycle_finder_finds_a_cycle_hidden_in_a_function(tmp_path: Path) -> None:
    """Control: two modules importing each other, one of them inside a function."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from pkg.b import f\n")
    (package / "b.py").write_text("def f():\n    from pkg import a\n    return a\n")
    (package / "c.py").write_text("from pkg import a\n")
    assert cycles(import_graph(modules(package))) == [["pkg.a", "pkg.b"]]


def test_the_root_holds_only_foundation_modules_that_import_no_package_of_ours() -> None:
    mods = modules()
    graph = import_graph(mods)
    root = {name for name, path in mods.items() if path.parent == PACKAGE and path.name != "__init__.py"}
    packages = {name for name, path in mods.items() if path.name == "__init__.py" and name != "roteiro_py"}
    reaching = {name: sorted(t for t in graph[name] if t.split(".")[1] in {p.split(".")[1] for p in packages})
                for name in sorted(root - {"roteiro_py.__main__"})}
    assert {name: out for name, out in reaching.items() if out} == {}
    # Control: the graph does see a package import where there is one.
    assert "roteiro_py.cli.app" in graph["roteiro_py.__main__"]


def test_lint_imports_nothing_of_the_qemu_backend() -> None:
    graph = import_graph(modules())
    reaching = {name: sorted(t for t in out if t.startswith("roteiro_py.vm.qemu"))
                for name, out in graph.items() if name.startswith("roteiro_py.lint")}
    assert {name: out for name, out in reaching.items() if out} == {}
    # Control: the registry does reach it (it builds the qemu backend by name).
    assert "roteiro_py.vm.qemu.backend" in graph["roteiro_py.vm"]


def test_the_architecture_map_names_every_file_of_the_package() -> None:
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    named = set(re.findall(r"`(roteiro_py/[\w/]+\.(?:py|sh))`", text))
    files = {path.relative_to(ROOT).as_posix() for pattern in ("*.py", "*.sh")
             for path in PACKAGE.rglob(pattern)}
    assert sorted(files - named) == []
    assert sorted(named - files) == []


def lazy_imports_without_a_reason(package: Path = PACKAGE) -> list[str]:
    """Imports inside a function with no comment saying why: on the line, or on the lines
    just above its block of imports (blank lines inside the block allowed)."""
    found = []
    for path in sorted(package.rglob("*.py")):
        if path == package / "cli" / "app.py":
            continue  # its module docstring says why: --help costs only Typer
        lines = path.read_text().split("\n")
        for function in ast.walk(ast.parse("\n".join(lines))):
            if not isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            for node in ast.walk(function):
                if not isinstance(node, ast.Import | ast.ImportFrom) or "#" in lines[node.lineno - 1]:
                    continue
                above = node.lineno - 2
                while above >= 0 and (lines[above].strip().startswith(("from ", "import "))
                                      or not lines[above].strip()):
                    above -= 1
                if above < 0 or not lines[above].strip().startswith("#"):
                    found.append(f"{path.relative_to(package.parent)}:{node.lineno}")
    return found


def test_every_import_inside_a_function_says_why() -> None:
    assert lazy_imports_without_a_reason() == []


def test_an_unexplained_import_inside_a_function_is_found(tmp_path: Path) -> None:
    """Control: one block says why, the other does not."""
    package = tmp_path / "pkg"
    package.mkdir()
    (package / "a.py").write_text("def f():\n    # lazy: heavy\n    import json\n\n    import os\n"
                                  "    return json, os\n\n\ndef g():\n    x = 1\n    import json\n"
                                  "    return json, x\n")
    assert [line.split(":")[-1] for line in lazy_imports_without_a_reason(package)] == ["11"]
