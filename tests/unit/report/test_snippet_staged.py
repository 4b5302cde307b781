"""Snippets come from the staged copy the guest saw, never through a link, each file read
once; the work after the VM is bounded (findings cap, deadline)."""

from __future__ import annotations

import json
import os
import time
import tracemalloc
from pathlib import Path, PurePosixPath

import pytest

from roteiro_py import errors
from roteiro_py.clippy.parse import MAX_FINDINGS, Deadline, PathLayout, parse_messages
from roteiro_py.report import snippet
from roteiro_py.report.human import render_human
from roteiro_py.vm.disks.share_image import stage_tree

TOKEN = "AUTHORIZATION: basic c2VjcmV0LXRva2Vu"
KEY = "-----BEGIN OPENSSH PRIVATE KEY-----"


def message(file_name: str, *, line: int = 3, text: str = "m", level: object = "warning") -> bytes:
    span = {"file_name": file_name, "is_primary": True, "line_start": line, "line_end": line,
            "column_start": 1, "column_end": 2, "expansion": None}
    diag = {"message": text, "level": level, "code": {"code": "clippy::x", "explanation": None},
            "spans": [span], "children": []}
    return json.dumps({"reason": "compiler-message", "message": diag}).encode()


def lines(*texts: str) -> str:
    return "".join(f"{t}\n" for t in texts)


