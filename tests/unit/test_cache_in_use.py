"""A cache a run uses is never pruned from under it (roteiro_py/locks.py).

Each kind is held by a real second process, through the very function a lint holds it
with (the dependency cache's `store.in_use`, `rootfs_in_use`, `template.in_use`, the
vendored view's `cargo_in_use`, a kept build's `scratch_disk`), while the real
`pylint-sandbox cache prune --all` runs: that kind is kept and reported in use, every
other kind goes, and once the holder lets go the same prune takes it (the control).

The semantics, stated once here and in locks.py: using is SHARED (two runs of one cache
both proceed, and a builder waiting meanwhile does not hold back a third), building and
removing are EXCLUSIVE (a builder waits for every user to leave, within its deadline; a
pruner never waits: it skips what is held). A kept build is the exception by design: it
is written by the run, so it is held exclusive for the whole run (lint/caches.py).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import json
import os
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import pytest
from filelock import FileLock

from roteiro_py import locks, paths
from roteiro_py.cargo import vendor
from roteiro_py.cargo.lockfile import read_pins
from roteiro_py.commands import cache as cache_report
from roteiro_py.depcache import store
from roteiro_py.errors import CacheContended, DeadlineExceeded
from roteiro_py.eviction import record_use, used_record
from roteiro_py.store import Store
from roteiro_py.vm.disks import rootfs_record
from roteiro_py.vm.mounts import cargo_views_root
from roteiro_py.vm.qemu import template
from tests.unit.cargo_support import crate_bytes, stored
from tests.unit.store.store_images import make_image, provision

EXE = Path(sys.executable).with_name("pylint-sandbox")
CRATES_IO = "registry+https://github.com/rust-lang/crates.io-index"
DEPS_KEY = "d" * 64
ROOTFS_HEX = "5" * 64
TEMPLATE_KEY = "7" * 32
BUILD_KEY = "3" * 32

#: What each kind's holder runs: the production hold, then "held", then it waits for a
#: line on stdin (or its end) and lets go as a finished run would.
HOLDERS = {
    "deps": ("from roteiro_py.depcache import store\n"
             "with store.in_use(sys.argv[1], until=time.monotonic() + 30, seconds=30) as image:\n"
             "    assert image is not None\n"
             "    print('held', flush=True); sys.stdin.readline()\n"),
    "rootfs": ("from roteiro_py.vm.disks import rootfs\n"
               "with rootfs.rootfs_in_use([], 'sha256:' + sys.argv[1]) as found:\n"
               "    assert found.path.is_file()\n"
               "    print('held', flush=True); sys.stdin.readline()\n"),
    # A spec is read for its memory size only while the template is found whole.
    "template": ("from types import SimpleNamespace\n"
                 "from roteiro_py.vm.qemu import template\n"
                 "with template.in_use(SimpleNamespace(memory_mib=1), [], sys.argv[1], b'',\n"
                 "                     until=time.monotonic() + 30, deadline_s=30) as found:\n"
                 "    assert found.key == sys.argv[1]\n"
                 "    print('held', flush=True); sys.stdin.readline()\n"),
    "build": ("from roteiro_py import config\n"
              "from roteiro_py.lint.caches import scratch_disk\n"
              "settings = config.Settings.model_validate({'lint': {'keep_cache': True},\n"
              "                                           'vm': {'scratch_mib': 64}})\n"
              "with scratch_disk(settings, sys.argv[1]) as scratch:\n"
              "    assert scratch.disk.is_file()\n"
              "    print('held', flush=True); sys.stdin.readline()\n"),
    # held by a build of it, for as long as it writes the layout (image/build.py build)
    "image-build": ("from roteiro_py import locks\n"
                    "from roteiro_py.image.build import lock_path\n"
                    "lock = locks.acquire_within(lock_path(sys.argv[1]), until=time.monotonic() + 30,\n"
                    "                            seconds=30, waiting_for='the test')\n"
                    "print('held', flush=True); sys.stdin.readline()\n"
                    "lock.release()\n"),
    "cargo-view": ("from pathlib import Path\n"
                   "from roteiro_py import lint\n"
                   "from roteiro_py.lint.caches import cargo_in_use\n"
                   "with cargo_in_use(lint.locate(Path(sys.argv[1]))) as cargo:\n"
                   "    assert cargo.registry is not None and cargo.registry.is_dir()\n"
                   "    print('held', flush=True); sys.stdin.readline()\n"),
}


class Holder:
    """A second process holding one cache as a run does; `release()` ends its block."""

    def __init__(self, kind: str, argument: str) -> None:
        self.process = subprocess.Popen(
            [sys.executable, "-c", "import sys, time\n" + HOLDERS[kind], argument],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        assert self.process.stdout is not None
        line = self.process.stdout.readline().strip()
        assert line == "held", f"the {kind} holder did not hold it: {line!r}"

    def release(self) -> None:
        if self.process.returncode is not None:
            return
        assert self.process.stdin is not None and self.process.stdout is not None
        with contextlib.suppress(BrokenPipeError):
            self.process.stdin.write("\n")
            self.process.stdin.close()
        assert self.process.wait(timeout=30) == 0
        self.process.stdout.close()


@pytest.fixture
def holders() -> Iterator[Callable[[str, str], Holder]]:
    made: list[Holder] = []

    def hold(kind: str, argument: str) -> Holder:
        made.append(Holder(kind, argument))
        return made[-1]

    yield hold
    for holder in made:
        if holder.process.returncode is None:
            holder.process.kill()
            holder.process.wait()
            for stream in (holder.process.stdin, holder.process.stdout):
                if stream is not None:
                    stream.close()


def plant_template(root: Path, key: str, memory_mib: int = 1) -> Path:
    """A template `template.load` finds whole (no guest saved it: none boots here)."""
    directory = root / key
    directory.mkdir(parents=True)
    state = b"saved state"
    (directory / template.STATE).write_bytes(state)
    with (directory / template.MEMORY).open("wb") as memory:
        memory.truncate(memory_mib << 20)
    (directory / template.ARCHIVE).write_bytes(b"")
    (directory / template.META).write_text(json.dumps({
        "format": template.FORMAT, "key": key, "steps": [], "archive_bytes": 0,
        "state_sha256": hashlib.sha256(state).hexdigest()}))
    assert template.load(directory, key, memory_mib) is not None
    return directory


def lay_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[dict[str, Path], dict[str, str]]:
    """One cache of each kind, each whole as its module checks it; (paths, the argument
    its holder takes)."""
    cache = paths.cache_root()
    made: dict[str, Path] = {}
    with store.lock(DEPS_KEY, None, 0.0):
        disk = store.staging_disk(DEPS_KEY)
        with disk.open("r+b") as handle:
            handle.truncate(4 << 20)
            handle.write(os.urandom(64 << 10))
        made["deps"] = store.publish(DEPS_KEY, disk)
    made["template"] = plant_template(template.templates_root(), TEMPLATE_KEY)
    made["rootfs"] = cache / "rootfs" / f"{ROOTFS_HEX}.ext4"
    made["rootfs"].parent.mkdir(parents=True)
    made["rootfs"].write_bytes(os.urandom(64 << 10))
    rootfs_record.seal(made["rootfs"])
    made["build"] = cache / "builds" / f"{BUILD_KEY}.ext4"
    made["build"].parent.mkdir(parents=True)
    made["build"].write_bytes(b"an earlier run's kept scratch")

    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "top"\nversion = "0.1.0"\n')
    (tree / "src" / "lib.rs").write_text("")
    checksum = stored(crate_bytes("itoa", "1.0.15"))  # in the package store, as fetch-deps keeps it
    (tree / "Cargo.lock").write_text(
        'version = 4\n[[package]]\nname = "top"\nversion = "0.1.0"\n'
        f'[[package]]\nname = "itoa"\nversion = "1.0.15"\nsource = "{CRATES_IO}"\n'
        f'checksum = "{checksum}"\n')
    registry = vendor.vendored(read_pins(tree / "Cargo.lock"), tree).registry
    assert registry is not None
    view = registry.parent
    made["cargo-view"] = view
    layout = cache / "images" / "clippy-1.95.0"  # what `image build` keeps
    layout.mkdir(parents=True)
    (layout / "index.json").write_text("{}")
    made["image-build"] = layout
    return made, {"deps": DEPS_KEY, "rootfs": ROOTFS_HEX, "template": TEMPLATE_KEY,
                  "build": BUILD_KEY, "cargo-view": str(tree), "image-build": "1.95.0"}


def prune_all() -> subprocess.CompletedProcess[str]:
    result = subprocess.run([str(EXE), "cache", "prune", "--all"], capture_output=True,
                            text=True, timeout=60, env={**os.environ, "COLUMNS": "300"})
    assert result.returncode == 0, result.stderr
    return result


def lock_files() -> set[Path]:
    return {path for path in paths.cache_root().rglob("*.lock")}


@pytest.mark.parametrize("kind", list(cache_report.PRUNABLE))
def test_prune_all_keeps_what_a_run_holds_and_removes_the_rest(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        holders: Callable[[str, str], Holder]) -> None:
    made, arguments = lay_out(tmp_path, monkeypatch)
    assert set(made) == set(cache_report.PRUNABLE) == set(HOLDERS)
    holder = holders(kind, arguments[kind])
    locked = lock_files()
    result = prune_all()
    assert [k for k, path in made.items() if os.path.lexists(path)] == [kind]
    held = [line for line in result.stdout.splitlines() if line.startswith("in use")]
    assert len(held) == 1 and held[0].endswith(str(made[kind])), result.stdout
    assert locked <= lock_files(), "a lock file was removed"
    holder.release()
    # control: let go, the same prune removes it
    after = prune_all()
    assert not os.path.lexists(made[kind]) and "in use" not in after.stdout


@pytest.mark.parametrize("kind", ["deps", "rootfs", "template", "cargo-view"])
def test_two_runs_use_one_cache_at_once(kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                        holders: Callable[[str, str], Holder]) -> None:
    """Checking and using are shared: a second run of the same cache is not held back by the
    first (Holder() returns only once its process holds it; each waits on its stdin)."""
    _, arguments = lay_out(tmp_path, monkeypatch)
    first = holders(kind, arguments[kind])
    started = time.monotonic()
    second = holders(kind, arguments[kind])
    assert time.monotonic() - started < 10
    assert first.process.poll() is None and second.process.poll() is None
    first.release()
    second.release()


def test_a_kept_build_is_one_runs_at_a_time(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            holders: Callable[[str, str], Holder]) -> None:
    """The exception, by design: a kept build is written by its run, so it is held
    exclusive, and a second lint of the same key waits (here: past its deadline)."""
    from roteiro_py import config
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.lint.caches import scratch_disk

    _, arguments = lay_out(tmp_path, monkeypatch)
    holder = holders("build", arguments["build"])
    settings = config.Settings.model_validate({"lint": {"keep_cache": True}, "vm": {"scratch_mib": 64}})
    with pytest.raises(DeadlineExceeded, match="another lint using the same kept cache"), \
            scratch_disk(settings, BUILD_KEY, Deadline(at=time.monotonic() + 0.5, seconds=0.5)):
        pass
    holder.release()
    with scratch_disk(settings, BUILD_KEY, Deadline(at=time.monotonic() + 30, seconds=30)):
        pass  # control


def hold_shared(path: Path) -> subprocess.Popen[str]:
    process = subprocess.Popen(
        [sys.executable, "-c",
         "import sys\nfrom pathlib import Path\nfrom roteiro_py.locks import shared_within\n"
         "with shared_within(Path(sys.argv[1]), until=None, seconds=0, waiting_for='x'):\n"
         "    print('held', flush=True); sys.stdin.readline()\n", str(path)],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert process.stdout is not None and process.stdout.readline().strip() == "held"
    return process


def let_go(process: subprocess.Popen[str]) -> None:
    assert process.stdin is not None and process.stdout is not None
    process.stdin.close()
    assert process.wait(timeout=30) == 0
    process.stdout.close()


def test_a_builder_waits_for_every_user_and_a_waiting_builder_holds_back_no_user(
        tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    user = hold_shared(path)
    with pytest.raises(DeadlineExceeded, match="waiting for the users"):
        locks.acquire_within(path, until=time.monotonic() + 0.3, seconds=0.3,
                             waiting_for="the users")
    with locks.taken_if_free(path) as free:
        assert not free  # a pruner does not wait: it skips
    # a builder waiting meanwhile (another thread: flock is per open file, so it is
    # another holder as a process would be) does not hold back a second user
    built = threading.Event()

    def build() -> None:
        lock = locks.acquire_within(path, until=time.monotonic() + 30, seconds=30,
                                    waiting_for="the users")
        built.set()
        lock.release()

    builder = threading.Thread(target=build)
    builder.start()
    time.sleep(0.2)
    started = time.monotonic()
    second = hold_shared(path)
    assert time.monotonic() - started < 5 and not built.is_set()
    let_go(user)
    time.sleep(0.3)
    assert not built.is_set(), "the builder went ahead while a user still held the cache"
    let_go(second)
    builder.join(timeout=30)
    assert built.is_set()  # control: once every user has gone, it builds
    with locks.taken_if_free(path) as free:
        assert free
    assert path.exists()  # lock files are never removed


def test_a_user_waits_for_a_builder_within_its_deadline(tmp_path: Path) -> None:
    path = tmp_path / "k.lock"
    builder = FileLock(str(path))
    builder.acquire()
    try:
        with pytest.raises(DeadlineExceeded, match="waiting for the builder"), \
                locks.shared_within(path, until=time.monotonic() + 0.3, seconds=0.3,
                                    waiting_for="the builder"):
            pass
    finally:
        builder.release()
    with locks.shared_within(path, until=time.monotonic() + 5, seconds=5, waiting_for="the builder"):
        pass  # control


def test_a_shared_lock_on_a_lock_file_replaced_meanwhile_is_taken_again(tmp_path: Path) -> None:
    """Nothing here removes lock files, but were one unlinked and made again while a user
    waited on the old inode, that user would hold a lock nobody else sees: it locks the
    file now at the path instead."""
    path = tmp_path / "k.lock"
    old = FileLock(str(path))
    old.acquire()
    entered = threading.Event()

    def use() -> None:
        with locks.shared_within(path, until=time.monotonic() + 30, seconds=30, waiting_for="x"):
            entered.set()

    user = threading.Thread(target=use)
    user.start()
    time.sleep(0.2)
    path.unlink()
    new = os.open(path, os.O_RDWR | os.O_CREAT)  # another builder, on the file now at the path
    fcntl.flock(new, fcntl.LOCK_EX)
    old.release()
    time.sleep(0.3)
    assert not entered.is_set(), "the user took a lock on a file no longer at the path"
    os.close(new)
    user.join(timeout=30)
    assert entered.is_set()  # control: free, it gets in


def test_held_shared_builds_once_and_checks_again_under_the_shared_lock(tmp_path: Path) -> None:
    path, entry = tmp_path / "k.lock", tmp_path / "entry"
    calls: list[str] = []

    def check() -> Path | None:
        calls.append("check")
        return entry if entry.exists() else None

    def build() -> None:
        calls.append("build")
        entry.write_text("built")

    with locks.held_shared(path, until=None, seconds=0, waiting_for="x", check=check, build=build,
                           what="thing", where=entry) as found:
        assert found == entry
        with locks.taken_if_free(path) as free:
            assert not free  # held for the block
    assert calls == ["check", "build", "check"]
    with locks.taken_if_free(path) as free:
        assert free


def test_held_shared_gives_up_when_a_prune_undoes_every_build(tmp_path: Path) -> None:
    builds: list[int] = []

    def build() -> None:
        builds.append(1)  # built, and pruned again before the shared lock is back

    with pytest.raises(CacheContended) as refused, \
            locks.held_shared(tmp_path / "k.lock", until=None, seconds=0, waiting_for="x",
                              check=lambda: None, build=build, what="thing", where=tmp_path):
        pass
    assert len(builds) == locks.HOLD_ATTEMPTS
    assert f"removed {locks.HOLD_ATTEMPTS} times" in refused.value.guidance().render_text()


def test_a_template_whose_clone_failed_is_discarded_only_when_no_run_holds_it(
        tmp_path: Path, holders: Callable[[str, str], Holder]) -> None:
    root = template.templates_root()
    plant_template(root, TEMPLATE_KEY)
    holder = holders("template", TEMPLATE_KEY)
    assert not template.discard_if_free(root, TEMPLATE_KEY)
    assert (root / TEMPLATE_KEY).is_dir()
    holder.release()
    assert template.discard_if_free(root, TEMPLATE_KEY)  # control
    assert not (root / TEMPLATE_KEY).exists()


def test_sweeps_skip_what_a_run_holds(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                      holders: Callable[[str, str], Holder]) -> None:
    """The stale-entry sweeps (templates, cargo views) take locks as prune does."""
    root = template.templates_root()
    stale = time.time() - template.STALE_SECONDS - 60
    plant_template(root, TEMPLATE_KEY)
    plant_template(root, "8" * 32)
    for key in (TEMPLATE_KEY, "8" * 32):
        os.utime(root / key, (stale, stale))
    holder = holders("template", TEMPLATE_KEY)
    os.utime(root / TEMPLATE_KEY, (stale, stale))  # its load marked it used
    template.sweep(root, keep="0" * 32)
    assert (root / TEMPLATE_KEY).is_dir() and not (root / ("8" * 32)).exists()
    holder.release()
    template.sweep(root, keep="0" * 32)
    assert not (root / TEMPLATE_KEY).exists()  # control

    made, arguments = lay_out(tmp_path, monkeypatch)
    view = made["cargo-view"]
    holder = holders("cargo-view", arguments["cargo-view"])
    old = time.time() - vendor.VIEW_STALE_SECONDS - 60
    os.utime(view, (old, old))
    vendor._sweep_unused(cargo_views_root(), keep="0" * 32)
    assert view.is_dir()
    holder.release()
    vendor._sweep_unused(cargo_views_root(), keep="0" * 32)
    assert not view.exists()  # control


class VmStopped(Exception):
    """Raised by the stand-in backend where the VM would run: the run ends there."""


def test_a_lint_holds_its_cargo_view_and_root_filesystem_until_its_vm_is_done(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The defect: the view and the root filesystem were locked only while checked, so a
    prune between the check and the VM (or during it) removed them. Here the real lint()
    runs up to its VM, where the stand-in backend (no guest boots in a unit test) runs the
    real `cache prune --all`: what the run uses is in use, the rest goes."""
    from types import SimpleNamespace

    from roteiro_py import lint
    from roteiro_py.vm import BACKENDS
    from roteiro_py.vm.api import Isolation
    from roteiro_py.vm.options import VmOptions

    made, arguments = lay_out(tmp_path, monkeypatch)
    ceiling = BACKENDS["qemu"](VmOptions(rootfs=Path(os.devnull))).ceiling()
    during: list[subprocess.CompletedProcess[str]] = []

    class Backend:
        def __init__(self, options: object) -> None:
            pass

        def isolation(self) -> Isolation:
            return Isolation("qemu", "tcg", False, "TCG")

        def ceiling(self) -> object:
            return ceiling

        def check(self, steps: object, grant: object) -> None:
            pass  # the mount table's own refusals: tests/unit/lint/test_decisions.py

        def run_steps(self, *args: object, **options: object) -> None:
            during.append(prune_all())
            during.append(subprocess.run([str(EXE), "cache", "remove-image", pin],
                                         capture_output=True, text=True, timeout=60))
            raise VmStopped

    pinned = provision(Store.default(), make_image({"f": b"x"}), "localhost/x/clippy")
    pin = str(pinned)
    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Backend})
    monkeypatch.setattr("roteiro_py.store.Store.resolve", lambda self, ref: SimpleNamespace(
        reference=pin, pinned_digest=pinned.digest, manifest_digest="sha256:" + ROOTFS_HEX,
        layers=[], config={}))
    request = lint.LintRequest(path=Path(arguments["cargo-view"]), flags={
        "lint.image": (pin, "--image"), "vm.accel": ("tcg", "--accel"),
        "lint.dep_cache": (False, "--no-dep-cache"), "vm.scratch_mib": (64, "test")})
    with pytest.raises(VmStopped):
        lint.lint(request)
    assert len(during) == 2
    # the image is held too: `cache remove-image` refuses (exit 3) and removes nothing
    assert during[1].returncode == 3 and "in use by a running lint" in during[1].stderr
    assert [ref.name for ref in Store.default().references()] == [pin]
    kept = [k for k, path in made.items() if os.path.lexists(path)]
    assert kept == ["rootfs", "cargo-view"], during[0].stdout
    assert sum(line.startswith("in use") for line in during[0].stdout.splitlines()) == 2
    # control: the run over, the same prune takes them, and the image goes
    prune_all()
    assert not any(os.path.lexists(path) for path in made.values())
    removed = subprocess.run([str(EXE), "cache", "remove-image", pin], capture_output=True,
                             text=True, timeout=60)
    assert removed.returncode == 0, removed.stderr
    assert Store.default().references() == []


