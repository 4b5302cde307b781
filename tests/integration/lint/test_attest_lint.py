"""A real lint (a TCG guest) with --attest: SARIF + JSON + a signed attestation, which
`verify` accepts with the image and isolation required, refuses with `isolation=kvm` (a TCG
run is attested as TCG), and whose tree digest `tree-digest` recomputes from the worktree."""

from __future__ import annotations

import base64
import json
import subprocess
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat

from tests.integration.lint.lint_support import Image, cli
from tests.unit.report.test_attest import validate


def committed(tree: Path) -> str:
    """`tree` as a clean git checkout (our own fixture: git runs on it here, never in the product)."""
    env = ["-c", "user.name=t", "-c", "user.email=t@example.invalid", "-c", "init.defaultBranch=main"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-qm", "demo"]):
        subprocess.run(["git", *env, "-C", str(tree), *args], check=True, capture_output=True)
    return subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True, capture_output=True,
                          text=True).stdout.strip()


def test_a_real_lint_is_attested_and_verified(demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    commit = committed(demo)
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    (tmp_path / "key.pub").write_bytes(key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH))
    sarif, report, attestation = tmp_path / "clippy.sarif", tmp_path / "clippy.json", tmp_path / "att.json"
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--fail-on", "never",
               "--format", f"sarif={sarif}", "--format", f"json={report}",
               "--attest", str(attestation), "--attest-key", str(tmp_path / "key"))
    assert done.returncode == 0, done.stderr[-3000:]
    assert "PRIVATE KEY" not in done.stdout + done.stderr

    envelope = json.loads(attestation.read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    validate(statement)
    definition = statement["predicate"]["buildDefinition"]
    assert definition["internalParameters"]["isolation"]["accelerator"] == "tcg"
    assert definition["internalParameters"]["isolation"]["hardwareIsolated"] is False
    dependencies = {d["name"]: d for d in definition["resolvedDependencies"]}
    digest = json.loads(report.read_text())["provenance"]["image_digest"]
    assert dependencies["image"]["digest"] == {"sha256": digest.removeprefix("sha256:")}
    assert dependencies["kernel"]["annotations"]["package"].startswith("linux-image-")
    assert dependencies["toolchain"]["annotations"]["clippy"] == "0.1.95"
    assert dependencies["tree"]["digest"]["gitCommit"] == commit
    assert {s["name"] for s in statement["subject"]} == {"clippy.sarif", "clippy.json"}

    accepted = cli("verify", str(sarif), str(report), "--attestation", str(attestation),
                   "--key", str(tmp_path / "key.pub"), "--require", f"image={digest}",
                   "--require", "isolation=tcg", "--require", f"commit={commit}")
    assert accepted.returncode == 0, accepted.stderr
    assert "signature: verified with the key given" in accepted.stdout

    refused = cli("verify", str(sarif), "--attestation", str(attestation), "--key", str(tmp_path / "key.pub"),
                  "--require", "isolation=kvm")
    assert refused.returncode == 3
    assert "the run was isolated by tcg" in " ".join(refused.stderr.split())

    recomputed = cli("tree-digest", str(demo))
    assert recomputed.returncode == 0, recomputed.stderr
    attested = "sha256:" + dependencies["tree"]["digest"]["roteiro-tree-v1"]
    assert recomputed.stdout.split()[0] == attested
    (demo / "src").mkdir(exist_ok=True)
    (demo / "src" / "edited.rs").write_text("// after the lint\n")  # control: the digest sees an edit
    assert cli("tree-digest", str(demo)).stdout.split()[0] != attested
