"""A dependency cache survives the CI cache's round trip at about the size of what it holds
(issue 23 §2): the Action's pack step (ci/github/pack-deps.sh) archives
`$ROTEIRO_HOME/cache/deps` with GNU tar `--sparse`, actions/cache archives and extracts
that as actions/toolkit calls tar (packages/cache/src/internal/tar.ts: `tar --posix -cf
ARCHIVE -P -C DIR --files-from MANIFEST`, then `tar -xf ARCHIVE -P -C DIR`, which writes
holes out), and the unpack step (ci/github/unpack-deps.sh) restores the holes.

The cache is the project's own scratch disk (scratch.create_scratch, the default 8 GiB)
with data written into it at offsets as bytes: nothing here mounts or parses the ext4, as
nothing in the pack does. The control arm is the same round trip without the pack: it
writes the holes out (a smaller disk, to spare the shared machine 8 GiB of writes)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from roteiro_py.config_model import VmSettings
from roteiro_py.vm.disks.rootfs_record import hash_sparse
from roteiro_py.vm.disks.scratch import create_scratch
from tests.unit.ci.test_ci_scripts import CI, run

MIB = 1 << 20
KEY = "d" * 64
#: The scratch disk's default size, which a dependency cache has (8 GiB).
SCRATCH_MIB = VmSettings().scratch_mib


def sparse_cache(deps: Path, size_mib: int, data_mib: int) -> Path:
    """A dependency cache as a build leaves it: a scratch disk of `size_mib` with `data_mib`
    MiB of random data in 1 MiB extents spread over it, plus its record beside it."""
    image = create_scratch(deps / f"{KEY}.ext4", size_mib)
    fd = os.open(image, os.O_WRONLY)
    try:
        stride = (size_mib - 1) // data_mib
        for index in range(data_mib):
            os.pwrite(fd, os.urandom(MIB), (1 + index * stride) * MIB)
    finally:
        os.close(fd)
    image.chmod(0o444)
    (deps / f"{KEY}.json").write_text('{"digest": "recorded"}')
    return image


def on_disk(path: Path) -> int:
    return path.stat().st_blocks * 512


def digest(path: Path) -> str:
    """Every byte's digest, a hole's as the zeros it reads as (rootfs_record.hash_sparse:
    a changed byte anywhere changes it; an 8 GiB image is not read through its holes)."""
    return hash_sparse(path)


def actions_cache_round_trip(home: Path, relative: str, scratch: Path) -> float:
    """actions/cache's save and restore of `home/relative` onto a fresh `home`: tar as
    actions/toolkit runs it (GNU tar, no --sparse; compression left out: it changes no hole),
    the directory removed in between as on a new runner. Seconds taken."""
    began = time.monotonic()
    manifest = scratch / "manifest.txt"
    manifest.write_text(f"{home / relative}\n")
    archive = scratch / "cache.tar"
    subprocess.run(["tar", "--posix", "-cf", str(archive), "--exclude", str(archive), "-P", "-C", str(home),
                    "--files-from", str(manifest)], check=True, capture_output=True, timeout=600)
    subprocess.run(["rm", "-rf", "--", str(home)], check=True, timeout=120)
    home.mkdir()
    subprocess.run(["tar", "-xf", str(archive), "-P", "-C", str(home)], check=True, capture_output=True,
                   timeout=600)
    archive.unlink()
    return time.monotonic() - began


@pytest.mark.timeout(600)
def test_a_dependency_cache_keeps_its_holes_through_the_actions_cache_round_trip(tmp_path: Path) -> None:
    home, scratch = tmp_path / "home", tmp_path / "scratch"
    scratch.mkdir()
    deps = home / "cache" / "deps"
    image = sparse_cache(deps, SCRATCH_MIB, 64)
    apparent, content, before = image.stat().st_size, on_disk(image), digest(image)
    assert apparent == SCRATCH_MIB * MIB and content < apparent // 20  # sparse to begin with

    env = {"ROTEIRO_HOME": str(home)}
    began = time.monotonic()
    packed = run(CI / "github" / "pack-deps.sh", env)
    pack_s = time.monotonic() - began
    assert packed.returncode == 0, packed.stdout + packed.stderr
    archive = home / "ci-cache" / "deps-packed" / "deps.tar"
    archived = archive.stat().st_size
    assert archived <= 2 * content, (archived, content)

    trip_s = actions_cache_round_trip(home, "ci-cache/deps-packed", scratch)
    assert not deps.exists()  # a new runner has only what the cache restored
    began = time.monotonic()
    unpacked = run(CI / "github" / "unpack-deps.sh", env)
    unpack_s = time.monotonic() - began
    assert unpacked.returncode == 0, unpacked.stdout + unpacked.stderr
    assert not archive.exists()  # deleted once unpacked

    restored = deps / f"{KEY}.ext4"
    assert restored.stat().st_size == apparent
    assert on_disk(restored) <= 2 * content, (on_disk(restored), content)
    assert digest(restored) == before
    assert (deps / f"{KEY}.json").read_text() == '{"digest": "recorded"}'
    print(f"\napparent {apparent}, content {content}, archive {archived},"
          f" on disk after the round trip {on_disk(restored)}; pack {pack_s:.1f} s,"
          f" actions/cache tar {trip_s:.1f} s, unpack {unpack_s:.1f} s\n{packed.stderr}{unpacked.stderr}")


@pytest.mark.timeout(600)
def test_control_without_the_pack_the_round_trip_writes_the_holes_out(tmp_path: Path) -> None:
    home, scratch = tmp_path / "home", tmp_path / "scratch"
    scratch.mkdir()
    image = sparse_cache(home / "cache" / "deps", 512, 16)
    apparent, content, before = image.stat().st_size, on_disk(image), digest(image)
    assert content < apparent // 4
    actions_cache_round_trip(home, "cache/deps", scratch)
    restored = home / "cache" / "deps" / f"{KEY}.ext4"
    assert digest(restored) == before
    assert on_disk(restored) >= apparent * 0.95 > 2 * content, (on_disk(restored), apparent, content)


def test_no_archive_a_runner_s_own_caches_or_a_failed_pack_never_fail_the_job(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = {"ROTEIRO_HOME": str(home)}
    done = run(CI / "github" / "unpack-deps.sh", env)
    assert done.returncode == 0, done.stderr
    assert not (home / "cache" / "deps").exists()
    # a runner that kept its own caches (self-hosted): those stay, the archive goes
    deps = home / "cache" / "deps"
    deps.mkdir(parents=True)
    (deps / "mine.json").write_text("mine")
    packed = run(CI / "github" / "pack-deps.sh", env)
    assert packed.returncode == 0, packed.stderr
    (deps / "mine.json").write_text("newer")
    done = run(CI / "github" / "unpack-deps.sh", env)
    assert done.returncode == 0, done.stderr
    assert (deps / "mine.json").read_text() == "newer"
    assert not (home / "ci-cache" / "deps-packed").exists()
    # a pack that fails says so, leaves nothing to save and does not fail the step (the
    # steps after it would be skipped): here its directory cannot be made
    broken = {"ROTEIRO_HOME": str(tmp_path / "broken")}
    (tmp_path / "broken" / "cache" / "deps").mkdir(parents=True)
    (tmp_path / "broken" / "ci-cache").write_text("a file where the archive's directory goes")
    done = run(CI / "github" / "pack-deps.sh", broken)
    assert done.returncode == 0 and "could not be packed" in done.stdout, done.stdout + done.stderr
    # nothing to pack: no archive, and the save step then has nothing to save
    empty = {"ROTEIRO_HOME": str(tmp_path / "empty")}
    done = run(CI / "github" / "pack-deps.sh", empty)
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "empty" / "ci-cache" / "deps-packed" / "deps.tar").exists()
