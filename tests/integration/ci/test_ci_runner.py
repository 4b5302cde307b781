"""The action's and the GitLab template's scripts, run as their runners run them, with real
lints (TCG, opted in through the accel input as a user would; no ROTEIRO_VM_ACCEL is set
here): what lands in the runner's files (GITHUB_OUTPUT, GITHUB_STEP_SUMMARY), the reports
checked against their consumers' schemas, the annotations in the log, and the exit status
per fail-on. Four lints in all (each ~15-20 s under TCG)."""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import jsonschema  # type: ignore[import-untyped]

from roteiro_py.report.github import PROVENANCE_PREFIX
from tests.integration.ci.ci_support import GIT_ENV, git
from tests.integration.lint.lint_support import HOME, ROOT, Image

CI = ROOT / "ci"
DATA = ROOT / "tests" / "data"
#: The schemas the unit tests of the report formats validate against (tests/unit/report).
SARIF_SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())
GITLAB_SCHEMA = json.loads((DATA / "gitlab" / "code-quality.schema.json").read_text())


def run(script: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """bash SCRIPT with the tool first on PATH (as the install step leaves it), in the
    environment a runner gives plus `env`."""
    assert "ROTEIRO_VM_ACCEL" not in os.environ  # tests/conftest.py removed it: only the input may opt in
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(script)],
                          env={**os.environ, **GIT_ENV, "PATH": path, "ROTEIRO_HOME": str(HOME), **env},
                          capture_output=True, text=True, timeout=900, check=False)


#: The install step's image-key output, which action.yml hands the prepare step.
INSTALL_IMAGE_KEY = "c" * 32


def github(checkout: Path, tmp_path: Path, image: Image, **inputs: str) -> dict[str, str]:
    """A runner's environment for the action's steps, with the action's INPUT_* variables."""
    for name in ("output", "summary", "env"):
        (tmp_path / name).write_text("")
    (tmp_path / "runner-temp").mkdir(exist_ok=True)
    env = {"GITHUB_WORKSPACE": str(checkout), "GITHUB_EVENT_NAME": "push", "GITHUB_OUTPUT": str(tmp_path / "output"),
           "GITHUB_STEP_SUMMARY": str(tmp_path / "summary"), "GITHUB_ENV": str(tmp_path / "env"),
           "RUNNER_TEMP": str(tmp_path / "runner-temp"), "IMAGE_KEY": INSTALL_IMAGE_KEY,
           "INPUT_PATH": ".", "INPUT_IMAGE": image.reference, "INPUT_FAIL_ON": "warning", "INPUT_CATEGORY": "clippy",
           "INPUT_SARIF": "true", "INPUT_BASELINE": "", "INPUT_DIFF": "auto", "INPUT_ACCEL": "tcg", "INPUT_ARGS": ""}
    return {**env, **{f"INPUT_{k.upper()}": v for k, v in inputs.items()}}


def outputs(path: Path) -> dict[str, str]:
    return dict(line.split("=", 1) for line in path.read_text().splitlines())


def test_a_push_fails_on_warnings_with_every_output(checkout: Path, clippy_image: Image, tmp_path: Path) -> None:
    env = github(checkout, tmp_path, clippy_image)
    prepared = run(CI / "github" / "prepare.sh", env)
    assert prepared.returncode == 0, prepared.stdout + prepared.stderr
    assert "this host can lint" in prepared.stdout  # the doctor gate ran, and passed
    manifest = HOME / "vm" / "manifest.json"
    # a pinned image is the one the install step keyed: the caches are saved under its key
    assert outputs(tmp_path / "output") == {"image-key": INSTALL_IMAGE_KEY,
                                            "vm-key": hashlib.sha256(manifest.read_bytes()).hexdigest()[:32]}

    (tmp_path / "output").write_text("")
    done = run(CI / "github" / "lint.sh", env)
    assert done.returncode == 1, done.stdout + done.stderr

    report = json.loads((checkout / "clippy.json").read_text())
    total = report["summary"]["total"]
    assert total == report["summary"]["counts"]["warning"] == 3  # the demo's, default targets
    assert outputs(tmp_path / "output") == {"exit-code": "1", "findings": str(total), "new-findings": str(total),
                                            "known-findings": "0", "sarif": str(checkout / "clippy.sarif"),
                                            "report": str(checkout / "clippy.json")}

    sarif = json.loads((checkout / "clippy.sarif").read_text())
    jsonschema.validate(sarif, SARIF_SCHEMA)
    assert sarif["runs"][0]["automationDetails"]["id"].startswith("clippy")
    assert len(sarif["runs"][0]["results"]) == total

    summary = (tmp_path / "summary").read_text()
    assert summary.startswith(f"### clippy: {total} findings ({total} warnings); build succeeded\n")
    assert "| warning | 3 |" in summary and "clippy::needless_return" in summary
    assert "| error" not in summary and "| note" not in summary  # only levels with findings

    annotations = [line for line in done.stdout.splitlines() if line.startswith("::warning ")]
    assert len(annotations) == total
    assert any("file=crates/demo-core/src/lib.rs,line=5" in line for line in annotations)
    # the one other command is the run's provenance (report/github.py), naming the isolation
    provenance = [line for line in done.stdout.splitlines() if line.startswith(PROVENANCE_PREFIX)]
    assert len(provenance) == 1 and "isolation: QEMU microvm" in provenance[0]
    assert all(not line.startswith("::") for line in done.stdout.splitlines()
               if line not in annotations and line not in provenance)

    finished = run(CI / "github" / "finish.sh", {"EXIT_CODE": "1", "LINT_OUTCOME": "failure", "FAIL_ON": "warning"})
    assert finished.returncode == 1 and finished.stdout.startswith("::error title=pylint-sandbox::clippy findings")


