"""clippy/stream.py: cargo's stream given back on the host, faithful where cargo's records
are cargo's, every path a host path or absent, and nothing a guest writes crashes it,
leaks a guest path or reaches a terminal as a control sequence (hypothesis for the last)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path, PurePosixPath
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from roteiro_py.clippy.command import (
    ClippyOptions,
    build_part,
    clippy_argv,
    without_target_selection,
)
from roteiro_py.clippy.parse import MAX_LINE_BYTES
from roteiro_py.clippy.stream import (
    MAX_DEPTH,
    MAX_STRING_CHARS,
    Stream,
    StreamPaths,
    clean_text,
    map_stream,
    render_stream,
    resolves_inside,
)
from roteiro_py.errors import UsageError
from roteiro_py.lint.output import plan_outputs

DATA = Path(__file__).resolve().parents[2] / "data"
#: The captured streams (real cargo 1.95) name the workspace /guest/repo.
PATHS = StreamPaths(PurePosixPath("/guest/repo"),
                    (("/cargo-home/registry", "/host/views/k1/registry"),
                     ("/cargo-home/git", "/host/views/k1/git")))
CAPTURED = [DATA / "demo-clippy" / "default.jsonl", DATA / "demo-clippy" / "all-targets.jsonl"]


def records(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def printed(stream: Stream, fmt: str = "json") -> list[dict[str, Any]]:
    return [json.loads(line) for line in render_stream(stream, fmt).splitlines()]


def message(file_name: str, rendered: str = "warning: x\n", **extra: Any) -> dict[str, Any]:
    span = {"file_name": file_name, "byte_start": 0, "byte_end": 1, "line_start": 1, "line_end": 1,
            "column_start": 1, "column_end": 2, "is_primary": True, "text": [], "label": None,
            "suggested_replacement": None, "suggestion_applicability": None, "expansion": None}
    return {"reason": "compiler-message", "package_id": "path+file:///guest/repo#x@0.1.0",
            "manifest_path": "/guest/repo/Cargo.toml",
            "target": {"kind": ["lib"], "crate_types": ["lib"], "name": "x",
                       "src_path": "/guest/repo/src/lib.rs", "edition": "2021", "doc": True,
                       "doctest": True, "test": True},
            "message": {"rendered": rendered, "$message_type": "diagnostic", "children": [],
                        "code": None, "level": "warning", "message": "x", "spans": [span], **extra}}


def line(record: object) -> bytes:
    return json.dumps(record).encode() + b"\n"


@pytest.mark.parametrize("captured", CAPTURED, ids=lambda p: p.name)
def test_cargos_own_compiler_messages_pass_through_unchanged(captured: Path) -> None:
    data = captured.read_bytes()
    stream = map_stream(data, PATHS)
    assert stream.dropped == 0
    ours, cargo = printed(stream), records(data)
    assert [r for r in ours if r["reason"] == "compiler-message"] == \
        [r for r in cargo if r["reason"] == "compiler-message"]
    assert [r["reason"] for r in ours] == [r["reason"] for r in cargo]
    assert ours[-1] == {"reason": "build-finished", "success": True}


def test_artifacts_in_the_guests_scratch_have_no_host_path() -> None:
    data = CAPTURED[0].read_bytes()
    cargo = [r for r in records(data) if r["reason"] == "compiler-artifact"]
    assert all(r["filenames"] for r in cargo)  # control: cargo names the guest's .rmeta files
    ours = [r for r in printed(map_stream(data, PATHS)) if r["reason"] == "compiler-artifact"]
    assert [r["filenames"] for r in ours] == [[], []] and [r["executable"] for r in ours] == [None, None]
    for mine, theirs in zip(ours, cargo, strict=True):  # everything else as cargo wrote it
        assert {k: v for k, v in mine.items() if k not in ("filenames", "executable")} == \
            {k: v for k, v in theirs.items() if k not in ("filenames", "executable")}


def test_build_script_out_dir_and_scratch_paths_are_left_out() -> None:
    record = {"reason": "build-script-executed", "package_id": "path+file:///guest/repo#x@0.1.0",
              "linked_libs": ["static=foo"],
              "linked_paths": ["native=/.roteiro-scratch/target/debug/build/x/out",
                               "native=/guest/repo/vendor/lib", "/cargo-home/registry/src/a/lib"],
              "cfgs": ["has_x"], "env": [["GEN", "/.roteiro-scratch/target/gen"], ["MODE", "fast"]],
              "out_dir": "/.roteiro-scratch/target/debug/build/x-1/out"}
    [ours] = printed(map_stream(line(record), PATHS))
    kept = {k: v for k, v in record.items() if k != "out_dir"}
    assert ours == {**kept, "linked_paths": ["native=/guest/repo/vendor/lib",
                                             "/host/views/k1/registry/src/a/lib"],
                    "env": [["MODE", "fast"]]}
    # out_dir is left out, not null: cargo_metadata 0.23's BuildScript declares it
    # `#[serde(default)] pub out_dir: Utf8PathBuf`, so a missing field reads as empty
    # (rust-analyzer then skips OUT_DIR) but null fails the whole record
    assert "out_dir" not in ours
    assert list(ours) == [key for key in record if key != "out_dir"]  # cargo's field order


def test_registry_paths_name_the_hosts_vendored_view() -> None:
    guest = "/cargo-home/registry/src/index.crates.io-1949cf8c6b5b557f/serde-1.0.0/src/lib.rs"
    record = message(guest, rendered=f"error: x\n --> {guest}:1:1\n")
    [ours] = printed(map_stream(line(record), PATHS))
    host = guest.replace("/cargo-home/registry", "/host/views/k1/registry")
    assert ours["message"]["spans"][0]["file_name"] == host
    assert ours["message"]["rendered"] == f"error: x\n --> {host}:1:1\n"


@pytest.mark.parametrize("outside", [
    "/etc/passwd", "../../etc/passwd", "/guest/repo/../other/x.rs", "/guest/repository/x.rs",
    "/.roteiro-scratch/target/debug/build/x/out/gen.rs", "/guest/repo/.git/config", ".git/config",
    "/usr/local/rustup/toolchains/x/lib/rustlib/src/rust/library/core/src/lib.rs", "<anon>",
    "/rustc/" + "0" * 40 + "/../../etc/passwd", "src/a\\..\\..\\b.rs", "src/\x00.rs", "src/\x1f.rs", "src/\u202e.rs"])
def test_a_span_outside_the_tree_is_left_out(outside: str) -> None:
    record = message("src/lib.rs")
    record["message"]["spans"].append({**record["message"]["spans"][0], "file_name": outside,
                                       "is_primary": False})
    record["message"]["spans"][0]["expansion"] = {"span": {**record["message"]["spans"][0],
                                                           "file_name": outside},
                                                  "macro_decl_name": "m!", "def_site_span": None}
    [ours] = printed(map_stream(line(record), PATHS))
    [span] = ours["message"]["spans"]
    assert span["file_name"] == "src/lib.rs" and span["expansion"]["span"] is None
    assert span["expansion"]["macro_decl_name"] == "m!"


def test_rustcs_virtual_sysroot_paths_are_kept_as_host_cargo_writes_them() -> None:
    sysroot = "/rustc/" + "ab" * 20 + "/library/core/src/macros/mod.rs"
    record = message("src/lib.rs")
    record["message"]["spans"][0]["expansion"] = {
        "span": {**record["message"]["spans"][0], "file_name": "src/lib.rs"},
        "macro_decl_name": "assert_eq!",
        "def_site_span": {**record["message"]["spans"][0], "file_name": sysroot}}
    [ours] = printed(map_stream(line(record), PATHS))
    assert ours == record


@pytest.mark.parametrize("field, value", [
    ("manifest_path", "/etc/Cargo.toml"), ("package_id", "path+file:///etc#x@0.1.0"),
    ("package_id", "file:///guest/repo"), ("package_id", 7), ("target", {"src_path": "/etc/x.rs"}),
    ("message", "not a diagnostic")])
def test_a_record_without_a_host_path_where_cargo_always_writes_one_is_dropped(field: str, value: object) -> None:
    hostile = {**message("src/lib.rs"), field: value}
    stream = map_stream(line(hostile) + line(message("src/lib.rs")), PATHS)
    assert stream.dropped == 1 and len(stream.records) == 1  # the next record is kept


def test_esc_in_rendered_is_escaped_in_json_and_only_sgr_survives_with_ansi() -> None:
    hostile = ("\x1b[1m\x1b[33mwarning\x1b[0m: x \x1b]8;;https://evil.example\x07link\x1b]8;;\x07"
               " \x1b[2J\x9b31m \u202e \r\n")
    record = message("src/lib.rs", rendered=hostile, message="a\x1b[31mb")
    plain = render_stream(map_stream(line(record), PATHS), "json")
    [ours] = [json.loads(text) for text in plain.splitlines()]
    assert "\x1b" not in json.dumps(ours, ensure_ascii=False) and "\\u001b" not in plain
    assert ours["message"]["rendered"].startswith("\\x1b[1m\\x1b[33mwarning")
    assert ours["message"]["message"] == "a\\x1b[31mb"

    [coloured] = printed(map_stream(line(record), PATHS, ansi=True))
    rendered = coloured["message"]["rendered"]
    assert rendered.startswith("\x1b[1m\x1b[33mwarning\x1b[0m: x ")  # control: colours are kept
    assert "\x1b]" not in rendered and "\x1b[2J" not in rendered and "\x9b" not in rendered
    assert "\\x1b]8;;https://evil.example\\x07" in rendered and "\\u202e" in rendered
    assert coloured["message"]["message"] == "a\\x1b[31mb"  # only `rendered` is coloured


def test_a_runner_command_in_a_string_reaches_the_reader_intact_but_not_the_runner() -> None:
    record = message("src/lib.rs", rendered="##[error]forged\n::add-mask::x\n")
    text = render_stream(map_stream(line(record), PATHS), "json")
    assert "##[" not in text
    assert json.loads(text)["message"]["rendered"] == "##[error]forged\n::add-mask::x\n"


def test_bounds_drop_the_record_never_the_run() -> None:
    deep: dict[str, Any] = {}
    node = deep
    for _ in range(MAX_DEPTH + 5):
        node["x"] = {}
        node = node["x"]
    nested = message("src/lib.rs", extra=deep)
    long_string = message("src/lib.rs", rendered="w" * (MAX_STRING_CHARS + 1))
    nest_bomb = b'{"reason":"compiler-message","message":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n"
    huge = b'{"reason":"build-finished","success":true,"x":"' + b"a" * MAX_LINE_BYTES + b'"}\n'
    stream = map_stream(line(nested) + line(long_string) + nest_bomb + huge + b"not json\n"
                        + line({"reason": "timing-info"}) + line({"reason": "build-finished", "success": 1.0e999})
                        + line(message("src/lib.rs")), PATHS)
    assert stream.dropped == 7 and len(stream.records) == 1


def test_short_prints_each_rendered_message_and_nothing_else() -> None:
    data = CAPTURED[0].read_bytes()
    cargo = [r["message"]["rendered"] for r in records(data) if r["reason"] == "compiler-message"]
    assert render_stream(map_stream(data, PATHS), "short") == "".join(cargo)


def test_clean_text_escapes_as_sanitise_does_and_keeps_newlines_and_tabs() -> None:
    assert clean_text("a\tb\nc") == "a\tb\nc"
    assert clean_text("a\x1bb\u200bc\U000e0001") == "a\\x1bb\\u200bc\\U000e0001"
    assert clean_text("\x1b[31mred\x1b[0m\x1b[31;1;4mx\x1b[?25l", ansi=True) == \
        "\x1b[31mred\x1b[0m\x1b[31;1;4mx\\x1b[?25l"


# -- anything the guest prints ---------------------------------------------------------

WORDS = ["compiler-message", "compiler-artifact", "build-script-executed", "build-finished",
         "src/lib.rs", "../x.rs", "/guest/repo/src/lib.rs", "/etc/passwd", "/cargo-home/registry/x",
         "/.roteiro-scratch/target/x", "path+file:///guest/repo#x@0.1.0", "path+file:///etc#x",
         "\x1b[31m", "\x1b]8;;x\x07", "##[", "::", "\u202e", ""]
KEYS = ["reason", "package_id", "manifest_path", "target", "src_path", "message", "spans",
        "children", "file_name", "expansion", "span", "def_site_span", "rendered", "filenames",
        "executable", "out_dir", "linked_paths", "env", "success"]
scalars = st.one_of(st.none(), st.booleans(), st.integers(min_value=-2**70, max_value=2**70),
                    st.floats(allow_nan=True), st.sampled_from(WORDS), st.text(max_size=20))
jsonish = st.recursive(scalars, lambda inner: st.one_of(
    st.lists(inner, max_size=4), st.dictionaries(st.sampled_from(KEYS), inner, max_size=6)),
    max_leaves=40)


def _strings(value: object) -> list[str]:
    if isinstance(value, str):
        return [value]
    if isinstance(value, list):
        return [s for item in value for s in _strings(item)]
    if isinstance(value, dict):
        return [s for key, item in value.items() for s in [key, *_strings(item)]]
    return []


def _file_names(diagnostic: object) -> list[object]:
    """The file of every span of a diagnostic, its children's and their expansions'."""
    if not isinstance(diagnostic, dict):
        return []
    names: list[object] = []
    spans = list(diagnostic.get("spans") or [])
    while spans:
        span = spans.pop()
        names.append(span["file_name"])
        expansion = span.get("expansion")
        if isinstance(expansion, dict):
            spans += [s for s in (expansion.get("span"), expansion.get("def_site_span")) if s is not None]
    return names + [f for child in diagnostic.get("children") or [] for f in _file_names(child)]


@settings(max_examples=300)
@given(st.lists(st.one_of(jsonish, st.builds(lambda reason, body: {"reason": reason, **body},
                                             st.sampled_from(WORDS[:4]),
                                             st.dictionaries(st.sampled_from(KEYS), jsonish, max_size=6)),
                          st.builds(lambda m: {**message("src/lib.rs"), "message": m}, jsonish)),
                max_size=6), st.booleans())
def test_anything_the_guest_prints_maps_to_parseable_clean_records(lines: list[object], ansi: bool) -> None:
    data = b"".join(json.dumps(item).encode() + b"\n" for item in lines)
    stream = map_stream(data, PATHS, ansi=ansi)
    assert len(stream.records) + stream.dropped == len(lines)
    text = render_stream(stream, "json")
    for record, printed_line in zip(stream.records, text.splitlines(), strict=True):
        assert json.loads(printed_line) == record  # what is printed parses back whole
        assert record["reason"] in WORDS[:4]
        for string in _strings({k: v for k, v in record.items() if k != "message"}):
            assert "\x1b" not in string
        for string in _strings(record):
            assert "\x1b" not in string.replace("\x1b[31m", "") if ansi else "\x1b" not in string
        diagnostic = record.get("message") if record["reason"] == "compiler-message" else None
        for file_name in _file_names(diagnostic):  # the tree's, as it was, or the view's
            assert PATHS.host_path(file_name) == file_name or file_name.startswith("/host/views/k1/")
    assert "##[" not in text


# -- where it is asked for --------------------------------------------------------------


def test_message_format_owns_stdout() -> None:
    with pytest.raises(UsageError, match="--message-format json and --format sarif would both be printed"):
        plan_outputs(["sarif"], stream="json")
    assert plan_outputs([], stream="json").targets == ()  # no report at all: the stream alone
    [target] = plan_outputs([], Path("r.json"), stream="json").targets
    assert target.path == Path("r.json")
    [target] = plan_outputs(["sarif=x.sarif"], stream="short").targets
    assert target.path == Path("x.sarif")
    [target] = plan_outputs([]).targets  # control: without it the report is printed
    assert target.path is None


def test_a_rendering_reaches_cargo_and_leaves_the_dependency_caches_key_alone() -> None:
    plain = clippy_argv(ClippyOptions())
    ansi = clippy_argv(ClippyOptions(rendering="json-diagnostic-rendered-ansi"))
    assert ansi == [*plain[:6], "--message-format=json-diagnostic-rendered-ansi", *plain[6:]]
    assert without_target_selection(build_part(ansi)) == without_target_selection(build_part(plain))
    with pytest.raises(ValueError, match="not a rendering"):
        clippy_argv(ClippyOptions(rendering="human"))


def test_the_command_line_refuses_two_things_on_stdout_before_anything_runs(tmp_path: Path) -> None:
    exe = Path(sys.executable).with_name("pylint-sandbox")

    def run(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([str(exe), "lint", "clippy", str(tmp_path), *args], capture_output=True,
                              text=True, timeout=60, check=False)

    both = run("--message-format", "json", "--format", "github")
    assert both.returncode == 2 and both.stdout == ""
    assert "--message-format json and --format github would both be printed on stdout" in both.stderr
    wrong = run("--message-format", "human")  # cargo's default, and no stream of records
    assert wrong.returncode == 2 and "human" in wrong.stderr and wrong.stdout == ""


def test_the_stream_alone_reaches_stdout_and_what_was_left_out_is_said_on_stderr(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """run_lint_command with only the VM run replaced (the stream as lint() fills it)."""
    from realcargo import make_report  # loaded by tests/unit/conftest.py

    from roteiro_py import config, lint

    mapped = map_stream(CAPTURED[0].read_bytes() + b"not json\n", PATHS)
    text = render_stream(mapped, "json")

    def ran(request: lint.LintRequest, progress: object, stream: lint.CargoStream | None = None) -> object:
        assert stream is not None and request.message_format == "json"
        stream.text, stream.dropped = text, mapped.dropped
        return make_report([], build_succeeded=False), config.Settings()

    monkeypatch.setattr(lint, "lint", ran)
    code = lint.run_lint_command(lint.LintRequest(path=tmp_path, message_format="json"))
    out, err = capsys.readouterr()
    assert code == 1  # the build failed: the lint's exit code, the stream whole all the same
    assert out == text and [json.loads(line)["reason"] for line in out.splitlines()][-1] == "build-finished"
    assert "left out of cargo's stream: 1 line(s) from the guest" in err


@pytest.mark.parametrize("relative", [False, True])
def test_a_dotdot_path_through_a_link_in_the_tree_names_the_trees_file_not_the_links(
        tmp_path: Path, relative: bool) -> None:
    """`ws/link/../id_rsa` is inside the workspace as text, but a consumer opening it
    goes through `link` (here to ~/.ssh/keys) and reads ~/.ssh/id_rsa: the mapped path
    is the normalised one, which names the tree's own file (or none)."""
    secret = tmp_path / "home" / ".ssh"
    (secret / "keys").mkdir(parents=True)
    (secret / "id_rsa").write_text("PRIVATE KEY\n")
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "src" / "lib.rs").write_text("pub fn f() {}\n")
    (workspace / "link").symlink_to(secret / "keys")
    paths = StreamPaths(PurePosixPath(workspace))
    hostile = "link/../id_rsa" if relative else f"{workspace}/link/../id_rsa"
    record = message("src/lib.rs")
    record["message"]["spans"].append({**record["message"]["spans"][0], "file_name": hostile})
    record["manifest_path"] = f"{workspace}/Cargo.toml"
    record["package_id"] = f"path+file://{workspace}#x@0.1.0"
    record["target"]["src_path"] = f"{workspace}/src/lib.rs"
    [ours] = printed(map_stream(line(record), paths))
    for span in ours["message"]["spans"]:
        opened = Path(span["file_name"])
        opened = opened if opened.is_absolute() else workspace / opened
        assert not (opened.exists() and opened.samefile(secret / "id_rsa"))
        assert ".." not in opened.parts


