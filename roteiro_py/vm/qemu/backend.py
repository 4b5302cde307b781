"""The qemu backend: a Sandbox that runs each job in a fresh QEMU microvm.

Order of a run, and why: the grant is turned into a mount table (refusing what cannot
be enforced) before anything else, so a refusal costs nothing; then the assets are
verified and the accelerator is resolved (probe, cached); then the images of the shares
that travel as images are built (`share_transport`); only then does qemu start.

Acceleration (`accel`): "auto" uses KVM when its probe passes and
otherwise refuses with errors.SandboxUnavailable, saying whether TCG would work; TCG is
used only when asked for by name, because QEMU does not treat TCG as a security
boundary. The `Isolation` of every outcome says which one ran.

Exit statuses are those the guest's init reported on its status port (the command
cannot reach that port): the shell's `$?`, so a command killed by signal N is 128+N; a
step killed at its own deadline has `exit=None, timed_out=True`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from pathlib import Path, PurePosixPath

from roteiro_py import errors, paths
from roteiro_py.process.grants import GrantSet
from roteiro_py.process.sandbox import Command, Outcome
from roteiro_py.progress import BOOT, RESTORE, WORKTREE
from roteiro_py.vm.api import Isolation, JobOutcome, StagedShare, VmOutcome
from roteiro_py.vm.assets.assets import Assets, load_assets
from roteiro_py.vm.disks import share_image
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_SCRATCH, MountTable, Share, derive_mounts
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu import job, probe, template
from roteiro_py.vm.qemu.machine import QEMU, Disk, MachineResult, MachineSpec, boot
from roteiro_py.vm.qemu.status import StepRecord, read_status
from roteiro_py.vm.qemu.watch import JobWatch
from roteiro_py.vm.stamps import StampBook

#: Seconds a run may take beyond its steps' own timeouts: booting (~2-5 s under TCG on a
#: loaded 2-core host) and powering off.
BOOT_ALLOWANCE = 60.0


def isolation_for(accel: str) -> Isolation:
    if accel == "tcg":
        return Isolation("qemu", "tcg", False, "QEMU microvm under TCG software emulation — "
                         "not a hardware security boundary")
    name = {"kvm": "KVM"}.get(accel, accel)
    return Isolation("qemu", accel, True, f"QEMU microvm under {name} hardware virtualization")


def share_transport(share: Share) -> str:
    """How a read-only share reaches the guest: "image" (a read-only ext4 image built for
    this run by share_image.tree_image) or "9p" (virtio-9p, readonly=on).

    The worktree and any other tree is an image: reading it was 4-17x faster than 9p
    (median ~5.6x), for a build cost of ~0.1-0.6 s per 1,000 files (machine.py). The
    cargo cache (anything under GUEST_CARGO_HOME) stays 9p: a lint shares a view holding
    only what its lockfile pins (roteiro_py/cargo/vendor.py), cached across runs as a
    directory, which an image would copy again on every run (see machine.py).
    """
    guest = PurePosixPath(share.guest)
    cargo = PurePosixPath(GUEST_CARGO_HOME)
    return "9p" if guest == cargo or cargo in guest.parents else "image"


class QemuBackend:
    name = "qemu"

    def __init__(self, options: VmOptions, *, qemu: str = QEMU) -> None:
        """A backend building each run's VM from `options` (vm/options.py); `qemu` is
        the hypervisor's program (tests put a fake one in its place)."""
        self.options = options
        self.qemu = qemu
        self._assets: Assets | None = None
        self._resolved: str | None = None

    # -- preflight ------------------------------------------------------------------

    def assets(self) -> Assets:
        if self._assets is None:
            self._assets = load_assets(self.options.kernel, self.options.initrd)
        return self._assets

    def isolation(self) -> Isolation:
        if self._resolved is None:
            self._resolved = self._resolve_accel()
        return isolation_for(self._resolved)

    def _resolve_accel(self) -> str:
        assets = self.assets()
        if self.options.accel == "tcg":
            verdict = probe.probe("tcg", assets, qemu=self.qemu)
            if not verdict.usable:
                raise errors.SandboxUnavailable(verdict.reason, accel="tcg",
                                                findings=(f"tcg: {verdict.reason}",))
            return "tcg"
        # auto means the host's own hardware accelerator: KVM (the host is Linux x86_64).
        wanted = ("kvm",) if self.options.accel == "auto" else (self.options.accel,)
        findings = []
        for accel in wanted:
            verdict = probe.probe(accel, assets, qemu=self.qemu)
            if verdict.usable:
                return accel
            findings.append(f"{accel}: {verdict.reason}")
        tcg = probe.probe("tcg", assets, qemu=self.qemu)
        raise errors.SandboxUnavailable(
            "no hardware acceleration that boots a guest", accel=self.options.accel,
            findings=tuple(findings), tcg_possible=tcg.usable)

    def ceiling(self) -> GrantSet:
        """The most this backend can confine a command to, as grant atoms.

        Read and list any host directory tree (a read-only share: mounts.py, which still
        refuses the particular trees it never shares, such as the cargo home's root); write
        only on the scratch disk (the one writable place; a run without a scratch disk
        refuses a write grant); run any program, since everything runs inside the VM.
        Never the network (there is no network device), a secret or an ambient variable
        (the guest's environment is set, never inherited).
        """
        return GrantSet.of("fs:read:/**", "fs:list:/**", f"fs:write:{GUEST_SCRATCH}/**",
                           "proc:exec:*")

    def mounts(self, steps: Sequence[Command], grant: GrantSet) -> MountTable:
        return _table(steps, grant, GUEST_SCRATCH if self.options.scratch else None)

    def check(self, steps: Sequence[Command], grant: GrantSet) -> None:
        """errors.Unenforceable exactly where `run_steps` would refuse `grant` (the mount
        table, mounts.py), asking only the host's paths, as if the run's scratch disk were
        attached: a backend built for the preflight has none yet. The ceiling cannot say
        which trees are never shared (the cargo home's root, a workspace holding the cargo
        home, one that is or holds a directory the VM provides): without this, those were
        refused only after the root filesystem and the dependency cache were built.
        Then the refusals of each tree's copy (errors.TreeTooLarge, errors.TreeIncomplete),
        by a walk that copies nothing (share_image.check_tree), for the same reason."""
        table = _table(steps, grant, GUEST_SCRATCH)
        for share in table.shares:
            if share_transport(share) == "image":
                share_image.check_tree(share.host, self.options.stage)

    # -- running --------------------------------------------------------------------

    def run(self, command: Command, grant: GrantSet) -> Outcome:
        outcome = self.run_steps([command], grant, stop_on_failure=True)
        if outcome.steps:
            return outcome.steps[0]
        now = datetime.now(UTC)
        return VmOutcome(command=command, exit=None, stdout=b"", stderr=b"",
                         timed_out="deadline" in (outcome.failure or ""), truncated=False,
                         duration=0.0, started=now, ended=now,
                         failure=outcome.failure or "the command never started",
                         isolation=outcome.isolation)

    def run_steps(self, steps: Sequence[Command], grant: GrantSet, *,
                  stop_on_failure: bool = True, deadline: float | None = None,
                  staging: Path | None = None, clock: int | None = None,
                  stamps: StampBook | None = None, template_steps: int = 0) -> JobOutcome:
        """Boot once and run `steps` in order; each gets its own exit, stdout and stderr.

        `deadline` (seconds from now) bounds the whole call, the copies and images of the
        shares included (default: the steps' timeouts plus BOOT_ALLOWANCE); past it qemu's
        process group is killed and what arrived is kept, or, if it passes before the
        boot, errors.DeadlineExceeded. `staging`, `clock`, `stamps`: see
        `VmBackend.run_steps`.
        `template_steps`: with `options.template`, the run is a clone of the template that
        ran the first that many steps (template.py), unless a share image does not fit
        its slot or a template step failed: then it boots cold, with the same isolation.
        """
        started = time.monotonic()
        steps = list(steps)
        table = self.mounts(steps, grant)
        images = {i for i, share in enumerate(table.shares) if share_transport(share) == "image"}
        stamps = stamps if stamps is not None else StampBook.fresh()
        clock = stamps.clock if clock is None else clock
        archive = job.job_archive(table, steps, stop_on_failure=stop_on_failure, images=images,
                                  clock=clock, dep_cache=self.options.dep_cache_guest)
        assets = self.assets()
        isolation = self.isolation()
        if not self.options.rootfs.is_file():
            raise errors.VmAssetsMissing("root filesystem image", self.options.rootfs)
        disks = [Disk(job.ROOT_SERIAL, self.options.rootfs, readonly=True)]
        if table.scratch is not None:
            assert self.options.scratch is not None
            if not self.options.scratch.is_file():
                raise errors.ScratchUnavailable(self.options.scratch, "the scratch image does "
                                                "not exist (create it with create_scratch)")
            disks.append(Disk(job.SCRATCH_SERIAL, self.options.scratch,
                              readonly=table.scratch_mode != "rw"))
        if self.options.dep_cache is not None:
            if not self.options.dep_cache.is_file():
                raise errors.VmAssetsMissing("dependency cache image", self.options.dep_cache)
            disks.append(Disk(job.DEPS_SERIAL, self.options.dep_cache, readonly=True))
        ports = tuple(f"{kind}{i}" for i in range(len(steps)) for kind in ("stdout", "stderr"))
        limit = deadline or sum(s.timeout for s in steps) + BOOT_ALLOWANCE
        until = started + limit
        limits = dataclasses.replace(self.options.stage, deadline=until, deadline_s=limit)
        staged: list[StagedShare] = []
        with contextlib.ExitStack() as built:
            if images:
                self.options.progress.stage(WORKTREE)
            for index in sorted(images):
                host = table.shares[index].host
                keep = staging / job.share_serial(index) if staging is not None else None
                image, report = built.enter_context(share_image.tree_image(
                    host, limits=limits, keep=keep, stamps=stamps.share(str(host))))
                disks.append(Disk(job.share_serial(index), image, readonly=True))
                staged.append(StagedShare(host, keep, tuple(report.left_out())))
            if time.monotonic() >= until:
                raise errors.DeadlineExceeded("copying the shares for the VM", limit,
                                              stopped="the VM was not started")
            spec = MachineSpec(
                assets=assets, accel=isolation.accelerator,
                cpu=probe.CPU[isolation.accelerator], cpus=self.options.cpus,
                memory_mib=self.options.memory_mib, disks=tuple(disks),
                shares=tuple((job.share_tag(i), s.host) for i, s in enumerate(table.shares)
                             if i not in images),
                ports=ports, job=archive, qemu=self.qemu)
            if self.options.template and 0 < template_steps < len(steps) and template.fits(spec):
                cloned = self._from_template(spec, steps, template_steps, table, images,
                                             stop_on_failure, until, limit, isolation, clock)
                if cloned is not None:
                    return dataclasses.replace(cloned, staged=tuple(staged))
            self.options.progress.stage(BOOT)
            # cargo's is the first step after the probes a template may run (a dependency
            # cache's build has more after it: lint/dep_cache.py); without probes, the last
            cargo = template_steps if 0 < template_steps < len(steps) else None
            result = boot(spec, deadline=until - time.monotonic(),
                          output_limit=self.options.output_limit,
                          watch=JobWatch(self.options.progress, len(steps), cargo).feed)
        return dataclasses.replace(_outcome(steps, result, isolation, table), staged=tuple(staged))

    def _from_template(self, spec: MachineSpec, steps: list[Command], first: int,
                       table: MountTable, images: set[int], stop_on_failure: bool,
                       until: float, limit: float, isolation: Isolation,
                       clock: int) -> JobOutcome | None:
        """The run as a clone of the template for this machine and these first steps; None
        when no template can serve it (a template step failed: the cold boot reports that
        as it always did). The template is held shared from its check until the clone is
        done (template.in_use). A template that fails to restore is rebuilt once, when no
        other run holds it (else this run boots cold); a second failure is the run's."""
        key = template.template_key(spec, steps[:first], self.options.rootfs_identity)
        archive = job.template_archive(steps[:first], template.reseed_program())
        for disk in spec.disks:  # share images, padded (sparse) to their slot's size
            if disk.serial not in (job.ROOT_SERIAL, *job.SIZED_SERIALS):
                os.truncate(disk.path, template.IMAGE_SLOT_BYTES)
        failure = ""
        result: MachineResult | None = None
        root = self.options.template_root or template.templates_root()
        for _attempt in range(2):
            try:
                # held (shared) until the clone is done: no prune or sweep removes it meanwhile
                with template.in_use(spec, steps[:first], key, archive, until=until,
                                     deadline_s=limit, root=root,
                                     building=lambda: self.options.progress.stage(BOOT)) as found:
                    self.options.progress.stage(RESTORE)
                    clone = job.clone_archive(table, steps, first, stop_on_failure=stop_on_failure,
                                              images=images, clock=clock, seed=template.seed(),
                                              dep_cache=self.options.dep_cache_guest)
                    restored = template.restore(found, spec, clone, until=until,
                                                output_limit=self.options.output_limit,
                                                watch=JobWatch(self.options.progress, len(steps), first).feed)
                    result = restored.result
                    if any(line == "ready" for _, line in result.status) or result.timed_out:
                        outcome = _outcome(steps, result, isolation, table, cached=found.steps)
                        return dataclasses.replace(outcome, template=key,
                                                   template_built_seconds=found.built_seconds)
                    failure = result.control_failure or result.failure or "the clone never got ready"
            except template.TemplateUnusable:
                return None
            if not template.discard_if_free(root, key):
                # Other runs are restoring from it right now: it is theirs to keep, and
                # this run boots cold (the same isolation, only slower).
                return None
        assert result is not None
        return JobOutcome(steps=(), isolation=isolation, completed=False, boot_seconds=None,
                          failure=f"the VM template {key} failed to restore twice: {failure}",
                          console=result.console)


