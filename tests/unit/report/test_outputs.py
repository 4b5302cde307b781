"""The outputs issue 13 added: the finding fingerprint, GitLab Code Quality, SARIF's
category and fingerprints, the github annotations' suggestion and doc link within
GitHub's limits, and the Markdown summary. Each is checked against what its consumer
reads (a schema where one exists, GitLab's documented fields, a CommonMark parser)."""

from __future__ import annotations

import json
import re
from html.parser import HTMLParser

import jsonschema  # type: ignore[import-untyped]
import pytest
from markdown_it import MarkdownIt
from realcargo import DATA, make_report

from roteiro_py.lint import output
from roteiro_py.report import Finding, Report, markdown, render, sarif
from roteiro_py.report import github as gh
from roteiro_py.report.fingerprint import finding_fingerprint, fingerprints
from roteiro_py.report.gitlab import SEVERITIES
from roteiro_py.report.model import MAX_FIXES, Edit, Fix

SARIF_SCHEMA = json.loads((DATA / "sarif" / "sarif-schema-2.1.0.json").read_text())

#: GitLab's "Code Quality report format" (the file says where it is documented); the
#: severities are GitLab's, written there, not read from the code under test.
GITLAB_SCHEMA = json.loads((DATA / "gitlab" / "code-quality.schema.json").read_text())


def finding(level: str = "warning", line: int = 1, **extra: object) -> Finding:
    fields: dict[str, object] = {
        "code": "clippy::needless_return", "level": level, "message": "unneeded `return` statement",
        "path": "src/lib.rs", "line": line, "column": 5, "end_line": line, "end_column": 17,
        "snippet": "    return x * 2;", "suggestion": "x * 2", "help": "remove `return`"}
    return Finding.model_validate({**fields, **extra})


# -- one vocabulary of formats -----------------------------------------------------------


def test_the_sarif_category_rule_is_stated_once() -> None:
    assert output.CATEGORY.pattern == sarif.CATEGORY.pattern


# -- the finding fingerprint ---------------------------------------------------------------


def test_the_fingerprint_survives_a_line_shift_and_reindenting() -> None:
    at_5 = finding(line=5)
    moved = finding(line=42, column=9, end_line=42, end_column=21, snippet="        return x * 2;  ")
    assert finding_fingerprint(at_5) == finding_fingerprint(moved)
    assert re.fullmatch(r"[0-9a-f]{64}", finding_fingerprint(at_5))
    # control: each part of the material does change it
    for change in ({"code": "clippy::let_and_return"}, {"path": "src/main.rs"},
                   {"message": "another message"}, {"snippet": "    return y * 2;"},
                   {"snippet": None}):
        assert finding_fingerprint(finding(line=5, **change)) != finding_fingerprint(at_5), change
    assert finding_fingerprint(at_5, 1) != finding_fingerprint(at_5)


def test_identical_findings_get_distinct_fingerprints_counted_by_position() -> None:
    first, second, other = finding(line=3), finding(line=30), finding(line=10, code="clippy::x")
    in_order = fingerprints([first, other, second])
    assert len(set(in_order)) == 3
    # listed the other way round, the finding at line 3 is still occurrence 0
    assert fingerprints([second, other, first]) == [in_order[2], in_order[1], in_order[0]]
    # a line inserted above both moves both: nothing changes
    shifted = fingerprints([finding(line=4), finding(line=11, code="clippy::x"), finding(line=31)])
    assert shifted == in_order


# -- GitLab Code Quality -------------------------------------------------------------------


def test_gitlab_report_has_the_fields_gitlab_reads(demo_report: Report) -> None:
    issues = json.loads(render(demo_report, "gitlab"))
    jsonschema.validate(issues, GITLAB_SCHEMA)
    assert len(issues) == len(demo_report.findings) == 4
    assert len({issue["fingerprint"] for issue in issues}) == 4  # unique, as GitLab requires
    needless = next(i for i in issues if i["check_name"] == "clippy::needless_return")
    assert needless["location"] == {"path": "rust/crates/demo-core/src/lib.rs", "lines": {"begin": 5}}
    assert needless["severity"] == "minor"
    assert all(set(issue) == {"description", "check_name", "fingerprint", "severity", "location"}
               for issue in issues)
    broken = json.loads(render(demo_report, "gitlab"))
    broken[0]["severity"] = "warning"
    with pytest.raises(jsonschema.ValidationError):  # control: the schema does bite
        jsonschema.validate(broken, GITLAB_SCHEMA)


