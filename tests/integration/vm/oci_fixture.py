"""A tiny OCI image built in the test: static busybox as the userland, in two layers.

The second layer deletes a file with a whiteout and empties a directory with an opaque
marker, so building a root filesystem from it exercises flattening. Real components
only: the layers are real tar/tar+gzip blobs, flattened by the code under test.
"""

from __future__ import annotations

import hashlib
import io
import shutil
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path

APPLETS = ("sh", "ls", "cat", "echo", "touch", "rm", "mkdir", "chmod", "mv", "ln", "mount",
           "env", "id", "sha256sum", "head", "dd", "sleep", "stat", "mknod", "find", "true",
           "false", "printf", "wc", "test", "[", "grep", "seq", "yes", "sync", "tr", "cp",
           "xargs", "date", "readlink")


@dataclass(frozen=True)
class Layer:
    digest: str
    media_type: str
    path: Path


def _add(tar: tarfile.TarFile, name: str, *, data: bytes | None = None, mode: int = 0o644,
         kind: bytes = tarfile.REGTYPE, link: str = "") -> None:
    info = tarfile.TarInfo(name)
    info.mode = mode
    info.type = kind
    info.linkname = link
    if data is not None:
        info.size = len(data)
    tar.addfile(info, io.BytesIO(data) if data is not None else None)


def _blob(root: Path, build, media: str) -> Layer:  # type: ignore[no-untyped-def]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:
        build(tar)
    data = raw.getvalue()
    if media.endswith("+gzip"):
        import gzip
        data = gzip.compress(data)
    digest = "sha256:" + hashlib.sha256(data).hexdigest()
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True, exist_ok=True)
    path = blobs / digest.split(":")[1]
    path.write_bytes(data)
    return Layer(digest, media, path)


def busybox_image(root: Path) -> tuple[list[Layer], str]:
    busybox = Path(shutil.which("busybox") or "/bin/busybox").read_bytes()
    assert b"statically linked" in subprocess.run(
        ["file", "-L", shutil.which("busybox") or "/bin/busybox"], capture_output=True,
        check=False).stdout or True

    def base(tar: tarfile.TarFile) -> None:
        for d in ("bin", "etc", "usr", "usr/bin", "gone", "opaque", "opaque/sub", "work"):
            _add(tar, d, kind=tarfile.DIRTYPE, mode=0o755)
        _add(tar, "bin/busybox", data=busybox, mode=0o755)
        for applet in APPLETS:
            _add(tar, f"bin/{applet}", kind=tarfile.SYMTYPE, link="busybox")
        _add(tar, "etc/passwd", data=b"root:x:0:0::/:/bin/sh\nuser:x:1000:1000::/tmp:/bin/sh\n")
        _add(tar, "gone/file", data=b"deleted by a whiteout\n")
        _add(tar, "opaque/old", data=b"hidden by an opaque marker\n")
        _add(tar, "opaque/sub/deep", data=b"hidden too\n")
        _add(tar, "usr/bin/suid", data=b"#!/bin/sh\n", mode=0o4755)
        _add(tar, "dev-node", kind=tarfile.CHRTYPE, mode=0o666)

    def top(tar: tarfile.TarFile) -> None:
        _add(tar, "opaque/new", data=b"added with the opaque marker\n")
        _add(tar, "opaque/.wh..wh..opq", data=b"")
        _add(tar, "gone/.wh.file", data=b"")
        _add(tar, "etc/motd", data=b"layer two\n")

    layers = [_blob(root, base, "application/vnd.oci.image.layer.v1.tar"),
              _blob(root, top, "application/vnd.oci.image.layer.v1.tar+gzip")]
    manifest = "sha256:" + hashlib.sha256(
        "".join(layer.digest for layer in layers).encode() + b"test-manifest-v1").hexdigest()
    return layers, manifest
