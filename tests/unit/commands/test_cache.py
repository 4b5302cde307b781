"""`pylint-sandbox cache list|prune` through the real entry point: every kind of cache
listed with its size and last use, pruned by age, size and kind, never one a running lint
holds (said so), never everything by accident, and nothing from disk printed raw.

The caches are laid out on disk as the modules that make them lay them out (the
dependency cache through its own store); the command runs as a separate process, so a
lock this test holds is another process's, as a running lint's would be.
"""

from __future__ import annotations

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

EXE = Path(sys.executable).with_name("pylint-sandbox")
DAY = 86400.0
KIB = 1024


def run(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), "cache", *args], capture_output=True, text=True, timeout=60,
                          env={**os.environ, "COLUMNS": "200"})


def aged(path: Path, days: float) -> Path:
    moment = time.time() - days * DAY
    os.utime(path, (moment, moment), follow_symlinks=False)
    return path


def dep_cache(key: str, days: float, data_kib: int = 64) -> Path:
    with store.lock(key, None, 0.0):
        disk = store.staging_disk(key)
        with disk.open("r+b") as handle:
            handle.truncate(16 << 20)
            handle.seek(1 << 20)
            handle.write(os.urandom(data_kib * KIB))
        image = store.publish(key, disk)
    aged(store.cache_dir() / f"{key}.used", days)
    return image


def lay_out_every_kind() -> dict[str, Path]:
    """One cache of each kind, each last used a different number of days ago (deps the
    oldest, 50 days; cargo-view the newest, 10), each holding 1-3 MiB."""
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
    made = lay_out_every_kind()
    entries = listed()
    assert [(entry["kind"], entry["path"]) for entry in entries] == [
        (kind, str(path)) for kind, path in made.items()]
    sizes = {entry["kind"]: entry["size_bytes"] for entry in entries}
    assert sizes["deps"] == os.stat(made["deps"]).st_blocks * 512 < (16 << 20)  # allocated
    assert sizes["template"] >= 3072 * KIB and sizes["cargo-view"] >= 1024 * KIB
    document = json.loads(run("list", "--format", "json").stdout)
    assert document["total_bytes"] == sum(sizes.values())

    human = run("list")
    assert human.returncode == 0, human.stderr
    lines = human.stdout.splitlines()
    assert lines[0].split() == ["kind", "key", "size", "last", "used", "path"]
    for label, path in zip([kind.label for kind in cache_report.KINDS.values()], made.values(),
                           strict=True):
        assert any(line.startswith(label) and line.endswith(str(path)) for line in lines), label
    assert "(50 days ago)" in human.stdout and "(10 days ago)" in human.stdout
    assert lines[-1].startswith(f"total: 5 caches, {cache_report.size_text(sum(sizes.values()))}")


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
    gone = ["deps", "template", "rootfs"]
    assert [kind for kind, path in made.items() if not os.path.lexists(path)] == gone
    freed = sum(int(str(before[kind])) for kind in gone)
    assert result.stdout.splitlines()[-1] == f"freed {cache_report.size_text(freed)} (3 caches)"
    assert sum(line.startswith("removed") for line in result.stdout.splitlines()) == 3
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


@pytest.mark.parametrize("kind", ["deps", "template", "rootfs", "build", "cargo-view"])
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
    assert "in use by a running lint" in result.stdout
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
    for args in (["--help"], ["list", "--help"], ["prune", "--help"]):
        result = run(*args)
        assert result.returncode == 0, (args, result.stderr)
    text = run("prune", "--help").stdout
    for option in ("--older-than", "--max-size", "--kind", "--all", "--dry-run"):
        assert option in text
