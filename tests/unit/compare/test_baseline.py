"""--baseline and --diff: which findings are known, which are on lines the change adds,
and the one exit-code rule, driven through the real parser, real cargo clippy runs on
the demo workspace and real `git diff` output (git and cargo run in the test's own
scratch copies, never in a tree under lint)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]
import pytest
from realcargo import DATA, DEMO, copy_crate, make_report, report_of, run_clippy

from roteiro_py import compare as comparemod
from roteiro_py.clippy.command import ClippyOptions
from roteiro_py.compare import Against, compare, load_against, read_baseline
from roteiro_py.compare.diff import parse_diff
from roteiro_py.errors import EXIT_FINDINGS, EXIT_OK, EXIT_USAGE, BaselineUnusable, DiffUnusable
from roteiro_py.lint.judgement import exit_code
from roteiro_py.report import Finding, Report, render
from roteiro_py.report.github import PROVENANCE_PREFIX

SAVED = DATA / "reports" / "demo-before-baseline.json"
SARIF_SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())
EXE = Path(sys.executable).with_name("pylint-sandbox")
LIB = "rust/crates/demo-core/src/lib.rs"
GIT_ENV = {"GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull, "GIT_AUTHOR_NAME": "t",
           "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@e"}
needs_git = pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")


def finding(n: int = 1, level: str = "warning", **extra: object) -> Finding:
    fields: dict[str, object] = {
        "code": "clippy::needless_return", "level": level, "message": f"message {n}",
        "path": "src/lib.rs", "line": n, "column": 5, "end_line": n, "end_column": 10,
        "snippet": f"    thing{n};"}
    return Finding.model_validate({**fields, **extra})


def git(repo: Path, *args: str) -> bytes:
    return subprocess.run(["git", *args], cwd=repo, env={**os.environ, **GIT_ENV}, check=True,
                          capture_output=True).stdout


class Demo:
    """A scratch git repository holding the demo workspace under rust/, on branch main."""

    def __init__(self, root: Path) -> None:
        self.repo = root / "repo"
        self.target = root / "target"
        copy_crate(DEMO, self.repo / "rust")
        git(self.repo, "init", "-q", "-b", "main")
        git(self.repo, "add", ".")
        git(self.repo, "commit", "-q", "-m", "base")
        git(self.repo, "checkout", "-q", "-b", "topic")

    def edit(self, path: str, old: str, new: str) -> None:
        file = self.repo / path
        text = file.read_text()
        assert old in text, old
        file.write_text(text.replace(old, new, 1))

    def lint(self) -> Report:
        """The report a lint of the tree as it is now gives (real clippy, as the guest runs it)."""
        run = run_clippy(self.repo / "rust", ClippyOptions(all_targets=True), target_dir=self.target)
        return report_of(run, self.repo, "rust")

    def diff(self) -> bytes:
        git(self.repo, "add", "-A")
        git(self.repo, "commit", "-q", "-m", "topic")
        return git(self.repo, "diff", "--no-color", "--no-ext-diff", "-M", "main...topic")


# -- the baseline ---------------------------------------------------------------------


@needs_git
def test_a_real_tree_with_lines_shifted_keeps_every_finding_known(tmp_path: Path) -> None:
    """The saved report (written before baselines existed: schema 1 compatibility) is the
    baseline. Lines inserted above every finding and a re-indented `return`: every finding
    moved, none is new, and the run exits 0. Control: a new `return` and a second copy of
    an identical one are the two new findings, and the run exits 1."""
    baseline = read_baseline(SAVED)
    demo = Demo(tmp_path)
    demo.edit(LIB, "//! Arithmetic", "// one\n// two\n// three\n//! Arithmetic")
    demo.edit(LIB, "    return x * 2;", "        return x * 2;")
    demo.edit("rust/crates/demo-app/src/main.rs", "fn main() {", "// a comment\n\nfn main() {")
    shifted = demo.lint()
    moved = {(f.code, f.line) for f in shifted.findings} - {(f.code, f.line) for f in baseline.findings}
    assert len(moved) == 4  # every finding is on another line than in the baseline
    judged = compare(shifted, Against(baseline=baseline, baseline_name=SAVED.name))
    assert [f.baseline for f in judged.findings] == ["known"] * 4
    assert judged.summary.known == 4 and exit_code(judged, "warning") == EXIT_OK
    # control: a new finding and a duplicate of a known one
    demo.edit(LIB, "/// Sums", "pub fn triple(x: i32) -> i32 {\n    return x * 3;\n}\n\n"
                               "pub fn double_again(x: i32) -> i32 {\n    return x * 2;\n}\n\n/// Sums")
    grown = compare(demo.lint(), Against(baseline=baseline, baseline_name=SAVED.name))
    new = sorted((f.line, f.snippet) for f in grown.findings if f.baseline == "new")
    assert new == [(12, "    return x * 3;"), (16, "    return x * 2;")]
    assert grown.summary.known == 4 and exit_code(grown, "warning") == EXIT_FINDINGS
    assert exit_code(grown, "error") == EXIT_OK  # new warnings do not reach --fail-on error


@needs_git
def test_a_crate_renamed_in_the_diff_keeps_its_findings_known(tmp_path: Path) -> None:
    """`git mv crates/demo-app crates/app`: its finding is looked up under the old name
    through the diff's `rename from/to`. Control: without the diff it is new."""
    demo = Demo(tmp_path)
    baseline = demo.lint()
    git(demo.repo, "mv", "rust/crates/demo-app", "rust/crates/app")
    demo.edit("rust/Cargo.toml", '"crates/demo-app"', '"crates/app"')
    renamed = demo.lint()
    changes = parse_diff(demo.diff())
    assert changes.renamed["rust/crates/demo-app/src/main.rs"] == "rust/crates/app/src/main.rs"
    judged = compare(renamed, Against(baseline=baseline, changes=changes))
    moved = next(f for f in judged.findings if f.code == "clippy::len_zero")
    assert moved.path == "rust/crates/app/src/main.rs" and moved.baseline == "known"
    assert exit_code(judged, "warning") == EXIT_OK
    without = compare(renamed, Against(baseline=baseline))
    assert next(f for f in without.findings if f.code == "clippy::len_zero").baseline == "new"
    assert exit_code(without, "warning") == EXIT_FINDINGS


