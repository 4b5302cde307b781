"""The run's dependency cache: used when one exists for its key, built first when not,
skipped (and said why) when it cannot help.

Compiling crates.io dependencies dominates a lint under TCG (a `serde` derive crate: 2 min
32 s, almost all of it `syn`, `serde_derive` and friends), and the scratch is discarded
after every run, rightly: a cache the tree's own code wrote could carry its lies into
later lints. So the dependencies are built apart, by a VM of their own that never sees
the tree's code:

- The skeleton (depcache/skeleton.py): the workspace's manifests, lockfile and cargo
  configs, every path package's sources replaced by stubs. Cargo resolves the same unit
  graph from it, and the only code that runs is the pinned dependencies' own.
- The build: the run's probes, then the run's own clippy command in the skeleton (the
  same argv up to its lint levels, its target selection taken out, with --keep-going, and
  the same environment, so the same units with the same hashes), once per SELECTIONS
  (the default targets, then every target: what any selection of targets needs), then
  the stubs' fingerprints and the incremental directories removed (BUILD_CLEANUP) so
  that nothing of the stubs can ever pass for the tree's packages. The scratch disk it
  wrote is the cache, sealed as the guest left it: a sparse file as large as the disk
  (8 GiB holding ~108 MB). No host program parses it, not even to shrink it: its
  filesystem's metadata is what the guest's kernel wrote (vm/disks/scratch.py says why).
  A CI cache keeps its holes by archiving it with GNU tar --sparse (ci/common.sh
  pack_deps), bytes only.
- The key (skeleton.cache_key): the image's manifest digest, the skeleton's digest (so
  every pinned package with its checksum or git revision, the features, profiles and the
  cargo configs), the clippy argv without its target selection, the guest environment
  and the disk's size. A changed lockfile or manifest is a new key; an edited source
  file is not, and neither is another selection of targets.
- Use: the cache file is attached read-only and layered by the guest under the target
  directory, with the run's scratch taking every write (guest_init.sh mount_depcache).
- Trust: the file is sealed once built (rootfs_record: 0444, digest, stat identity) and
  checked on every use; a damaged one is discarded and built again, never trusted. A
  dependency that poisons it poisons only runs whose lockfile pins that same dependency,
  which could lie in them anyway.
Building holds the key's lock: two first lints of one lockfile build it once, the other
waits (within its deadline) and uses it. Using it holds that lock shared, from the check
until the VM is done: lints of one lockfile run side by side, and neither a prune nor a
rebuild of a damaged copy takes the image from under one.

Why the cache is not shrunk on the host, and why its build runs cargo for two target
selections: docs/DESIGN_NOTES.md, section `roteiro_py/lint/dep_cache.py`.
"""

from __future__ import annotations

import contextlib
import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from roteiro_py import paths
from roteiro_py.errors import DeadlineExceeded, Refusal
from roteiro_py.lint.run import ceiling_for, check_grant, grant_for, run_job, steps_for
from roteiro_py.lint.tree import Tree
from roteiro_py.progress import SILENT, Progress

if TYPE_CHECKING:
    from roteiro_py.clippy.parse import Deadline
    from roteiro_py.config import Settings
    from roteiro_py.depcache.skeleton import Skeleton
    from roteiro_py.store import ResolvedImage
    from roteiro_py.vm.api import JobOutcome, VmBackend, VmOutcome

