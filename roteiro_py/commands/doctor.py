"""`pylint-sandbox doctor`: whether this host can lint, what it has, and what to do about gaps.

Every line is a check with a verdict and, when something is missing, the command or the
setting that fixes it. The hypervisor lines come from the same canary probe a lint uses
(and its cached verdicts), not from opening /dev/kvm: on the machines this was built on,
/dev/kvm opens and KVM still cannot run a guest.

The first check is the platform (platform_support.py): on a host a lint cannot run on
(anything but Linux x86_64) it fails, naming the platform, and nothing else is probed
but the configuration: no qemu is started, no accelerator is tried.

A check is `required` when a lint cannot run on this host without it: qemu, mkfs.ext4
(and e2fsck, resize2fs) and setpriv, the VM assets, a sandbox for the configured
accelerator (decided by the VM backend's own `isolation()`, exactly as a lint decides it:
`auto` is never TCG), an image configured and pinned for PATH, and that image
provisioned. `doctor` exits 0 when every required check passes and EXIT_REFUSED (3) when
any fails, so a CI job can gate on it before it lints;
the other checks (each accelerator's own probe, the store's listing, the package cache,
which `fetch-deps` fills per tree) inform and never change the exit status. A
configuration that cannot be read is reported as a failed check, not raised, so the rest
is still shown. `--format json` prints the same checks in a stable schema
(SCHEMA_VERSION, `json_report`). A PATH that does not exist is a usage error (2), as
for `lint clippy`, and nothing is checked.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py import config, paths
from roteiro_py.errors import (
    EXIT_OK,
    EXIT_REFUSED,
    ConfigError,
    ImageNotProvisioned,
    NoImageConfigured,
    PathNotFound,
    RoteiroError,
    SandboxUnavailable,
    config_set_image_command,
    prefetch_command,
)
from roteiro_py.guidance import counted, printable
from roteiro_py.platform_support import PLATFORMS_DOC, SUPPORTED, host, refusal
from roteiro_py.reference import parse
from roteiro_py.untrusted import guard

if TYPE_CHECKING:
    from roteiro_py.reference import ImageReference

#: `doctor --format json`'s schema: bumped on any incompatible change. Version 1:
#: {"schema_version": 1, "can_lint": bool, "path": str,
#:  "checks": [{"name": str, "ok": bool | null, "required": bool, "detail": str,
#:              "fix": str | null}]}; `ok` null is informational.
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool | None  # None: informational
    detail: str
    fix: str | None = None
    #: A lint cannot run on this host while this check fails (see the module doc).
    required: bool = False


def can_lint(results: list[Check]) -> bool:
    """True when no required check failed."""
    return all(check.ok is not False for check in results if check.required)


#: Command-line values, as `config.resolve` takes them: {"vm.accel": (value, "--accel")}.
Flags = dict[str, tuple[Any, str]]


def _configuration(path: Path, flags: Flags | None = None) -> tuple[config.Resolved | None, Check]:
    try:
        resolved = config.resolve(path, flags=flags)
    except ConfigError as error:
        return None, Check("configuration", False, error.guidance().summary,
                           "fix the value it names (`pylint-sandbox config show` lists them all)",
                           required=True)
    repo = resolved.repo_config
    return resolved, Check("configuration", True,
                           f"for {path.resolve()}: {resolved.user_config}"
                           + (f" and {repo}" if repo else " (no roteiro.toml found)"), required=True)


def _sandbox(resolved: config.Resolved | None) -> Check:
    """The accelerator a lint of this configuration would run under, decided by the VM
    backend exactly as a lint decides it (SandboxUnavailable, VmAssetsMissing)."""
    # lazy: pydantic (config_model) and the VM options load only when the sandbox is
    # checked; the registry is looked up when called, as the conductor does: tests
    # replace it (tests/unit/commands/test_doctor.py)
    from roteiro_py.config import VmSettings
    from roteiro_py.vm import BACKENDS
    from roteiro_py.vm.options import VmOptions

    vm, source, backend = VmSettings(), "default", "qemu"
    if resolved is not None:
        vm, backend = resolved.settings.vm, resolved.settings.lint.backend
        source = str(resolved.source_of("vm.accel"))
    accel = vm.accel
    try:
        isolation = BACKENDS[backend](VmOptions.of(vm, rootfs=Path(os.devnull))).isolation()
    except SandboxUnavailable as refused:
        if refused.tcg_possible:
            return Check("sandbox", False, f"vm.accel = {accel} ({source}): {refused.guidance().summary} "
                         "TCG works here, but it is software emulation, not a security boundary: "
                         "used only when you opt in", "pylint-sandbox config set vm.accel tcg",
                         required=True)
        return Check("sandbox", False, f"vm.accel = {accel} ({source}): {refused.guidance().summary}",
                     "a host where hardware virtualization runs guests (see the accel lines above)",
                     required=True)
    except RoteiroError as error:
        return Check("sandbox", False, f"vm.accel = {accel} ({source}): not probed: "
                     f"{error.guidance().summary}", required=True)
    return Check("sandbox", True, f"vm.accel = {accel} ({source}): {isolation.description}",
                 required=True)


def _image(resolved: config.Resolved | None, path: Path) -> tuple[ImageReference | None, list[Check]]:
    """The image a lint of PATH would use: configured and pinned (the preflight's own
    refusals), then present in the store (the lookup every lint makes)."""
    # lazy: on a host no lint runs on, doctor checks the platform and the configuration only
    # and loads no more (tests/unit/test_platform_support.py)
    from roteiro_py.lint.preflight import pinned_image
    from roteiro_py.store import Store

    if resolved is None:
        return None, [Check("image", False, "not checked: the configuration cannot be read",
                            required=True)]
    try:
        reference = pinned_image(resolved, path)
    except NoImageConfigured as missing:
        fix = config_set_image_command(missing.stored[0]) if missing.stored else prefetch_command()
        held = (f"; the store holds {counted(len(missing.stored), 'provisioned image')}, the fix "
                "sets the newest"
                if missing.stored else "")
        return None, [Check("image", False, f"`[lint] image` is not set{held}", fix, required=True)]
    except RoteiroError as error:
        return None, [Check("image", False, error.guidance().summary, required=True)]
    configured = Check("image", True, f"{reference} ({resolved.source_of('lint.image')})",
                       required=True)
    try:
        image = Store.default().resolve(reference)
    except ImageNotProvisioned as absent:
        return reference, [configured, Check(
            "image provisioned", False, absent.guidance().summary
            + (f" {absent.detail}" if absent.detail else ""), prefetch_command(str(reference)),
            required=True)]
    return reference, [configured, Check("image provisioned", True,
                                         f"manifest {image.manifest_digest}, {counted(len(image.layers), 'layer')}",
                                         required=True)]


def checks(path: Path = Path("."), flags: Flags | None = None) -> list[Check]:
    """Every check for linting `path` on this host, in the order a lint meets them."""
    return _checks(path, flags)[0]


def _platform() -> Check:
    current = host()
    refused = refusal(current)
    if refused is not None:
        return Check("platform", False, refused.guidance().summary,
                     f"lint on a {SUPPORTED} host; {PLATFORMS_DOC} says what runs", required=True)
    return Check("platform", True, current.name, required=True)


def _checks(path: Path, flags: Flags | None = None) -> tuple[list[Check], ImageReference | None]:
    host = _platform()
    resolved, configuration = _configuration(path, flags)
    found: list[Check] = [host, configuration]
    if not host.ok:
        return found, None
    # lazy: on a host no lint runs on, doctor loads nothing of the VM (cryptography, the qemu stack)
    from roteiro_py.vm.assets.assets import PROVISION_COMMAND, describe_assets, load_assets, source_of_assets
    from roteiro_py.vm.qemu import probe

    qemu_path, version = probe.qemu_info()
    found.append(Check("qemu", qemu_path is not None,
                       f"{qemu_path} ({version})" if qemu_path else "qemu-system-x86_64 not found",
                       None if qemu_path else "apt-get install qemu-system-x86", required=True))
    # e2fsck, resize2fs: the root filesystem, which the host's mkfs.ext4 built from the
    # image's layers, is shrunk to its content before it is sealed (vm/disks/rootfs.py
    # shrink_ext4); never a disk the guest wrote (vm/disks/scratch.py says why)
    for tool, package in (("mkfs.ext4", "e2fsprogs"), ("e2fsck", "e2fsprogs"), ("resize2fs", "e2fsprogs"),
                          ("setpriv", "util-linux")):
        where = shutil.which(tool)
        found.append(Check(tool, where is not None, where or "not found",
                           None if where else f"apt-get install {package}", required=True))
    assets = None
    vm = resolved.settings.vm if resolved is not None else None
    try:
        assets = load_assets(Path(vm.kernel) if vm and vm.kernel else None,
                             Path(vm.initrd) if vm and vm.initrd else None)
        for asset in describe_assets():
            found.append(Check(f"vm asset {asset.name}", True,
                               f"{asset.path} sha256:{asset.sha256[:16]}… ({asset.size} bytes)",
                               required=True))
        if not (vm and (vm.kernel or vm.initrd)):
            lines = source_of_assets() or ["not recorded (provisioned by an older version)"]
            found.append(Check("vm assets source", True,
                               printable("\n      ".join(lines), keep_newlines=True)))
    except RoteiroError as error:
        found.append(Check("vm assets", False, error.guidance().summary, PROVISION_COMMAND,
                           required=True))
    for accel in ("kvm", "tcg"):
        if assets is None or qemu_path is None:
            found.append(Check(f"accel {accel}", False, "not probed: qemu or the VM assets are missing",
                               PROVISION_COMMAND))
            continue
        verdict = probe.probe(accel, assets)
        cached = " (cached verdict)" if verdict.cached else ""
        if accel == "tcg":
            detail = (f"{verdict.reason}{cached}; software emulation, not a security boundary: "
                      "used only with --accel tcg")
            found.append(Check("accel tcg", verdict.usable, detail))
        else:
            found.append(Check(f"accel {accel}", verdict.usable, f"{verdict.reason}{cached}",
                               None if verdict.usable else
                               "a host where hardware virtualization runs guests, or --accel tcg (opt-in)"))
    found.append(_sandbox(resolved))
    reference, image = _image(resolved, path)
    found.extend(image)
    store = paths.store_root()
    try:
        from roteiro_py.store import Store  # lazy: see _image

        references = Store(store).references() if store.exists() else []
        found.append(Check("image store", bool(references),
                           f"{store}: {counted(len(references), 'image')}"
                           + "".join(f"\n      {printable(r.name)}" for r in references),
                           None if references else
                           "pylint-sandbox prefetch --analyzer clippy --image REF --allow-download"))
    except RoteiroError as error:
        found.append(Check("image store", False, error.guidance().summary))
    found.append(_packages(path))
    return found, reference


def _packages(path: Path) -> Check:
    """Whether the package store holds every package PATH's lockfile pins (a lint refuses
    otherwise, naming them; `fetch-deps` fills it). Informational: fetch-deps is the fix,
    and a tree without a lockfile or with only path dependencies needs none."""
    # lazy: see _image
    from roteiro_py.cargo.lockfile import read_pins
    from roteiro_py.cargo.store import packages_root
    from roteiro_py.cargo.vendor import missing_from_store
    from roteiro_py.cargo.workspace import find_workspace_root

    store = packages_root()
    try:
        root = find_workspace_root(path)
        lockfile = root / "Cargo.lock"
        if not lockfile.is_file():
            return Check("package store", False, f"{printable(str(root))} has no Cargo.lock",
                         "cargo generate-lockfile (in the guest's toolchain), then "
                         f"pylint-sandbox fetch-deps {printable(str(root))}")
        lock = read_pins(lockfile)
    except RoteiroError as error:
        return Check("package store", False, error.guidance().summary)
    missing = missing_from_store(lock.pins)
    pinned = len(lock.pins)
    return Check("package store", not missing,
                 f"{printable(str(store))}: {pinned - len(missing)} of the "
                 f"{counted(pinned, 'package')} the lockfile pins", f"pylint-sandbox fetch-deps {printable(str(root))}"
                 if missing else None)


def verified(configured: str | None = None) -> list[Check]:
    """`doctor --verify`: the full check a lint does not make. Every stored image's blobs
    re-hashed (Store.is_present), every cached root filesystem re-hashed against the
    record sealed when it was built (a damaged one is removed: the next lint rebuilds it),
    and so is every dependency cache (by its sparse digest, depcache/store.py).
    A lint checks layers by size and the root filesystem by its stat identity
    (vm/disks/rootfs_record.py says what that does not catch: this does).
    `configured`: the image PATH's configuration names; its re-hash failing is required
    (a lint of it would fail), another image's is not, and a rebuilt cache never is."""
    # lazy: only with --verify
    from roteiro_py.depcache.store import cache_dir as store_dir
    from roteiro_py.store import Store
    from roteiro_py.vm.disks.rootfs_record import hash_sparse, verify_all

    wanted = None
    if configured is not None:
        parsed = parse(configured)
        wanted = (parsed.name, parsed.digest)
    found: list[Check] = []
    store = Store(paths.store_root())
    for reference in store.references() if store.root.exists() else []:
        presence = store.is_present(reference.name)
        try:
            stored = parse(reference.name)
            required = (stored.name, stored.digest) == wanted
        except RoteiroError:
            required = False
        found.append(Check(f"image {printable(reference.name)}", presence.present,
                           "every blob re-hashed" if presence else str(presence.detail),
                           None if presence else prefetch_command(reference.name), required=required))
    images = verify_all(paths.cache_root() / "rootfs")
    damaged = [image.name for image, ok in images if not ok]
    found.append(Check("root filesystem cache", not damaged,
                       f"{len(images) - len(damaged)} of {len(images)} re-hashed and intact"
                       + (f"; removed (rebuilt by the next lint): {', '.join(damaged)}"
                          if damaged else "")))
    caches = verify_all(store_dir(), hash_sparse)
    broken = [cache.stem[:16] for cache, ok in caches if not ok]
    found.append(Check("dependency cache", not broken,
                       f"{len(caches) - len(broken)} of {len(caches)} re-hashed and intact"
                       + (f"; removed (rebuilt by the next lint that needs it): {', '.join(broken)}"
                          if broken else "")))
    return found


