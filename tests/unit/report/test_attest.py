"""report/attest.py: the statement is an in-toto Statement v1 with a SLSA Provenance v1
predicate (validated by in-toto's own bindings, in-toto-attestation on PyPI, parsing every
field strictly into the published protobuf messages), DSSE's PAE is the spec's, and keys
are read as the module docstring says, never printed."""

from __future__ import annotations

import base64
import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa
from cryptography.hazmat.primitives.serialization import (
    BestAvailableEncryption,
    Encoding,
    NoEncryption,
    PrivateFormat,
    PublicFormat,
)
from google.protobuf import json_format
from in_toto_attestation.predicates.provenance.v1 import provenance_pb2
from in_toto_attestation.v1 import statement_pb2
from in_toto_attestation.v1.resource_descriptor import ResourceDescriptor
from in_toto_attestation.v1.statement import Statement

from roteiro_py.errors import AttestationRefused, AttestKeyUnusable
from roteiro_py.report import attest
from tests.data.realcargo import make_report

TREE = {"name": "tree", "digest": {"gitCommit": "a" * 40, "gitTree": "b" * 40,
                                   "roteiro-tree-v1": "c" * 64}}
ASSETS = ({"name": "kernel", "digest": {"sha256": "d" * 64},
           "annotations": {"package": "linux-image-6.1.0-40-amd64", "version": "6.1.153-1",
                           "index": {"archive": "http://deb.debian.org/debian", "suite": "bookworm"}}},
          {"name": "initramfs", "digest": {"sha256": "e" * 64}})


def facts(**changes: Any) -> attest.Facts:
    base: dict[str, Any] = {"request": {"analyzer": "clippy", "path": ".", "flags": {"--fail-on": "warning"}},
                            "memory_mib": 2048, "cpus": 2, "timeout_s": 900, "tree": TREE,
                            "lockfile_sha256": "f" * 64, "assets": ASSETS}
    return attest.Facts(**(base | changes))


def a_statement() -> dict[str, Any]:
    report = make_report([])
    return attest.statement([attest.subject("clippy.sarif", b"{}"), attest.subject("report.json", b"[]")],
                            attest.provenance(report, facts()))


def validate(statement: dict[str, Any]) -> None:
    """in-toto's bindings: the statement and its predicate parsed strictly (an unknown
    field or a wrong type raises), then the Statement's and each descriptor's own checks."""
    message = json_format.ParseDict(statement, statement_pb2.Statement())
    Statement.copy_from_pb(message).validate()
    predicate = json_format.ParseDict(statement["predicate"], provenance_pb2.Provenance())
    for dependency in predicate.build_definition.resolved_dependencies:
        ResourceDescriptor.copy_from_pb(dependency).validate()
    assert predicate.build_definition.build_type == attest.BUILD_TYPE
    assert predicate.run_details.metadata.started_on.seconds > 0


def test_the_statement_validates_against_in_totos_statement_and_slsa_provenance_v1() -> None:
    statement = a_statement()
    validate(statement)
    assert statement["_type"] == "https://in-toto.io/Statement/v1"
    assert statement["predicateType"] == "https://slsa.dev/provenance/v1"
    definition = statement["predicate"]["buildDefinition"]
    assert definition["internalParameters"]["isolation"]["accelerator"] == "kvm"  # the report's record
    names = [d["name"] for d in definition["resolvedDependencies"]]
    assert names == ["image", "kernel", "initramfs", "toolchain", "Cargo.lock", "tree"]
    # what it validates is a statement: control, the validator refuses a broken one
    broken = a_statement()
    broken["predicate"]["runDetails"]["metadata"]["startedOn"] = "yesterday"
    with pytest.raises(json_format.ParseError):
        validate(broken)
    broken = a_statement()
    broken["predicate"]["buildDefinition"]["buildTyp"] = "x"
    with pytest.raises(json_format.ParseError):
        validate(broken)
    broken = a_statement()
    broken["subject"] = []
    with pytest.raises(ValueError, match="subject"):
        validate(broken)


