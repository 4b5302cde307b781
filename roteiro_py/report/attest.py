"""A lint's provenance as an in-toto Statement v1 with a SLSA Provenance v1 predicate, and
the DSSE envelope that signs it with an Ed25519 key (docs/ATTESTATION.md says what each
field means, what it proves and what it does not).

Why: the report already says which image, toolchain and isolation produced it, but as
text in a file anyone can write. The statement binds those facts to the digests of the
report files the run wrote (its subjects), and a signature binds the statement to a key;
`pylint-sandbox verify` (commands/verify.py) checks both.

What this module guarantees:
- The statement is assembled from the report the run built (report/model.py) and the
  facts the conductor measured (`Facts`): the isolation is the report's own record of
  what the job's backend obtained, never re-assembled here.
- The DSSE signature is over PAE(payloadType, payload) exactly as the DSSE v1 spec
  defines it (`pae`): `DSSEv1 SP LEN(type) SP type SP LEN(body) SP body`, lengths in
  ASCII decimal; a test checks it against the spec's worked example.
- A key is read through the one bounded reader (untrusted.read_bounded: no link, no FIFO,
  at most MAX_KEY_BYTES), must be Ed25519 and unencrypted, and its bytes are never printed:
  a refusal names the file and what is wrong with it.
- `open_envelope` reads an envelope as untrusted input: shapes checked, counts bounded,
  base64 strict, and the payload returned only once a signature verifies.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey, Ed25519PublicKey
from cryptography.hazmat.primitives.serialization import (
    Encoding,
    PublicFormat,
    load_pem_private_key,
    load_pem_public_key,
    load_ssh_private_key,
    load_ssh_public_key,
)

from roteiro_py.errors import AttestationRefused, AttestKeyUnusable
from roteiro_py.untrusted import FileRefused, read_bounded

if TYPE_CHECKING:
    from roteiro_py.report.model import Report

STATEMENT_TYPE = "https://in-toto.io/Statement/v1"
PROVENANCE_TYPE = "https://slsa.dev/provenance/v1"
#: The DSSE payload type of an in-toto statement (in-toto's envelope.md).
PAYLOAD_TYPE = "application/vnd.in-toto+json"
#: What kind of run produced the subjects: one `lint clippy` in a disposable VM. Versioned:
#: a change in what a field means is a new buildType. Documented in docs/ATTESTATION.md.
BUILD_TYPE = "urn:pylint-sandbox:buildType:lint-clippy:v1"
#: The builder: this tool on the host that ran it (a CI identity signs it in actions/attest).
BUILDER_ID = "urn:pylint-sandbox:builder:local"
#: A key file is a few hundred bytes; a larger one is not a key.
MAX_KEY_BYTES = 16 * 1024
#: At most this many signatures are looked at in one envelope.
MAX_SIGNATURES = 16


@dataclass(frozen=True)
class Facts:
    """What the conductor knew of the run beyond the report: the request as given
    (externalParameters), the grant (memory, cpus, deadline), the tree and its lockfile,
    the guest's kernel and initramfs, each as a resource descriptor."""

    request: Mapping[str, Any]
    memory_mib: int
    cpus: int
    timeout_s: int
    tree: Mapping[str, Any]
    lockfile_sha256: str | None = None
    assets: Sequence[Mapping[str, Any]] = field(default_factory=tuple)


def subject(name: str, data: bytes) -> dict[str, Any]:
    return {"name": name, "digest": {"sha256": hashlib.sha256(data).hexdigest()}}


