"""One linter image build: a verified Debian root and a Rust toolchain, as an OCI layout.

Guarantees:
- The layout has two layers, the Debian root (image/debian_root.py) and the toolchain
  (image/toolchain.py), both reproducible (image/layers.py): the same packages and the
  same toolchain give the same manifest digest, so the same printed pin.
- Cached by inputs: the layout under $ROTEIRO_HOME/cache/images/<tag> records a hash of
  what it was built from (this package's code, the archives and suite, the options, and
  the toolchain's key: an installed toolchain's names, sizes, modes and mtimes; for one
  from Rust's distribution, its verified channel manifest's bytes and the packages chosen
  from it, each by URL and sha256); a build with the same inputs is that layout, without
  reading an archive or fetching a package (the toolchain's directory is made only on a
  miss). The layout is still only a cache: the store takes it as it takes any OCI layout,
  every blob checked against its digest (store/prefetch.py). The archive moving on (a
  security update) is not an input, as it would take the network to check: `force`
  builds again.
- All or nothing: the layout is written in a temporary directory beside its place and
  renamed into it; a refusal (an index or .deb that does not verify, an unsatisfiable
  dependency, a missing binary) leaves the cache as it was.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import tempfile
import time
from collections.abc import Callable
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from roteiro_py import eviction, locks, paths
from roteiro_py.errors import MalformedReference
from roteiro_py.image import debian_root, layers, toolchain
from roteiro_py.reference import parse
from roteiro_py.untrusted import FileRefused, read_bounded
from roteiro_py.vm.assets import debian_archive, debpkg

DEFAULT_NAME = "localhost/roteiro/clippy"
INPUTS_FILE = "roteiro-build.json"
#: The most bytes of a layout's record (INPUTS_FILE) read, here and by `cache` (commands/
#: cache.py built_reference): a digest, a reference and a `name=version` a package, tens of
#: bytes each, so a root of hundreds of packages is a few kB.
RECORD_MAX_BYTES = 64 << 10
#: How long a build waits for another build of the same tag to finish.
LOCK_WAIT_S = 3600.0


class ToolchainSource(Protocol):
    """The image's toolchain as a build needs it: the tag's version and the cache key
    before anything else, its directory only when the layout is not cached. An installed
    toolchain (toolchain.Installed) is keyed by its files; one from Rust's distribution
    (rust_dist.FromDist) by its verified manifest, and downloaded only on a miss: keyed by
    its unpacked files, every `image: build` job downloaded the whole toolchain (hundreds
    of MB) before it could find its image in the restored cache."""

    def version(self) -> str: ...

    def key(self, with_clippy: bool) -> list[str]:
        """Lines that change whenever a byte of the toolchain layer would."""
        ...

    def directory(self) -> AbstractContextManager[Path]: ...

    def used(self) -> None:
        """The build's layout holds this toolchain, built or found cached: a hit never
        asks for the directory, so this is how a source hears it was used (FromDist
        raises its channel's date floor: rust_dist.Pinned.accept)."""
        ...


@dataclass(frozen=True)
class BuildRequest:
    toolchain: ToolchainSource
    with_clippy: bool = True
    with_gcc: bool = True
    archive: str = debian_archive.DEFAULT_ARCHIVE
    suite: str = debian_archive.DEFAULT_SUITE
    #: "" reads the main archive alone.
    security_archive: str = debian_archive.DEFAULT_SECURITY_ARCHIVE
    name: str = DEFAULT_NAME


@dataclass(frozen=True)
class Built:
    reference: str
    layout: Path
    cached: bool
    packages: tuple[str, ...]


def tag_of(request: BuildRequest, version: str) -> str:
    return version + ("" if request.with_clippy else "-noclippy") + ("" if request.with_gcc else "-nogcc")


def images_root() -> Path:
    return paths.cache_root() / "images"


def lock_path(tag: str) -> Path:
    """The lock a build of the image `tag` holds (exclusive) while it writes its layout;
    `cache prune` takes it before removing the layout (commands/cache.py)."""
    return images_root() / f".clippy-{tag}.lock"


def debs_root() -> Path:
    """Downloaded .debs, each named by its SHA-256 (checked again on every use)."""
    return paths.cache_root() / "debs"


def _code_digest() -> str:
    digest = hashlib.sha256()
    here = Path(__file__).parent
    for source in sorted(here.glob("*.py")):
        digest.update(source.name.encode() + b"\0" + source.read_bytes())
    for module in (debian_archive, debpkg):
        digest.update(Path(str(module.__file__)).read_bytes())
    return digest.hexdigest()


def inputs_digest(request: BuildRequest) -> str:
    digest = hashlib.sha256(_code_digest().encode())
    digest.update(json.dumps([request.archive, request.suite, request.security_archive, request.with_clippy,
                              request.with_gcc, request.name, layers.EPOCH]).encode())
    for line in request.toolchain.key(request.with_clippy):
        digest.update(line.encode("utf-8", "surrogateescape") + b"\n")  # a name need not be UTF-8
    return f"sha256:{digest.hexdigest()}"


def _recorded(layout: Path, inputs: str) -> tuple[str, tuple[str, ...]] | None:
    """The reference and packages of the layout built from `inputs`, as its record says;
    None (build again) when there is none or it is not one this module wrote. The record
    comes back from a CI cache as whoever saved it wrote it, so it is read through the one
    bounded reader: a record nested past json's recursion limit raised RecursionError
    (exit 4), a FIFO there blocked the build for good, a large one was read whole, and a
    link was followed out of the layout. Its reference must be a whole pinned one."""
    try:
        record = json.loads(read_bounded(layout / INPUTS_FILE, RECORD_MAX_BYTES))
    except (OSError, FileRefused, ValueError, RecursionError):
        return None
    if not isinstance(record, dict) or record.get("inputs") != inputs or not (layout / "index.json").is_file():
        return None
    reference, packages = record.get("reference"), record.get("packages", [])
    if not isinstance(reference, str) or not isinstance(packages, list):
        return None
    try:
        if not parse(reference).pinned:
            return None
    except MalformedReference:
        return None
    return reference, tuple(str(p) for p in packages)


def resolve_packages(request: BuildRequest, now: float) -> list[debian_root.Located]:
    """The root's packages, from the verified indexes of the main and security archives."""
    releases = [debian_archive.read_release(request.archive, request.suite, now, kind=debian_archive.MAIN)]
    if request.security_archive:
        releases.append(debian_archive.read_release(request.security_archive,
                                                    debian_archive.security_suite(request.suite), now,
                                                    kind=debian_archive.SECURITY))
    indexes = [(release.archive, debian_archive.read_index(release)) for release in releases]
    seeds = debian_root.SEED + (debian_root.GCC_SEED if request.with_gcc else ())
    return debian_root.verified(debian_root.resolve(debian_root.merged_index(indexes), seeds), indexes)


def build(request: BuildRequest, *, force: bool = False, progress: Callable[[str], None] | None = None,
          now: float | None = None) -> Built:
    """The image's layout, from the cache when its inputs are unchanged (the toolchain's
    directory is then never asked for); raises debian_archive.ArchiveError,
    toolchain.ToolchainError or what the toolchain's source raises, leaving the cache as it was."""
    say = progress or (lambda _message: None)
    version = request.toolchain.version()
    tag = tag_of(request, version)
    inputs = inputs_digest(request)
    root = images_root()
    root.mkdir(parents=True, exist_ok=True)
    layout = root / f"clippy-{tag}"
    lock = locks.acquire_within(lock_path(tag), until=time.monotonic() + LOCK_WAIT_S,
                                seconds=LOCK_WAIT_S, waiting_for=f"another build of the image {tag}")
    try:
        recorded = None if force else _recorded(layout, inputs)
        if recorded is not None:
            eviction.record_use(eviction.used_record(layout))  # `cache prune` ranks by it
            request.toolchain.used()
            return Built(recorded[0], layout, True, recorded[1])
        with request.toolchain.directory() as toolchain_dir:
            tools = toolchain.toolchain_layer(toolchain_dir, with_clippy=request.with_clippy)
            reference, names = _write(request, tools, version, tag, inputs, layout, say,
                                      time.time() if now is None else now)
        eviction.record_use(eviction.used_record(layout))
        request.toolchain.used()
        return Built(reference, layout, False, names)
    finally:
        lock.release()


def _write(request: BuildRequest, tools: layers.Tree, version: str, tag: str, inputs: str, layout: Path,
           say: Callable[[str], None], now: float) -> tuple[str, tuple[str, ...]]:
    """The layout built at `layout`, replacing what was there: its reference and packages."""
    packages = resolve_packages(request, now)
    say(f"{len(packages)} Debian packages: {debian_archive.names(p.package for p in packages)}")
    debs = debian_root.fetch_debs(packages, debs_root(), say)
    work = Path(tempfile.mkdtemp(prefix=f".clippy-{tag}.tmp-", dir=layout.parent))
    try:
        contents = work / "contents"
        contents.mkdir()
        tree = debian_root.unpack([(p.package.name, deb) for p, deb in zip(packages, debs, strict=True)],
                                  contents)
        new = work / "layout"
        blobs = new / "blobs" / "sha256"
        base = layers.write_layer(tree, blobs)
        say(f"Debian root layer {base.digest} ({base.size} bytes)")
        shutil.rmtree(contents)
        tools_blob = layers.write_layer(tools, blobs)
        say(f"toolchain layer {tools_blob.digest} ({tools_blob.size} bytes)")
        names = tuple(f"{p.package.name}={p.package.version}" for p in packages)
        suites = request.suite + (f" + {debian_archive.security_suite(request.suite)}"
                                  if request.security_archive else "")
        reference = layers.write_layout(new, [
            layers.LayerRecord(base, f"pylint-sandbox image build: Debian {suites}: {' '.join(names)}"),
            layers.LayerRecord(tools_blob, f"pylint-sandbox image build: rust toolchain {version}"
                               + ("" if request.with_clippy else " without clippy")),
        ], request.name, tag, {"org.opencontainers.image.version": version,
                               "io.roteiro.clippy": "present" if request.with_clippy else "absent"})
        (new / INPUTS_FILE).write_text(json.dumps(
            {"inputs": inputs, "reference": reference, "packages": list(names)}, indent=2) + "\n")
        if layout.exists():
            os.replace(layout, work / "old")
        os.replace(new, layout)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return reference, names


def copy_layout(layout: Path, output: Path) -> None:
    """The layout at `output` too (a directory that must not exist yet, or an earlier
    layout, which is replaced)."""
    if output.exists() and not (output / "oci-layout").is_file():
        raise FileExistsError(f"{output} exists and is not an OCI image layout: not replaced")
    temp = output.parent / f".{output.name}.tmp-{os.getpid()}"
    shutil.rmtree(temp, ignore_errors=True)
    shutil.copytree(layout, temp, symlinks=False)
    if output.exists():
        shutil.rmtree(output)
    os.replace(temp, output)
