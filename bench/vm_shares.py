"""How should a host tree reach the guest? 9p (cache=loose / none / mmap) vs a read-only
ext4 image, for the two trees a lint shares: the repository worktree and the cargo
registry. The numbers behind the choice stated in machine.py and mounts.py.

In one boot (so every transport sees the same guest and the same host load), the same two
host trees are attached five ways each: three 9p shares of the one directory (one per
cache mode; each mount is its own superblock with its own guest cache) and one read-only
ext4 image built by `share_image.tree_image` (the code the backend uses). Each step reads one
of them the way cargo + clippy do: stat every file (cargo's fingerprint walk), then read
every file once (rustc reading sources). The boot is repeated `--rounds` times with the
step order rotated. The host's cost of an image (staging copy + mkfs.ext4 -d) is measured
for trees of 500 files / 20 MB, 3,000 files and 5,000 files.

    ROTEIRO_HOME=/var/tmp/roteiro-test-home .venv/bin/python bench/vm_shares.py \
        [--rounds 2] [--caches loose,none,mmap] [--skip-host]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "integration" / "vm"))
from oci_fixture import busybox_image  # noqa: E402

from roteiro_py.process import Command  # noqa: E402
from roteiro_py.vm.assets.assets import load_assets  # noqa: E402
from roteiro_py.vm.disks import rootfs, share_image  # noqa: E402
from roteiro_py.vm.mounts import MountTable  # noqa: E402
from roteiro_py.vm.qemu import job  # noqa: E402
from roteiro_py.vm.qemu.machine import Disk, MachineSpec, boot  # noqa: E402

#: Source files are mostly a few KB; a few are large (generated tables, big modules).
SIZES = (400, 1200, 2500, 4000, 6000, 9000, 14000)
#: Crates shaped like common dependencies: (name-version, .rs files, one large file bytes)
CRATES = (("syn-2.0.60", 120, 300_000), ("serde-1.0.200", 60, 120_000),
          ("libc-0.2.154", 260, 200_000), ("regex-syntax-0.8.3", 90, 400_000),
          ("tokio-1.37.0", 700, 150_000), ("proc-macro2-1.0.81", 40, 80_000))
INDEX = "index.crates.io-6f17d22bba15001f"
#: cargo's walk skips target/ and .git/; the image leaves them out, so 9p skips them too.
FIND = "find . -path ./target -prune -o -path ./.git -prune -o -type f -print"
PATTERN = f"{FIND} | xargs ls -l > /dev/null && {FIND} | xargs cat | wc -c"


def _file(path: Path, size: int, seed: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    line = f"pub fn f{seed}() -> u64 {{ {seed} }} // padding padding padding\n".encode()
    path.write_bytes((line * (size // len(line) + 1))[:size])


def worktree(root: Path, files: int, sizes: tuple[int, ...] = SIZES) -> Path:
    """A workspace: a few crates, nested modules, a target/ and .git/ that are not shared."""
    for i in range(files):
        crate, module = i % 8, (i // 8) % 25
        _file(root / f"crates/c{crate}/src/m{module}/f{i}.rs", sizes[i % len(sizes)], i)
    for crate in range(8):
        (root / f"crates/c{crate}/Cargo.toml").write_text(f"[package]\nname = 'c{crate}'\n")
    (root / "Cargo.toml").write_text("[workspace]\nmembers = ['crates/*']\n")
    (root / "Cargo.lock").write_text("version = 4\n")
    for i in range(200):  # what the image leaves out: the build cache and git objects
        _file(root / f"target/debug/deps/lib{i}.rmeta", 50_000, i)
        _file(root / f".git/objects/{i % 256:02x}/{i:038x}", 5_000, i)
    (root / "target/CACHEDIR.TAG").write_text("Signature: 8a477f597d28d172789f06886806bc55\n")
    return root


def registry(root: Path) -> Path:
    """$CARGO_HOME/registry: index cache, .crate files, and the unpacked sources."""
    for name, count, big in CRATES:
        src = root / "src" / INDEX / name
        for i in range(count):
            _file(src / f"src/m{i % 12}/f{i}.rs", SIZES[i % len(SIZES)], i)
        _file(src / "src/tables.rs", big, 0)
        (src / "Cargo.toml").write_text(f"[package]\nname = '{name}'\n")
        (src / ".cargo-ok").write_text('{"v":1}')
        _file(root / "cache" / INDEX / f"{name}.crate", big * 2, 1)
        crate = name.rsplit("-", 1)[0]
        _file(root / "index" / INDEX / ".cache" / crate[:2] / crate[2:4] / crate, 3000, 2)
    return root


def host_cost(tmp: Path) -> None:
    print("host cost of an image (staging copy + mkfs.ext4 -d):")
    for label, files, sizes in (("500 files / 20 MB", 500, (40_000,)),
                                ("3,000 files", 3000, SIZES), ("5,000 files", 5000, SIZES)):
        tree = worktree(tmp / f"cost-{files}", files, sizes)
        runs = []
        for _ in range(3):
            with share_image.tree_image(tree) as (image, report):
                runs.append((report.stage_seconds, report.mkfs_seconds,
                             image.stat().st_blocks * 512))
        stage = statistics.median(r[0] for r in runs)
        mkfs = statistics.median(r[1] for r in runs)
        print(f"  {label:18} {report.files} files {report.bytes / 1e6:5.1f} MB: "
              f"stage {stage:.2f} s + mkfs {mkfs:.2f} s = {stage + mkfs:.2f} s "
              f"(image {runs[0][2] / 1e6:.0f} MB on disk; {len(report.skipped)} left out)")


def guest_round(image: Path, trees: dict[str, Path], images: dict[str, Path],
                rotate: int, caches: tuple[str, ...]) -> dict[str, float]:
    shares: list[tuple[str, Path]] = []
    disks = [Disk(job.ROOT_SERIAL, image, readonly=True)]
    lines = [f"mount_root {job.ROOT_SERIAL}"]
    cases: list[tuple[str, str]] = []
    for name, tree in trees.items():
        for cache in caches:
            tag = f"s{len(shares)}"
            shares.append((tag, tree))
            lines.append(f"mount_share {tag} /b/{name}-{cache} {cache}")
            cases.append((f"{name} 9p cache={cache}", f"/b/{name}-{cache}"))
        serial = f"img{len(disks)}"
        disks.append(Disk(serial, images[name], readonly=True))
        lines.append(f"mount_image {serial} /b/{name}-ext4")
        cases.append((f"{name} ext4 image", f"/b/{name}-ext4"))
    cases = cases[rotate % len(cases):] + cases[:rotate % len(cases)]
    steps = [Command("sh", ("-c", f"cd {where} && {PATTERN}"), Path("/"), {"PATH": "/bin"},
                     timeout=600) for _, where in cases]
    original = job.mounts_script
    job.mounts_script = lambda *_: "\n".join(lines) + "\n"  # type: ignore[assignment]
    try:
        archive = job.job_archive(MountTable((), None, None, False), steps,
                                  stop_on_failure=True)
    finally:
        job.mounts_script = original  # type: ignore[assignment]
    spec = MachineSpec(assets=load_assets(), accel="tcg", cpu="max", cpus=2, memory_mib=512,
                       disks=tuple(disks), shares=tuple(shares),
                       ports=tuple(f"{k}{i}" for i in range(len(steps))
                                   for k in ("stdout", "stderr")), job=archive)
    result = boot(spec, deadline=1200)
    out: dict[str, float] = {}
    starts = {}
    for at, line in result.status:
        words = line.split()
        if words[:1] == ["start"]:
            starts[int(words[1])] = at
        elif words[:1] == ["exit"]:
            index = int(words[1])
            assert words[2] == "0", (cases[index], result.channels.get(f"stderr{index}"))
            out[cases[index][0]] = at - starts[index]
            got = result.channels[f"stdout{index}"].strip()
            print(f"    {cases[index][0]:26} {at - starts[index]:6.2f} s ({got.decode()} B)")
    assert len(out) == len(cases), (result.failure, result.console[-1500:])
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--skip-host", action="store_true")
    parser.add_argument("--caches", default="loose,none,mmap",
                        help="9p cache modes to compare (none and mmap take minutes)")
    args = parser.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="vm-shares-"))
    if not args.skip_host:
        host_cost(tmp)
    layers, digest = busybox_image(tmp / "oci")
    image = rootfs.rootfs_image(layers, digest).path
    trees = {"worktree": worktree(tmp / "worktree", 3000), "registry": registry(tmp / "reg")}
    with contextlib.ExitStack() as stack:
        images = {}
        for name, tree in trees.items():
            started = time.monotonic()
            images[name], report = stack.enter_context(share_image.tree_image(tree))
            print(f"{name}: {report.files} files, {report.bytes / 1e6:.1f} MB shared as an "
                  f"image built in {time.monotonic() - started:.2f} s")
        rounds = []
        for r in range(args.rounds):
            print(f"  round {r + 1}:")
            rounds.append(guest_round(image, trees, images, r * 3,
                                      tuple(args.caches.split(","))))
    print("median stat+read time in the guest (TCG):")
    for case in rounds[0]:
        print(f"  {case:26} {statistics.median(x[case] for x in rounds):6.2f} s")


if __name__ == "__main__":
    main()
