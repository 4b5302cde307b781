"""Every pointer in a message works from an installed wheel (issue 14): what a message
points at is package data, printed by `pylint-sandbox docs` and `dockerfile`, the same
bytes as the repository's file, and the build command it prints is complete."""

from __future__ import annotations

import re
import shlex
import subprocess
from pathlib import Path

import pytest

from roteiro_py import errors, shipped
from roteiro_py.cli import app as cli
from tests.unit.test_errors import FACTORIES

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("entry", shipped.ALL, ids=lambda entry: entry.source)
def test_the_package_copy_is_the_repository_file(entry: shipped.Shipped) -> None:
    source = (ROOT / entry.source).read_bytes()
    assert entry.read() == source, (f"roteiro_py/docs_data/{entry.name} differs from {entry.source}: "
                                    "run scripts/sync-docs-data and commit both")
    assert (ROOT / "roteiro_py" / "docs_data" / entry.name).read_bytes() == source


def test_the_package_data_glob_covers_the_copies() -> None:
    import tomllib

    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert "docs_data/*" in globs["roteiro_py"]
    assert sorted(p.name for p in (ROOT / "roteiro_py" / "docs_data").iterdir()) == sorted(
        entry.name for entry in shipped.ALL)


def test_the_cli_offers_what_is_shipped() -> None:
    assert {topic.value for topic in cli.DocTopic} == set(shipped.DOCS)
    assert {analyzer.value for analyzer in cli.Analyzer} == set(shipped.DOCKERFILES)


@pytest.mark.parametrize(("args", "entry"), [
    (["docs", "threat-model"], shipped.DOCS["threat-model"]),
    (["docs", "adopting"], shipped.DOCS["adopting"]),
    (["dockerfile", "clippy"], shipped.DOCKERFILES["clippy"]),
])
def test_the_commands_print_the_files_byte_for_byte(args: list[str], entry: shipped.Shipped,
                                                     capfdbinary: pytest.CaptureFixture[bytes]) -> None:
    assert cli.main(args) == 0
    out, err = capfdbinary.readouterr()
    assert out == (ROOT / entry.source).read_bytes()
    if args[0] == "dockerfile":
        # stdout is the Dockerfile alone (it pipes into docker build); the way on is on stderr.
        assert shipped.build_command().encode() in err and shipped.prefetch_from_docker_command().encode() in err


def test_docs_lists_every_topic(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["docs"]) == 0
    out = capsys.readouterr().out
    listed = [line.split()[0] for line in out.splitlines()[:len(shipped.DOCS)]]
    assert listed == list(shipped.DOCS)
    assert ".md" not in out  # no repository path: an installed wheel has none


def test_the_dockerfile_builds_from_stdin_with_no_context() -> None:
    """`docker build -` has no context: a COPY or ADD would fail there, so the file has none,
    and the printed command is the whole pipeline with a tag."""
    dockerfile = shipped.DOCKERFILES["clippy"].read().decode()
    instructions = [line.split()[0].upper() for line in dockerfile.splitlines()
                    if line.strip() and not line.lstrip().startswith("#")]
    assert instructions[0] == "FROM" and not {"COPY", "ADD"} & set(instructions)
    assert len(instructions) == errors.DOCKERFILE_LINES
    assert shlex.split(shipped.build_command()) == [
        "pylint-sandbox", "dockerfile", "clippy", "|", "docker", "build", "-t", shipped.LOCAL_TAG, "-"]
    assert shlex.split(shipped.prefetch_from_docker_command()) == [
        "pylint-sandbox", "prefetch", "--analyzer", "clippy", "--from", "docker", "--image", shipped.LOCAL_TAG]


_REPOSITORY_PATH = re.compile(r"[\w./-]*\.md\b|Dockerfile\.\w+|\bdocs/|\bscripts/")
_POINTER = re.compile(r"pylint-sandbox (docs|dockerfile) ([\w-]+)")


