"""A scratch image shrunk to its content (scratch.shrink_to_content) survives the copy
actions/cache makes of it at about its content's size, with its files intact.

actions/cache archives with GNU tar and no --sparse (actions/toolkit,
packages/cache/src/internal/tar.ts: `tar --posix -cf ... -P -C <dir> --files-from
manifest.txt`, extracted with `tar -xf ... -P -C <dir>`): every hole of a file is written
out as data on extraction. The tests make the scratch image with the project's own
`create_scratch`, at the default scratch size, and write files into it with `debugfs -w`
(e2fsprogs, the package the image comes from): the guest's kernel is what writes it in a
real build, and no VM or root is needed to put bytes in an ext4 image this way.
"""

from __future__ import annotations

import hashlib
import random
import shutil
import subprocess
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.config_model import VmSettings
from roteiro_py.vm.disks.scratch import create_scratch, shrink_to_content, slot_size

MIB = 1024 * 1024

pytestmark = pytest.mark.skipif(shutil.which("debugfs") is None or shutil.which("tar") is None,
                                reason="needs e2fsprogs' debugfs and GNU tar")


def fill(image: Path, tmp_path: Path, sizes: list[int]) -> dict[str, str]:
    """Write files of `sizes` bytes (incompressible) into the image; {name: sha256}."""
    made: dict[str, str] = {}
    rng = random.Random(23)
    for index, size in enumerate(sizes):
        source = tmp_path / f"part{index}"
        data = rng.randbytes(size)
        source.write_bytes(data)
        name = f"part{index}"
        subprocess.run(["debugfs", "-w", "-R", f"write {source} {name}", str(image)],
                       check=True, capture_output=True)
        made[name] = hashlib.sha256(data).hexdigest()
        source.unlink()
    return made


def on_disk(path: Path) -> int:
    return path.stat().st_blocks * 512


def round_trip(image: Path, tmp_path: Path) -> Path:
    """`image` archived and extracted into a fresh directory as actions/cache does it;
    the extracted copy."""
    archive, fresh = tmp_path / "cache.tar", tmp_path / "restored"
    fresh.mkdir()
    manifest = tmp_path / "manifest.txt"
    manifest.write_text(f"{image.name}\n")
    subprocess.run(["tar", "--posix", "-cf", str(archive), "-P", "-C", str(image.parent),
                    "--files-from", str(manifest)], check=True)
    subprocess.run(["tar", "-xf", str(archive), "-P", "-C", str(fresh)], check=True)
    archive.unlink()
    return fresh / image.name


def test_a_shrunk_scratch_survives_the_actions_cache_round_trip_at_its_content_size(
        tmp_path: Path) -> None:
    size_mib = VmSettings().scratch_mib  # the default scratch disk: 8 GiB
    image = create_scratch(tmp_path / "work" / "cache.ext4", size_mib)
    content = 4 * 27 * MIB  # ~108 MB: what a real dependency cache held (issue 23 §2)
    made = fill(image, tmp_path, [27 * MIB] * 4)
    assert image.stat().st_size == size_mib * MIB  # the sparse file actions/cache copied whole

    size = shrink_to_content(image)

    assert image.stat().st_size == size == slot_size(size)
    restored = round_trip(image, tmp_path)
    assert on_disk(restored) <= 2 * content, (on_disk(restored), content)
    # still the filesystem it was, every file's bytes unchanged
    check = subprocess.run(["e2fsck", "-f", "-n", str(restored)], capture_output=True)
    assert check.returncode == 0, check.stdout
    for name, digest in made.items():
        dumped = subprocess.run(["debugfs", "-R", f"cat {name}", str(restored)],
                                check=True, capture_output=True).stdout
        assert hashlib.sha256(dumped).hexdigest() == digest


def test_control_an_unshrunk_scratch_is_written_whole_by_the_round_trip(tmp_path: Path) -> None:
    """The property is observable: the same copy of an image that was not shrunk writes
    every hole (at 256 MiB here, not 8 GiB, to keep the test's own disk use small)."""
    image = create_scratch(tmp_path / "work" / "cache.ext4", 256)
    content = 16 * MIB
    fill(image, tmp_path, [content])
    restored = round_trip(image, tmp_path)
    assert on_disk(restored) > 2 * content
    assert on_disk(restored) >= 256 * MIB


def test_a_damaged_image_is_refused_and_named(tmp_path: Path) -> None:
    """A file that is no filesystem (what a failed build could leave) is ScratchUnavailable
    naming e2fsck, never published as it is."""
    image = tmp_path / "cache.ext4"
    image.write_bytes(b"\xff" * (4 * MIB))
    with pytest.raises(errors.ScratchUnavailable) as refused:
        shrink_to_content(image)
    assert "e2fsck exited" in refused.value.reason


def test_slot_sizes_cost_at_most_a_quarter_and_few_sizes_serve_many_caches() -> None:
    """A cache's size is in its VM template's key: rounded, caches of similar size share
    one template; the rounding (a hole) stays within the 2x a round trip may cost."""
    sizes = range(4 * MIB, 4096 * MIB, 777_777)
    for size in sizes:
        assert size <= slot_size(size) <= size * 1.25
        assert slot_size(slot_size(size)) == slot_size(size)
    doubling = {slot_size(size) for size in range(64 * MIB + 1, 128 * MIB + 1, 4096)}
    assert len(doubling) == 4, sorted(doubling)
