"""Every file path the prose cites names a file or directory that exists (issue 22).

Docstrings, comments and documents point readers at files ("tests/unit/test_shipped.py
fails when a copy differs", "see docs/ARCHITECTURE.md") hundreds of times, and a move
leaves them pointing nowhere without anything noticing: six did before this test.
Here each citation is resolved, and a failure lists every dangling one as
`file:line: path`, so whoever moves a file sees what to fix.

What is scanned: the docstrings (every string statement) and comments of the Python in
roteiro_py/, bench/, scripts/ and tests/ (not tests/data/, which is fixture material), the
comments of the shell scripts, action.yml, ci/, .ci/run, Dockerfile.clippy and
pyproject.toml, and the whole text of every Markdown document (not the byte-identical
copies in roteiro_py/docs_data/, which tests/unit/test_shipped.py holds to their sources).

What counts as a citation, so that false alarms stay near zero:
- a relative path whose first component is one of our top-level entries (TOP_LEVEL:
  `scripts/test`, `docs/ARCHITECTURE.md`, `tests/unit/`), resolved against the root;
- a path relative to the package, whose first component is one of its subpackages
  (SUBPACKAGES) and whose last names a .py or .sh file or ends in `/`
  (`vm/qemu/backend.py`), resolved against roteiro_py/ or the root, either will do;
- a module's path with a name in it (`cargo/workspace.read_tree_file`): the module must
  exist and bind the name at its top level;
- a bare Python file name (`errors.py`): some Python file of ours must have that name;
- a dotted module name `roteiro_py.<...>`: it must resolve to a module or package of
  ours, and a name past the module must be bound by it (`roteiro_py.lint.lint`);
- a Markdown link target, resolved against the document's directory as GitHub does.
A pytest node id or line number after a path (`::test_x`, `:42`) is cut off. URLs,
globs, placeholders (`<...>`, `{...}`, `$VAR`), absolute paths and `~/...` are never
citations, nor is a path in a tree that is not ours (a crate's `src/lib.rs`,
`.cargo/config.toml`): its first component is none of the names above.
"""

from __future__ import annotations

import ast
import functools
import io
import re
import tokenize
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "roteiro_py"

#: The repository's top-level entries: a path starting with one of these is ours.
TOP_LEVEL = frozenset({
    "roteiro_py", "tests", "docs", "bench", "scripts", "ci", "examples", ".ci", "action.yml",
    "README.md", "SANDBOXED_LINTING.md", "Dockerfile.clippy", "pyproject.toml",
})
#: roteiro_py's subpackages, today's and the layout's: a path starting with one of these
#: may be written relative to the package (a fixed list, so that one removed whole still
#: leaves its citations checked).
SUBPACKAGES = frozenset({
    "vm", "lint", "cargo", "report", "store", "process", "clippy", "compare", "depcache", "cli",
    "commands",
})
#: Citations of something intentionally absent, as (citing file, cited path): reason.
#: Each must still occur, so the list only shrinks.
ALLOWED: dict[tuple[str, str], str] = {}

#: A run of characters a path is written with, plus the ones that disqualify it (`*`,
#: `<`, `{`, `$`, `~`, `%`, the `:` of a URL), so that the whole run is judged at once.
_WORD = re.compile(r"[\w./*<>{}$~%@:+-]+")
_PATH = re.compile(r"[\w.-]+(?:/[\w.-]+)*/?")
_BARE_PYTHON = re.compile(r"\w[\w.-]*\.py")
#: `module/path.name`: a name in a module, written with the module's path.
_ATTRIBUTE = re.compile(r"((?:[\w-]+/)+\w+)\.([A-Za-z_]\w*)")
_DOTTED = re.compile(r"(?<![\w.])roteiro_py(?:\.\w+)+")
_MD_LINK = re.compile(r"\]\(([^)\s]+)\)")


@dataclass(frozen=True)
class Citation:
    source: Path  # the file whose text cites
    line: int
    cited: str

    def __str__(self) -> str:
        return f"{self.source.relative_to(ROOT)}:{self.line}: {self.cited}"


def _python_prose(text: str) -> Iterator[tuple[int, str]]:
    """(line, text) of each comment and of each string statement (docstrings, attribute
    docstrings) of a Python source: not its other strings, which are data."""
    statement: list[tokenize.TokenInfo] | None = []  # the strings a statement began with
    for token in tokenize.generate_tokens(io.StringIO(text).readline):
        if token.type == tokenize.COMMENT:
            yield token.start[0], token.string
        elif token.type == tokenize.STRING and statement is not None:
            statement.append(token)
        elif token.type not in (tokenize.NL, tokenize.ENCODING):
            if token.type in (tokenize.NEWLINE, tokenize.ENDMARKER):
                for string in statement or []:
                    for offset, line in enumerate(string.string.split("\n")):
                        yield string.start[0] + offset, line
            ends = (tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT)
            statement = [] if token.type in ends else None


def _hash_comments(text: str) -> Iterator[tuple[int, str]]:
    """(line, comment) of a shell, YAML, TOML or Dockerfile: from a `#` that starts a word."""
    for number, line in enumerate(text.splitlines(), 1):
        match = re.search(r"(?:^|\s)#(.*)", line)
        if match:
            yield number, match.group(1)


