"""`pylint-sandbox cache list|prune|remove-image` through the real entry point: every kind
of cache and every provisioned image listed with its size and last use, pruned by age,
size (least recently used by the recorded use, never by atime) and kind, an image removed
by name with the blobs only it uses, never one a running lint holds (said so), never
everything by accident, and nothing from disk printed raw.

The caches are laid out on disk as the modules that make them lay them out (the
dependency cache through its own store); the command runs as a separate process, so a
lock this test holds is another process's, as a running lint's would be.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from filelock import FileLock

from roteiro_py import paths
from roteiro_py.cli.app import CacheKind
from roteiro_py.commands import cache as cache_report
from roteiro_py.depcache import store
from roteiro_py.errors import ImageNotProvisioned
from roteiro_py.eviction import record_use, used_record
from roteiro_py.reference import ImageReference
from roteiro_py.store import Store
from roteiro_py.vm.disks import rootfs_record
from roteiro_py.vm.disks.rootfs import rootfs_in_use
from roteiro_py.vm.qemu import template
from tests.unit.store.store_images import make_image, provision

EXE = Path(sys.executable).with_name("pylint-sandbox")
DAY = 86400.0
KIB = 1024


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), "cache", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def aged(path: Path, days: float) -> Path:
    """`path` last used `days` ago: its record says so (as a lint writes it), and its
    atime and mtime too."""
    moment = time.time() - days * DAY
    os.utime(path, (moment, moment), follow_symlinks=False)
    record_use(used_record(path), moment)
    return path


def dep_cache(key: str, days: float, data_kib: int = 64) -> Path:
    with store.lock(key, None, 0.0):
        disk = store.staging_disk(key)
        with disk.open("r+b") as handle:
            handle.truncate(16 << 20)
            handle.seek(1 << 20)
            handle.write(os.urandom(data_kib * KIB))
        image = store.publish(key, disk)
    record_use(store.cache_dir() / f"{key}.used", time.time() - days * DAY)
    return image


def image_in_store(name: str, *layers: dict[str, bytes]) -> ImageReference:
    """A provisioned image (store_images.provision: blobs, then the index entry)."""
    return provision(Store.default(), make_image(*layers), name)


def lay_out_every_kind(*, image: bool = False) -> dict[str, Path]:
    """One cache of each kind, each last used a different number of days ago (deps the
    oldest, 50 days, but for image build's layout, 60; cargo-view the newest, 10), each
    holding 1-3 MiB; with `image`, a
    provisioned image too, last used 5 days ago (its pinned manifest is its path)."""
    cache = paths.cache_root()
    made: dict[str, Path] = {"deps": dep_cache("d" * 64, 50, data_kib=2048)}

    template = cache / "vm-templates" / ("7" * 32)
    template.mkdir(parents=True)
    (template / "memory").write_bytes(os.urandom(3072 * KIB))
    (template / "template.json").write_text("{}")
    made["template"] = aged(template, 40)

    rootfs = cache / "rootfs" / f"{'5' * 64}.ext4"
    rootfs.parent.mkdir(parents=True)
    rootfs.write_bytes(os.urandom(2048 * KIB))
    made["rootfs"] = aged(rootfs, 30)

    build = cache / "builds" / f"{'3' * 32}.ext4"
    build.parent.mkdir(parents=True)
    build.write_bytes(os.urandom(1024 * KIB))
    (cache / "builds" / f"{'3' * 32}.manifest.json").write_text("{}")
    made["build"] = aged(build, 20)

    view = cache / "cargo-views" / ("1" * 32)
    (view / "registry" / "src").mkdir(parents=True)
    (view / "registry" / "src" / "lib.rs").write_bytes(os.urandom(1024 * KIB))
    made["cargo-view"] = aged(view, 10)

    layout = cache / "images" / "clippy-1.95.0"  # what `image build` keeps: the oldest, 60 days
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "blobs" / "sha256" / ("9" * 64)).write_bytes(os.urandom(1024 * KIB))
    (layout / "index.json").write_text("{}")
    made["image-build"] = aged(layout, 60)
    if image:
        ref = image_in_store("localhost/every/kind", {"big": os.urandom(512 * KIB)})
        record_use(Store.default().use_path(str(ref.digest), ".used"), time.time() - 5 * DAY)
        made["image"] = Store.default().blob_path(str(ref.digest))
    return made


def listed() -> list[dict[str, object]]:
    result = run("list", "--format", "json")
    assert result.returncode == 0, result.stderr
    entries = json.loads(result.stdout)["entries"]
    assert isinstance(entries, list)
    return entries


def test_the_cli_kinds_are_the_reports() -> None:
    assert [kind.value for kind in CacheKind] == list(cache_report.KINDS)


def test_list_shows_every_kind_with_size_last_use_and_a_total() -> None:
    made = lay_out_every_kind(image=True)
    entries = listed()
    assert [(entry["kind"], entry["path"]) for entry in entries] == [
        (kind, str(path)) for kind, path in made.items()]
    sizes = {entry["kind"]: entry["size_bytes"] for entry in entries}
    assert sizes["deps"] == os.stat(made["deps"]).st_blocks * 512 < (16 << 20)  # allocated
    assert sizes["template"] >= 3072 * KIB and sizes["cargo-view"] >= 1024 * KIB
    assert sizes["image"] >= 512 * KIB  # its layer, config and manifest
    document = json.loads(run("list", "--format", "json").stdout)
    assert document["total_bytes"] == sum(sizes.values())

    human = run("list")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["kind", "key", "size", "last", "used", "path"]
    shown = {**{kind: str(path) for kind, path in made.items()}, "image": "localhost/every/kind@"}
    for kind, label in [(name, kind.label) for name, kind in cache_report.KINDS.items()]:
        assert any(line.startswith(label) and shown[kind] in line for line in lines), label
    assert "(50 days ago)" in human.stdout and "(10 days ago)" in human.stdout
    assert "(5 days ago)" in human.stdout
    assert "no use recorded" not in human.stdout
    assert lines[-1].startswith(f"total: 7 caches, {cache_report.size_text(sum(sizes.values()))}")


def test_an_empty_cache_lists_nothing() -> None:
    result = run("list")
    assert result.returncode == 0 and result.stdout.startswith("no caches under ")
    assert json.loads(run("list", "--format", "json").stdout)["entries"] == []


def test_prune_without_a_criterion_is_a_usage_error_and_removes_nothing() -> None:
    made = lay_out_every_kind()
    for args in ([], ["--kind", "deps"], ["--dry-run"]):
        result = run("prune", *args)
        assert result.returncode == 2, (args, result.stdout, result.stderr)
        for option in ("--older-than", "--max-size", "--all"):
            assert option in result.stderr
        assert "Traceback" not in result.stderr
    assert all(os.path.lexists(path) for path in made.values())
    both = run("prune", "--all", "--older-than", "1")
    assert both.returncode == 2 and "--all" in both.stderr
    # control: with a criterion, the same command removes
    assert run("prune", "--older-than", "0").returncode == 0
    assert not any(os.path.lexists(path) for path in made.values())


def test_prune_by_age_removes_the_old_and_says_what_it_freed() -> None:
    made = lay_out_every_kind()
    before = {entry["kind"]: entry["size_bytes"] for entry in listed()}
    result = run("prune", "--older-than", "25")
    assert result.returncode == 0, result.stderr
    gone = ["deps", "template", "rootfs", "image-build"]
    assert [kind for kind, path in made.items() if not os.path.lexists(path)] == gone
    freed = sum(int(str(before[kind])) for kind in gone)
    assert result.stdout.splitlines()[-1] == f"freed {cache_report.size_text(freed)} (4 caches)"
    assert sum(line.startswith("removed") for line in result.stdout.splitlines()) == 4
    # the dependency cache's record and marks went with it, its lock file stayed
    assert sorted(path.suffix for path in store.cache_dir().iterdir()) == [".lock"]
    assert (paths.cache_root() / "builds" / f"{'3' * 32}.manifest.json").exists()  # kept, with its disk


def test_prune_by_size_takes_the_least_recently_used_first() -> None:
    made = lay_out_every_kind()
    sizes = {entry["kind"]: int(str(entry["size_bytes"])) for entry in listed()}
    # room for the two newest (rounded up to a MiB, less than the third newest): the rest go
    room = -(-(sizes["build"] + sizes["cargo-view"]) // (1 << 20))
    assert room << 20 < sizes["build"] + sizes["cargo-view"] + sizes["rootfs"]
    result = run("prune", "--max-size", str(room))
    assert result.returncode == 0, result.stderr
    assert [kind for kind, path in made.items() if os.path.lexists(path)] == ["build", "cargo-view"]


def test_prune_by_kind_and_dry_run() -> None:
    made = lay_out_every_kind()
    dry = run("prune", "--all", "--kind", "rootfs", "--kind", "build", "--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert sum(line.startswith("would remove") for line in dry.stdout.splitlines()) == 2
    assert dry.stdout.splitlines()[-1].startswith("would free ")
    assert all(os.path.lexists(path) for path in made.values())
    result = run("prune", "--all", "--kind", "rootfs", "--kind", "build")
    assert result.returncode == 0, result.stderr
    assert [kind for kind, path in made.items() if not os.path.lexists(path)] == ["rootfs", "build"]
    assert not (paths.cache_root() / "builds" / f"{'3' * 32}.manifest.json").exists()
    unknown = run("prune", "--all", "--kind", "everything")
    assert unknown.returncode == 2


@pytest.mark.parametrize("kind", ["deps", "template", "rootfs", "build", "cargo-view", "image-build"])
def test_prune_never_takes_what_a_running_lint_holds(kind: str) -> None:
    made = lay_out_every_kind()
    entry = next(entry for entry in cache_report.collect([kind]))
    lock = FileLock(str(cache_report.KINDS[kind].lock_path(entry)), timeout=0)
    lock.acquire()
    try:
        result = run("prune", "--all")
    finally:
        lock.release()
    assert result.returncode == 0, result.stderr
    assert [k for k, path in made.items() if os.path.lexists(path)] == [kind]
    held = [line for line in result.stdout.splitlines() if line.startswith("in use")]
    assert len(held) == 1 and held[0].endswith(str(made[kind]))
    assert ("kept 1 cache: in use by a running lint (its lock is held); prune again once "
            "that has finished") in result.stdout.splitlines()
    # control: released, the same prune removes it
    assert run("prune", "--all").returncode == 0 and not os.path.lexists(made[kind])


def test_hostile_names_are_not_followed_deleted_or_printed_raw(tmp_path: Path) -> None:
    made = lay_out_every_kind()
    outside = tmp_path / "precious"
    outside.write_bytes(b"not a cache" * 100)
    deps = store.cache_dir()
    planted = [deps / f"{'e' * 64}.ext4", deps / f"\x1b]8;;evil\x07{'f' * 64}.ext4",
               paths.cache_root() / "rootfs" / f"{'e' * 64}.ext4",
               paths.cache_root() / "cargo-views" / ("e" * 32)]
    planted[0].symlink_to(outside)
    planted[1].write_bytes(b"\x1b[2J")
    planted[2].symlink_to(outside)
    planted[3].symlink_to(tmp_path, target_is_directory=True)

    listing = run("list")
    assert listing.returncode == 0, listing.stderr
    assert "\x1b" not in listing.stdout + listing.stderr
    assert listing.stdout.count("\n") == len(made) + 2  # header, ours, total: nothing planted
    pruned = run("prune", "--all")
    assert pruned.returncode == 0, pruned.stderr
    assert "\x1b" not in pruned.stdout + pruned.stderr
    assert all(os.path.lexists(path) for path in planted)
    assert outside.read_bytes() == b"not a cache" * 100 and tmp_path.is_dir()
    assert not any(os.path.lexists(path) for path in made.values())  # control: ours went


def test_text_from_disk_goes_out_through_the_sanitiser(tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """A path and a failure reason are what `cache list` prints from disk: an escape
    sequence in either comes out escaped (the control: it does reach the output)."""
    home = tmp_path / "home\x1b[31mred"
    home.mkdir()
    monkeypatch.setenv("ROTEIRO_HOME", str(home))
    store.mark_failed("c" * 64, "error: build script said \x1b]8;;http://x\x07click\x1b]8;;\x07")
    result = run("list")
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in result.stdout
    assert "home\\x1b[31mred" in result.stdout
    assert "build failed: error: build script said \\x1b]8;;http://x\\x07click" in result.stdout
    document = run("list", "--format", "json")
    assert "\x1b" not in document.stdout and "\\u001b" not in document.stdout
    note = json.loads(document.stdout)["entries"][0]["note"]
    assert note.startswith("build failed: error: build script said \\x1b]8;;")


def test_help() -> None:
    for args in (["--help"], ["list", "--help"], ["prune", "--help"], ["remove-image", "--help"]):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)
    text = run("prune", "--help").stdout
    for option in ("--older-than", "--max-size", "--kind", "--all", "--dry-run"):
        assert option in text


# -- last use is recorded, not read off atime ------------------------------------------


def rootfs(hexd: str, days_by_time: float, mib: int = 2) -> Path:
    """A root filesystem as rootfs.py leaves one (sealed), its atime and mtime `days_by_time`
    ago, and no record of a use yet."""
    image = paths.cache_root() / "rootfs" / f"{hexd}.ext4"
    image.parent.mkdir(parents=True, exist_ok=True)
    image.write_bytes(os.urandom(mib << 20))
    rootfs_record.seal(image)
    moment = time.time() - days_by_time * DAY
    os.utime(image, (moment, moment))
    return image


def test_max_size_keeps_what_a_lint_used_minutes_ago_whatever_its_atime_says() -> None:
    """The issue: relatime updates an atime at most daily, so a root filesystem booted
    minutes ago looked a day (here 30 days) old and `--max-size` took it first. Its use goes
    through the real rootfs_in_use (what a lint calls), which records it; atime and mtime
    are set back afterwards with os.utime, as relatime would have left them. Red before
    the record: the recent one went (atime ranked it oldest)."""
    recent = rootfs("a" * 64, days_by_time=30)
    older = rootfs("b" * 64, days_by_time=0)  # touched today, by atime: a read of it, no use
    record_use(used_record(older), time.time() - 2 * DAY)
    with rootfs_in_use([], f"sha256:{'a' * 64}") as found:  # sealed: found, nothing built
        assert found.path == recent
    moment = time.time() - 30 * DAY
    os.utime(recent, (moment, moment))
    assert recent.stat().st_atime < older.stat().st_atime  # atime would take `recent` first

    result = run("prune", "--max-size", "3", "--kind", "rootfs")
    assert result.returncode == 0, result.stderr
    assert recent.exists() and not older.exists(), result.stdout
    assert not used_record(older).exists()  # its record went with it
    entry, = listed()
    assert entry["path"] == str(recent) and entry["last_used_recorded"] is True
    assert "just now" in run("list").stdout


def test_an_entry_with_no_record_falls_back_to_its_mtime_and_says_so() -> None:
    """The control arm: with no record, the mtime ranks (the older mtime goes first), and
    `cache list` says the time shown is not a recorded use."""
    old = rootfs("c" * 64, days_by_time=30)
    new = rootfs("d" * 64, days_by_time=1)
    listing = run("list")
    assert listing.stdout.count(cache_report.UNRECORDED) == 2
    result = run("prune", "--max-size", "3", "--kind", "rootfs")
    assert result.returncode == 0, result.stderr
    assert new.exists() and not old.exists()


def test_a_record_not_ours_is_not_believed() -> None:
    """A record from the future would keep its entry for ever; text is no time: both fall
    back to the mtime."""
    kept = rootfs("e" * 64, days_by_time=1)
    forged = rootfs("f" * 64, days_by_time=30)
    used_record(forged).write_text(f"{time.time() + 400 * DAY}\n")
    junk = rootfs("0" * 64, days_by_time=20)
    used_record(junk).write_text("nan\n")
    result = run("prune", "--max-size", "3", "--kind", "rootfs")
    assert result.returncode == 0, result.stderr
    assert kept.exists() and not forged.exists() and not junk.exists()


# -- the image store -------------------------------------------------------------------


def allocated(*paths_: Path) -> int:
    return sum(path.lstat().st_blocks * 512 for path in paths_)


def two_images_sharing_a_layer() -> tuple[ImageReference, ImageReference, bytes]:
    base = {"usr/lib/shared.so": os.urandom(768 * KIB)}
    first = image_in_store("localhost/team/first", base, {"first": os.urandom(256 * KIB)})
    second = image_in_store("localhost/team/second", base, {"second": os.urandom(128 * KIB)})
    return first, second, make_image(base).layers[0]


def test_list_shows_each_image_with_shared_layers_counted_once() -> None:
    first, second, _ = two_images_sharing_a_layer()
    with Store.default().in_use(Store.default().resolve(first), until=None, seconds=0.0):
        pass  # what a lint holds: it records the use
    entries = listed()
    images = {entry["reference"]: entry for entry in entries}
    assert set(images) == {str(first), str(second), "(shared layers)"}
    blobs = Store.default().blobs_dir
    # every blob counted once: the total is what the store's blobs take
    assert sum(int(str(entry["size_bytes"])) for entry in entries) == allocated(*blobs.iterdir())
    assert json.loads(run("list", "--format", "json").stdout)["total_bytes"] == allocated(
        *blobs.iterdir())
    assert int(str(images["(shared layers)"]["size_bytes"])) >= 768 * KIB
    assert 256 * KIB <= int(str(images[str(first)]["size_bytes"])) < 768 * KIB
    assert images[str(first)]["last_used_recorded"] is True
    assert images[str(second)]["last_used_recorded"] is False  # never linted: provisioned
    human = run("list").stdout
    assert cache_report.UNRECORDED_IMAGE in human and "of layers shared with other images" in human


def template_of(rootfs_image: Path | None, key: str) -> Path:
    """A VM template directory as template.py leaves one, naming the root filesystem it
    booted (template.ORIGIN) unless None; its use recorded."""
    directory = template.templates_root() / key
    directory.mkdir(parents=True)
    (directory / template.MEMORY).write_bytes(b"m")
    if rootfs_image is not None:
        (directory / template.ORIGIN).write_text(rootfs_image.name)
    record_use(used_record(directory))
    return directory


def test_remove_image_takes_its_own_blobs_root_filesystem_and_template_and_keeps_the_shared() -> None:
    first, second, shared = two_images_sharing_a_layer()
    store_ = Store.default()
    manifest_hex = str(first.digest).partition(":")[2]
    built = rootfs(manifest_hex, days_by_time=0)
    other = rootfs(str(second.digest).partition(":")[2], days_by_time=0)
    booted = template_of(built, "8" * 32)
    unrelated = template_of(other, "9" * 32)
    older = template_of(None, "6" * 32)  # from before templates named their root filesystem
    before = set(store_.blobs_dir.iterdir())

    result = run("remove-image", str(first))
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith(f"removed image {first}: 3 blobs no other image uses")
    assert [ref.name for ref in store_.references()] == [str(second)]
    gone = before - set(store_.blobs_dir.iterdir())
    assert len(gone) == 3 and store_.blob_path(f"sha256:{manifest_hex}") in gone
    assert store_.has_blob(f"sha256:{hashlib.sha256(shared).hexdigest()}")
    assert store_.is_present(second)  # the other image, every blob re-hashed
    assert not built.exists() and not rootfs_record.record_path(built).exists()
    assert other.exists()
    assert f"removed root filesystem {built}" in result.stdout
    assert f"removed VM template {booted}" in result.stdout
    assert not booted.exists() and not used_record(booted).exists()
    assert unrelated.exists() and older.exists()  # another image's; one that names none
    # the same again: it is no longer provisioned
    again = run("remove-image", str(first))
    assert again.returncode == 2 and str(second) in again.stderr


def test_remove_image_keeps_a_root_filesystem_and_template_a_run_holds_and_says_so() -> None:
    first, _, _ = two_images_sharing_a_layer()
    built = rootfs(str(first.digest).partition(":")[2], days_by_time=0)
    booted = template_of(built, "8" * 32)
    with FileLock(str(rootfs_record.lock_path(built))), \
            FileLock(str(template.templates_root() / f"{booted.name}.lock")):
        result = run("remove-image", str(first))
    assert result.returncode == 0, result.stderr
    assert built.exists() and booted.exists()
    assert result.stdout.splitlines()[-2:] == [
        f"kept root filesystem {built}: in use (its lock is held); `pylint-sandbox cache "
        "prune --kind rootfs` removes it once that has finished",
        f"kept VM template {booted}: in use (its lock is held); `pylint-sandbox cache prune "
        "--kind template` removes it once that has finished"]
    # control: released, the prune it names removes them
    assert run("prune", "--all", "--kind", "rootfs", "--kind", "template").returncode == 0
    assert not built.exists() and not booted.exists()


def test_remove_image_refuses_an_unknown_reference_naming_a_bounded_few() -> None:
    refs = [image_in_store(f"localhost/many/n{index}", {"f": bytes([index]) * 100})
            for index in range(5)]
    result = run("remove-image", "localhost/many/n9:latest")
    assert result.returncode == 2, result.stderr
    assert "No image provisioned as localhost/many/n9:latest: nothing was removed." in result.stderr
    assert sum(str(ref) in result.stderr for ref in refs) == 3 and "and 2 more" in result.stderr
    assert len(Store.default().references()) == 5
    hostile = run("remove-image", "\x1b]8;;http://evil\x07click\x1b]8;;\x07")
    assert hostile.returncode == 2 and "\x1b" not in hostile.stderr
    assert "\\x1b]8;;http://evil" in hostile.stderr  # control: it arrives, escaped
    empty = Path(paths.roteiro_home()) / "store"
    for ref in refs:
        assert run("remove-image", str(ref)).returncode == 0
    none = run("remove-image", str(refs[0]))
    assert none.returncode == 2 and "holds no provisioned image" in none.stderr
    assert list((empty / "blobs" / "sha256").iterdir()) == []


def test_remove_image_never_takes_one_a_running_lint_holds() -> None:
    first, _, _ = two_images_sharing_a_layer()
    store_ = Store.default()
    built = rootfs(str(first.digest).partition(":")[2], days_by_time=0)
    before = sorted(store_.blobs_dir.iterdir())
    with subprocess.Popen(  # a lint holding the image, in another process as a real one is
            [sys.executable, "-c",
             "import sys, time\n"
             "from roteiro_py.store import Store\n"
             "store = Store.default()\n"
             "with store.in_use(store.resolve(sys.argv[1]), until=None, seconds=0.0):\n"
             "    print('held', flush=True); time.sleep(60)\n", str(first)],
            stdout=subprocess.PIPE, text=True) as lint:
        try:
            assert lint.stdout is not None and lint.stdout.readline() == "held\n"
            result = run("remove-image", str(first))
        finally:
            lint.kill()
    assert result.returncode == 3, (result.stdout, result.stderr)
    assert f"The image {first} is in use by a running lint: nothing was removed." in result.stderr
    assert sorted(store_.blobs_dir.iterdir()) == before and built.exists()
    assert str(first) in [ref.name for ref in store_.references()]
    # control: once that lint is gone, the same command removes it
    assert run("remove-image", str(first)).returncode == 0 and not built.exists()


def test_a_lint_that_starts_after_a_removal_is_refused_not_built_from_a_hole() -> None:
    first, _, _ = two_images_sharing_a_layer()
    store_ = Store.default()
    resolved = store_.resolve(first)
    assert run("remove-image", str(first)).returncode == 0
    with pytest.raises(ImageNotProvisioned) as refused, \
            store_.in_use(resolved, until=None, seconds=0.0):
        pytest.fail("held an image that is gone")
    assert refused.value.detail == "it was removed from the store while this run started"


def test_prune_never_removes_an_image() -> None:
    made = lay_out_every_kind(image=True)
    kind = run("prune", "--all", "--kind", "image")
    assert kind.returncode == 2 and "cache remove-image REF" in kind.stderr
    assert run("prune", "--all").returncode == 0
    assert [k for k, path in made.items() if os.path.lexists(path)] == ["image"]


def test_list_counts_unreferenced_blobs_and_says_which_image_cannot_be_read() -> None:
    """The total is what the store takes: blobs no image uses are a row of their own, with
    the way to remove them; an image whose manifest is gone says so, and then those blobs
    may be its, so `prefetch --prune` (which keeps them then) is not offered."""
    first, _, _ = two_images_sharing_a_layer()
    Store.default().put_bytes(os.urandom(64 * KIB))  # an interrupted pull's
    listing = run("list")
    assert listing.returncode == 0, listing.stderr
    assert "(unreferenced blobs)" in listing.stdout and "prefetch --prune" in listing.stdout
    entries = listed()
    assert sum(int(str(entry["size_bytes"])) for entry in entries) == allocated(
        *Store.default().blobs_dir.iterdir())
    Store.default().blob_path(str(first.digest)).unlink()
    damaged = run("list")
    assert "its manifest cannot be read" in damaged.stdout
    assert "prefetch --prune" not in damaged.stdout and "unreadable image" in damaged.stdout


# -- remove-image --all-except: what a CI job keeps before it saves the image cache -----


def built_layout(tag: str, reference: str | None) -> Path:
    """An image-build layout as image/build.py leaves one: its blobs, index and the record
    naming the reference it built (none: a record that cannot be read)."""
    layout = paths.cache_root() / "images" / f"clippy-{tag}"
    (layout / "blobs" / "sha256").mkdir(parents=True)
    (layout / "blobs" / "sha256" / ("9" * 64)).write_bytes(os.urandom(64 * KIB))
    (layout / "index.json").write_text("{}")
    (layout / "roteiro-build.json").write_text(
        "not json" if reference is None else json.dumps({"inputs": "sha256:" + "0" * 64,
                                                         "reference": reference,
                                                         "packages": []}))
    record_use(used_record(layout))
    return layout


def three_images_two_layouts() -> tuple[list[ImageReference], list[Path], list[Path]]:
    """Three provisioned images sharing a base layer (two built here: old and new
    toolchain; one pinned), a root filesystem of each, and two image-build layouts: the
    old toolchain's and the new one's, each recording the reference it built."""
    base = {"usr/lib/debian.so": os.urandom(256 * KIB)}
    old = image_in_store("localhost/roteiro/clippy", base, {"rustc-old": os.urandom(128 * KIB)})
    new = image_in_store("localhost/roteiro/clippy", base, {"rustc-new": os.urandom(128 * KIB)})
    pinned = image_in_store("ghcr.io/team/clippy", {"other": os.urandom(64 * KIB)})
    refs = [old, new, pinned]
    roots = [rootfs(str(ref.digest).partition(":")[2], days_by_time=0, mib=1) for ref in refs]
    layouts = [built_layout("1.94.0", str(old)), built_layout("1.95.0", str(new))]
    return refs, roots, layouts


def test_all_except_keeps_exactly_the_image_its_build_and_its_root_filesystem() -> None:
    (old, new, pinned), (old_root, new_root, pinned_root), (old_layout, new_layout) = \
        three_images_two_layouts()
    store_ = Store.default()
    result = run("remove-image", "--all-except", str(new))
    assert result.returncode == 0, result.stderr
    assert [ref.name for ref in store_.references()] == [str(new)]
    assert store_.is_present(new)  # every blob it uses, re-hashed
    # nothing but the kept image's blobs is left
    assert {path.name for path in store_.blobs_dir.iterdir()} == {
        digest.partition(":")[2] for digest in make_blobs_of(new)}
    assert new_root.exists() and not old_root.exists() and not pinned_root.exists()
    assert new_layout.exists() and not old_layout.exists()
    for ref in (old, pinned):
        assert f"removed image {ref}:" in result.stdout
    assert f"removed image build {old_layout}" in result.stdout
    assert f"kept image {new} and the image build {new_layout}" in result.stdout
    # the same again removes nothing more
    again = run("remove-image", "--all-except", str(new))
    assert again.returncode == 0 and again.stdout == (
        f"kept image {new} and the image build {new_layout}\n")


def make_blobs_of(ref: ImageReference) -> set[str]:
    """The digests the stored image `ref` reaches: its manifest, config and layers."""
    store_ = Store.default()
    manifest = json.loads(store_.blob_path(str(ref.digest)).read_bytes())
    return {str(ref.digest), manifest["config"]["digest"],
            *(layer["digest"] for layer in manifest["layers"])}


def test_all_except_a_pinned_image_removes_every_build_and_an_unreadable_record_goes() -> None:
    (old, new, pinned), _, layouts = three_images_two_layouts()
    unreadable = built_layout("1.96.0", None)
    result = run("remove-image", "--all-except", str(pinned))
    assert result.returncode == 0, result.stderr
    assert [ref.name for ref in Store.default().references()] == [str(pinned)]
    assert not any(path.exists() for path in [*layouts, unreadable])
    assert result.stdout.endswith(f"kept image {pinned}\n")


def test_all_except_never_takes_an_image_a_running_lint_holds() -> None:
    (old, new, pinned), (old_root, _, _), (old_layout, _) = three_images_two_layouts()
    store_ = Store.default()
    with subprocess.Popen(  # a lint holding the old image, in another process as a real one is
            [sys.executable, "-c",
             "import sys, time\n"
             "from roteiro_py.store import Store\n"
             "store = Store.default()\n"
             "with store.in_use(store.resolve(sys.argv[1]), until=None, seconds=0.0):\n"
             "    print('held', flush=True); time.sleep(60)\n", str(old)],
            stdout=subprocess.PIPE, text=True) as lint:
        try:
            assert lint.stdout is not None and lint.stdout.readline() == "held\n"
            result = run("remove-image", "--all-except", str(new))
        finally:
            lint.kill()
    assert result.returncode == 0, result.stderr
    assert sorted(ref.name for ref in store_.references()) == sorted([str(old), str(new)])
    assert store_.is_present(old) and old_root.exists()
    assert (f"kept image {old}: in use by a running lint (its lock is held); `pylint-sandbox "
            "cache remove-image` removes it once that has finished") in result.stdout.splitlines()
    assert f"removed image {pinned}:" in result.stdout
    assert not old_layout.exists()  # a layout is held by a build, not by a lint of its image
    # control: once that lint is gone, the same command removes it
    released = run("remove-image", "--all-except", str(new))
    assert released.returncode == 0 and f"removed image {old}:" in released.stdout
    assert [ref.name for ref in store_.references()] == [str(new)] and not old_root.exists()


def test_all_except_never_takes_a_layout_a_build_holds() -> None:
    (_, new, _), _, (old_layout, _) = three_images_two_layouts()
    with FileLock(str(paths.cache_root() / "images" / ".clippy-1.94.0.lock")):
        held = run("remove-image", "--all-except", str(new))
    assert held.returncode == 0, held.stderr
    assert old_layout.exists() and (
        f"kept image build {old_layout}: in use (its lock is held); `pylint-sandbox cache prune "
        "--kind image-build` removes it once that has finished") in held.stdout.splitlines()
    assert run("remove-image", "--all-except", str(new)).returncode == 0  # control: released
    assert not old_layout.exists()


def test_all_except_an_unknown_reference_refuses_naming_it_and_removes_nothing() -> None:
    refs, roots, layouts = three_images_two_layouts()
    blobs = sorted(Store.default().blobs_dir.iterdir())
    unknown = "localhost/roteiro/clippy:1.97.0@sha256:" + "e" * 64
    result = run("remove-image", "--all-except", unknown)
    assert result.returncode == 2, (result.stdout, result.stderr)
    assert f"No image provisioned as {unknown}: nothing was removed." in result.stderr
    assert result.stdout == ""
    assert len(Store.default().references()) == 3
    assert sorted(Store.default().blobs_dir.iterdir()) == blobs
    assert all(path.exists() for path in [*roots, *layouts])


def test_remove_image_takes_one_reference_or_all_except_not_both_nor_neither() -> None:
    refs, _, _ = three_images_two_layouts()
    for args in ([], [str(refs[0]), "--all-except", str(refs[1])]):
        result = run("remove-image", *args)
        assert result.returncode == 2 and "--all-except" in result.stderr, args
    assert len(Store.default().references()) == 3
    assert "--all-except" in run("remove-image", "--help").stdout


def test_a_hostile_build_record_ties_its_layout_to_no_image(tmp_path: Path) -> None:
    """A layout's record comes back from a CI cache as written by whoever saved it: it is
    read through the one bounded reader and names an image only with a whole pinned
    reference. A record nested past the JSON parser's recursion limit raised
    RecursionError (exit 4) here, and a digest after a name that is no image's (a
    terminal escape, nothing at all) tied the layout to that digest's image."""
    digest = "sha256:" + "a" * 64
    good = built_layout("1.95.0", f"localhost/roteiro/clippy:1.95.0@{digest}")
    built = cache_report.built_reference(good)
    assert built is not None and built.digest == digest  # control: a good record names it
    record = "roteiro-build.json"
    hostile = {
        "deep": "[" * 60_000,
        "large": json.dumps({"reference": f"localhost/a@{digest}", "pad": " " * (64 << 10)}),
        "escape": json.dumps({"reference": f"\x1b]8;;evil\x07@{digest}"}),
        "no name": json.dumps({"reference": f"@{digest}"}),
        "tag only": json.dumps({"reference": "localhost/roteiro/clippy:1.95.0"}),
    }
    for what, text in hostile.items():
        layout = built_layout(what.replace(" ", "-"), None)
        (layout / record).write_text(text)
        assert cache_report.built_reference(layout) is None, what
    fifo, link = built_layout("fifo", None), built_layout("link", None)
    (fifo / record).unlink()
    os.mkfifo(fifo / record)  # no writer: an open that waits for one never returns
    (link / record).unlink()
    (link / record).symlink_to(good / record)
    assert cache_report.built_reference(fifo) is None
    assert cache_report.built_reference(link) is None
