"""`pylint-sandbox review REPORT.json`: a saved report as review comments on the pull request.

Run by the Action's review step (ci/github/review.sh) after the lint, in the same checkout.
It reads the report (report/load.py), the pull request's diff (`--diff`, compare/diff.py)
and the tree's files (one bounded reader that follows no link), builds the reviews
(report/github_review.py: comments only on lines the diff adds, machine-applicable
suggestions as GitHub's suggested changes, every finding that gates the run, none an
earlier run posted) and posts them (commands/github_api.py).

What it never does:
- fail the job for the review: a token that may not write (a pull request from a fork
  gets a read-only GITHUB_TOKEN: 403, or 404 where the repository is private), a 422, a
  network failure: each prints the findings as workflow-command annotations instead
  (report/github.py, with its per-step limits) and one line saying why, and exits 0. The
  lint's own exit status is what fails a job. What is wrong with the command itself (no
  token, no pull request, an unreadable report) is a usage error, exit 2.
- print the token, or send it anywhere but the API's origin (github_api.py).
- read outside data unbounded: the event file (MAX_EVENT_BYTES), each source file
  (MAX_SOURCE_BYTES), the comments already posted (MAX_PAGES pages of PAGE_SIZE).

Comments go only in files of the checkout that are byte for byte the pull request head's
(`at_head`): GitHub numbers a comment's lines in the head commit's file, the lint numbered
the checkout's, and a `pull_request` job checks out the merge commit.

Which earlier comments count as "already posted": those with our marker whose author is a
bot (`user.type == "Bot"`, the GITHUB_TOKEN's `github-actions[bot]`), so a person cannot
keep a finding from being commented by quoting its marker in a comment of their own; and
only markers outside a fenced block (report/github_review.py `markers_in`), so the guest
text in the bot's own comments cannot either.
Past MAX_PAGES pages of either list (3,000 comments) the rest is not read, and a finding
commented only there is commented again.
"""

from __future__ import annotations

import json
import os
import re
import stat
import sys
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from roteiro_py.commands.github_api import Api, ApiError, Token, origin
from roteiro_py.compare import read_diff
from roteiro_py.errors import ReviewUnavailable
from roteiro_py.lint.vcs import blob_id, blob_ids_at
from roteiro_py.report.github_review import Placement, ReviewPlan, markers_in, plan_reviews
from roteiro_py.report.load import load_report
from roteiro_py.report.model import Report
from roteiro_py.report.render import render
from roteiro_py.untrusted import FileRefused, guard, read_bounded, sanitise

#: The largest event file read ($GITHUB_EVENT_PATH; a pull request's is tens of KiB).
MAX_EVENT_BYTES = 16 * 1024 * 1024
#: The largest source file read for a suggestion.
MAX_SOURCE_BYTES = 8 * 1024 * 1024
#: Comments (and reviews) asked for a page, and the most pages read of each list.
PAGE_SIZE = 100
MAX_PAGES = 30
DEFAULT_API = "https://api.github.com"

_REPOSITORY = re.compile(r"[A-Za-z0-9_.-]{1,100}/[A-Za-z0-9_.-]{1,100}")
_SHA = re.compile(r"[0-9a-f]{40}")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


@dataclass(frozen=True)
class ReviewRequest:
    report: Path
    #: The repository root the report's paths are relative to (the checkout).
    tree: Path = Path(".")
    diff: Path | None = None
    #: On a failure, print the findings as annotations (False: the caller's own step
    #: already did, as the Action's lint step does, and GitHub would show them twice).
    annotate: bool = True
    environ: Mapping[str, str] = field(default_factory=lambda: os.environ)


@dataclass(frozen=True)
class PullRequest:
    api: Api
    repository: str
    number: int
    head: str

    @property
    def path(self) -> str:
        return f"/repos/{self.repository}/pulls/{self.number}"


def _event(path: str) -> tuple[int, str]:
    """The pull request's number and head commit from the runner's event file."""
    try:
        # the runner's own file, outside the checkout: a link there is the runner's
        data = json.loads(read_bounded(path, MAX_EVENT_BYTES, follow_links=True))
    except FileNotFoundError:
        raise ReviewUnavailable("GITHUB_EVENT_PATH", "names no file") from None
    except FileRefused as refused:
        raise ReviewUnavailable("GITHUB_EVENT_PATH", f"cannot be read: {refused.reason}") from None
    except ValueError:
        raise ReviewUnavailable("GITHUB_EVENT_PATH", "is not JSON") from None
    pull = data.get("pull_request") if isinstance(data, dict) else None
    head = pull.get("head") if isinstance(pull, dict) else None
    number = pull.get("number") if isinstance(pull, dict) else None
    sha = head.get("sha") if isinstance(head, dict) else None
    if not isinstance(number, int) or isinstance(number, bool) or not 0 < number < 1 << 31:
        raise ReviewUnavailable("GITHUB_EVENT_PATH", "is not a pull request's event (no pull_request.number)")
    if not isinstance(sha, str) or not _SHA.fullmatch(sha):
        raise ReviewUnavailable("GITHUB_EVENT_PATH", "has no pull_request.head.sha of 40 hex digits")
    return number, sha