def test_the_renderers_severities_are_the_ones_gitlab_documents() -> None:
    assert set(SEVERITIES) == set(GITLAB_SCHEMA["items"]["properties"]["severity"]["enum"])


def test_gitlab_levels_and_a_finding_without_a_span() -> None:
    spanless = finding("error", code="E0601", path=None, line=None, column=None, end_line=None,
                       end_column=None, snippet=None)
    report = make_report([finding("error"), finding("note", code=None), spanless],
                         build_succeeded=False, workspace="rust")
    issues = json.loads(render(report, "gitlab"))
    jsonschema.validate(issues, GITLAB_SCHEMA)
    assert [(i["check_name"], i["severity"]) for i in issues] == [
        ("clippy::needless_return", "critical"), ("rustc::note", "info"), ("E0601", "critical")]
    assert issues[2]["location"] == {"path": "rust/Cargo.toml", "lines": {"begin": 1}}
    # a saved report's workspace is not checked: it never takes the path out of the repository
    escaping = make_report([spanless]).model_copy(update={"workspace": "../../elsewhere"})
    jsonschema.validate(json.loads(render(escaping, "gitlab")), GITLAB_SCHEMA)


def test_gitlab_and_sarif_carry_the_same_fingerprint(demo_report: Report) -> None:
    issues = json.loads(render(demo_report, "gitlab"))
    results = json.loads(render(demo_report, "sarif"))["runs"][0]["results"]
    expected = fingerprints(demo_report.findings)
    assert [i["fingerprint"] for i in issues] == expected
    assert [r["partialFingerprints"][sarif.FINGERPRINT_KEY] for r in results] == expected


# -- SARIF category ------------------------------------------------------------------------


def test_sarif_category_is_the_runs_automation_id(demo_report: Report) -> None:
    log = json.loads(render(demo_report, "sarif", category="clippy/workspace-a"))
    jsonschema.validate(log, SARIF_SCHEMA)
    assert log["runs"][0]["automationDetails"] == {"id": "clippy/workspace-a/"}
    assert json.loads(render(demo_report, "sarif", category="x/"))["runs"][0]["automationDetails"] == {
        "id": "x/"}
    assert "automationDetails" not in json.loads(render(demo_report, "sarif"))["runs"][0]  # control
    with pytest.raises(ValueError, match="not a SARIF category"):
        render(demo_report, "sarif", category="a b\n::x")


# -- github annotations: suggestion, doc link, limits ---------------------------------------


def _unescape(data: str) -> str:
    return data.replace("%0A", "\n").replace("%0D", "\r").replace("%25", "%")


def _messages(text: str) -> list[str]:
    return [_unescape(line.split("::", 2)[2]) for line in text.splitlines()
            if line.startswith("::") and not line.startswith(gh.PROVENANCE_PREFIX)]


def test_an_annotation_keeps_the_suggestion_and_the_doc_link() -> None:
    report = make_report([finding(), finding("error", code="E0308", suggestion="let x: u8 = 1;\nlet y = x;")])
    first, second = _messages(render(report, "github"))
    assert first == ("unneeded `return` statement\nhelp: remove `return`\nsuggestion: `x * 2`\n"
                     "for further information visit "
                     "https://rust-lang.github.io/rust-clippy/rust-1.95.0/index.html#needless_return")
    assert second.endswith("\nsuggestion:\nlet x: u8 = 1;\nlet y = x;\nfor further information "
                           "visit https://doc.rust-lang.org/error_codes/E0308.html")
    # a code that is not a lint name gets no link (never a quoted one)
    odd = make_report([finding(code="clippy::x)](javascript:1)")])
    assert "visit" not in _messages(render(odd, "github"))[0]


def test_an_annotation_fits_githubs_message_limit_keeping_its_link() -> None:
    astral = "\U0001f980"  # two UTF-16 units: the runner counts those
    long = make_report([finding(message=astral * 3000, help="h" * 3000, suggestion="s" * 5000)])
    message = _messages(render(long, "github"))[0]
    assert gh.units(message) <= gh.MESSAGE_LIMIT
    assert gh.units(message) > gh.MESSAGE_LIMIT - 10  # the room is used, not wasted
    assert message.endswith("index.html#needless_return")
    assert "… [suggestion cut]" in message and "[cut to GitHub's annotation size" in message
    assert gh.units(message.split("\nsuggestion")[1]) <= gh.SUGGESTION_SHARE + 100
    # control: a short one is whole
    assert "[cut" not in _messages(render(make_report([finding()]), "github"))[0]
    title = re.search(r"title=([^:]*)::", render(make_report([finding(code="c" * 400)]), "github").split("\n", 1)[1])
    assert title is not None and len(title.group(1)) == gh.TITLE_LIMIT


