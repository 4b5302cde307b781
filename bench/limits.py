"""Staging throughput (files/s, MB/s) of a synthetic tree, with and without the caps.

share_image.stage_tree copies the worktree for the VM under the caps of [vm]
stage_max_mib, stage_max_files and stage_max_depth, one filesystem, iteratively. This
measures, in one run and interleaved so host load hits all arms alike:

- capped:    the default caps (they bind nowhere in this tree, but are all checked);
- uncapped:  caps at the settings' maxima (the same code, so the difference is noise);
- reference: shutil.copytree(symlinks=True), an unbounded copy with none of the rules.

Prints medians and the ratios to the reference. Not a test: numbers are reported, never
asserted. Runs in well under 60 s on a 2-core host.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from roteiro_py.config import VmSettings
from roteiro_py.vm.disks.share_image import StageLimits, stage_tree

FILES = 2000
FILE_BYTES = 4096
ROUNDS = 3


def synthetic_tree(root: Path) -> int:
    """FILES files of FILE_BYTES in directories 4 deep, plus links; returns the bytes."""
    payload = (b"// synthetic source line for the staging benchmark\n" * 100)[:FILE_BYTES]
    for index in range(FILES):
        directory = root / f"a{index % 10}" / f"b{index % 7}" / f"c{index % 5}" / "src"
        directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{index}.rs").write_bytes(payload)
    (root / "link").symlink_to("a0")
    return FILES * FILE_BYTES


def timed(copy: Callable[[Path], object], base: Path) -> float:
    dest = Path(tempfile.mkdtemp(dir=base)) / "copy"
    started = time.perf_counter()
    copy(dest)
    elapsed = time.perf_counter() - started
    shutil.rmtree(dest.parent)
    return elapsed


def main() -> None:
    fields = VmSettings.model_fields
    maxima = StageLimits(
        max_bytes=_le(fields["stage_max_mib"].metadata) * 1024 * 1024,
        max_files=_le(fields["stage_max_files"].metadata),
        max_depth=_le(fields["stage_max_depth"].metadata))
    capped = StageLimits.of(VmSettings())

    def staged(limits: StageLimits) -> Callable[[Path], object]:
        def copy(dest: Path) -> object:
            dest.mkdir()
            return stage_tree(tree, dest, limits)
        return copy

    arms: dict[str, Callable[[Path], object]] = {
        "capped": staged(capped),
        "uncapped": staged(maxima),
        "reference": lambda dest: shutil.copytree(tree, dest, symlinks=True),
    }
    with tempfile.TemporaryDirectory() as work:
        base = Path(work)
        tree = base / "tree"
        tree.mkdir()
        size = synthetic_tree(tree)
        samples: dict[str, list[float]] = {name: [] for name in arms}
        for _ in range(ROUNDS):
            for name, copy in arms.items():
                samples[name].append(timed(copy, base))
    reference = statistics.median(samples["reference"])
    print(f"tree: {FILES} files, {size / 1e6:.1f} MB; median of {ROUNDS} rounds")
    for name in arms:
        seconds = statistics.median(samples[name])
        print(f"{name:10s} {seconds:6.3f} s  {FILES / seconds:9.0f} files/s  "
              f"{size / 1e6 / seconds:7.1f} MB/s  {seconds / reference:5.2f}x reference")
    print(f"capped / uncapped: {statistics.median(samples['capped']) / statistics.median(samples['uncapped']):.2f}")


def _le(metadata: list[object]) -> int:
    return next(int(item.le) for item in metadata if hasattr(item, "le"))  # type: ignore[attr-defined]


if __name__ == "__main__":
    main()
