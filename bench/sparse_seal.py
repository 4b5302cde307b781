"""Sealing a dependency cache: `hash_sparse` against `hash_image` on a sparse image.

Makes an image of --size-gib (default 8, the scratch disk's default size) holding
--data-mib of random data (default 200) in 50 extents spread over it, then times:
`seal` with the sparse digest, each hasher over the sparse image (median of --runs, the
first run from disk reported apart), and each over its dense copy (`cp --sparse=never`,
what a CI cache restored through tar gives), checking the two copies' sparse digests are
equal. The figures in rootfs_record.hash_sparse's docstring come from this.
Not a test: numbers are reported, never asserted.

    python bench/sparse_seal.py [--size-gib N] [--data-mib N] [--runs N] [--dir DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

from roteiro_py.vm.disks import rootfs_record

EXTENTS = 50


def timed(call: Callable[[], object], runs: int) -> tuple[float, float]:
    """(first run, median of the runs after it) in seconds."""
    samples = []
    for _ in range(runs + 1):
        started = time.perf_counter()
        call()
        samples.append(time.perf_counter() - started)
    return samples[0], statistics.median(samples[1:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-gib", type=int, default=8)
    parser.add_argument("--data-mib", type=int, default=200)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--dir", type=Path, default=None, help="where to write (default: a temporary dir)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(dir=args.dir) as tmp:
        image = Path(tmp) / "image.ext4"
        size = args.size_gib << 30
        piece = os.urandom((args.data_mib << 20) // EXTENTS)
        with image.open("wb") as handle:
            handle.truncate(size)
            for index in range(EXTENTS):
                handle.seek(index * (size // EXTENTS) + 12_345)
                handle.write(piece)
        os.sync()
        print(f"image: {args.size_gib} GiB, {image.stat().st_blocks * 512 >> 20} MiB allocated")
        started = time.perf_counter()
        sealed = rootfs_record.seal(image, rootfs_record.hash_sparse)
        print(f"seal (sparse digest): {time.perf_counter() - started:.2f} s")
        for name, hasher in (("hash_sparse", rootfs_record.hash_sparse),
                             ("hash_image", rootfs_record.hash_image)):
            first, median = timed(lambda hasher=hasher: hasher(image), args.runs)
            print(f"{name} sparse image: first {first:.2f} s, then median {median:.2f} s")
        dense = Path(tmp) / "dense.ext4"
        subprocess.run(["cp", "--sparse=never", str(image), str(dense)], check=True)
        print(f"dense copy: {dense.stat().st_blocks * 512 >> 20} MiB allocated, same sparse digest: "
              f"{rootfs_record.hash_sparse(dense) == sealed.digest}")
        for name, hasher in (("hash_sparse", rootfs_record.hash_sparse),
                             ("hash_image", rootfs_record.hash_image)):
            first, median = timed(lambda hasher=hasher: hasher(dense), args.runs)
            print(f"{name} dense copy: first {first:.2f} s, then median {median:.2f} s")


if __name__ == "__main__":
    main()
