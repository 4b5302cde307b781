"""The lockfile alone decides what is fetched, and every pin is checked before anything is
(roteiro_py/cargo/lockfile.py): https only, a checksum for every registry package, a full
commit for every git one; a hostile source is a refusal naming the package, never exit 4."""

from __future__ import annotations

from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py import errors
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE, pin_of, pins_of, read_pins

SUM = "a" * 64
COMMIT = "0123456789abcdef0123456789abcdef01234567"
LOCK = Path("/t/Cargo.lock")


def test_registry_and_git_pins_are_read_with_what_the_guest_needs(tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    lock.write_text(
        'version = 4\n'
        f'[[package]]\nname = "itoa"\nversion = "1.0.15"\nsource = "{CRATES_IO_SOURCE}"\nchecksum = "{SUM}"\n'
        f'[[package]]\nname = "priv"\nversion = "0.2.0"\nsource = "sparse+https://reg.example/idx/"\n'
        f'checksum = "{"b" * 64}"\n'
        f'[[package]]\nname = "gdep"\nversion = "0.1.0"\nsource = "git+https://git.example/x/gdep?branch=dev#{COMMIT}"\n'
        '[[package]]\nname = "me"\nversion = "0.1.0"\ndependencies = ["itoa", "priv", "gdep"]\n')
    got = read_pins(lock)
    assert [(p.name, p.kind, p.url) for p in got.pins] == [
        ("itoa", "registry", "https://index.crates.io/"),
        ("priv", "registry", "https://reg.example/idx/"),
        ("gdep", "git", "https://git.example/x/gdep")]
    assert got.pins[2].rev == COMMIT and got.pins[2].reference == ("branch", "dev")
    assert got.path_packages == ("me",)


@pytest.mark.parametrize(("source", "said"), [
    (f"git+file:///home/u/private#{COMMIT}", "not https"),
    (f"git+ssh://git@host/x#{COMMIT}", "not https"),
    (f"git+git://host/x#{COMMIT}", "not https"),
    (f"git+http://host/x#{COMMIT}", "not https"),
    ("git+https://host/x#main", "full commit id"),
    ("git+https://host/x", "full commit id"),
    (f"git+https://user:pw@host/x#{COMMIT}", "names a user"),
    (f"git+https://host/x?branch=a&tag=b#{COMMIT}", "query other than"),
    (f"git+https://host/x?path=../y#{COMMIT}", "query other than"),
    (f"git+https://host/x?branch=a%22b#{COMMIT}", "characters a git reference"),
    ("sparse+https://[x/", "does not parse"),  # urlsplit's ValueError was exit 4
    ("sparse+https://host:notaport/", "does not parse"),
    ("sparse+file:///srv/registry/", "not https"),
    ("registry+http://host/index", "not https"),
    ("sparse+https:///nohost/", "no valid host"),
    ("sparse+https://host/idx?x=1", "query or a fragment"),
    ("directory+/vendor", "none that cargo writes"),
    ('sparse+https://host/"; rm -rf /', "not https"),
])
def test_a_hostile_source_is_refused_naming_the_package(source: str, said: str) -> None:
    with pytest.raises(errors.PackageRefused) as caught:
        pin_of(LOCK, "dep", "1.0.0", source, SUM)
    text = caught.value.guidance().render_text()
    assert "dep 1.0.0" in text and said in text, text
    assert caught.value.exit_code == 3


def test_a_registry_package_without_a_checksum_is_refused_by_name() -> None:
    with pytest.raises(errors.PackageRefused, match="no sha256 checksum"):
        pin_of(LOCK, "old", "0.1.0", CRATES_IO_SOURCE, None)
    with pytest.raises(errors.PackageRefused, match="not sha256 hex"):
        pin_of(LOCK, "old", "0.1.0", CRATES_IO_SOURCE, "ABC")
    assert pin_of(LOCK, "old", "0.1.0", CRATES_IO_SOURCE, SUM).checksum == SUM  # control


def test_a_version_1_lockfile_is_refused_naming_the_first_package() -> None:
    data = {"package": [{"name": "serde", "version": "1.0.0", "source": CRATES_IO_SOURCE}],
            "metadata": {f"checksum serde 1.0.0 ({CRATES_IO_SOURCE})": SUM}}
    with pytest.raises(errors.PackageRefused, match="serde 1.0.0"):
        pins_of(LOCK, data)


@pytest.mark.parametrize("name", ["../x", "../../etc", "a/b", "x\ny", "", "x" * 65, 7])
def test_a_name_that_would_become_a_path_is_refused(name: object) -> None:
    with pytest.raises(errors.TreeFileRefused):
        pins_of(LOCK, {"package": [{"name": name, "version": "1.0.0", "source": CRATES_IO_SOURCE,
                                    "checksum": SUM}]})


def test_repeated_pins_are_kept_once_in_order() -> None:
    package = {"name": "a", "version": "1.0.0", "source": CRATES_IO_SOURCE, "checksum": SUM}
    got = pins_of(LOCK, {"package": [package, {**package, "name": "b"}, package]})
    assert [p.name for p in got.pins] == ["a", "b"]


_text = st.text(st.characters(min_codepoint=0, max_codepoint=0x2FF), max_size=80)
_sources = st.one_of(
    _text,
    st.builds(lambda k, rest: f"{k}+{rest}", st.sampled_from(["git", "sparse", "registry", "x"]),
              _text),
    st.builds(lambda rest, c: f"git+https://{rest}#{c}", _text, st.sampled_from([COMMIT, "", "zz"])),
    st.builds(lambda rest: f"sparse+https://{rest}", _text),
)


@given(source=_sources, checksum=st.one_of(st.none(), st.just(SUM), _text))
def test_any_source_is_a_pin_or_a_refusal(source: str, checksum: str | None) -> None:
    """Hypothesis: whatever a lockfile's source says, the reader ends in a checked pin or a
    refusal; an accepted one holds only what a TOML string and a path may."""
    try:
        pin = pin_of(LOCK, "dep", "1.0.0", source, checksum)
    except errors.PackageRefused:
        return
    assert pin.url.startswith("https://")
    assert not any(c in pin.url for c in ' "\\\n\t#')
    if pin.reference is not None:
        assert not any(c in pin.reference[1] for c in '"\\\n ')


_values = st.one_of(st.none(), st.integers(), _sources, st.lists(st.text(max_size=5), max_size=2))


@given(st.lists(st.fixed_dictionaries({}, optional={"name": st.one_of(_values, st.just("itoa")),
                                                    "version": st.one_of(_values, st.just("1.0.0")),
                                                    "source": _values,
                                                    "checksum": st.one_of(_values, st.just(SUM))}),
                max_size=4))
def test_fuzzed_lockfile_packages_give_checked_pins_or_a_refusal_naming_the_lockfile(
        packages: list[dict[str, object]]) -> None:
    """Hypothesis: whatever a lockfile's `[[package]]` entries hold, its pins are each a
    registry package with a checksum or a git one at a full commit, with names that stay
    one path component, or the lockfile is refused by name (never exit 4)."""
    try:
        found = pins_of(LOCK, {"package": packages})
    except (errors.TreeFileRefused, errors.PackageRefused) as refused:
        assert str(LOCK) in refused.guidance().render_text()
        return
    for pin in found.pins:
        assert pin.kind in ("registry", "git")
        assert "/" not in pin.name + pin.version and ".." not in pin.name
        if pin.kind == "registry":
            assert pin.checksum is not None and len(pin.checksum) == 64
        else:
            assert pin.rev is not None and len(pin.rev) in (40, 64)


@given(st.binary(max_size=300))
def test_fuzzed_lockfile_bytes_give_pins_or_a_refusal_naming_the_file(
        tmp_path_factory: pytest.TempPathFactory, content: bytes) -> None:
    path = tmp_path_factory.mktemp("lock") / "Cargo.lock"
    path.write_bytes(content)
    try:
        assert {pin.kind for pin in read_pins(path).pins} <= {"registry", "git"}
    except (errors.TreeFileRefused, errors.PackageRefused) as refused:
        assert str(path) in refused.guidance().render_text()
