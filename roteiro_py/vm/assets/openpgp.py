"""Verify OpenPGP signatures against pinned keys: a cleartext-signed message (a Debian
`InRelease`) and a detached signature over binary data (a Rust channel manifest's `.asc`).

Guarantees:
- `verify_cleartext` returns the signed text only when at least one v4 signature of type
  0x01 (canonical text) over exactly that text verifies with one of the keys it is given;
  anything else raises `Unverified` naming what failed. Other signatures in the block
  (by other keys, of other versions, malformed) neither count nor void one that verifies.
  The text returned is the text that was hashed (dash-escaping undone, trailing blanks
  gone, RFC 4880 section 7.1), never the raw file, so a caller can not parse what was not
  signed.
- `verify_detached` returns only when at least one v4 signature of type 0x00 (binary
  document) in an armored or binary signature block verifies over exactly the bytes given,
  with the same rules as above (a signature of any other type, 0x01 included, does not
  count: static.rust-lang.org signs `channel-rust-*.toml` as binary, `gpg --detach-sign`).
- Only RSA (algorithm 1, PKCS#1 v1.5) and EdDSA over Ed25519 (algorithm 22) with SHA-256,
  SHA-384 or SHA-512: what Debian signs with (bookworm's InRelease carries two RSA-4096
  signatures by the archive's automatic keys and one Ed25519 signature by the stable
  release key). A signature made more than `MAX_CLOCK_SKEW_S` in the future, or already
  expired by its own expiration subpacket, or carrying a critical subpacket this reader
  does not know, does not count.
- `load_keyring` reads binary keyring files (as /usr/share/keyrings ships them) or an
  ASCII-armored public key block (as rust-lang.org publishes `rust-key.gpg.ascii`) and keeps
  only the keys (primary or subkey) whose v4 fingerprint, SHA-1 over 0x99, a two-octet
  length and the key packet body, is in the `pinned` set it is given. Subkey binding
  signatures are not checked: every key that may sign is pinned by its own fingerprint.

Written here rather than calling `gpgv`, which not every host has (the GitHub-hosted
runners do, a minimal container does not); the tests cross-check it against gpgv. The
arithmetic is the `cryptography` library's; this module only parses, bounded.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import padding, utils
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicNumbers

#: A signature may be dated at most this far ahead of the host's clock (clock skew).
MAX_CLOCK_SKEW_S = 24 * 3600
#: At most this many packets are read from one keyring or one signature block.
MAX_PACKETS = 4096
#: At most this many signatures in one signature block are tried.
MAX_SIGNATURES = 16

RSA = 1
EDDSA = 22
#: OID of Ed25519 in OpenPGP (1.3.6.1.4.1.11591.15.1), as it is encoded in the key packet.
ED25519_OID = bytes.fromhex("2b06010401da470f01")
HASHES: dict[int, tuple[str, hashes.HashAlgorithm]] = {
    8: ("SHA256", hashes.SHA256()), 9: ("SHA384", hashes.SHA384()), 10: ("SHA512", hashes.SHA512()),
}
TAG_SIGNATURE, TAG_PUBLIC_KEY, TAG_PUBLIC_SUBKEY = 2, 6, 14

BEGIN_MESSAGE = "-----BEGIN PGP SIGNED MESSAGE-----"
#: An armored block is at most this large (the Rust release key's file is 5,326 bytes).
MAX_ARMORED_BYTES = 1 << 20
BEGIN_SIGNATURE = "-----BEGIN PGP SIGNATURE-----"
END_SIGNATURE = "-----END PGP SIGNATURE-----"


class Unverified(ValueError):
    """The message is malformed, or no signature in it verifies with a pinned key."""


@dataclass(frozen=True)
class PublicKey:
    fingerprint: str  # 40 upper-case hex digits
    algorithm: int
    created: int
    material: RSAPublicNumbers | bytes  # RSA numbers, or the 32-byte Ed25519 point

    @property
    def key_id(self) -> str:
        return self.fingerprint[-16:]


@dataclass(frozen=True)
class Verified:
    text: str  # the signed text, lines joined with "\n"
    fingerprint: str  # of the key whose signature verified
    created: int  # that signature's creation time, seconds since the epoch


# -- packets -------------------------------------------------------------------------------


def _packets(data: bytes) -> Iterator[tuple[int, bytes]]:
    """(tag, body) for each packet; old and new formats, no partial or indeterminate lengths."""
    at, count = 0, 0
    while at < len(data):
        count += 1
        if count > MAX_PACKETS:
            raise Unverified(f"more than {MAX_PACKETS} packets")
        first = data[at]
        if not first & 0x80:
            raise Unverified(f"not an OpenPGP packet at offset {at}")
        if first & 0x40:
            tag = first & 0x3F
            if at + 2 > len(data):
                raise Unverified("truncated packet header")
            octet = data[at + 1]
            if octet < 192:
                length, at = octet, at + 2
            elif octet < 224:
                if at + 3 > len(data):
                    raise Unverified("truncated packet header")
                length, at = ((octet - 192) << 8) + data[at + 2] + 192, at + 3
            elif octet == 255:
                if at + 6 > len(data):
                    raise Unverified("truncated packet header")
                length, at = int.from_bytes(data[at + 2:at + 6], "big"), at + 6
            else:
                raise Unverified("partial-length packets are not accepted")
        else:
            tag, kind = (first >> 2) & 0x0F, first & 0x03
            if kind == 3:
                raise Unverified("indeterminate-length packets are not accepted")
            size = 1 << kind
            if at + 1 + size > len(data):
                raise Unverified("truncated packet header")
            length, at = int.from_bytes(data[at + 1:at + 1 + size], "big"), at + 1 + size
        if at + length > len(data):
            raise Unverified(f"packet of {length} bytes runs past the end of the data")
        yield tag, data[at:at + length]
        at += length


def _mpi(body: bytes, at: int) -> tuple[bytes, int]:
    if at + 2 > len(body):
        raise Unverified("truncated number")
    bits = int.from_bytes(body[at:at + 2], "big")
    end = at + 2 + (bits + 7) // 8
    if end > len(body):
        raise Unverified("truncated number")
    return body[at + 2:end], end


def parse_public_key(body: bytes) -> PublicKey | None:
    """A v4 RSA or Ed25519 key packet body; None for any other kind (ignored, not trusted)."""
    if len(body) < 6 or body[0] != 4:
        return None
    created, algorithm = int.from_bytes(body[1:5], "big"), body[5]
    fingerprint = hashlib.sha1(b"\x99" + len(body).to_bytes(2, "big") + body).hexdigest().upper()
    if algorithm == RSA:
        n, at = _mpi(body, 6)
        e, _ = _mpi(body, at)
        return PublicKey(fingerprint, algorithm, created,
                         RSAPublicNumbers(int.from_bytes(e, "big"), int.from_bytes(n, "big")))
    if algorithm == EDDSA:
        size = body[6] if len(body) > 6 else 0
        if body[7:7 + size] != ED25519_OID:
            return None
        point, _ = _mpi(body, 7 + size)
        if len(point) != 33 or point[0] != 0x40:
            return None
        return PublicKey(fingerprint, algorithm, created, point[1:])
    return None


def load_keyring(data: bytes, pinned: Iterable[str]) -> list[PublicKey]:
    """The keys in a binary or armored keyring whose fingerprints are pinned; the others are dropped."""
    wanted = {fingerprint.upper() for fingerprint in pinned}
    keys = []
    if not _binary(data):
        data = dearmor(data, "PUBLIC KEY BLOCK")
    for tag, body in _packets(data):
        if tag in (TAG_PUBLIC_KEY, TAG_PUBLIC_SUBKEY):
            key = parse_public_key(body)
            if key is not None and key.fingerprint in wanted:
                keys.append(key)
    return keys


# -- signatures ----------------------------------------------------------------------------


@dataclass(frozen=True)
class Signature:
    kind: int
    algorithm: int
    hash_algorithm: int
    hashed: bytes  # the v4 header and hashed subpackets: what the trailer counts
    left16: bytes
    values: tuple[bytes, ...]
    created: int | None
    expires_after: int | None
    issuer_fingerprint: str | None
    issuer_key_id: str | None
    unknown_critical: int | None


def _subpackets(area: bytes) -> Iterator[tuple[int, bool, bytes]]:
    at = 0
    while at < len(area):
        octet = area[at]
        if octet < 192:
            length, at = octet, at + 1
        elif octet < 255:
            if at + 2 > len(area):
                raise Unverified("truncated subpacket")
            length, at = ((octet - 192) << 8) + area[at + 1] + 192, at + 2
        else:
            if at + 5 > len(area):
                raise Unverified("truncated subpacket")
            length, at = int.from_bytes(area[at + 1:at + 5], "big"), at + 5
        if length < 1 or at + length > len(area):
            raise Unverified("subpacket runs past its area")
        yield area[at] & 0x7F, bool(area[at] & 0x80), area[at + 1:at + length]
        at += length


def parse_signature(body: bytes) -> Signature:
    if len(body) < 6 or body[0] != 4:
        raise Unverified(f"signature version {body[0] if body else '?'} (only v4 is read)")
    hashed_len = int.from_bytes(body[4:6], "big")
    end = 6 + hashed_len
    if end + 2 > len(body):
        raise Unverified("truncated signature")
    unhashed_len = int.from_bytes(body[end:end + 2], "big")
    tail = end + 2 + unhashed_len
    if tail + 2 > len(body):
        raise Unverified("truncated signature")
    created = expires = None
    issuer_fpr = issuer_id = None
    critical = None
    known = {2, 3, 16, 33}
    for kind, is_critical, value in _subpackets(body[6:end]):
        if kind == 2 and len(value) == 4:
            created = int.from_bytes(value, "big")
        elif kind == 3 and len(value) == 4:
            expires = int.from_bytes(value, "big")
        elif kind == 33 and len(value) == 21 and value[0] == 4:
            issuer_fpr = value[1:].hex().upper()
        elif kind == 16 and len(value) == 8:
            issuer_id = value.hex().upper()
        if is_critical and kind not in known and critical is None:
            critical = kind
    for kind, _critical, value in _subpackets(body[end + 2:tail]):
        if kind == 16 and len(value) == 8 and issuer_id is None:
            issuer_id = value.hex().upper()  # unhashed: only selects a key to try
    at, values = tail + 2, []
    while at < len(body):
        value, at = _mpi(body, at)
        values.append(value)
    return Signature(body[1], body[2], body[3], body[:end], body[tail:tail + 2], tuple(values),
                     created, expires, issuer_fpr, issuer_id, critical)


def _check(signature: Signature, key: PublicKey, text: bytes, now: float, kind: int = 0x01) -> None:
    """Raise Unverified unless `signature` by `key`, of type `kind`, verifies over `text`
    (the canonical text of a cleartext message, 0x01; the exact bytes of a document, 0x00)."""
    if signature.kind != kind:
        what = "a cleartext message" if kind == 0x01 else "a detached signature over data"
        raise Unverified(f"signature type 0x{signature.kind:02x} ({what} needs 0x{kind:02x})")
    if signature.hash_algorithm not in HASHES:
        raise Unverified(f"hash algorithm {signature.hash_algorithm} is not accepted")
    if signature.unknown_critical is not None:
        raise Unverified(f"critical subpacket {signature.unknown_critical} is not understood")
    if signature.created is None:
        raise Unverified("no creation time in the hashed subpackets")
    if signature.created > now + MAX_CLOCK_SKEW_S:
        raise Unverified(f"made in the future (creation time {signature.created})")
    if signature.created < key.created:
        raise Unverified("made before its key existed")
    if signature.expires_after and signature.created + signature.expires_after < now:
        raise Unverified("expired")
    if signature.algorithm != key.algorithm:
        raise Unverified("its algorithm is not its key's")
    name, algorithm = HASHES[signature.hash_algorithm]
    trailer = b"\x04\xff" + len(signature.hashed).to_bytes(4, "big")
    digest = hashlib.new(name, text + signature.hashed + trailer).digest()
    if digest[:2] != signature.left16:
        raise Unverified("the digest does not match (the text or the signature was altered)")
    try:
        if key.algorithm == RSA and isinstance(key.material, RSAPublicNumbers):
            if len(signature.values) != 1:
                raise Unverified("an RSA signature holds one number")
            size = (key.material.n.bit_length() + 7) // 8
            if len(signature.values[0]) > size:
                raise Unverified("the RSA signature is longer than the modulus")
            key.material.public_key().verify(signature.values[0].rjust(size, b"\0"), digest,
                                             padding.PKCS1v15(), utils.Prehashed(algorithm))
        elif key.algorithm == EDDSA and isinstance(key.material, bytes):
            if len(signature.values) != 2 or any(len(v) > 32 for v in signature.values):
                raise Unverified("an EdDSA signature holds two 32-byte numbers")
            r, s = (value.rjust(32, b"\0") for value in signature.values)
            Ed25519PublicKey.from_public_bytes(key.material).verify(r + s, digest)
        else:
            raise Unverified(f"public-key algorithm {key.algorithm} is not accepted")
    except InvalidSignature as exc:
        raise Unverified("the signature does not verify (the text or the signature was altered)") from exc


# -- the cleartext framework ----------------------------------------------------------------


def _split(data: bytes) -> tuple[list[str], bytes]:
    """The message's lines (dash-escaping undone, trailing blanks kept) and the signature block."""
    try:
        lines = data.decode("utf-8").split("\n")
    except UnicodeDecodeError as exc:
        raise Unverified("the message is not UTF-8") from exc
    lines = [line.removesuffix("\r") for line in lines]
    if not lines or lines[0].rstrip(" \t") != BEGIN_MESSAGE:
        raise Unverified(f"it does not start with {BEGIN_MESSAGE}")
    at = 1
    while at < len(lines) and lines[at].strip(" \t"):
        if not lines[at].startswith("Hash: "):
            raise Unverified("an armor header other than Hash:")
        at += 1
    at += 1
    body: list[str] = []
    while True:
        if at >= len(lines):
            raise Unverified(f"no {BEGIN_SIGNATURE} line")
        line = lines[at]
        at += 1
        if line.rstrip(" \t") == BEGIN_SIGNATURE:
            break
        if line.startswith("- "):
            line = line[2:]
        elif line.startswith("-"):
            raise Unverified("a line starting with '-' that is not dash-escaped")
        body.append(line)
    while at < len(lines) and lines[at].strip(" \t"):
        if ":" not in lines[at]:
            break  # no armor headers: the base64 starts here (a blank line is required, but
            # some writers omit it; the checksum and the packets are still checked)
        at += 1
    armored: list[str] = []
    ended = False
    for line in lines[at:]:
        text = line.strip(" \t")
        if ended:
            if text:
                raise Unverified(f"text after {END_SIGNATURE}")
            continue
        if text == END_SIGNATURE:
            ended = True
        elif text:
            armored.append(text)
    if not ended:
        raise Unverified(f"no {END_SIGNATURE} line (the signature is truncated)")
    return body, _decode(armored, "signature block")


