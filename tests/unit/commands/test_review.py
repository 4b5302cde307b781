"""`review` against a stand-in for GitHub's API (issue 23 §3), driving the real poster.

The stand-in is an http.server on loopback, in a thread: it records every request
(method, path, headers, JSON body), serves the pull request's comments and reviews (those
it accepted earlier, as GitHub lists them, by `github-actions[bot]`), and answers a POST
with the status a test chooses (201, 403, 422). It is a fake because GitHub cannot be made
to answer on demand here; the reports are real: cargo's own JSON for tests/data/cargo-labels
(a clippy suggestion and a rustc one, both machine-applicable), parsed by clippy/parse.py.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from markdown_it import MarkdownIt
from realcargo import DATA, make_report, staged_copy

from roteiro_py.clippy.parse import PathLayout, parse_messages
from roteiro_py.commands import github_api
from roteiro_py.commands.review import ReviewRequest, run_review
from roteiro_py.errors import ReviewUnavailable
from roteiro_py.report.fingerprint import fingerprints
from roteiro_py.report.github import ANNOTATION_LIMIT
from roteiro_py.report.github_review import MAX_COMMENTS_PER_REVIEW
from roteiro_py.report.model import Comparison, Finding, Report
from tests.unit.github_standin import StandIn, serve

CRATE = DATA / "cargo-labels"
TOKEN = "ghs_S3cretTokenValue0123456789"
HEAD = "c0ffee" + "0" * 34
NUMBER = 7
REVIEWS = f"/repos/octo/repo/pulls/{NUMBER}/reviews"


@pytest.fixture
def api() -> Iterator[StandIn]:
    yield from serve(StandIn())


@pytest.fixture
def elsewhere() -> Iterator[StandIn]:
    """A second server: another origin (another port)."""
    yield from serve(StandIn())


@pytest.fixture(scope="module")
def labels_report() -> Report:
    parsed = parse_messages((CRATE / "clippy.jsonl").read_bytes(),
                            PathLayout(guest_root=PurePosixPath("/guest/repo")), staged=staged_copy(CRATE))
    return make_report(parsed.findings, build_succeeded=False)


def environ(api: StandIn, tmp_path: Path, *, event: Any = None) -> dict[str, str]:
    path = tmp_path / "event.json"
    path.write_text(json.dumps(event if event is not None else
                               {"pull_request": {"number": NUMBER, "head": {"sha": HEAD}}}))
    return {"GITHUB_TOKEN": TOKEN, "GITHUB_API_URL": api.url, "GITHUB_REPOSITORY": "octo/repo",
            "GITHUB_EVENT_PATH": str(path)}


def added_diff(tree: Path, paths: dict[str, list[int]]) -> str:
    """A git diff that adds the given lines of each file (the rest of it unchanged)."""
    out = []
    for name, added in paths.items():
        lines = (tree / name).read_text().splitlines()
        out += [f"diff --git a/{name} b/{name}", f"--- a/{name}", f"+++ b/{name}",
                f"@@ -1,{len(lines) - len(added)} +1,{len(lines)} @@"]
        out += [("+" if number in added else " ") + text for number, text in enumerate(lines, start=1)]
    return "\n".join(out) + "\n"


def review(api: StandIn, tmp_path: Path, report: Report, tree: Path, diff: dict[str, list[int]] | None,
           **env: Any) -> int:
    saved = tmp_path / "clippy.json"
    saved.write_text(report.model_dump_json())
    diff_file = None
    if diff is not None:
        diff_file = tmp_path / "pr.diff"
        diff_file.write_text(added_diff(tree, diff))
    return run_review(ReviewRequest(report=saved, tree=tree, diff=diff_file,
                                    environ={**environ(api, tmp_path), **env}))


def suggestion_blocks(body: str) -> list[str]:
    return [token.content for token in MarkdownIt("commonmark").parse(body)
            if token.type == "fence" and token.info.strip() == "suggestion"]


def test_comments_land_on_their_lines_with_the_replaced_lines_as_suggestions(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2, 6], "src/main.rs": [2]}) == 0
    (post,) = api.posts()
    assert post.path == REVIEWS
    assert post.headers["Authorization"] == f"Bearer {TOKEN}"
    assert post.body["commit_id"] == HEAD and post.body["event"] == "COMMENT"
    placed = {(c["path"], c["line"], c["side"]): c["body"] for c in post.body["comments"]}
    assert set(placed) == {("src/lib.rs", 2, "RIGHT"), ("src/lib.rs", 6, "RIGHT"), ("src/main.rs", 2, "RIGHT")}
    # The block is the whole new text of the commented line, as rustc's fix makes it
    # (parse.py's `after`, from the staged copy), and applying it gives cargo's fix.
    assert suggestion_blocks(placed[("src/lib.rs", 2, "RIGHT")]) == ["    x * 2\n"]
    assert suggestion_blocks(placed[("src/lib.rs", 6, "RIGHT")]) == ["    let _unused = 3;\n"]
    fixes = {f.line: f.fixes[0].after for f in labels_report.findings if f.fixes}
    assert fixes == {2: "    x * 2", 6: "    let _unused = 3;"}
    assert suggestion_blocks(placed[("src/main.rs", 2, "RIGHT")]) == []  # E0308 has no fix
    out = capsys.readouterr().out
    assert "posted 1 review with 3 comments" in out and TOKEN not in out


def test_a_finding_off_the_diff_is_listed_in_the_body_not_commented(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    (post,) = api.posts()
    assert [(c["path"], c["line"]) for c in post.body["comments"]] == [("src/lib.rs", 2)]
    assert "src/lib.rs:6: warning[unused_variables]" in post.body["body"]
    assert "src/main.rs:2: error[E0308]" in post.body["body"]


def test_a_suggestion_on_a_changed_file_is_not_offered(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(CRATE, tree)
    source = tree / "src" / "lib.rs"
    source.write_text(source.read_text().replace("return x * 2;", "return x * 3;"))
    assert review(api, tmp_path, labels_report, tree, {"src/lib.rs": [2, 6]}) == 0
    bodies = {c["line"]: c["body"] for c in api.posts()[0].body["comments"]}
    assert suggestion_blocks(bodies[2]) == []
    assert "the file changed since the lint" in bodies[2]
    assert suggestion_blocks(bodies[6]) == ["    let _unused = 3;\n"]  # control: unchanged line
    assert "src/lib.rs:2: no suggested change: the fix's the file changed" in capsys.readouterr().out


def test_a_source_that_is_a_link_gives_no_suggestion(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    tree = tmp_path / "tree"
    shutil.copytree(CRATE, tree)
    secret = tmp_path / "secret.rs"
    shutil.copy(tree / "src" / "lib.rs", secret)  # the same text: only the link refuses it
    (tree / "src" / "lib.rs").unlink()
    (tree / "src" / "lib.rs").symlink_to(secret)
    diff = {"src/lib.rs": [2, 6]}
    saved_diff_tree = tmp_path / "difftree"
    shutil.copytree(CRATE, saved_diff_tree)
    saved = tmp_path / "clippy.json"
    saved.write_text(labels_report.model_dump_json())
    (tmp_path / "pr.diff").write_text(added_diff(saved_diff_tree, diff))
    assert run_review(ReviewRequest(report=saved, tree=tree, diff=tmp_path / "pr.diff",
                                    environ=environ(api, tmp_path))) == 0
    bodies = [c["body"] for c in api.posts()[0].body["comments"]]
    assert all(suggestion_blocks(body) == [] for body in bodies)
    assert all("the file could not be read" in body for body in bodies)


def many(report: Report, tree: Path, count: int) -> Report:
    """`count` findings, one a line of a file written for them."""
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "many.rs").write_text("".join(f"fn f{n}() {{ let x{n} = {n}; }}\n" for n in range(count)))
    template = next(f for f in report.findings if f.code == "unused_variables")
    findings = [Finding(code="unused_variables", level="warning", message=f"unused variable: `x{n}`",
                        path="src/many.rs", line=n + 1, column=14, end_line=n + 1, end_column=15 + len(str(n)),
                        fixes=[]) for n in range(count)]
    assert template.code == "unused_variables"
    return make_report(findings)


def test_more_findings_than_annotations_are_all_commented_in_batches(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    tree = tmp_path / "tree"
    report = many(labels_report, tree, 60)
    assert review(api, tmp_path, report, tree, {"src/many.rs": list(range(1, 61))}) == 0
    posts = api.posts()
    assert [len(p.body["comments"]) for p in posts] == [MAX_COMMENTS_PER_REVIEW, 60 - MAX_COMMENTS_PER_REVIEW]
    assert sorted(c["line"] for p in posts for c in p.body["comments"]) == list(range(1, 61))
    assert "Review 1 of 2" in posts[0].body["body"] and "Review 2 of 2" in posts[1].body["body"]
    # control: the annotations would have shown ANNOTATION_LIMIT of them
    assert ANNOTATION_LIMIT < 60


def test_a_rerun_posts_nothing_already_posted(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    diff = {"src/lib.rs": [2]}
    assert review(api, tmp_path, labels_report, CRATE, diff) == 0
    first = api.posts()[0].body
    assert review(api, tmp_path, labels_report, CRATE, diff) == 0
    assert len(api.posts()) == 1  # nothing new: no second review, not even an empty one
    assert "nothing new to post (3 findings already commented" in capsys.readouterr().out
    expected = set(fingerprints(labels_report.findings))
    assert all(f"<!-- pylint-sandbox:{fp} -->" in json.dumps(first).replace("\\n", "\n") for fp in expected)


def test_a_marker_quoted_by_a_person_does_not_count_as_posted(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    """Control of the test above: the same markers, in a person's comment, suppress nothing."""
    quoted = "".join(f"<!-- pylint-sandbox:{fp} -->" for fp in fingerprints(labels_report.findings))
    api.comments.append({"user": {"login": "mallory", "type": "User"}, "body": quoted})
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2, 6], "src/main.rs": [2]}) == 0
    assert len(api.posts()[0].body["comments"]) == 3


