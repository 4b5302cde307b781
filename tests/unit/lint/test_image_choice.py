"""Which setting chose the image: stated in every report format, and policed by the
user's `lint.allowed_images` when the repository under review chose it (lint/preflight.py's
pinned_image, config.py's image_allowed)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from realcargo import make_report  # loaded by tests/unit/conftest.py

from roteiro_py import config, lint, vocabulary
from roteiro_py.errors import ConfigError, ImageNotAllowed, SandboxUnavailable
from roteiro_py.report.model import Provenance, Report
from roteiro_py.report.render import render
from roteiro_py.vm.api import Isolation

D = "sha256:" + "a" * 64
OURS = f"ghcr.io/myorg/clippy:1.95@{D}"
THEIRS = f"ghcr.io/myorg-evil/clippy:1.95@{D}"


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def repo(tmp_path: Path, image: str | None) -> Path:
    tree = tmp_path / "repo"
    write(tree / "Cargo.toml", '[package]\nname = "a"\nversion = "0.1.0"\n')
    write(tree / "Cargo.lock", "version = 4\n")
    (tree / ".git").mkdir()
    if image is not None:
        write(tree / "roteiro.toml", f'[lint]\nimage = "{image}"\n')
    return tree


class Backend:
    """Records that the hypervisor probe was reached (a fake only for ordering: the
    real probe is exercised by the integration tests)."""

    calls: list[str] = []

    def __init__(self, options: object) -> None:
        pass

    def isolation(self) -> Isolation:
        Backend.calls.append("probe")
        raise SandboxUnavailable("stopped here by the test", accel="tcg")


@pytest.fixture
def probe_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    Backend.calls = []
    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Backend})
    return Backend.calls


def test_a_repository_chosen_image_outside_the_allowed_list_is_refused_before_the_probe(
        tmp_path: Path, roteiro_home: Path, probe_calls: list[str]) -> None:
    user = write(roteiro_home / "config.toml", '[lint]\nallowed_images = ["ghcr.io/myorg/"]\n')
    tree = repo(tmp_path, THEIRS)
    with pytest.raises(ImageNotAllowed) as caught:
        lint.lint(lint.LintRequest(path=tree))
    assert probe_calls == []
    assert caught.value.exit_code == 3
    text = caught.value.guidance().render_text()
    for fragment in (THEIRS, str(tree / "roteiro.toml"), "lint.allowed_images", str(user),
                     "ghcr.io/myorg/", "--image"):
        assert fragment in text

    write(tree / "roteiro.toml", f'[lint]\nimage = "{OURS}"\n')  # control: an allowed one
    with pytest.raises(SandboxUnavailable):
        lint.lint(lint.LintRequest(path=tree))
    assert probe_calls == ["probe"]


@pytest.mark.parametrize("chooser", ["flag", "env", "user"])
def test_an_image_the_user_chose_is_not_policed(chooser: str, tmp_path: Path, roteiro_home: Path,
                                                probe_calls: list[str],
                                                monkeypatch: pytest.MonkeyPatch) -> None:
    tree = repo(tmp_path, OURS)  # the repository's choice, overridden by the user's
    user = '[lint]\nallowed_images = ["ghcr.io/myorg/"]\n'
    flags: dict[str, tuple[object, str]] = {}
    if chooser == "flag":
        flags["lint.image"] = (THEIRS, "--image")
    elif chooser == "env":
        monkeypatch.setenv("ROTEIRO_LINT_IMAGE", THEIRS)
    else:
        user += f'image = "{THEIRS}"\n'
        (tree / "roteiro.toml").unlink()
    write(roteiro_home / "config.toml", user)
    with pytest.raises(SandboxUnavailable):
        lint.lint(lint.LintRequest(path=tree, flags=flags))
    assert probe_calls == ["probe"]


def test_an_empty_list_allows_any_image(tmp_path: Path, probe_calls: list[str]) -> None:
    with pytest.raises(SandboxUnavailable):
        lint.lint(lint.LintRequest(path=repo(tmp_path, THEIRS)))
    assert probe_calls == ["probe"]


def test_a_repository_cannot_set_its_own_allowed_list(tmp_path: Path) -> None:
    tree = repo(tmp_path, None)
    write(tree / "roteiro.toml", '[lint]\nallowed_images = ["ghcr.io/myorg-evil/"]\n')
    with pytest.raises(ConfigError, match="allowed_images"):
        config.resolve(tree)


@pytest.mark.parametrize(("name", "allowed", "expected"), [
    ("ghcr.io/myorg/clippy", ["ghcr.io/myorg/"], True),
    ("ghcr.io/myorg/clippy", ["ghcr.io/myorg"], True),
    ("ghcr.io/myorg/clippy", ["ghcr.io/myorg/clippy"], True),
    ("ghcr.io/myorg/clippy", ["ghcr.io"], True),
    ("ghcr.io/myorg-evil/clippy", ["ghcr.io/myorg"], False),
    ("ghcr.io/myorg/clippy-evil", ["ghcr.io/myorg/clippy"], False),
    ("ghcr.io.evil/myorg/clippy", ["ghcr.io"], False),
    ("docker.io/library/rust", ["quay.io/", "docker.io/library/"], True),
])
def test_a_prefix_matches_whole_components(name: str, allowed: list[str], expected: bool) -> None:
    assert config.image_allowed(name, allowed) is expected


def test_the_list_comes_from_the_environment_split_and_bad_entries_are_refused(tmp_path: Path) -> None:
    resolved = config.resolve(tmp_path, environ={"ROTEIRO_LINT_ALLOWED_IMAGES": "ghcr.io/a/, quay.io/b"})
    assert resolved.settings.lint.allowed_images == ["ghcr.io/a/", "quay.io/b"]
    for bad in ("ghcr.io/a@sha256:00", "ghcr.io/A B", "ghcr.io//x"):
        with pytest.raises(ConfigError, match="allowed_images"):
            config.resolve(tmp_path, flags={"lint.allowed_images": ([bad], "--test")})
    too_many = [f"r.example/{i}" for i in range(vocabulary.MAX_ALLOWED_IMAGES + 1)]
    with pytest.raises(ConfigError, match=str(vocabulary.MAX_ALLOWED_IMAGES)):
        config.resolve(tmp_path, flags={"lint.allowed_images": (too_many, "--test")})


@pytest.mark.parametrize(("chooser", "label"), [
    ("flag", "flag --image"), ("env", "env ROTEIRO_LINT_IMAGE"), ("user", "~/"), ("repo", "roteiro.toml")])
def test_the_report_names_what_chose_the_image(chooser: str, label: str, tmp_path: Path,
                                               roteiro_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("HOME", str(roteiro_home.parent))
    tree = repo(tmp_path, OURS if chooser == "repo" else None)
    flags: dict[str, tuple[object, str]] = {}
    if chooser == "flag":
        flags["lint.image"] = (OURS, "--image")
    elif chooser == "env":
        monkeypatch.setenv("ROTEIRO_LINT_IMAGE", OURS)
    elif chooser == "user":
        write(roteiro_home / "config.toml", f'[lint]\nimage = "{OURS}"\n')
    resolved = config.resolve(tree, flags=flags)
    chosen_in = lint.image_chosen_in(resolved, lint.locate(tree))
    assert resolved.source_of("lint.image").kind == chooser
    if chooser == "user":
        assert chosen_in == f"~/{roteiro_home.name}/config.toml"
    else:
        assert chosen_in == label
    report = with_provenance(chooser, chosen_in)
    human = render(report, "human", width=200, color=False)
    provenance_line = human.strip().splitlines()[-1]
    who = {"user": "your config ", "repo": "the repository's "}.get(chooser, "")
    assert f"(chosen by {who}{chosen_in})" in provenance_line
    as_json = json.loads(render(report, "json"))["provenance"]
    assert (as_json["image_chosen_by"], as_json["image_chosen_in"]) == (chooser, chosen_in)
    sarif = json.loads(render(report, "sarif"))["runs"][0]["properties"]["image"]
    assert (sarif["image_chosen_by"], sarif["image_chosen_in"]) == (chooser, chosen_in)
    assert str(tmp_path) not in json.dumps(sarif)  # no host path in what is uploaded


def with_provenance(chooser: str, chosen_in: str) -> Report:
    report = make_report([])
    provenance = Provenance(image_reference=OURS, image_digest=D, image_chosen_by=chooser,  # type: ignore[arg-type]
                            image_chosen_in=chosen_in)
    return report.model_copy(update={"provenance": provenance})


def test_a_report_without_the_chooser_still_loads_and_renders() -> None:
    """Reports written before the fields existed (schema 1) stay readable."""
    old = json.loads(make_report([]).model_dump_json())
    del old["provenance"]["image_chosen_by"], old["provenance"]["image_chosen_in"]
    report = Report.model_validate(old)
    assert "chosen by" not in render(report, "human", width=200, color=False)