#: The mount table of a job that shares nothing: its output needs no mapping.
NO_SHARES = MountTable((), None, None, False)


def _table(steps: Sequence[Command], grant: GrantSet, scratch: str | None) -> MountTable:
    tables = {derive_mounts(grant, step, scratch=scratch, host_cargo_home=paths.cargo_home())
              for step in steps}
    assert len(tables) == 1  # the table depends on the grant, not the step
    return tables.pop()


def _outcome(steps: list[Command], result: MachineResult, isolation: Isolation,
             table: MountTable = NO_SHARES, cached: Sequence[StepRecord] = ()) -> JobOutcome:
    """The job's outcome, every tree named by its host path in what the guest said
    (`MountTable.host_bytes`: the guest mounts trees under GUEST_TREES, mounts.py)."""
    said = read_status(result)
    starts, exits, ooms = said.starts, said.exits, said.ooms
    error = None if said.error is None else table.host_text(said.error)
    outcomes = []
    now = datetime.now(UTC)
    for index, record in enumerate(cached):
        outcomes.append(VmOutcome(
            command=steps[index], exit=record.exit, stdout=record.stdout, stderr=record.stderr,
            timed_out=record.timed_out, truncated=record.truncated, duration=record.duration,
            started=now, ended=now, failure=None, isolation=isolation))
    for index, command in enumerate(steps):
        if index < len(cached):
            continue
        if index not in starts:
            break
        began = starts[index]
        stdout = table.host_bytes(result.channels.get(f"stdout{index}", b""))
        stderr = table.host_bytes(result.channels.get(f"stderr{index}", b""))
        cut = tuple(kind for kind in ("stdout", "stderr") if f"{kind}{index}" in result.truncated)
        lost = tuple((kind, result.cut[f"{kind}{index}"]) for kind in ("stdout", "stderr")
                     if f"{kind}{index}" in result.cut)
        if index in exits:
            at, status, timed_out = exits[index]
            code: int | None = None if timed_out else status
            failure = f"killed at the step's deadline of {command.timeout:g} s" \
                if timed_out else None
        else:
            at, code, timed_out = result.duration, None, result.timed_out
            failure = result.failure or "the VM ended before the step finished"
        if lost and failure is None:
            failure = f"its {lost[0][0]} did not arrive whole: {lost[0][1]}"
        outcomes.append(VmOutcome(
            command=command, exit=code, stdout=stdout, stderr=stderr, timed_out=timed_out,
            truncated=bool(cut), truncated_streams=cut, oom_kills=ooms.get(index, 0),
            lost_streams=lost,
            duration=round(at - began, 3),
            started=datetime.fromtimestamp(result.started_wall + began, UTC),
            ended=datetime.fromtimestamp(result.started_wall + at, UTC),
            failure=failure, isolation=isolation))
    failure = None if said.done else (error or result.failure or
                                      "the guest powered off without finishing the job")
    return JobOutcome(steps=tuple(outcomes), isolation=isolation, completed=said.done,
                      boot_seconds=said.ready, failure=failure, console=result.console,
                      guest_clock=said.clock)