def test_a_token_that_may_not_write_falls_back_to_annotations(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    api.post_status = 403
    api.message = f"Resource not accessible by integration {TOKEN}"  # an answer quoting the token
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2, 6]}) == 0
    out = capsys.readouterr().out
    assert "::warning file=src/lib.rs,line=2" in out and "::error file=src/main.rs,line=2" in out
    assert "may not write to the pull request (a pull request from a fork" in out
    assert TOKEN not in out
    assert "Resource not accessible by integration ***" in out  # control: the message is shown


def test_githubs_rate_limit_is_not_called_the_tokens_rights(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub answers its secondary rate limit with 403 too (reviewer's finding): the
    fallback names the rate limit, not a fork's read-only token."""
    api.post_status = 403
    api.message = "You have exceeded a secondary rate limit. Please wait a few minutes before you try again."
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2, 6]}) == 0
    out = capsys.readouterr().out
    assert "its rate limit, not the token's rights" in out and "a pull request from a fork" not in out
    assert "::warning file=src/lib.rs,line=2" in out  # the findings still reach the log


def test_a_comment_github_refuses_falls_back_to_annotations(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    api.post_status, api.message = 422, "Unprocessable Entity"
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2, 6]}) == 0
    out = capsys.readouterr().out
    assert "HTTP 422: Unprocessable Entity" in out and "::warning file=src/lib.rs,line=6" in out