def _every_rendering() -> list[tuple[str, str]]:
    made = [(cls.__name__, factory()[0].guidance().render_text()) for cls, factory in FACTORIES.items()]
    stored = errors.NoImageConfigured(Path("/u/c.toml"), Path("/r/roteiro.toml"), ["r/a@sha256:" + "a" * 64])
    return [*made, ("NoImageConfigured (stored)", stored.guidance().render_text())]


def test_no_message_points_at_a_file_only_a_checkout_has() -> None:
    pointers = 0
    for name, text in _every_rendering():
        assert not _REPOSITORY_PATH.search(text), (name, _REPOSITORY_PATH.search(text))
        for kind, topic in _POINTER.findall(text):
            assert topic in (shipped.DOCS if kind == "docs" else shipped.DOCKERFILES), (name, kind, topic)
            pointers += 1
    assert pointers >= 5  # the control: the pointers are there to be checked


def test_every_pylint_sandbox_command_in_a_message_parses() -> None:
    """Each `pylint-sandbox ...` in a refusal's commands is a line our parser accepts."""
    import typer.main

    root = typer.main.get_command(cli.app)
    checked = 0
    for name, factory in FACTORIES.items():
        for command in factory()[0].guidance().commands:
            for segment in re.split(r"\s*(?:\||;|\{|\})\s*", command):
                words = shlex.split(segment)
                if not words or words[0] != "pylint-sandbox":
                    continue
                _parse(root, words[1:], name)
                checked += 1
    assert checked >= 10


def _parse(root: object, words: list[str], name: str) -> None:
    """Walk the group to the command and let click parse the rest (no callback runs)."""
    command = root
    path = ["pylint-sandbox"]
    while hasattr(command, "commands") and words and words[0] in command.commands:
        path.append(words[0])
        command = command.commands[words.pop(0)]
    context = command.make_context(" ".join(path), list(words))  # type: ignore[attr-defined]
    context.close()
    assert not hasattr(command, "commands"), (name, path)


def test_the_target_build_line_is_one_shell_pipeline_and_its_triple_stays_inert(tmp_path: Path) -> None:
    """Run the line in bash with `pylint-sandbox` and `docker` as functions that record what
    they get: the Dockerfile then one RUN line holding the hostile triple as text."""
    marker = tmp_path / "ran"
    triple = f"x86_64'; touch {marker}; echo '$(touch {marker})"
    line = errors.target_build_command(triple)
    script = (
        "pylint-sandbox() { printf 'FROM base\\nRUN rustup component add clippy\\n'; }\n"
        f"docker() {{ printf '%s\\n' \"$*\" > {shlex.quote(str(tmp_path / 'args'))}; "
        f"cat > {shlex.quote(str(tmp_path / 'dockerfile'))}; }}\n"
        f"{line}\n")
    subprocess.run(["bash", "-c", script], check=True, timeout=30)
    assert not marker.exists()
    assert (tmp_path / "args").read_text() == f"build -t {shipped.LOCAL_TAG} -\n"
    dockerfile = (tmp_path / "dockerfile").read_text().splitlines()
    assert dockerfile[:2] == ["FROM base", "RUN rustup component add clippy"] and len(dockerfile) == 3
    # docker build runs a RUN line with /bin/sh -c: there too the triple is one inert word.
    instruction, run = dockerfile[2].split(" ", 1)
    got = tmp_path / "rustup-args"
    subprocess.run(["sh", "-c", f"rustup() {{ printf '%s\\n' \"$@\" > {shlex.quote(str(got))}; }}\n{run}"],
                   check=True, timeout=30)
    assert not marker.exists()
    assert instruction == "RUN" and got.read_text().splitlines() == ["target", "add", triple]
    assert errors.target_build_command("riscv64gc-unknown-linux-gnu").count("riscv64gc-unknown-linux-gnu'") == 1
