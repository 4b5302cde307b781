"""What rust-analyzer runs on the host when it opens a tree, with and without the settings of
docs/EDITORS.md: the evidence behind that guide's "checked over LSP" paragraph.

rust-analyzer is started on a tree of our own and driven over LSP (initialize with the
guide's settings, open a file, save it, format it). Every program the tree could choose is
a logging script: its `.cargo/config.toml` names a `build.rustc-wrapper`, its
`rust-analyzer.toml` sets `check.overrideCommand` and `rustfmt.overrideCommand`, and in a
second tree a `rust-project.json` names a `sysroot` whose `bin/rustc` logs. The check
command the user configures is a logging script too. Printed: how many times each ran.

- untouched: the server's environment as inherited;
- guide: the environment docs/EDITORS.md sets (RUSTUP_TOOLCHAIN, RUSTC, empty wrappers,
  CARGO_NET_OFFLINE);
- rust-project.json, guide environment, without and with `linkedProjects = ["Cargo.toml"]`.

With `--lint`, also the guide's real check command on a copy of examples/demo-workspace
(`pylint-sandbox lint clippy --message-format json`, a VM run): the diagnostics rust-analyzer
publishes, by file.

Not a test: it needs a rust-analyzer binary (`--rust-analyzer`, default the rustup
component of --toolchain), which the suite does not provision. Reported, never asserted.
Mind where it comes from: `image build --toolchain` packages the installed toolchain whole,
so adding the component to the toolchain the image is built from gave a new image digest
(e1b8186c without it, 2bd711cd with it, on 2026-12-02) and with it a new root filesystem,
template and dependency cache for every lint on the machine. Install it into another
toolchain, or download the binary, and pass --rust-analyzer.

    .venv/bin/python bench/editor_lsp.py [--toolchain 1.95.0] [--rust-analyzer PATH] [--lint [--accel tcg]]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
GUIDE_ENV = {"RUSTC": "rustc", "RUSTC_WRAPPER": "", "RUSTC_WORKSPACE_WRAPPER": "", "CARGO_NET_OFFLINE": "true"}
LOGGER = """#!/bin/sh
name=$1; shift
echo "$name" >> {log}
case $name in
  tree-wrapper) exec "$@" ;;
  tree-fmt) cat ;;
  *check) echo '{{"reason":"build-finished","success":true}}' ;;
esac
"""


class Server:
    """rust-analyzer over stdio: requests of the server's own are answered with null."""

    def __init__(self, binary: str, cwd: Path, env: dict[str, str]) -> None:
        self.proc = subprocess.Popen([binary], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, cwd=cwd, env=env)
        self.messages: list[dict[str, Any]] = []
        self.lock = threading.Lock()
        self.ids = 0
        threading.Thread(target=self._read, daemon=True).start()

    def send(self, method: str, params: Any, request: bool = False) -> None:
        message: dict[str, Any] = {"jsonrpc": "2.0", "method": method, "params": params}
        if request:
            self.ids += 1
            message["id"] = self.ids
        self._write(message)

    def _write(self, message: dict[str, Any]) -> None:
        body = json.dumps(message).encode()
        with self.lock:
            assert self.proc.stdin is not None
            self.proc.stdin.write(b"Content-Length: %d\r\n\r\n" % len(body) + body)
            self.proc.stdin.flush()

    def _read(self) -> None:
        assert self.proc.stdout is not None
        while True:
            header = b""
            while not header.endswith(b"\r\n\r\n"):
                byte = self.proc.stdout.read(1)
                if not byte:
                    return
                header += byte
            length = next(int(line.split(b":")[1]) for line in header.split(b"\r\n")
                          if line.lower().startswith(b"content-length"))
            message = json.loads(self.proc.stdout.read(length))
            self.messages.append(message)
            if "id" in message and "method" in message:
                self._write({"jsonrpc": "2.0", "id": message["id"], "result": None})

    def diagnostics(self) -> list[tuple[str, str]]:
        return [(m["params"]["uri"], d.get("code") or "") for m in self.messages
                if m.get("method") == "textDocument/publishDiagnostics" for d in m["params"]["diagnostics"]
                if d.get("source") == "clippy"]

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def session(binary: str, tree: Path, env: dict[str, str], settings: dict[str, Any], wait: float,
            until_clippy: bool = False) -> Server:
    """Open the tree, open and save its first lib.rs, wait, format it."""
    server = Server(binary, tree, env)
    uri = tree.as_uri()
    server.send("initialize", {"processId": os.getpid(), "rootUri": uri,
                               "workspaceFolders": [{"uri": uri, "name": tree.name}],
                               "capabilities": {}, "initializationOptions": settings}, request=True)
    time.sleep(2)
    server.send("initialized", {})
    source = sorted(tree.glob("**/src/lib.rs"))[0]
    document = {"uri": source.as_uri(), "languageId": "rust", "version": 1, "text": source.read_text()}
    server.send("textDocument/didOpen", {"textDocument": document})
    time.sleep(15)
    server.send("textDocument/didSave", {"textDocument": {"uri": source.as_uri()}})
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline and not (until_clippy and server.diagnostics()):
        time.sleep(1)
    server.send("textDocument/formatting", {"textDocument": {"uri": source.as_uri()},
                                            "options": {"tabSize": 4, "insertSpaces": True}}, request=True)
    time.sleep(5)
    server.stop()
    return server