def test_the_github_format_says_the_runs_provenance_as_one_notice() -> None:
    """Image (pinned), toolchain and isolation, in the first line, as a `::notice`."""
    report = make_report([finding()])
    first, *rest = render(report, "github").splitlines()
    assert first.startswith(gh.PROVENANCE_PREFIX) and not any(
        line.startswith(gh.PROVENANCE_PREFIX) for line in rest)
    message = _unescape(first.split("::", 2)[2])
    image = report.provenance
    assert message.splitlines() == [
        f"image: {image.image_reference} (manifest {image.image_digest})",
        "toolchain: clippy 0.1.95 (59807616e1 2026-04-14), rustc 1.95.0 on x86_64-unknown-linux-gnu",
        "isolation: QEMU microvm with KVM, no network (backend qemu, accelerator kvm, hardware-isolated)"]
    # the isolation is the report's, whatever it is: TCG is said not to be a hardware boundary
    tcg = report.model_copy(update={"isolation": report.isolation.model_copy(update={
        "accelerator": "tcg", "hardware_isolated": False, "description": "QEMU microvm under TCG"})})
    assert "(backend qemu, accelerator tcg, not hardware-isolated)" in _unescape(gh.provenance_notice(tcg))


def test_the_provenance_notice_escapes_hostile_toolchain_and_image_strings() -> None:
    """The model validates the toolchain's fields; this builds a report past that check
    (model_construct: a saved report is read through the model, so this is defence in
    depth) and sees that no value ends the line or the property list."""
    from roteiro_py.report.model import Isolation, Provenance, Toolchain

    hostile = "1.0%0A\r\n::add-mask::s3cret,title=x:y\n##[set-output name=a;]b"
    report = make_report([finding()])
    report = report.model_copy(update={
        "provenance": Provenance.model_construct(image_reference="r.example/c:1," + hostile,
                                                 image_digest="sha256:" + "e" * 64),
        "toolchain": Toolchain.model_construct(clippy_version=hostile, clippy_commit=hostile,
                                               clippy_date=hostile, rustc_release=hostile,
                                               rustc_commit=hostile, host=hostile),
        "isolation": Isolation.model_construct(backend=hostile, accelerator=hostile,
                                               hardware_isolated=False, description=hostile)})
    line = gh.provenance_notice(report)
    assert "\n" not in line and "\r" not in line
    # `::` after the message's start is text to the runner; the title stays the property
    assert line.startswith(gh.PROVENANCE_PREFIX)
    message = line.split("::", 2)[2]
    assert _unescape(message).count(hostile) == 10  # control: every value is shown, whole
    assert gh.units(_unescape(message)) <= gh.MESSAGE_LIMIT
    # what is printed goes through guard(), which breaks the `##[` the runner finds anywhere
    text = render(report, "github")
    first = [line for line in text.splitlines() if line.startswith("::")][0]
    assert first.startswith(gh.PROVENANCE_PREFIX) and "##[" not in text
    assert first.split("::", 2)[2].count("::add-mask::s3cret") == 10 and first.count("\r") == 0


def test_the_provenance_takes_one_of_the_steps_notices() -> None:
    notes = [finding("note", n) for n in range(1, gh.ANNOTATION_LIMIT + 2)]
    text = render(make_report(notes), "github")
    assert sum(line.startswith("::notice ") for line in text.splitlines()) == gh.ANNOTATION_LIMIT
    assert ("2 more notice findings not annotated (GitHub shows "
            f"{gh.ANNOTATION_LIMIT} notice annotations per step; one is the run's provenance)") in text


def _fixed(*fixes: dict[str, object]) -> Finding:
    return finding(fixes=list(fixes), suggestion="first part only")


def _edit(line: int, replacement: str) -> dict[str, object]:
    return {"path": "src/lib.rs", "line": line, "column": 5, "end_line": line, "end_column": 9,
            "replacement": replacement}