def test_a_path_through_a_link_in_the_host_tree_to_outside_it_is_left_out(tmp_path: Path) -> None:
    """`ws/link/id_rsa`, with the tree's `link` -> ~/.ssh: inside the workspace as text, and
    a legitimate rustc in the guest could never have read it (the link leads nowhere
    there), but a reader opening it on the host reads ~/.ssh/id_rsa. A link that stays in
    the tree (`src/shared` -> `../common`) keeps its span."""
    secret = tmp_path / "home" / ".ssh"
    secret.mkdir(parents=True)
    (secret / "id_rsa").write_text("PRIVATE KEY\n")
    workspace = tmp_path / "ws"
    (workspace / "src").mkdir(parents=True)
    (workspace / "common").mkdir()
    (workspace / "common" / "x.rs").write_text("pub fn x() {}\n")
    (workspace / "src" / "shared").symlink_to("../common")
    (workspace / "link").symlink_to(secret)
    (workspace / "src" / "key.rs").symlink_to(secret / "id_rsa")
    paths = StreamPaths(PurePosixPath(workspace), resolves_inside=resolves_inside(workspace))
    record = message("src/lib.rs")
    record["manifest_path"] = f"{workspace}/Cargo.toml"
    record["package_id"] = f"path+file://{workspace}#x@0.1.0"
    record["target"]["src_path"] = f"{workspace}/src/lib.rs"
    hostile = [f"{workspace}/link/id_rsa", "link/id_rsa", "src/key.rs", f"{workspace}/src/key.rs"]
    kept = ["src/shared/x.rs", f"{workspace}/src/shared/x.rs"]
    for name in hostile + kept:
        record["message"]["spans"].append({**record["message"]["spans"][0], "file_name": name})
    [ours] = printed(map_stream(line(record), paths))
    assert [span["file_name"] for span in ours["message"]["spans"]] == ["src/lib.rs", *kept]


@pytest.mark.parametrize("reason, missing", [
    ("compiler-message", "package_id"), ("compiler-message", "manifest_path"), ("compiler-message", "target"),
    ("compiler-artifact", "package_id"), ("compiler-artifact", "manifest_path"),
    ("compiler-artifact", "target"), ("build-script-executed", "package_id")])
def test_a_record_without_a_field_cargo_always_writes_a_host_path_in_is_dropped(reason: str, missing: str) -> None:
    """The docstring's promise: no package_id, manifest_path or target.src_path with a host
    path, no record. Leaving the field out must not be a way around mapping it."""
    record = {**message("src/lib.rs"), "reason": reason}
    del record[missing]
    stream = map_stream(line(record), PATHS)
    assert (stream.records, stream.dropped) == ([], 1)
    # control: the whole record passes
    assert map_stream(line({**message("src/lib.rs"), "reason": reason}), PATHS).dropped == 0
