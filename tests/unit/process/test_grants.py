"""Grant atoms: parsing refuses what cannot be compared; containment answers honestly."""

from __future__ import annotations

from pathlib import Path

import pytest

from roteiro_py.process.grants import (
    Containment,
    GrantAtom,
    GrantSet,
    MalformedGrant,
    checker_ceiling,
    workspace_grant,
)

YES, NO, UNKNOWN = Containment.YES, Containment.NO, Containment.UNKNOWN


def within(atom: str, ceiling: str) -> Containment:
    return GrantAtom.parse(atom).within(GrantAtom.parse(ceiling))


@pytest.mark.parametrize("text", [
    "fs:read:/src/repo/**", "fs:write:/scratch/**", "fs:list:/src/repo/**",
    "net:egress:host:443", "proc:exec:cargo", "proc:exec:/usr/bin/cargo",
    "secret:use:NAME", "env:read:NAME", "net:egress:[::1]:8080",
])
def test_documented_atoms_parse_and_print_back(text: str) -> None:
    assert str(GrantAtom.parse(text)) == text


@pytest.mark.parametrize(("text", "what"), [
    ("fs:read", "domain:action:resource"),
    ("fs:read:", "resource is empty"),
    ("FS:read:/x", "domain 'FS'"),
    ("fs:raed:/src", "no action 'raed'"),
    ("fs:read:src/repo", "not absolute"),
    ("fs:read:/src/**/x", "last segment"),
    ("fs:read:/src/*.rs", "last segment"),
    ("fs:read:/src/repo/../../etc/**", "`..`"),
    ("fs:read:C:\\src\\..\\x", "`..`"),
    ("fs:read:\\\\server\\share", "UNC"),
    ("fs:read:/src\nfs:write:/", "control character"),
    ("net:egress:host", "host:port"),
    ("net:egress:host:70000", "port '70000'"),
    ("proc:exec:/usr/bin/**", "one program"),
    ("proc:exec:rm -rf", "bare name"),
    ("env:read:A-B", "not a variable"),
])
def test_malformed_atoms_are_refused_naming_what_is_wrong(text: str, what: str) -> None:
    with pytest.raises(MalformedGrant) as caught:
        GrantAtom.parse(text)
    assert isinstance(caught.value, ValueError)
    assert what in str(caught.value)
    assert repr(text) in str(caught.value)


def test_paths_are_compared_on_segment_boundaries() -> None:
    assert within("fs:read:/src/repo/x.rs", "fs:read:/src/repo/**") is YES
    # A string-prefix check would say YES to both of these.
    assert within("fs:read:/src/repository/x.rs", "fs:read:/src/repo/**") is NO
    assert within("fs:read:/src/repository", "fs:read:/src/repo/**") is NO


def test_double_star_is_the_directory_and_everything_under_it() -> None:
    assert within("fs:read:/src/repo", "fs:read:/src/repo/**") is YES
    assert within("fs:read:/src/repo/a/b/c", "fs:read:/src/repo/**") is YES
    assert within("fs:read:/src/repo/a/**", "fs:read:/src/repo/**") is YES
    assert within("fs:read:/src", "fs:read:/src/repo/**") is NO
    assert within("fs:read:/etc/passwd", "fs:read:/**") is YES


def test_an_exact_path_matches_only_itself() -> None:
    assert within("fs:read:/src/repo", "fs:read:/src/repo") is YES
    assert within("fs:read:/src/repo/x", "fs:read:/src/repo") is NO
    assert within("fs:read:/src/repo/**", "fs:read:/src/repo") is NO


def test_dot_dot_cannot_escape_because_it_is_refused() -> None:
    ceiling = GrantSet.of("fs:read:/src/repo/**")
    with pytest.raises(MalformedGrant):
        ceiling.admits(GrantAtom.parse("fs:read:/src/repo/../../etc/shadow"))
    # Harmless spellings are normalised rather than refused.
    assert within("fs:read:/src/./repo//x", "fs:read:/src/repo/**") is YES


def test_windows_paths_are_normalised_to_forward_slashes() -> None:
    atom = GrantAtom.parse("fs:read:c:\\src\\repo\\**")
    assert str(atom) == "fs:read:C:/src/repo/**"
    assert within("fs:read:C:/src/repo/lib.rs", "fs:read:c:\\src\\repo\\**") is YES
    assert within("fs:read:C:\\src\\repository", "fs:read:C:/src/repo/**") is NO
    # Same segments on another root are not nested.
    assert within("fs:read:/src/repo/x", "fs:read:C:/src/repo/**") is NO
    assert within("fs:read:D:/src/repo/x", "fs:read:C:/src/repo/**") is NO


