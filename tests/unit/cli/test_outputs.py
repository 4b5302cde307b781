"""One run, every output, through the real command line: `--format FMT[=PATH]...`,
`--output`, `--category`, `$GITHUB_STEP_SUMMARY` and `render REPORT.json`.

The lint's VM run is replaced by a saved report (tests/data/saved_lint_cli.py); the rest
is the real code, run as a process as CI runs it. `render` needs no replacement at all:
it runs nothing but the reading of one file.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
from realcargo import DATA, make_report

from roteiro_py.lint import output
from roteiro_py.report import Finding, Report, render
from roteiro_py.report import load as report_load
from roteiro_py.report.load import load_report
from roteiro_py.report.render import render_summary

EXE = Path(sys.executable).with_name("pylint-sandbox")
DRIVER = DATA / "saved_lint_cli.py"
SARIF_SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())
HEX = "ab" * 32
FILES = {"sarif": "clippy.sarif", "json": "report.json", "gitlab": "gl-code-quality.json",
         "markdown": "summary.md", "human": "report.txt"}


def finding(level: str = "warning", line: int = 1, **extra: object) -> Finding:
    fields: dict[str, object] = {
        "code": "clippy::needless_return", "level": level, "message": f"message {line}",
        "path": "src/lib.rs", "line": line, "column": 1, "end_line": line, "end_column": 3,
        "snippet": "    return x;", "suggestion": "x", "help": "remove `return`"}
    return Finding.model_validate({**fields, **extra})


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    return crate


@pytest.fixture
def saved(tmp_path: Path) -> Report:
    report = make_report([finding(), finding("error", 7, code="E0308", message="mismatched types"),
                          finding("note", 9, code=None)], build_succeeded=False)
    (tmp_path / "saved.json").write_text(report.model_dump_json(indent=2))
    return report


def lint(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """`pylint-sandbox lint clippy crate ARGS` with the VM run replaced by saved.json."""
    environ = {**os.environ, "SAVED_REPORT": str(tmp_path / "saved.json"),
               "LINT_CALLS": str(tmp_path / "calls"), **(env or {})}
    return subprocess.run([sys.executable, str(DRIVER), "lint", "clippy", str(tmp_path / "crate"), *args],
                          cwd=tmp_path, capture_output=True, text=True, timeout=60, env=environ)


def cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None,
        cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """The installed `pylint-sandbox ARGS`, nothing replaced (run in `cwd`, else tmp_path)."""
    return subprocess.run([str(EXE), *args], cwd=cwd or tmp_path, capture_output=True, text=True,
                          timeout=60, env={**os.environ, **(env or {})})


def runs(tmp_path: Path) -> int:
    calls = tmp_path / "calls"
    return len(calls.read_text().splitlines()) if calls.exists() else 0


def every_format(tmp_path: Path) -> list[str]:
    args = [f"--format={fmt}={tmp_path / 'out' / name}" for fmt, name in FILES.items()]
    return [*args, "--format", "github"]


def test_one_run_writes_every_format(tmp_path: Path, tree: Path, saved: Report) -> None:
    (tmp_path / "out").mkdir()
    result = lint(tmp_path, *every_format(tmp_path), "--category", "clippy/crate")
    assert result.returncode == 1, result.stderr  # an error and a warning, --fail-on warning
    assert runs(tmp_path) == 1
    assert result.stdout == render(saved, "github")
    for fmt, name in FILES.items():
        written = (tmp_path / "out" / name).read_text()
        assert written == render(saved, fmt, category="clippy/crate"), fmt  # type: ignore[arg-type]
    log = json.loads((tmp_path / "out" / "clippy.sarif").read_text())
    jsonschema.validate(log, SARIF_SCHEMA)
    assert log["runs"][0]["automationDetails"] == {"id": "clippy/crate/"}
    assert Report.model_validate_json((tmp_path / "out" / "report.json").read_text()) == saved
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(FILES.values())  # no temp left


def test_render_of_the_saved_json_is_the_lints_output_byte_for_byte(
        tmp_path: Path, tree: Path, saved: Report) -> None:
    (tmp_path / "out").mkdir()
    linted = lint(tmp_path, *every_format(tmp_path), "--category", "c1")
    (tmp_path / "again").mkdir()
    args = [f"--format={fmt}={tmp_path / 'again' / name}" for fmt, name in FILES.items()]
    rendered = cli(tmp_path, "render", str(tmp_path / "out" / "report.json"), *args,
                   "--format", "github", "--category", "c1")
    assert (rendered.returncode, rendered.stdout) == (linted.returncode, linted.stdout), rendered.stderr
    for name in FILES.values():
        assert (tmp_path / "again" / name).read_bytes() == (tmp_path / "out" / name).read_bytes(), name
    assert runs(tmp_path) == 1  # render ran no lint


def test_render_runs_no_vm_and_reads_no_image(tmp_path: Path, saved: Report) -> None:
    probe = ("import sys; sys.path.insert(0, sys.argv[1]); from roteiro_py.cli.app import main\n"
             "code = main(['render', sys.argv[2], '--format', 'sarif'])\n"
             "print('HEAVY', [m for m in ('roteiro_py.vm', 'roteiro_py.store', 'roteiro_py.clippy',"
             " 'roteiro_py.depcache') if m in sys.modules], code)\n")
    done = subprocess.run([sys.executable, "-c", probe, str(DATA.parents[1]), str(tmp_path / "saved.json")],
                          capture_output=True, text=True, timeout=60, cwd=tmp_path)
    assert done.stdout.rstrip().endswith("HEAVY [] 1"), done.stdout[-300:] + done.stderr
    assert '"automationDetails"' not in done.stdout and '"results"' in done.stdout  # control: it rendered


@pytest.mark.parametrize(("fail_on", "code"), [(None, 1), ("error", 1), ("never", 0)])
def test_render_exits_as_the_lint_would(tmp_path: Path, fail_on: str | None, code: int) -> None:
    warnings_only = make_report([finding()])
    (tmp_path / "w.json").write_text(warnings_only.model_dump_json())
    flag = ["--fail-on", fail_on] if fail_on else []
    assert cli(tmp_path, "render", "w.json", "--format", "json", *flag).returncode == (
        0 if fail_on == "error" else code)
    failed = make_report([], build_succeeded=False)  # a failed build is never clean
    (tmp_path / "f.json").write_text(failed.model_dump_json())
    assert cli(tmp_path, "render", "f.json", "--format", "json", *flag).returncode == code


def test_output_is_the_path_of_the_one_format_without_one(tmp_path: Path, tree: Path, saved: Report) -> None:
    result = lint(tmp_path, "--format", "sarif", "--format", f"json={tmp_path / 'r.json'}",
                  "--output", str(tmp_path / "x.sarif"))
    assert result.returncode == 1 and result.stdout == "", result.stderr
    assert (tmp_path / "x.sarif").read_text() == render(saved, "sarif")
    assert (tmp_path / "r.json").read_text() == render(saved, "json")
    # no --format: --output is where the configured format goes, as before
    configured = lint(tmp_path, "--output", str(tmp_path / "c.json"), env={"ROTEIRO_LINT_FORMAT": "gitlab"})
    assert configured.returncode == 1 and configured.stdout == ""
    assert (tmp_path / "c.json").read_text() == render(saved, "gitlab")
    # and with neither, the configured format on stdout
    assert lint(tmp_path, env={"ROTEIRO_LINT_FORMAT": "markdown"}).stdout == render(saved, "markdown")


@pytest.mark.parametrize(("args", "said"), [
    (["--format", "json", "--format", "sarif"], "--format json and --format sarif would both be printed"),
    (["--format", "json=a.json", "--output", "b.json"], "--output b.json names no output"),
    (["--format", "xml=a.xml"], "'xml' is not a format"),
    (["--format", "sarif="], "the path after = is empty"),
    (["--format", "sarif=x.out", "--format", "json=./x.out"], "name the same file"),
    (["--format", "sarif", "--category", "a b"], "is not a category"),
    (["--format", "json", "--category", "ci"], "--category ci names a SARIF category, and no output is SARIF"),
    (["--format", "json=missing/r.json"], "the directory missing does not exist"),
    ([f"--format=json=j{n}.json" for n in range(output.MAX_TARGETS + 1)], "at most 16 outputs"),
])
def test_what_cannot_be_written_is_a_usage_error_before_the_lint(
        tmp_path: Path, tree: Path, saved: Report, args: list[str], said: str) -> None:
    result = lint(tmp_path, *args)
    assert result.returncode == 2, result.stderr
    assert said in " ".join(result.stderr.split()), result.stderr
    assert runs(tmp_path) == 0 and "Traceback" not in result.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["crate", "saved.json"]  # nothing written


def test_the_configured_format_is_checked_against_category_before_any_vm(tmp_path: Path, tree: Path) -> None:
    """Through the real `lint()` (nothing replaced): the configured format is known only
    once the settings are, and the refusal still comes before the hypervisor is probed."""
    image = ["--image", f"registry.example/c@sha256:{HEX}"]
    refused = cli(tmp_path, "lint", "clippy", str(tree), *image, "--category", "ci")
    assert refused.returncode == 2 and "no output is SARIF" in refused.stderr, refused.stderr
    # control: with SARIF configured the run goes on, to a later refusal (no VM here)
    later = cli(tmp_path, "lint", "clippy", str(tree), *image, "--category", "ci",
                env={"ROTEIRO_LINT_FORMAT": "sarif"})
    assert later.returncode == 3 and "SARIF" not in later.stderr, later.stderr


def test_an_output_that_fails_does_not_stop_the_others(tmp_path: Path, tree: Path, saved: Report) -> None:
    # A name of 250 characters passes the early check, and the temporary file beside it
    # (its name and a suffix) is past NAME_MAX when the report is written: ENAMETOOLONG.
    # (A socket did this before; it is refused by the early check now.)
    failing = tmp_path / ("j" * 245 + ".json")
    result = lint(tmp_path, f"--format=json={failing}", f"--format=sarif={tmp_path / 'ok.sarif'}",
                  "--format", "github")
    assert result.returncode == 2
    assert f"--format json={failing}: the report could not be written (File name too long)" in " ".join(
        result.stderr.split())
    assert (tmp_path / "ok.sarif").read_text() == render(saved, "sarif")
    assert result.stdout == render(saved, "github")


# -- $GITHUB_STEP_SUMMARY --------------------------------------------------------------------


def test_the_step_summary_is_appended_when_set_and_only_then(tmp_path: Path, tree: Path, saved: Report) -> None:
    summary = tmp_path / "step_summary"
    summary.write_text("## an earlier command of this step\n")
    result = lint(tmp_path, "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert result.returncode == 1 and result.stderr == "", result.stderr
    assert summary.read_text() == "## an earlier command of this step\n\n" + render_summary(saved)
    # render appends too, and in a GitHub job each listed finding links to its file at the commit
    job = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "c" * 40}
    cli(tmp_path, "render", "saved.json", "--format", "json", env={"GITHUB_STEP_SUMMARY": str(summary), **job})
    assert summary.read_text().count("### clippy: 3 findings") == 2
    base = "https://github.com/o/r/blob/" + "c" * 40
    assert summary.read_text().endswith(render_summary(saved, links=base))
    assert f"]({base}/" in summary.read_text() and f"]({base}/" not in render_summary(saved)  # control
    # unset (tests/conftest.py unsets it for every test), nothing is written anywhere
    assert "GITHUB_STEP_SUMMARY" not in os.environ
    before, listing = summary.read_text(), sorted(p.name for p in tmp_path.iterdir())
    assert lint(tmp_path, "--format", "json").returncode == 1
    assert summary.read_text() == before and sorted(p.name for p in tmp_path.iterdir()) == listing


def test_a_step_summary_that_is_a_link_or_no_file_is_not_written(tmp_path: Path, tree: Path, saved: Report) -> None:
    victim = tmp_path / "victim"
    victim.write_text("keep\n")
    (tmp_path / "link").symlink_to(victim)
    os.mkfifo(tmp_path / "fifo")
    for name, why in (("link", "it is a symbolic link"), ("fifo", "it is not a regular file"),
                      ("missing", "it does not exist")):
        result = lint(tmp_path, "--format", "json", env={"GITHUB_STEP_SUMMARY": str(tmp_path / name)})
        assert result.returncode == 1, result.stderr  # the exit status is the findings'
        assert f"$GITHUB_STEP_SUMMARY ({tmp_path / name}) was not written: {why}" in result.stderr
        assert Report.model_validate_json(result.stdout) == saved  # the report itself is there
    assert victim.read_text() == "keep\n" and not (tmp_path / "missing").exists()


def test_a_step_summary_near_githubs_limit_gets_only_the_counts(saved: Report, tmp_path: Path) -> None:
    from roteiro_py.report.markdown import STEP_SUMMARY_LIMIT

    summary = tmp_path / "summary"
    short = render_summary(saved, with_findings=False)
    summary.write_text("x" * (STEP_SUMMARY_LIMIT - len(short) - 1))
    assert output.append_step_summary(saved, {"GITHUB_STEP_SUMMARY": str(summary)}) is None
    assert summary.read_text().endswith("\n" + short) and summary.stat().st_size == STEP_SUMMARY_LIMIT
    said = output.append_step_summary(saved, {"GITHUB_STEP_SUMMARY": str(summary)})
    assert said is not None and "GitHub drops a step's whole summary" in said
    assert summary.stat().st_size == STEP_SUMMARY_LIMIT  # nothing more was written
    roomy = tmp_path / "roomy"  # control: with room, the findings are listed
    roomy.write_text("")
    assert output.append_step_summary(saved, {"GITHUB_STEP_SUMMARY": str(roomy)}) is None
    assert roomy.read_text() == render_summary(saved) and "- **error**" in roomy.read_text()


# -- render: the saved report is untrusted -------------------------------------------------------


@pytest.mark.parametrize(("content", "said"), [
    (b"not json at all SECRET-7f3a", "Invalid JSON"),
    (b'{"schema_version": 1, "tool": "SECRET-7f3a"}', "tool: Input should be"),
    (b'{"schema_version": 2}', "schema_version: Input should be 1"),
    (json.dumps({**json.loads(make_report([finding()]).model_dump_json()),
                 "findings": [{**json.loads(finding().model_dump_json()), "path": "../SECRET-7f3a"}]}
                ).encode(), "findings.0.path: Value error, not a normalised path"),
    (b"\xff\xfe SECRET-7f3a", "Invalid JSON"),
])
def test_render_refuses_an_invalid_report_naming_it_never_quoting_it(
        tmp_path: Path, content: bytes, said: str) -> None:
    (tmp_path / "bad.json").write_bytes(content)
    result = cli(tmp_path, "render", "bad.json", "--format", "json")
    assert result.returncode == 2, result.stderr
    text = " ".join(result.stderr.split())
    assert "bad.json is not a pylint-sandbox JSON report" in text and said in text, text
    assert "SECRET-7f3a" not in result.stderr + result.stdout
    assert "Traceback" not in result.stderr


def test_render_refuses_a_link_and_what_is_too_large(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, saved: Report) -> None:
    (tmp_path / "link.json").symlink_to(tmp_path / "saved.json")
    result = cli(tmp_path, "render", "link.json", "--format", "json")
    assert result.returncode == 2 and "it is a symbolic link" in result.stderr, result.stderr
    assert cli(tmp_path, "render", "saved.json", "--format", "json").returncode == 1  # control

    monkeypatch.setattr(report_load, "MAX_REPORT_BYTES", 100)
    with pytest.raises(Exception, match="larger than 100 bytes"):
        load_report(tmp_path / "saved.json")
    monkeypatch.undo()
    assert load_report(tmp_path / "saved.json") == saved
    missing = cli(tmp_path, "render", "nope.json")
    assert missing.returncode == 2 and "nope.json is not a pylint-sandbox JSON report: it does not exist" in (
        " ".join(missing.stderr.split()))


def test_render_and_lint_replace_a_link_to_their_own_stdout_and_refuse_a_fifo(tmp_path: Path, tree: Path,
                                                                               saved: Report) -> None:
    """The tree's `clippy.json -> /proc/self/fd/1` sent the report into the log (stdout)
    of `render` and `lint`, not into the file; a FIFO there was written into. Now the link
    becomes the report, and a FIFO is refused before anything is written (exit 2)."""
    for command in (lambda *a: cli(tmp_path, "render", "saved.json", *a), lambda *a: lint(tmp_path, *a)):
        link = tmp_path / "clippy.json"
        link.unlink(missing_ok=True)
        link.symlink_to("/proc/self/fd/1")
        done = command("--format", f"json={link}")
        assert done.returncode in (0, 1), done.stderr
        assert done.stdout == ""  # nothing of the report in the log
        assert not link.is_symlink() and load_report(link) == saved
        link.unlink()
        os.mkfifo(link)
        refused = command("--format", f"json={link}")
        assert refused.returncode == 2
        assert f"--format json={link} is a FIFO, not a regular file" in " ".join(refused.stderr.split())
        link.unlink()
    assert runs(tmp_path) == 1  # the lint with the FIFO was refused before its run


# -- render judges and colours as the lint does (--baseline, --diff, --color) ----------------

#: Adds line 7 of src/lib.rs (the error's line) and nothing else.
PR_DIFF = ("diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n"
           "@@ -6,0 +7,1 @@\n+added\n")


@pytest.mark.parametrize("judged", [("--baseline", "saved.json"), ("--diff", "pr.diff"),
                                    ("--baseline", "older.json", "--diff", "pr.diff")])
def test_render_judges_against_a_baseline_and_a_diff_as_the_lint_does(
        tmp_path: Path, tree: Path, saved: Report, judged: tuple[str, ...]) -> None:
    """A diff's files are looked for in the repository: the lint's is the tree it lints,
    render's the one it runs in (the same here)."""
    (tree / "src" / "lib.rs").write_text("fn main() {}\n" * 9)
    (tmp_path / "pr.diff").write_text(PR_DIFF)
    (tmp_path / "older.json").write_text(make_report([finding()]).model_dump_json())
    (tmp_path / "out").mkdir()
    args = [word if word.startswith("--") else str(tmp_path / word) for word in judged]
    linted = lint(tmp_path, *args, "--format", "github", "--format", f"json={tmp_path / 'out' / 'r.json'}")
    saved_json = str(tmp_path / "saved.json")
    plain = cli(tmp_path, "render", saved_json, "--format", "github", cwd=tree)
    rendered = cli(tmp_path, "render", saved_json, *args, "--format", "github",
                   "--format", f"json={tmp_path / 'out' / 'again.json'}", cwd=tree)
    assert (rendered.returncode, rendered.stdout) == (linted.returncode, linted.stdout), rendered.stderr
    assert (tmp_path / "out" / "again.json").read_bytes() == (tmp_path / "out" / "r.json").read_bytes()
    again = load_report(tmp_path / "out" / "again.json")
    assert again.comparison is not None and all(  # every finding marked, none dropped
        f.baseline is not None or f.in_diff is not None for f in again.findings)
    assert len(again.findings) == len(saved.findings)
    assert rendered.stdout != plain.stdout  # control: the judgement changed what is shown


