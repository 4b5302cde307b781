"""A tree's rust-toolchain.toml read as data (roteiro_py/image/toolchain_file.py): what rustup
documents is understood, everything else is refused naming the file and the key."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.image import toolchain_file
from roteiro_py.image.rust_dist import ChannelSpec


def write(tmp_path: Path, text: str, name: str = "rust-toolchain.toml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_what_rustup_documents_is_read(tmp_path: Path) -> None:
    path = write(tmp_path, '[toolchain]\nchannel = "nightly-2026-11-01"\ncomponents = ["rustfmt", "clippy", '
                           '"rustfmt"]\ntargets = ["aarch64-unknown-linux-gnu"]\nprofile = "minimal"\n')
    assert toolchain_file.read(path) == toolchain_file.ToolchainFile(
        path, ChannelSpec("nightly", "2026-11-01"), ("rustfmt", "clippy"), ("aarch64-unknown-linux-gnu",), "minimal")
    assert toolchain_file.read(write(tmp_path, '[toolchain]\nchannel = "1.95.0"\n')).spec == ChannelSpec("1.95.0")


def test_the_legacy_one_line_file_is_a_channel(tmp_path: Path) -> None:
    path = write(tmp_path, "1.95.0\n", "rust-toolchain")
    assert toolchain_file.read(path) == toolchain_file.ToolchainFile(path, ChannelSpec("1.95.0"))
    # the legacy name may hold the TOML form too, as rustup reads it
    toml = write(tmp_path, '[toolchain]\nchannel = "stable"\n', "rust-toolchain")
    assert toolchain_file.read(toml).spec == ChannelSpec("stable")
    with pytest.raises(errors.TreeFileRefused, match="exactly one line"):
        toolchain_file.read(write(tmp_path, "1.95.0\nnightly\n", "rust-toolchain"))


def test_the_toml_file_wins_over_the_legacy_one(tmp_path: Path) -> None:
    assert toolchain_file.find(tmp_path) is None
    write(tmp_path, "1.94.0\n", "rust-toolchain")
    assert toolchain_file.find(tmp_path) == tmp_path / "rust-toolchain"
    write(tmp_path, '[toolchain]\nchannel = "1.95.0"\n')
    assert toolchain_file.find(tmp_path) == tmp_path / "rust-toolchain.toml"


@pytest.mark.parametrize(("text", "why"), [
    ('[toolchain]\npath = "/opt/evil-toolchain"\n', "[toolchain] path names a toolchain on the host"),
    ('[toolchain]\nchannel = "stable"\npath = "/opt/x"\n', "[toolchain] path"),
    ('[toolchain]\nchannel = "stable"\nextra = 1\n', "[toolchain] 'extra' is not understood"),
    ('[toolchain]\nchannel = "stable"\n[other]\n', "the top-level key 'other' is not understood"),
    ('channel = "stable"\n', "the top-level key 'channel'"),
    ("[toolchain]\n", "[toolchain] has no channel"),
    ('[toolchain]\nchannel = "' + "1" * 65 + '"\n', "[toolchain] channel is longer than 64 characters"),
    ('[toolchain]\nchannel = "stable-x86_64-unknown-linux-gnu"\n', "its channel 'stable-x86_64-unknown-linux-gnu'"),
    ("[toolchain]\nchannel = 1.95\n", "[toolchain] channel is not a string"),
    ('[toolchain]\nchannel = "stable"\ncomponents = "clippy"\n', "[toolchain] components is not a list"),
    ('[toolchain]\nchannel = "stable"\ntargets = ["../../x"]\n', "[toolchain] targets holds '../../x'"),
    ('[toolchain]\nchannel = "stable"\ntargets = [' + ", ".join(['"t"'] * 65) + "]\n",
     "[toolchain] targets lists more than 64 names"),
    ('[toolchain]\nchannel = "stable"\nprofile = "everything"\n', "[toolchain] profile 'everything' is not one of"),
    ("[toolchain\n", "not valid TOML"),
])
def test_what_is_not_understood_is_refused_naming_the_file_and_the_key(tmp_path: Path, text: str, why: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(errors.TreeFileRefused) as refused:
        toolchain_file.read(path)
    message = str(refused.value)
    assert str(path) in message
    assert why in message
    assert refused.value.exit_code == errors.EXIT_REFUSED


def test_the_file_is_read_through_the_bounded_reader(tmp_path: Path) -> None:
    target = write(tmp_path, '[toolchain]\nchannel = "stable"\n', "elsewhere.toml")
    os.symlink(target, tmp_path / "rust-toolchain.toml")
    with pytest.raises(errors.TreeFileRefused, match="symbolic link"):
        toolchain_file.read(tmp_path / "rust-toolchain.toml")
    assert toolchain_file.find(tmp_path) == tmp_path / "rust-toolchain.toml"  # found, then refused
    big = write(tmp_path, '[toolchain]\nchannel = "stable"\n' + "#" * toolchain_file.MAX_FILE_BYTES, "big.toml")
    with pytest.raises(errors.TreeFileRefused, match=f"larger than {toolchain_file.MAX_FILE_BYTES} bytes"):
        toolchain_file.read(big)
    os.mkfifo(tmp_path / "fifo")
    with pytest.raises(errors.TreeFileRefused, match="not a regular file"):
        toolchain_file.read(tmp_path / "fifo")


def test_more_targets_and_components_than_a_fetch_takes_is_the_files_refusal(tmp_path: Path) -> None:
    """Each list may hold MAX_LIST names, but a fetch takes channel.MAX_REQUESTED of both
    together: 40 targets and 40 components were read, then refused by fetch_toolchain as
    a usage error (exit 2) naming --from-dist, for what the tree's file holds. The file
    itself is refused now, naming it (exit 3)."""
    targets = ", ".join(f'"t{i}-unknown-linux-gnu"' for i in range(40))
    components = ", ".join(f'"c{i}"' for i in range(40))
    path = write(tmp_path, f'[toolchain]\nchannel = "1.95.0"\ntargets = [{targets}]\ncomponents = [{components}]\n')
    with pytest.raises(errors.TreeFileRefused, match="targets and components"):
        toolchain_file.read(path)