def test_an_annotation_shows_each_part_of_a_suggestion_without_its_lines() -> None:
    """A suggestion whose lines could not be read shows each part's place and text (a
    deletion as "remove", several lines whole); the legacy first part alone was shown."""
    fixed = _fixed({"message": "use these", "edits": [_edit(3, "a"), _edit(4, ""), _edit(7, "b\nc")]},
                   {"message": "or this", "edits": [_edit(9, "d")]})
    message = _messages(render(make_report([fixed]), "github"))[0]
    assert ("help: use these\n  src/lib.rs:3:5: replace with `a`\n  src/lib.rs:4:5: remove\n"
            "  src/lib.rs:7:5: replace with:\nb\nc\nhelp: or this\n  src/lib.rs:9:5: replace with `d`\n"
            "for further information visit ") in message
    assert "first part only" not in message
    assert message.startswith("unneeded `return` statement\nhelp: remove `return`\nhelp: use these")
    control = _messages(render(make_report([finding(suggestion="first part only")]), "github"))[0]
    assert "suggestion: `first part only`" in control


def test_an_annotation_shows_a_suggestions_lines_as_cargo_does() -> None:
    """Lines as they are and as the suggestion makes them; an unchanged line is context."""
    fixed = _fixed({"message": "remove `return`", "edits": [_edit(9, "x * 2")], "line": 9,
                    "before": "    return x * 2;\n}", "after": "    x * 2\n}"})
    message = _messages(render(make_report([fixed]), "github"))[0]
    assert "\nhelp: remove `return`\n 9 -     return x * 2;\n 9 +     x * 2\n10   }\nfor further" in message
    assert message.count("remove `return`") == 1  # finding.help is this fix's message: said once
    grown = _fixed({"message": "split", "edits": [_edit(9, "a;\nb;")], "line": 9, "before": "    a;",
                    "after": "    a;\n    b;"})
    assert "\nhelp: split\n 9 -     a;\n 9 +     a;\n10 +     b;\n" in _messages(render(make_report([grown]),
                                                                                   "github"))[0]


def test_an_annotations_suggestions_share_their_room() -> None:
    """Several parts, or long lines, are cut at SUGGESTION_SHARE; the doc link is kept."""
    many = _fixed(*({"message": f"part {n}", "edits": [_edit(n, "y" * 600)]} for n in range(1, MAX_FIXES + 1)))
    message = _messages(render(make_report([many]), "github"))[0]
    suggestion = message[message.index("help: part 1"):message.index("\nfor further information")]
    assert gh.units(suggestion) <= gh.SUGGESTION_SHARE and suggestion.endswith("… [suggestion cut]")
    assert message.endswith("index.html#needless_return") and gh.units(message) <= gh.MESSAGE_LIMIT
    few = _messages(render(make_report([_fixed({"message": "part 1", "edits": [_edit(1, "y")]})]), "github"))[0]
    assert "[suggestion cut]" not in few  # control


@pytest.mark.parametrize(("count", "said"), [(0, "clippy: 0 findings;"), (1, "clippy: 1 finding;"),
                                             (2, "clippy: 2 findings;")])
def test_the_github_count_line_is_in_the_plural_only_when_plural(count: int, said: str) -> None:
    assert said in render(make_report([finding(line=n) for n in range(1, count + 1)]), "github")


def test_past_the_limit_per_type_the_rest_are_counted_once() -> None:
    findings = [finding("warning", n) for n in range(1, gh.ANNOTATION_LIMIT + 6)]
    text = render(make_report(findings), "github")
    assert sum(line.startswith("::warning ") for line in text.splitlines()) == gh.ANNOTATION_LIMIT
    assert f"5 more warning findings not annotated (GitHub shows {gh.ANNOTATION_LIMIT}" in text
    assert f"the step summary lists the first {markdown.MAX_FINDINGS} findings" in text


# -- the Markdown summary ------------------------------------------------------------------