def test_fail_on_never_passes_the_same_findings(checkout: Path, clippy_image: Image, tmp_path: Path) -> None:
    done = run(CI / "github" / "lint.sh", github(checkout, tmp_path, clippy_image, fail_on="never", sarif="false"))
    assert done.returncode == 0, done.stdout + done.stderr
    assert outputs(tmp_path / "output") == {"exit-code": "0", "findings": "3", "new-findings": "3",
                                            "known-findings": "0", "sarif": "",
                                            "report": str(checkout / "clippy.json")}
    assert not (checkout / "clippy.sarif").exists()  # sarif: false writes none (and nothing is uploaded)
    assert sum(line.startswith("::warning ") for line in done.stdout.splitlines()) == 3
    finished = run(CI / "github" / "finish.sh", {"EXIT_CODE": "0", "LINT_OUTCOME": "success"})
    assert finished.returncode == 0 and finished.stdout == ""


def multiline_outputs(path: Path) -> dict[str, str]:
    """GITHUB_OUTPUT as the runner reads it, `name<<DELIMITER` blocks included."""
    found, lines = {}, iter(path.read_text().splitlines())
    for line in lines:
        if "<<" in line and "=" not in line.split("<<", 1)[0]:
            name, delimiter = line.split("<<", 1)
            found[name] = "\n".join(iter(lambda: next(lines), delimiter))
        else:
            name, value = line.split("=", 1)
            found[name] = value
    return found


def test_attest_hands_actions_attest_the_predicate_and_the_reports(checkout: Path, clippy_image: Image,
                                                                   tmp_path: Path) -> None:
    """What the action's attest step receives: the predicate of the statement the lint
    wrote, and the report files that statement names by digest; `verify` accepts them."""
    from tests.unit.report.test_attest import validate

    done = run(CI / "github" / "lint.sh", github(checkout, tmp_path, clippy_image, attest="true"))
    assert done.returncode == 1, done.stdout + done.stderr  # the demo's warnings, as without attest
    given = multiline_outputs(tmp_path / "output")
    statement_path, predicate_path = Path(given["attestation"]), Path(given["predicate"])
    assert statement_path.parent.parent == tmp_path / "runner-temp"  # never in the checkout
    statement = json.loads(statement_path.read_text())
    validate(statement)
    assert json.loads(predicate_path.read_text()) == statement["predicate"]
    subjects = given["attest-subjects"].split("\n")
    assert subjects == [str(checkout / "clippy.json"), str(checkout / "clippy.sarif")]
    assert sorted(hashlib.sha256(Path(p).read_bytes()).hexdigest() for p in subjects) == \
        sorted(s["digest"]["sha256"] for s in statement["subject"])
    tree = next(d for d in statement["predicate"]["buildDefinition"]["resolvedDependencies"] if d["name"] == "tree")
    assert tree["digest"]["gitCommit"] == git(checkout, "rev-parse", "HEAD").strip()
    verified = subprocess.run([str(Path(sys.executable).with_name("pylint-sandbox")), "verify", *subjects,
                               "--attestation", str(statement_path), "--allow-unsigned",
                               "--require", "isolation=tcg"],
                              capture_output=True, text=True, timeout=60, check=False)
    assert verified.returncode == 0, verified.stderr
    assert "signature: NOT checked" in verified.stdout  # actions/attest signs it, not the tool


