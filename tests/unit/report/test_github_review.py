"""The review payload (report/github_review.py), pure: the exact lines a suggestion block
replaces, the refusals that keep it from writing what the fix does not, and the bounds.
The end-to-end poster, with cargo's real JSON, is tests/unit/commands/test_review.py."""

from __future__ import annotations

from markdown_it import MarkdownIt
from realcargo import make_report

from roteiro_py.report.github_review import (
    BODY_LIMIT,
    MAX_LISTED,
    MAX_SUGGESTION_LINES,
    Suggestion,
    fenced,
    markers_in,
    plan_reviews,
    suggestion_of,
)
from roteiro_py.report.model import MAX_LABEL_CHARS, Edit, Finding, Fix
from roteiro_py.report.safe import MAX_FIELD_CHARS

SOURCE = b"fn main() {\n    let a = vec![1];\n    let b = a\n        .len();\n    drop(b);\n}"


def fix(*edits: tuple[int, int, int, int, str], applicability: str = "MachineApplicable",
        before: str | None = None, line: int | None = None) -> Fix:
    return Fix(message="try this", applicability=applicability,  # type: ignore[arg-type]
               edits=[Edit(path="src/main.rs", line=a, column=b, end_line=c, end_column=d, replacement=r)
                      for a, b, c, d, r in edits], line=line, before=before)


def test_a_multi_line_fix_replaces_exactly_the_lines_it_touches() -> None:
    made = suggestion_of(fix((3, 14, 4, 15, ".len()")), "src/main.rs", SOURCE)
    assert made == Suggestion(3, 4, "    let b = a.len();")


def test_two_edits_on_one_line_and_a_deleted_line() -> None:
    made = suggestion_of(fix((2, 5, 2, 8, "const"), (2, 13, 2, 20, "[1; 1]")), "src/main.rs", SOURCE)
    assert made == Suggestion(2, 2, "    const a = [1; 1];")



def test_a_whole_line_removed_is_githubs_deletion_of_that_line_alone() -> None:
    """rustc removes a line (an unused import) with a span to column 1 of the next line:
    the comment covers the removed line only, and its block is GitHub's empty suggestion."""
    removed = suggestion_of(fix((5, 1, 6, 1, "")), "src/main.rs", SOURCE)
    assert removed == Suggestion(5, 5, "", deletes=True)
    assert isinstance(removed, Suggestion) and removed.block() == "```suggestion\n```"
    # two lines into one: the next line changes too, so it is in the block
    joined = suggestion_of(fix((3, 14, 4, 9, "")), "src/main.rs", SOURCE)
    assert joined == Suggestion(3, 4, "    let b = a.len();")
    # a line replaced, the next one kept: the block is the one line
    assert suggestion_of(fix((5, 1, 6, 1, "    drop(a);\n")), "src/main.rs", SOURCE) == \
        Suggestion(5, 5, "    drop(a);")
    # emptied but kept: an empty line, not a deletion
    emptied = suggestion_of(fix((5, 1, 5, 13, "")), "src/main.rs", SOURCE)
    assert emptied == Suggestion(5, 5, "") and isinstance(emptied, Suggestion)
    assert MarkdownIt("commonmark").parse(emptied.block())[0].content == "\n"


def test_the_last_line_without_a_newline() -> None:
    assert suggestion_of(fix((6, 1, 6, 2, "} // end")), "src/main.rs", SOURCE) == Suggestion(6, 6, "} // end")


def test_what_cannot_be_shown_exactly_is_refused_with_its_reason() -> None:
    refusals = {
        "overlap": fix((2, 5, 2, 10, "x"), (2, 8, 2, 12, "y")),
        "past the end of its line": fix((2, 5, 2, 99, "x")),
        "past the file's end": fix((7, 1, 7, 2, "x")),
        "machine-applicable": fix((2, 5, 2, 8, "x"), applicability="MaybeIncorrect"),
        "changed since the lint": fix((2, 5, 2, 8, "const"), before="    let a = vec![2];", line=2),
        f"more than {MAX_SUGGESTION_LINES} lines": fix((1, 1, 60, 1, "")),
    }
    for reason, refused in refusals.items():
        made = suggestion_of(refused, "src/main.rs", SOURCE + b"\n" * 60 if "lines" in reason else SOURCE)
        assert isinstance(made, str) and reason in made, (reason, made)
    # controls: the same edits, well formed, are made
    assert isinstance(suggestion_of(fix((2, 5, 2, 8, "const"), before="    let a = vec![1];", line=2),
                                    "src/main.rs", SOURCE), Suggestion)
    assert suggestion_of(fix((2, 5, 2, 8, "x")), "src/other.rs", SOURCE) == "it edits another file"
    assert suggestion_of(fix((2, 5, 2, 8, "x")), "src/main.rs", b"\xff\xfe") == "the file is not UTF-8"
    assert "exactly" in str(suggestion_of(fix((2, 5, 2, 8, "x")), "src/main.rs", SOURCE.replace(b"\n", b"\r\n")))


def test_a_fence_no_text_can_close() -> None:
    for text in ("a", "```", "````\n```suggestion\nx\n````", "`" * 40):
        tokens = MarkdownIt("commonmark").parse(fenced(text))
        assert [(t.type, t.content) for t in tokens] == [("fence", text + "\n")]