def pull_request(environ: Mapping[str, str]) -> PullRequest:
    """The pull request the runner's environment names, checked, or ReviewUnavailable."""
    token = environ.get("GITHUB_TOKEN", "")
    if not token or any(ch.isspace() for ch in token) or not token.isprintable():
        raise ReviewUnavailable("GITHUB_TOKEN", "is not set (or not a token)")
    base = environ.get("GITHUB_API_URL") or DEFAULT_API
    try:
        origin(base)
    except ValueError as why:
        raise ReviewUnavailable("GITHUB_API_URL", f"is {sanitise(base, limit=200)!r}: {why}") from None
    repository = environ.get("GITHUB_REPOSITORY", "")
    if not _REPOSITORY.fullmatch(repository) or repository.split("/")[1] in (".", ".."):
        raise ReviewUnavailable("GITHUB_REPOSITORY", "is not OWNER/NAME")
    event = environ.get("GITHUB_EVENT_PATH")
    if not event:
        raise ReviewUnavailable("GITHUB_EVENT_PATH", "is not set")
    number, head = _event(event)
    return PullRequest(Api(base, Token(token)), repository, number, head)


def tree_reader(root: Path) -> Callable[[str], bytes | None]:
    """A file of the tree by its repository path, at most MAX_SOURCE_BYTES, each
    directory and the file opened without following a link (report/snippet.py's rule:
    a committed link must not make a host file a suggestion); None when refused."""
    cache: dict[str, bytes | None] = {}

    def read(path: str) -> bytes | None:
        if path not in cache:
            cache[path] = _read_tree_file(root, path)
        return cache[path]

    return read


def _read_tree_file(root: Path, path: str) -> bytes | None:
    parts = PurePosixPath(path).parts
    if not parts or any(part in ("", ".", "..", "/") for part in parts):
        return None
    fds: list[int] = []
    try:
        fds.append(os.open(root, _DIR_FLAGS))
        for part in parts[:-1]:
            fds.append(os.open(part, _DIR_FLAGS, dir_fd=fds[-1]))
        if not stat.S_ISDIR(os.fstat(fds[-1]).st_mode):
            return None
        return read_bounded(parts[-1], MAX_SOURCE_BYTES, dir_fd=fds[-1])
    except (OSError, ValueError, FileRefused):
        return None
    finally:
        for fd in fds:
            os.close(fd)


def placement_of(report: Report, diff: Path | None) -> Placement:
    """Which lines may carry a comment: with the diff, lines it adds; without, only the
    first line of a finding the report says is in the diff (`in_diff`, from the lint's
    own `--diff`), the one line sure to be of the diff when the span is a single line."""
    if diff is not None:
        changed = read_diff(diff)
        return lambda path, first, last: all(changed.touches(path, line, line) for line in range(first, last + 1))
    lines = {(f.path, f.line) for f in report.findings
             if f.in_diff and f.line is not None and f.end_line in (None, f.line)}
    return lambda path, first, last: first == last and (path, first) in lines


#: Files named one by one when they are not the pull request head's; the rest are counted.
_NAMED_FILES = 10


def at_head(placement: Placement, report: Report, root: Path, head: str,
            read: Callable[[str], bytes | None]) -> tuple[Placement, list[str]]:
    """`placement`, but only in files of the checkout that are byte for byte the head
    commit's, and (filled as it is asked) the files it refused for that. GitHub places a comment by the line numbers of
    the file at `commit_id` (the head); the lint numbered the checkout's, which on a
    `pull_request` event is the merge commit, whose file differs from the head's wherever
    the base changed it since: a comment there lands on another line, and its suggestion
    replaces lines it was not made for. A checkout without the head commit (a shallow
    clone) can be compared with nothing, so nothing is placed. A tree that is not a git
    work tree's root (no commit to compare with: not the Action's checkout, which is) is
    placed as the diff says. A file is read only when the diff would place a comment in it."""
    paths = sorted({finding.path for finding in report.findings if finding.path is not None})
    known = blob_ids_at(root, head, paths)
    if known is None:
        return placement, []
    verdicts: dict[str, bool] = {}
    differing: list[str] = []

    def placed(path: str, first: int, last: int) -> bool:
        if not placement(path, first, last):
            return False
        if path not in verdicts:
            data = read(path) if path in known else None
            verdicts[path] = data is not None and blob_id(data) == known[path]
            if not verdicts[path]:
                differing.append(path)
        return verdicts[path]

    return placed, differing