def test_two_identical_findings_and_a_baseline_with_one_are_one_known_one_new() -> None:
    twin = {"message": "same", "snippet": "    same;"}
    baseline = make_report([finding(3, **twin)])
    current = make_report([finding(30, **twin), finding(10, **twin)])
    judged = compare(current, Against(baseline=baseline))
    assert [(f.line, f.baseline) for f in judged.findings] == [(30, "new"), (10, "known")]
    assert exit_code(judged, "warning") == EXIT_FINDINGS
    single = compare(make_report([finding(10, **twin)]), Against(baseline=baseline))  # control
    assert [f.baseline for f in single.findings] == ["known"]
    assert exit_code(single, "warning") == EXIT_OK


# -- the diff -------------------------------------------------------------------------

DIFF = (b"diff --git a/src/lib.rs b/src/lib.rs\n--- a/src/lib.rs\n+++ b/src/lib.rs\n"
        b"@@ -1,4 +1,4 @@\n line 1\n-old 2\n+line 2\n line 3\n line 4\n")


def test_only_findings_on_added_lines_are_in_the_diff() -> None:
    report = make_report([finding(1), finding(2), finding(3), finding(9),
                          finding(2, path="src/other.rs"),
                          finding(1, end_line=2),  # a span reaching into the added line
                          finding(7, path=None, line=None, column=None, end_line=None, end_column=None)])
    judged = compare(report, Against(changes=parse_diff(DIFF), diff_name="pr.diff"))
    assert [f.in_diff for f in judged.findings] == [False, True, False, False, False, True, None]
    assert [f.gating for f in judged.findings] == [False, True, False, False, False, True, True]
    assert judged.summary.outside_diff == 4 and judged.summary.known == 0
    assert judged.comparison is not None and judged.comparison.diff == "pr.diff"
    assert judged.comparison.diff_files == 1
    assert all(f.baseline is None for f in judged.findings)  # no baseline: not marked


