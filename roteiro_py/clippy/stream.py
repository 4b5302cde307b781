"""cargo's own message stream, given back on the host: `lint clippy --message-format FMT`.

Tools that read `cargo clippy --message-format=json` (rust-analyzer's
`check.overrideCommand`, clippy-sarif, cargo-action-fmt, reviewdog) read ours unchanged.
Input is the guest's clippy stdout (bounded by `[vm] output_limit_mib`, with the guest's
mount of the tree already named by its host path again: vm/mounts.py `host_bytes`), so
every byte is untrusted. Guarantees:

- Record for record, in cargo's order and field order, for the four reasons cargo writes:
  `compiler-message`, `compiler-artifact`, `build-script-executed`, `build-finished`.
  Anything else (another reason, a line that is not one JSON object) is dropped and
  counted (`Stream.dropped`), never fatal.
- Every path is a host path, or absent (SANDBOXED_LINTING.md, "cargo's message stream"
  states the same rules for users): `StreamPaths.host_path` keeps a path relative to the
  workspace root or under it (never through `.git`), in its normal form (no `.` or `..`
  component: `link/../x` would be read through a link in the tree) and, resolved through
  the host tree's links (`resolves_inside`), still there (a span through the tree's link
  to ~/.ssh names no file rustc read: the staged copy's link leads nowhere), names one under the guest's vendored
  registry or git checkouts by the host view's path (cargo/vendor.py), keeps rustc's
  virtual `/rustc/<commit>/` sysroot paths (the same on every machine), and has no host
  path for anything else (the guest's CARGO_TARGET_DIR on its scratch disk, its toolchain,
  its /tmp), nor for a path holding a backslash or a character the sanitiser escapes
  (escaped, it would name another file). Where none exists: a span is left out of its list, an `expansion` or a
  `def_site_span` becomes null, `filenames` loses the entry, `executable` becomes null,
  `out_dir` is left out (cargo_metadata's `#[serde(default)]` reads a missing one as
  empty but fails the record on null), a `linked_paths` entry or an `env` pair naming such a path is left out; a
  record whose `manifest_path`, `target.src_path` or `package_id` has none is dropped.
  In every string the guest's registry and git prefixes are replaced by the host's, as
  cargo on the host would have written them.
- Sanitised, structure-faithful: every string keeps its place and its type; a code point
  `untrusted.sanitise()` would never emit raw is written as the same visible escape
  (`\\x1b`, `\\u202e`), only `\\n` and `\\t` survive. For `json-diagnostic-rendered-ansi`
  the `rendered` fields keep SGR colour sequences (ESC [ digits/`;` m) and nothing else of
  ESC; for every other format no ESC at all. Each output line goes through
  `untrusted.guard(json=True)`, whose escapes a JSON reader decodes back.
- Bounded: a line over MAX_LINE_BYTES is dropped unread, a record nested deeper than
  MAX_DEPTH, a list longer than MAX_ITEMS or a string longer than MAX_STRING_CHARS is
  dropped (a cut string would be a wrong diagnostic, not a shorter one), and at most
  MAX_RECORDS records are written.
"""

from __future__ import annotations

import functools
import json
import math
import os
import posixpath
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from roteiro_py.clippy.parse import MAX_LINE_BYTES
from roteiro_py.untrusted import guard, is_unsafe_char

#: Records written at most; cargo writes a handful per crate and per diagnostic.
MAX_RECORDS = 100_000
#: JSON nesting of one record at most: rustc's macro backtraces nest spans in
#: `expansion.span` (measured: a few levels; the parser stops at 32 expansions).
MAX_DEPTH = 96
#: Items of one list at most (spans, children, text lines, filenames, cfgs).
MAX_ITEMS = 10_000
#: One string at most (rustc's longest `rendered`, long type names, are tens of KiB).
MAX_STRING_CHARS = 256 * 1024

