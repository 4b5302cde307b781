"""Which hosts can run a lint, decided in one place, and the refusal everywhere else.

A lint runs on Linux x86_64 and nowhere else, because every part of a run is built
for it:

* the guest is a QEMU x86 `microvm` booted by `qemu-system-x86_64` (vm/qemu/machine.py
  `qemu_argv`) under KVM, or TCG by explicit opt-in (vm/qemu/backend.py);
* the process layer waits on qemu with `pidfd_open` (Linux 5.3) and `waitid(P_PIDFD)`
  (Linux 5.4) (process/stream.py): Linux 5.4 or later (`PIDFD_KERNEL`);
* qemu is tied to this process by util-linux's `setpriv --pdeathsig`
  (vm/qemu/machine.py `tied_to_caller`), so a SIGKILLed lint leaves no guest running.

Elsewhere (macOS, Windows, Linux on aarch64) `lint`, `doctor` and `prefetch --vm-assets`
refuse before anything starts, naming the platform: there is no fallback that would run
the tree's build with less confinement than asked. Commands that start no VM (`config`,
`render`, `cache`, `fetch-deps`) are not refused (tested on Linux only; Windows cannot
import the package: POSIX-only `os` flags). docs/PLATFORMS.md writes down what
aarch64 Linux and macOS would need.
"""

from __future__ import annotations

import platform
import sys
from dataclasses import dataclass

from roteiro_py import errors

#: The one platform a lint runs on, as messages name it.
SUPPORTED = "Linux x86_64"
#: Where what runs, and what the other platforms would need, is written down.
PLATFORMS_DOC = "`pylint-sandbox docs platforms`"
#: The first Linux with both `pidfd_open` (5.3) and `waitid(P_PIDFD)` (5.4): process/stream.py
#: waits on children with them.
PIDFD_KERNEL = (5, 4)

#: `sys.platform` values, by prefix, as a person names the system.
_SYSTEMS = (("linux", "Linux"), ("darwin", "macOS"), ("win32", "Windows"),
            ("cygwin", "Windows (Cygwin)"), ("freebsd", "FreeBSD"), ("openbsd", "OpenBSD"),
            ("netbsd", "NetBSD"), ("sunos", "Solaris"), ("aix", "AIX"))
#: What `platform.machine()` says for x86_64 on the systems that spell it otherwise.
_X86_64 = frozenset({"x86_64", "amd64"})
#: A name from `sys.platform` or `platform.machine()` longer than this is cut in messages.
_NAME_LIMIT = 40


@dataclass(frozen=True)
class Host:
    """A host as Python reports it: `sys.platform` and `platform.machine()`."""

    system: str
    machine: str

    @property
    def name(self) -> str:
        """The platform as a person says it: "macOS arm64", "Linux aarch64"."""
        system = next((name for prefix, name in _SYSTEMS if self.system.startswith(prefix)),
                      self.system[:_NAME_LIMIT] or "an unknown system")
        return f"{system} {self.machine[:_NAME_LIMIT] or 'of unknown architecture'}"

    @property
    def supported(self) -> bool:
        return self.system.startswith("linux") and self.machine.lower() in _X86_64


def host() -> Host:
    """This host, read when asked (tests change what `sys.platform` and
    `platform.machine()` say, never a copy taken at import)."""
    return Host(sys.platform, platform.machine())


def refusal(current: Host | None = None) -> errors.PlatformUnsupported | None:
    """The refusal a lint on `current` (default: this host) meets first, or None."""
    current = current or host()
    if current.supported:
        return None
    return errors.PlatformUnsupported(current.name, SUPPORTED, PLATFORMS_DOC)


def require_supported(current: Host | None = None) -> None:
    """Refuse, before anything starts, on a host where a lint cannot run."""
    refused = refusal(current)
    if refused is not None:
        raise refused


def missing_pidfd(why: str) -> errors.PlatformUnsupported:
    """The refusal for a host that looked supported but cannot wait on a child by pidfd
    (process/stream.py): an older kernel, a seccomp filter that refuses the calls, or a
    Python built without `os.pidfd_open`."""
    kernel = ".".join(str(part) for part in PIDFD_KERNEL)
    return errors.PlatformUnsupported(
        host().name, SUPPORTED, PLATFORMS_DOC,
        reason=f"{why}; waiting on the VM needs pidfd_open and waitid(P_PIDFD) "
               f"(Linux {kernel} or later)")
