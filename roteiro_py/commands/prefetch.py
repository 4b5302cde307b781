"""`pylint-sandbox prefetch`: the only command that downloads.

A lint never pulls: it reads the image store and the VM assets, and refuses when they are
absent. Provisioning is this separate, explicit step. An image from a registry (the
default source, whose host a repository's roteiro.toml may name) is downloaded only with
`--allow-download`, refused otherwise saying what it would download and from where
(sources that read local data, `--from docker` and `--from oci:PATH`, need no
permission). `--vm-assets` downloads without it: that is all it does, from the archive
the user's own configuration names (vm/assets/assets.py says why); the flag is accepted
with it and changes nothing.

`--from oci:PATH` needs no digest when the layout says it: with no `--image` and no
configured image, or an `--image` without a digest (the name the store gives it), the
one image the layout's index.json lists is provisioned and its pinned reference printed;
a layout of several is refused, listing them (store/prefetch.py `pin_from_layout`).

Progress is shown with rich on a terminal (bytes per layer) and as one line per blob
otherwise, so CI logs stay short.
"""

from __future__ import annotations

import os
import shlex
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from roteiro_py import config
from roteiro_py.errors import NoImageConfigured, UsageError
from roteiro_py.guidance import printable
from roteiro_py.platform_support import require_supported
from roteiro_py.reference import parse


def _interactive() -> bool:
    return sys.stderr.isatty() and not os.environ.get("CI")


@contextmanager
def _byte_progress() -> Iterator[Callable[[str, int, int], None]]:
    """A progress callback: rich bars on a terminal, a line per finished blob otherwise."""
    if not _interactive():
        finished: set[str] = set()

        def plain(digest: str, done: int, total: int) -> None:
            if total >= 0 and done >= total and digest not in finished:
                finished.add(digest)
                sys.stderr.write(f"  {printable(digest[:19])}  {done} bytes\n")

        yield plain
        return
    # lazy: rich's bars only on a terminal
    from rich.progress import BarColumn, DownloadColumn, Progress, TaskID, TextColumn, TransferSpeedColumn

    tasks: dict[str, TaskID] = {}
    # A column given as a str is read as rich markup; the description is outside text.
    with Progress(TextColumn("{task.description}", markup=False), BarColumn(), DownloadColumn(),
                  TransferSpeedColumn(), transient=False) as progress:

        def rich(digest: str, done: int, total: int) -> None:
            if digest not in tasks:
                tasks[digest] = progress.add_task(printable(digest[:19]),
                                                  total=total if total >= 0 else None)
            progress.update(tasks[digest], completed=done)

        yield rich


def _say(message: str) -> None:
    sys.stderr.write(f"{printable(message)}\n")


def run_prefetch(*, analyzer: str | None, image: str | None, allow_download: bool, source: str,
                 vm_assets: bool, path: Path, prune: bool = False) -> int:
    if analyzer is None and not vm_assets and not prune:
        if image is None:
            raise UsageError("Nothing to prefetch.",
                             hint="Pass --analyzer clippy (the linter image), --vm-assets, --prune, "
                                  "or a combination.")
        analyzer = "clippy"
    if vm_assets:
        # An x86_64 kernel and initramfs are of no use where no lint can boot them; refused
        # before the image below is fetched too, so the command does all or nothing.
        require_supported()
        # lazy: another platform is refused before cryptography and the Debian archive
        # code load (tests/unit/test_platform_support.py)
        from roteiro_py.vm.assets.assets import provision_assets

        vm = config.resolve(path).settings.vm
        files = provision_assets(progress=_say, archive=vm.debian_archive,
                                 suite=vm.debian_suite, security_archive=vm.debian_security_archive)
        for asset in files:
            sys.stdout.write(f"{asset.name}  {asset.sha256}  {printable(str(asset.path))}\n")
    if analyzer is not None:
        # lazy: the store (urllib, ssl, docker's engine client) loads only past the
        # usage and other-platform refusals above
        from roteiro_py.store import OciSourceSpec, Store, parse_source, pin_from_layout, prefetch

        spec = parse_source(source)
        reference, by_layout = image, False
        if isinstance(spec, OciSourceSpec) and image is not None and parse(image).digest is None:
            reference, by_layout = pin_from_layout(spec.path, image), True
        if reference is None:
            # lazy: the lint conductor loads only to read a configured image
            from roteiro_py.lint import pinned_image

            try:
                reference = str(pinned_image(config.resolve(path), path))
            except NoImageConfigured:
                if not isinstance(spec, OciSourceSpec):
                    raise
                reference, by_layout = pin_from_layout(spec.path, None), True  # its one image
        with _byte_progress() as progress:
            result = prefetch(Store.default(), reference, spec, allow_download=allow_download,
                              progress=progress)
        state = "already present" if result.already_present else (
            f"{result.blobs_fetched} blobs, {result.bytes_fetched} bytes")
        _say(f"provisioned from {result.source}: {state}")
        sys.stdout.write(f"{result.reference}\n")
        if by_layout or reference != result.reference:
            _say("pin it for this repository with:")
            _say(f"  pylint-sandbox config set lint.image {shlex.quote(result.reference)} --repo")
    if prune:
        from roteiro_py.store import Store  # lazy: as above

        freed = Store.default().prune()
        _say(f"pruned {freed} bytes of blobs no provisioned image uses")
    return 0
