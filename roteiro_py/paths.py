"""Where the tool keeps its state: everything lives under $ROTEIRO_HOME (default ~/.roteiro).

One function per location, so a reader finds where the store, the VM assets and the
build caches are by name, and tests relocate all of them with one variable.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def roteiro_home() -> Path:
    value = os.environ.get("ROTEIRO_HOME")
    return Path(value).expanduser() if value else Path.home() / ".roteiro"


def user_config_path() -> Path:
    return roteiro_home() / "config.toml"


def store_root() -> Path:
    """The OCI image layout that `prefetch` fills and a lint only reads."""
    return roteiro_home() / "store"


def vm_assets_root() -> Path:
    """Guest kernel, busybox, modules and initramfs, provisioned by `prefetch --vm-assets`."""
    return roteiro_home() / "vm"


def cache_root() -> Path:
    """Derived data that can be rebuilt: root filesystem images, probe verdicts, build caches."""
    return roteiro_home() / "cache"


def cargo_home() -> Path:
    """The host's cargo home, whose registry/ and git/ (never the root) the guest reads."""
    value = os.environ.get("CARGO_HOME")
    return Path(value).expanduser() if value else Path.home() / ".cargo"


def replace_file(target: Path, data: bytes, mode: int) -> None:
    """Put `data` at `target` whole or not at all, with `mode`.

    The temporary beside it is mkstemp's (O_EXCL, an unpredictable name: a predictable
    `.<name>.<pid>.tmp` was written through a link a tree planted), and it is renamed over
    `target`, so an interrupted or failed write (ENOSPC) never leaves half a file; a link
    at `target` is replaced, never followed. Used for reports (`--output`) and config files.
    """
    fd, temporary = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(data)
        os.chmod(temporary, mode)
        os.replace(temporary, target)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temporary)
        raise