def _sources() -> Iterator[tuple[Path, Iterable[tuple[int, str]]]]:
    """Each scanned file with its prose, line by line."""
    python = [*PACKAGE.rglob("*.py"), *(ROOT / "bench").glob("*.py"),
              *(p for p in (ROOT / "tests").rglob("*.py") if p.relative_to(ROOT).parts[1] != "data")]
    for path in sorted(python):
        yield path, _python_prose(path.read_text())
    for path in sorted(p for p in (ROOT / "scripts").rglob("*") if p.is_file()):
        text = path.read_text()
        yield path, _python_prose(text) if text.startswith("#!/usr/bin/env python") else _hash_comments(text)
    commented = [ROOT / "action.yml", ROOT / "pyproject.toml", ROOT / "Dockerfile.clippy", ROOT / ".ci" / "run",
                 *(p for p in (ROOT / "ci").rglob("*") if p.is_file()), *PACKAGE.rglob("*.sh")]
    for path in sorted(commented):
        yield path, _hash_comments(path.read_text())
    markdown = [p for p in ROOT.rglob("*.md")
                if not {".venv", ".git"} & set(p.relative_to(ROOT).parts) and p.parent != PACKAGE / "docs_data"]
    for path in sorted(markdown):
        yield path, enumerate(path.read_text().splitlines(), 1)


def candidate(word: str) -> str | None:
    """The path of ours a word of prose cites, or None when it cites none."""
    if "://" in word:
        return None
    word = re.sub(r"(::\w.*|:\d+(?:[-:]\d+)?)$", "", word)  # a pytest node id or a line number
    word = word.lstrip(":@+-").rstrip(".:,;@+-")
    if not _PATH.fullmatch(word) or word.startswith(("/", "./", "../")):
        return None
    first, _, rest = word.partition("/")
    if first in TOP_LEVEL and (rest or "." in first or word.endswith("/")):
        return word
    if first in SUBPACKAGES and (word.endswith((".py", ".sh", "/")) or _ATTRIBUTE.fullmatch(word)):
        return word
    return word if _BARE_PYTHON.fullmatch(word) else None


@functools.cache
def _names(module: Path) -> frozenset[str]:
    """The names a module binds at its top level (defined, assigned or imported)."""
    names: set[str] = set()
    for statement in ast.parse(module.read_text()).body:
        for node in ast.walk(statement):  # an assignment or an import may sit under `if`/`try`
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
                names.add(node.name)
            elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
                names.add(node.id)
            elif isinstance(node, ast.alias):
                names.add((node.asname or node.name).split(".")[0])
    return frozenset(names)


def module_resolves(dotted: str) -> bool:
    """Whether `roteiro_py.<...>` names a module or package of ours and, when a name
    follows the module, the module binds it."""
    place, names = ROOT, dotted.split(".")
    for index, name in enumerate(names):
        if (place / name).is_dir():  # a package, or a namespace package (vm/qemu/)
            place = place / name
        elif (place / f"{name}.py").is_file():
            return index + 1 == len(names) or names[index + 1] in _names(place / f"{name}.py")
        else:
            return (place / "__init__.py").is_file() and name in _names(place / "__init__.py")
    return True


@functools.cache
def _python_files() -> frozenset[str]:
    return frozenset(p.name for top in ("roteiro_py", "tests", "bench") for p in (ROOT / top).rglob("*.py"))


def resolves(path: str) -> bool:
    """Whether a candidate() path names a file or directory of ours."""
    if "/" not in path and path.endswith(".py"):
        return path in _python_files()
    if any((base / path).exists() for base in (ROOT, PACKAGE)):
        return True
    attribute = _ATTRIBUTE.fullmatch(path)
    return attribute is not None and any(
        (base / f"{attribute[1]}.py").is_file() and attribute[2] in _names(base / f"{attribute[1]}.py")
        for base in (ROOT, PACKAGE))


@functools.cache
def citations() -> dict[Citation, bool]:
    """Every citation in the scanned prose, with whether it resolves."""
    found: dict[Citation, bool] = {}
    for source, lines in _sources():
        for number, line in lines:
            for dotted in _DOTTED.findall(line):
                found[Citation(source, number, dotted)] = module_resolves(dotted)
            for target in _MD_LINK.findall(line) if source.suffix == ".md" else []:
                target = target.split("#")[0]
                if target and ":" not in target:
                    found[Citation(source, number, target)] = (source.parent / target).exists()
            for word in _WORD.findall(line):
                path = candidate(word)
                if path is not None:
                    found.setdefault(Citation(source, number, path), resolves(path))
    return found


def _key(citation: Citation) -> tuple[str, str]:
    return str(citation.source.relative_to(ROOT)), citation.cited


def test_every_cited_path_exists() -> None:
    found = citations()
    assert ALLOWED.keys() <= {_key(c) for c in found}, "an allowed citation is no longer made: drop it"
    dangling = [str(c) for c, ok in found.items() if not ok and _key(c) not in ALLOWED]
    if dangling:
        pytest.fail("cited paths that point nowhere (cite where the thing is now):\n" + "\n".join(dangling),
                    pytrace=False)


