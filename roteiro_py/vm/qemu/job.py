"""The per-run job archive: the guest init plus what it should mount and run, as shell.

Guarantees: every value that came from the caller (paths, arguments, environment values)
reaches the guest init only as a single-quoted POSIX shell word (`shlex.quote`), so no
value can become shell syntax; names that cannot be environment variable names, and NUL
bytes (which no argv or environment entry can hold), are rejected with ValueError.
Scripts are encoded as the filesystem encodes names (UTF-8, surrogateescape): a host
path that is not UTF-8 (Python holds its bytes as lone surrogates) reaches the guest as
the same bytes, never a UnicodeEncodeError (exit 4). A string that has no
bytes at all (a lone surrogate outside the escape range) is a ValueError too.

The archive is appended to the base initramfs, unpacked by the kernel into the guest's
initial root, and read there by init as root; /job is 0700 and init removes each file
once read, and the command never sees the initial root at all (it runs chrooted into
the assembled root, without the capability to leave it).
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Collection, Sequence
from importlib import resources

from roteiro_py.process.sandbox import Command
from roteiro_py.vm.assets.initramfs import Entry, write_newc
from roteiro_py.vm.mounts import GUEST_CARGO_HOME, GUEST_GID, GUEST_TREES, GUEST_UID, MountTable

#: Where the guest init assembles the command's root (read-only image + tmpfs overlay).
NEWROOT = "/newroot"
#: virtio-blk serial numbers the guest init finds its disks by.
ROOT_SERIAL = "rootfs"
SCRATCH_SERIAL = "scratch"
#: The dependency cache's disk (roteiro_py/depcache/): read-only, layered under the
#: target directory on the scratch by an overlay the guest init assembles.
DEPS_SERIAL = "depcache"
#: Per-run disks whose slot in a VM template is the disk's own size, never padded: the
#: scratch, and the dependency cache (a sealed file: padding it would be a write).
SIZED_SERIALS = (SCRATCH_SERIAL, DEPS_SERIAL)
#: At most this many steps per boot: each takes two virtio-serial ports (stdout, stderr),
#: the status port takes one, and a virtio-serial device has 31.
MAX_STEPS = 15

#: The 9p cache mode for shares that travel over 9p (see machine.py for the measurement).
NINEP_CACHE = "loose"

_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def guest_init() -> bytes:
    return resources.files("roteiro_py.vm.qemu").joinpath("guest_init.sh").read_bytes()


def share_tag(index: int) -> str:
    """The 9p mount tag of share `index` (when it travels over 9p)."""
    return f"share{index}"


def share_serial(index: int) -> str:
    """The virtio-blk serial of share `index` (when it travels as an image)."""
    return f"share{index}"


def _q(value: str) -> str:
    if "\0" in value:
        raise ValueError(f"{value!r} contains a NUL byte, which no argv or environment holds")
    _encode(value)
    return shlex.quote(value)


def _encode(text: str) -> bytes:
    try:
        return text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:
        raise ValueError(f"{text!r} holds a character no file name or argv can hold") from None


def mounts_script(table: MountTable, images: Collection[int] = (),
                  dep_cache: str | None = None) -> str:
    """Calls to the guest init's mount functions, parents before children.

    `images`: indexes of the shares that travel as read-only ext4 images (virtio-blk
    serial `share_serial(i)`); the others are 9p (mount tag `share_tag(i)`), mounted
    with NINEP_CACHE. `dep_cache`: the guest directory under the scratch where the
    dependency cache's disk (DEPS_SERIAL) is layered, read-only, under the scratch's
    writes; it is mounted last, once the scratch is.
    """
    if dep_cache is not None and table.scratch_mode != "rw":
        raise ValueError("a dependency cache is layered under a writable scratch disk only")
    calls: list[tuple[int, str, str]] = []
    if table.cargo_home:
        calls.append((1, GUEST_CARGO_HOME, f"mount_tmpfs_owned {_q(GUEST_CARGO_HOME)}"))
    if table.trees:
        calls.append((1, GUEST_TREES, f"mount_trees {_q(GUEST_TREES)}"))
    for index, share in enumerate(table.shares):
        where = share.mount_point
        depth = where.rstrip("/").count("/")
        call = (f"mount_image {share_serial(index)} {_q(where)}" if index in images
                else f"mount_share {share_tag(index)} {_q(where)} {NINEP_CACHE}")
        calls.append((depth, where, call))
    if table.scratch is not None:
        depth = table.scratch.rstrip("/").count("/")
        calls.append((depth, table.scratch,
                      f"mount_scratch {SCRATCH_SERIAL} {_q(table.scratch)} "
                      f"{table.scratch_mode or 'ro'}"))
    lines = [f"mount_root {ROOT_SERIAL}"] + [c for _, _, c in sorted(calls)]
    if dep_cache is not None:
        lines.append(f"mount_depcache {DEPS_SERIAL} {_q(dep_cache)}")
    return "\n".join(lines) + "\n"


def step_script(command: Command, table: MountTable | None = None) -> str:
    """`set --` the guest init runs as `env -i "$@"`: the environment, then the command
    dropped to GUEST_UID with no_new_privs, chrooted into NEWROOT, in its workspace.
    A tree's host path in the working directory, an argument or an environment value is
    given as the guest mounts it (`MountTable.guest_word`)."""
    place = table.guest_word if table is not None else str
    words: list[str] = []
    for name, value in sorted(command.env.items()):
        if not _ENV_NAME.match(name):
            raise ValueError(f"{name!r} is not an environment variable name")
        words.append(_q(f"{name}={place(value)}"))
    cwd = place(str(command.workspace))
    words += ["/bin/busybox", "setpriv", "--nnp", "/bin/busybox", "nsenter", "-F",
              f"-r{NEWROOT}", _q(f"-w{NEWROOT}{cwd}"), "-S", str(GUEST_UID), "-G",
              str(GUEST_GID), "--"]
    words += [_q(place(arg)) for arg in command.argv]
    timeout = max(1, int(-(-command.timeout // 1)))
    return f"STEP_TIMEOUT={timeout}\nSTEP_CWD={_q(cwd)}\nset -- {' '.join(words)}\n"


def job_archive(table: MountTable, steps: Sequence[Command], *, stop_on_failure: bool,
                images: Collection[int] = (), clock: int | None = None,
                dep_cache: str | None = None) -> bytes:
    """`clock`: epoch seconds the guest's clock is set to before anything is mounted
    (CLOCK; vm/stamps.py says why), or None to keep the clock the guest booted with."""
    if not 1 <= len(steps) <= MAX_STEPS:
        raise ValueError(f"a job has 1 to {MAX_STEPS} steps, not {len(steps)}")
    config = (f"RUN_UID={GUEST_UID}\nRUN_GID={GUEST_GID}\nNSTEPS={len(steps)}\n"
              f"STOP_ON_FAILURE={1 if stop_on_failure else 0}\n"
              + ("" if clock is None else f"CLOCK={int(clock)}\n"))
    entries = [
        Entry.file("init", guest_init(), 0o755),
        Entry.directory("job", 0o700),
        Entry.file("job/config", config.encode(), 0o600),
        Entry.file("job/mounts", _encode(mounts_script(table, images, dep_cache)), 0o600),
    ]
    for index, step in enumerate(steps):
        entries.append(Entry.file(f"job/step{index}", _encode(step_script(step, table)), 0o600))
    return write_newc(entries)


def template_archive(steps: Sequence[Command], reseed: bytes) -> bytes:
    """A template's job (template.py): assemble the root, run `steps` (the probes: they
    touch no per-run share), then wait on the job port. `reseed` is the program init runs
    to make the host's entropy live in each clone."""
    if not 1 <= len(steps) < MAX_STEPS:
        raise ValueError(f"a template has 1 to {MAX_STEPS - 1} steps, not {len(steps)}")
    config = (f"RUN_UID={GUEST_UID}\nRUN_GID={GUEST_GID}\nNSTEPS={len(steps)}\n"
              f"STOP_ON_FAILURE=1\nROOT_SERIAL={ROOT_SERIAL}\n")
    entries = [
        Entry.file("init", guest_init(), 0o755),
        Entry.file("bin/roteiro-reseed", reseed, 0o700),
        Entry.directory("job", 0o700),
        Entry.file("job/template", b"", 0o600),
        Entry.file("job/config", config.encode(), 0o600),
        Entry.file("job/mounts", f"mount_root {ROOT_SERIAL}\n".encode(), 0o600),
    ]
    for index, step in enumerate(steps):
        entries.append(Entry.file(f"job/step{index}", _encode(step_script(step)), 0o600))
    return write_newc(entries)


