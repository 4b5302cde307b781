"""Hostile configuration: a roteiro.toml is the tree's, a user config or a `config set`
value may be anything. Loading, setting and unsetting give settings or our ConfigError
(exit 2), never another exception (exit 4, "a bug"); the same for the toolchain probe's
parsers on whatever the guest prints."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import tomli_w
from hypothesis import example, given
from hypothesis import strategies as st

from roteiro_py import config
from roteiro_py.clippy.toolchain import PROBE_LIMIT_BYTES, ProbeOutput, toolchain_from_probe
from roteiro_py.errors import EXIT_INTERNAL, ConfigError, ImageLacksLinter, ProbeFailed, RoteiroError

REF = "registry.example/clippy@sha256:" + "cd" * 32
KEYS = sorted(config.known_keys())
#: Deeper than tomllib can recurse with the interpreter's default limit.
DEEP = sys.getrecursionlimit() * 2


def nested(depth: int, key: str = "lint.features", inline: bool = False) -> str:
    section, name = key.split(".")
    value = "{a = " * depth + "1" + "}" * depth if inline else "[" * depth + "]" * depth
    return f"[{section}]\n{name} = {value}\n"


scalars = st.one_of(st.booleans(), st.integers(), st.text(max_size=20), st.floats(allow_nan=False))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=3),
                                                       st.dictionaries(st.text(max_size=5), inner, max_size=3)),
                      max_leaves=10)
documents = st.dictionaries(
    st.sampled_from(["lint", "vm", "other"]),
    st.dictionaries(st.sampled_from([k.split(".")[1] for k in KEYS] + ["nope"]), values, max_size=4),
    max_size=3).map(tomli_w.dumps)
files = st.one_of(
    st.binary(max_size=300),
    st.text(max_size=300).map(str.encode),
    documents.map(str.encode),
    st.builds(nested, st.integers(1, DEEP), st.sampled_from(KEYS), st.booleans()).map(str.encode),
)


def loads_or_refuses(call: object) -> None:
    try:
        call()  # type: ignore[operator]
    except ConfigError as error:
        assert error.exit_code == 2
        error.guidance().render_text()


@given(files)
@example(nested(DEEP).encode())
@example(nested(DEEP, inline=True).encode())
def test_any_repository_config_loads_or_is_a_config_error(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        Path(tmp, config.REPO_CONFIG_NAME).write_bytes(data)
        loads_or_refuses(lambda: config.resolve(Path(tmp), environ={}))


@given(files)
@example(nested(DEEP).encode())
def test_any_user_config_loads_or_is_a_config_error(data: bytes) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        user = config.paths.user_config_path()
        user.parent.mkdir(parents=True, exist_ok=True)
        user.write_bytes(data)
        try:
            loads_or_refuses(lambda: config.resolve(Path(tmp), environ={}))
            loads_or_refuses(lambda: config.unset_value(user, "lint.features"))
        finally:
            user.unlink(missing_ok=True)


@given(st.sampled_from(KEYS), st.one_of(st.text(max_size=200),
                                        st.integers(1, DEEP).map(lambda n: "[" * n + "]" * n),
                                        st.integers(1, DEEP).map(lambda n: "{a=" * n + "1" + "}" * n)))
@example("lint.features", "[" * DEEP)
def test_any_config_set_value_is_stored_or_refused(key: str, raw: str) -> None:
    import tempfile

    with tempfile.TemporaryDirectory() as tmp:
        file = Path(tmp, "config.toml")
        try:
            stored = config.set_value(file, key, raw)
        except RoteiroError as error:
            assert error.exit_code != EXIT_INTERNAL, error
            error.guidance().render_text()
            return
        assert config.read_toml(file)[key.split(".")[0]][key.split(".")[1]] == stored


def test_a_deeply_nested_repository_config_names_the_file(tmp_path: Path) -> None:
    bad = tmp_path / config.REPO_CONFIG_NAME
    bad.write_text(nested(DEEP))
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert str(bad) in text and "nest" in text
    bad.write_text(nested(3))  # control: shallow nesting is read (and refused by type)
    with pytest.raises(ConfigError, match="features"):
        config.resolve(tmp_path)


def test_a_config_file_is_read_up_to_its_limit(tmp_path: Path) -> None:
    bad = tmp_path / config.REPO_CONFIG_NAME
    padding = "#" * config.MAX_CONFIG_BYTES
    bad.write_text("[lint]\nall_targets = true\n" + padding)
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert str(bad) in text and str(config.MAX_CONFIG_BYTES) in text
    bad.write_text("[lint]\nall_targets = true\n" + padding[: -100])  # control: at the limit
    assert config.resolve(tmp_path).settings.lint.all_targets is True


def test_a_linked_repository_config_is_refused(tmp_path: Path) -> None:
    """The repository's roteiro.toml is the tree's; a link would read a file of the host."""
    elsewhere = tmp_path / "host-file.toml"
    elsewhere.write_text("[lint]\nall_targets = true\n")
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / config.REPO_CONFIG_NAME).symlink_to(elsewhere)
    with pytest.raises(ConfigError, match="link"):
        config.resolve(tree)
    (tree / config.REPO_CONFIG_NAME).unlink()
    (tree / config.REPO_CONFIG_NAME).write_text(elsewhere.read_text())  # control: a file is read
    assert config.resolve(tree).settings.lint.all_targets is True


@pytest.mark.parametrize("body", [f'[lint]\nall_targets = "{"x" * 100_000}"\n',
                                  f'[{"x" * 100_000}]\n', f'[lint]\n{"x" * 100_000} = 1\n'])
def test_a_huge_value_or_name_is_not_echoed_whole(tmp_path: Path, body: str) -> None:
    (tmp_path / config.REPO_CONFIG_NAME).write_text(body)
    with pytest.raises(ConfigError) as caught:
        config.resolve(tmp_path)
    text = caught.value.guidance().render_text()
    assert "x" * 50 in text and len(text) < 2000  # shown, and clipped at SHOWN_VALUE_CHARS


clippy_lines = st.one_of(
    st.binary(max_size=200),
    st.builds(lambda v, c, d: f"clippy {v} ({c} {d})\n".encode(),
              st.from_regex(r"\d+\.\d+\.\d+(-[a-z0-9.]+)?", fullmatch=True),
              st.from_regex(r"[0-9a-f]{7,40}", fullmatch=True), st.text(max_size=12)),
    st.integers(0, 2 * PROBE_LIMIT_BYTES).map(lambda n: b"clippy 0.1.95" + b"x" * n),
)
rustc_outputs = st.one_of(
    st.binary(max_size=400),
    st.lists(st.tuples(st.sampled_from(["release", "host", "commit-hash", "binary", "x" * 40, ""]),
                       st.text(max_size=30)), max_size=6).map(
        lambda pairs: ("rustc 1.95.0\n" + "".join(f"{k}: {v}\n" for k, v in pairs)).encode()),
)


RUSTC_OK = (b"rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\ncommit-hash: 59807616e1fa2540724bfbac14d7976d"
            b"7e4a3860\ncommit-date: 2026-04-14\nhost: x86_64-unknown-linux-gnu\nrelease: 1.95.0\n")


@given(st.one_of(st.none(), st.integers(-300, 300)), clippy_lines, st.binary(max_size=100),
       st.one_of(st.none(), st.integers(-300, 300)), rustc_outputs, st.binary(max_size=100))
@example(0, b"clippy 0.1.95 (59807616e1 2026-04-14)\n", b"", 0, RUSTC_OK, b"")  # control: one that parses
def test_any_probe_output_is_a_toolchain_or_our_refusal(
        clippy_status: int | None, clippy_out: bytes, clippy_err: bytes,
        rustc_status: int | None, rustc_out: bytes, rustc_err: bytes) -> None:
    try:
        toolchain = toolchain_from_probe(ProbeOutput(clippy_status, clippy_out, clippy_err),
                                         ProbeOutput(rustc_status, rustc_out, rustc_err), reference=REF)
    except (ImageLacksLinter, ProbeFailed) as refusal:
        assert refusal.exit_code == 3
        refusal.guidance().render_text()
        return
    assert clippy_status == 0 and rustc_status == 0 and toolchain.host
    if rustc_out == RUSTC_OK:
        assert (toolchain.clippy_version, toolchain.rustc_release) == ("0.1.95", "1.95.0")