#: Run in the cache's target directory once the dependencies are built: the stubs' own
#: fingerprints and build-script directories go (each path package's name is an
#: argument: `<name>-<hex hash>` exactly, so a registry `<name>-macros` stays), and the
#: tree's packages are therefore always compiled by the lint itself, never taken fresh from
#: a stub compiled at the same relative path; incremental directories hold only path
#: packages' sessions, which rustc renames (an overlay cannot rename a lower directory).
#: No target directory at all (cargo stopped before building anything) says so, as does
#: one holding nothing but `.rustc_info.json`: the pinned build step makes the directory
#: to copy the clippy probe's file into it (clippy/command.py `_PREFILL`) before cargo
#: runs, and cargo itself writes that file only into a directory it has made its layout
#: in, so the directory alone no longer says that cargo built anything.
BUILD_CLEANUP = (
    'set -eu; [ -d "$CARGO_TARGET_DIR" ] || { echo "no target"; exit 0; }; '
    'cd "$CARGO_TARGET_DIR"; made=; for e in * .[!.]* ..?*; do '
    'if { [ -e "$e" ] || [ -L "$e" ]; } && [ "$e" != .rustc_info.json ]; then made=1; fi; done; '
    '[ -n "$made" ] || { echo "no target"; exit 0; }; rm -rf -- */incremental */*/incremental; '
    'for name in "$@"; do '
    'for d in */.fingerprint/"$name"-* */*/.fingerprint/"$name"-* */build/"$name"-* */*/build/"$name"-*; do '
    'hash=${d##*/"$name"-}; case $hash in ""|*[!0-9a-f]*) continue;; esac; rm -rf -- "$d"; '
    'done; done; sync; echo cleaned'
)
#: Added to the lint's own argv for the build: a dependency that fails to build without
#: the tree's code (one using a `[patch]`ed path package) leaves the others built.
BUILD_ARGS = ("--keep-going",)
#: The cleanup step's deadline.
CLEANUP_TIMEOUT_S = 120.0
#: What the build adds to the lint's argv (its target selection taken out), one cargo run
#: each: the targets cargo builds by default, then every target. Under resolver 2 the two
#: compile different units of a dependency whose features a dev-dependency extends
#: (docs/DESIGN_NOTES.md, section `roteiro_py/lint/dep_cache.py`); every other selection
#: (`--lib`, `--tests`, `--bin NAME`, ...) needs units of one of them, so the cache keyed
#: without the selection serves them all. The second run compiles only what differs.
SELECTIONS: tuple[tuple[str, ...], ...] = ((), ("--all-targets",))
#: Said (progress.announce) when a lint builds its dependency cache: a first lint spends
#: minutes in this stage under TCG (284 s measured for a crate with ~40 dependencies), and
#: without a word about why it looked hung. The crates follow as notes (vm/qemu/watch.py).
BUILDING = ("building the dependencies in a VM of their own, once per lockfile (and image, "
            "features and command); later lints reuse them")


@dataclass(frozen=True)
class DepCacheUse:
    """What the run does about its dependencies: `image` is the cache to layer (used or
    built), None when skipped; `reason` says why it was skipped, or why it was rebuilt."""

    state: str
    key: str | None = None
    image: Path | None = None
    reason: str | None = None
    build_seconds: float | None = None

    def for_report(self) -> dict[str, object]:
        return {"state": self.state, "key": self.key, "reason": self.reason,
                "build_seconds": None if self.build_seconds is None else round(self.build_seconds, 1)}


def skipped(reason: str, key: str | None = None) -> DepCacheUse:
    return DepCacheUse("skipped", key=key, reason=reason)


BackendFactory = Callable[[Path], "VmBackend"]