@pytest.mark.parametrize(("baseline", "diff", "level", "fail_on", "built", "expected"), [
    # (finding in the baseline?, on an added line?, its level, --fail-on, build ok?, exit)
    (False, None, "warning", "warning", True, EXIT_FINDINGS),   # no diff: new fails
    (True, None, "warning", "warning", True, EXIT_OK),          # known does not
    (False, True, "warning", "warning", True, EXIT_FINDINGS),   # new, in the diff
    (False, False, "warning", "warning", True, EXIT_OK),        # new, outside the diff
    (True, True, "warning", "warning", True, EXIT_OK),          # known, in the diff
    (True, False, "warning", "warning", True, EXIT_OK),
    (False, True, "warning", "error", True, EXIT_OK),           # below --fail-on
    (False, True, "error", "error", True, EXIT_FINDINGS),
    (False, True, "error", "never", True, EXIT_OK),
    (True, False, "error", "error", False, EXIT_FINDINGS),      # a failed build always fails
    (True, False, "error", "never", False, EXIT_OK),
    (None, None, "warning", "warning", True, EXIT_FINDINGS),    # neither given: as before
    (None, None, "note", "warning", True, EXIT_OK),
])
def test_the_exit_code_for_each_combination(baseline: bool | None, diff: bool | None, level: str,
                                            fail_on: str, built: bool, expected: int) -> None:
    subject = finding(2, level)
    known_one = make_report([subject if baseline else finding(2, level, message="another")])
    against = Against(baseline=known_one if baseline is not None else None,
                      changes=parse_diff(DIFF if diff else DIFF.replace(b"+line 2", b" line 2")
                                         .replace(b"-old 2\n", b"")) if diff is not None else None)
    judged = compare(make_report([subject], build_succeeded=built), against if baseline is not None or
                     diff is not None else None)
    assert exit_code(judged, fail_on) == expected


# -- the renderers --------------------------------------------------------------------


def judged_mix() -> Report:
    """Known (line 1), new on an added line (2), new outside the diff (3)."""
    baseline = make_report([finding(1)])
    report = make_report([finding(1), finding(2), finding(3)])
    return compare(report, Against(baseline=baseline, baseline_name="clippy-baseline.json",
                                   changes=parse_diff(DIFF), diff_name="pr.diff"))


def test_human_shows_the_gating_findings_and_counts_the_rest() -> None:
    text = render(judged_mix(), "human")
    assert "message 2" in text and "message 1" not in text and "message 3" not in text
    assert ("1 new in the diff, 1 known (in the baseline clippy-baseline.json, not shown), "
            "1 new outside the diff (pr.diff adds lines to 1 file, not shown)") in text
    assert "3 findings (3 warnings); build succeeded" in text
    plain = render(make_report([finding(1), finding(3)]), "human")  # control: no comparison
    assert "message 1" in plain and "message 3" in plain and " known (" not in plain


def test_github_annotates_only_new_findings_in_the_diff() -> None:
    text = render(judged_mix(), "github")
    # the run's provenance notice, then the one finding that gates the run
    commands = [line for line in text.splitlines()
                if line.startswith("::") and not line.startswith(PROVENANCE_PREFIX)]
    assert len(commands) == 1 and "::message 2" in commands[0]  # (then its doc link)
    assert "1 known (in the baseline clippy-baseline.json, not annotated)" in text
    plain = render(make_report([finding(1), finding(3)]), "github")  # control
    assert sum(line.startswith("::") for line in plain.splitlines()) == 1 + 2
    # past GitHub's limit, the overflow line names what the step summary lists
    many = compare(make_report([finding(n) for n in range(1, 13)]),
                   Against(baseline=make_report([finding(99)]), baseline_name="b.json"))
    assert "the step summary lists the first 50 new findings (errors first)" in render(many, "github")
    plain_many = make_report([finding(n) for n in range(1, 13)])  # control: compared with nothing
    assert "the first 50 findings of the run (errors first)" in render(plain_many, "github")