def test_render_with_the_report_itself_as_baseline_passes_and_without_fails(tmp_path: Path) -> None:
    (tmp_path / "saved.json").write_text(make_report([finding(), finding("error", 7)]).model_dump_json())
    assert cli(tmp_path, "render", "saved.json", "--format", "json").returncode == 1  # control
    assert cli(tmp_path, "render", "saved.json", "--baseline", "saved.json", "--format", "json").returncode == 0


def test_render_refuses_an_unusable_baseline_or_diff_as_the_lint_does(
        tmp_path: Path, tree: Path, saved: Report) -> None:
    (tmp_path / "bad.json").write_text("not a report")
    for flag in ("--baseline", "--diff"):
        target = "bad.json" if flag == "--baseline" else "missing.diff"
        rendered = cli(tmp_path, "render", "saved.json", flag, target, "--format", "json")
        linted = lint(tmp_path, flag, target, "--format", "json")
        assert rendered.returncode == linted.returncode == 2, rendered.stderr
        assert rendered.stdout == "" and target in rendered.stderr
        assert rendered.stderr == linted.stderr


@pytest.mark.parametrize("color", ["always", "never"])
def test_render_colours_the_human_report_as_the_lint_does(
        tmp_path: Path, tree: Path, saved: Report, color: str) -> None:
    linted = lint(tmp_path, "--format", "human", "--color", color)
    rendered = cli(tmp_path, "render", "saved.json", "--format", "human", "--color", color)
    assert rendered.stdout == linted.stdout and rendered.returncode == linted.returncode, rendered.stderr
    assert ("\x1b[" in rendered.stdout) == (color == "always")
    by_env = cli(tmp_path, "render", "saved.json", "--format", "human", env={"CARGO_TERM_COLOR": color})
    assert by_env.stdout == rendered.stdout  # the flag and cargo's variable are one setting
