from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py.errors import MalformedReference, TagNotDigest
from roteiro_py.reference import DEFAULT_REGISTRY, ImageReference, parse, parse_pinned

HEX = "0123456789abcdef" * 4


@pytest.mark.parametrize(
    ("text", "registry", "repository", "tag"),
    [
        (f"rust@sha256:{HEX}", DEFAULT_REGISTRY, "library/rust", None),
        (f"docker.io/rust:1.95@sha256:{HEX}", DEFAULT_REGISTRY, "library/rust", "1.95"),
        (f"ghcr.io/acme/lint/clippy:v1@sha256:{HEX}", "ghcr.io", "acme/lint/clippy", "v1"),
        (f"localhost:5000/clippy@sha256:{HEX}", "localhost:5000", "clippy", None),
        (f"127.0.0.1:5000/a/b:t@sha256:{HEX}", "127.0.0.1:5000", "a/b", "t"),
        (f"acme/clippy@sha256:{HEX}", DEFAULT_REGISTRY, "acme/clippy", None),
    ],
)
def test_pinned_references_parse(text: str, registry: str, repository: str, tag: str | None) -> None:
    ref = parse_pinned(text)
    assert (ref.registry, ref.repository, ref.tag, ref.digest) == (registry, repository, tag,
                                                                   f"sha256:{HEX}")
    assert parse(str(ref)) == ref


def test_loopback() -> None:
    assert parse(f"localhost:5000/x@sha256:{HEX}").is_loopback
    assert parse(f"127.0.0.1:5000/x@sha256:{HEX}").is_loopback
    assert not parse(f"ghcr.io/x@sha256:{HEX}").is_loopback
    assert parse(f"127.0.0.2:5000/x@sha256:{HEX}").is_loopback
    assert parse(f"[::1]:5000/x@sha256:{HEX}").is_loopback
    assert not parse(f"127.evil.example/x@sha256:{HEX}").is_loopback
    assert not parse(f"localhost.evil.example/x@sha256:{HEX}").is_loopback


@pytest.mark.parametrize("text", ["rust", "rust:1.95", "ghcr.io/acme/clippy:latest", "localhost:5000/x"])
def test_a_tag_is_refused_naming_the_reference(text: str) -> None:
    with pytest.raises(TagNotDigest) as caught:
        parse_pinned(text, source="flag --image")
    assert text in caught.value.guidance().render_text()


@pytest.mark.parametrize(
    ("text", "what"),
    [
        ("x@sha256:abc", "3 hex digits, not 64"),
        (f"x@sha256:{HEX.upper()}", "contains 'A'"),
        (f"x@md5:{HEX}", "algorithm 'md5'"),
        (f"x@{HEX}", "no algorithm prefix"),
        ("", "empty"),
        (f"Upper/Case@sha256:{HEX}", "component 'Upper'"),
        (f"x:bad tag@sha256:{HEX}", "whitespace"),
        (f"reg.example//x@sha256:{HEX}", "repository name is empty"),
    ],
)
def test_malformed_says_what(text: str, what: str) -> None:
    with pytest.raises(MalformedReference) as caught:
        parse_pinned(text)
    assert what in caught.value.guidance().render_text()


# -- fuzzing: any text is a reference or our refusal, never another exception ---------------

_FRAGMENTS = st.sampled_from([
    "localhost", "registry.example", "127.0.0.1", "[::1]", ":5000", ":", "/", "//", "@",
    "sha256:", HEX, HEX.upper(), "sha512:", "team", "clippy", "Team", "_", "__", "-", ".",
    "..", "1.95", "latest", " ", "\t", "\n", "é", "\u202e", "\x00", "docker.io", "library",
    "a" * 130, "0", "[", "]", "x" * 300,
])
REFERENCE_TEXT = st.one_of(st.text(max_size=300),
                           st.lists(_FRAGMENTS, max_size=14).map("".join))


@given(REFERENCE_TEXT)
def test_any_text_parses_or_is_refused_as_malformed(text: str) -> None:
    try:
        ref = parse(text)
    except MalformedReference as refused:
        assert refused.guidance().render_text().startswith("error: ")
        return
    assert isinstance(ref, ImageReference) and ref.repository
    assert isinstance(ref.is_loopback, bool)
    assert parse(str(ref)) == ref  # what is printed reads back as the same image


@given(REFERENCE_TEXT)
def test_any_text_is_pinned_or_refused(text: str) -> None:
    try:
        ref = parse_pinned(text)
    except (MalformedReference, TagNotDigest):
        return
    assert ref.digest is not None and ref.digest.startswith("sha256:")


@pytest.mark.parametrize("tag", ["1.95\u3164", "\u1160x", "caf\u00e9", "\uff11"])
def test_a_tag_is_ascii_only(tag: str) -> None:
    """A tag is printed as provenance: Python's `\\w` would let invisible Hangul fillers
    (U+3164, U+1160) and other Unicode letters through."""
    digest = "sha256:" + "a" * 64
    assert parse(f"localhost/team/clippy:1.95@{digest}").tag == "1.95"  # control
    with pytest.raises(MalformedReference):
        parse(f"localhost/team/clippy:{tag}@{digest}")
