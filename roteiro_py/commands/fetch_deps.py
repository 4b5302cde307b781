"""`pylint-sandbox fetch-deps`: every package the lockfile pins, into the package store.

Only the tree's `Cargo.lock` is read (cargo/lockfile.py), through the one door for
untrusted files. No manifest, no `.cargo/config.toml`, no toolchain file of the tree is
read, and no host cargo, rustup or shell runs: host cargo resolves the tree's manifests
and follows whatever they name (`file://` and `ssh://` git sources in
`[build_dependencies]`, a path dependency outside the copy, a submodule's URL), with the
host's network, keys and agent (issue 20). So this works on a host with no Rust at all.

Each registry pin is taken from the store, else the host's `$CARGO_HOME/registry/cache`
(its bytes hashed to the lockfile's checksum), else downloaded over https from its
registry (cargo/registry.py), or, with `--from DIR`, only from `.crate` files in DIR (an
air-gapped host). Each git pin is fetched over https at its commit by hardened host git,
its submodules only over https (cargo/git.py). Nothing is kept that does not hash to what
pins it. A lint then reads only the store (cargo/vendor.py): it never downloads.
"""

from __future__ import annotations

import contextlib
import os
import sys
import time
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

from roteiro_py import errors
from roteiro_py.cargo import store
from roteiro_py.cargo.lockfile import Lockfile, Pin, read_pins
from roteiro_py.cargo.vendor import VIEW_MAX_BYTES
from roteiro_py.cargo.workspace import find_workspace_root
from roteiro_py.guidance import printable

#: How long one fetch-deps may take in all (downloads and git fetches together).
FETCH_TIMEOUT_S = 1800
#: The most bytes one fetch-deps may add to the store (`.crate`s and git checkouts). Each
#: is bounded (store.MAX_CRATE_BYTES, git.MAX_CHECKOUT_BYTES) but a lockfile may pin
#: 20,000 of them from a registry of its author's; what is more than one vendored view may
#: hold (vendor.VIEW_MAX_BYTES, unpacked) could never be linted anyway.
MAX_FETCH_BYTES = VIEW_MAX_BYTES


@dataclass(frozen=True)
class Fetched:
    root: Path
    lock: Lockfile
    #: How many pins came from where: "store", "cargo-cache", "download", "from-dir", "git".
    origins: dict[str, int]


def fetch_deps(path: Path, *, from_dir: Path | None = None) -> Fetched:
    """Fill the store with what `path`'s lockfile pins; refuses (naming the package and
    the fix) what it cannot fetch or will not keep."""
    # looked up when called: tests/unit/cargo/test_fetch_deps_refusals.py replaces the
    # fetchers to prove every refusal comes before a fetch
    from roteiro_py.cargo import git, registry

    root = find_workspace_root(path)
    lockfile = root / "Cargo.lock"
    if not os.path.lexists(lockfile):
        raise errors.LockfileWouldBeWritten(root, f"{lockfile} does not exist")
    lock = read_pins(lockfile)  # every pin checked before anything is fetched
    until = time.monotonic() + FETCH_TIMEOUT_S
    origins: Counter[str] = Counter()
    registry_pins = [pin for pin in lock.pins if pin.kind == "registry"]
    git_pins = [pin for pin in lock.pins if pin.kind == "git"]
    if from_dir is not None:
        already = sum(1 for pin in registry_pins if pin.checksum and store.has_crate(pin.checksum))
        kept, missing = registry.crates_from_dir(from_dir, registry_pins, lockfile=lockfile,
                                                 tree=root)
        origins["store"] += already
        origins["from-dir"] += len(kept) - already
        missing_git = [pin for pin in git_pins if store.git_checkout(pin) is None]
        _refuse_missing([*missing, *missing_git], root)
        origins["store"] += len(git_pins)
        return Fetched(root, lock, dict(origins))
    host = registry.HostCargo.read()
    added = _Added(lockfile)
    for pin in registry_pins:
        added.check()
        origin = registry.fetch_crate(pin, tree=root, lockfile=lockfile, allow_download=True,
                                      host=host, until=until)
        origins[origin] += 1
        if origin != "store" and pin.checksum is not None:
            added.file(store.crate_path(pin.checksum))
    for pin in git_pins:
        if store.git_checkout(pin) is not None:
            origins["store"] += 1
            continue
        added.check()
        checkout = git.fetch_checkout(pin, lockfile=lockfile, tree=root, until=until)
        origins["git"] += 1
        found = store.git_checkout(pin)
        for relative in found[1] if found is not None else ():
            added.file(checkout / relative)
    added.check()
    return Fetched(root, lock, dict(origins))


class _Added:
    """The bytes one fetch-deps added to the store, within MAX_FETCH_BYTES."""

    def __init__(self, lockfile: Path) -> None:
        self.lockfile = lockfile
        self.bytes = 0

    def file(self, path: Path) -> None:
        with contextlib.suppress(OSError):
            self.bytes += os.lstat(path).st_size

    def check(self) -> None:
        if self.bytes > MAX_FETCH_BYTES:
            raise errors.TreeFileRefused(self.lockfile, f"the packages it pins hold more than "
                                         f"{MAX_FETCH_BYTES} bytes (MAX_FETCH_BYTES: more than "
                                         "one vendored view may hold); what was fetched so "
                                         "far is kept in the store")


def _refuse_missing(missing: list[Pin], root: Path) -> None:
    if missing:
        labels = list(dict.fromkeys(pin.described() for pin in missing))
        raise errors.NoPackageCache(store.packages_root(), root, labels[:errors.MISSING_NAMED],
                                    len(labels))


_SAID = (("store", "already in the store"), ("cargo-cache", "from the host's cargo cache"),
         ("download", "downloaded"), ("from-dir", "from the directory given"),
         ("git", "fetched with git"))


def run_fetch_deps(path: Path, from_dir: Path | None = None) -> int:
    fetched = fetch_deps(path, from_dir=from_dir)
    total = len(fetched.lock.pins)
    parts = [f"{fetched.origins[key]} {said}" for key, said in _SAID if fetched.origins.get(key)]
    sys.stdout.write(f"{printable(str(fetched.root))}: {total} pinned package"
                     f"{'' if total == 1 else 's'} in {printable(str(store.packages_root()))}"
                     + (f" ({', '.join(parts)})" if parts else "") + "\n")
    return 0