_SGR = re.compile(r"\x1b\[[0-9;]{0,32}m")
_VIRTUAL_SYSROOT = re.compile(r"/rustc/[0-9a-f]{40}/[^\x00]*")
_PATH_PACKAGE = re.compile(r"path\+file://(/[^#?]*)(#.*)?")
_REGISTRY_PACKAGE = re.compile(r"(registry|sparse|git)\+[^\s]{1,2000}")


class _Hostile(Exception):
    """A record past a bound or without a host path where one is required: dropped."""


@dataclass(frozen=True)
class StreamPaths:
    """Where the guest's paths are on the host.

    workspace: the cargo workspace root, by its host path (the guest's mount of it is
               already mapped back by the backend).
    sources:   (guest prefix, host prefix) of each vendored source the guest read:
               `/cargo-home/registry` -> the view's `registry`, and the same for `git`.
    """

    workspace: PurePosixPath
    sources: tuple[tuple[str, str], ...] = ()
    #: Whether a normal absolute path of the workspace still lands in it on the host,
    #: through the tree's links (`resolves_inside`); None: judged by its text alone.
    resolves_inside: Callable[[str], bool] | None = field(default=None, compare=False)

    def __post_init__(self) -> None:
        if not self.workspace.is_absolute():
            raise ValueError(f"workspace must be absolute: {self.workspace}")

    def host_path(self, value: object) -> str | None:
        """`value` as the host names it, or None when no host path corresponds to it."""
        if not isinstance(value, str) or not value or len(value) > 4096:
            return None
        if "\\" in value or value.startswith("<") or any(map(is_unsafe_char, value)):
            return None  # escaped, it would name another file (found by hypothesis)
        root = str(self.workspace).rstrip("/")
        # The normal form, never `value`: `link/../x` is inside as text, but a reader
        # opening it goes through `link`, a link in the tree to anywhere on the host.
        if not value.startswith("/"):
            inside = posixpath.normpath(posixpath.join(root, value))
            return posixpath.normpath(value) if self._in_workspace(inside) and self._lands(inside) else None
        normal = posixpath.normpath(value)
        if self._in_workspace(normal):
            return normal if self._lands(normal) else None
        if _VIRTUAL_SYSROOT.fullmatch(normal) and ".." not in value.split("/"):
            return value
        for guest, host in self.sources:
            if normal == guest or normal.startswith(guest.rstrip("/") + "/"):
                return host.rstrip("/") + normal[len(guest.rstrip("/")):]
        return None

    def _lands(self, normal: str) -> bool:
        return self.resolves_inside is None or self.resolves_inside(normal)

    def _in_workspace(self, normal: str) -> bool:
        root = str(self.workspace).rstrip("/")
        if normal != root and not normal.startswith(root + "/"):
            return False
        return ".git" not in normal[len(root):].split("/")

    def host_text(self, text: str) -> str:
        """`text` with each guest source prefix that begins a path replaced by the host's."""
        for guest, host in self.sources:
            if guest in text:
                text = re.sub(r"(?<![A-Za-z0-9._~/-])" + re.escape(guest) + r"(?=/|\b)", host, text)
        return text


def resolves_inside(workspace: Path) -> Callable[[str], bool]:
    """StreamPaths.resolves_inside for a workspace on this host: the path with the tree's
    links resolved (names only: `realpath` reads links, never a file) is still in the
    workspace and not under its `.git`. The guest reads the staged copy, where a link
    out of the tree leads nowhere: a path through one is no file rustc read."""
    root = os.path.realpath(workspace)

    @functools.lru_cache(maxsize=4096)
    def inside(normal: str) -> bool:
        real = os.path.realpath(normal)
        if real != root and not real.startswith(root.rstrip("/") + "/"):
            return False
        return ".git" not in real[len(root):].split("/")

    return inside


