"""The detached-signature verifier and the armored key reader (roteiro_py/vm/assets/openpgp.py),
cross-checked with gpgv on signatures real gpg made, and the Rust release key we ship."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest

from roteiro_py.vm.assets import openpgp
from tests.unit.gpg_support import Gpg, make_gpg

NOW = time.time()
RELEASE = "release@example.org"
DATA = b'manifest-version = "2"\ndate = "2026-11-01"\n\x00\xff binary bytes, no canonical line ends\r\n'


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    yield from make_gpg(tmp_path_factory.mktemp("gnupg"))


def keys(gpg: Gpg, uid: str) -> list[openpgp.PublicKey]:
    return openpgp.load_keyring(gpg.run("--export", "--armor", uid), [gpg.fingerprint(uid)])


@pytest.mark.parametrize("uid", [RELEASE, "ed@example.org"])
def test_a_detached_signature_verifies_as_gpgv_says(gpg: Gpg, uid: str, tmp_path: Path) -> None:
    signing = time.time()  # not NOW: the module is imported when the whole suite is collected
    signature = gpg.detach_sign(uid, DATA)
    assert signature.startswith(b"-----BEGIN PGP SIGNATURE-----")
    assert gpg.gpgv_accepts(uid, DATA, signature, tmp_path)
    verified = openpgp.verify_detached(DATA, signature, keys(gpg, uid), NOW)
    assert verified.fingerprint == gpg.fingerprint(uid)
    assert signing - 2 <= verified.created <= time.time() + 2  # the signature's own creation time
    binary = gpg.detach_sign(uid, DATA, armor=False, digest="SHA256")
    assert openpgp.verify_detached(DATA, binary, keys(gpg, uid), NOW).fingerprint == gpg.fingerprint(uid)


def test_altered_data_is_refused_by_both(gpg: Gpg, tmp_path: Path) -> None:
    signature = gpg.detach_sign(RELEASE, DATA)
    for altered in (DATA + b"\n", DATA.replace(b"2026", b"2025"), DATA.replace(b"\r\n", b"\n")):
        assert not gpg.gpgv_accepts(RELEASE, altered, signature, tmp_path)
        with pytest.raises(openpgp.Unverified, match="does not match|does not verify"):
            openpgp.verify_detached(altered, signature, keys(gpg, RELEASE), NOW)


def test_a_tampered_signature_is_refused_even_with_a_fresh_checksum(gpg: Gpg, tmp_path: Path) -> None:
    armored = gpg.detach_sign(RELEASE, DATA)
    lines = armored.decode().splitlines()
    body = [line for line in lines[1:-1] if line and ":" not in line and not line.startswith("=")]
    packets = bytearray(base64.b64decode("".join(body)))
    packets[-5] ^= 0x01  # inside the RSA signature value
    b64 = base64.b64encode(bytes(packets)).decode()
    crc = base64.b64encode(openpgp._crc24(bytes(packets))).decode()
    rearmored = ("-----BEGIN PGP SIGNATURE-----\n\n" + "\n".join(b64[i:i + 64] for i in range(0, len(b64), 64))
                 + f"\n={crc}\n-----END PGP SIGNATURE-----\n").encode()
    assert not gpg.gpgv_accepts(RELEASE, DATA, rearmored, tmp_path)
    with pytest.raises(openpgp.Unverified, match="does not verify"):
        openpgp.verify_detached(DATA, rearmored, keys(gpg, RELEASE), NOW)
    # control: the same re-armoring of the untouched packets verifies
    packets[-5] ^= 0x01
    b64 = base64.b64encode(bytes(packets)).decode()
    crc = base64.b64encode(openpgp._crc24(bytes(packets))).decode()
    control = ("-----BEGIN PGP SIGNATURE-----\n\n" + b64 + f"\n={crc}\n-----END PGP SIGNATURE-----\n").encode()
    assert openpgp.verify_detached(DATA, control, keys(gpg, RELEASE), NOW).fingerprint == gpg.fingerprint(RELEASE)


def test_a_signature_by_a_key_not_pinned_counts_for_nothing(gpg: Gpg) -> None:
    signature = gpg.detach_sign("s@example.org", DATA)
    ring = gpg.run("--export", "--armor", "s@example.org")
    with pytest.raises(openpgp.Unverified, match="not a pinned key"):
        openpgp.verify_detached(DATA, signature, openpgp.load_keyring(ring, [gpg.fingerprint(RELEASE)]), NOW)
    # control: pinned, the stranger's key verifies its own signature
    assert openpgp.verify_detached(DATA, signature, openpgp.load_keyring(ring, [gpg.fingerprint("s@example.org")]),
                                   NOW).fingerprint == gpg.fingerprint("s@example.org")


def test_a_text_signature_is_not_a_binary_one(gpg: Gpg) -> None:
    """`--textmode` makes a type 0x01 signature, over canonical text: a detached manifest is
    signed as bytes, so one of those does not count (gpgv would accept it)."""
    text = gpg.run("--local-user", RELEASE, "--textmode", "--detach-sign", "--armor", data=DATA)
    with pytest.raises(openpgp.Unverified, match="signature type 0x01"):
        openpgp.verify_detached(DATA, text, keys(gpg, RELEASE), NOW)


def test_a_cleartext_signature_is_not_taken_as_detached_and_back(gpg: Gpg) -> None:
    clear = gpg.run("--local-user", RELEASE, "--clearsign", data=b"Suite: x\n")
    with pytest.raises(openpgp.Unverified, match="does not start with -----BEGIN PGP SIGNATURE-----"):
        openpgp.verify_detached(b"Suite: x\n", clear, keys(gpg, RELEASE), NOW)


@pytest.mark.parametrize(("mangle", "why"), [
    (lambda a: a.replace(b"-----END PGP SIGNATURE-----", b""), "no -----END PGP SIGNATURE----- line"),
    (lambda a: a + b"trailing words\n", "text after -----END PGP SIGNATURE-----"),
    (lambda a: b"junk\n" + a, "does not start with"),
    (None, "checksum does not match"),
    (lambda a: a[:40] + b"\xc3\xa9" + a[40:], "not ASCII"),
    (lambda a: a + b"\n" * openpgp.MAX_ARMORED_BYTES, "larger than"),
])
def test_a_malformed_armor_is_refused(gpg: Gpg, mangle: Callable[[bytes], bytes] | None, why: str) -> None:
    armored = gpg.detach_sign(RELEASE, DATA)
    assert openpgp.verify_detached(DATA, armored, keys(gpg, RELEASE), NOW)  # control: untouched, it verifies
    if mangle is None:
        head, _, tail = armored.partition(b"\n=")
        crc = tail[:4]
        armored = head + b"\n=" + (b"AAAA" if crc != b"AAAA" else b"BBBB") + tail[4:]
    else:
        armored = mangle(armored)
    with pytest.raises(openpgp.Unverified, match=why):
        openpgp.verify_detached(DATA, armored, keys(gpg, RELEASE), NOW)


#: rust-lang.org's published key file (https://static.rust-lang.org/rust-key.gpg.ascii): its
#: size and sha256 as published, and its keys' v4 fingerprints as gpg lists them.
RUST_KEY_SHA256 = "e54b09a439647e006b4831eec9785cbaaf3e07ab371c3a6ee6a68e1bdb9fbc6b"
RUST_PRIMARY = "108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE"
RUST_SIGNING_SUBKEY = "C13466B7E169A085188632165CB4A9347B3B09DC"
RUST_ENCRYPTION_SUBKEY = "29D57CE15D76E78CD57D326A8E9AA3F7AB3F5826"


def test_the_shipped_rust_key_is_the_published_file_and_reads_to_its_fingerprints() -> None:
    data = (resources.files("roteiro_py") / "data" / "rust-key.gpg.ascii").read_bytes()
    assert (len(data), hashlib.sha256(data).hexdigest()) == (5326, RUST_KEY_SHA256)
    found = openpgp.load_keyring(data, [RUST_PRIMARY, RUST_SIGNING_SUBKEY, RUST_ENCRYPTION_SUBKEY])
    assert [(k.fingerprint, k.algorithm) for k in found] == [
        (RUST_PRIMARY, openpgp.RSA), (RUST_ENCRYPTION_SUBKEY, openpgp.RSA), (RUST_SIGNING_SUBKEY, openpgp.RSA)]
    assert all(isinstance(k.material, openpgp.RSAPublicNumbers) and k.material.n.bit_length() == 4096
               for k in found)
    # pinning keeps only what is pinned
    assert [k.fingerprint for k in openpgp.load_keyring(data, [RUST_PRIMARY])] == [RUST_PRIMARY]
