"""The action's review step (ci/github/review.sh) as a runner runs it, through the real
`pylint-sandbox review` command, against the API's stand-in (tests/unit/github_standin.py):
what the input may be, which events post, and that a read-only token never fails the step."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path, PurePosixPath

import pytest
from realcargo import DATA, make_report, staged_copy

from roteiro_py.clippy.parse import PathLayout, parse_messages
from tests.unit.github_standin import StandIn, serve

ROOT = Path(__file__).resolve().parents[3]
SCRIPT = ROOT / "ci" / "github" / "review.sh"
CRATE = DATA / "cargo-labels"
TOKEN = "ghs_ScriptToken0123456789abcdef"


@pytest.fixture
def api() -> Iterator[StandIn]:
    yield from serve(StandIn())


@pytest.fixture
def runner(api: StandIn, tmp_path: Path) -> dict[str, str]:
    parsed = parse_messages((CRATE / "clippy.jsonl").read_bytes(),
                            PathLayout(guest_root=PurePosixPath("/guest/repo")), staged=staged_copy(CRATE))
    report = tmp_path / "clippy.json"
    report.write_text(make_report(parsed.findings, build_succeeded=False).model_dump_json())
    lines = (CRATE / "src" / "lib.rs").read_text().splitlines()
    diff = tmp_path / "pr.diff"
    diff.write_text("diff --git a/src/lib.rs b/src/lib.rs\nnew file mode 100644\n--- /dev/null\n+++ b/src/lib.rs\n"
                    f"@@ -0,0 +1,{len(lines)} @@\n" + "".join(f"+{line}\n" for line in lines))
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"pull_request": {"number": 3, "head": {"sha": "b" * 40}}}))
    return {"GITHUB_WORKSPACE": str(CRATE), "GITHUB_EVENT_NAME": "pull_request", "GITHUB_EVENT_PATH": str(event),
            "GITHUB_API_URL": api.url, "GITHUB_REPOSITORY": "octo/repo", "GITHUB_TOKEN": TOKEN,
            "RUNNER_TEMP": str(tmp_path), "REPORT": str(report), "INPUT_REVIEW": "true", "INPUT_DIFF": str(diff)}


def run(env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    path = f"{Path(sys.executable).parent}:{os.environ['PATH']}"
    return subprocess.run(["bash", str(SCRIPT)], env={**os.environ, "PATH": path, **env}, capture_output=True,
                          text=True, timeout=120, check=False)


def test_a_pull_request_gets_its_review(api: StandIn, runner: dict[str, str]) -> None:
    done = run(runner)
    assert done.returncode == 0, done.stderr
    (post,) = api.posts()
    assert post.path == "/repos/octo/repo/pulls/3/reviews"
    assert sorted(c["line"] for c in post.body["comments"]) == [2, 6]  # lib.rs; main.rs is listed
    assert TOKEN not in done.stdout + done.stderr


def test_a_read_only_token_passes_and_leaves_the_annotations_to_the_lint_step(
        api: StandIn, runner: dict[str, str]) -> None:
    api.post_status = 403
    done = run(runner)
    assert done.returncode == 0, done.stderr
    assert "read-only token" in done.stdout and "the lint's own annotations stand" in done.stdout
    # the lint step (lint.sh --format=github) printed them; twice would double them on the page
    assert "::warning" not in done.stdout and len(api.posts()) == 1


@pytest.mark.parametrize(("change", "status", "says"), [
    ({"INPUT_REVIEW": "yes"}, 2, "the input review is 'yes': true or false"),
    ({"INPUT_REVIEW": "false"}, 0, ""),
    ({"GITHUB_EVENT_NAME": "push"}, 0, "only a pull request's job posts a review"),
    ({"REPORT": ""}, 0, "the lint wrote no report"),
])
def test_no_review_is_posted_unless_asked_on_a_pull_request(api: StandIn, runner: dict[str, str],
                                                            change: dict[str, str], status: int, says: str) -> None:
    done = run({**runner, **change})
    assert done.returncode == status and says in done.stdout + done.stderr
    assert api.seen == []