def clean_text(text: str, *, ansi: bool = False) -> str:
    """`text` with every code point `sanitise()` would escape written as its escape, `\\n`
    and `\\t` kept, and with `ansi` SGR colour sequences kept whole; no other ESC."""
    if len(text) > MAX_STRING_CHARS:
        raise _Hostile("a string longer than MAX_STRING_CHARS")
    if all(ch.isascii() and (ch.isprintable() or ch in "\n\t") for ch in text):
        return text
    if ansi:
        pieces = _SGR.split(text)
        colours = _SGR.findall(text)
        out = [clean_text(pieces[0])]
        for colour, piece in zip(colours, pieces[1:], strict=True):
            out += [colour, clean_text(piece)]
        return "".join(out)
    return "".join(_escaped(ch) if ch not in "\n\t" and is_unsafe_char(ch) else ch for ch in text)


def _escaped(ch: str) -> str:
    code = ord(ch)  # the escapes untrusted.sanitise() writes
    if code < 0x100:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


def _copy(value: object, paths: StreamPaths, depth: int = 0) -> object:
    """`value` (a decoded JSON value) with every string cleaned, within the bounds."""
    if depth > MAX_DEPTH:
        raise _Hostile("nested deeper than MAX_DEPTH")
    if isinstance(value, str):
        return clean_text(paths.host_text(value))
    if isinstance(value, float) and not math.isfinite(value):
        raise _Hostile("a number JSON cannot write")  # json.dumps would write Infinity
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list):
        if len(value) > MAX_ITEMS:
            raise _Hostile("a list longer than MAX_ITEMS")
        return [_copy(item, paths, depth + 1) for item in value]
    if isinstance(value, dict):
        if len(value) > MAX_ITEMS:
            raise _Hostile("an object larger than MAX_ITEMS")
        out: dict[str, object] = {}
        for key, item in value.items():
            out[clean_text(key)] = _copy(item, paths, depth + 1)
        return out
    raise _Hostile("not a JSON value")


@dataclass
class _Record:
    """One record being mapped: its paths, whether `rendered` may keep colour."""

    paths: StreamPaths
    ansi: bool

    def copy(self, value: object, depth: int) -> object:
        return _copy(value, self.paths, depth)

    def required(self, value: object) -> str:
        mapped = self.paths.host_path(value)
        if mapped is None:
            raise _Hostile("a path with no host path where cargo always writes one")
        return clean_text(mapped)

    def package_id(self, value: object) -> str:
        if not isinstance(value, str) or len(value) > 4096:
            raise _Hostile("no package id")
        local = _PATH_PACKAGE.fullmatch(value)
        if local is not None:
            return "path+file://" + self.required(local[1]) + clean_text(local[2] or "")
        if _REGISTRY_PACKAGE.fullmatch(value):
            return clean_text(self.paths.host_text(value))
        raise _Hostile("a package id that names no source")

    def target(self, value: object) -> dict[str, object]:
        if not isinstance(value, dict):
            raise _Hostile("no target")
        out = {key: self.copy(item, 2) for key, item in value.items() if key != "src_path"}
        mapped = {"src_path": self.required(value.get("src_path"))}
        return _in_order(value, {**out, **mapped})

    def span(self, value: object, depth: int) -> dict[str, object] | None:
        """A span with its file a host path, or None when it has none (left out)."""
        if depth > MAX_DEPTH:
            raise _Hostile("nested deeper than MAX_DEPTH")
        if not isinstance(value, dict):
            return None
        file_name = self.paths.host_path(value.get("file_name"))
        if file_name is None:
            return None
        out: dict[str, object] = {}
        for key, item in value.items():
            if key == "file_name":
                out[key] = clean_text(file_name)
            elif key == "expansion":
                out[key] = self.expansion(item, depth + 1)
            else:
                out[key] = self.copy(item, depth + 1)
        return out

    def expansion(self, value: object, depth: int) -> dict[str, object] | None:
        if not isinstance(value, dict):
            return None
        out: dict[str, object] = {}
        for key, item in value.items():
            if key in ("span", "def_site_span"):
                out[key] = self.span(item, depth + 1)
            else:
                out[key] = self.copy(item, depth + 1)
        return out

    def diagnostic(self, value: object, depth: int = 1) -> dict[str, object]:
        if depth > MAX_DEPTH:
            raise _Hostile("nested deeper than MAX_DEPTH")
        if not isinstance(value, dict):
            raise _Hostile("a message that is not a diagnostic")
        out: dict[str, object] = {}
        for key, item in value.items():
            if key == "spans":
                out[key] = self.spans(item, depth + 1)
            elif key == "children":
                if not isinstance(item, list) or len(item) > MAX_ITEMS:
                    raise _Hostile("children that are not a bounded list")
                out[key] = [self.diagnostic(child, depth + 2) for child in item]
            elif key == "rendered" and isinstance(item, str):
                out[key] = clean_text(self.paths.host_text(item), ansi=self.ansi)
            else:
                out[clean_text(key)] = self.copy(item, depth + 1)
        return out

    def spans(self, value: object, depth: int) -> list[dict[str, object]]:
        if not isinstance(value, list) or len(value) > MAX_ITEMS:
            raise _Hostile("spans that are not a bounded list")
        return [span for span in (self.span(item, depth + 1) for item in value) if span is not None]


