"""`--help`, `--version` and shell completion, as a user reads them (issue: lint listed
seventh, descriptions cut, no exit codes or environment, completion off, docs naming two
of three topics).

The exit codes and the environment are stated once (vocabulary.py): --help prints those
tables, README's exit-code table is checked against the same one, and every variable
the code reads by a literal name must be in the environment table (control: the scan
finds the ones known to be read).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import typer

from roteiro_py import __version__, paths
from roteiro_py.cli import app as cli
from roteiro_py.shipped import DOCS
from roteiro_py.vocabulary import ENVIRONMENT, EXIT_CODES

EXE = Path(sys.executable).with_name("pylint-sandbox")
ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], env={**os.environ, "COLUMNS": "80", **(env or {})},
                          capture_output=True, text=True, timeout=60, cwd=cwd)


def flat(text: str) -> str:
    return " ".join(text.split())


def test_commands_are_listed_lint_first_with_whole_first_sentences() -> None:
    group = typer.main.get_command(cli.app)
    assert isinstance(group, typer.core.TyperGroup)
    assert list(group.commands).index("lint") > 0  # control: click's own order puts lint later
    out = run("--help").stdout
    listed = re.findall(r"^  ([a-z-]+)  ", out.split("Commands:")[1].split("\n\n")[0], re.M)
    assert listed == [name for name in cli.COMMAND_ORDER if name in group.commands]
    assert listed[0] == "lint" and set(listed) == set(group.commands)
    for name, command in group.commands.items():
        whole = command.short_help or cli.first_sentence(command.help)
        assert whole.endswith(".") and flat(whole) in flat(out), name
    assert "..." not in out.split("Commands:")[1].split("Exit codes:")[0]
    for sub in ("lint", "config", "cache"):  # the groups' listings too
        assert "..." not in run(sub, "--help").stdout.split("Commands:")[1]


def test_help_ends_with_the_exit_codes_and_the_environment() -> None:
    out = flat(run("--help").stdout)
    exits, environment = out.split("Exit codes:")[1].split("Environment:")
    for code, meaning in EXIT_CODES:
        assert f"{code} {flat(meaning.replace('`', ''))}" in exits
    for name, meaning in ENVIRONMENT:
        assert f"{name} {flat(meaning)}" in environment


def readme_exit_codes() -> list[tuple[int, str]]:
    section = (ROOT / "README.md").read_text().split("## Exit codes\n", 1)[1]
    rows = re.findall(r"^\| (\d+) \| (.*) \|$", section.split("| code | meaning |", 1)[1].split("\n\n", 1)[0], re.M)
    return [(int(code), meaning.replace("\\|", "|")) for code, meaning in rows]


def test_readmes_exit_code_table_is_the_one_table() -> None:
    assert readme_exit_codes() == list(EXIT_CODES)


#: How the code reads a variable by name: os.environ.get("X"), (... environ).get("X"),
#: environ["X"], getenv("X"), and a module constant NAME_ENV = "X" read through one.
READS = re.compile(r"""(?:environ\)?\.get\(\s*|environ\[\s*|getenv\(\s*|_ENV\s*=\s*)"([A-Z][A-Z0-9_]+)\"""")


def test_every_variable_the_code_reads_by_name_is_documented() -> None:
    read = {name for path in (ROOT / "roteiro_py").rglob("*.py")
            for name in READS.findall(path.read_text())}
    assert {"ROTEIRO_HOME", "NO_COLOR", "CARGO_TERM_COLOR", "GITHUB_STEP_SUMMARY"} <= read  # control
    documented = {name for names, _ in ENVIRONMENT for name in re.findall(r"[A-Z][A-Z0-9_]+", names)}
    assert read - documented == set()


def test_docs_help_names_every_topic() -> None:
    out = flat(run("docs", "--help").stdout)
    for name, doc in DOCS.items():
        assert f"{name} ({flat(doc.about)})" in out, name
    assert len(DOCS) == 5  # control: the fifth (attestation) is new, and listed


def test_shell_completion_is_offered() -> None:
    out = run("--help").stdout
    assert "--install-completion" in out and "--show-completion" in out
    script = run("--show-completion", "bash", env={"SHELL": "/bin/bash"})
    assert script.returncode == 0 and "_PYLINT_SANDBOX_COMPLETE" in script.stdout, script.stderr


def test_version_with_nothing_configured_is_the_version_alone(tmp_path: Path) -> None:
    done = run("--version", cwd=tmp_path)
    assert (done.returncode, done.stdout, done.stderr) == (0, f"pylint-sandbox {__version__}\n", "")


def test_version_names_the_configured_image_and_where_it_came_from(tmp_path: Path) -> None:
    image = "ghcr.io/acme/clippy:1.95@sha256:" + "c" * 64
    done = run("--version", env={"ROTEIRO_LINT_IMAGE": image}, cwd=tmp_path)
    assert done.returncode == 0
    assert done.stdout == f"pylint-sandbox {__version__}\nimage: {image} (env ROTEIRO_LINT_IMAGE)\n"
    paths.user_config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.user_config_path().write_text(f'[lint]\nimage = "{image}"\n[vm]\ncpus = 2\n')
    validated = run("--version", cwd=tmp_path)  # another key set: the settings are validated
    assert validated.stdout.splitlines()[1] == f"image: {image} ({paths.user_config_path()})"
    paths.user_config_path().write_text("[lint\n")  # unreadable: said, never refused
    broken = run("--version", cwd=tmp_path)
    assert broken.returncode == 0 and "the configuration cannot be read" in broken.stdout


def test_version_with_only_an_image_set_builds_no_settings_model(tmp_path: Path) -> None:
    probe = ("import sys\nfrom roteiro_py.cli.app import main\ncode = main(['--version'])\n"
             "print('HEAVY', [m for m in ('roteiro_py.config_model', 'roteiro_py.store', "
             "'roteiro_py.lint') if m in sys.modules], code)\n")
    env = {**os.environ, "ROTEIRO_LINT_IMAGE": "ghcr.io/a/b@sha256:" + "d" * 64}
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60,
                          env=env, cwd=tmp_path)
    assert "image: ghcr.io/a/b@sha256:" in done.stdout and "HEAVY [] 0" in done.stdout, done.stdout