@pytest.fixture
def hostile(tmp_path: Path) -> Path:
    """A repository whose committed links name secrets, and a home beside it."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "id_ed25519").write_text(lines(KEY, KEY, KEY))
    repo = home / "work" / "repo"
    (repo / "src").mkdir(parents=True)
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text(lines("[http]", "extraheader", TOKEN))
    (repo / "src" / "lib.rs").write_text(lines("// one", "// two", "pub fn three() {}"))
    (repo / "leak.rs").symlink_to(".git/config")
    (repo / "notes.rs").symlink_to("../../.ssh/id_ed25519")
    (repo / "target" / "debug").mkdir(parents=True)
    (repo / "target" / "CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    (repo / "target" / "debug" / "out.rs").write_text(lines("a", "b", TOKEN))
    (home / "outside").mkdir()
    (home / "outside" / "x.rs").write_text(lines("a", "b", TOKEN))
    (repo / "up").symlink_to("../../outside")  # a directory link in a middle component
    (repo / "alias").symlink_to("src")
    # The same secrets named by absolute links, as a checkout on the attacker's machine
    # cannot know but a CI checkout path (and $HOME) often makes predictable.
    (repo / "abs_leak.rs").symlink_to(repo / ".git" / "config")
    (repo / "abs_key.rs").symlink_to(home / ".ssh" / "id_ed25519")
    (repo / "abs_up").symlink_to(home / "outside")
    return repo


def snippets(repo: Path, staged: Path, names: list[str]) -> dict[str | None, str | None]:
    layout = PathLayout(guest_root=PurePosixPath(str(repo)))
    parsed = parse_messages(b"\n".join(message(n, text=n) for n in names), layout, staged=staged)
    return {f.path: f.snippet for f in parsed.findings}


@pytest.mark.parametrize("name", ["leak.rs", "notes.rs", "target/debug/out.rs", "up/x.rs",
                                  "alias/lib.rs", "abs_leak.rs", "abs_key.rs", "abs_up/x.rs"])
def test_a_snippet_never_follows_a_link_nor_reads_what_the_copy_left_out(
        hostile: Path, tmp_path: Path, name: str) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    stage_tree(hostile, staged)
    found = snippets(hostile, staged, [name, "src/lib.rs"])
    assert found[name] is None
    assert found["src/lib.rs"] == "pub fn three() {}"  # control: a regular file is read
    assert TOKEN not in repr(found) and KEY not in repr(found)


def test_the_snippet_is_the_bytes_the_guest_saw_not_the_host_file_now(
        hostile: Path, tmp_path: Path) -> None:
    staged = tmp_path / "staged"
    staged.mkdir()
    stage_tree(hostile, staged)
    (hostile / "src" / "lib.rs").write_text(lines("// edited", "// on the host", TOKEN))
    assert snippets(hostile, staged, ["src/lib.rs"]) == {"src/lib.rs": "pub fn three() {}"}


def test_a_workspace_in_a_subfolder_reads_from_its_own_copy(tmp_path: Path) -> None:
    repo = tmp_path / "repo"
    (repo / "rust" / "src").mkdir(parents=True)
    (repo / "rust" / "src" / "main.rs").write_text(lines("a", "b", "fn main() {}"))
    staged = tmp_path / "staged"
    staged.mkdir()
    stage_tree(repo / "rust", staged)
    layout = PathLayout(workspace=PurePosixPath("rust"))
    parsed = parse_messages(message("src/main.rs"), layout, staged=staged)
    assert [(f.path, f.snippet) for f in parsed.findings] == [("rust/src/main.rs", "fn main() {}")]


BIG_LINE = 104_850


@pytest.fixture
def big(tmp_path: Path) -> Path:
    """An 8 MB source file, staged, with line BIG_LINE well inside its first 8 MiB."""
    staged = tmp_path / "staged"
    (staged / "src").mkdir(parents=True)
    with (staged / "src" / "big.rs").open("w") as handle:
        for number in range(1, 110_001):
            handle.write(f"// line {number:07d} " + "x" * 60 + "\n")
    assert (staged / "src" / "big.rs").stat().st_size > 8_000_000
    return staged


def test_three_thousand_findings_in_one_file_read_it_once(
        big: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    opened: list[str] = []
    read = [0]
    real_open, real_read = os.open, os.read

    def counting_open(path: str, flags: int, mode: int = 0o777, *, dir_fd: int | None = None) -> int:
        opened.append(os.fspath(path))
        return real_open(path, flags, mode, dir_fd=dir_fd)

    def counting_read(fd: int, size: int) -> bytes:
        data = real_read(fd, size)
        read[0] += len(data)
        return data

    monkeypatch.setattr(snippet.os, "open", counting_open)
    monkeypatch.setattr(snippet.os, "read", counting_read)
    stream = b"\n".join(message("src/big.rs", line=BIG_LINE, text=f"finding {i}")
                        for i in range(3000))
    parsed = parse_messages(stream, PathLayout(), staged=big)
    monkeypatch.undo()
    assert len(parsed.findings) == 3000
    assert all(f.snippet == f"// line {BIG_LINE:07d} " + "x" * 60 for f in parsed.findings)
    assert opened.count("big.rs") == 1  # was 3,000: one open and read per finding
    assert read[0] <= (big / "src" / "big.rs").stat().st_size


def test_findings_past_the_cap_are_counted_and_the_report_says_so() -> None:
    def spanless(i: int) -> bytes:
        diag = {"message": f"m{i}", "level": "warning", "spans": [], "children": [],
                "code": {"code": "clippy::x"}}
        return json.dumps({"reason": "compiler-message", "message": diag}).encode()

    stream = b"\n".join(spanless(i) for i in range(MAX_FINDINGS + 7))
    parsed = parse_messages(stream + b"\n" + spanless(0), PathLayout())
    assert len(parsed.findings) == MAX_FINDINGS and parsed.dropped_findings == 7
    assert parsed.duplicates == 1  # a duplicate past the cap is still a duplicate
    under = parse_messages(b"\n".join(spanless(i) for i in range(5)), PathLayout())
    assert (len(under.findings), under.dropped_findings) == (5, 0)  # control


def test_the_renderers_say_how_many_findings_were_dropped(demo_report: object) -> None:
    from roteiro_py.report.model import Report
    from roteiro_py.report.render import render

    assert isinstance(demo_report, Report)
    capped = demo_report.model_copy(update={"summary": demo_report.summary.model_copy(
        update={"dropped_findings": 12345})})
    assert "12345 more past the cap of a report" in render_human(capped, width=200)
    assert "12345 more past the cap of a report" in render(capped, "github")
    assert '"droppedFindings": 12345' in render(capped, "sarif")
    assert '"dropped_findings": 12345' in render(capped, "json")
    assert "past the cap" not in render_human(demo_report, width=200)  # control


def test_parsing_stops_at_the_runs_deadline() -> None:
    stream = b"\n".join(message("src/a.rs", text=f"f{i}") for i in range(10))
    with pytest.raises(errors.DeadlineExceeded) as refused:
        parse_messages(stream, PathLayout(), deadline=Deadline(at=time.monotonic() - 1,
                                                               seconds=1234))
    assert "1234 s" in refused.value.guidance().summary
    assert "the report was not made" in refused.value.guidance().summary
    in_time = Deadline(at=time.monotonic() + 60, seconds=60)
    assert len(parse_messages(stream, PathLayout(), deadline=in_time).findings) == 10  # control


def test_hostile_levels_and_file_names_are_ignored_not_crashes(tmp_path: Path) -> None:
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "a.rs").write_text(lines("a", "b", "c"))
    stream = b"\n".join([
        message("src/a.rs", level=["x"]),  # TypeError: unhashable (exit 4)
        message("src/a.rs", level={"x": 1}),
        message("src/\ud800.rs"),  # UnicodeEncodeError in the snippet reader (exit 4)
        message("src/\udcff.rs"),
        message("src/a.rs"),  # control: an ordinary diagnostic around them is kept
    ])
    parsed = parse_messages(stream, PathLayout(), staged=tmp_path)
    assert parsed.ignored_lines == 2
    by_path = {f.path: f.snippet for f in parsed.findings}
    assert by_path["src/a.rs"] == "c"
    assert by_path["src/\\ud800.rs"] is None and by_path["src/\\udcff.rs"] is None


def test_snippet_reads_stop_at_the_per_report_budget(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("a", "b", "c"):
        (tmp_path / f"{name}.rs").write_text(lines("x" * 40, "y" * 40, name))
    monkeypatch.setattr(snippet, "MAX_TOTAL_BYTES", 2 * 84)  # two files' worth
    reader = snippet.SnippetReader(tmp_path)
    got = [reader.snippet(f"{name}.rs", 3) for name in ("a", "b", "c")]
    assert got == ["a", "b", None]  # the first two are read (control), the third is not
    assert reader.bytes_read == 2 * 84 and reader.files_read == 2
    assert reader.snippet("a.rs", 2) == "y" * 40  # read once, served again from the cache
    assert reader.files_read == 2


@pytest.mark.parametrize("unit", [b"ab\n", b"\n", b"x" * 70 + b"\n"])
def test_the_memory_a_reader_holds_is_proportional_to_the_bytes_it_read(
        tmp_path: Path, unit: bytes) -> None:
    # One bytes object per line once held ~19x the bytes read for a file of `ab` lines.
    count = 4 * 1024 * 1024 // len(unit)
    (tmp_path / "short.rs").write_bytes(unit * count)
    reader = snippet.SnippetReader(tmp_path)
    tracemalloc.start()
    try:
        first = reader.snippet("short.rs", 1)
        last = reader.snippet("short.rs", count)
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    expected = unit.rstrip(b"\n").decode()
    assert first == last == expected  # control: the file was read, first and last line
    assert reader.snippet("short.rs", count + 1) is None
    assert reader.bytes_read == len(unit) * count
    assert held < 1.1 * reader.bytes_read, (held, reader.bytes_read)