def _in_order(original: dict[str, object], mapped: dict[str, object]) -> dict[str, object]:
    """`mapped` in `original`'s key order (cargo's field order), each key cleaned."""
    return {clean_text(key): mapped[key] for key in original if key in mapped}


#: The fields naming the unit a record is about, mapped alike in every kind of record.
_UNIT_FIELDS = ("package_id", "manifest_path", "target")


def _unit_field(record: _Record, key: str, item: object) -> object:
    """`package_id`, `manifest_path` or `target` (a key of _UNIT_FIELDS), its paths host paths."""
    if key == "package_id":
        return record.package_id(item)
    return record.required(item) if key == "manifest_path" else record.target(item)


def _compiler_message(record: _Record, raw: dict[str, object]) -> dict[str, object]:
    mapped: dict[str, object] = {}
    for key, item in raw.items():
        if key in _UNIT_FIELDS:
            mapped[key] = _unit_field(record, key, item)
        elif key == "message":
            mapped[key] = record.diagnostic(item)
        else:
            mapped[key] = record.copy(item, 1)
    return _in_order(raw, mapped)


def _compiler_artifact(record: _Record, raw: dict[str, object]) -> dict[str, object]:
    mapped: dict[str, object] = {}
    for key, item in raw.items():
        if key in _UNIT_FIELDS:
            mapped[key] = _unit_field(record, key, item)
        elif key == "filenames":
            if not isinstance(item, list) or len(item) > MAX_ITEMS:
                raise _Hostile("filenames that are not a bounded list")
            mapped[key] = [clean_text(p) for p in map(record.paths.host_path, item) if p is not None]
        elif key == "executable":
            executable = record.paths.host_path(item)
            mapped[key] = None if executable is None else clean_text(executable)
        else:
            mapped[key] = record.copy(item, 1)
    return _in_order(raw, mapped)


def _linked_path(record: _Record, entry: object) -> str | None:
    """A `cargo::rustc-link-search=[KIND=]PATH` entry with its path a host path, or None."""
    if not isinstance(entry, str):
        return None
    kind, equals, path = entry.partition("=")
    if not equals or "/" in kind:
        kind, path = "", entry
    mapped = record.paths.host_path(path)
    return None if mapped is None else clean_text(f"{kind}={mapped}" if kind else mapped)


