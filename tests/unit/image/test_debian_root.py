"""The image's Debian root: the dependency closure resolved from a crafted index, and the
merged-/usr unpacking of real .deb files made here."""

from __future__ import annotations

import tarfile
from pathlib import Path

import pytest

from roteiro_py.image import debian_root
from roteiro_py.image.debian_root import Unresolvable
from roteiro_py.vm.assets.debian_archive import ArchiveError
from tests.unit.vm.assets import test_debian_archive as archive_support


def stanza(name: str, version: str = "1.0", size: int = 10, **fields: str) -> str:
    extra = "".join(f"{key.replace('_', '-')}: {value}\n" for key, value in fields.items())
    return (f"Package: {name}\nVersion: {version}\n{extra}Filename: pool/main/{name}.deb\nSize: {size}\n"
            f"SHA256: {'a' * 64}\n")


MAIN = "\n".join([
    stanza("app", Pre_Depends="early", Depends="missing-x | alt-b, choice-c | choice-d, virt, needs (>= 2.0)"),
    stanza("early"),
    stanza("alt-b"),
    stanza("choice-c"),
    stanza("choice-d"),
    stanza("provider-2", Provides="virt"),
    stanza("provider-1", Provides="virt (= 1.0), other"),
    stanza("needs", "1.5"),
    stanza("huge", size=99999999999999),  # unusable, and never wanted: not read closely
]).encode()
SECURITY = stanza("needs", "2.1").encode()


def index(*texts: bytes) -> dict[str, debian_root.Located]:
    return debian_root.merged_index([(f"archive{i}", text) for i, text in enumerate(texts)])


def names(found: list[debian_root.Located]) -> list[str]:
    return [located.package.name for located in found]


def test_the_closure_takes_pre_depends_the_first_satisfiable_alternative_and_a_provider() -> None:
    found = debian_root.resolve(index(MAIN, SECURITY), ["app"])
    assert names(found) == ["alt-b", "app", "choice-c", "early", "needs", "provider-1"]
    assert [(p.archive, p.package.version) for p in found if p.package.name == "needs"] == [("archive1", "2.1")]


def test_a_version_constraint_nothing_meets_is_refused_naming_the_package_and_the_relation() -> None:
    with pytest.raises(Unresolvable, match=r"app 1.0 depends on needs \(>= 2.0\), which no package"):
        debian_root.resolve(index(MAIN), ["app"])  # control: with the security index it resolves (above)


def test_a_missing_dependency_or_seed_is_refused_by_name() -> None:
    text = stanza("top", Depends="gone-a | gone-b").encode()
    with pytest.raises(Unresolvable, match=r"top 1.0 depends on gone-a \| gone-b"):
        debian_root.resolve(index(text), ["top"])
    with pytest.raises(Unresolvable, match=r"absent \(the image's seed\) is in neither"):
        debian_root.resolve(index(text), ["absent"])
    fixed = text + b"\n" + stanza("gone-b").encode()
    assert names(debian_root.resolve(index(fixed), ["top"])) == ["gone-b", "top"]


def test_the_closure_is_bounded() -> None:
    with pytest.raises(Unresolvable, match="larger than 5 packages"):
        debian_root.resolve(index(MAIN, SECURITY), ["app"], max_packages=5)
    assert len(debian_root.resolve(index(MAIN, SECURITY), ["app"], max_packages=6)) == 6


def test_only_the_chosen_packages_are_read_closely() -> None:
    indexes = [("archive0", MAIN), ("archive1", SECURITY)]
    chosen = debian_root.resolve(debian_root.merged_index(indexes), ["app"])
    assert names(debian_root.verified(chosen, indexes)) == names(chosen)
    with pytest.raises(ArchiveError, match="huge has no usable SHA256 or Size"):
        debian_root.verified(debian_root.resolve(debian_root.merged_index(indexes), ["huge"]), indexes)


def member(name: str, kind: bytes = tarfile.REGTYPE, linkname: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, linkname, mode
    return info


def test_unpacking_merges_usr_copies_hard_links_drops_devices_and_makes_cc_and_sh(tmp_path: Path) -> None:
    gcc = archive_support.make_deb(tmp_path / "gcc.deb", [
        ("./usr/bin/gcc-12", b"GCC"), member("./usr/bin/gcc", tarfile.SYMTYPE, "gcc-12")])
    dash = archive_support.make_deb(tmp_path / "dash.deb", [
        ("./bin/dash", b"DASH"), member("./bin/rdash", tarfile.LNKTYPE, "./bin/dash"),
        member("./dev/null", tarfile.CHRTYPE), ("./lib/x86_64-linux-gnu/libc.so.6", b"LIBC")])
    setuid = archive_support.make_deb(tmp_path / "su.deb", [])
    contents = tmp_path / "contents"
    contents.mkdir()
    tree = debian_root.unpack([("dash", dash), ("gcc", gcc), ("su", setuid)], contents)
    entries = tree.entries
    assert entries["bin"].linkname == "usr/bin" and entries["lib64"].linkname == "usr/lib64"
    assert entries["usr/bin/dash"].source is not None and entries["usr/bin/dash"].source.read_bytes() == b"DASH"
    assert entries["usr/bin/rdash"].kind == "file" and entries["usr/bin/rdash"].source == entries["usr/bin/dash"].source
    assert entries["usr/lib/x86_64-linux-gnu/libc.so.6"].kind == "file"
    assert "dev/null" not in entries and "bin/dash" not in entries
    assert (entries["usr/bin/cc"].kind, entries["usr/bin/cc"].linkname) == ("symlink", "gcc")
    assert entries["usr/bin/sh"].linkname == "dash"
    # control: without gcc and dash in the root, no link to nothing is made
    bare = debian_root.unpack([("su", setuid)], contents)
    assert "usr/bin/cc" not in bare.entries and "usr/bin/sh" not in bare.entries


def test_a_package_that_would_replace_the_merged_links_or_is_too_large_is_refused(tmp_path: Path) -> None:
    contents = tmp_path / "contents"
    contents.mkdir()
    hostile = archive_support.make_deb(tmp_path / "h.deb", [member("./lib", tarfile.SYMTYPE, "/etc")])
    with pytest.raises(ArchiveError, match="h: member 'lib' would replace the merged /usr layout"):
        debian_root.unpack([("h", hostile)], contents)
    big = archive_support.make_deb(tmp_path / "b.deb", [("./usr/x", b"12345")])
    with pytest.raises(ArchiveError, match="larger than 4 bytes"):
        debian_root.unpack([("b", big)], contents, max_bytes=4)
    assert debian_root.unpack([("b", big)], contents, max_bytes=5).entries["usr/x"].size == 5
