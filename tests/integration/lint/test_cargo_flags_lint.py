"""cargo's vocabulary through a real lint: a member path lints that member alone, lint
levels after `--` raise its findings to errors, and the report's command says so."""

from __future__ import annotations

import json
from pathlib import Path

from tests.integration.lint.lint_support import Image, cli


def test_a_member_path_with_levels_lints_that_member_at_deny(demo: Path, clippy_image: Image) -> None:
    done = cli("lint", "clippy", str(demo / "crates" / "demo-core"), "--image", clippy_image.reference,
               "--format", "json", "--", "-D", "warnings")
    assert done.returncode == 1, done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["findings"], report
    assert {f["path"].split("/")[1] for f in report["findings"]} == {"demo-core"}
    assert {f["level"] for f in report["findings"]} == {"error"}
    assert report["command"][-5:] == ["--package", "demo-core", "--", "-D", "warnings"]
    # control: the workspace root lints both members, at their own levels
    whole = json.loads(cli("lint", "clippy", str(demo), "--image", clippy_image.reference,
                           "--format", "json").stdout)
    assert {f["path"].split("/")[1] for f in whole["findings"]} == {"demo-core", "demo-app"}
    assert "warning" in {f["level"] for f in whole["findings"]}


LIB = ("pub fn three(a: u8, b: u8, c: u8) -> u8 {\n    a + b + c\n}\n\n"
       "pub fn answer() -> u8 {\n    return 42;\n}\n")


def test_clippy_toml_and_the_lints_table_are_obeyed(tmp_path: Path, clippy_image: Image) -> None:
    tree = tmp_path / "configured"
    (tree / "src").mkdir(parents=True)
    manifest = '[package]\nname = "configured"\nversion = "0.1.0"\nedition = "2021"\n'
    (tree / "Cargo.toml").write_text(manifest)
    (tree / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "configured"\nversion = "0.1.0"\n')
    (tree / "src" / "lib.rs").write_text(LIB)

    def codes() -> set[str]:
        done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json")
        assert done.returncode in (0, 1), done.stderr[-3000:]
        return {f["code"] for f in json.loads(done.stdout)["findings"]}

    # control: clippy's defaults
    assert codes() == {"clippy::needless_return"}
    (tree / "clippy.toml").write_text("too-many-arguments-threshold = 2\n")
    (tree / "Cargo.toml").write_text(manifest + '[lints.clippy]\nneedless_return = "allow"\n')
    assert codes() == {"clippy::too_many_arguments"}


def test_no_deps_reaches_the_guest_and_a_selection_cargo_refuses_is_exit_2(
        demo: Path, clippy_image: Image) -> None:
    """`--no-deps -p demo-app` lints demo-app alone (demo-core, which it depends on, is
    only checked: the control above shows demo-core's findings without it); a `-p` glob
    matching nothing is cargo's to refuse in the guest, and that is a usage error (2)."""
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "json",
               "-p", "demo-app", "--no-deps")
    assert done.returncode in (0, 1), done.stderr[-3000:]
    report = json.loads(done.stdout)
    assert report["command"][-3:] == ["--package", "demo-app", "--no-deps"]
    assert "demo-core" not in {f["path"].split("/")[1] for f in report["findings"]}
    refused = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "-p", "demo-z*")
    assert refused.returncode == 2, refused.stderr[-3000:]
    assert "package pattern(s) `demo-z*` not found in workspace" in refused.stderr