def _build_script_executed(record: _Record, raw: dict[str, object]) -> dict[str, object]:
    mapped: dict[str, object] = {}
    for key, item in raw.items():
        if key in _UNIT_FIELDS:  # cargo writes only package_id here; a guest's others are mapped too
            mapped[key] = _unit_field(record, key, item)
        elif key == "out_dir":  # absent, never null: cargo_metadata reads null as an error
            out_dir = record.paths.host_path(item)
            if out_dir is not None:
                mapped[key] = clean_text(out_dir)
        elif key == "linked_paths":
            if not isinstance(item, list) or len(item) > MAX_ITEMS:
                raise _Hostile("linked_paths that are not a bounded list")
            mapped[key] = [p for p in (_linked_path(record, e) for e in item) if p is not None]
        elif key == "env":
            if not isinstance(item, list) or len(item) > MAX_ITEMS:
                raise _Hostile("env that is not a bounded list")
            mapped[key] = [record.copy(pair, 2) for pair in item if _env_kept(record, pair)]
        else:
            mapped[key] = record.copy(item, 1)
    return _in_order(raw, mapped)


def _env_kept(record: _Record, pair: object) -> bool:
    """An `env` pair is kept unless its value is an absolute path with no host path."""
    if not isinstance(pair, list) or len(pair) != 2:
        return False
    value = pair[1]
    return not (isinstance(value, str) and value.startswith("/") and record.paths.host_path(value) is None)


def _build_finished(record: _Record, raw: dict[str, object]) -> dict[str, object]:
    if not isinstance(raw.get("success"), bool):
        raise _Hostile("build-finished without a success")
    return {"reason": "build-finished", "success": raw["success"]}


#: The fields cargo always writes a host path in, per reason: a record without one is
#: dropped (left out, it would be a way around mapping it).
_REQUIRED: dict[str, tuple[str, ...]] = {
    "compiler-message": ("package_id", "manifest_path", "target"),
    "compiler-artifact": ("package_id", "manifest_path", "target"),
    "build-script-executed": ("package_id",),
    "build-finished": (),
}

_REASONS: dict[str, Callable[[_Record, dict[str, object]], dict[str, object]]] = {
    "compiler-message": _compiler_message,
    "compiler-artifact": _compiler_artifact,
    "build-script-executed": _build_script_executed,
    "build-finished": _build_finished,
}


@dataclass
class Stream:
    """The records as the host writes them, and how many of the guest's were dropped."""

    records: list[dict[str, object]] = field(default_factory=list)
    dropped: int = 0


def map_stream(stdout: bytes, paths: StreamPaths, *, ansi: bool = False) -> Stream:
    """cargo's `--message-format=json` stdout from the guest, record by record, mapped to
    the host and sanitised (module docstring). `ansi`: `rendered` keeps SGR colours."""
    out = Stream()
    record = _Record(paths, ansi)
    for line in stdout.split(b"\n"):
        if not line.strip():
            continue
        if len(line) > MAX_LINE_BYTES or len(out.records) >= MAX_RECORDS:
            out.dropped += 1
            continue
        try:
            raw = json.loads(line)
            reason = raw.get("reason") if isinstance(raw, dict) else None
            mapper = _REASONS.get(reason) if isinstance(reason, str) else None
            if mapper is None:
                raise _Hostile("not a record cargo writes")
            if any(key not in raw for key in _REQUIRED[str(reason)]):
                raise _Hostile("a record without a field cargo always writes")
            out.records.append(mapper(record, raw))
        except (ValueError, RecursionError, _Hostile):
            out.dropped += 1
    return out


def render_stream(stream: Stream, message_format: str) -> str:
    """The text printed on stdout: one JSON record a line (cargo's compact form), or for
    `short` each compiler message's rendered text."""
    if message_format == "short":
        texts: list[str] = []
        for record in stream.records:
            message = record.get("message") if record.get("reason") == "compiler-message" else None
            rendered = message.get("rendered") if isinstance(message, dict) else None
            if isinstance(rendered, str) and rendered:
                texts.append(rendered if rendered.endswith("\n") else rendered + "\n")
        return guard("".join(texts))
    lines = [json.dumps(record, ensure_ascii=False, separators=(",", ":")) + "\n"
             for record in stream.records]
    return guard("".join(lines), json=True)