def _decode(armored: list[str], what: str) -> bytes:
    """The packets of an armored block's base64 lines, its `=` checksum (if any) checked."""
    checksum = None
    if armored and armored[-1].startswith("="):
        checksum = armored.pop()
    try:
        packets = base64.b64decode("".join(armored), validate=True)
    except (binascii.Error, ValueError) as exc:
        raise Unverified(f"the {what} is not base64") from exc
    if checksum is not None and checksum[1:] != base64.b64encode(_crc24(packets)).decode():
        raise Unverified(f"the {what}'s checksum does not match (it was altered)")
    return packets


def _binary(data: bytes) -> bool:
    """Packets, not armor: every packet's first octet has its high bit set, no ASCII does."""
    return bool(data) and bool(data[0] & 0x80)


def dearmor(data: bytes, kind: str) -> bytes:
    """The packets of one ASCII-armored block `-----BEGIN PGP <kind>-----` (RFC 4880
    section 6.2): armor headers (`Version:`, `Comment:`) skipped, the checksum checked,
    nothing but blank lines before the BEGIN line or after the END line."""
    if len(data) > MAX_ARMORED_BYTES:
        raise Unverified(f"the armored {kind.lower()} is larger than {MAX_ARMORED_BYTES} bytes")
    try:
        lines = [line.strip(" \t\r") for line in data.decode("ascii").split("\n")]
    except UnicodeDecodeError as exc:
        raise Unverified(f"the armored {kind.lower()} is not ASCII") from exc
    begin, end = f"-----BEGIN PGP {kind}-----", f"-----END PGP {kind}-----"
    at = 0
    while at < len(lines) and not lines[at]:
        at += 1
    if at >= len(lines) or lines[at] != begin:
        raise Unverified(f"it does not start with {begin}")
    at += 1
    while at < len(lines) and lines[at] and ":" in lines[at]:
        at += 1  # armor headers
    if end not in lines[at:]:
        raise Unverified(f"no {end} line (the block is truncated)")
    stop = lines.index(end, at)
    armored = [line for line in lines[at:stop] if line]
    if any(lines[stop + 1:]):
        raise Unverified(f"text after {end}")
    return _decode(armored, kind.lower())


