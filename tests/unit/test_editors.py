"""docs/EDITORS.md names only settings rust-analyzer has, and says the same to every editor.

A misspelt key in an editor's settings is silently ignored by rust-analyzer (an unknown
`procMacro.enabled` leaves proc macros on), so a guide whose point is what to switch off is
tested against rust-analyzer's own list of keys: tests/data/rust-analyzer/ holds the server's
(its manual's `configuration_generated.md`) and the VS Code extension's
(`editors/code/package.json`), with their source and date in a header. Each editor's block is
parsed as that editor reads it (JSON with comments, a Lua table, TOML), nested tables walked
down to a documented key; prose names are those written `rust-analyzer.<key>`.
"""

from __future__ import annotations

import json
import re
import tomllib
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GUIDE = ROOT / "docs" / "EDITORS.md"
DATA = ROOT / "tests" / "data" / "rust-analyzer"
#: `rust-analyzer.toml` is the file rust-analyzer reads, not a setting; URLs are stripped first.
NOT_SETTINGS = {"toml"}


def documented(name: str) -> set[str]:
    lines = (DATA / name).read_text().splitlines()
    return {line for line in lines if line and not line.startswith("#")}


SERVER = documented("server-keys.txt")
VSCODE = documented("vscode-keys.txt")


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"^```{language}\n(.*?)^```", text, re.M | re.S)


def keys_under(table: dict[str, Any], known: set[str], prefix: str = "") -> set[str]:
    """The settings a nested table sets: each path down to a documented key (its value may
    itself be a table, as an environment is), or to a leaf that is not one."""
    found = set()
    for key, value in table.items():
        path = prefix + key
        if path in known or not isinstance(value, dict):
            found.add(path)
        else:
            found |= keys_under(value, known, path + ".")
    return found


class Lua:
    """The table constructors of Lua (names, ['string'] keys, strings, atoms): enough to read
    a settings table as Neovim does, without a Lua interpreter."""

    TOKEN = re.compile(r"\s*(?:--[^\n]*\n\s*)*(\[\s*'[^']*'\s*\]|\[\s*\"[^\"]*\"\s*\]|'[^']*'|\"[^\"]*\"|"
                       r"[{}=,;]|[A-Za-z_][A-Za-z0-9_.]*|-?\d+(?:\.\d+)?)")

    def __init__(self, source: str) -> None:
        self.tokens = self.TOKEN.findall(source)
        self.at = 0

    def take(self) -> str:
        self.at += 1
        return self.tokens[self.at - 1]

    def value(self) -> Any:
        token = self.take()
        if token == "{":
            return self.table()
        if token[0] in "'\"":
            return token[1:-1]
        return token

    def table(self) -> dict[str, Any] | list[Any]:
        keyed: dict[str, Any] = {}
        items: list[Any] = []
        while self.tokens[self.at] != "}":
            token = self.tokens[self.at]
            if self.tokens[self.at + 1] == "=" and (token[0] == "[" or token[0].isalpha() or token[0] == "_"):
                self.at += 2
                keyed[token.strip("[]").strip().strip("'\"")] = self.value()
            else:
                items.append(self.value())
            if self.tokens[self.at] in ",;":
                self.at += 1
        self.at += 1
        return keyed if keyed or not items else items


def lua_table(source: str, name: str) -> dict[str, Any]:
    """The table given to `name = {...}` in a Lua source (`settings`, `cmd_env`): read on its
    own, so a function elsewhere in the config (`root_dir`) is never parsed."""
    found = re.search(rf"^\s*{name} = {{", source, re.M)
    assert found is not None, name
    parser = Lua(source[found.end() - 1:])
    parser.take()
    table = parser.table()
    assert isinstance(table, dict)
    return table


def named(text: str) -> dict[str, set[str]]:
    """Every rust-analyzer setting the guide names, by where it names it."""
    (vscode,) = blocks(text, "jsonc")
    settings = json.loads("\n".join(line for line in vscode.splitlines() if not line.strip().startswith("//")))
    (neovim,) = blocks(text, "lua")
    (helix,) = blocks(text, "toml")
    lua = lua_table(neovim, "settings")["rust-analyzer"]
    prose = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)
    prose = re.sub(r"https?://\S+", "", prose)
    return {
        "vscode": {key.removeprefix("rust-analyzer.") for key in settings if key.startswith("rust-analyzer.")},
        "neovim": keys_under(lua, SERVER),
        "helix": keys_under(tomllib.loads(helix)["language-server"]["rust-analyzer"]["config"], SERVER),
        "prose": set(re.findall(r"\brust-analyzer\.([A-Za-z]+(?:\.[A-Za-z]+)*)", prose)) - NOT_SETTINGS,
    }


