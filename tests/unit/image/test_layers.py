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


_LAYERS_OF = """
import sys
from pathlib import Path
from roteiro_py.image import debian_root, layers, toolchain
deb, toolchain_dir, out = map(Path, sys.argv[1:4])
(out / "contents").mkdir(parents=True)
print(layers.write_layer(debian_root.unpack([("p", deb)], out / "contents"), out / "blobs").digest)
print(layers.write_layer(toolchain.toolchain_layer(toolchain_dir), out / "blobs").digest)
"""


def test_the_hosts_locale_does_not_change_a_layers_digest(tmp_path: Path) -> None:
    """A name that is not ASCII (a .deb's data.tar holds raw UTF-8 bytes in GNU headers, as
    dpkg-deb writes them; a toolchain's file names are bytes on disk) was decoded and
    encoded in the host's filesystem encoding: under LC_ALL=C with Python's UTF-8 mode
    off it is ASCII, the names became surrogates and the layer gained a
    `hdrcharset=BINARY` record, so the same packages and toolchain gave another digest."""
    import io
    import os
    import subprocess
    import sys

    data = io.BytesIO()
    with tarfile.open(fileobj=data, mode="w", format=tarfile.GNU_FORMAT, encoding="utf-8") as tar:
        info = tarfile.TarInfo("./usr/share/doc/caf\u00e9")
        info.size = 2
        tar.addfile(info, io.BytesIO(b"ok"))
    member = data.getvalue()
    deb = b"!<arch>\n" + b"".join(
        f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(body):<10}`\n".encode() + body + b"\n" * (len(body) % 2)
        for name, body in (("debian-binary", b"2.0\n"), ("control.tar", b""), ("data.tar", member)))
    (tmp_path / "p.deb").write_bytes(deb)
    toolchain_dir = tmp_path / "toolchain"
    (toolchain_dir / "bin").mkdir(parents=True)
    for binary in ("cargo", "rustc", "cargo-clippy", "clippy-driver"):
        (toolchain_dir / "bin" / binary).write_bytes(b"#!\n")
    (toolchain_dir / "lib").mkdir()
    with open(os.fsencode(toolchain_dir / "lib") + b"/caf\xc3\xa9", "wb") as handle:
        handle.write(b"ok")
    root = Path(__file__).resolve().parents[3]
    digests = []
    for index, locale in enumerate(({"LC_ALL": "C.UTF-8"}, {"LC_ALL": "C", "PYTHONUTF8": "0",
                                                              "PYTHONCOERCECLOCALE": "0"})):
        env = {"PATH": os.environ["PATH"], "PYTHONPATH": str(root), "HOME": str(tmp_path), **locale}
        done = subprocess.run([sys.executable, "-c", _LAYERS_OF, str(tmp_path / "p.deb"), str(toolchain_dir),
                               str(tmp_path / f"out{index}")], env=env, capture_output=True, text=True,
                              timeout=120, check=True)
        digests.append(done.stdout.split())
    assert digests[0] == digests[1]