def clone_archive(table: MountTable, steps: Sequence[Command], first: int, *,
                  stop_on_failure: bool, images: Collection[int] = (), clock: int,
                  seed: bytes, dep_cache: str | None = None) -> bytes:
    """What a clone of a template is sent on its job port: the config (with the host's
    CLOCK, epoch seconds, and the index of the FIRST step to run), the RNG seed, the
    mounts but the root (the template assembled it), and the steps from `first` on."""
    if not 1 <= first < len(steps) <= MAX_STEPS:
        raise ValueError(f"a clone runs steps {first} to {len(steps) - 1} of at most {MAX_STEPS}")
    config = (f"RUN_UID={GUEST_UID}\nRUN_GID={GUEST_GID}\nNSTEPS={len(steps)}\nFIRST={first}\n"
              f"STOP_ON_FAILURE={1 if stop_on_failure else 0}\nCLOCK={int(clock)}\n")
    mounts = mounts_script(table, images, dep_cache).split("\n", 1)[1]  # the first line mounts the root
    entries = [
        Entry.directory("job", 0o700),
        Entry.file("job/config", config.encode(), 0o600),
        Entry.file("job/seed", seed, 0o600),
        Entry.file("job/mounts", _encode(mounts), 0o600),
    ]
    for index in range(first, len(steps)):
        entries.append(Entry.file(f"job/step{index}", _encode(step_script(steps[index], table)), 0o600))
    return write_newc(entries)


def canary_archive() -> bytes:
    """The probe's job: init prints a marker on the serial console and powers off."""
    return write_newc([
        Entry.file("init", guest_init(), 0o755),
        Entry.directory("job", 0o700),
        Entry.file("job/canary", b"", 0o600),
    ])
