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
    table = dict(re.findall(r"^\| (\d+) \| ([^|]+) \|$", readme, re.M))
    assert {int(code) for code in table} == {errors.EXIT_OK, errors.EXIT_FINDINGS, errors.EXIT_USAGE,
                                             errors.EXIT_REFUSED, errors.EXIT_INTERNAL,
                                             errors.EXIT_INTERRUPTED}
    assert "usage or configuration" in table[str(errors.EXIT_USAGE)]
    assert "refused" in table[str(errors.EXIT_REFUSED)]


def test_readme_names_the_scripts_ci_runs() -> None:
    readme = (ROOT / "README.md").read_text()
    assert "    scripts/test\n" in readme and "    scripts/demo\n" in readme
    assert "scripts/test" in (ROOT / ".ci" / "run").read_text()
