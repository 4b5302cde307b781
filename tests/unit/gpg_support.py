"""A signing key of the test's own, made with real gpg in a temporary GNUPGHOME, for the
tests of the OpenPGP verifier (roteiro_py/vm/assets/openpgp.py) and of what relies on it
(roteiro_py/image/rust_dist.py): signatures are gpg's, so the verifier is checked against
the tool everyone else trusts, and gpgv is asked the same question."""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from pathlib import Path


class Gpg:
    def __init__(self, home: Path) -> None:
        self.home = home

    def run(self, *args: str, data: bytes | None = None) -> bytes:
        done = subprocess.run(["gpg", "--batch", "--quiet", "--pinentry-mode", "loopback",
                               "--passphrase", "", *args], input=data, capture_output=True,
                              env={"GNUPGHOME": str(self.home), "PATH": os.environ["PATH"]},
                              check=True, timeout=120)
        return done.stdout

    def fingerprint(self, uid: str) -> str:
        for line in self.run("--with-colons", "--list-keys", uid).decode().splitlines():
            if line.startswith("fpr:"):
                return line.split(":")[9]
        raise AssertionError(uid)

    def detach_sign(self, uid: str, data: bytes, *, armor: bool = True, digest: str = "SHA512") -> bytes:
        """A detached binary-document signature (type 0x00), as static.rust-lang.org's `.asc`."""
        return self.run("--local-user", uid, "--digest-algo", digest, "--detach-sign",
                        *(("--armor",) if armor else ()), data=data)

    def gpgv_accepts(self, uid: str, data: bytes, signature: bytes, tmp: Path) -> bool:
        """What gpgv says of `signature` over `data`, with only `uid`'s key in its keyring."""
        (tmp / "ring.gpg").write_bytes(self.run("--export", uid))
        (tmp / "data").write_bytes(data)
        (tmp / "data.asc").write_bytes(signature)
        return subprocess.run(["gpgv", "--keyring", str(tmp / "ring.gpg"), str(tmp / "data.asc"),
                               str(tmp / "data")], capture_output=True, check=False,
                              timeout=60).returncode == 0


def make_gpg(home: Path) -> Iterator[Gpg]:
    """Three keys: an RSA-4096 release key (as Rust's), an Ed25519 one, and a stranger."""
    os.chmod(home, 0o700)
    tool = Gpg(home)
    tool.run("--quick-gen-key", "Test Release <release@example.org>", "rsa4096", "sign", "never")
    tool.run("--quick-gen-key", "Test Ed <ed@example.org>", "ed25519", "sign", "never")
    tool.run("--quick-gen-key", "Stranger <s@example.org>", "rsa2048", "sign", "never")
    yield tool
    subprocess.run(["gpgconf", "--kill", "all"], env={"GNUPGHOME": str(home), "PATH": os.environ["PATH"]},
                   check=False, timeout=30)

