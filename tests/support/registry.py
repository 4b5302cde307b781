"""A cargo sparse registry in a directory, made in Python (no cargo, no network).

- `make_crate(name, version, files=None) -> bytes`: a `.crate` as `cargo package` makes
  one: a gzip'd tar of `<name>-<version>/Cargo.toml` and `src/lib.rs` (or `files`, paths
  relative to that directory), deterministic (same inputs, same sha256).
- `build_registry(root, base_url, crates, dl=None, auth_required=False) -> {(name,
  version): checksum}`: writes `root/config.json` (`dl` defaults to
  `<base_url>/crates/{crate}/{crate}-{version}.crate`), each index entry at cargo's path
  (`index_path`), and each `.crate` under `root/crates/<name>/`. Serve `root` with
  `https_server.serve` and give cargo (or the fetcher) `sparse+<base_url>/`.
- `lock_entry(name, version, source, checksum) -> str`: one `[[package]]` of a Cargo.lock.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
import tarfile
from collections.abc import Iterable
from pathlib import Path


def index_path(name: str) -> str:
    """Where a sparse index keeps `name`'s entry: 1/a, 2/ab, 3/a/abc, ab/cd/abcd..."""
    lower = name.lower()
    if len(lower) <= 2:
        return f"{len(lower)}/{lower}"
    if len(lower) == 3:
        return f"3/{lower[0]}/{lower}"
    return f"{lower[:2]}/{lower[2:4]}/{lower}"


def make_crate(name: str, version: str, files: dict[str, bytes] | None = None) -> bytes:
    if files is None:
        files = {
            "Cargo.toml": (f'[package]\nname = "{name}"\nversion = "{version}"\n'
                           'edition = "2021"\n').encode(),
            "src/lib.rs": f"pub fn {name.replace('-', '_')}() -> u32 {{ 1 }}\n".encode(),
        }
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for path, data in sorted(files.items()):
            info = tarfile.TarInfo(f"{name}-{version}/{path}")
            info.size, info.mode, info.mtime = len(data), 0o644, 1_700_000_000
            tar.addfile(info, io.BytesIO(data))
    return gzip.compress(raw.getvalue(), mtime=0)


def build_registry(root: Path, base_url: str, crates: Iterable[tuple[str, str, bytes]], *,
                   dl: str | None = None, auth_required: bool = False) -> dict[tuple[str, str], str]:
    """A sparse registry under `root` holding `crates` ((name, version, bytes) each)."""
    root.mkdir(parents=True, exist_ok=True)
    config: dict[str, object] = {"dl": dl or f"{base_url.rstrip('/')}/crates/{{crate}}/{{crate}}-{{version}}.crate",
                                 "api": base_url.rstrip("/")}
    if auth_required:
        config["auth-required"] = True
    (root / "config.json").write_text(json.dumps(config))
    checksums: dict[tuple[str, str], str] = {}
    lines: dict[str, list[str]] = {}
    for name, version, data in crates:
        checksum = hashlib.sha256(data).hexdigest()
        checksums[(name, version)] = checksum
        target = root / "crates" / name / f"{name}-{version}.crate"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(data)
        lines.setdefault(index_path(name), []).append(json.dumps(
            {"name": name, "vers": version, "deps": [], "cksum": checksum, "features": {},
             "yanked": False}))
    for path, entries in lines.items():
        entry = root / path
        entry.parent.mkdir(parents=True, exist_ok=True)
        entry.write_text("\n".join(entries) + "\n")
    return checksums


def lock_entry(name: str, version: str, source: str, checksum: str | None = None) -> str:
    text = f'[[package]]\nname = "{name}"\nversion = "{version}"\nsource = "{source}"\n'
    return text + (f'checksum = "{checksum}"\n' if checksum else "") + "\n"