def already_posted(pr: PullRequest) -> set[str]:
    """The fingerprints in the markers of the bot's earlier comments and reviews."""
    found: set[str] = set()
    for kind in ("comments", "reviews"):
        for page in range(1, MAX_PAGES + 1):
            items = pr.api.request("GET", f"{pr.path}/{kind}?per_page={PAGE_SIZE}&page={page}")
            if not isinstance(items, list):
                raise ApiError(200, f"the {kind} of the pull request are not a list")
            for item in items:
                if not isinstance(item, dict):
                    continue
                user = item.get("user")
                body = item.get("body")
                if isinstance(user, dict) and user.get("type") == "Bot" and isinstance(body, str):
                    found |= markers_in(body)
            if len(items) < PAGE_SIZE:
                break
    return found


def _say(text: str, token: Token) -> None:
    """One line of ours on stdout, guarded, and never with the token in it."""
    sys.stdout.write(guard(text.replace(token.value, "***") + "\n"))


def _fallback(report: Report, why: str, token: Token, *, annotate: bool) -> int:
    if not annotate:
        _say(f"pylint-sandbox review: {why}; the lint's own annotations stand.", token)
        return 0
    _say(f"pylint-sandbox review: {why}; the findings follow as annotations instead.", token)
    sys.stdout.write(render(report, "github").replace(token.value, "***"))
    return 0


def post(pr: PullRequest, plan: ReviewPlan) -> list[Any]:
    """Post every review of `plan` in order; what GitHub answered for each."""
    return [pr.api.request("POST", f"{pr.path}/reviews", review) for review in plan.reviews]


def run_review(request: ReviewRequest) -> int:
    """Post the report's findings as reviews of the pull request; 0 whatever GitHub says
    (see the module docstring), 2 for a command that cannot run."""
    pr = pull_request(request.environ)
    report = load_report(request.report)
    read = tree_reader(request.tree)
    placement, differing = at_head(placement_of(report, request.diff), report, request.tree, pr.head, read)
    token = pr.api.token
    try:
        posted = already_posted(pr)
        plan = plan_reviews(report, commit_id=pr.head, placement=placement,
                            source=read, posted=posted)
        for path in differing[:_NAMED_FILES]:
            _say(f"pylint-sandbox review: {path} is not the pull request head's file (commit {pr.head[:12]}): "
                 "its findings are listed in the review's body, not commented on lines", token)
        if len(differing) > _NAMED_FILES:
            _say(f"pylint-sandbox review: {len(differing) - _NAMED_FILES} more files are not the pull request "
                 "head's either", token)
        for note in plan.notes:
            _say(f"pylint-sandbox review: {note}", token)
        if not plan.reviews:
            _say(f"pylint-sandbox review: nothing new to post ({plan.already} finding"
                 f"{'s' if plan.already != 1 else ''} already commented by an earlier run).", token)
            return 0
        post(pr, plan)
    except ApiError as error:
        if error.status in (403, 429) and "rate limit" in error.why.lower():
            # GitHub's secondary rate limit (content-creating requests a minute) is a 403 too:
            # not the token's rights, and the way forward differs
            why = (f"GitHub refused the review ({error.why}): its rate limit, not the token's "
                   "rights; the reviews posted before it stay, and a re-run posts only the rest")
        elif error.status in (403, 404):
            why = (f"GitHub refused the review ({error.why}): this job's token may not write "
                   "to the pull request (a pull request from a fork gets a read-only token)")
        elif error.status == 422:
            why = f"GitHub refused the review ({error.why}): a comment is not on a line of the diff"
        else:
            why = f"the review could not be posted ({error.why})"
        return _fallback(report, why, token, annotate=request.annotate)
    _say(f"pylint-sandbox review: posted {len(plan.reviews)} review{'s' if len(plan.reviews) != 1 else ''} "
         f"with {len(plan.comments)} comment{'s' if len(plan.comments) != 1 else ''}; "
         f"{len(plan.unplaced)} finding{'s' if len(plan.unplaced) != 1 else ''} listed in the body "
         f"(not on a line the diff adds); {plan.already} already commented.", token)
    return 0
