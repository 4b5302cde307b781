"""Numbers and facts stated in messages and documents agree with what they describe."""

from __future__ import annotations

import re
from pathlib import Path

from roteiro_py import errors

ROOT = Path(__file__).resolve().parents[2]


def _meaningful(lines: list[str]) -> list[str]:
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_dockerfile_line_count_is_stated_once_and_true() -> None:
    dockerfile = _meaningful((ROOT / "Dockerfile.clippy").read_text().splitlines())
    assert len(dockerfile) == errors.DOCKERFILE_LINES
    doc = (ROOT / "SANDBOXED_LINTING.md").read_text()
    block = re.search(r"```dockerfile\n(.*?)```", doc, re.S)
    assert block is not None, "SANDBOXED_LINTING.md has no dockerfile block"
    assert _meaningful(block.group(1).splitlines()) == dockerfile
    source = (ROOT / "roteiro_py" / "errors.py").read_text()
    assert len(re.findall(r"^DOCKERFILE_LINES = \d+$", source, re.M)) == 1


def test_dockerfile_pins_its_base_by_digest() -> None:
    first = (ROOT / "Dockerfile.clippy").read_text().splitlines()[0]
    assert re.fullmatch(r"FROM \S+@sha256:[0-9a-f]{64}", first)


def test_readme_exit_codes_match_the_code() -> None:
    readme = (ROOT / "README.md").read_text()
    # a cell may hold an escaped `\|` (`\| head`)
    table = dict(re.findall(r"^\| (\d+) \| ((?:[^|\\]|\\.)+) \|$", readme, re.M))
    assert {int(code) for code in table} == {errors.EXIT_OK, errors.EXIT_FINDINGS, errors.EXIT_USAGE,
                                             errors.EXIT_REFUSED, errors.EXIT_INTERNAL,
                                             errors.EXIT_INTERRUPTED, errors.EXIT_READER_LEFT}
    assert "the reader of stdout stopped early" in table[str(errors.EXIT_READER_LEFT)]
    assert "usage or configuration" in table[str(errors.EXIT_USAGE)]
    assert "refused" in table[str(errors.EXIT_REFUSED)]
    assert f'"{errors.NOTHING_RAN}"' in " ".join(readme.split())  # quoted as every refusal says it


def test_readme_names_the_scripts_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "    scripts/test\n" in readme and "    scripts/demo\n" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()


def test_the_adopting_guide_states_the_bounds_the_code_has() -> None:
    from roteiro_py import compare
    from roteiro_py.compare import diff

    guide = (ROOT / "docs" / "ADOPTING.md").read_text()
    assert f"at most {compare.MAX_BASELINE_BYTES // 2**20} MiB are read" in guide
    assert (f"{diff.MAX_DIFF_BYTES // 2**20} MiB,\n{diff.MAX_DIFF_FILES} files, {diff.MAX_DIFF_HUNKS} hunks, "
            f"{diff.MAX_ADDED_RUNS} runs of added lines, {diff.MAX_PATH_CHARS} characters a path") in guide
    assert diff.MAX_DIFF_BYTES % 2**20 == compare.MAX_BASELINE_BYTES % 2**20 == 0


def test_the_adopting_guides_commands_use_options_that_exist() -> None:
    """Every `pylint-sandbox lint clippy` line in the guide (and the README's mention)
    parses: each option it names is one `lint clippy` takes."""
    import typer.main

    from roteiro_py.cli.app import app

    command = typer.main.get_command(app)
    clippy = command.commands["lint"].commands["clippy"]  # type: ignore[attr-defined]
    options = {name for param in clippy.params for name in param.opts}
    guide = (ROOT / "docs" / "ADOPTING.md").read_text()
    lines = re.findall(r"pylint-sandbox lint clippy [^\n`]*", guide)
    assert len(lines) >= 3
    used = {flag for line in lines for flag in re.findall(r"(--[a-z-]+)", line)}
    assert {"--baseline", "--diff", "--format", "--output", "--fail-on"} <= used
    assert used <= options, used - options
    assert "docs/ADOPTING.md" in (ROOT / "README.md").read_text()


def test_the_readme_states_the_maximum_age_of_an_undated_channel_the_code_has() -> None:
    from roteiro_py.image import rust_dist

    readme = " ".join(line.lstrip("# ").strip() for line in (ROOT / "README.md").read_text().splitlines())
    ages = rust_dist.MAX_AGE_DAYS
    assert ages["stable"] == ages["beta"]  # the README says them once for both
    assert (f"(stable and beta {ages['stable']} days, nightly {ages['nightly']}, by this host's clock)"
            in " ".join(readme.split()))
