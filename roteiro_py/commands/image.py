"""`pylint-sandbox image build`: a digest-pinned linter image made on this host, without
Docker or a registry, provisioned into the store.

The image is a verified Debian root and a Rust toolchain (image/build.py says how each is
trusted and why the same inputs give the same pin). The command prints the pinned
reference on stdout, one line, and on stderr the exact `config set lint.image` line that
pins it; with `--output DIR` the OCI layout is also written there (for another host's
`prefetch --from oci:DIR`).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from roteiro_py import config
from roteiro_py.errors import ImageBuildRefused, UsageError, config_set_image_command
from roteiro_py.guidance import printable
from roteiro_py.image import build as image_build
from roteiro_py.image import toolchain
from roteiro_py.store import OciSourceSpec, Store, prefetch
from roteiro_py.vm.assets.debian_archive import ArchiveError, security_suite

#: As config_model's `[vm] debian_suite`: the suite becomes a path in the archive.
_SUITE = re.compile(r"[a-z][a-z0-9.-]{0,63}")


def _say(message: str) -> None:
    sys.stderr.write(f"{printable(message)}\n")


def run_image_build(*, toolchain_name: str, output: Path | None, with_clippy: bool, with_gcc: bool,
                    archive: str | None, suite: str | None, security_archive: str | None, force: bool,
                    path: Path = Path(".")) -> int:
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
        toolchain_dir = toolchain.host_toolchain(toolchain_name)
        request = image_build.BuildRequest(toolchain_dir, toolchain_name, with_clippy=with_clippy,
                                           with_gcc=with_gcc, archive=archive, suite=suite,
                                           security_archive=security_archive)
        built = image_build.build(request, force=force, progress=_say)
    except toolchain.ToolchainError as exc:
        raise ImageBuildRefused(f"the rustup toolchain {toolchain_name}", str(exc),
                                commands=(f"rustup toolchain install {toolchain_name} --component clippy",)) from None
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
    _say("pin it with:")
    _say(f"  {config_set_image_command(result.reference)}")
    return 0