class _Html(HTMLParser):
    """The tags of a rendered summary, and its text outside <code>."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.depth = 0
        self.outside: list[str] = []
        self.cells: list[int] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))
        self.depth += tag == "code"
        if tag == "tr":
            self.cells.append(0)
        if tag in ("td", "th"):
            self.cells[-1] += 1

    def handle_endtag(self, tag: str) -> None:
        self.depth -= tag == "code"

    def handle_data(self, data: str) -> None:
        if not self.depth:
            self.outside.append(data)


def _html(text: str) -> _Html:
    parsed = _Html()
    parsed.feed(MarkdownIt("commonmark").enable("table").render(text))
    return parsed


HOSTILE = ("x | y `tick` ``two`` <img src=x onerror=alert(1)> <script>s()</script> "
           "[click](https://evil.example) https://evil.example @octocat @org/team #123 "
           "**bold** _it_ \\ <!-- c -->\n## heading\n- item\n> quote\n| a | b |\n```")


def test_summary_guest_text_is_only_ever_code(demo_report: Report) -> None:
    hostile = finding("error", code="clippy::x | <b>y</b> @z", message=HOSTILE, help=HOSTILE,
                      path="src/@octocat|<i>.rs", fixes=[Fix(message=HOSTILE, edits=[Edit(
                          path="src/@octocat|<i>.rs", line=1, column=1, end_line=1, end_column=2,
                          replacement=HOSTILE + "\n````\n</code></pre><img src=x>\n- item")])])
    report = make_report([hostile, finding()]).model_copy(update={"provenance": make_report(
        []).provenance.model_copy(update={"image_reference": "r.example/x:" + HOSTILE[:40],
                                          "image_chosen_in": "@team <b>roteiro.toml</b>"})})
    base = "https://github.com/o/r/blob/" + "a" * 40
    text = markdown.render_markdown(report, links=base)
    html = _html(text)
    outside = "".join(html.outside)
    for marker in ("@octocat", "@org", "@z", "@team", "#123", "evil.example", "<img", "onerror",
                   "script", "heading", "quote", "bold", "|", "item"):
        assert marker not in outside, marker
    # suggestions are code blocks (pre), nothing else is added; one list, its two items
    assert {tag for tag, _ in html.tags} <= {"h3", "table", "thead", "tbody", "tr", "th", "td",
                                             "p", "strong", "ul", "li", "code", "a", "pre"}
    assert [tag for tag, _ in html.tags].count("li") == 2 + 2  # two findings, two lints
    links = [attrs.get("href") for tag, attrs in html.tags if tag == "a"]
    assert links == [f"{base}/src/%40octocat%7C%3Ci%3E.rs#L1", f"{base}/src/lib.rs#L1",
                     "https://rust-lang.github.io/rust-clippy/rust-1.95.0/index.html#needless_return"]
    assert set(html.cells) == {2}  # every table row has its two cells, whatever the text
    # control: the hostile text is shown (in code), not dropped
    codes = re.findall(r"<code>(.*?)</code>", MarkdownIt("commonmark").render(text), re.S)
    assert any("@octocat" in c and "&lt;img" in c and "``two``" in c for c in codes)
    # and a summary of real clippy output parses the same way
    assert _html(markdown.render_markdown(demo_report)).cells == [2] * 2


def test_summary_is_bounded() -> None:
    many = [finding("warning", n, code=f"clippy::lint_{n}", message="m" * 5000) for n in range(1, 400)]
    many.append(finding("error", 999, message="the error"))
    text = markdown.render_markdown(make_report(many, build_succeeded=False))
    bullets = [line for line in text.splitlines() if line.startswith("- **")]
    assert len(bullets) == markdown.MAX_FINDINGS
    assert bullets[0].startswith("- **error**")  # errors first
    assert f"the first {markdown.MAX_FINDINGS} of 400" in text
    assert f"the {markdown.MAX_LINTS} most frequent shown" in text
    assert max(len(line) for line in bullets) < 3 * markdown.FIELD_CHARS
    assert len(text.encode()) < 80_000 < markdown.STEP_SUMMARY_LIMIT  # the docstring's ~60 KB
    few = markdown.render_markdown(make_report(many[:3]))  # control: all listed when few
    assert "(all 3, errors first" in few and few.count("\n- **") == 3


def test_summary_counts_and_provenance(demo_report: Report) -> None:
    text = markdown.render_markdown(demo_report)
    assert text.startswith("### clippy: 4 findings (4 warnings); build succeeded\n")
    # only the levels that have findings (issue 23: `| note | 0 |` and `| help | 0 |` were always there)
    assert "| warning | 4 |" in text and "| error" not in text and "| note" not in text and "| help" not in text
    none = markdown.render_markdown(make_report([]))
    assert none.startswith("### clippy: 0 findings; build succeeded\n") and "| level |" not in none
    assert "- ` clippy::needless_return `: 1" in text
    assert "with clippy ` 0.1.95 `, rustc ` 1.95.0 ` (` x86_64-unknown-linux-gnu `)" in text
    assert "isolation: ` QEMU microvm with KVM, no network `" in text
    from roteiro_py.report.model import DependencyCache

    cached = demo_report.model_copy(update={"dependency_cache": DependencyCache(
        state="skipped", reason="the lockfile | <b>@x</b> is missing")})
    assert "Dependencies: ` dependency cache skipped: the lockfile | <b>@x</b> is missing; " in (
        markdown.render_markdown(cached))
    short = markdown.render_markdown(demo_report, with_findings=False)
    assert "| warning | 4 |" in short and "- **" not in short and "not listed" in short


def test_summary_keeps_the_code_of_a_suggestion(demo_report: Report) -> None:
    """Issue 23: the summary showed `help: remove `return`` and dropped the code the help
    carries; now the suggestion is shown as the github format shows it, in a code block."""
    fix = Fix(message="remove `return`", applicability="MachineApplicable", line=3,
              before="    return x * 2;\n", after="    x * 2\n",
              edits=[Edit(path="src/lib.rs", line=3, column=5, end_line=3, end_column=17, replacement="x * 2")])
    text = markdown.render_markdown(make_report([finding(line=3, fixes=[fix])]))
    assert "\n  ```\n  help: remove `return`\n  3 -     return x * 2;\n  3 +     x * 2\n  ```\n" in text
    blocks = re.findall(r"<pre><code>(.*?)</code></pre>", MarkdownIt("commonmark").render(text), re.S)
    assert blocks == ["help: remove `return`\n3 -     return x * 2;\n3 +     x * 2\n"]
    assert "; help:" not in text  # the help is the suggestion's own: shown once, with its code
    other = markdown.render_markdown(make_report([finding(line=3, fixes=[fix], help="try this")]))
    assert "; help: ` try this `" in other  # control: a help of its own is still on the line
    # a report written before `fixes`: its first replacement
    assert "\n  ```\n  suggestion:\n  x * 2\n  ```\n" in markdown.render_markdown(make_report([finding()]))
    plain = markdown.render_markdown(make_report([finding(suggestion=None)]))
    assert "```" not in plain  # control: nothing to show, no block
    # bounded: one finding's suggestions at most SUGGESTION_CHARS
    long = fix.model_copy(update={"before": "a\n" * 5000, "after": "b\n" * 5000})
    block = markdown.render_markdown(make_report([finding(fixes=[long])])).split("```")[1]
    assert len(block.replace("\n  ", "\n")) <= markdown.SUGGESTION_CHARS + 2 and "…" in block


@pytest.mark.parametrize(("variables", "linked"), [
    ({}, False),
    ({"GITHUB_SERVER_URL": "http://github.com"}, False),
    ({"GITHUB_SERVER_URL": "https://github.com/evil"}, False),
    ({"GITHUB_SERVER_URL": "https://user@github.com"}, False),
    ({"GITHUB_REPOSITORY": "o/r)](https://evil.example"}, False),
    ({"GITHUB_REPOSITORY": "o/.."}, False),
    ({"GITHUB_REPOSITORY": "o"}, False),
    ({"GITHUB_SHA": "a" * 39}, False),
    ({"GITHUB_SHA": "A" * 40}, False),
    ({"GITHUB_SHA": "a" * 40 + "\n"}, False),
    ({"GITHUB_SHA": "b" * 64}, True),
    ({"GITHUB_SERVER_URL": "https://ghes.example:8443/"}, True),
    ({"GITHUB_REPOSITORY": "my-org/my.repo_2"}, True),
])
def test_a_finding_links_to_its_file_only_from_variables_of_githubs_shape(variables: dict[str, str],
                                                                          linked: bool) -> None:
    from roteiro_py.report.links import blob_base

    good = {"GITHUB_SERVER_URL": "https://github.com", "GITHUB_REPOSITORY": "o/r", "GITHUB_SHA": "a" * 40}
    assert blob_base(good) == "https://github.com/o/r/blob/" + "a" * 40  # control: the runner's values
    environ = {**good, **variables} if variables else {}
    base = blob_base(environ)
    assert (base is not None) == linked
    text = markdown.render_markdown(make_report([finding(line=7, path="src/a b#c.rs")]), links=base)
    hrefs = [attrs.get("href") for tag, attrs in _html(text).tags if tag == "a"]
    assert [href for href in hrefs if "blob" in str(href)] == ([f"{base}/src/a%20b%23c.rs#L7"] if linked else [])