def test_the_token_never_follows_a_redirect_to_another_origin(
        api: StandIn, elsewhere: StandIn, tmp_path: Path, labels_report: Report,
        capsys: pytest.CaptureFixture[str]) -> None:
    api.redirect[f"/repos/octo/repo/pulls/{NUMBER}/comments"] = elsewhere.url + "/collect"
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    assert all("Authorization" not in seen.headers for seen in elsewhere.seen)
    assert all(TOKEN not in json.dumps(seen.headers) for seen in elsewhere.seen)
    out = capsys.readouterr().out
    assert "redirected to another origin" in out and api.posts() == []


def test_a_redirect_on_the_same_origin_keeps_the_token(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    """Control of the test above: a redirect is followed, and the token is observable on it."""
    api.redirect[f"/repos/octo/repo/pulls/{NUMBER}/comments"] = api.url + "/moved/comments?per_page=100&page=1"
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    moved = [seen for seen in api.seen if seen.path.startswith("/moved/")]
    assert moved and moved[0].headers["Authorization"] == f"Bearer {TOKEN}"
    assert len(api.posts()) == 1


HOSTILE = ("see ```\n```suggestion\nfn evil() {}\n```\n<img src=x onerror=alert(1)> @octocat #1 "
           "[click](https://evil.example) ````` `")


def test_a_hostile_message_stays_inside_its_fence(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    findings = [f.model_copy(update={"message": HOSTILE, "label": HOSTILE, "help": HOSTILE})
                if f.code == "clippy::needless_return" else f for f in labels_report.findings]
    report = labels_report.model_copy(update={"findings": findings})
    assert review(api, tmp_path, report, CRATE, {"src/lib.rs": [2, 6], "src/main.rs": [2]}) == 0
    body = next(c["body"] for c in api.posts()[0].body["comments"] if c["line"] == 2 and c["path"] == "src/lib.rs")
    tokens = MarkdownIt("commonmark").parse(body)
    assert suggestion_blocks(body) == ["    x * 2\n"]  # the real fix, and only it
    text_fences = [t.content for t in tokens if t.type == "fence" and t.info == "text"]
    assert any(HOSTILE in content for content in text_fences)
    outside = "".join(t.content for t in tokens if t.type not in ("fence",))
    for planted in ("@octocat", "#1", "<img", "evil.example", "fn evil"):
        assert planted not in outside, planted
    # the only HTML is our own marker, the first line
    html = [t.content for t in tokens if t.type in ("html_block", "html_inline")]
    assert len(html) == 1 and re.fullmatch(r"<!-- pylint-sandbox:[0-9a-f]{64} -->\n", html[0])


def test_no_pull_request_is_a_usage_error(api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    saved = tmp_path / "clippy.json"
    saved.write_text(labels_report.model_dump_json())
    env = environ(api, tmp_path, event={"push": {"head": HEAD}})
    with pytest.raises(ReviewUnavailable, match="pull_request.number"):
        run_review(ReviewRequest(report=saved, tree=CRATE, environ=env))
    env = {**environ(api, tmp_path), "GITHUB_API_URL": "http://api.example.com"}
    with pytest.raises(ReviewUnavailable, match="not https"):
        run_review(ReviewRequest(report=saved, tree=CRATE, environ=env))
    assert api.seen == []


def test_a_finding_outside_the_lints_diff_is_counted_not_reviewed(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    findings = [f.model_copy(update={"in_diff": f.path == "src/lib.rs"}) for f in labels_report.findings]
    report = labels_report.model_copy(update={
        "findings": findings, "comparison": Comparison(diff="@octocat.diff", diff_files=1)})
    assert review(api, tmp_path, report, CRATE, {"src/lib.rs": [2, 6], "src/main.rs": [2]}) == 0
    (post,) = api.posts()
    assert sorted((c["path"], c["line"]) for c in post.body["comments"]) == [("src/lib.rs", 2), ("src/lib.rs", 6)]
    body = post.body["body"]
    assert "1 outside the diff (@octocat.diff adds lines to 1 file, not reviewed)" in body
    assert "src/main.rs:2" not in body  # not gating: counted, not listed
    tokens = MarkdownIt("commonmark").parse(body)
    assert "@octocat" not in "".join(t.content for t in tokens if t.type != "fence")  # the name is fenced


def test_a_server_that_trickles_is_cut_at_the_deadline(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(github_api, "REQUEST_TIMEOUT_S", 1.0)
    api.stall = 6.0
    started = time.monotonic()
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    assert time.monotonic() - started < 4
    assert "could not be posted" in capsys.readouterr().out and api.posts() == []


def test_an_answer_past_its_bound_is_not_read(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(github_api, "MAX_RESPONSE_BYTES", 1000)
    api.comments = [{"user": {"type": "User"}, "body": "x" * 2000}]
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    assert "the answer is larger than 1000 bytes" in capsys.readouterr().out and api.posts() == []
    api.comments = [{"user": {"type": "User"}, "body": "x" * 500}]  # control: within it
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    assert len(api.posts()) == 1


def test_without_a_diff_only_single_line_findings_the_lint_placed_in_its_diff_are_commented(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    findings = [f.model_copy(update={"in_diff": f.code == "clippy::needless_return"}) for f in labels_report.findings]
    report = labels_report.model_copy(update={"findings": findings})
    assert review(api, tmp_path, report, CRATE, None) == 0
    (post,) = api.posts()
    assert [(c["path"], c["line"]) for c in post.body["comments"]] == [("src/lib.rs", 2)]


@pytest.mark.parametrize("url", ["http://api.example.com", "http://localhost:8080", "ftp://127.0.0.1",
                                 "file:///etc/passwd"])
def test_an_api_url_that_is_not_https_is_refused_before_anything_is_sent(
        api: StandIn, tmp_path: Path, labels_report: Report, url: str) -> None:
    saved = tmp_path / "clippy.json"
    saved.write_text(labels_report.model_dump_json())
    with pytest.raises(ReviewUnavailable, match="not https"):
        run_review(ReviewRequest(report=saved, tree=CRATE, environ={**environ(api, tmp_path), "GITHUB_API_URL": url}))
    assert api.seen == []


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@example.com",
                           "-c", "commit.gpgsign=false", *args],
                          check=True, capture_output=True, text=True).stdout.strip()


def checkout_of(tmp_path: Path, head_lib: str | None) -> tuple[Path, str]:
    """The crate as a git checkout whose working files are the ones the report was made
    from; the pull request's head commit has src/lib.rs as `head_lib` (None: as checked out)."""
    tree = tmp_path / "tree"
    shutil.copytree(CRATE, tree)
    linted = (tree / "src" / "lib.rs").read_text()
    git(tree, "init", "-q")
    if head_lib is not None:
        (tree / "src" / "lib.rs").write_text(head_lib)
    git(tree, "add", "-A")
    git(tree, "commit", "-q", "-m", "head")
    (tree / "src" / "lib.rs").write_text(linted)
    return tree, git(tree, "rev-parse", "HEAD")


def test_a_file_of_the_checkout_that_is_not_the_heads_gets_no_comment(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    """GitHub places a comment by the line numbers of the head commit's file (commit_id),
    while the lint numbered the lines of the checkout: on a `pull_request` event that is
    the merge commit, whose file differs from the head's wherever the base changed it. A
    comment there lands on another line, and its suggestion replaces the wrong lines."""
    original = (CRATE / "src" / "lib.rs").read_text()
    tree, head = checkout_of(tmp_path, "// two lines the base\n// has since removed\n" + original)
    event = {"pull_request": {"number": NUMBER, "head": {"sha": head}}}
    diff = {"src/lib.rs": [2, 6], "src/main.rs": [2]}
    assert review(api, tmp_path, labels_report, tree, diff,
                  GITHUB_EVENT_PATH=str(event_file(tmp_path, event))) == 0
    (post,) = api.posts()
    assert [(c["path"], c["line"]) for c in post.body["comments"]] == [("src/main.rs", 2)]
    assert "src/lib.rs:2: warning" in post.body["body"]  # listed in the body instead
    assert "src/lib.rs is not the pull request head's" in capsys.readouterr().out


def test_a_checkout_at_the_head_gets_its_comments(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    """Control of the test above: the same checkout at the head commit itself."""
    tree, head = checkout_of(tmp_path, None)
    event = {"pull_request": {"number": NUMBER, "head": {"sha": head}}}
    assert review(api, tmp_path, labels_report, tree, {"src/lib.rs": [2, 6], "src/main.rs": [2]},
                  GITHUB_EVENT_PATH=str(event_file(tmp_path, event))) == 0
    assert len(api.posts()[0].body["comments"]) == 3


def test_a_checkout_without_the_head_commit_gets_no_comment(
        api: StandIn, tmp_path: Path, labels_report: Report) -> None:
    """A shallow merge checkout (fetch-depth: 1) lacks the head commit: nothing can be
    compared, so nothing is placed, every finding is listed."""
    tree, _ = checkout_of(tmp_path, None)
    assert review(api, tmp_path, labels_report, tree, {"src/lib.rs": [2, 6], "src/main.rs": [2]}) == 0
    (post,) = api.posts()
    assert post.body["comments"] == []
    assert "src/lib.rs:2: warning" in post.body["body"]


def event_file(tmp_path: Path, event: Any) -> Path:
    path = tmp_path / "event-head.json"
    path.write_text(json.dumps(event))
    return path


def test_a_redirected_post_is_not_followed_as_a_get_and_called_posted(
        api: StandIn, tmp_path: Path, labels_report: Report, capsys: pytest.CaptureFixture[str]) -> None:
    """urllib follows a 301/302/303 of a POST with a GET of the new URL, its body dropped:
    the review is never sent, yet the GET's answer read as GitHub's acceptance of it."""
    api.post_redirect[REVIEWS] = api.url + f"/repos/octo/repo/pulls/{NUMBER}/comments?per_page=100&page=1"
    assert review(api, tmp_path, labels_report, CRATE, {"src/lib.rs": [2]}) == 0
    out = capsys.readouterr().out
    assert "posted 1 review" not in out
    assert "could not be posted" in out and "HTTP 302" in out
    assert [seen.method for seen in api.seen].count("POST") == 1