def test_the_step_summary_lists_the_gating_findings_and_counts_the_rest() -> None:
    """$GITHUB_STEP_SUMMARY, where github's overflow line sends readers: it listed every
    finding, known ones first when they were errors, with nothing saying which fail the
    run. Now it lists those that gate, and closes with what the rest were judged against."""
    from markdown_it import MarkdownIt

    from roteiro_py.report.markdown import render_markdown

    judged = judged_mix()
    text = render_markdown(judged)
    # the headline separates new from known (issue 23): known is in the baseline or outside the diff
    assert text.startswith("### clippy: 1 new, 2 known of 3 findings (3 warnings); build succeeded\n")
    bullets = [line for line in text.splitlines() if line.startswith("- **")]
    assert len(bullets) == 1 and "message 2" in bullets[0]
    assert "message 1" not in text and "message 3" not in text
    assert "**New findings in the diff** (all 1, errors first;" in text
    assert ("1 new in the diff, 1 known (in the baseline ` clippy-baseline.json `, not listed), 1 new outside "
            "the diff (` pr.diff ` adds lines to 1 file, not listed).") in text
    assert "not listed)." in render_markdown(judged, with_findings=False)  # the counts-only summary too
    # a known error is not listed before a new warning (errors first was the order over all)
    error_known = compare(make_report([finding(1, "error"), finding(2)]), Against(
        baseline=make_report([finding(1, "error")]), baseline_name="b.json"))
    listed = [line for line in render_markdown(error_known).splitlines() if line.startswith("- **")]
    assert len(listed) == 1 and listed[0].startswith("- **warning**") and "**New findings** (all 1" in (
        render_markdown(error_known))
    none_new = compare(make_report([finding(1)]), Against(baseline=make_report([finding(1)]), baseline_name="b"))
    assert "**New findings**: none." in render_markdown(none_new)
    # the files' names are outside text: code spans, like every other
    hostile = judged.model_copy(update={"comparison": judged.comparison.model_copy(update={
        "baseline": "@org/team <img src=x>.json", "diff": "[x](https://evil.example) #12"})})
    html = MarkdownIt("commonmark").render(render_markdown(hostile))
    outside = re.sub(r"<code>.*?</code>", "", html, flags=re.S)
    assert "@org" not in outside and "<img" not in outside and "evil.example" not in outside
    assert "#12" not in outside and "@org/team &lt;img src=x&gt;.json" in html  # control: shown
    plain = render_markdown(make_report([finding(1), finding(3)]))  # control: no comparison
    assert "message 1" in plain and "message 3" in plain and "**Findings** (all 2" in plain
    assert "not listed" not in plain and plain.startswith("### clippy: 2 findings (2 warnings); build")
    # a pull request with no net change: an empty diff, nothing new, and the summary says why
    nothing = compare(make_report([finding(1), finding(3)]), Against(changes=parse_diff(b""), diff_name="pr.diff"))
    said = render_markdown(nothing)
    assert said.startswith("### clippy: 0 new, 2 known of 2 findings (2 warnings); this change adds no lines; ")
    assert "0 in the diff, 2 outside the diff (` pr.diff ` adds no lines, not listed)." in said
    assert exit_code(nothing, "warning") == EXIT_OK


def test_json_and_sarif_keep_every_finding_marked() -> None:
    judged = judged_mix()
    data = json.loads(render(judged, "json"))
    assert [(f["baseline"], f["in_diff"]) for f in data["findings"]] == [
        ("known", False), ("new", True), ("new", False)]
    assert data["summary"]["known"] == 1 and data["summary"]["outside_diff"] == 2
    assert data["comparison"] == {"baseline": "clippy-baseline.json", "baseline_findings": 1,
                                  "diff": "pr.diff", "diff_files": 1}
    assert Report.model_validate_json(render(judged, "json")) == judged
    log = json.loads(render(judged, "sarif"))
    jsonschema.validate(log, SARIF_SCHEMA)
    results = log["runs"][0]["results"]
    assert [r["baselineState"] for r in results] == ["unchanged", "new", "new"]
    assert [r["properties"]["inDiff"] for r in results] == [False, True, False]
    plain = json.loads(render(make_report([finding(1)]), "sarif"))  # control: no comparison
    assert "baselineState" not in plain["runs"][0]["results"][0]


# -- the files, refused before the lint -------------------------------------------------


def test_a_baseline_that_is_not_a_report_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    cases = {
        "secret.txt": (b"SECRET-TOKEN-4242\n", "Invalid JSON"),
        "code-scanning.sarif": (json.dumps({"version": "2.1.0", "runs": []}).encode(),
                                "tool: Field required"),
        "future.json": (SAVED.read_bytes().replace(b'"schema_version": 1', b'"schema_version": 2'),
                        "schema_version: Input should be 1"),
        "escape.json": (SAVED.read_bytes().replace(b'"path": "rust/crates/demo-app/src/main.rs"',
                                                   b'"path": "../../etc/passwd"'), "findings.3.path"),
    }
    for name, (data, said) in cases.items():
        (tmp_path / name).write_bytes(data)
        with pytest.raises(BaselineUnusable) as refused:
            read_baseline(tmp_path / name)
        text = refused.value.guidance().render_text()
        assert refused.value.exit_code == EXIT_USAGE and str(tmp_path / name) in text
        assert "not a JSON report of this tool" in text and said in text, text
        assert "SECRET-TOKEN" not in text
    (tmp_path / "link.json").symlink_to(SAVED)
    os.mkfifo(tmp_path / "fifo.json")
    for name, why in (("link.json", "symbolic link"), ("fifo.json", "not a regular file"),
                      ("missing.json", "does not exist")):
        with pytest.raises(BaselineUnusable, match=why):
            read_baseline(tmp_path / name)
    assert read_baseline(SAVED).summary.total == 4  # control: the saved report is read


