"""The unified diff a CI writes, parsed in Python: which lines of which new file it adds,
what it renames, and every hostile shape refused (with its line) or bounded, never a
crash. The diffs here are real `git diff` output where git can make them (git runs in a
scratch repository of the test's own, never in a tree under lint)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from pathlib import Path

import pytest

from roteiro_py.compare import diff as diffmod
from roteiro_py.compare.diff import ChangedLines, DiffError, parse_diff

GIT = shutil.which("git")


def added(changes: ChangedLines) -> dict[str, list[tuple[int, int]]]:
    return {path: list(zip(runs.firsts, runs.lasts, strict=True)) for path, runs in changes.added.items()}


def test_added_removed_and_context_lines() -> None:
    text = (b"diff --git a/src/lib.rs b/src/lib.rs\n"
            b"index 1111111..2222222 100644\n"
            b"--- a/src/lib.rs\n"
            b"+++ b/src/lib.rs\n"
            b"@@ -1,4 +1,5 @@ fn head()\n"
            b" context 1\n"        # new line 1
            b"-removed\n"          # old line 2 only
            b"+added 2\n"          # new line 2
            b"+added 3\n"          # new line 3
            b" context 4\n"        # new line 4
            b" context 5\n"        # new line 5
            b"@@ -20,2 +21,3 @@\n"
            b" context 21\n"
            b"+++ not a header, an added line 22\n"
            b"--- not a header, a removed line\n"
            b"+added 23\n"
            b"\\ No newline at end of file\n")
    changes = parse_diff(text)
    assert added(changes) == {"src/lib.rs": [(2, 3), (22, 23)]}
    touches = [line for line in range(1, 30) if changes.touches("src/lib.rs", line, line)]
    assert touches == [2, 3, 22, 23]  # control: context and removed lines are not "added"
    assert changes.touches("src/lib.rs", 4, 30) and not changes.touches("src/lib.rs", 4, 21)
    assert not changes.touches("src/other.rs", 2, 2)
    assert changes.files == 1 and changes.renamed == {}


def test_crlf_empty_context_lines_and_timestamps() -> None:
    text = (b"--- a/x.rs\t2026-04-14 10:00:00.000000000 +0000\r\n"
            b"+++ b/x.rs\t2026-04-14 10:00:01.000000000 +0000\r\n"
            b"@@ -1,3 +1,4 @@\r\n"
            b" one\r\n"
            b"\r\n"          # an empty context line whose space an editor stripped
            b"+three\r\n"
            b" four\r\n")
    assert added(parse_diff(text)) == {"x.rs": [(3, 3)]}


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_real_git_diff_with_a_rename_a_new_file_odd_names_and_a_binary(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}

    def git(*args: str) -> bytes:
        return subprocess.run([GIT or "git", *args], cwd=repo, env=env, check=True,
                              capture_output=True).stdout

    body = "".join(f"fn f{n}() {{}}\n" for n in range(1, 21))
    (repo / "src").mkdir()
    (repo / "src" / "old name.rs").write_text(body)
    (repo / "src" / "keep.rs").write_text(body)
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\0")
    git("init", "-q", "-b", "main")
    git("add", ".")
    git("commit", "-q", "-m", "base")
    git("checkout", "-q", "-b", "topic")
    git("mv", "src/old name.rs", "src/new name.rs")
    lines = body.splitlines(keepends=True)
    lines.insert(10, "fn inserted() {}\n")
    (repo / "src" / "new name.rs").write_text("".join(lines))
    (repo / "src" / "keep.rs").write_text(body.replace("fn f5()", "fn five()"))
    (repo / "src" / "café\t\"q\".rs").write_text("fn a() {}\nfn b() {}\n")
    (repo / "logo.png").write_bytes(b"\x89PNG\0\0\1")
    git("add", ".")
    git("commit", "-q", "-m", "topic")
    text = git("diff", "--no-color", "--no-ext-diff", "-M", "main...topic")
    assert b"rename from src/old name.rs" in text and b"Binary files" in text
    assert b'"b/src/caf\\303\\251\\t\\"q\\".rs"' in text  # git quoted it
    changes = parse_diff(text)
    assert changes.renamed == {"src/old name.rs": "src/new name.rs"}
    assert added(changes) == {"src/new name.rs": [(11, 11)], "src/keep.rs": [(5, 5)],
                              "src/caf\u00e9\\x09\"q\".rs": [(1, 2)]}  # as a finding's path reads
    assert changes.files == 3
    crlf = parse_diff(text.replace(b"\n", b"\r\n"))  # a diff saved on Windows
    assert added(crlf) == added(changes) and crlf.renamed == changes.renamed


def test_a_deleted_file_and_a_pure_rename_add_nothing() -> None:
    text = (b"diff --git a/gone.rs b/gone.rs\n"
            b"deleted file mode 100644\n"
            b"--- a/gone.rs\n"
            b"+++ /dev/null\n"
            b"@@ -1,2 +0,0 @@\n"
            b"-a\n"
            b"-b\n"
            b"diff --git a/a.rs b/b.rs\n"
            b"similarity index 100%\n"
            b"rename from a.rs\n"
            b"rename to b.rs\n")
    changes = parse_diff(text)
    assert added(changes) == {} and changes.renamed == {"a.rs": "b.rs"} and changes.files == 0


def test_text_that_is_no_diff_is_refused() -> None:
    with pytest.raises(DiffError, match="not a unified diff"):
        parse_diff(b'{"schema_version": 1}\n')


@pytest.mark.parametrize(("text", "problem", "line"), [
    (b"--- a/x\n+++ /etc/passwd\n@@ -0,0 +1 @@\n+x\n", "not a path relative", 2),
    (b"--- a/x\n+++ b/../../etc/passwd\n@@ -0,0 +1 @@\n+x\n", "not a path relative", 2),
    (b"--- a/x\n+++ b/src/./x.rs\n", "not a path relative", 2),
    (b"--- a/x\n+++ b/src//x.rs\n", "not a path relative", 2),
    (b"--- a/x\n+++ b/\n", "not a path relative", 2),
    (b'diff --git a/x b/y\nrename from x\nrename to "../\\056\\056/y"\n', "not a path relative", 3),
    (b'--- a/x\n+++ "b/unterminated\n', "no closing quote", 2),
    (b'--- a/x\n+++ "b/\\q"\n', "escape git does not write", 2),
    (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n+a\n+b\n", "hunk has more lines", 5),
    (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n a\nplain text\n", "ends before the line counts", 5),
    (b"--- a/x\n+++ b/x\n@@ -1,2 +1,3 @@\n a\n", "ends inside a hunk", 4),
    (b"--- a/x\n+++ b/x\n@@ -1,2 +1,2 @@\n\x1b[32m+a\x1b[m\n", "colour codes", 4),
    (b"\x1b[1mdiff --git a/x b/x\x1b[m\n", "colour codes", 1),
    (b"@@ -1 +1 @@\n+a\n", "before the `+++` line", 1),
    (b"--- a/x\n+++ b/x\n@@ -one +1 @@\n", "hunk header", 3),
    (b"diff --cc x.rs\n@@@ -1,1 -1,1 +1,1 @@@\n", "combined diff", 1),
    (b"--- a/x\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", "adds lines to /dev/null", 4),
    (b"--- a/x\n+++ b/x\n@@ -1 +1 @@\n+\0\n", "NUL byte", 4),
])
def test_hostile_diffs_are_refused_with_the_line(text: bytes, problem: str, line: int) -> None:
    with pytest.raises(DiffError) as refused:
        parse_diff(text)
    assert problem in refused.value.problem and refused.value.line == line


def test_a_path_past_the_bound_is_refused_and_one_within_it_is_read() -> None:
    deep = "/".join(["d"] * 2000) + "/x.rs"  # 4,005 characters, 2,001 components
    ok = parse_diff(f"--- a/x\n+++ b/{deep}\n@@ -0,0 +1 @@\n+a\n".encode())
    assert added(ok) == {deep: [(1, 1)]}  # control: deep is fine within the bound
    deeper = "/".join(["d"] * 2100) + "/x.rs"
    with pytest.raises(DiffError, match=f"longer than {diffmod.MAX_PATH_CHARS}"):
        parse_diff(f"--- a/x\n+++ b/{deeper}\n".encode())


@pytest.mark.parametrize(("bound", "value", "make", "problem"), [
    ("MAX_DIFF_FILES", 3, lambda n: b"".join(b"diff --git a/f%d b/f%d\n" % (i, i) for i in range(n)), "files"),
    ("MAX_DIFF_FILES", 3, lambda n: b"".join(b"--- a/f%d\n+++ b/f%d\n" % (i, i) for i in range(n)), "files"),
    ("MAX_DIFF_FILES", 3, lambda n: b"".join(b"Binary files a/f%d and b/f%d differ\n" % (i, i) for i in range(n)),
     "files"),
    ("MAX_DIFF_HUNKS", 3, lambda n: b"--- a/x\n+++ b/x\n" + b"@@ -1 +1 @@\n-a\n+b\n" * n, "hunks"),
    ("MAX_ADDED_RUNS", 3, lambda n: b"--- a/x\n+++ b/x\n@@ -1,%d +1,%d @@\n" % (n, 2 * n) + b"+a\n c\n" * n,
     "runs of added lines"),
])
def test_each_bound_refuses_past_it_and_not_at_it(monkeypatch: pytest.MonkeyPatch, bound: str, value: int,
                                                  make: object, problem: str) -> None:
    monkeypatch.setattr(diffmod, bound, value)
    assert callable(make)
    parse_diff(make(value))  # control: at the bound it is read
    with pytest.raises(DiffError, match=f"more than {value} {problem}"):
        parse_diff(make(value + 1))


def test_a_diff_larger_than_the_byte_bound_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(diffmod, "MAX_DIFF_BYTES", 64)
    body = b"--- a/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n"
    parse_diff(body)  # control
    with pytest.raises(DiffError, match="larger than 64 bytes"):
        parse_diff(body + b" " * 64)


def test_the_worst_diff_within_the_bytes_bound_is_parsed_in_bounded_time_and_memory() -> None:
    """Alternating added and context lines make the most runs a byte can buy (one per 4
    bytes): 8 MiB of them is 2M runs, the bound, kept as two arrays, in seconds."""
    n = diffmod.MAX_ADDED_RUNS
    text = b"--- a/x\n+++ b/x\n@@ -1,%d +1,%d @@\n" % (n, 2 * n) + b"+\n \n" * n
    began = time.monotonic()
    changes = parse_diff(text)
    took = time.monotonic() - began
    runs = changes.added["x"]
    assert len(runs.firsts) == n and runs.firsts.itemsize == 8
    assert changes.touches("x", 2 * n - 1, 2 * n - 1) and not changes.touches("x", 2 * n, 2 * n)
    assert took < 60, took


def test_runs_from_a_forged_out_of_order_diff_are_merged() -> None:
    text = (b"--- a/x\n+++ b/x\n@@ -0,0 +10,3 @@\n+a\n+b\n+c\n@@ -0,0 +1,2 @@\n+a\n+b\n"
            b"@@ -0,0 +11,5 @@\n+a\n+b\n+c\n+d\n+e\n")
    changes = parse_diff(text)
    assert added(changes) == {"x": [(1, 2), (10, 15)]}
    assert changes.touches("x", 14, 14) and not changes.touches("x", 3, 9)


# -- the shape git's options give a diff ------------------------------------------------


def _topic_repo(tmp_path: Path) -> tuple[Path, dict[str, str]]:
    """A scratch repository whose branch `topic` changes sub/x.rs (lines 2 and 3 added)
    and leaves the same change uncommitted in the work tree of `main`-based `wip`."""
    repo = tmp_path / "repo"
    (repo / "sub").mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_SYSTEM": os.devnull,
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}
    (repo / "sub" / "x.rs").write_text("a\nb\n")
    for args in (("init", "-q", "-b", "main"), ("add", "."), ("commit", "-q", "-m", "base"),
                 ("checkout", "-q", "-b", "topic")):
        subprocess.run([GIT or "git", *args], cwd=repo, env=env, check=True, capture_output=True)
    (repo / "sub" / "x.rs").write_text("a\nc\nd\n")
    return repo, env


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_a_diff_without_gits_a_and_b_prefixes_is_refused_naming_the_line(tmp_path: Path) -> None:
    """diff.mnemonicPrefix (`+++ w/sub/x.rs`) and diff.noprefix (`+++ sub/x.rs`) name
    files no finding has: before, every finding was then outside the diff and the run
    passed. Control: the same change with the prefixes the guide spells out is read."""
    repo, env = _topic_repo(tmp_path)

    def diff(*args: str) -> bytes:
        return subprocess.run([GIT or "git", *args], cwd=repo, env=env, check=True,
                              capture_output=True).stdout

    mnemonic = diff("-c", "diff.mnemonicPrefix=true", "diff", "--no-color")  # index vs work tree
    assert b"+++ w/sub/x.rs" in mnemonic
    diff("commit", "-q", "-a", "-m", "topic")
    noprefix = diff("-c", "diff.noprefix=true", "diff", "--no-color", "main...topic")
    assert b"+++ sub/x.rs" in noprefix
    for text in (mnemonic, noprefix):
        with pytest.raises(DiffError) as refused:
            parse_diff(text)
        assert refused.value.line == 1 and "a/" in refused.value.problem
        assert "--src-prefix=a/ --dst-prefix=b/" in refused.value.problem
    spelled = diff("-c", "diff.noprefix=true", "-c", "diff.mnemonicPrefix=true", "diff", "--no-color",
                   "--src-prefix=a/", "--dst-prefix=b/", "main...topic")
    assert added(parse_diff(spelled)) == {"sub/x.rs": [(2, 3)]}  # control


@pytest.mark.parametrize(("text", "problem", "line"), [
    (b"diff --git a/x b/x\n--- a/x\n+++ w/x\n@@ -0,0 +1 @@\n+a\n", "'w/x' does not start with `b/`", 3),
    (b"diff --git a/x b/x\n--- i/x\n+++ b/x\n@@ -0,0 +1 @@\n+a\n", "'i/x' does not start with `a/`", 2),
    (b"diff --git a/x b/x\n--- a/x\n+++ x\n@@ -0,0 +1 @@\n+a\n", "'x' does not start with `b/`", 3),
    (b'diff --git a/x b/x\n--- a/x\n+++ "w/\\303\\251"\n', "does not start with `b/`", 3),
    (b"diff --git c/x w/x\n", "'c/x w/x' do not start with `a/` and `b/`", 1),
    (b"diff --git x x\nold mode 100644\nnew mode 100755\n", "do not start with `a/` and `b/`", 1),
])
def test_in_a_git_section_every_name_carries_its_prefix(text: bytes, problem: str, line: int) -> None:
    with pytest.raises(DiffError) as refused:
        parse_diff(text)
    assert problem in refused.value.problem and refused.value.line == line


def test_the_prefixes_quoted_names_and_dev_null_are_read_in_a_git_section() -> None:
    """The control arm of the prefix rule: what git writes with a/ and b/ is read."""
    text = (b'diff --git "a/caf\\303\\251.rs" "b/caf\\303\\251.rs"\n'
            b'--- "a/caf\\303\\251.rs"\n+++ "b/caf\\303\\251.rs"\n@@ -0,0 +1 @@\n+a\n'
            b"diff --git a/new.rs b/new.rs\nnew file mode 100644\n--- /dev/null\n+++ b/new.rs\n"
            b"@@ -0,0 +1,2 @@\n+a\n+b\n"
            b"diff --git a/gone.rs b/gone.rs\ndeleted file mode 100644\n--- a/gone.rs\n+++ /dev/null\n"
            b"@@ -1 +0,0 @@\n-a\n")
    assert added(parse_diff(text)) == {"caf\u00e9.rs": [(1, 1)], "new.rs": [(1, 2)]}


@pytest.mark.parametrize("text", [b"", b"\n", b"\r\n\n  \n"])
def test_an_empty_diff_is_a_change_that_adds_no_line(text: bytes) -> None:
    """What `git diff BASE...HEAD` writes for a pull request with no net change (issue 23):
    until then refused ("the diff is empty"), which failed the Action as a usage error."""
    changes = parse_diff(text)
    assert changes.files == 0 and added(changes) == {} and not changes.opaque
    assert not changes.touches("src/lib.rs", 1, 10**6)


@pytest.mark.parametrize("text", [b"hello\n", b"index 1234..5678 100644\n", b"  \n-a\n"])
def test_text_that_names_no_file_is_still_no_diff(text: bytes) -> None:
    """Control of the empty-diff rule: only an empty file is a change of nothing."""
    with pytest.raises(DiffError, match="not a unified diff"):
        parse_diff(text)


def test_a_diff_naming_files_but_adding_no_line_is_not_empty() -> None:
    """Control of the empty-diff rule: a change that only deletes and renames is a diff."""
    text = (b"diff --git a/gone.rs b/gone.rs\ndeleted file mode 100644\n--- a/gone.rs\n+++ /dev/null\n"
            b"@@ -1 +0,0 @@\n-a\n")
    changes = parse_diff(text)
    assert changes.files == 0 and added(changes) == {}


# -- a file whose lines the diff does not show -----------------------------------------------


@pytest.mark.skipif(GIT is None, reason="git is not installed")
def test_a_rust_file_the_branchs_gitattributes_made_binary_refuses_the_diff(tmp_path: Path) -> None:
    """The review's attack: the branch adds `*.rs -diff` to .gitattributes and a warning
    to src/lib.rs; git in its checkout writes `Binary files a/src/lib.rs and b/src/lib.rs
    differ`, and the diff used to parse as "adds .gitattributes' line, nothing of
    src/lib.rs", so the new warning was outside the diff and the run passed."""
    repo = tmp_path / "repo"
    (repo / "src").mkdir(parents=True)
    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e"}

    def git(*args: str) -> bytes:
        return subprocess.run([GIT or "git", *args], cwd=repo, env=env, check=True,
                              capture_output=True).stdout

    (repo / "src" / "lib.rs").write_text("pub fn a() {}\n")
    git("init", "-q", "-b", "main")
    git("add", ".")
    git("commit", "-q", "-m", "base")
    git("checkout", "-q", "-b", "topic")
    (repo / ".gitattributes").write_text("*.rs -diff\n")
    (repo / "src" / "lib.rs").write_text("pub fn a() {}\npub fn b() { let x = 1; let _ = x; }\n")
    git("add", ".")
    git("commit", "-q", "-m", "topic")
    text = git("diff", "--no-color", "--no-ext-diff", "--no-relative", "--src-prefix=a/", "--dst-prefix=b/",
               "-M", "main...topic")
    assert b"Binary files a/src/lib.rs and b/src/lib.rs differ" in text
    with pytest.raises(DiffError) as refused:
        parse_diff(text)
    assert refused.value.hidden == "src/lib.rs" and refused.value.line == text.count(b"\n")
    assert "hides the lines of 'src/lib.rs'" in refused.value.problem
    # control: the same change with the branch's attributes ignored is read, the line added
    empty = git("hash-object", "-t", "tree", os.devnull).decode().strip()
    plain = git(f"--attr-source={empty}", "diff", "--no-color", "--no-ext-diff", "--no-relative",
                "--src-prefix=a/", "--dst-prefix=b/", "-M", "main...topic")
    assert added(parse_diff(plain)) == {".gitattributes": [(1, 1)], "src/lib.rs": [(2, 2)]}


