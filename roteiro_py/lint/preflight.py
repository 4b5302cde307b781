"""The cheap refusals, before anything is copied, built or booted.

In the order a run meets them: every output file (`--output`, `--format FMT=PATH`) can
be written; an image is configured, pinned by digest and (when the repository chose it)
allowed by the user; the path exists and its workspace is one the guest can be given
(not under the guest's scratch mount); the packages and features asked for are the
tree's (`check_selection`, once the clippy argv is built).
The hypervisor probe and the store lookup come next, in `roteiro_py.lint.lint`; the
scratch disk's place (`check_scratch`) last, before the root filesystem.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Callable
from pathlib import Path

from roteiro_py import config, paths
from roteiro_py.cargo.workspace import find_workspace_root, locked_names, read_manifest, workspace_members
from roteiro_py.errors import (
    ImageNotAllowed,
    MalformedReference,
    NoImageConfigured,
    PathNotFound,
    ScratchUnavailable,
    TagNotDigest,
    TreeFileRefused,
    UnknownFeature,
    UnknownPackage,
    UsageError,
)
from roteiro_py.lint.tree import Tree
from roteiro_py.reference import ImageReference, parse_pinned
from roteiro_py.stdout import require_open
from roteiro_py.untrusted import FileRefused, read_bounded
from roteiro_py.vocabulary import GUEST_SCRATCH


def locate(path: Path) -> Tree:
    link = linked_directory(path, itself=True)
    if link is not None:
        # `lint clippy crates/foo` in a checkout whose branch made crates/foo a link would
        # lint (and quote in the report) whatever host directory the link names (review)
        raise UsageError(f"The path {path} passes through {link}, a symbolic link under the "
                         "working directory.", hint="The tree under review can plant such a link; "
                         "lint the directory it names by its own path if you mean to.")
    asked = path.resolve()
    if not asked.exists():
        raise PathNotFound(asked)
    workspace = find_workspace_root(asked)
    if workspace.is_relative_to(GUEST_SCRATCH):
        raise UsageError(f"The workspace {workspace} lies under {GUEST_SCRATCH}, where the guest mounts "
                         "its scratch disk.", hint="Move or copy the tree elsewhere to lint it.")
    repo_root = workspace
    for directory in (workspace, *workspace.parents):
        if (directory / ".git").exists():
            repo_root = directory
            break
    return Tree(asked=asked, workspace=workspace, repo_root=repo_root)


def manifest_directory(manifest: Path | None, path: Path) -> Path:
    """The PATH a lint is about when `--manifest-path` is given: the directory of that
    Cargo.toml, which selects the package or workspace as cargo's flag does (member_of).
    A usage error naming it when it is given with a PATH other than the default, is not
    a file named Cargo.toml (cargo refuses any other name), or does not exist. None:
    `path` as given."""
    if manifest is None:
        return path
    if path != Path("."):
        raise UsageError(f"--manifest-path {manifest} and the PATH {path} both say what to lint.",
                         hint="Give one of them.")
    if manifest.name != "Cargo.toml":
        raise UsageError(f"--manifest-path {manifest} is not a file named Cargo.toml.",
                         hint="Name the Cargo.toml of the package or workspace to lint, as cargo "
                         "takes it.")
    if not manifest.is_file():
        raise UsageError(f"--manifest-path {manifest}: "
                         + ("it is not a file." if manifest.exists() else "it does not exist."),
                         hint="Name the Cargo.toml of the package or workspace to lint.")
    return manifest.parent


def repo_root_of(path: Path) -> Path | None:
    """The repository root `locate` finds for `path`, for checking a `--diff` before the
    lint; None when `locate` refuses the path, which the lint then does in its own order
    (after the configuration's refusals), as it did before the diff was checked here."""
    try:
        return locate(path).repo_root
    except UsageError:
        return None


def member_of(tree: Tree) -> str | None:
    """The package a PATH inside the workspace names: the nearest Cargo.toml with a
    `[package]` name from PATH up to (not including) the workspace root, as `cargo clippy`
    run in that directory selects it. None for the workspace root itself (its default
    members, as cargo there) or a directory no member manifest holds. Read with the
    bounded, link-refusing reader (deps.read_manifest); a name that is not a package
    name is no member (cargo in the guest says what is wrong with it)."""

    start = tree.asked if tree.asked.is_dir() else tree.asked.parent
    if start == tree.workspace or not start.is_relative_to(tree.workspace):
        return None
    for directory in (start, *start.parents):
        if directory == tree.workspace:
            return None
        manifest = directory / "Cargo.toml"
        if not manifest.is_file():
            continue
        try:
            package = read_manifest(manifest).get("package")
        except TreeFileRefused:
            return None
        name = package.get("name") if isinstance(package, dict) else None
        if isinstance(name, str) and re.fullmatch(r"[A-Za-z0-9_][A-Za-z0-9_-]*", name):
            return name
        return None
    return None


def repo_config_hint(resolved: config.Resolved, path: Path) -> Path:
    if resolved.repo_config is not None:
        return resolved.repo_config
    return config.config_file_for("repo", path)


def pinned_image(resolved: config.Resolved, path: Path) -> ImageReference:
    """Steps 1 and 2: an image is configured, pinned by digest, and (when the repository
    chose it) under the user's `lint.allowed_images`."""
    return _pinned(resolved.settings.lint.image, resolved.source_of("lint.image"),
                   resolved.repo_config, path, resolved.settings.lint.allowed_images,
                   lambda: str(resolved.source_of("lint.allowed_images")))


def refuse_early(layers: config.Layers, path: Path) -> None:
    """Steps 1 and 2 before the settings are validated, when validation cannot change
    them (`Layers.unvalidated_image`: only `lint.image` is set, as text). Validating
    imports pydantic and builds the models, ~200 ms, more than all of `--help`: without
    this, "no image configured" and "a tag, not a digest" cost 2.4x `--help`
    (bench/cli_startup.py). The refusals are the very ones `pinned_image` raises."""
    chosen = layers.unvalidated_image()
    if chosen is not None:
        image, source = chosen
        _pinned(image, source, layers.repo_config, path, [], lambda: "")


def _pinned(image: str | None, source: config.Source, repo_config: Path | None, path: Path,
            allowed: list[str], allowed_from: Callable[[], str]) -> ImageReference:
    if not image:
        raise NoImageConfigured(user_config=paths.user_config_path(),
                                repo_config=repo_config or config.config_file_for("repo", path),
                                stored=images_in_store(paths.store_root()))
    reference = parse_pinned(image, source=str(source))
    if source.kind == "repo" and allowed and not config.image_allowed(reference.name, allowed):
        raise ImageNotAllowed(str(reference), source.label, allowed, allowed_from())
    return reference


#: The store's index.json as read for the first-run refusal: larger than any store with a
#: few hundred images, far below what would cost time on the refusal's fast path.
MAX_INDEX_BYTES = 4 * 1024 * 1024
#: Entries of index.json looked at (and so the most images the refusal counts).
MAX_INDEX_ENTRIES = 1000
#: The annotation naming a provisioned reference (store/layout.py REF_NAME; a test checks
#: they agree). Stated again here so this fast path imports nothing of the store.
_REF_NAME = "org.opencontainers.image.ref.name"


def images_in_store(store_root: Path) -> list[str]:
    """The pinned references the store holds, newest provisioned first, for the refusal
    that no image is configured: its way forward is then the exact `config set` command.

    Read without the store package, which this refusal's fast path never imports
    (tests/unit/cli/test_app.py checks it): index.json through the bounded reader, at most MAX_INDEX_ENTRIES entries,
    and only names the reference grammar accepts as pinned, so nothing but a reference
    reaches the command line shown. Whether each is intact is `doctor --verify`'s
    business; an unreadable index lists nothing rather than refusing differently."""

    try:
        data = json.loads(read_bounded(store_root / "index.json", MAX_INDEX_BYTES))
    except (OSError, FileRefused, ValueError, RecursionError):
        return []
    manifests = data.get("manifests") if isinstance(data, dict) else None
    found: list[str] = []
    for entry in manifests[:MAX_INDEX_ENTRIES] if isinstance(manifests, list) else []:
        annotations = entry.get("annotations") if isinstance(entry, dict) else None
        name = annotations.get(_REF_NAME) if isinstance(annotations, dict) else None
        if not isinstance(name, str) or len(name) > 512:
            continue
        try:
            pinned = parse_pinned(name)
        except (MalformedReference, TagNotDigest):
            continue
        # the descriptor is the pin itself (store/layout.py): an entry whose digest is
        # not its name's is not one the store would resolve
        if entry.get("digest") != pinned.digest:
            continue
        if name not in found:
            found.append(name)
    return found[::-1]


def image_chosen_in(resolved: config.Resolved, tree: Tree) -> str:
    """Which setting chose the image, as the report states it: the flag, the variable, or
    the file (the repository's relative to its root, the user's with $HOME as ~)."""
    source = resolved.source_of("lint.image")
    if source.kind == "repo" and resolved.repo_config is not None:
        return os.path.relpath(resolved.repo_config, tree.repo_root)
    if source.kind == "user":
        home = str(Path.home())
        label = source.label
        return "~" + label[len(home):] if home != "/" and label.startswith(home + "/") else label
    return source.label


def linked_directory(output: Path, *, itself: bool = False) -> Path | None:
    """The first directory on the way to `output`, at or below the working directory,
    that is a symbolic link; None when there is none. A CI step writes its reports into
    the checkout (`--format sarif=reports/clippy.sarif`), and a branch can commit
    `reports -> /somewhere`: the file name is the CI's, but the directory would be the
    tree's choice (review). Directories above the working directory are the user's own."""
    cwd = os.getcwd()
    # the path as the kernel walks it: `reports/../x` passes through `reports`, which a
    # lexical normalisation (os.path.abspath) would never look at
    walked = os.path.join(cwd, output)
    parts = walked.split(os.sep)[1:] if itself else walked.split(os.sep)[1:-1]  # the file itself?
    current = os.sep
    for part in parts:
        current = os.path.join(current, part)
        if part in ("", ".", ".."):
            continue
        inside = os.path.normpath(current)
        if (inside == cwd or inside.startswith(cwd.rstrip(os.sep) + os.sep)) and os.path.islink(current):
            return Path(inside)
    return None


def refuse_linked_directory(output: Path, shown: str) -> None:
    link = linked_directory(output)
    if link is not None:
        raise UsageError(f"{shown}: the directory {link} on the way to it is a "
                         "symbolic link.", hint="The tree under review can plant such a link to "
                         "choose where the report lands; name a path that passes through none.")


def check_output(output: Path | None, *, shown: str | None = None) -> None:
    """Refuse an output file (`--output`, `--format FMT=PATH`) that cannot be written,
    or stdout (None) when it is closed, before anything is booted; `shown` is how the
    refusal names a file.

    Found only after the lint, a directory or a missing parent cost the whole run and
    ended as an internal error (IsADirectoryError, exit 4)."""
    if output is None:
        require_open()
        return
    shown = shown or f"--output {output}"
    refuse_linked_directory(output, shown)
    if output.is_dir():
        raise UsageError(f"{shown} is a directory.", hint="Name a file to write the report to.")
    parent = output.parent
    if not parent.is_dir():
        raise UsageError(f"{shown}: the directory {parent} does not exist.",
                         hint="Create it first, or name a file in an existing directory.")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise UsageError(f"{shown}: the directory {parent} is not writable.",
                         hint="Name a file in a directory you can write to.")


def check_scratch(settings: config.Settings) -> None:
    """errors.ScratchUnavailable where the run's scratch disk (lint/caches.py
    `scratch_disk`) would meet it for want of its directory: one that cannot be made or
    written (a read-only ROTEIRO_HOME, a file in its place, no space for a file).

    Why here: the disk itself is made only once the dependency cache is known (a kept
    disk's key names the cache it is layered over), after the root filesystem and the
    dependency cache, each of which may take minutes the first time."""
    where = paths.cache_root() / ("builds" if settings.lint.keep_cache else "scratch")
    try:
        where.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".writable-", dir=where)
        os.close(fd)
        os.unlink(probe)
    except OSError as error:
        raise ScratchUnavailable(where, error.strerror or str(error)) from None


