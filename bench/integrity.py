"""What a lint pays for integrity, before and after issue 11, measured in one run.

Per lint, before: `Store.is_present`'s walk, which `resolve` used to be (the manifest, the
config and every layer re-hashed: 990 MB for the toolchain image). Per lint, after:
`Store.resolve` (manifest and config hashed, layers by size) plus `rootfs_record.check`
of the cached root filesystem (one stat and its record). Once per build: the seal
(fsync and sha256 of the ext4 image); the layers' hashing rides on the flatten's read.

    python bench/integrity.py [--layout DIR] [--reference REF] [--runs N]

The layout defaults to the test image the integration tests build with `image build`
(/var/tmp/roteiro-test-home/cache/images/clippy-1.95.0); it is read, never written. The root filesystem
is built once into a temporary ROTEIRO_HOME under /var/tmp (minutes: flatten + mkfs).
Not a test: numbers are printed, never asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

LAYOUT = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home")) / "cache" / "images" / "clippy-1.95.0"


def median_ms(fn: object, runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()  # type: ignore[operator]
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--layout", type=Path, default=LAYOUT)
    parser.add_argument("--reference", help="default: the layout's only reference")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="integrity-bench-", dir="/var/tmp") as home:
        os.environ["ROTEIRO_HOME"] = home
        from roteiro_py.store import Store
        from roteiro_py.vm.disks import rootfs, rootfs_record

        store = Store(args.layout)
        reference = args.reference or json.loads(store.index_path.read_text())["manifests"][0][
            "annotations"]["org.opencontainers.image.ref.name"]
        image = store.resolve(reference)
        layer_bytes = sum(layer.size for layer in image.layers)
        store.is_present(reference)  # page cache warm for both arms
        before = median_ms(lambda: store.is_present(reference), args.runs)
        resolve = median_ms(lambda: store.resolve(reference), args.runs)

        started = time.perf_counter()
        built = rootfs.rootfs_image(image.layers, image.manifest_digest)
        build_s = time.perf_counter() - started
        size = built.path.stat().st_size
        check = median_ms(lambda: rootfs_record.check(built.path), args.runs)
        seal_s = median_ms(lambda: rootfs_record.seal(built.path), 1) / 1000
        hash_s = median_ms(lambda: rootfs_record.hash_image(built.path), 1) / 1000

    print(f"image: {len(image.layers)} layers, {layer_bytes / 1e6:.0f} MB; "
          f"root filesystem {size / 1e6:.0f} MB")
    print(f"per lint (median of {args.runs}, page cache warm):")
    print(f"  before: resolve re-hashing every blob      {before:8.1f} ms")
    print(f"  after:  resolve (manifest, config, sizes)  {resolve:8.1f} ms")
    print(f"          + root filesystem identity check   {check:8.1f} ms")
    print(f"          = {resolve + check:.1f} ms ({before / max(resolve + check, 1e-3):.0f}x less)")
    print("once per root filesystem build:")
    print(f"  the whole build (flatten with layer hashing, mkfs, seal)  {build_s:6.1f} s")
    print(f"  of which the seal (fsync + sha256 of the image)           {seal_s:6.2f} s "
          f"(sha256 alone {hash_s:.2f} s)")


if __name__ == "__main__":
    main()