def test_pae_is_the_dsse_specs_own_example() -> None:
    # github.com/secure-systems-lab/dsse protocol.md, "Test vectors"
    assert attest.pae("http://example.com/HelloWorld", b"hello world") == \
        b"DSSEv1 29 http://example.com/HelloWorld 11 hello world"


def test_a_signed_envelope_opens_with_its_key_and_with_no_other() -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    payload = attest.encode(a_statement())
    envelope = attest.sign(payload, key)
    signature = base64.b64decode(envelope["signatures"][0]["sig"])
    key.public_key().verify(signature, attest.pae(attest.PAYLOAD_TYPE, payload))  # over the PAE
    assert attest.open_envelope(envelope, key.public_key(), "x") == (payload, True)
    with pytest.raises(AttestationRefused, match="no signature in it verifies"):
        attest.open_envelope(envelope, ed25519.Ed25519PrivateKey.generate().public_key(), "x")
    tampered = dict(envelope, payload=base64.b64encode(payload.replace(b"kvm", b"tcg")).decode())
    with pytest.raises(AttestationRefused, match="no signature in it verifies"):
        attest.open_envelope(tampered, key.public_key(), "x")


def write_key(path: Path, key: Any, fmt: PrivateFormat, password: bytes | None = None) -> Path:
    encryption = BestAvailableEncryption(password) if password else NoEncryption()
    path.write_bytes(key.private_bytes(Encoding.PEM, fmt, encryption))
    return path


def test_keys_are_read_in_pem_and_openssh_form_and_ssh_keygens(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    raw = key.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw)
    for name, fmt in (("pkcs8", PrivateFormat.PKCS8), ("openssh", PrivateFormat.OpenSSH)):
        loaded = attest.load_private_key(write_key(tmp_path / name, key, fmt))
        assert loaded.public_key().public_bytes(Encoding.Raw, PublicFormat.Raw) == raw
    pub = tmp_path / "k.pub"
    pub.write_bytes(key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH))
    assert attest.load_public_key(pub).public_bytes(Encoding.Raw, PublicFormat.Raw) == raw
    pub.write_bytes(key.public_key().public_bytes(Encoding.PEM, PublicFormat.SubjectPublicKeyInfo))
    assert attest.load_public_key(pub).public_bytes(Encoding.Raw, PublicFormat.Raw) == raw


@pytest.mark.skipif(shutil.which("ssh-keygen") is None, reason="needs OpenSSH's ssh-keygen")
def test_the_key_pair_readme_tells_users_to_make_signs_and_verifies(tmp_path: Path) -> None:
    made = tmp_path / "attest-key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(made)], check=True)
    signed = attest.sign(b"x", attest.load_private_key(made))
    assert attest.open_envelope(signed, attest.load_public_key(made.with_suffix(".pub")), "x")[1]


def test_an_unusable_key_is_refused_by_name_and_never_quoted(tmp_path: Path) -> None:
    key = ed25519.Ed25519PrivateKey.generate()
    secret = write_key(tmp_path / "enc", key, PrivateFormat.PKCS8, b"pass")
    with pytest.raises(AttestKeyUnusable, match="encrypted"):
        attest.load_private_key(secret)
    rsa_key = write_key(tmp_path / "rsa", rsa.generate_private_key(public_exponent=65537, key_size=2048),
                        PrivateFormat.PKCS8)
    with pytest.raises(AttestKeyUnusable, match="not an Ed25519 key"):
        attest.load_private_key(rsa_key)
    plain = write_key(tmp_path / "plain", key, PrivateFormat.PKCS8)
    with pytest.raises(AttestKeyUnusable, match="a private key; give its public half") as refused:
        attest.load_public_key(plain)
    body = b"".join(plain.read_bytes().splitlines()[1:-1]).decode()
    assert body not in str(refused.value) and body[:16] not in str(refused.value.guidance())
    (tmp_path / "link").symlink_to("/dev/zero")
    with pytest.raises(AttestKeyUnusable, match="not a regular file"):
        attest.load_private_key(tmp_path / "link")


def test_the_encoding_is_one_per_statement() -> None:
    statement = a_statement()
    shuffled = json.loads(json.dumps(statement))
    shuffled = dict(reversed(list(shuffled.items())))
    assert attest.encode(statement) == attest.encode(shuffled)