def test_the_largest_finding_fits_in_a_comment_and_the_list_is_bounded() -> None:
    long = "x" * MAX_FIELD_CHARS
    finding = Finding(code="clippy::" + "a" * 90, level="warning", message=long, help=long,
                      label="y" * MAX_LABEL_CHARS, path="src/main.rs", line=2, column=5, end_line=2, end_column=8,
                      fixes=[fix((2, 5, 2, 8, "z" * 4000))])
    source = SOURCE.replace(b"vec![1]", b"v" * 15_000)
    plan = plan_reviews(make_report([finding]), commit_id="a" * 40, placement=lambda p, a, b: True,
                        source=lambda path: source)
    (comment,) = plan.reviews[0]["comments"]
    assert len(comment["body"]) <= BODY_LIMIT and "```suggestion" in comment["body"]
    unplaced = [finding.model_copy(update={"line": n, "end_line": n}) for n in range(1, 200)]
    plan = plan_reviews(make_report(unplaced), commit_id="a" * 40, placement=lambda p, a, b: False,
                        source=lambda path: None)
    (review,) = plan.reviews
    assert review["comments"] == [] and len(review["body"]) <= BODY_LIMIT
    assert review["body"].count("src/main.rs:") == MAX_LISTED
    assert f"{199 - MAX_LISTED} more not listed here" in review["body"]


def test_a_multi_line_suggestion_is_a_comment_on_its_range() -> None:
    finding = Finding(code="clippy::x", level="warning", message="m", path="src/main.rs", line=3, column=13,
                      end_line=4, end_column=15, fixes=[fix((3, 14, 4, 15, ".len()"))])
    plan = plan_reviews(make_report([finding]), commit_id="a" * 40, placement=lambda p, a, b: True,
                        source=lambda path: SOURCE)
    (comment,) = plan.reviews[0]["comments"]
    assert {k: comment[k] for k in ("path", "start_line", "start_side", "line", "side")} == {
        "path": "src/main.rs", "start_line": 3, "start_side": "RIGHT", "line": 4, "side": "RIGHT"}
    # the block is the branch's own build's output (a build script can forge clippy's JSON):
    # said above it, so nobody commits it unread
    assert "made by a build of this branch in the sandbox: read it before committing it" in comment["body"]
    # control: lines 3..4 not both in the diff -> the finding's first added line, no block
    plan = plan_reviews(make_report([finding]), commit_id="a" * 40, placement=lambda p, a, b: a == b == 4,
                        source=lambda path: SOURCE)
    (comment,) = plan.reviews[0]["comments"]
    assert (comment["line"], "start_line" in comment) == (4, False)
    assert "```suggestion" not in comment["body"] and "not all in the pull request's diff" in comment["body"]


def test_a_marker_in_guest_text_is_not_read_as_posted() -> None:
    """The fingerprints an earlier run posted are read back from the bot's own bodies; the
    guest text in them (a message, a label, a suggestion's lines: the tree chooses them)
    must not count, or a branch that quotes another finding's marker in a string keeps that
    finding from ever being commented (commands/review.py `already_posted`)."""
    target = Finding(code="clippy::x", level="warning", message="m", path="src/main.rs", line=2, column=5,
                     end_line=2, end_column=8)
    (planned,) = plan_reviews(make_report([target]), commit_id="a" * 40, placement=lambda p, a, b: True,
                              source=lambda path: SOURCE).comments
    forged = f"<!-- pylint-sandbox:{planned.fingerprint} -->"
    quoting = Finding(code="clippy::y", level="warning", message=f"look {forged}", label=forged,
                      path="src/main.rs", line=5, column=5, end_line=5, end_column=9,
                      fixes=[fix((5, 5, 5, 9, f"\n{forged}\n"))])
    unplaced = quoting.model_copy(update={"line": 1, "end_line": 1, "fixes": []})
    first = plan_reviews(make_report([quoting, unplaced]), commit_id="a" * 40,
                         placement=lambda p, a, b: a != 1, source=lambda path: SOURCE)
    bodies = [first.reviews[0]["body"], *(c["body"] for c in first.reviews[0]["comments"])]
    assert all(forged in body for body in bodies)  # control: the guest's marker is in each
    assert "```suggestion" in bodies[1]             # ... inside a suggestion block too
    read = set().union(*(markers_in(body) for body in bodies))
    assert planned.fingerprint not in read
    # control: ours are read, the commented finding's and the listed one's
    assert len(first.comments) == len(first.unplaced) == 1
    assert len(read) == 2 and first.comments[0].fingerprint in read
    again = plan_reviews(make_report([quoting, unplaced, target]), commit_id="a" * 40,
                         placement=lambda p, a, b: a != 1, source=lambda path: SOURCE, posted=read)
    assert [c.fingerprint for c in again.comments] == [planned.fingerprint]


def test_the_largest_finding_in_backticks_fits_in_a_comment() -> None:
    """Every fence is one backtick longer than the longest run in its text, so a text of
    backticks costs its length three times: a message, label and help of backticks, and a
    fix whose lines (the tree's, a string literal) hold a run of 15,500, made a body past
    GitHub's limit and the review ended on an AssertionError (exit 4) instead of posting."""
    ticks = "`" * MAX_FIELD_CHARS
    finding = Finding(code="clippy::" + "a" * 90, level="warning", message=ticks, help=ticks,
                      label="`" * MAX_LABEL_CHARS, path="src/main.rs", line=2, column=5, end_line=2, end_column=8,
                      fixes=[fix((2, 5, 2, 8, "`" * 4000))])
    source = SOURCE.replace(b"vec![1]", b"`" * 15_500)
    plan = plan_reviews(make_report([finding]), commit_id="a" * 40, placement=lambda p, a, b: True,
                        source=lambda path: source)
    (comment,) = plan.reviews[0]["comments"]
    assert len(comment["body"]) <= BODY_LIMIT
    # control: the same fix in a file without the long run keeps its block
    plan = plan_reviews(make_report([finding]), commit_id="a" * 40, placement=lambda p, a, b: True,
                        source=lambda path: SOURCE)
    assert "```suggestion" in plan.reviews[0]["comments"][0]["body"]