def test_a_pull_request_adding_no_finding_passes_on_its_own_diff(checkout: Path, clippy_image: Image,
                                                                  tmp_path: Path) -> None:
    """The script fetches origin/main and makes the diff itself. The tree still has the three
    warnings that fail a push (the test above); they are outside the diff, so they do not
    fail the pull request, and the report says so."""
    git(checkout, "checkout", "-qb", "feature")
    lib = checkout / "crates" / "demo-core" / "src" / "lib.rs"
    lines = lib.read_text().splitlines(keepends=True)
    lines[2:2] = ["/// Triples `x`.\n", "pub fn triple(x: i32) -> i32 {\n", "    x * 3\n", "}\n", "\n"]
    lib.write_text("".join(lines))
    git(checkout, "commit", "-qam", "a clean function")
    assert not git(checkout, "branch", "-r")  # no origin/main yet: the script must fetch it

    done = run(CI / "github" / "lint.sh", github(checkout, tmp_path, clippy_image) | {
        "GITHUB_EVENT_NAME": "pull_request", "GITHUB_BASE_REF": "main"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "linting against the diff of this pull request with origin/main" in done.stderr
    report = json.loads((checkout / "clippy.json").read_text())
    assert report["summary"]["total"] == report["summary"]["outside_diff"] == 3
    assert {(f["code"], f["line"], f["in_diff"]) for f in report["findings"]} == {
        ("clippy::needless_return", 10, False), ("clippy::clone_on_copy", 17, False),  # 5 lines down
        ("clippy::len_zero", 5, False)}
    assert not [line for line in done.stdout.splitlines() if line.startswith("::warning ")]
    said = outputs(tmp_path / "output")
    assert (said["exit-code"], said["findings"], said["new-findings"], said["known-findings"]) == ("0", "3", "0", "3")
    jsonschema.validate(json.loads((checkout / "clippy.sarif").read_text()), SARIF_SCHEMA)
    # the summary names the diff for what it is, never the temporary file's random name
    summary = (tmp_path / "summary").read_text()
    assert summary.startswith("### clippy: 0 new, 3 known of 3 findings (3 warnings); build succeeded\n")
    assert "` origin_main...HEAD.diff ` adds lines to 1 file" in summary and "pylint-sandbox-pr" not in summary


def test_a_pull_request_with_no_net_change_is_linted_and_adds_nothing(checkout: Path, clippy_image: Image,
                                                                      tmp_path: Path) -> None:
    """Issue 23: git writes an empty diff for it, which the lint refused as a usage error
    (exit 2), failing the pull request. Now it is linted: the tree's three warnings are all
    known (outside a diff that adds nothing), the job passes, and the summary says why."""
    git(checkout, "checkout", "-qb", "feature")
    readme = checkout / "NOTES.md"
    readme.write_text("a note\n")
    git(checkout, "add", "NOTES.md")
    git(checkout, "commit", "-qm", "add a note")
    git(checkout, "rm", "-q", "NOTES.md")
    git(checkout, "commit", "-qm", "and take it back")

    done = run(CI / "github" / "lint.sh", github(checkout, tmp_path, clippy_image) | {
        "GITHUB_EVENT_NAME": "pull_request", "GITHUB_BASE_REF": "main"})
    assert done.returncode == 0, done.stdout + done.stderr
    assert "this pull request adds no lines to origin/main (no net change)" in done.stderr
    said = outputs(tmp_path / "output")
    assert (said["exit-code"], said["findings"], said["new-findings"], said["known-findings"]) == ("0", "3", "0", "3")
    summary = (tmp_path / "summary").read_text()
    assert summary.startswith("### clippy: 0 new, 3 known of 3 findings (3 warnings); this change adds no lines; ")
    assert "` origin_main...HEAD.diff ` adds no lines" in summary
    report = json.loads((checkout / "clippy.json").read_text())
    assert [f["in_diff"] for f in report["findings"]] == [False] * 3
    assert not [line for line in done.stdout.splitlines() if line.startswith("::warning ")]


def test_the_gitlab_job_fails_on_warnings_with_a_code_quality_report(checkout: Path, clippy_image: Image) -> None:
    env = {"CI_PROJECT_DIR": str(checkout), "CI_PIPELINE_SOURCE": "push",
           "PYLINT_SANDBOX_IMAGE": clippy_image.reference, "PYLINT_SANDBOX_ACCEL": "tcg",
           "PYLINT_SANDBOX_FAIL_ON": "warning"}
    done = run(CI / "gitlab" / "lint.sh", env)
    assert done.returncode == 1, done.stdout + done.stderr
    assert "this host can lint" in done.stdout  # the doctor gate
    quality = json.loads((checkout / "gl-code-quality-report.json").read_text())
    jsonschema.validate(quality, GITLAB_SCHEMA)
    report = json.loads((checkout / "clippy.json").read_text())
    assert len(quality) == report["summary"]["total"] == 3
    assert {(issue["check_name"], issue["location"]["path"]) for issue in quality} == {
        ("clippy::needless_return", "crates/demo-core/src/lib.rs"),
        ("clippy::clone_on_copy", "crates/demo-core/src/lib.rs"), ("clippy::len_zero", "crates/demo-app/src/main.rs")}
    # the human report, in the job's log
    assert re.search(r"^warning\[clippy::needless_return\]: unneeded `return` statement$", done.stdout, re.M)
    assert "pylint-sandbox: error: clippy findings at or above fail-on (warning)" in done.stderr