def dependency_cache(*, settings: Settings, tree: Tree, image: ResolvedImage, argv: list[str],
                     env: dict[str, str], registry: Path | None, git: Path | None,
                     backend: BackendFactory, deadline: Deadline,
                     progress: Progress = SILENT) -> DepCacheUse:
    """The run's dependency cache (see the module doc). `backend(disk)` makes the VM
    backend that builds it onto the scratch disk `disk`; `progress` is told, at every
    verbosity, when it is built (BUILDING)."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.clippy.command import build_part, without_target_selection
    from roteiro_py.depcache import skeleton, store

    # Lint levels (after `--`) reach clippy-driver for the tree's packages only, never a
    # dependency's build: neither the key nor the build takes them (a `-D warnings`
    # would fail the stubs).
    # ... nor its target selection: the build covers every one (SELECTIONS)
    argv = without_target_selection(build_part(argv))
    if not settings.lint.dep_cache:
        return skipped("turned off ([lint] dep_cache, --no-dep-cache)")
    if registry is None and git is None:
        return skipped("the lockfile pins no package from a registry or git: nothing to cache")
    with _skeleton_dir() as where:
        try:
            made = skeleton.build_skeleton(tree.workspace, where, skeleton.SkeletonLimits.of(settings.vm),
                                           until=deadline.at, seconds=deadline.seconds)
        except DeadlineExceeded:
            raise  # the run's deadline, not a reason to go on without the cache
        except skeleton.SkeletonUnsafe as unsafe:
            # the tree's config or target paths would bring its own bytes into the build
            return skipped(unsafe.reason)
        except Refusal as refused:
            # a tree the lint itself may still take (a linked manifest it resolves inside
            # the copy); the lint's own staging refuses what it cannot take
            return skipped(f"its skeleton could not be made: {refused.guidance().summary}")
        key = skeleton.cache_key(image_digest=image.manifest_digest, skeleton_digest=made.digest,
                                 argv=argv, env=env, disk_mib=settings.vm.scratch_mib,
                                 recipe=[*BUILD_ARGS, *(" ".join(s) for s in SELECTIONS), BUILD_CLEANUP])
        # The common case takes no lock here: two lints of one lockfile at once both use it
        # (each holding it shared for its VM, `attached`); the build lock waits for them.
        if store.intact(key) is not None:
            store.touch(key)
            return DepCacheUse("used", key=key, image=store.image_path(key))
        with store.lock(key, until=deadline.at, seconds=deadline.seconds):
            found, state = store.lookup(key)
            if found is not None:
                store.touch(key)
                return DepCacheUse("used", key=key, image=found)
            failed = store.failed(key)
            if failed is not None:
                return skipped(f"building it failed before ({failed}); `pylint-sandbox cache "
                               "prune --kind deps --all` lets the next lint try again", key)
            began = time.monotonic()
            progress.announce(BUILDING)
            disk = store.staging_disk(key)
            try:
                verdict = _build(made, disk, settings, argv, env, registry, git, backend, deadline)
                if not verdict.publish:
                    assert verdict.note is not None
                    if verdict.lasting:
                        store.mark_failed(key, verdict.note)
                    return skipped(f"building it failed: {verdict.note}", key)
                try:
                    published = store.publish(key, disk, max_bytes=settings.lint.dep_cache_max_mib << 20)
                except OSError as error:  # a full disk, a directory where the image goes
                    return skipped(f"it could not be kept: {error.strerror or error}", key)
            finally:
                with contextlib.suppress(FileNotFoundError):
                    disk.unlink()
            notes = [n for n in ("the cached copy was damaged" if state == "damaged" else None,
                                 verdict.note) if n]
            return DepCacheUse("built", key=key, image=published, reason="; ".join(notes) or None,
                               build_seconds=time.monotonic() - began)


@contextlib.contextmanager
def attached(use: DepCacheUse, deadline: Deadline) -> Iterator[DepCacheUse]:
    """`use`, held for the run's VM: a used or built cache is held shared
    (store.in_use) so that no prune or size cap takes it before qemu has it open; one
    removed since it was checked (by a prune in between) is skipped, and said so."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.depcache import store

    if use.image is None or use.key is None:
        yield use
        return
    with store.in_use(use.key, until=deadline.at, seconds=deadline.seconds) as image:
        yield use if image is not None else skipped(
            "it was removed (pruned) between its check and this lint's VM", use.key)