def test_actions_and_domains_do_not_stand_in_for_each_other() -> None:
    assert within("fs:write:/src/repo/x", "fs:read:/src/repo/**") is NO
    assert within("env:read:HOME", "secret:use:HOME") is NO
    assert within("net:egress:example.org:443", "net:egress:example.org:80") is NO
    assert within("net:egress:Example.org:443", "net:egress:example.org:*") is YES


def test_unknown_domains_parse_and_are_unknown_and_unknown_refuses() -> None:
    assert within("gpu:use:0", "gpu:use:0") is UNKNOWN
    assert within("fs:read:/x", "gpu:use:0") is NO  # domains are disjoint
    assert not UNKNOWN.allows
    assert not NO.allows
    assert YES.allows
    ceiling = GrantSet.of("fs:read:/src/**", "gpu:use:0")
    assert GrantSet.of("gpu:use:0").within(ceiling) is UNKNOWN
    assert GrantSet.of("fs:read:/src/x", "gpu:use:0").within(ceiling) is UNKNOWN
    assert GrantSet.of("fs:read:/etc", "gpu:use:0").within(ceiling) is NO


def test_a_bare_program_against_a_path_is_unknown() -> None:
    assert within("proc:exec:/usr/bin/cargo", "proc:exec:cargo") is UNKNOWN
    assert within("proc:exec:cargo", "proc:exec:/usr/bin/cargo") is UNKNOWN
    assert within("proc:exec:/opt/cargo", "proc:exec:/usr/bin/cargo") is NO
    assert within("proc:exec:rustc", "proc:exec:cargo") is NO


def test_any_program_is_a_ceiling_and_only_within_a_ceiling_of_any_program() -> None:
    assert within("proc:exec:cargo", "proc:exec:*") is YES
    assert within("proc:exec:/usr/bin/cargo", "proc:exec:*") is YES
    assert within("proc:exec:*", "proc:exec:*") is YES
    # control: "any program" is not within a ceiling that names one, nor another domain's
    assert within("proc:exec:*", "proc:exec:cargo") is NO
    assert within("proc:exec:*", "proc:exec:/usr/bin/cargo") is NO
    assert within("fs:read:/src", "proc:exec:*") is NO
    with pytest.raises(MalformedGrant, match="bare name"):
        GrantAtom.parse("proc:exec:car*")


def test_workspace_grant_is_exactly_read_list_exec_and_sits_within_the_ceiling(
    tmp_path: Path,
) -> None:
    grant = workspace_grant(tmp_path, "cargo")
    tree = f"{tmp_path.resolve()}/**"
    assert {str(atom) for atom in grant} == {
        f"fs:read:{tree}", f"fs:list:{tree}", "proc:exec:cargo",
    }
    tmp_path = tmp_path.resolve()  # workspace_grant resolves; the ceiling takes paths as given
    assert grant.within(checker_ceiling(tmp_path, "cargo", tmp_path / "scratch")) is YES
    assert grant.within(checker_ceiling(tmp_path, "cargo")) is YES
    # The ceiling discriminates: another tree, another program, the network are beyond it.
    assert grant.within(checker_ceiling(tmp_path / "other", "cargo")) is NO
    assert grant.within(checker_ceiling(tmp_path, "rustc")) is NO
    wider = GrantSet(grant.atoms | {GrantAtom.parse("net:egress:crates.io:443")})
    assert wider.within(checker_ceiling(tmp_path, "cargo")) is NO
    assert [str(a) for a in wider.beyond(checker_ceiling(tmp_path, "cargo"))] == [
        "net:egress:crates.io:443"]


def test_the_checker_ceiling_admits_a_lints_sources_and_scratch_and_nothing_else(tmp_path: Path) -> None:
    view = tmp_path / "views" / "k"
    ceiling = checker_ceiling(tmp_path / "ws", ("cargo", "rustc"), "/.roteiro-scratch",
                              sources=[view / "registry", view / "git"])
    lint = GrantSet.of(f"fs:read:{tmp_path}/ws/**", f"fs:list:{tmp_path}/ws/**",
                       f"fs:read:{view}/registry/**", f"fs:read:{view}/git/**",
                       "fs:write:/.roteiro-scratch/**", "proc:exec:cargo", "proc:exec:rustc")
    assert lint.within(ceiling) is YES
    for beyond in (f"fs:list:{view}/registry/**", f"fs:read:{view}/**", f"fs:write:{tmp_path}/ws/**",
                   f"fs:read:{tmp_path}/**", "fs:write:/tmp/**", "proc:exec:sh", "proc:exec:*",
                   "net:egress:crates.io:443", "env:read:HOME", "secret:use:TOKEN"):
        wider = GrantSet(lint.atoms | {GrantAtom.parse(beyond)})
        assert [str(a) for a in wider.beyond(ceiling)] == [str(GrantAtom.parse(beyond))], beyond