def _crc24(data: bytes) -> bytes:
    crc = 0xB704CE
    for octet in data:
        crc ^= octet << 16
        for _ in range(8):
            crc <<= 1
            if crc & 0x1000000:
                crc ^= 0x1864CFB
    return (crc & 0xFFFFFF).to_bytes(3, "big")


def _verify(packets: bytes, keys: Iterable[PublicKey], signed: bytes, now: float,
            kind: int) -> tuple[PublicKey, Signature]:
    """The first signature packet of type `kind` over `signed` that verifies with one of
    `keys`, and its key; Unverified naming every failure otherwise."""
    by_fpr = {key.fingerprint: key for key in keys}
    failures: list[str] = []
    packet_bodies = [packet for tag, packet in _packets(packets) if tag == TAG_SIGNATURE]
    if not packet_bodies:
        raise Unverified("the signature block holds no signature")
    for packet in packet_bodies[:MAX_SIGNATURES]:
        # A signature this reader cannot parse (a v6 one, say, which Debian may add beside
        # its v4 ones) counts for nothing, like one by an unpinned key; it voids no other.
        try:
            signature = parse_signature(packet)
        except Unverified as exc:
            failures.append(f"a signature: {exc}")
            continue
        if signature.issuer_fingerprint is not None:
            candidates = [by_fpr[signature.issuer_fingerprint]] if signature.issuer_fingerprint in by_fpr else []
        else:
            candidates = [k for k in by_fpr.values() if k.key_id == signature.issuer_key_id]
        issuer = signature.issuer_fingerprint or signature.issuer_key_id or "an unnamed key"
        if not candidates:
            failures.append(f"{issuer}: not a pinned key")
            continue
        for key in candidates:
            try:
                _check(signature, key, signed, now, kind)
            except Unverified as exc:
                failures.append(f"{issuer}: {exc}")
                continue
            return key, signature
    raise Unverified("no signature verified: " + "; ".join(failures))


def verify_cleartext(data: bytes, keys: Iterable[PublicKey], now: float) -> Verified:
    """The signed text, if a signature by one of `keys` verifies; Unverified otherwise."""
    body, packets = _split(data)
    lines = [line.rstrip(" \t") for line in body]
    canonical = "\r\n".join(lines).encode("utf-8")
    key, signature = _verify(packets, keys, canonical, now, 0x01)
    return Verified("\n".join(lines), key.fingerprint, signature.created or 0)


def verify_detached(data: bytes, signature: bytes, keys: Iterable[PublicKey], now: float) -> Verified:
    """Returns when a binary-document signature (0x00) in `signature` (armored, as an
    `.asc`, or binary, as a `.sig`) by one of `keys` verifies over exactly `data`;
    Unverified otherwise. The Verified's text is empty: the caller has the bytes."""
    packets = signature if _binary(signature) else dearmor(signature, "SIGNATURE")
    key, parsed = _verify(packets, keys, data, now, 0x00)
    return Verified("", key.fingerprint, parsed.created or 0)
