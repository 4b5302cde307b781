"""The stamps of the worktree's copy (vm/stamps.py, driven through share_image.stage_tree)
and the manifest beside a kept scratch disk (lint/freshness.py, lint/caches.py): an
unchanged entry keeps its stamp, a new or changed one gets the run's T, T only grows, and
a manifest that is damaged, oversized or tells an implausible clock is never trusted."""

from __future__ import annotations

import json
import math
import os
from datetime import UTC, datetime
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from roteiro_py import config
from roteiro_py.lint import caches, freshness
from roteiro_py.vm.api import Isolation, JobOutcome
from roteiro_py.vm.disks.share_image import stage_tree
from roteiro_py.vm.stamps import ROOT_KEY, ShareStamps, StampBook

T1, T2 = 1_700_000_000, 1_700_000_100


def tree(root: Path) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (root / "src" / "lib.rs").write_text("pub fn double(x: i32) -> i32 { x * 2 }\n")
    (root / "src" / "other.rs").write_text("pub fn other() {}\n")
    (root / "src" / "link.rs").symlink_to("other.rs")
    return root


def copy(source: Path, dest: Path, stamps: ShareStamps) -> dict[str, int]:
    """Stage `source` with `stamps`; the copy's mtime of every entry, by key."""
    dest.mkdir()
    stage_tree(source, dest, stamps=stamps)
    times = {ROOT_KEY: int(dest.stat().st_mtime)}
    for path in dest.rglob("*"):
        key = path.relative_to(dest).as_posix() + ("/" if path.is_dir() and not path.is_symlink() else "")
        st = path.lstat()
        assert st.st_mtime_ns % 1_000_000_000 == 0, "whole seconds: mkfs.ext4 keeps no more"
        times[key] = int(st.st_mtime)
    return times


def test_unchanged_entries_keep_their_stamp_and_changed_ones_get_t(tmp_path: Path) -> None:
    source = tree(tmp_path / "tree")
    first = ShareStamps(T1, {})
    times = copy(source, tmp_path / "one", first)
    assert set(times.values()) == {T1}  # a fresh book: everything at T
    assert set(times) == {ROOT_KEY, "Cargo.toml", "src/", "src/lib.rs", "src/other.rs", "src/link.rs"}

    lib = source / "src" / "lib.rs"
    before = lib.stat()
    lib.write_text(lib.read_text().replace("x * 2", "x * 1"))  # same size
    os.utime(lib, ns=(before.st_atime_ns, before.st_mtime_ns))  # and the same mtime
    assert lib.stat().st_size == before.st_size
    second = ShareStamps(T2, dict(first.seen))
    times = copy(source, tmp_path / "two", second)
    assert times["src/lib.rs"] == T2
    assert times["src/other.rs"] == times["Cargo.toml"] == times["src/"] == T1  # control: kept
    assert second.seen["src/lib.rs"][1] == T2 and not second.links_changed

    (source / "src" / "new.rs").write_text("")
    third = ShareStamps(T2 + 1, dict(second.seen))
    times = copy(source, tmp_path / "three", third)
    assert times["src/new.rs"] == times["src/"] == T2 + 1  # a directory's listing changed
    assert times["src/lib.rs"] == T2 and times[ROOT_KEY] == T1


def test_a_retargeted_link_restamps_the_whole_copy(tmp_path: Path) -> None:
    """cargo reads mtimes through links: a link moved to an unchanged file would show
    that file's old stamp, so a link change stamps everything with T."""
    source = tree(tmp_path / "tree")
    first = ShareStamps(T1, {})
    copy(source, tmp_path / "one", first)
    same = ShareStamps(T2, dict(first.seen))
    assert set(copy(source, tmp_path / "same", same).values()) == {T1}  # control
    (source / "src" / "link.rs").unlink()
    (source / "src" / "link.rs").symlink_to("lib.rs")
    moved = ShareStamps(T2, dict(first.seen))
    times = copy(source, tmp_path / "moved", moved)
    assert moved.links_changed and set(times.values()) == {T2}
    assert {stamp for _, stamp in moved.seen.values()} == {T2}