def provenance(report: Report, facts: Facts) -> dict[str, Any]:
    """The SLSA Provenance v1 predicate of one run (docs/ATTESTATION.md, field by field)."""
    isolation = report.isolation
    internal = {
        "isolation": {"backend": isolation.backend, "accelerator": isolation.accelerator,
                      "hardwareIsolated": isolation.hardware_isolated,
                      "description": isolation.description},
        "network": "none",
        "worktree": "read-only",
        "memoryMib": facts.memory_mib,
        "cpus": facts.cpus,
        "timeoutSeconds": facts.timeout_s,
        "tool": {"name": report.tool.name, "version": report.tool.version},
    }
    provenance_ = report.provenance
    image = {"name": "image", "uri": f"oci://{provenance_.image_reference}",
             "digest": {"sha256": provenance_.image_digest.removeprefix("sha256:")}}
    toolchain = report.toolchain
    rust: dict[str, Any] = {"name": "toolchain", "uri": f"pkg:generic/rustc@{toolchain.rustc_release}",
                            "annotations": {"rustc": toolchain.rustc_release, "host": toolchain.host,
                                            "clippy": toolchain.clippy_version}}
    if toolchain.rustc_commit:
        rust["annotations"]["rustcCommit"] = toolchain.rustc_commit
    if toolchain.clippy_commit:
        rust["annotations"]["clippyCommit"] = toolchain.clippy_commit
    dependencies: list[dict[str, Any]] = [image, *map(dict, facts.assets), rust]
    if facts.lockfile_sha256:
        dependencies.append({"name": "Cargo.lock", "digest": {"sha256": facts.lockfile_sha256}})
    cache = report.dependency_cache
    if cache is not None:
        annotations: dict[str, Any] = {"state": cache.state}
        if cache.key:
            annotations["key"] = cache.key
        dependencies.append({"name": "dependency-cache",
                             "uri": f"urn:pylint-sandbox:dep-cache:{cache.key or 'none'}",
                             "annotations": annotations})
    dependencies.append(dict(facts.tree))
    summary = report.summary
    findings = {"name": "findings", "uri": "urn:pylint-sandbox:findings",
                "annotations": {"counts": dict(summary.counts), "total": summary.total,
                                "buildSucceeded": summary.build_succeeded,
                                "dropped": summary.dropped_findings}}
    return {
        "buildDefinition": {"buildType": BUILD_TYPE, "externalParameters": dict(facts.request),
                            "internalParameters": internal,
                            "resolvedDependencies": dependencies},
        "runDetails": {"builder": {"id": BUILDER_ID,
                                   "version": {report.tool.name: report.tool.version}},
                       "metadata": {"startedOn": _timestamp(report.started),
                                    "finishedOn": _timestamp(report.ended)},
                       "byproducts": [findings]},
    }


def _timestamp(moment: Any) -> str:
    return str(moment.strftime("%Y-%m-%dT%H:%M:%SZ"))


def statement(subjects: Sequence[Mapping[str, Any]], predicate: Mapping[str, Any]) -> dict[str, Any]:
    return {"_type": STATEMENT_TYPE, "subject": [dict(s) for s in subjects],
            "predicateType": PROVENANCE_TYPE, "predicate": dict(predicate)}