@pytest.mark.parametrize("kind", ["deps", "rootfs", "template", "cargo-view"])
def test_each_use_is_recorded_whatever_the_entrys_own_times(
        kind: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
        holders: Callable[[str, str], Holder]) -> None:
    """Issue 23 §4: a use is recorded (eviction.record_use) by the very code a lint uses
    each kind through, so `cache list` and `prune` never read an atime. Every entry's
    record, atime and mtime are set 30 days back first; then one kind is used (its
    production hold in a second process; a dependency cache through `store.lookup`, as
    lint/dep_cache.py finds it): that kind alone shows a recorded use within the minute."""
    made, arguments = lay_out(tmp_path, monkeypatch)
    month = time.time() - 30 * 86400
    for path in made.values():
        os.utime(path, (month, month), follow_symlinks=False)
        record = store.cache_dir() / f"{DEPS_KEY}.used" if path == made["deps"] else used_record(path)
        record_use(record, month)
    before = time.time()
    if kind == "deps":
        assert store.lookup(DEPS_KEY)[0] is not None
    else:
        holders(kind, arguments[kind]).release()
    listing = subprocess.run([str(EXE), "cache", "list", "--format", "json"], capture_output=True,
                             text=True, timeout=60)
    assert listing.returncode == 0, listing.stderr
    recent = {entry["kind"] for entry in json.loads(listing.stdout)["entries"]
              if entry["last_used_recorded"]
              and time.time() - 60 < datetime.fromisoformat(entry["last_used"]).timestamp()}
    assert recent == {kind}, (kind, before, listing.stdout)
