"""`lint clippy --message-format json`: cargo's own stream from the VM, record for record
what host `cargo clippy --message-format=json` prints on the same tree (issue 24).

Each workspace is copied once; the VM lints that copy and host cargo (1.95.0, the image's
toolchain, with a cargo home and a target directory of its own under tmp_path) runs on
the same copy, so the paths of both name the same files. The workspaces are the demo and
the example trees under tests/data that hold no hidden file and need no registry: a
two-crate workspace with clippy warnings, a crate with a build script, one whose binary
does not build (stdout must parse on a failed build too), and a library with multi-part
suggestions."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py.clippy.command import ClippyOptions, clippy_argv
from roteiro_py.vocabulary import GUEST_SCRATCH
from tests.integration.lint.lint_support import HOME, ROOT, USES_FMT, Image, LocalRegistry, cli, crate_tree

#: Each workspace, and whether its build succeeds (all exit 1: warnings at the default
#: --fail-on, or a failed build, and stdout parses all the same).
WORKSPACES = {
    "demo-workspace": (ROOT / "examples" / "demo-workspace", True),
    "cargo-fidelity": (ROOT / "tests" / "data" / "cargo-fidelity", True),
    "cargo-labels": (ROOT / "tests" / "data" / "cargo-labels", False),  # E0308
    "cargo-layout": (ROOT / "tests" / "data" / "cargo-layout", True),
}


def host_stream(tree: Path, tmp: Path, *rendering: str) -> list[dict[str, object]]:
    """Host cargo's records on `tree`, with the argv the guest runs."""
    (tmp / "host-cargo-home").mkdir(parents=True, exist_ok=True)
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
            assert "out_dir" not in record  # absent, not null: cargo_metadata fails on null
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


def test_a_saved_file_lints_the_package_holding_it(demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    """rust-analyzer's `$saved_file` form: the path of the saved file, run in the workspace
    root, lints the member holding it, as `cargo clippy` run in that member's directory."""
    saved = demo / "crates" / "demo-core" / "src" / "lib.rs"
    done = cli("lint", "clippy", "--message-format", "json", "--image", clippy_image.reference,
               "--fail-on", "never", str(saved), cwd=demo)
    assert done.returncode == 0, done.stderr
    ours = [json.loads(line) for line in done.stdout.splitlines()]
    theirs = host_stream(demo / "crates" / "demo-core", tmp_path)
    assert by_reason(ours, "compiler-message") == by_reason(theirs, "compiler-message")
    packages = {record["package_id"] for record in ours if "package_id" in record}
    assert packages and all("demo-core" in str(p) for p in packages)  # control below: demo-app too
    assert any("demo-app" in str(r.get("package_id")) for r in host_stream(demo, tmp_path / "all"))


def test_short_prints_rustcs_short_form_alone_on_stdout(demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--message-format", "short",
               "--fail-on", "never", "--format", f"json={tmp_path / 'report.json'}")
    assert done.returncode == 0, done.stderr
    short = [r["message"]["rendered"] for r in by_reason(host_stream(demo, tmp_path, "json-diagnostic-short"),
                                                         "compiler-message")]  # type: ignore[index]
    assert short and done.stdout == "".join(short)
    assert all(text.startswith("crates/") and text.count("\n") == 1 for text in short)  # rustc's short form
    report = json.loads((tmp_path / "report.json").read_text())  # the report went to its file
    assert len(report["findings"]) == len(short)


def test_a_dependencys_paths_name_the_vendored_view_on_the_host(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    tree = crate_tree(tmp_path / "uses-fmt", local_registry, ["loopfmt"], USES_FMT)
    assert cli("fetch-deps", str(tree), env=local_registry.env).returncode == 0
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--message-format", "json",
               env=local_registry.env)
    assert done.returncode == 1, done.stderr[-3000:]  # the needless return
    ours = [json.loads(line) for line in done.stdout.splitlines()]
    [dependency] = [r for r in by_reason(ours, "compiler-artifact") if "loopfmt" in str(r["package_id"])]
    manifest, target = dependency["manifest_path"], dependency["target"]
    assert isinstance(manifest, str) and isinstance(target, dict)
    assert Path(manifest).is_file() and Path(target["src_path"]).is_file()
    assert Path(manifest).is_relative_to(HOME / "cache" / "cargo-views")  # the view the guest read
    assert "/cargo-home" not in done.stdout and GUEST_SCRATCH not in done.stdout
    [finding] = by_reason(ours, "compiler-message")
    assert finding["message"]["spans"][0]["file_name"] == "src/lib.rs"  # type: ignore[index]
