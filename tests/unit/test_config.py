"""Configuration: precedence with sources, refusals that name file/key/line, writes that keep keys."""

from __future__ import annotations

import os
import stat
import tomllib
from pathlib import Path

import pytest

from roteiro_py import config
from roteiro_py.errors import ConfigError, TagNotDigest

HEX = "e" * 64


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def test_the_key_names_agree_with_the_models() -> None:
    """config.FIELDS names the keys without importing the models (config_model.py)."""
    assert {section: tuple(model.model_fields)
                             for section, model in config.SECTIONS.items()} == config.FIELDS


def test_precedence_flag_env_repo_user_default(tmp_path: Path, roteiro_home: Path) -> None:
    user = write(roteiro_home / "config.toml",
                 '[lint]\nformat = "json"\nfeatures = ["u"]\nall_targets = true\n'
                 '[vm]\ncpus = 3\nmemory_mib = 1111\ntimeout_s = 77\n')
    repo = write(tmp_path / "repo" / "roteiro.toml", '[lint]\nformat = "sarif"\nfeatures = ["r"]\n')
    crate = tmp_path / "repo" / "crates" / "a"
    crate.mkdir(parents=True)
    env = {"ROTEIRO_VM_MEMORY_MIB": "3333", "ROTEIRO_VM_ACCEL": "tcg", "ROTEIRO_LINT_FORMAT": "github"}
    resolved = config.resolve(crate, flags={"vm.accel": ("kvm", "--accel"),
                                            "vm.cpus": (None, "--cpus")}, environ=env)
    vm, lint = resolved.settings.vm, resolved.settings.lint
    assert (vm.accel, vm.memory_mib, vm.cpus, vm.timeout_s, vm.output_limit_mib) == (
        "kvm", 3333, 3, 77, 64)
    assert (lint.format, lint.features, lint.all_targets) == ("github", ["r"], True)
    assert resolved.source_of("vm.accel").label == "flag --accel"
    assert resolved.source_of("vm.memory_mib").label == "env ROTEIRO_VM_MEMORY_MIB"
    assert resolved.source_of("lint.features").label == str(repo)
    assert resolved.source_of("lint.all_targets").label == str(user)
    assert resolved.source_of("vm.output_limit_mib").label == "default"
    assert resolved.repo_config == repo


@pytest.mark.parametrize("key", sorted(set(config.known_keys()) - config.REPO_KEYS))
def test_a_repository_cannot_weaken_its_own_confinement(tmp_path: Path, key: str) -> None:
    """The tree under review supplies roteiro.toml: it may say what to lint, never how it is confined."""
    section, name = key.split(".")
    path = write(tmp_path / "roteiro.toml", f"[{section}]\n{name} = {VALUES[key]}\n")
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert str(path) in text and f"`{key}`" in text and "branch under review" in text
    write(tmp_path / "roteiro.toml", "[lint]\nall_targets = true\n")  # control: an allowed key
    assert config.resolve(tmp_path).settings.lint.all_targets is True


def test_the_users_own_format_outranks_the_repositorys(tmp_path: Path, roteiro_home: Path) -> None:
    """A CI whose config says sarif (and uploads --output) got `github` workflow commands
    from a branch's roteiro.toml. The repository's format is only a suggestion."""
    repo = write(tmp_path / "repo" / "roteiro.toml", '[lint]\nformat = "github"\nfeatures = ["r"]\n')
    # control: with no choice of the user's, the repository's format is used
    resolved = config.resolve(repo.parent, environ={})
    assert resolved.settings.lint.format == "github"
    assert resolved.source_of("lint.format").label == str(repo)

    user = write(roteiro_home / "config.toml", '[lint]\nformat = "sarif"\nfeatures = ["u"]\n')
    resolved = config.resolve(repo.parent, environ={})
    assert resolved.settings.lint.format == "sarif"
    assert resolved.source_of("lint.format").label == str(user)
    assert resolved.settings.lint.features == ["r"]  # control: what to lint stays the repo's
    assert config.resolve(repo.parent, environ={"ROTEIRO_LINT_FORMAT": "json"}).settings.lint.format == "json"
    assert config.resolve(repo.parent, environ={}, flags={"lint.format": ("human", "--format")}
                          ).settings.lint.format == "human"
    assert config.USER_FIRST_KEYS <= config.REPO_KEYS