def test_the_scan_is_not_vacuous() -> None:
    """A regex or an extractor that broke would find nothing, and pass: each kind of
    source and each kind of citation is found, in numbers."""
    found = citations()
    assert len(found) > 400, len(found)

    def cited_in(suffixes: tuple[str, ...]) -> int:
        return sum(1 for c in found if c.source.suffix in suffixes)

    assert cited_in((".py",)) > 200
    assert cited_in((".md",)) > 50
    assert cited_in((".sh", ".yml", ".toml", "")) > 20  # comments of scripts, CI, pyproject
    cited = {c.cited for c in found}
    assert any(c.startswith("roteiro_py.") for c in cited)  # dotted
    assert any(_ATTRIBUTE.fullmatch(c) and not c.endswith(".py") for c in cited)  # module.name
    assert any("/" not in c and c.endswith(".py") for c in cited)  # bare file name


def test_a_known_citation_is_found() -> None:
    """docs/ARCHITECTURE.md names the package's files (its table of modules): the scan
    finds them, in both spellings, and they resolve."""
    architecture = {c.cited: ok for c, ok in citations().items() if c.source == ROOT / "docs" / "ARCHITECTURE.md"}
    assert any(path.startswith("roteiro_py/") and ok for path, ok in architecture.items()), architecture
    assert any(path.split("/")[0] in SUBPACKAGES and ok for path, ok in architecture.items()), architecture


def test_the_prose_of_python_is_its_comments_and_string_statements() -> None:
    source = ('"""docs/A.md"""\n'
              'X = 1  # docs/B.md\n'
              '#: docs/C.md\n'
              'Y = "docs/D.md"\n'
              '"""docs/E.md"""\n'
              'def f() -> str:\n'
              '    """docs/F.md\n'
              '    docs/G.md"""\n'
              '    return "docs/H.md" "docs/I.md"\n'
              '"docs/J.md".upper()\n')
    prose = [(line, name) for line, text in _python_prose(source) for name in re.findall(r"docs/(\w)", text)]
    assert prose == [(1, "A"), (2, "B"), (3, "C"), (5, "E"), (7, "F"), (8, "G")]


def test_a_comment_starts_at_a_hash_that_starts_a_word() -> None:
    text = "run: x  # docs/A.md\n# docs/B.md\nurl: a#docs/C.md\n"
    assert [line for line, _ in _hash_comments(text)] == [1, 2]


@pytest.mark.parametrize(("word", "cited"), [
    ("`roteiro_py/vm/qemu/rootfs.py`,", "roteiro_py/vm/qemu/rootfs.py"),
    ("tests/unit/vm/test_pure.py::test_x", "tests/unit/vm/test_pure.py"),
    ("roteiro_py/errors.py:42", "roteiro_py/errors.py"),
    ("scripts/test.", "scripts/test"),
    (".ci/run", ".ci/run"),
    ("vm/qemu/backend.py", "vm/qemu/backend.py"),
    ("cargo/workspace.read_tree_file", "cargo/workspace.read_tree_file"),
    ("errors.py", "errors.py"),
    ("tests/", "tests/"),
    ("https://github.com/actions/toolkit/blob/main/docs/problem-matchers.md", None),
    ("tests/unit/cargo/test_registry*.py", None),
    ("vm/<name>/", None),
    ("docs/{name}.md", None),
    ("$ROTEIRO_HOME/tmp", None),
    ("~/.cargo/config.toml", None),
    ("/root/.cargo/config.toml", None),
    ("src/lib.rs", None),
    (".cargo/config.toml", None),
    ("Cargo.toml", None),
    ("crates/app/Cargo.toml", None),
    ("lint/compare", None),  # prose, not a path: no file named, no trailing slash
    ("and/or", None),
])
def test_what_counts_as_a_citation(word: str, cited: str | None) -> None:
    assert [candidate(w) for w in _WORD.findall(word) if candidate(w)] == ([cited] if cited else [])


@pytest.mark.parametrize(("cited", "ok"), [
    ("vm/qemu/backend.py", True),
    ("vm/qemu/nowhere.py", False),
    ("tests/unit/nowhere/", False),
    ("errors.py", True),
    ("nowhere.py", False),
    ("cargo/workspace.read_tree_file", True),
    ("cargo/workspace.no_such_name", False),
])
def test_a_path_resolves_only_when_it_exists(cited: str, ok: bool) -> None:
    assert resolves(cited) is ok


@pytest.mark.parametrize(("dotted", "ok"), [
    ("roteiro_py.lint", True),
    ("roteiro_py.lint.lint", True),
    ("roteiro_py.errors.ColdCache", True),
    ("roteiro_py.vm.qemu.backend", True),
    ("roteiro_py.nowhere", False),
    ("roteiro_py.errors.NoSuchName", False),
    ("roteiro_py.vm.qemu.nowhere", False),
])
def test_a_module_name_resolves_only_when_it_is_bound(dotted: str, ok: bool) -> None:
    assert module_resolves(dotted) is ok