#: A `--package` value that names one package by name alone: no glob (`*?[`), no spec
#: (`name@version`, `URL#name`). Only these are judged here; cargo matches the others.
_PLAIN_PACKAGE = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_-]*")


def check_selection(tree: Tree, lint: config.LintSettings, member: str | None) -> None:
    """errors.UnknownPackage / UnknownFeature for what cargo in the guest would refuse as
    surely, decided from the tree's Cargo.lock and manifests read as data
    (cargo/workspace.py): a plain `--package NAME` that is neither a package of the
    lockfile nor a member; a feature no selected member defines; `pkg/feat` for a
    selected member without `feat` (when no selected member has a dependency named `pkg`
    that is another package: cargo reads it as that dependency's feature first). Without
    it the VM booted (minutes under TCG) and cargo's refusal ended as exit 3 with advice
    about the image (issue 23 §3).

    Only the certain cases: a glob or a spec, a feature of a package that is not a
    member, `dep:NAME`, or a workspace whose members the host cannot tell for certain
    are left to cargo, whose refusal clippy/classify.py turns into the same exit 2; so are
    the features of a workspace under resolver 1, where they go to the package of the
    current directory whatever `--package` selects.
    `--exclude` is never judged: cargo only warns about an unknown name."""
    packages = tuple(lint.packages) or ((member,) if member and not lint.workspace else ())
    if not lint.packages and (lint.all_features or not lint.features):
        return  # nothing asked for by name: no manifest is read
    members = workspace_members(tree.workspace)
    plain = [name for name in packages if _PLAIN_PACKAGE.fullmatch(name)]
    locked = locked_names(tree.workspace) if plain else None
    if locked is not None:
        known = locked | set(members.all if members else ())
        for name in plain:
            if name not in known:
                raise UnknownPackage(name, tree.workspace, sorted(known))
    if lint.all_features or not lint.features or members is None or not members.per_package_features:
        return  # resolver 1 gives --features to the current directory's package: cargo's to judge
    if lint.workspace:
        selected = tuple(name for name in members.all if name not in lint.exclude)
    elif packages:
        if any(name not in members.all for name in packages):
            return  # a dependency, a glob or a spec: which features it has is cargo's to say
        selected = packages
    else:
        selected = members.default
    # here: command.py is the clippy stage; this module stays light for the first refusals
    from roteiro_py.clippy.command import validate_features

    defined = sorted(set().union(*(members.all[name].features for name in selected)))
    for feature in validate_features(tuple(lint.features)):
        owner, slash, name = feature.partition("/")
        if feature.startswith("dep:"):
            continue
        if slash:
            # cargo takes `owner` as a dependency of a selected member first (the resolver
            # judges its features), then as the member itself
            renamed = any(owner in members.foreign.get(chosen, ()) for chosen in selected)
            if owner in selected and not renamed and name not in members.all[owner].features:
                raise UnknownFeature(feature, (owner,), sorted(members.all[owner].features))
        elif feature not in defined:
            raise UnknownFeature(feature, selected, defined)
