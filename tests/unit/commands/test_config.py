"""`config show` shows every value it can, each refused one marked (issue 23): its own
hint ("`pylint-sandbox config show` lists them all") is given for the configuration a
lint refuses, and one bad key in a roteiro.toml made it fail whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py import paths
from roteiro_py.commands import config as config_command
from roteiro_py.errors import EXIT_OK, EXIT_USAGE

IMAGE = "localhost:5000/c@sha256:" + "a" * 64


def rows(out: str) -> dict[str, str]:
    """key -> the rest of its line, as `config show` prints it off a terminal."""
    return {line.split()[0]: line.split(None, 1)[1] for line in out.splitlines()
            if line and not line.startswith("#")}


def test_one_bad_key_is_marked_and_every_other_value_shown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths.user_config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.user_config_path().write_text('[vm]\ncpus = 3\nmemory_mib = "lots"\n')
    repo = tmp_path / "roteiro.toml"
    repo.write_text(f'[lint]\nimage = "{IMAGE}"\nall_targets = true\nnope = 1\n[vm]\naccel = "tcg"\n')
    assert config_command.show(tmp_path) == EXIT_USAGE
    out, err = capsys.readouterr()
    shown = rows(out)
    # every other value, from where it came
    assert shown["vm.cpus"] == f"3  ({paths.user_config_path()})"
    assert shown["lint.image"] == f"{IMAGE}  ({repo})"
    assert shown["lint.all_targets"] == f"true  ({repo})"
    assert shown["lint.fail_on"] == "warning  (default)"
    # the refused ones: what applies without them, marked; the reasons on stderr, as a lint says them
    assert shown["vm.accel"] == "auto  (default; REFUSED, see below)"
    assert shown["vm.memory_mib"] == "2048  (default; REFUSED, see below)"
    assert f"Invalid configuration: key `vm.accel` in {repo}: not taken from a repository's" in err
    assert f"key `vm.memory_mib` in {paths.user_config_path()}" in err
    assert f"key `lint.nope` in {repo}: unknown key" in err
    assert len(shown) == len(config_command.config.known_keys())
    # control: without the bad keys, the same files show cleanly and exit 0
    paths.user_config_path().write_text("[vm]\ncpus = 3\n")
    repo.write_text(f'[lint]\nimage = "{IMAGE}"\nall_targets = true\n')
    assert config_command.show(tmp_path) == EXIT_OK
    out, err = capsys.readouterr()
    assert err == "" and "REFUSED" not in out and rows(out)["vm.cpus"] == f"3  ({paths.user_config_path()})"


def test_a_file_that_cannot_be_read_leaves_the_others_shown(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths.user_config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.user_config_path().write_text("[vm]\ncpus = 3\n")
    (tmp_path / "roteiro.toml").write_text("[lint\nimage = 1\n")
    assert config_command.show(tmp_path) == EXIT_USAGE
    out, err = capsys.readouterr()
    assert rows(out)["vm.cpus"] == f"3  ({paths.user_config_path()})"
    assert "TOML syntax error" in err and "line 1" in err and "REFUSED" not in out
