"""`lint clippy --message-format json`: cargo's own stream from the VM, record for record
what host `cargo clippy --message-format=json` prints on the same tree (issue 24).

Each workspace is copied once; the VM lints that copy and host cargo (1.95.0, the image's
toolchain, with a cargo home and a target directory of its own under tmp_path) runs on
the same copy, so the paths of both name the same files. The workspaces are the demo and
the example trees under tests/data that hold no hidden file and need no registry: a
two-crate workspace with clippy warnings, a crate with a build script, and one whose
binary does not build (stdout must parse on a failed build too)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py.clippy.command import ClippyOptions, clippy_argv
from tests.integration.lint.lint_support import ROOT, Image, cli

#: Each workspace, and whether its build succeeds (all exit 1: warnings at the default
#: --fail-on, or a failed build, and stdout parses all the same).
WORKSPACES = {
    "demo-workspace": (ROOT / "examples" / "demo-workspace", True),
    "cargo-fidelity": (ROOT / "tests" / "data" / "cargo-fidelity", True),
    "cargo-labels": (ROOT / "tests" / "data" / "cargo-labels", False),  # E0308
}


def host_stream(tree: Path, tmp: Path, *rendering: str) -> list[dict[str, object]]:
    """Host cargo's records on `tree`, with the argv the guest runs."""
    (tmp / "host-cargo-home").mkdir(exist_ok=True)
    env = {key: value for key, value in os.environ.items() if not key.startswith("CARGO_")}
    env.update(CARGO_HOME=str(tmp / "host-cargo-home"), CARGO_TARGET_DIR=str(tmp / "host-target"))
    argv = clippy_argv(ClippyOptions(rendering=rendering[0] if rendering else None))
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=600, check=False)
    assert done.returncode in (0, 101), done.stderr[-2000:]
    return [json.loads(line) for line in done.stdout.splitlines() if line.strip()]


def by_reason(records: list[dict[str, object]], reason: str) -> list[dict[str, object]]:
    return [record for record in records if record["reason"] == reason]


def sandboxed(tree: Path, image: Image, message_format: str, *flags: str) -> tuple[int, list[dict[str, object]], str]:
    done = cli("lint", "clippy", str(tree), "--image", image.reference, "--message-format", message_format,
               *flags)
    # every line of stdout is one of cargo's records, whatever the exit code
    return done.returncode, [json.loads(line) for line in done.stdout.splitlines()], done.stderr


@pytest.mark.parametrize("name", sorted(WORKSPACES))
def test_compiler_messages_equal_host_cargos(name: str, clippy_image: Image, tmp_path: Path) -> None:
    source, builds = WORKSPACES[name]
    tree = shutil.copytree(source, tmp_path / name, ignore=shutil.ignore_patterns("target"))
    status, ours, stderr = sandboxed(tree, clippy_image, "json")
    assert status == 1, stderr
    theirs = host_stream(tree, tmp_path)

    messages = by_reason(ours, "compiler-message")
    assert messages, "no diagnostic: the comparison would prove nothing"
    assert messages == by_reason(theirs, "compiler-message")
    assert ours[-1] == theirs[-1] == {"reason": "build-finished", "success": builds}
    assert [r["reason"] for r in ours] == [r["reason"] for r in theirs]

    # the other records: every path a host path that exists, or absent as documented
    for record in by_reason(ours, "compiler-artifact") + by_reason(ours, "build-script-executed"):
        assert isinstance(record["package_id"], str) and str(tree) in record["package_id"]
        if record["reason"] == "compiler-artifact":
            target = record["target"]
            assert isinstance(target, dict)
            for path in (record["manifest_path"], target["src_path"]):
                assert isinstance(path, str) and Path(path).is_file() and Path(path).is_relative_to(tree)
            assert record["filenames"] == [] and record["executable"] is None  # the guest's scratch
        else:
            assert record["out_dir"] is None
    assert "\x1b" not in json.dumps(ours, ensure_ascii=False)
    if name == "cargo-fidelity":
        assert by_reason(ours, "build-script-executed")  # the build script's record is there


def test_rendered_ansi_keeps_rustcs_colours(demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    status, ours, stderr = sandboxed(demo, clippy_image, "json-diagnostic-rendered-ansi", "--fail-on", "never")
    assert status == 0, stderr
    messages = by_reason(ours, "compiler-message")
    assert messages == by_reason(host_stream(demo, tmp_path, "json-diagnostic-rendered-ansi"),
                                 "compiler-message")
    rendered = [m["message"]["rendered"] for m in messages]  # type: ignore[index]
    assert all("\x1b[" in text for text in rendered)  # control: the colours did arrive
