"""The linter image's Rust toolchain layer, from a rustup-shaped directory (bin/, lib/).

Guarantees:
- The layer holds bin/{cargo,rustc} (and cargo-clippy, clippy-driver unless left out) as
  /usr/local/bin and the whole of lib/ as /usr/local/lib (rustc finds its sysroot as
  bin/../lib), every entry owned by 0:0 (a CI runner's rustup home belongs to the runner,
  which means nothing in the guest), every file 0755 if executable else 0644 (whatever
  the host's umask made of it), set-id bits cleared; a missing binary is refused by
  name. Nothing of the toolchain runs on the host: its version is read from rustup's own
  manifest (lib/rustlib/multirust-channel-manifest.toml), else the toolchain's name.
- `Installed` is such a directory as image/build.py takes a toolchain: keyed by its
  files' names, sizes and mtimes (`inputs`: no byte of ~700 MB is read to key it).
- `host_toolchain` finds an installed rustup toolchain by name under $RUSTUP_HOME
  (default ~/.rustup), as `rustup` names the directory: NAME-x86_64-unknown-linux-gnu, or
  NAME as given when it already carries the triple.
- The walk is bounded (`MAX_ENTRIES`, `MAX_BYTES`): a toolchain is ~3000 files, ~700 MB.
"""

from __future__ import annotations

import os
import re
import stat
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass
from pathlib import Path

from roteiro_py.image.layers import Entry, Tree
from roteiro_py.untrusted import FileRefused, parse_toml, read_bounded

HOST_TRIPLE = "x86_64-unknown-linux-gnu"
CLIPPY_BINARIES = ("cargo-clippy", "clippy-driver")
BINARIES = ("cargo", "rustc", *CLIPPY_BINARIES)
MAX_ENTRIES = 50_000
MAX_BYTES = 4 << 30
#: rustup's channel manifest is ~1 MB.
MAX_MANIFEST_BYTES = 16 << 20
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


class ToolchainError(ValueError):
    """The toolchain directory cannot make a layer; the message names what is missing."""


def rustup_home() -> Path:
    value = os.environ.get("RUSTUP_HOME")
    return Path(value).expanduser() if value else Path.home() / ".rustup"


def host_toolchain(name: str) -> Path:
    """The installed rustup toolchain `name` (1.95.0, stable, nightly-2026-01-01, ...)."""
    if not _NAME.fullmatch(name):
        raise ToolchainError(f"{name[:100]!r} is not a rustup toolchain name")
    toolchains = rustup_home() / "toolchains"
    for candidate in (toolchains / f"{name}-{HOST_TRIPLE}", toolchains / name):
        if (candidate / "bin").is_dir() and (candidate / "lib").is_dir():
            return candidate
    raise ToolchainError(f"no rustup toolchain {name} under {toolchains} (install it with "
                         f"`rustup toolchain install {name} --component clippy`)")


def toolchain_version(toolchain_dir: Path, fallback: str) -> str:
    """rustc's version as rustup recorded it (`1.95.0`), else `fallback`."""
    manifest = toolchain_dir / "lib" / "rustlib" / "multirust-channel-manifest.toml"
    try:
        data: bytes | None = read_bounded(manifest, MAX_MANIFEST_BYTES, follow_links=True)
    except (OSError, FileRefused):
        data = None
    return manifest_version(data, fallback)


def manifest_version(manifest: bytes | None, fallback: str) -> str:
    """rustc's version in a channel manifest's bytes (`1.95.0`), else `fallback`: what
    `toolchain_version` reads once the manifest is in the toolchain's directory, so a
    build from Rust's distribution knows its tag before a package is fetched."""
    try:  # through the project's bounded TOML parser: tomllib alone raised
        # RecursionError or ValueError on a hostile file (untrusted.parse_toml)
        version = parse_toml(manifest)["pkg"]["rustc"]["version"] if manifest is not None else None
        if isinstance(version, str) and _NAME.fullmatch(version.split(" ")[0]):
            return version.split(" ")[0]
    except (FileRefused, KeyError, TypeError):
        pass
    return fallback.removesuffix(f"-{HOST_TRIPLE}")


