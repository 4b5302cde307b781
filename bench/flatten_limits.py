"""What the flattening caps cost: throughput of `rootfs.flatten` with and without them.

One synthetic layer (many small files and a few large ones, in directories) is
flattened into a fresh directory, alternately with the caps enforced (the default
`FlattenLimits`) and with the budget's checks replaced by no-ops, and, as a reference,
by `tarfile.extractall` (no link safety, no caps). Prints medians in MB/s and files/s
and the ratios, measured in one run. Not a test: numbers are reported, never asserted.
Runs in well under 60 s.
"""

from __future__ import annotations

import hashlib
import io
import os
import shutil
import statistics
import tarfile
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from roteiro_py.vm.disks import rootfs

RUNS = 3
SMALL_FILES = 2000
SMALL_SIZE = 4 * 1024
LARGE_FILES = 8
LARGE_SIZE = 2 * 1024 * 1024


@dataclass(frozen=True)
class Layer:
    digest: str
    media_type: str
    path: Path


def synthetic_layer(path: Path) -> tuple[int, int]:
    """Write the layer; return (bytes of file content, files)."""
    small, large = os.urandom(SMALL_SIZE), os.urandom(LARGE_SIZE)
    with tarfile.open(path, "w") as tar:
        for i in range(SMALL_FILES):
            info = tarfile.TarInfo(f"usr/share/d{i % 40}/f{i}")
            info.size, info.mode = SMALL_SIZE, 0o644
            tar.addfile(info, io.BytesIO(small))
        for i in range(LARGE_FILES):
            info = tarfile.TarInfo(f"usr/lib/big{i}.so")
            info.size, info.mode = LARGE_SIZE, 0o755
            tar.addfile(info, io.BytesIO(large))
    return SMALL_FILES * SMALL_SIZE + LARGE_FILES * LARGE_SIZE, SMALL_FILES + LARGE_FILES


def _uncapped() -> None:
    def noop(*_args: object) -> None:
        return None

    rootfs._Budget.check_bytes = noop  # type: ignore[method-assign]
    rootfs._Budget.add_bytes = noop  # type: ignore[method-assign]
    rootfs._Budget.add_entry = noop  # type: ignore[method-assign]


def timed(fn: object, layer: Layer, work: Path) -> float:
    dest = work / "dest"
    if dest.exists():
        shutil.rmtree(dest)
    dest.mkdir()
    started = time.perf_counter()
    fn(layer, dest)  # type: ignore[operator]
    return time.perf_counter() - started


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="flatten-bench-", dir="/var/tmp") as tmp:
        work = Path(tmp)
        nbytes, files = synthetic_layer(work / "layer.tar")
        layer = Layer("sha256:" + hashlib.sha256((work / "layer.tar").read_bytes()).hexdigest(),
                      rootfs.MEDIA_TAR[0], work / "layer.tar")

        def capped(layer: Layer, dest: Path) -> None:
            rootfs.flatten([layer], dest)

        def extractall(layer: Layer, dest: Path) -> None:
            with tarfile.open(layer.path) as tar:
                tar.extractall(dest, filter="tar")

        saved = {name: getattr(rootfs._Budget, name)
                 for name in ("check_bytes", "add_bytes", "add_entry")}
        samples: dict[str, list[float]] = {"capped": [], "uncapped": [], "extractall": []}
        for _ in range(RUNS):  # alternate, so drift in the machine's load hits all alike
            samples["capped"].append(timed(capped, layer, work))
            _uncapped()
            samples["uncapped"].append(timed(capped, layer, work))
            for name, method in saved.items():
                setattr(rootfs._Budget, name, method)
            samples["extractall"].append(timed(extractall, layer, work))
    median = {k: statistics.median(v) for k, v in samples.items()}
    print(f"layer: {files} files, {nbytes / 1e6:.0f} MB of content; median of {RUNS} runs")
    for name in ("capped", "uncapped", "extractall"):
        t = median[name]
        print(f"{name:11s} {t * 1000:8.1f} ms  {nbytes / 1e6 / t:7.1f} MB/s  "
              f"{files / t:9.0f} files/s")
    print(f"caps cost: capped/uncapped time = {median['capped'] / median['uncapped']:.3f}x")
    print(f"safety cost: uncapped/extractall time = "
          f"{median['uncapped'] / median['extractall']:.3f}x")


if __name__ == "__main__":
    main()