VALUES = {"lint.backend": '"qemu"', "lint.fail_on": '"never"', "lint.keep_cache": "true", "lint.quiet": "true",
          "lint.color": '"always"',
          "lint.dep_cache": "false", "lint.dep_cache_max_mib": "16777216",
          "vm.accel": '"tcg"', "vm.cpus": "64", "vm.memory_mib": "1048576", "vm.timeout_s": "99999",
          "vm.output_limit_mib": "4096", "vm.scratch_mib": "4194304", "vm.kernel": '"tree/vmlinux"',
          "vm.initrd": '"/root/.cargo/credentials.toml"', "vm.stage_max_mib": "1048576",
          "vm.stage_max_files": "100000000", "vm.stage_max_depth": "400", "vm.template": "false",
          "vm.debian_archive": '"/srv/mirror-7/debian"', "vm.debian_suite": '"trixie"',
          "vm.debian_security_archive": '""',
          "lint.allowed_images": '["evil.example/"]', "lint.levels": '["-A", "warnings"]'}


def test_syntax_error_names_file_line_and_column(tmp_path: Path) -> None:
    bad = write(tmp_path / "roteiro.toml", '[lint]\nfail_on = "error"\nimage = "unterminated\n')
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert str(bad) in text and "line 3" in text and "column" in text


@pytest.mark.parametrize(
    ("body", "key", "fragment"),
    [
        ("[lint]\nimgae = 'x'\n", "lint.imgae", "unknown key"),
        ("[lnt]\nimage = 'x'\n", "lnt", "unknown section"),
        ("[vm]\ncpus = 'many'\n", "vm.cpus", "valid integer"),
        ("[vm]\naccel = 'xen'\n", "vm.accel", "'auto', 'kvm' or 'tcg'"),
        ("lint = 3\n", "lint", "must be a table"),
    ],
)
def test_bad_values_name_file_and_key(tmp_path: Path, roteiro_home: Path, body: str, key: str,
                                      fragment: str) -> None:
    path = write(roteiro_home / "config.toml", body)
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert str(path) in text and f"`{key}`" in text and fragment in text


def test_bad_environment_value_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path, environ={"ROTEIRO_VM_CPUS": "0"})
    assert "env ROTEIRO_VM_CPUS" in caught.value.guidance().render_text()


def test_set_keeps_other_keys_and_validates(tmp_path: Path) -> None:
    path = write(tmp_path / "roteiro.toml", '[lint]\nfail_on = "error"\n[vm]\ncpus = 4\n')
    config.set_value(path, "vm.memory_mib", "4096")
    config.set_value(path, "lint.features", '["a", "b"]')
    config.set_value(path, "lint.image", f"localhost:5000/c@sha256:{HEX}")
    data = tomllib.loads(path.read_text())
    assert data == {"lint": {"fail_on": "error", "features": ["a", "b"],
                             "image": f"localhost:5000/c@sha256:{HEX}"},
                    "vm": {"cpus": 4, "memory_mib": 4096}}
    before = path.read_text()
    with pytest.raises(ConfigError):
        config.set_value(path, "vm.cpus", "0")
    with pytest.raises(TagNotDigest):
        config.set_value(path, "lint.image", "rust:1.95")
    with pytest.raises(ConfigError):
        config.set_value(path, "vm.nope", "1")
    assert path.read_text() == before
    assert config.unset_value(path, "vm.cpus") is True
    assert config.unset_value(path, "vm.cpus") is False
    assert tomllib.loads(path.read_text())["vm"] == {"memory_mib": 4096}


def test_repo_file_is_found_walking_up_and_created_at_git_root(tmp_path: Path) -> None:
    (tmp_path / ".git").mkdir()
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    assert config.find_repo_config(deep) is None
    assert config.config_file_for("repo", deep) == tmp_path / "roteiro.toml"
    write(tmp_path / "a" / "roteiro.toml", "")
    assert config.find_repo_config(deep) == tmp_path / "a" / "roteiro.toml"


def test_features_accept_a_comma_list_from_flags_and_env(tmp_path: Path) -> None:
    resolved = config.resolve(tmp_path, flags={"lint.features": ("x, y z", "--features")})
    assert resolved.settings.lint.features == ["x", "y", "z"]


def test_config_set_does_not_follow_a_planted_temporary_link(tmp_path: Path) -> None:
    """The temporary was `.<name>.<pid>.tmp`, written through whatever was there: a branch
    shipping one link per plausible pid beside its roteiro.toml had `config set --repo`
    overwrite the link's target."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / ".git").mkdir()
    (repo / "roteiro.toml").write_text('[lint]\nformat = "human"\n')
    (repo / f".roteiro.toml.{os.getpid()}.tmp").symlink_to(victim)
    target = config.config_file_for("repo", repo)
    config.set_value(target, "lint.all_targets", "true")
    assert victim.read_text() == "precious\n"
    assert "all_targets = true" in target.read_text()  # control: the value was written


def test_config_set_keeps_the_file_mode(tmp_path: Path) -> None:
    file = tmp_path / "config.toml"
    file.write_text('[lint]\nformat = "human"\n')
    os.chmod(file, 0o600)
    config.set_value(file, "lint.all_targets", "true")
    assert stat.S_IMODE(file.stat().st_mode) == 0o600
    assert "all_targets = true" in file.read_text()
