"""A tree pinning another toolchain than the image's gets one note (lint/toolchain_pin.py).

Driven on real files: a tree's rust-toolchain.toml / rust-toolchain as rustup would find
it from the directory asked for, up to the repository root and never above it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py.image.rust_dist import ChannelSpec
from roteiro_py.lint.toolchain_pin import matches, pin_note, report_toolchain_pin
from roteiro_py.lint.tree import Tree
from roteiro_py.report.model import Toolchain

STABLE = Toolchain(clippy_version="0.1.95", clippy_date="2026-10-27", rustc_release="1.95.0",
                   host="x86_64-unknown-linux-gnu")
NIGHTLY = Toolchain(clippy_version="0.1.97", clippy_date="2026-10-31", rustc_release="1.97.0-nightly",
                    host="x86_64-unknown-linux-gnu")


def _tree(tmp_path: Path, pin: str | None, *, name: str = "rust-toolchain.toml",
          asked: str = ".") -> Tree:
    repo = tmp_path / "repo"
    (repo / "crates" / "a").mkdir(parents=True)
    if pin is not None:
        (repo / name).write_text(pin)
    return Tree(asked=repo / asked, workspace=repo, repo_root=repo)


def test_a_different_release_is_noted_with_the_command_that_builds_a_matching_image(tmp_path: Path) -> None:
    tree = _tree(tmp_path, '[toolchain]\nchannel = "1.94.0"\n', asked="crates/a")
    note = pin_note(tree, STABLE)
    assert note is not None
    assert note.startswith("note: rust-toolchain.toml pins 1.94.0; this lint used the image's rustc 1.95.0")
    assert note.endswith(f"pylint-sandbox image build --toolchain-file {tree.repo_root / 'rust-toolchain.toml'}")


@pytest.mark.parametrize(("pin", "toolchain"), [
    ('[toolchain]\nchannel = "1.95.0"\n', STABLE),
    ('[toolchain]\nchannel = "1.95"\ncomponents = ["clippy"]\n', STABLE),
    ('[toolchain]\nchannel = "stable"\n', STABLE),
    ('[toolchain]\nchannel = "nightly-2026-11-01"\n', NIGHTLY),
])
def test_the_same_toolchain_says_nothing(tmp_path: Path, pin: str, toolchain: Toolchain) -> None:
    assert pin_note(_tree(tmp_path, pin), toolchain) is None


def test_the_legacy_file_and_a_channel_are_read(tmp_path: Path) -> None:
    note = pin_note(_tree(tmp_path, "nightly\n", name="rust-toolchain"), STABLE)
    assert note is not None and "rust-toolchain pins nightly;" in note


def test_an_unreadable_pin_is_said_not_skipped(tmp_path: Path) -> None:
    note = pin_note(_tree(tmp_path, '[toolchain]\npath = "/opt/evil"\n'), STABLE)
    assert note is not None and note.startswith("note: rust-toolchain.toml could not be read (")
    assert "this lint used the image's rustc 1.95.0" in note


def test_a_pin_above_the_repository_is_not_the_trees(tmp_path: Path) -> None:
    (tmp_path / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.80.0"\n')
    tree = _tree(tmp_path, None, asked="crates/a")
    assert pin_note(tree, STABLE) is None
    # control: the same file inside the repository is found from the member's directory
    (tree.repo_root / "rust-toolchain.toml").write_text('[toolchain]\nchannel = "1.80.0"\n')
    assert pin_note(tree, STABLE) is not None


def test_versions_that_cannot_tell_say_so() -> None:
    assert matches(ChannelSpec("stable", "2026-01-01"), STABLE) is None
    assert matches(ChannelSpec("nightly", "2026-12-20"), NIGHTLY) is False
    assert matches(ChannelSpec("beta"), STABLE) is False
    assert matches(ChannelSpec("1.9"), STABLE) is False  # 1.95 is not 1.9.x


def test_the_note_reaches_stderr_once_and_escaped(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = _tree(tmp_path, '[toolchain]\nchannel = "1.94.0"\n')
    report_toolchain_pin(tree, STABLE)
    err = capsys.readouterr().err
    assert err.count("note:") == 1 and err.startswith("pylint-sandbox: note: rust-toolchain.toml pins")
    report_toolchain_pin(_tree(tmp_path / "b", '[toolchain]\nchannel = "1.95.0"\n'), STABLE)
    assert capsys.readouterr().err == ""


def test_a_clippy_date_that_is_no_date_cannot_tell_and_does_not_crash(tmp_path: Path) -> None:
    """The clippy date is the guest's (`cargo-clippy --version`, matched by shape only:
    \\d{4}-\\d{2}-\\d{2}); 2026-02-30 was a ValueError out of the lint, exit 4."""
    tree = _tree(tmp_path, '[toolchain]\nchannel = "nightly-2026-11-01"\n')
    for shape_only in ("2026-02-30", "2026-13-01", "0000-00-00"):
        forged = NIGHTLY.model_copy(update={"clippy_date": shape_only})
        assert matches(ChannelSpec("nightly", "2026-11-01"), forged) is None
        note = pin_note(tree, forged)
        assert note is not None and "cannot be told" in note
    assert pin_note(tree, NIGHTLY) is None  # control: a real date one day before matches
