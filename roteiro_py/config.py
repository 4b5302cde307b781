"""The settings model, and where each effective value came from.

Precedence, highest first: a command-line flag, a `ROTEIRO_<SECTION>_<KEY>` environment
variable, the repository's `roteiro.toml` (found by walking up from the linted path), the
user's `$ROTEIRO_HOME/config.toml`, the defaults; except for USER_FIRST_KEYS, where the
user's config outranks the repository's. Every value carries its source so
`config show` can say "lint.image = ... (from /repo/roteiro.toml)" and a refusal about a
value can name the file to fix.

Files are validated one at a time against the model, so an unknown key, a wrong type or a
TOML syntax error is refused naming the file, the key and (for syntax) the line and
column, before anything else happens. Writing (`config set`) parses the file, changes one
key and writes it back with tomli-w, keeping every other key (comments are not kept:
tomli-w writes data, not documents; `config set` says so when the file had any).
"""

from __future__ import annotations

import os
import re
import stat
import tomllib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import tomli_w

from roteiro_py import paths
from roteiro_py.errors import ConfigError
from roteiro_py.reference import parse_pinned
from roteiro_py.untrusted import FileRefused, read_bounded

if TYPE_CHECKING:
    from roteiro_py.config_model import SECTIONS as SECTIONS
    from roteiro_py.config_model import LintSettings as LintSettings
    from roteiro_py.config_model import Settings as Settings
    from roteiro_py.config_model import VmSettings as VmSettings

#: The models, imported on first use (config_model.py says why).
_MODEL_NAMES = frozenset({"SECTIONS", "LintSettings", "Settings", "VmSettings"})