def guide_settings(check: list[str], linked: bool = True) -> dict[str, Any]:
    settings: dict[str, Any] = {"check": {"overrideCommand": check}, "checkOnSave": True,
                                "cargo": {"buildScripts": {"enable": False}}, "procMacro": {"enable": False}}
    if linked:
        settings["linkedProjects"] = ["Cargo.toml"]
    return settings


def hostile_tree(base: Path, log: Path, project_json: bool) -> tuple[Path, Path]:
    """A one-crate tree whose every tree-chosen program logs; and the user's check script."""
    logger = base / "log.sh"
    logger.write_text(LOGGER.format(log=log))
    logger.chmod(0o755)
    tree = base / ("json-tree" if project_json else "tree")
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "t"\nversion = "0.1.0"\nedition = "2021"\n')
    (tree / "src" / "lib.rs").write_text("pub fn f(x: i32) -> i32 {\n    return x * 2;\n}\n")
    if project_json:
        rustc = tree / "sys" / "bin" / "rustc"
        rustc.parent.mkdir(parents=True)
        real = shutil.which("rustc") or "rustc"
        rustc.write_text(f'#!/bin/sh\necho tree-sysroot-rustc >> {log}\nexec {real} "$@"\n')
        rustc.chmod(0o755)
        (tree / "rust-project.json").write_text(json.dumps(
            {"sysroot": "sys", "crates": [{"root_module": "src/lib.rs", "edition": "2021", "deps": []}]}))
    else:
        wrapper = base / "tree-wrapper"
        wrapper.write_text(f'#!/bin/sh\nexec {logger} tree-wrapper "$@"\n')
        wrapper.chmod(0o755)
        (tree / ".cargo").mkdir()
        (tree / ".cargo" / "config.toml").write_text(f'[build]\nrustc-wrapper = "{wrapper}"\n')
        (tree / "rust-analyzer.toml").write_text(
            f'[check]\noverrideCommand = ["{logger}", "tree-check"]\n'
            f'[rustfmt]\noverrideCommand = ["{logger}", "tree-fmt"]\n')
    return tree, logger


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--toolchain", default="1.95.0")
    parser.add_argument("--rust-analyzer", default=None)
    parser.add_argument("--lint", action="store_true", help="also the real check command (a VM run)")
    parser.add_argument("--accel", default="tcg")
    args = parser.parse_args()
    binary = args.rust_analyzer or subprocess.run(
        ["rustup", "which", "--toolchain", args.toolchain, "rust-analyzer"],
        capture_output=True, text=True, check=True).stdout.strip()
    version = subprocess.run([binary, "--version"], capture_output=True, text=True, check=True).stdout.strip()
    base_env = {k: v for k, v in os.environ.items() if not k.startswith(("CARGO_", "RUSTC"))}
    base_env["RUSTUP_TOOLCHAIN"] = args.toolchain
    print(f"{version}; every count is how many times that program ran")
    with tempfile.TemporaryDirectory(prefix="bench-editor-lsp-") as work:
        base, log = Path(work), Path(work) / "log"
        tree, logger = hostile_tree(base, log, project_json=False)
        json_tree, _ = hostile_tree(base, log, project_json=True)
        check = [str(logger), "user-check"]
        runs = [("untouched environment", tree, base_env, guide_settings(check)),
                ("the guide's environment", tree, base_env | GUIDE_ENV, guide_settings(check)),
                ("rust-project.json, guide's environment, no linkedProjects", json_tree,
                 base_env | GUIDE_ENV, guide_settings(check, linked=False)),
                ("rust-project.json, guide's environment and linkedProjects", json_tree,
                 base_env | GUIDE_ENV, guide_settings(check))]
        for name, where, env, settings in runs:
            log.write_text("")
            session(binary, where, env, settings, wait=15)
            counts = Counter(log.read_text().split())
            print(f"{name}: " + ", ".join(f"{program} {counts[program]}" for program in
                                          ("tree-wrapper", "tree-sysroot-rustc", "tree-check", "user-check",
                                           "tree-fmt")))
        if args.lint:
            demo = shutil.copytree(ROOT / "examples" / "demo-workspace", base / "demo",
                                   ignore=shutil.ignore_patterns("target"))
            reference = subprocess.run([EXE, "image", "build", "--no-set-image"], capture_output=True,
                                       text=True, check=True).stdout.split()[-1]
            command = [EXE, "lint", "clippy", "--message-format", "json", "--image", reference,
                       "--accel", args.accel]
            server = session(binary, demo, base_env | GUIDE_ENV, guide_settings(command), wait=600,
                             until_clippy=True)
            found = Counter((uri.split("/demo/", 1)[-1], code) for uri, code in server.diagnostics())
            print("lint clippy --message-format json on a save: " + (", ".join(
                f"{path} {code} x{n}" for (path, code), n in sorted(found.items())) or "no clippy diagnostic"))


if __name__ == "__main__":
    main()