@pytest.mark.parametrize(("entry", "hidden"), [
    (b"diff --git a/x.rs b/x.rs\nindex 1..2 100644\nBinary files a/x.rs and b/x.rs differ\n", "x.rs"),
    (b"diff --git a/x.rs b/x.rs\nnew file mode 100644\nindex 0..2\nBinary files /dev/null and b/x.rs differ\n",
     "x.rs"),
    (b'diff --git "a/caf\\303\\251 x.rs" "b/caf\\303\\251 x.rs"\nindex 1..2 100644\n'
     b'Binary files "a/caf\\303\\251 x.rs" and "b/caf\\303\\251 x.rs" differ\n', "caf\u00e9 x.rs"),
    (b"diff --git a/a and b/x.rs b/a and b/x.rs\nindex 1..2 100644\n"
     b"Binary files a/a and b/x.rs and b/a and b/x.rs differ\n", "a and b/x.rs"),
    (b"diff --git a/old.txt b/src/new.rs\nsimilarity index 90%\nrename from old.txt\nrename to src/new.rs\n"
     b"index 1..2 100644\nBinary files a/old.txt and b/src/new.rs differ\n", "src/new.rs"),
    (b"diff --git a/x.rs b/x.rs\nindex 1..2 100644\nGIT binary patch\nliteral 4\nLcmb<msH_4215g2M\n\n"
     b"literal 3\nKcmb<ms0083<N)#j\n\n", "x.rs"),
    (b"Binary files a/x.rs and b/x.rs differ\n", "x.rs"),  # GNU diff -r
])
def test_each_shape_of_a_binary_rust_file_is_refused(entry: bytes, hidden: str) -> None:
    text = b"diff --git a/ok.rs b/ok.rs\n--- a/ok.rs\n+++ b/ok.rs\n@@ -1 +1,2 @@\n a\n+b\n" + entry
    if not entry.startswith(b"diff"):
        text = b"--- a/ok.rs\n+++ b/ok.rs\n@@ -1 +1,2 @@\n a\n+b\n" + entry
    with pytest.raises(DiffError) as refused:
        parse_diff(text)
    assert refused.value.hidden == hidden