def json_report(results: list[Check], path: Path) -> str:
    """The checks in the SCHEMA_VERSION schema; every string through the one sanitiser."""
    def clean(check: Check) -> dict[str, object]:
        fields = asdict(check)
        fields["detail"] = printable(check.detail, keep_newlines=True)
        fields["fix"] = printable(check.fix) if check.fix is not None else None
        fields["name"] = printable(check.name)
        return {key: fields[key] for key in ("name", "ok", "required", "detail", "fix")}

    return json.dumps({"schema_version": SCHEMA_VERSION, "can_lint": can_lint(results),
                       "path": printable(str(path.resolve())),
                       "checks": [clean(check) for check in results]}, indent=2) + "\n"


def _verdict_line(results: list[Check], path: Path) -> str:
    failed = [check.name for check in results if check.required and check.ok is False]
    if not failed:
        return f"this host can lint {printable(str(path.resolve()))}"
    return f"this host cannot lint {printable(str(path.resolve()))}: {', '.join(printable(n) for n in failed)}"


def run_doctor(*, verify: bool = False, path: Path = Path("."), format: str = "human",
               flags: Flags | None = None) -> int:
    """Print the checks; EXIT_OK when this host can lint `path`, EXIT_REFUSED when not.

    `flags`: what a lint's command line would set (`--accel`), so the verdict is for the
    lint the user means to run: `doctor --accel tcg` answers for `lint clippy --accel tcg`.

    A `path` that does not exist is the usage error a lint of it is (PathNotFound), before
    any check: every check would pass for it (a missing tree has no roteiro.toml to
    misread, and the image comes from the user's configuration), and "this host can lint"
    a path that is not there sent the user on to a lint that refuses it."""
    if not path.resolve().exists():
        raise PathNotFound(path.resolve())
    results, reference = _checks(path, flags)
    if verify:
        results += verified(str(reference) if reference is not None else None)
    code = EXIT_OK if can_lint(results) else EXIT_REFUSED
    if format == "json":
        sys.stdout.write(guard(json_report(results, path), json=True))
        return code
    marks = {True: "ok  ", False: "MISS", None: "info"}
    verdict = _verdict_line(results, path)
    if sys.stdout.isatty():
        # lazy: rich only on a terminal
        from rich.console import Console
        from rich.text import Text

        console = Console(highlight=False, markup=False, emoji=False)
        colors = {True: "green", False: "red", None: "cyan"}
        for check in results:
            mark = marks[check.ok] if check.required or check.ok is not False else "warn"
            console.print(Text.assemble((mark, colors[check.ok] if mark != "warn" else "yellow"),
                                        f"  {printable(check.name)}: ",
                                        printable(check.detail, keep_newlines=True)))
            if check.fix:
                console.print(Text.assemble("        fix: ", (printable(check.fix), "bold")))
        console.print(Text(verdict, style="bold green" if code == EXIT_OK else "bold red"))
    else:
        lines = []
        for check in results:
            mark = marks[check.ok] if check.required or check.ok is not False else "warn"
            lines.append(f"{mark}  {printable(check.name)}: {printable(check.detail, keep_newlines=True)}\n")
            if check.fix:
                lines.append(f"        fix: {printable(check.fix)}\n")
        lines.append(verdict + "\n")
        sys.stdout.write(guard("".join(lines)))
    return code