def _build(made: Skeleton, disk: Path, settings: Settings, argv: list[str], env: dict[str, str],
           registry: Path | None, git: Path | None, backend: BackendFactory,
           deadline: Deadline) -> Verdict:
    """Build the dependencies onto `disk` (judge_build says whether to publish it)."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.process.sandbox import Command
    from roteiro_py.vm.disks.scratch import create_scratch

    root = made.root
    shaped = Tree(asked=root, workspace=root, repo_root=root)
    steps = steps_for(shaped, settings, env, [*argv, *SELECTIONS[0], *BUILD_ARGS])
    probes = len(steps) - 1
    for selection in SELECTIONS[1:]:
        steps.append(steps_for(shaped, settings, env, [*argv, *selection, *BUILD_ARGS])[-1])
    steps.append(Command(program="/bin/sh", args=("-c", BUILD_CLEANUP, "sh", *made.path_packages),
                         workspace=root, env=env, timeout=CLEANUP_TIMEOUT_S))
    create_scratch(disk, settings.vm.scratch_mib)
    sandbox, grant = backend(disk), grant_for(shaped, registry, git)
    # held to the checker ceiling as the lint's own grant is (process/grants.py)
    check_grant(grant, sandbox, steps, "the dependency cache's build", settings.lint.backend,
                checker=ceiling_for(shaped, registry, git))
    # Every step runs whatever the one before gave: cargo's 101 (--keep-going) left units
    # worth keeping, and the next selection and the cleanup must still run for them to be
    # published (judge_build reads the probes first, so a failed one is never published).
    job = run_job(sandbox, steps, grant, deadline, staging=None, template_steps=probes,
                  stop_on_failure=False)
    return judge_build(job, probes, builds=len(SELECTIONS))


@dataclass(frozen=True)
class Verdict:
    """What a build left: a cache to publish (`publish`), with a `note` when cargo could not
    build every dependency; or why not, and whether that would happen again (`lasting`)."""

    publish: bool
    note: str | None = None
    lasting: bool = False


def judge_build(job: JobOutcome, probes: int, builds: int = 1) -> Verdict:
    """Publish what a build completed: every probe, the `builds` cargo runs (one per
    SELECTIONS) and the cleanup ran to their end. cargo's 101 (with --keep-going) still
    left every unit it could build, each fresh only for the inputs it was built from: a
    dependency that does not build without the tree's code (one that uses a `[patch]`ed
    path package) is built by the lint itself. A usage error (1: an image whose cargo lacks
    --keep-going) would recur, and so would a 101 that built nothing at all (a manifest or
    lockfile cargo refuses in the skeleton); a deadline, a signal or a dead VM may not, and
    the next lint tries again."""
    ran = dict(enumerate(job.steps))
    for index in range(probes):
        step = ran.get(index)
        if step is None or step.exit != 0:
            why = "" if step is None else f" (it exited {step.exit}{_cargo_said(step, '')})"
            return Verdict(False, f"the guest's toolchain probe did not succeed{why}")
    exits: list[int] = []
    said = ""
    for index in range(probes, probes + builds):
        build = ran.get(index)
        if build is None or build.exit is None:
            failure = (build.failure if build is not None else None) or job.failure or "the VM stopped"
            return Verdict(False, f"the build did not finish: {failure}")
        said = said or _cargo_said(build)
        if build.exit not in (0, 101):
            return Verdict(False, f"cargo exited {build.exit}{_cargo_said(build)}",
                           lasting=build.exit == 1)
        exits.append(build.exit)
    worst = max(exits)
    cleanup = ran.get(probes + builds)
    if cleanup is not None and cleanup.exit == 0 and cleanup.stdout == b"no target\n":
        return Verdict(False, f"cargo built nothing from the skeleton (exit {worst}){said}",
                       lasting=worst == 101)
    if cleanup is None or cleanup.exit != 0 or cleanup.stdout != b"cleaned\n" or not job.completed:
        # What failed first is said first: cargo's own error (a 101 that built nothing,
        # under a path the guest could not reach, once read as a cleanup problem).
        cargo = f"cargo exited {worst}{said}; " if worst else ""
        why = (f" (it exited {cleanup.exit}{_cargo_said(cleanup, '')})" if cleanup is not None
               and cleanup.exit not in (0, None) else "")
        return Verdict(False, f"{cargo}removing the stubs' build from it did not finish{why}")
    if worst == 101:
        return Verdict(True, "cargo could not build every dependency without the tree's own "
                       "code; the lint builds those itself")
    return Verdict(True)


#: At most this many characters of a step's own error line are quoted in a reason.
SAID_CHARS = 200


def _cargo_said(step: VmOutcome, marker: str = "error") -> str:
    """`: <line>`, the first line of the step's stderr that begins with `marker` (cargo's
    own `error: ...`; its diagnostics of the code are JSON on stdout), cut to SAID_CHARS;
    "" when there is none. The report sanitises it with every other field."""
    for line in step.stderr.decode("utf-8", "replace").splitlines():
        line = line.strip()
        if line and line.startswith(marker):
            return ": " + (line if len(line) <= SAID_CHARS else line[:SAID_CHARS - 1] + "…")
    return ""


@contextlib.contextmanager
def _skeleton_dir() -> Iterator[Path]:
    """A fresh directory for this run's skeleton, removed after (it is the host's copy;
    the guest sees it as a read-only image)."""
    # lazy: the conductor imports this stage before the first refusals (bench/cli_startup.py)
    from roteiro_py.vm.disks.share_image import STALE_SECONDS

    root = paths.cache_root() / "skeletons"
    root.mkdir(parents=True, exist_ok=True)
    cutoff = time.time() - STALE_SECONDS
    for leftover in root.glob("ws-*"):  # left by a run killed without unwinding
        with contextlib.suppress(OSError):
            if leftover.lstat().st_mtime < cutoff and not leftover.is_symlink():
                shutil.rmtree(leftover, ignore_errors=True)
    made = Path(tempfile.mkdtemp(prefix="ws-", dir=root))
    try:
        yield made
    finally:
        shutil.rmtree(made, ignore_errors=True)