def test_a_binary_file_of_another_kind_counts_as_changed_whole() -> None:
    """An image changes without lines, and so does a source a `#[path]` or `include!`
    names under another extension: no refusal (a pull request may change an image), and a
    finding in such a file is in the diff. A deleted binary (Rust or not) adds nothing."""
    text = (b"diff --git a/logo.png b/logo.png\nindex 1..2 100644\nBinary files a/logo.png and b/logo.png differ\n"
            b"diff --git a/gen.inc b/gen.inc\nindex 1..2 100644\nGIT binary patch\nliteral 4\nLcmb<msH_4215g2M\n\n"
            b"diff --git a/gone.rs b/gone.rs\ndeleted file mode 100644\nindex 1..0\n"
            b"Binary files a/gone.rs and /dev/null differ\n"
            b"diff --git a/gone2.rs b/gone2.rs\ndeleted file mode 100644\nindex 1..0\nGIT binary patch\n"
            b"literal 0\nHcmV?d00001\n\n"
            b"diff --git a/ok.rs b/ok.rs\n--- a/ok.rs\n+++ b/ok.rs\n@@ -1 +1,2 @@\n a\n+b\n")
    changes = parse_diff(text)
    assert changes.opaque == {"logo.png", "gen.inc"}
    assert changes.touches("gen.inc", 7, 7) and changes.touches("logo.png", 1, 1)
    assert not changes.touches("gone.rs", 1, 1) and not changes.touches("ok.rs", 1, 1)  # control
    assert added(changes) == {"ok.rs": [(2, 2)]} and changes.files == 1


@pytest.mark.parametrize("entry", [
    b"diff --git a/x b/y b/z\nindex 1..2\nBinary files a/x b/y and b/z and b/w differ\n",
    b"diff --git a/p b/q b/r\nindex 1..2\nGIT binary patch\n",
])
def test_a_binary_entry_whose_file_cannot_be_told_is_refused(entry: bytes) -> None:
    with pytest.raises(DiffError, match="cannot be told apart"):
        parse_diff(entry)