def unknown(text: str) -> dict[str, set[str]]:
    """Names no rust-analyzer documents: Neovim and Helix hand their table to the server, so
    theirs must be the server's; VS Code's settings.json also takes the extension's own."""
    found = named(text)
    known = {"vscode": VSCODE, "neovim": SERVER, "helix": SERVER, "prose": VSCODE}
    return {where: names - known[where] for where, names in found.items() if names - known[where]}


def environments(text: str) -> list[dict[str, str]]:
    (vscode,) = blocks(text, "jsonc")
    settings = json.loads("\n".join(line for line in vscode.splitlines() if not line.strip().startswith("//")))
    (neovim,) = blocks(text, "lua")
    (helix,) = blocks(text, "toml")
    return [settings["rust-analyzer.server.extraEnv"], lua_table(neovim, "cmd_env"),
            tomllib.loads(helix)["language-server"]["rust-analyzer"]["environment"]]


def test_every_setting_the_guide_names_is_one_rust_analyzer_documents() -> None:
    text = GUIDE.read_text()
    assert unknown(text) == {}
    found = named(text)
    assert len(set().union(*found.values())) > 20  # the scan reads the guide, not nothing
    assert all(len(names) >= 10 for where, names in found.items() if where != "prose"), found


@pytest.mark.parametrize(("right", "wrong", "where"), [
    ('"rust-analyzer.procMacro.enable": false', '"rust-analyzer.procMacro.enabled": false', "vscode"),
    ("procMacro = { enable = false },\n      lens", "procMacros = { enable = false },\n      lens", "neovim"),
    ('cargo = { buildScripts = { enable = false } }\nprocMacro',
     'cargo = { buildScript = { enable = false } }\nprocMacro', "helix"),
    ("`rust-analyzer.cargo.noDeps`", "`rust-analyzer.cargo.noDep`", "prose"),
    # a client-only key is not the server's: Helix hands its table to the server
    ('check = { overrideCommand', 'server = { extraEnv = { A = "" } }\ncheck = { overrideCommand', "helix"),
])
def test_a_misspelt_key_is_caught_where_it_is_written(right: str, wrong: str, where: str) -> None:
    """The control: the same guide with one key misspelt fails, in the block it is in."""
    text = GUIDE.read_text()
    assert text.count(right) == 1, right
    assert set(unknown(text.replace(right, wrong))) == {where}


def test_the_three_editors_set_the_same_settings_and_environment() -> None:
    """VS Code sets the server's environment with a setting of its own; the rest is the same."""
    found = named(GUIDE.read_text())
    assert found["vscode"] - {"server.extraEnv"} == found["neovim"] == found["helix"]
    first, *others = environments(GUIDE.read_text())
    assert first and all(other == first for other in others)
    assert {"RUSTUP_TOOLCHAIN", "RUSTC_WRAPPER", "RUSTC_WORKSPACE_WRAPPER"} <= set(first)


def test_the_key_lists_are_rust_analyzers() -> None:
    """Each list says where and when it was taken, and the server's keys are all VS Code
    settings (the extension is generated from the same config.rs)."""
    for name in ("server-keys.txt", "vscode-keys.txt"):
        header = (DATA / name).read_text().split("\n\n")[0]
        assert "# source: https://github.com/rust-lang/rust-analyzer/blob/" in header
        assert re.search(r"read on \d{4}-\d\d-\d\d", header)
    assert len(SERVER) > 150 and SERVER <= VSCODE
    assert {"check.overrideCommand", "procMacro.enable", "cargo.buildScripts.enable"} <= SERVER
    assert "server.extraEnv" in VSCODE - SERVER


