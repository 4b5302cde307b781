"""Trees, lockfiles and stored packages for the tests of the host side of cargo
(roteiro_py/cargo/): a view is made by putting `.crate` files in the package store, as
`fetch-deps` does, never by faking a cargo home."""

from __future__ import annotations

import gzip
import hashlib
import io
import tarfile
from pathlib import Path

from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE

MEMBER = '[package]\nname = "{}"\nversion = "0.1.0"\n'


def workspace(base: Path, *members: str) -> Path:
    """A workspace of path members only, with its lockfile (which pins nothing)."""
    root = base / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text(
        "[workspace]\nmembers = [" + ", ".join(f'"{m}"' for m in members) + "]\n")
    for member in members:
        (root / member / "src").mkdir(parents=True)
        (root / member / "Cargo.toml").write_text(MEMBER.format(member))
    (root / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    return root


def crate_bytes(name: str, version: str, lib: str = "pub fn f() -> u32 { 1 }\n",
                extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """A `.crate` as cargo package makes one: a gzip tar of `<name>-<version>/`."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        files = {"Cargo.toml": (f'[package]\nname = "{name}"\nversion = "{version}"\n'
                                'edition = "2021"\n[lib]\npath = "src/lib.rs"\n'),
                 "src/lib.rs": lib}
        for path, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size = len(data)
            info.mode = 0o644
            tar.addfile(info, io.BytesIO(data))
        for info in extra or []:
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return gzip.compress(raw.getvalue(), mtime=0)


def stored(data: bytes) -> str:
    """Keep `data` in the package store, as fetch-deps does; its checksum."""
    checksum = hashlib.sha256(data).hexdigest()
    assert store.keep_crate_bytes(data, checksum) is not None
    return checksum


def tree_with(tmp_path: Path, deps: dict[str, tuple[str, str]]) -> Path:
    """A workspace depending on each `name = (version, checksum)` from crates.io."""
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "src" / "lib.rs").write_text("".join(f"pub use {n}::f as {n}_f;\n" for n in deps))
    (tree / "Cargo.toml").write_text(
        '[package]\nname = "me"\nversion = "0.1.0"\nedition = "2021"\n[dependencies]\n'
        + "".join(f'{n} = "={v}"\n' for n, (v, _) in deps.items()))
    (tree / "Cargo.lock").write_text(
        "version = 4\n"
        + "".join(f'[[package]]\nname = "{n}"\nversion = "{v}"\nsource = "{CRATES_IO_SOURCE}"\n'
                  f'checksum = "{c}"\n' for n, (v, c) in sorted(deps.items()))
        + '[[package]]\nname = "me"\nversion = "0.1.0"\ndependencies = ['
        + ", ".join(f'"{n}"' for n in sorted(deps)) + "]\n")
    return tree


def lockfile(tree: Path, *packages: tuple[str, str, str | None, str | None]) -> Path:
    """`tree`/Cargo.lock holding the package `top` and each (name, version, source,
    checksum), a None left out."""
    text = 'version = 4\n[[package]]\nname = "top"\nversion = "0.1.0"\n'
    for name, version, source, checksum in packages:
        text += f'[[package]]\nname = "{name}"\nversion = "{version}"\n'
        if source is not None:
            text += f'source = "{source}"\n'
        if checksum is not None:
            text += f'checksum = "{checksum}"\n'
    (tree / "Cargo.lock").write_text(text)
    return tree / "Cargo.lock"