def test_a_baseline_larger_than_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(comparemod, "MAX_BASELINE_BYTES", SAVED.stat().st_size)
    read_baseline(SAVED)  # control: at the bound
    (tmp_path / "big.json").write_bytes(SAVED.read_bytes() + b" ")
    with pytest.raises(BaselineUnusable, match=f"larger than {SAVED.stat().st_size} bytes"):
        read_baseline(tmp_path / "big.json")


def test_a_diff_refusal_names_the_file_and_line(tmp_path: Path) -> None:
    bad = tmp_path / "pr.diff"
    bad.write_bytes(b"--- a/x\n+++ b//etc/passwd\n")
    with pytest.raises(DiffUnusable) as refused:
        load_against(None, bad)
    text = refused.value.guidance().render_text()
    assert f"--diff {bad}, line 2 cannot be used" in text and "diff --no-color --no-ext-diff --no-textconv" in text
    (tmp_path / "link.diff").symlink_to(bad)
    with pytest.raises(DiffUnusable, match="symbolic link"):
        load_against(None, tmp_path / "link.diff")
    good = tmp_path / "good.diff"  # control
    good.write_bytes(DIFF)
    against = load_against(SAVED, good)
    assert against is not None and against.diff_name == "good.diff" and against.baseline is not None
    assert load_against(None, None) is None



@needs_git
def test_a_diff_written_relative_to_a_subdirectory_is_refused(tmp_path: Path) -> None:
    """`git diff --relative` run in rust/ names crates/demo-core/src/lib.rs, which no
    finding's path (relative to the repository root) is: before, every finding was
    outside the diff and the run passed. Control: the same change diffed from the root."""
    demo = Demo(tmp_path)
    demo.edit(LIB, "/// Sums", "pub fn triple(x: i32) -> i32 {\n    return x * 3;\n}\n\n/// Sums")
    demo.diff()
    relative = git(demo.repo / "rust", "diff", "--no-color", "--relative", "main...topic")
    assert b"+++ b/crates/demo-core/src/lib.rs" in relative
    (tmp_path / "relative.diff").write_bytes(relative)
    with pytest.raises(DiffUnusable) as refused:
        load_against(None, tmp_path / "relative.diff", root=demo.repo)
    text = refused.value.guidance().render_text()
    assert f"none of the 1 file it adds lines to is a file in the repository at {demo.repo}" in text
    assert "'crates/demo-core/src/lib.rs'" in text and "--no-relative" in text
    assert load_against(None, tmp_path / "relative.diff") is not None  # no root given: not checked
    (tmp_path / "root.diff").write_bytes(git(demo.repo, "diff", "--no-color", "main...topic"))
    against = load_against(None, tmp_path / "root.diff", root=demo.repo)  # control
    assert against is not None and against.changes is not None and against.changes.files == 1


def test_the_tree_is_looked_at_without_following_its_links(tmp_path: Path) -> None:
    """A diff's files are looked for under the root with lstat, component by component:
    a directory link or a file link of the tree (here to a real file) is not a file of the
    tree. Control: the real file is, and one real file among missing ones is enough."""
    root, outside = tmp_path / "repo", tmp_path / "outside"
    (root / "src").mkdir(parents=True)
    outside.mkdir()
    (root / "src" / "lib.rs").write_text("fn a() {}\n")
    (outside / "lib.rs").write_text("fn a() {}\n")
    (root / "linked").symlink_to(outside)
    (root / "src" / "alias.rs").symlink_to(root / "src" / "lib.rs")
    (root / "src" / "dir.rs").mkdir()

    def diff_of(*paths: str) -> Path:
        file = tmp_path / "pr.diff"
        file.write_bytes(b"".join(b"diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n@@ -0,0 +1 @@\n+a\n"
                                  % ((p.encode(),) * 4) for p in paths))
        return file

    for paths in (["linked/lib.rs"], ["src/alias.rs"], ["src/dir.rs"], ["src/lib.rs/x"], ["missing.rs"]):
        with pytest.raises(DiffUnusable, match="none of the"):
            load_against(None, diff_of(*paths), root=root)
    for paths in (["src/lib.rs"], ["linked/lib.rs", "missing.rs", "src/lib.rs"]):  # control
        assert load_against(None, diff_of(*paths), root=root) is not None