def encode(value: Mapping[str, Any]) -> bytes:
    """The statement's bytes: compact, keys sorted, so one statement has one encoding."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=True).encode()


def pae(payload_type: str, payload: bytes) -> bytes:
    """DSSE v1 Pre-Authentication Encoding (github.com/secure-systems-lab/dsse protocol.md)."""
    kind = payload_type.encode()
    return b"DSSEv1 %d %s %d %s" % (len(kind), kind, len(payload), payload)


def keyid(public: Ed25519PublicKey) -> str:
    return "sha256:" + hashlib.sha256(public.public_bytes(Encoding.Raw, PublicFormat.Raw)).hexdigest()


def sign(payload: bytes, key: Ed25519PrivateKey) -> dict[str, Any]:
    """The DSSE envelope of `payload` (an encoded statement), signed by `key`."""
    signature = key.sign(pae(PAYLOAD_TYPE, payload))
    return {"payloadType": PAYLOAD_TYPE, "payload": base64.b64encode(payload).decode(),
            "signatures": [{"keyid": keyid(key.public_key()),
                            "sig": base64.b64encode(signature).decode()}]}


def _key_bytes(path: Path, flag: str) -> bytes:
    try:
        return read_bounded(path, MAX_KEY_BYTES, follow_links=True)
    except FileNotFoundError:
        raise AttestKeyUnusable(flag, path, "no such file") from None
    except FileRefused as refused:
        raise AttestKeyUnusable(flag, path, refused.reason) from None


def load_private_key(path: Path, flag: str = "--attest-key") -> Ed25519PrivateKey:
    """The unencrypted Ed25519 private key in `path` (PEM PKCS#8 or OpenSSH)."""
    data = _key_bytes(path, flag)
    loader = load_ssh_private_key if b"OPENSSH PRIVATE KEY" in data else load_pem_private_key
    try:
        key = loader(data, password=None)
    except TypeError:
        raise AttestKeyUnusable(flag, path, "the key is encrypted; give an unencrypted one "
                                "(keep it where only the signing job can read it)") from None
    except (ValueError, binascii.Error):
        raise AttestKeyUnusable(flag, path, "not a private key in PEM or OpenSSH form") from None
    except Exception:  # noqa: BLE001 - cryptography raises UnsupportedAlgorithm and others
        raise AttestKeyUnusable(flag, path, "not a key this tool can read") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise AttestKeyUnusable(flag, path, "not an Ed25519 key")
    return key


def load_public_key(path: Path, flag: str = "--key") -> Ed25519PublicKey:
    """The Ed25519 public key in `path`: PEM (SubjectPublicKeyInfo) or `ssh-ed25519 ...`."""
    data = _key_bytes(path, flag).strip()
    if b"PRIVATE KEY" in data:
        raise AttestKeyUnusable(flag, path, "a private key; give its public half (never share "
                                "the private one)")
    try:
        key = load_ssh_public_key(data) if data.startswith(b"ssh-") else load_pem_public_key(data)
    except Exception:  # noqa: BLE001 - ValueError, UnsupportedAlgorithm: not a key either way
        raise AttestKeyUnusable(flag, path, "not a public key in PEM or ssh-ed25519 form") from None
    if not isinstance(key, Ed25519PublicKey):
        raise AttestKeyUnusable(flag, path, "not an Ed25519 key")
    return key


def is_envelope(value: object) -> bool:
    return isinstance(value, dict) and "payloadType" in value


def _b64(text: object, what: str, shown: str) -> bytes:
    if not isinstance(text, str):
        raise AttestationRefused(shown, f"its {what} is not a string")
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise AttestationRefused(shown, f"its {what} is not base64") from None


def open_envelope(envelope: Mapping[str, Any], key: Ed25519PublicKey | None,
                  shown: str) -> tuple[bytes, bool]:
    """The payload of a DSSE envelope, and whether a signature by `key` verified (False
    when no key was given: the payload is then returned unauthenticated, and the caller
    says so). Refuses (AttestationRefused) a malformed envelope, and one no signature of
    which verifies with `key`."""
    if envelope.get("payloadType") != PAYLOAD_TYPE:
        raise AttestationRefused(shown, f"its payloadType is not {PAYLOAD_TYPE}")
    payload = _b64(envelope.get("payload"), "payload", shown)
    signatures = envelope.get("signatures")
    if not isinstance(signatures, list) or not signatures:
        raise AttestationRefused(shown, "the envelope carries no signature")
    if len(signatures) > MAX_SIGNATURES:
        raise AttestationRefused(shown, f"the envelope carries more than {MAX_SIGNATURES} signatures")
    if key is None:
        return payload, False
    message = pae(PAYLOAD_TYPE, payload)
    for entry in signatures:
        if not isinstance(entry, dict):
            raise AttestationRefused(shown, "a signature is not an object")
        try:
            key.verify(_b64(entry.get("sig"), "signature", shown), message)
        except InvalidSignature:
            continue
        return payload, True
    raise AttestationRefused(shown, "no signature in it verifies with the key given: it was "
                             "signed by another key, or changed after it was signed",
                             hint="Check that --key is the public half of the key the run "
                             "was given with --attest-key.")