def _utf8(name: str) -> str:
    """A name from the filesystem (decoded in the host's filesystem encoding: ASCII under
    LC_ALL=C without UTF-8 mode) as its bytes read as UTF-8, so the layer's names, and its
    digest, are the same whatever the host's locale."""
    return os.fsencode(name).decode("utf-8", "surrogateescape")


def _file_mode(st: os.stat_result) -> int:
    """0755 for an executable file, else 0644: the host's umask (rust_dist and rustup
    create files 0755/0644 less it) must not reach the layer's bytes, so its digest."""
    return 0o755 if st.st_mode & 0o111 else 0o644


def _entry(path: Path, st: os.stat_result) -> Entry:
    if stat.S_ISLNK(st.st_mode):
        return Entry("symlink", 0o777, linkname=_utf8(os.readlink(path)))
    if stat.S_ISDIR(st.st_mode):
        return Entry("dir", st.st_mode & 0o755 | 0o755)
    if stat.S_ISREG(st.st_mode):
        return Entry("file", _file_mode(st), source=path, size=st.st_size)
    raise ToolchainError(f"{path} is neither a file, a directory nor a link")


def toolchain_layer(toolchain_dir: Path, *, with_clippy: bool = True) -> Tree:
    """The layer's tree; its files' bytes are read from `toolchain_dir` when it is written."""
    tree = Tree()
    for binary in BINARIES:
        if not with_clippy and binary in CLIPPY_BINARIES:
            continue
        path = toolchain_dir / "bin" / binary
        st = path.stat() if path.is_file() else None
        if st is None:
            raise ToolchainError(f"{path} is missing (is the toolchain installed, with the clippy component?)")
        tree.add(f"usr/local/bin/{binary}", Entry("file", _file_mode(st), source=path.resolve(),
                                                  size=st.st_size))
    lib = toolchain_dir / "lib"
    tree.add("usr/local/lib", Entry("dir", 0o755))
    total = 0
    for dirpath, dirnames, filenames in os.walk(lib):
        dirnames.sort()
        for name in [*dirnames, *sorted(filenames)]:
            path = Path(dirpath) / name
            st = path.lstat()
            entry = _entry(path, st)
            total += entry.size
            if len(tree.entries) > MAX_ENTRIES or total > MAX_BYTES:
                raise ToolchainError(f"{lib} holds more than {MAX_ENTRIES} entries or {MAX_BYTES} bytes")
            tree.add(f"usr/local/lib/{_utf8(path.relative_to(lib).as_posix())}", entry)
    return tree


@dataclass(frozen=True)
class Installed:
    """A toolchain already on this host (rustup's), as image/build.py takes one: its
    directory is there, and the cache key is read from its files."""

    path: Path
    #: The toolchain's name as asked for (1.95.0): the tag, when its manifest says nothing.
    name: str

    def version(self) -> str:
        return toolchain_version(self.path, self.name)

    def key(self, with_clippy: bool) -> list[str]:
        return inputs(toolchain_layer(self.path, with_clippy=with_clippy))

    def directory(self) -> AbstractContextManager[Path]:
        return nullcontext(self.path)

    def used(self) -> None:  # rustup's toolchain: nothing of ours records it
        pass


def inputs(tree: Tree) -> list[str]:
    """What identifies the layer without reading its bytes: each entry's name, kind, mode,
    size and its file's mtime (the cache key of a build)."""
    lines = []
    for name in sorted(tree.entries):
        entry = tree.entries[name]
        mtime = entry.source.stat().st_mtime_ns if entry.source is not None else 0
        lines.append(f"{name}\0{entry.kind}\0{entry.mode:o}\0{entry.size}\0{entry.linkname}\0{mtime}")
    return lines