def test_a_file_changed_to_a_directory_listing_is_still_changed() -> None:
    stamps = ShareStamps(T2, {"a": ("dir:" + "0" * 64, T1)})
    assert stamps.stamp("a", "0" * 64) == T2


def manifest(generation: int, guest_clock: int, shares: object = None) -> dict[str, object]:
    return {"version": freshness.MANIFEST_VERSION, "generation": generation,
            "guest_clock": guest_clock,
            "shares": {"/w": {"src/lib.rs": ["a" * 64, generation]}} if shares is None else shares}


@given(st.integers(0, 2**40), st.integers(1, 10**6), st.integers(0, 2**40),
       st.floats(0, 2**40, allow_nan=False))
def test_t_only_grows_past_every_stamp_and_clock_before_it(generation: int, ran: int, gap: int,
                                                           now: float) -> None:
    previous = freshness.Manifest(generation, generation + ran, {})
    t = freshness.next_generation(previous, now)
    assert t > previous.generation and t > previous.guest_clock and t >= math.ceil(now)
    assert freshness.next_generation(None, now) == math.ceil(now)
    book = freshness.book_for(previous, now)
    assert book.generation == t and book.clock == t + 1


def test_a_manifest_round_trips_and_a_damaged_one_is_absent(tmp_path: Path) -> None:
    path = tmp_path / "k.manifest.json"
    book = StampBook(generation=T1)
    book.share("/w").stamp("src/\udcff.rs", "b" * 64)  # a name that is not UTF-8
    freshness.remember(path, book, T1 + 5)
    read = freshness.read_manifest(path, now=T1)
    assert read == freshness.Manifest(T1, T1 + 5, {"/w": {"src/\udcff.rs": ("b" * 64, T1)}})
    assert oct(path.stat().st_mode & 0o777) == "0o600"
    damaged = [
        b"", b"{", b"[]", b"null", b'{"version": 1}', b"[" * 100_000,
        json.dumps({**manifest(T1, T1 + 5), "version": 2}).encode(),
        json.dumps(manifest(True, T1 + 5)).encode(),  # type: ignore[arg-type]
        json.dumps(manifest(T1, T1 + 5, {"/w": {"src/lib.rs": ["a" * 64, T1 + 1]}})).encode(),
        json.dumps(manifest(T1, T1 + 5, {"/w": {"src/lib.rs": ["a" * 64]}})).encode(),
        json.dumps(manifest(T1, T1 + 5, {"/w": {"src/lib.rs": ["a" * 200, T1]}})).encode(),
        json.dumps(manifest(T1, T1 + 5, {"/w": []})).encode(),
        json.dumps(manifest(T1, T1)).encode(),  # the guest's clock was set past T
    ]
    for data in damaged:
        path.write_bytes(data)
        assert freshness.read_manifest(path, now=T1) is None, data[:80]
    path.write_bytes(json.dumps(manifest(T1, T1 + 5)).encode())
    assert freshness.read_manifest(path, now=T1) is not None  # control
    path.unlink()
    path.symlink_to(tmp_path / "elsewhere.json")
    (tmp_path / "elsewhere.json").write_bytes(json.dumps(manifest(T1, T1 + 5)).encode())
    assert freshness.read_manifest(path, now=T1) is None  # never through a link
    assert freshness.read_manifest(tmp_path / "absent.json", now=T1) is None


def test_an_oversized_manifest_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "k.manifest.json"
    valid = json.dumps(manifest(T1, T1 + 5)).encode()
    with path.open("wb") as handle:  # valid JSON, whitespace past the bound
        handle.write(valid)
        left = freshness.MANIFEST_MAX_BYTES + 1 - len(valid)
        while left:
            left -= handle.write(b" " * min(left, 1 << 20))
    assert freshness.read_manifest(path, now=T1) is None
    with path.open("r+b") as handle:
        handle.truncate(len(valid))
    assert freshness.read_manifest(path, now=T1) is not None  # control