def __getattr__(name: str) -> Any:
    if name in _MODEL_NAMES:
        from roteiro_py import config_model  # lazy: pydantic (config_model.py says why)

        return getattr(config_model, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

REPO_CONFIG_NAME = "roteiro.toml"
ENV_PREFIX = "ROTEIRO_"

#: The keys of each section, by name: what files, variables and flags may set. Stated here
#: without the models (config_model.py), which only validation needs: reading the layers
#: and the refusals that need no validation stay off pydantic (test_config checks the two
#: agree).
FIELDS: dict[str, tuple[str, ...]] = {
    "lint": ("image", "backend", "fail_on", "format", "keep_cache", "dep_cache",
             "dep_cache_max_mib", "quiet", "color", "all_targets", "features", "all_features",
             "no_default_features", "packages", "workspace", "exclude", "no_deps", "targets",
             "target", "levels", "allowed_images"),
    "vm": ("accel", "cpus", "memory_mib", "timeout_s", "output_limit_mib", "stage_max_mib",
           "stage_max_files", "stage_max_depth", "scratch_mib", "kernel", "initrd", "template",
           "debian_archive", "debian_suite", "debian_security_archive"),
}


#: What a repository's roteiro.toml may set: what to lint and with which image. The
#: repository is the code under review; a branch must not be able to weaken how it is
#: confined or judged: the guest kernel and initramfs (host files booted as the guest's
#: root) and the Debian archives and suite they are provisioned from, the accelerator
#: (TCG is the user's opt-in), warm caches, resources, the
#: deadline, the exit-status threshold and which images a repository may choose
#: (allowed_images) come only from the user's config, the environment or flags.
REPO_KEYS = frozenset({"lint.image", "lint.format", "lint.all_targets", "lint.features",
                       "lint.all_features", "lint.no_default_features", "lint.packages",
                       "lint.workspace", "lint.exclude", "lint.no_deps", "lint.targets",
                       "lint.target"})
#: Of REPO_KEYS, what the repository only suggests: the user's own choice (flag, variable
#: or user config) wins. The output format is what the user's CI consumes: a branch whose
#: roteiro.toml said `github` turned a CI's configured `sarif` upload into workflow
#: commands (review rev-tree).
USER_FIRST_KEYS = frozenset({"lint.format"})


def image_allowed(name: str, allowed: list[str]) -> bool:
    """Whether the image `registry/repository` lies under one of the `allowed` prefixes.

    A prefix matches whole components: `ghcr.io/myorg` allows `ghcr.io/myorg/clippy`,
    never `ghcr.io/myorg-evil/clippy`.
    """
    for entry in allowed:
        prefix = entry.rstrip("/")
        if name == prefix or name.startswith(prefix + "/"):
            return True
    return False


def check_repo_key(path: Path | str, key: str) -> None:
    """Refuse a key that a repository's roteiro.toml may not set (see REPO_KEYS)."""
    if key not in REPO_KEYS:
        env = ENV_PREFIX + key.replace(".", "_").upper()
        raise ConfigError(path, f"not taken from a repository's {REPO_CONFIG_NAME}: the branch under review "
                          f"could set it; set it in {paths.user_config_path()}, with {env}, or with a flag",
                          key=key)


def known_keys() -> list[str]:
    return [f"{section}.{name}" for section, names in FIELDS.items() for name in names]


@dataclass(frozen=True)
class Source:
    """Where a value came from: 'default', 'flag --image', 'env ROTEIRO_LINT_IMAGE', or a file."""

    kind: Literal["default", "user", "repo", "env", "flag"]
    label: str

    def __str__(self) -> str:
        return self.label


DEFAULT = Source("default", "default")


@dataclass(frozen=True)
class Resolved:
    settings: Settings
    sources: dict[str, Source]
    user_config: Path
    repo_config: Path | None
    repo_root: Path | None

    def source_of(self, key: str) -> Source:
        return self.sources.get(key, DEFAULT)

    def value_of(self, key: str) -> Any:
        section, name = split_key(key)
        return getattr(getattr(self.settings, section), name)


def split_key(key: str) -> tuple[str, str]:
    section, _, name = key.partition(".")
    if section not in FIELDS or name not in FIELDS[section]:
        raise ConfigError("the command line", f"unknown key; known keys: {', '.join(known_keys())}",
                          key=key)
    return section, name


def find_repo_config(start: Path) -> Path | None:
    """The nearest roteiro.toml at or above `start`, or None."""
    here = start.resolve()
    if here.is_file():
        here = here.parent
    for directory in (here, *here.parents):
        candidate = directory / REPO_CONFIG_NAME
        if candidate.is_file():
            return candidate
    return None


_TOML_POSITION = re.compile(r"\(at line (\d+), column (\d+)\)")


#: A configuration file holds a few hundred bytes; reading stops past this many.
MAX_CONFIG_BYTES = 1 << 20


def _read_bounded(path: Path, *, follow_links: bool) -> bytes | None:
    """The bytes of a regular file, at most MAX_CONFIG_BYTES; None when it does not exist."""
    try:
        return read_bounded(path, MAX_CONFIG_BYTES, follow_links=follow_links)
    except FileNotFoundError:
        return None
    except FileRefused as refused:
        if refused.kind == "link":
            raise ConfigError(path, "is a symbolic link; a repository's configuration is read "
                              "only from a file in the repository") from None
        if refused.kind == "large":
            raise ConfigError(path, f"is larger than {MAX_CONFIG_BYTES} bytes, the limit for a "
                              "configuration file (config.MAX_CONFIG_BYTES)") from None
        raise ConfigError(path, refused.reason) from None


def read_toml(path: Path, *, follow_links: bool = True) -> dict[str, Any]:
    """Read one configuration file; syntax errors name the file, line and column.

    A repository's roteiro.toml is read with `follow_links=False`: it is the tree's, and a
    link in it would make a file of the host the configuration. Every file is bounded
    (MAX_CONFIG_BYTES), and nesting too deep for tomllib, which recurses once per level
    (`a = [[[[...` some thousand deep raised RecursionError: exit 4, "a bug"), is refused.
    """
    data = _read_bounded(path, follow_links=follow_links)
    if data is None:
        return {}
    try:
        return tomllib.loads(data.decode("utf-8"))
    except RecursionError:
        raise ConfigError(path, "nests arrays or tables too deeply to be read") from None
    except UnicodeDecodeError as error:
        raise ConfigError(path, "is not UTF-8 text", line=data[: error.start].count(b"\n") + 1) from None
    except tomllib.TOMLDecodeError as error:
        message = str(error)
        line: int | None = getattr(error, "lineno", None)
        column: int | None = getattr(error, "colno", None)
        match = _TOML_POSITION.search(message)
        if match and line is None:
            line, column = int(match.group(1)), int(match.group(2))
        problem = _TOML_POSITION.sub("", message).strip()
        raise ConfigError(path, f"TOML syntax error: {problem}", line=line, column=column) from None


def _flatten(path: Path | str, data: Mapping[str, Any]) -> dict[str, Any]:
    """section.key -> value for one file, refusing unknown sections and keys by name."""
    flat: dict[str, Any] = {}
    for section, table in data.items():
        if section not in FIELDS:
            shown = _clip(section)
            raise ConfigError(path, f"unknown section [{shown}]; known: "
                              f"{', '.join('[' + s + ']' for s in FIELDS)}", key=shown)
        if not isinstance(table, dict):
            raise ConfigError(path, f"`{section}` must be a table ([{section}])", key=section)
        for name, value in table.items():
            key = f"{section}.{name}"
            if name not in FIELDS[section]:
                raise ConfigError(path, f"unknown key; known keys in [{section}]: "
                                  f"{', '.join(FIELDS[section])}", key=_clip(key))
            flat[key] = value
    return flat


def _validate(where: Path | str, flat: Mapping[str, Any]) -> Settings:
    # lazy: pydantic only where the settings are validated, never on --help or the refusals
    # before validation (tests/unit/cli/test_app.py)
    from pydantic import ValidationError

    from roteiro_py.config_model import Settings

    nested: dict[str, dict[str, Any]] = {}
    for key, value in flat.items():
        section, name = key.split(".", 1)
        nested.setdefault(section, {})[name] = value
    try:
        return Settings.model_validate(nested)
    except ValidationError as error:
        first = error.errors()[0]
        key = ".".join(str(part) for part in first["loc"][:2])
        raise ConfigError(where, f"{first['msg']} (got {_shown(first.get('input'))})", key=key) from None


#: How much of a refused value a message repeats.
SHOWN_VALUE_CHARS = 200


def _clip(text: str) -> str:
    return text if len(text) <= SHOWN_VALUE_CHARS else text[:SHOWN_VALUE_CHARS] + "…"


def _shown(value: Any) -> str:
    try:
        return _clip(repr(value))
    except RecursionError:
        return f"a {type(value).__name__} nested too deeply to show"


def env_layer(environ: Mapping[str, str]) -> dict[str, tuple[Any, Source]]:
    layer: dict[str, tuple[Any, Source]] = {}
    for key in known_keys():
        name = ENV_PREFIX + key.replace(".", "_").upper()
        if name in environ:
            layer[key] = (environ[name], Source("env", f"env {name}"))
    return layer


@dataclass(frozen=True)
class Layers:
    """What the files, the environment and the flags set, read and checked by name (an
    unknown key, a key a repository may not set, a TOML error: ConfigError), lowest
    precedence first, not yet validated (that needs the models: `resolve`)."""

    layers: list[tuple[Path | str, dict[str, Any], Source]]
    user_config: Path
    repo_config: Path | None

    def unvalidated_image(self) -> tuple[str | None, Source] | None:
        """The effective `lint.image` and where it came from, when validation cannot fail
        and nothing else bears on choosing the image: every layer sets `lint.image` alone,
        as a string (validation passes a string through unchanged, and every other key
        keeps its default, `allowed_images` empty among them). None otherwise: resolve
        then validates first, so a bad value elsewhere is refused first, as before."""
        image: tuple[str | None, Source] = (None, DEFAULT)
        for _, flat, source in self.layers:
            for key, value in flat.items():
                if key != "lint.image" or not isinstance(value, str):
                    return None
                image = (value, source)
        return image


def read_layers(
    path: Path | None = None,
    *,
    flags: Mapping[str, tuple[Any, str]] | None = None,
    environ: Mapping[str, str] | None = None,
) -> Layers:
    """The configuration's layers for linting `path`, unvalidated (see `resolve`)."""
    environ = os.environ if environ is None else environ
    start = (path or Path.cwd())
    user_path = paths.user_config_path()
    repo_path = find_repo_config(start) if start.exists() else None
    layers: list[tuple[Path | str, dict[str, Any], Source]] = []
    if user_path.is_file():
        layers.append((user_path, _flatten(user_path, read_toml(user_path)),
                       Source("user", str(user_path))))
    if repo_path is not None:
        repo_layer = _flatten(repo_path, read_toml(repo_path, follow_links=False))
        for key in repo_layer:
            check_repo_key(repo_path, key)
        layers.append((repo_path, repo_layer, Source("repo", str(repo_path))))
    for key, (value, source) in env_layer(environ).items():
        layers.append((source.label, {key: value}, source))
    for key, (value, flag) in (flags or {}).items():
        if value is not None:
            layers.append((f"the option {flag}", {key: value}, Source("flag", f"flag {flag}")))
    return Layers(layers, user_path, repo_path)


def resolve(
    path: Path | None = None,
    *,
    flags: Mapping[str, tuple[Any, str]] | None = None,
    environ: Mapping[str, str] | None = None,
    layers: Layers | None = None,
) -> Resolved:
    """Resolve the effective settings for linting `path` (default: the working directory).

    `flags` maps "section.key" to (value, flag name) for the options given on the command
    line; None values are ignored (the flag was not given). `layers`: read already.
    """
    read = layers or read_layers(path, flags=flags, environ=environ)
    merged: dict[str, Any] = {}
    sources: dict[str, Source] = {}
    for where, flat, source in read.layers:
        if source.kind == "flag":
            for key in flat:
                split_key(key)
        _validate(where, flat)
        for key, value in flat.items():
            if source.kind == "repo" and key in USER_FIRST_KEYS and key in sources:
                continue  # the user's config already chose it
            merged[key] = value
            sources[key] = source
    settings = _validate("the merged configuration", merged)
    return Resolved(
        settings=settings,
        sources=sources,
        user_config=read.user_config,
        repo_config=read.repo_config,
        repo_root=read.repo_config.parent if read.repo_config else None,
    )


@dataclass(frozen=True)
class Refused:
    """A value of a file or variable that `config show` left out, and why: the
    ConfigError a lint would raise for it. `key` is None when the whole file is
    unreadable (a TOML syntax error, a link), or names a key no section has."""

    key: str | None
    error: ConfigError


def resolve_leniently(path: Path, *, environ: Mapping[str, str] | None = None) -> tuple[Resolved, list[Refused]]:
    """`config show`'s resolve: every value that can be read, checked and validated, each
    key at a time, with the refused ones left out (the layers below them decide) and
    returned with their errors. Issue 23: one bad key in a roteiro.toml made `config
    show`, which that refusal's own hint names, fail whole. A lint still refuses the first
    (`resolve`); the checks are the same ones (`_flatten`, `check_repo_key`, `_validate`),
    and the model's validators are per field, so a key that passes alone passes merged."""
    environ = os.environ if environ is None else environ
    user_path = paths.user_config_path()
    repo_path = find_repo_config(path) if path.exists() else None
    refused: list[Refused] = []
    layers: list[tuple[Path | str, dict[str, Any], Source]] = []
    files = [(user_path, Source("user", str(user_path)))] if user_path.is_file() else []
    files += [(repo_path, Source("repo", str(repo_path)))] if repo_path is not None else []
    for file, source in files:
        try:
            data = read_toml(file, follow_links=source.kind == "user")
        except ConfigError as error:
            refused.append(Refused(None, error))
            continue
        flat: dict[str, Any] = {}
        for section, table in data.items():
            # an unknown section or one that is no table is refused whole, by _flatten
            pieces = ([{section: {name: value}} for name, value in table.items()]
                      if section in FIELDS and isinstance(table, dict) else [{section: table}])
            for piece in pieces:
                try:
                    one = _flatten(file, piece)
                    for key in one:
                        if source.kind == "repo":
                            check_repo_key(file, key)
                    _validate(file, one)
                except ConfigError as error:
                    refused.append(Refused(error.key if error.key in known_keys() else None, error))
                    continue
                flat.update(one)
        layers.append((file, flat, source))
    for key, (value, source) in env_layer(environ).items():
        try:
            _validate(source.label, {key: value})
        except ConfigError as error:
            refused.append(Refused(key, error))
            continue
        layers.append((source.label, {key: value}, source))
    return resolve(layers=Layers(layers, user_path, repo_path)), refused


def config_file_for(scope: Literal["user", "repo"], start: Path) -> Path:
    """The file `config set/unset` writes: the user's, or the repository's roteiro.toml.

    For the repository, an existing roteiro.toml above `start` is used; otherwise one is
    created at the root of the git work tree containing `start`, or in `start` itself.
    """
    if scope == "user":
        return paths.user_config_path()
    found = find_repo_config(start)
    if found is not None:
        return found
    here = start.resolve()
    for directory in (here, *here.parents):
        if (directory / ".git").exists():
            return directory / REPO_CONFIG_NAME
    return here / REPO_CONFIG_NAME


def set_value(file: Path, key: str, raw: str) -> Any:
    """Set `key` in `file` to `raw` (parsed as TOML when it is a TOML value), keeping the rest.

    Returns the stored value. The whole file is validated before it is written, and written
    atomically, so a refused value leaves the file as it was.
    """
    section, name = split_key(key)
    value = _parse_cli_value(raw, key)
    if key == "lint.image":
        parse_pinned(str(value), source=f"config set {key}")
    data = read_toml(file)
    _flatten(file, data)
    table = data.setdefault(section, {})
    table[name] = value
    settings = _validate(file, _flatten(file, data))
    stored = getattr(getattr(settings, section), name)
    table[name] = stored
    _atomic_write(file, _dumps(file, data))
    return stored


def unset_value(file: Path, key: str) -> bool:
    """Remove `key` from `file`; True when it was there."""
    section, name = split_key(key)
    data = read_toml(file)
    _flatten(file, data)
    table = data.get(section)
    if not isinstance(table, dict) or name not in table:
        return False
    del table[name]
    if not table:
        del data[section]
    _atomic_write(file, _dumps(file, data))
    return True


def _dumps(file: Path, data: dict[str, Any]) -> bytes:
    try:
        return tomli_w.dumps(data).encode()
    except RecursionError:
        raise ConfigError(file, "nests arrays or tables too deeply to be written back") from None


def _parse_cli_value(raw: str, key: str) -> Any:
    try:
        return tomllib.loads(f"v = {raw}")["v"]
    except tomllib.TOMLDecodeError:
        return raw
    except RecursionError:
        raise ConfigError("the command line", "the value nests arrays or tables too deeply "
                          "to be read", key=key) from None


def _atomic_write(file: Path, content: bytes) -> None:
    """Replace `file` whole (paths.replace_file), keeping its mode: a private 0600 file
    became 0644."""
    file.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = 0o644 if file.is_symlink() else stat.S_IMODE(os.lstat(file).st_mode)
    except FileNotFoundError:
        mode = 0o644
    paths.replace_file(file, content, mode)
