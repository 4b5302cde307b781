"""The package store: every pinned package the host has fetched, by what pins it.

`$ROTEIRO_HOME/packages/` holds, written only by this module and only whole (a temporary
beside the target, renamed in place):

- `crates/<sha256>.crate`: a registry package's archive, named by its own sha256, which
  is checked as it is kept (`keep_crate`): a `.crate` is in the store only under the
  checksum a lockfile gives it, so looking a pin up is looking its checksum up. It is
  hashed again whenever it is unpacked for the guest (cargo/vendor.py), so a file changed
  here since is caught there.
- `git/<key>/`: a git package's repository at one commit (its files only, no `.git`, its
  submodules in place), `key` = sha256 of URL and commit; `git/<key>.json` beside it is
  its seal: the URL, the commit and every file's sha256, written after the checkout is
  complete. A directory without its seal is half a fetch and is not used.

Nothing here comes from the tree but the names (checked by cargo/lockfile.py), and nothing
is ever given to the guest from here directly: cargo/vendor.py unpacks and verifies.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from roteiro_py import paths
from roteiro_py.cargo.lockfile import Pin

_CHECKSUM = re.compile(r"[0-9a-f]{64}")
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
#: The largest `.crate` kept (crates.io's own limit is 10 MiB; a private registry may allow more).
MAX_CRATE_BYTES = 64 * 1024 * 1024


def packages_root() -> Path:
    return paths.roteiro_home() / "packages"


def crate_path(checksum: str) -> Path:
    if not _CHECKSUM.fullmatch(checksum):
        raise ValueError(f"not a sha256 hex digest: {checksum!r}")
    return packages_root() / "crates" / f"{checksum}.crate"


def has_crate(checksum: str) -> bool:
    """Whether the store holds a regular file for `checksum` (its bytes are hashed again
    where they are used)."""
    try:
        return stat.S_ISREG(os.lstat(crate_path(checksum)).st_mode)
    except OSError:
        return False


def sha256_file(path: Path, limit: int = MAX_CRATE_BYTES) -> str | None:
    """The sha256 of the regular file `path`, read without following a link; None when it
    is not a regular file, cannot be read, or is larger than `limit`."""
    try:
        fd = os.open(path, _FILE_FLAGS)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > limit:
                return None
            digest.update(chunk)
        return digest.hexdigest()
    except OSError:
        return None
    finally:
        os.close(fd)


@contextlib.contextmanager
def incoming() -> Iterator[tuple[IO[bytes], Path]]:
    """A new temporary file in the store's own directory (so keeping it is a rename), and
    its path; removed at the end of the block unless it was kept (`keep_crate`)."""
    directory = packages_root() / "tmp"
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(prefix="incoming-", suffix=".part", dir=directory)
    try:
        with os.fdopen(fd, "w+b") as handle:
            yield handle, Path(name)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name)


def keep_crate(temporary: Path, checksum: str) -> Path | None:
    """Keep the file `temporary` (made by `incoming`) as the `.crate` for `checksum` when
    its bytes hash to it; None, and nothing kept, when they do not."""
    if sha256_file(temporary) != checksum:
        return None
    target = crate_path(checksum)
    target.parent.mkdir(parents=True, exist_ok=True)
    os.chmod(temporary, 0o644)
    os.replace(temporary, target)
    return target


def keep_crate_bytes(data: bytes, checksum: str) -> Path | None:
    """`keep_crate` for bytes already in memory."""
    if hashlib.sha256(data).hexdigest() != checksum:
        return None
    with incoming() as (handle, temporary):
        handle.write(data)
        handle.flush()
        return keep_crate(temporary, checksum)


def git_key(pin: Pin) -> str:
    assert pin.kind == "git" and pin.rev is not None
    return hashlib.sha256(json.dumps([pin.url, pin.rev]).encode()).hexdigest()[:32]


def git_checkout(pin: Pin) -> tuple[Path, dict[str, str]] | None:
    """The stored checkout of a git pin and its sealed file list (relative path -> sha256),
    or None when the store has no complete one for this URL and commit."""
    root = packages_root() / "git"
    key = git_key(pin)
    try:
        record = json.loads((root / f"{key}.json").read_text())
    except (OSError, ValueError):
        return None
    if (not isinstance(record, dict) or record.get("url") != pin.url or record.get("rev") != pin.rev
            or not isinstance(record.get("files"), dict) or not (root / key).is_dir()):
        return None
    return root / key, record["files"]


def git_staging(pin: Pin) -> Path:
    """A new empty directory beside the store's git checkouts, to fetch `pin` into
    (then `keep_git_checkout`); the caller removes it when the fetch fails."""
    root = packages_root() / "git"
    root.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{git_key(pin)[:12]}-", dir=root))


def keep_git_checkout(pin: Pin, staging: Path, files: dict[str, str]) -> Path:
    """Put the complete checkout `staging` in place for `pin`, sealed with `files` (every
    regular file's relative path and sha256), replacing an earlier unsealed one."""
    root = packages_root() / "git"
    key = git_key(pin)
    target = root / key
    if target.exists():
        shutil.rmtree(target)
    os.replace(staging, target)
    paths.replace_file(root / f"{key}.json", json.dumps(
        {"url": pin.url, "rev": pin.rev, "files": files}, sort_keys=True).encode(), 0o644)
    return target