def test_an_implausible_clock_is_never_trusted(tmp_path: Path) -> None:
    path = tmp_path / "k.manifest.json"
    now = T1 + 10
    ahead = math.ceil(now) + freshness.CLOCK_AHEAD_S
    path.write_bytes(json.dumps(manifest(T1, ahead + 1)).encode())
    assert freshness.read_manifest(path, now=now) is None
    path.write_bytes(json.dumps(manifest(T1, ahead)).encode())
    assert freshness.read_manifest(path, now=now) is not None  # control: at the bound
    book = StampBook(generation=T1)
    longest = book.clock + 30 + freshness.CLOCK_SLACK_S
    assert freshness.plausible_end(book, longest, 29.5)
    assert not freshness.plausible_end(book, longest + 1, 29.5)
    assert not freshness.plausible_end(book, book.clock - 1, 29.5)  # the clock was never set
    assert not freshness.plausible_end(book, None, 29.5)


def job(completed: bool, clock: int | None) -> JobOutcome:
    """A job's outcome by hand: a guest clock cannot be made implausible on demand."""
    return JobOutcome(steps=(), isolation=Isolation("qemu", "tcg", False, "TCG"),
                      completed=completed, boot_seconds=1.0, failure=None, console=b"",
                      guest_clock=clock)


def filesystem_uuid(disk: Path) -> bytes:
    """The ext4 superblock's UUID: random per mkfs (an inode number is reused at once)."""
    with disk.open("rb") as handle:
        handle.seek(1024 + 0x68)
        return handle.read(16)


def test_a_kept_disk_is_reused_only_after_a_completed_run(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "home"))
    settings = config.Settings.model_validate({"lint": {"keep_cache": True}, "vm": {"scratch_mib": 64}})

    def use(completed: bool | None, ran: int = 3) -> tuple[bytes, StampBook]:
        """One run: the guest's clock ends `ran` seconds past the one it was given."""
        with caches.scratch_disk(settings, "k") as scratch:
            assert scratch.manifest is not None and not scratch.manifest.exists()  # removed for the run
            scratch.book.share("/w").stamp("src/lib.rs", "a" * 64)
            if completed is not None:
                scratch.settle(job(completed, scratch.book.clock + ran if completed else None))
            return filesystem_uuid(scratch.disk), scratch.book

    first, book = use(True)
    again, warm = use(True)
    assert again == first  # the same disk, trusted
    assert warm.previous == {"/w": {"src/lib.rs": ("a" * 64, book.generation)}}
    assert warm.generation > book.clock + 3  # past the previous guest's clock
    killed, _ = use(False)  # init never said done: no manifest is written
    assert killed == first
    fresh, book = use(None)
    assert fresh != first and book.previous == {}  # made afresh, nothing kept
    use(True, ran=10**6)  # a guest clock that ran far faster than the host's
    _, after = use(None)
    assert after.previous == {}


def test_the_guest_clock_is_read_from_its_own_status_line(tmp_path: Path) -> None:
    from roteiro_py.process.sandbox import Command
    from roteiro_py.vm.qemu import backend, machine

    def outcome(*status: str) -> JobOutcome:
        result = machine.MachineResult(
            channels={}, truncated=set(), status=[(1.0, line) for line in status], console=b"",
            qemu_output=b"", qemu_exit=0, timed_out=False, failure=None,
            started_wall=datetime.now(UTC).timestamp(), duration=2.0)
        return backend._outcome([Command("true", (), tmp_path)], result, backend.isolation_for("tcg"))

    assert outcome("ready", f"clock {T1}", "done").guest_clock == T1
    for bad in ("clock", "clock -1", "clock 1.5", "clock \u0663", "clock " + "9" * 13, "clock 1 2"):
        assert outcome(bad, "done").guest_clock is None, bad