def test_a_diff_adding_no_line_is_not_looked_for_in_the_tree(tmp_path: Path) -> None:
    """A change that only deletes files adds lines to no file: nothing to look for."""
    (tmp_path / "pr.diff").write_bytes(b"diff --git a/gone.rs b/gone.rs\ndeleted file mode 100644\n"
                                       b"--- a/gone.rs\n+++ /dev/null\n@@ -1 +0,0 @@\n-a\n")
    against = load_against(None, tmp_path / "pr.diff", root=tmp_path / "empty")
    assert against is not None and against.changes is not None and against.changes.files == 0


def test_the_lookups_in_the_tree_are_bounded(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Past MAX_TREE_LOOKUPS lstat calls the look stops, and the refusal says how many
    files it looked for; within it, a real file after missing ones is found (control)."""
    (tmp_path / "repo" / "a").mkdir(parents=True)
    (tmp_path / "repo" / "a" / "real.rs").write_text("x\n")
    missing = [f"a/missing{n}.rs" for n in range(5)]  # two lookups each
    (tmp_path / "pr.diff").write_bytes(b"".join(
        b"diff --git a/%s b/%s\n--- a/%s\n+++ b/%s\n@@ -0,0 +1 @@\n+a\n" % ((p.encode(),) * 4)
        for p in [*missing, "a/real.rs"]))
    monkeypatch.setattr(comparemod, "MAX_TREE_LOOKUPS", 12)
    assert load_against(None, tmp_path / "pr.diff", root=tmp_path / "repo") is not None
    monkeypatch.setattr(comparemod, "MAX_TREE_LOOKUPS", 11)
    with pytest.raises(DiffUnusable, match="none of the first 5 of the 6 files it adds lines to"):
        load_against(None, tmp_path / "pr.diff", root=tmp_path / "repo")


# -- the command line ------------------------------------------------------------------

#: The real command line, with the VM's part replaced by a saved report: configuration,
#: flags, the baseline and diff checks, the renderers and the exit code are the real ones.
PROBE = """
import sys
from pathlib import Path
from roteiro_py import config, lint
from roteiro_py.report import Report
saved = Report.model_validate_json(Path(sys.argv[1]).read_bytes())
def ran(request, progress):
    layers = config.read_layers(request.path, flags=request.flags)
    return saved, config.resolve(request.path, layers=layers).settings
lint.lint = ran
from roteiro_py.cli.app import main
sys.exit(main(sys.argv[2:]))
"""


def cli(run_report: Path, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", PROBE, str(run_report), "lint", "clippy", str(cwd), *args],
                          cwd=cwd, capture_output=True, text=True, timeout=60)


@needs_git
def test_the_command_line_judges_a_pull_request_against_a_saved_baseline(tmp_path: Path) -> None:
    """A rerun on the unchanged tree exits 0 with every finding known; the pull request's
    new finding on an added line fails it and is the only annotation; a diff that adds
    other lines lets it pass, counted as outside the diff."""
    demo = Demo(tmp_path)
    unchanged = tmp_path / "unchanged.json"
    unchanged.write_text(render(demo.lint(), "json"))
    rerun = cli(unchanged, "--baseline", str(SAVED), "--format", "json", cwd=demo.repo / "rust")
    assert rerun.returncode == EXIT_OK, rerun.stderr
    assert [f["baseline"] for f in json.loads(rerun.stdout)["findings"]] == ["known"] * 4
    control = cli(unchanged, "--format", "json", cwd=demo.repo / "rust")  # control: without the baseline
    assert control.returncode == EXIT_FINDINGS, control.stderr
    # a pull request with no net change: git writes an empty diff, and no finding is in it
    # (issue 23: it was a usage error, exit 2, which failed the Action on such a pull request)
    (tmp_path / "none.diff").write_bytes(git(demo.repo, "diff", "--no-color", "main...topic"))
    assert (tmp_path / "none.diff").stat().st_size == 0
    nothing = cli(unchanged, "--diff", str(tmp_path / "none.diff"), "--format", "json", cwd=demo.repo / "rust")
    assert nothing.returncode == EXIT_OK, nothing.stderr
    assert [f["in_diff"] for f in json.loads(nothing.stdout)["findings"]] == [False] * 4
    said = cli(unchanged, "--diff", str(tmp_path / "none.diff"), cwd=demo.repo / "rust")
    assert "0 in the diff, 4 outside the diff (none.diff adds no lines, not shown)" in said.stdout

    demo.edit(LIB, "/// Sums", "pub fn triple(x: i32) -> i32 {\n    return x * 3;\n}\n\n/// Sums")
    pull = tmp_path / "pull.json"
    pull.write_text(render(demo.lint(), "json"))
    (tmp_path / "pr.diff").write_bytes(demo.diff())
    judged = cli(pull, "--baseline", str(SAVED), "--diff", str(tmp_path / "pr.diff"), "--format", "github",
                 cwd=demo.repo / "rust")
    assert judged.returncode == EXIT_FINDINGS, judged.stderr
    provenance, *annotations = [line for line in judged.stdout.splitlines() if line.startswith("::")]
    assert provenance.startswith(PROVENANCE_PREFIX)
    assert len(annotations) == 1 and f"file={LIB},line=9," in annotations[0]
    assert "1 new in the diff, 4 known (in the baseline demo-before-baseline.json" in judged.stdout
    # the same change diffed with --relative in rust/: refused, where it used to pass
    (tmp_path / "relative.diff").write_bytes(git(demo.repo / "rust", "diff", "--no-color", "--relative",
                                                 "main...topic"))
    relative = cli(pull, "--baseline", str(SAVED), "--diff", str(tmp_path / "relative.diff"), "--format",
                   "github", cwd=demo.repo / "rust")
    assert relative.returncode == EXIT_USAGE and "none of the 1 file it adds lines to" in relative.stderr

    (tmp_path / "elsewhere.diff").write_bytes(DIFF.replace(b"src/lib.rs", LIB.encode()))  # adds line 2
    elsewhere = cli(pull, "--baseline", str(SAVED), "--diff", str(tmp_path / "elsewhere.diff"), cwd=demo.repo / "rust")
    assert elsewhere.returncode == EXIT_OK, elsewhere.stderr
    assert "0 new in the diff" in elsewhere.stdout and "1 new outside the diff" in elsewhere.stdout


@needs_git
def test_a_branch_that_hides_its_rust_lines_with_gitattributes_is_refused_not_passed(tmp_path: Path) -> None:
    """The review's attack, through the command line: the branch adds `*.rs -diff` to
    .gitattributes and a new warning; the diff git writes in its checkout shows the Rust
    file as binary. That diff used to pass the run (exit 0: the new finding was "outside
    the diff"); it is refused now, naming the file and the command. The control arm: the
    same change diffed with the guide's command (errors.DIFF_COMMAND, which ignores the
    branch's attributes) fails the run on the new finding."""
    from roteiro_py.errors import DIFF_COMMAND

    demo = Demo(tmp_path)
    (demo.repo / ".gitattributes").write_text("*.rs -diff\n")
    demo.edit(LIB, "/// Sums", "pub fn triple(x: i32) -> i32 {\n    return x * 3;\n}\n\n/// Sums")
    pull = tmp_path / "pull.json"
    pull.write_text(render(demo.lint(), "json"))
    hiding = tmp_path / "hiding.diff"
    hiding.write_bytes(demo.diff())
    assert f"Binary files a/{LIB} and b/{LIB} differ".encode() in hiding.read_bytes()
    judged = cli(pull, "--baseline", str(SAVED), "--diff", str(hiding), "--format", "github", cwd=demo.repo / "rust")
    assert judged.returncode == EXIT_USAGE, (judged.returncode, judged.stdout, judged.stderr)
    said = " ".join(judged.stderr.split())
    assert f"--diff {hiding}, line 10 hides the lines of {LIB}: git wrote it as a binary file" in said
    assert DIFF_COMMAND in said
    made = subprocess.run(["bash", "-c", DIFF_COMMAND.replace("origin/main", "main").replace("> pr.diff", "")],
                          cwd=demo.repo, env={**os.environ, **GIT_ENV}, capture_output=True, check=True).stdout
    (tmp_path / "pr.diff").write_bytes(made)
    control = cli(pull, "--baseline", str(SAVED), "--diff", str(tmp_path / "pr.diff"), "--format", "github",
                  cwd=demo.repo / "rust")
    assert control.returncode == EXIT_FINDINGS, control.stderr
    assert "1 new in the diff, 4 known (in the baseline demo-before-baseline.json" in control.stdout


@pytest.mark.parametrize(("flag", "content", "said"), [
    ("--baseline", b"{}", "not a JSON report"),
    ("--diff", b"--- a/x\n+++ /abs/x\n", "not a path relative"),
    ("--diff", b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n+\0\n", "NUL byte"),
    ("--diff", b"--- a/x\n+++ b/x\n@@ -1,9 +1,9 @@\n+a\n", "ends inside a hunk"),
    ("--diff", DIFF.replace(b" a/", b" i/").replace(b" b/", b" w/"), "do not start with `a/` and `b/`"),
    ("--diff", b"not a diff\n", "not a unified diff"),
    ("--diff", DIFF.replace(b"src/lib.rs", b"lib.rs"), "none of the 1 file it adds lines to"),
])
def test_an_unusable_file_exits_2_before_anything_runs(tmp_path: Path, flag: str, content: bytes,
                                                       said: str) -> None:
    """Through the installed command, no image configured: the file is refused first
    (exit 2, never 4), and a good file lets the run go on to its first check (exit 3)."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (tree / "src" / "lib.rs").write_text("line 1\nold 2\nline 3\nline 4\n")
    bad = tmp_path / "bad-input"
    bad.write_bytes(content)
    result = subprocess.run([str(EXE), "lint", "clippy", str(tree), flag, str(bad)], capture_output=True,
                            text=True, timeout=60)
    assert result.returncode == EXIT_USAGE, result.stderr
    assert str(bad) in result.stderr and said in result.stderr and "Traceback" not in result.stderr
    good = SAVED if flag == "--baseline" else tmp_path / "good.diff"
    if flag == "--diff":
        good.write_bytes(DIFF)
    ok = subprocess.run([str(EXE), "lint", "clippy", str(tree), flag, str(good)], capture_output=True,
                        text=True, timeout=60)
    assert ok.returncode == 3 and "[lint]" in ok.stderr, ok.stderr


def test_a_compared_run_with_uncompared_findings_past_the_cap_is_not_clean() -> None:
    """Findings past the report's cap are counted, never compared: a PR could place its new
    ones last. With a baseline that knows every kept finding the run still exits 1."""
    from roteiro_py.lint.judgement import exit_code

    known = judged_mix()
    only_known = known.model_copy(update={"findings": [f.model_copy(update={"baseline": "known"})
                                                       for f in known.findings]})
    assert exit_code(only_known, "warning") == 0  # control: nothing new, nothing dropped
    dropped = only_known.model_copy(update={"summary": only_known.summary.model_copy(
        update={"dropped_findings": 5000})})
    assert exit_code(dropped, "warning") == 1
    assert exit_code(dropped, "never") == 0
    assert "5000 past the report's cap not compared" in render(dropped, "human")
    plain = dropped.model_copy(update={"comparison": None})
    assert exit_code(plain, "error") == 0  # control: no comparison, the cap judges nothing


def test_a_tree_the_lint_refuses_is_refused_in_the_lints_own_order(tmp_path: Path) -> None:
    """The diff's files are looked for where the lint finds the repository; a path with no
    Cargo.toml has none, so the lint's own checks refuse it in their order (the image not
    configured first, exit 3), not the diff. Control: the same diff on a crate is refused."""
    (tmp_path / "pr.diff").write_bytes(DIFF)

    def lint(tree: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(EXE), "lint", "clippy", str(tree), "--diff", str(tmp_path / "pr.diff")],
                              capture_output=True, text=True, timeout=60)

    (tmp_path / "nothing").mkdir()
    result = lint(tmp_path / "nothing")
    assert result.returncode == 3 and "[lint]" in result.stderr, result.stderr
    (tmp_path / "crate").mkdir()
    (tmp_path / "crate" / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    control = lint(tmp_path / "crate")
    assert control.returncode == EXIT_USAGE and "none of the 1 file it adds lines to" in control.stderr