def test_cargo_metadata_runs_the_trees_wrapper_and_env_as_the_guide_says(tmp_path: Path) -> None:
    """What the guide says `cargo metadata` (run by rust-analyzer on open) does with a tree's
    `.cargo/config.toml`, on real cargo and a workspace of our own: it runs `rustc -vV`
    through the tree's `build.rustc-wrapper` and `build.rustc-workspace-wrapper` (the
    control: the wrapper is seen to run); an empty RUSTC_WRAPPER and RUSTC_WORKSPACE_WRAPPER
    drop both; an `[env]` entry with `force = true` reaches rustc over the environment's
    value; `--no-deps` runs no rustc."""
    import os
    import subprocess

    log = tmp_path / "log"
    for name in ("wrapper", "workspace-wrapper"):
        (tmp_path / name).write_text(f'#!/bin/sh\necho "{name}: $*" >> {log}\nexec "$@"\n')
    (tmp_path / "rustc").write_text(f'#!/bin/sh\necho "rustc FORCED=$FORCED: $*" >> {log}\nexec rustc "$@"\n')
    for script in ("wrapper", "workspace-wrapper", "rustc"):
        (tmp_path / script).chmod(0o755)
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "tree"\nversion = "0.1.0"\nedition = "2021"\n')
    (tree / "src" / "main.rs").write_text("fn main() {}\n")
    (tree / ".cargo").mkdir()
    (tree / ".cargo" / "config.toml").write_text(
        f'[build]\nrustc-wrapper = "{tmp_path / "wrapper"}"\n'
        f'rustc-workspace-wrapper = "{tmp_path / "workspace-wrapper"}"\n'
        '[env]\nFORCED = { value = "tree", force = true }\n')
    base = {key: value for key, value in os.environ.items() if not key.startswith(("CARGO_", "RUSTC"))}
    base |= {"CARGO_HOME": os.environ["CARGO_HOME"], "CARGO_TARGET_DIR": str(tmp_path / "target"),
             "CARGO_CACHE_RUSTC_INFO": "0", "CARGO_NET_OFFLINE": "true"}

    def metadata(*extra: str, **env: str) -> str:
        log.write_text("")
        subprocess.run(["cargo", "metadata", "--format-version", "1", *extra], cwd=tree, env=base | env,
                       capture_output=True, check=True, timeout=120)
        return log.read_text()

    ran = metadata()
    assert "wrapper: " in ran and "workspace-wrapper: " in ran and " -vV" in ran
    assert metadata(RUSTC_WRAPPER="", RUSTC_WORKSPACE_WRAPPER="") == ""
    forced = metadata(RUSTC=str(tmp_path / "rustc"), RUSTC_WRAPPER="", RUSTC_WORKSPACE_WRAPPER="", FORCED="mine")
    assert "rustc FORCED=tree: -vV" in forced and "wrapper" not in forced
    assert metadata("--no-deps") == ""


def test_the_check_command_is_one_lint_clippy_takes_and_the_readme_points_here() -> None:
    """The override command every editor block gives parses as `lint clippy` arguments (each
    option one it has), and the README's line for the editor names this guide."""
    import typer.main

    from roteiro_py.cli.app import app

    clippy = typer.main.get_command(app).commands["lint"].commands["clippy"]  # type: ignore[attr-defined]
    options = {name for param in clippy.params for name in param.opts}
    text = GUIDE.read_text()
    (vscode,) = blocks(text, "jsonc")
    settings = json.loads("\n".join(line for line in vscode.splitlines() if not line.strip().startswith("//")))
    (neovim,) = blocks(text, "lua")
    (helix,) = blocks(text, "toml")
    commands = [settings["rust-analyzer.check.overrideCommand"],
                lua_table(neovim, "settings")["rust-analyzer"]["check"]["overrideCommand"],
                tomllib.loads(helix)["language-server"]["rust-analyzer"]["config"]["check"]["overrideCommand"]]
    assert all(command == commands[0] for command in commands)
    program, verb, analyzer, *flags = commands[0]
    assert (program, verb, analyzer) == ("pylint-sandbox", "lint", "clippy")
    assert "--message-format" in flags and {f for f in flags if f.startswith("-")} <= options
    readme = (ROOT / "README.md").read_text()
    assert re.search(r"lint clippy --message-format json +# .*docs/EDITORS\.md", readme)
