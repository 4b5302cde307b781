"""`pylint-sandbox image build`: a digest-pinned linter image made on this host, without
Docker or a registry, provisioned into the store.

The image is a verified Debian root and a Rust toolchain (image/build.py says how each is
trusted and why the same inputs give the same pin). The toolchain is the host's installed
rustup toolchain (`--toolchain`), or Rust's own signed distribution (`--from-dist SPEC`,
or `--toolchain-file FILE`: what a repository's rust-toolchain.toml pins, read as data),
verified by image/rust_dist.py: its signed channel manifest first (an undated channel's
held to its date floor), which keys the build's cache, then, only when no image of that
key is cached, its packages, downloaded into a directory of this run. The command prints
the pinned reference on stdout, one line, and on stderr the exact `config set lint.image`
line that pins it; with `--output DIR` the OCI layout is also written there (for another
host's `prefetch --from oci:DIR`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from roteiro_py import config
from roteiro_py.errors import ImageBuildRefused, RoteiroError, UsageError, config_set_image_command
from roteiro_py.guidance import printable
from roteiro_py.image import build as image_build
from roteiro_py.image import rust_dist, toolchain, toolchain_file
from roteiro_py.paths import cache_root
from roteiro_py.store import OciSourceSpec, Store, prefetch
from roteiro_py.vm.assets.debian_archive import ArchiveError, security_suite

#: As config_model's `[vm] debian_suite`: the suite becomes a path in the archive.
_SUITE = re.compile(r"[a-z][a-z0-9.-]{0,63}")


def _say(message: str) -> None:
    sys.stderr.write(f"{printable(message)}\n")


#: The host's rustup toolchain an image is built from when no other is named.
DEFAULT_TOOLCHAIN = "1.95.0"


def _dist_progress(what: str, done: int, total: int) -> None:
    if done == total:
        _say(f"fetched {what} ({done} bytes)")


def _toolchain(name: str | None, spec: str | None, pinned: Path | None, targets: tuple[str, ...],
               components: tuple[str, ...]) -> image_build.ToolchainSource:
    """The toolchain the image is built from. One from Rust's distribution is its
    verified manifest, nothing more: the build downloads its packages only when no layout
    of what the manifest pins is cached (image/build.py)."""
    if sum(value is not None for value in (name, spec, pinned)) > 1:
        raise UsageError("--toolchain, --from-dist and --toolchain-file each choose the toolchain; "
                         "give one of them.", hint="--toolchain takes an installed rustup toolchain; "
                         "--from-dist and --toolchain-file fetch from Rust's distribution.")
    if spec is None and pinned is None:
        if targets or components:
            raise UsageError("--target and --component go with --from-dist or --toolchain-file.",
                             hint="An installed rustup toolchain goes in whole, as rustup installed it.")
        return toolchain.Installed(toolchain.host_toolchain(name or DEFAULT_TOOLCHAIN), name or DEFAULT_TOOLCHAIN)
    if pinned is not None:
        read = toolchain_file.read(pinned)
        chosen: rust_dist.ChannelSpec | str = read.spec
        targets, components = (*read.targets, *targets), (*read.components, *components)
    else:
        chosen = rust_dist.parse_spec(str(spec))
    # the download cache holds the date floor's record too: made on a hit only to hold it
    downloads = cache_root() / "rust-dist"
    manifest = rust_dist.read_manifest(chosen, targets=tuple(dict.fromkeys(targets)),
                                       components=tuple(dict.fromkeys(components)), progress=_dist_progress,
                                       cache=downloads)
    return rust_dist.FromDist(manifest, downloads, _dist_progress)


def run_image_build(*, toolchain_name: str | None, output: Path | None, with_clippy: bool, with_gcc: bool,
                    archive: str | None, suite: str | None, security_archive: str | None, force: bool,
                    path: Path = Path("."), from_dist: str | None = None,
                    toolchain_file_path: Path | None = None, targets: tuple[str, ...] = (),
                    components: tuple[str, ...] = (), set_image: bool = True) -> int:
    """Build, provision, print. An archive, suite or security archive not given is the
    user's `[vm]` setting, the one the VM assets come from (a repository cannot set it)."""
    if archive is None or suite is None or security_archive is None:
        vm = config.resolve(path).settings.vm
        archive = vm.debian_archive if archive is None else archive
        suite = vm.debian_suite if suite is None else suite
        security_archive = vm.debian_security_archive if security_archive is None else security_archive
    if not _SUITE.fullmatch(suite):
        raise UsageError(f"{suite[:80]!r} is not a Debian suite name.", hint="Pass --suite bookworm, for example.")
    try:
        source = _toolchain(toolchain_name, from_dist, toolchain_file_path, targets, components)
        request = image_build.BuildRequest(source, with_clippy=with_clippy, with_gcc=with_gcc, archive=archive,
                                           suite=suite, security_archive=security_archive)
        built = image_build.build(request, force=force, progress=_say)
    except toolchain.ToolchainError as exc:
        if from_dist is not None or toolchain_file_path is not None:  # fetched: rustup has no part in it
            raise ImageBuildRefused("the toolchain fetched from Rust's distribution", str(exc)) from None
        name = toolchain_name or DEFAULT_TOOLCHAIN
        raise ImageBuildRefused(f"the rustup toolchain {name}", str(exc),
                                commands=(f"rustup toolchain install {name} --component clippy",)) from None
    except ArchiveError as exc:
        where = archive + (f" and {security_archive} ({security_suite(suite)})" if security_archive else "")
        raise ImageBuildRefused(f"the Debian archive {where} (suite {suite})", str(exc),
                                commands=("pylint-sandbox image build --archive MIRROR-URL-OR-DIRECTORY",)) from None
    if built.cached:
        _say(f"unchanged inputs: the image built earlier at {built.layout}")
    result = prefetch(Store.default(), built.reference, OciSourceSpec(built.layout))
    state = "already present" if result.already_present else (
        f"{result.blobs_fetched} blobs, {result.bytes_fetched} bytes")
    _say(f"provisioned into the store: {state}")
    if output is not None:
        try:
            image_build.copy_layout(built.layout, output)
        except OSError as exc:
            raise ImageBuildRefused(f"the output directory {output}", str(exc)) from None
        _say(f"OCI layout written to {output}")
    sys.stdout.write(f"{result.reference}\n")
    chosen = _pin_if_unset(result.reference, path) if set_image else None
    if chosen is not None:
        _say(f"lint.image set to it in {chosen} (no image was configured); a lint now uses it")
        return 0
    _say("pin it with:")
    _say(f"  {config_set_image_command(result.reference)}")
    return 0


def _pin_if_unset(reference: str, path: Path) -> Path | None:
    """Write `reference` as `lint.image` in the user's config.toml when no layer configures
    an image for `path` (flag, environment, repository, user), so the four commands of a
    first lint need no hand-copied digest; the file it was written to, or None. Never
    over a configured image, and never into a file with comments (config set would drop
    them): the `config set` line is printed instead."""
    try:
        resolved = config.resolve(path)
        if resolved.value_of("lint.image") is not None:
            return None
        file = config.config_file_for("user", path)
        if file.is_file() and any(line.lstrip().startswith("#")
                                  for line in file.read_text(errors="replace").splitlines()):
            return None
        config.set_value(file, "lint.image", reference)
    except (OSError, RoteiroError):
        return None
    return file
