"""Reproducible layers: the same tree gives the same bytes, a changed input another digest."""

from __future__ import annotations

import tarfile
from pathlib import Path

from roteiro_py.image import layers
from roteiro_py.image.layers import Entry, Tree


def tree_of(root: Path, content: bytes = b"hello\n") -> Tree:
    (root / "src").mkdir(exist_ok=True)
    data = root / "src" / "data"
    data.write_bytes(content)
    tree = Tree()
    tree.add("usr/bin/tool", Entry("file", 0o755, source=data, size=len(content)))
    tree.add("bin", Entry("symlink", 0o777, linkname="usr/bin"))
    tree.add("etc/conf", Entry("file", 0o644, uid=0, gid=42, source=data, size=len(content)))
    return tree


def test_the_same_tree_gives_the_same_digest_and_a_changed_byte_another(tmp_path: Path) -> None:
    first = layers.write_layer(tree_of(tmp_path), tmp_path / "a")
    (tmp_path / "src" / "data").touch()  # a new mtime on the host: not an input
    second = layers.write_layer(tree_of(tmp_path), tmp_path / "b")
    assert first == second
    changed = layers.write_layer(tree_of(tmp_path, b"hellO\n"), tmp_path / "c")
    assert changed.digest != first.digest
    with tarfile.open(tmp_path / "a" / first.digest.removeprefix("sha256:")) as tar:
        members = tar.getmembers()
    names = [m.name for m in members]
    assert names == sorted(names) == ["bin", "etc", "etc/conf", "usr", "usr/bin", "usr/bin/tool"]
    assert {m.mtime for m in members} == {layers.EPOCH}
    assert {(m.uname, m.gname) for m in members} == {("", "")}
    assert [(m.name, m.gid) for m in members if m.gid] == [("etc/conf", 42)]
    assert [m.name for m in members if m.issym()] == ["bin"]


def test_the_layout_pins_the_manifest_and_two_writes_give_one_reference(tmp_path: Path) -> None:
    refs = []
    for name in ("one", "two"):
        blob = layers.write_layer(tree_of(tmp_path), tmp_path / name / "blobs" / "sha256")
        refs.append(layers.write_layout(tmp_path / name, [layers.LayerRecord(blob, "test")],
                                        "localhost/x", "1", {"a": "b"}))
    assert refs[0] == refs[1]
    assert refs[0].startswith("localhost/x:1@sha256:")
    digest = refs[0].rsplit(":", 1)[1]
    assert (tmp_path / "one" / "blobs" / "sha256" / digest).is_file()
    other = layers.write_layout(tmp_path / "two", [layers.LayerRecord(layers.write_layer(
        tree_of(tmp_path, b"x"), tmp_path / "two" / "blobs" / "sha256"), "test")], "localhost/x", "1", {"a": "b"})
    assert other != refs[0]
