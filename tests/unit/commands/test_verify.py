"""`pylint-sandbox verify`: reports and an attestation written by the lint's own writer
(lint/attestation.py `write_attestation`, from a real report rendered as the lint renders
it) are accepted; a tampered report, a swapped subject, a wrong key, an unmet `--require`
and a hostile attestation are each refused with exit 3 and a sentence saying why; the
provenance printed is escaped."""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest
from cryptography.hazmat.primitives.asymmetric import ed25519
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat
from typer.testing import CliRunner

from roteiro_py.cli import app as cli
from roteiro_py.commands.verify import VerifyRequest, describe
from roteiro_py.commands.verify import verify as verify_core
from roteiro_py.errors import AttestationRefused, UsageError
from roteiro_py.lint.attestation import check_attest, write_attestation
from roteiro_py.lint.output import Target
from roteiro_py.report import attest
from roteiro_py.report.model import Isolation
from roteiro_py.report.render import render
from tests.data.realcargo import DIGEST, make_report
from tests.unit.report.test_attest import facts

COMMIT = "1" * 40


def lint_outputs(tmp_path: Path, *, accelerator: str = "kvm", signed: bool = True,
                 description: str = "QEMU microvm with KVM, no network",
                 tree: dict[str, Any] | None = None) -> dict[str, Path]:
    """What a lint with --format sarif=... --format json=... --attest ... writes."""
    report = make_report([]).model_copy(update={"isolation": Isolation(
        backend="qemu", accelerator=accelerator, hardware_isolated=accelerator == "kvm",
        description=description)})
    files = {"sarif": tmp_path / "clippy.sarif", "json": tmp_path / "report.json"}
    rendered = []
    for fmt, path in files.items():
        text = render(report, fmt)  # type: ignore[arg-type]
        path.write_text(text)  # as deliver() writes them
        rendered.append((Target(fmt, path, f"--format {fmt}={path}"), text))
    key = ed25519.Ed25519PrivateKey.generate()
    (tmp_path / "key").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    (tmp_path / "key.pub").write_bytes(key.public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH))
    signer = check_attest(tmp_path / "att.json", tmp_path / "key" if signed else None,
                          [target for target, _ in rendered])
    tree_ = tree or {"name": "tree", "digest": {"gitCommit": COMMIT, "roteiro-tree-v1": "c" * 64}}
    write_attestation(report, facts(tree=tree_), rendered, tmp_path / "att.json", signer)
    return {**files, "attestation": tmp_path / "att.json", "pub": tmp_path / "key.pub"}


def verify(files: dict[str, Path], *extra: str, key: bool = True) -> tuple[int, str]:
    args = ["verify", str(files["sarif"]), str(files["json"]), "--attestation", str(files["attestation"])]
    args += ["--key", str(files["pub"])] if key else ["--allow-unsigned"]
    result = CliRunner().invoke(cli.app, [*args, *extra])
    return result.exit_code, " ".join(result.output.split())


def test_the_lints_reports_and_signed_attestation_are_accepted(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path)
    code, out = verify(files, "--require", "isolation=kvm", "--require", f"image={DIGEST}",
                       "--require", f"commit={COMMIT}")
    assert code == 0, out
    assert "signature: verified with the key given" in out
    assert "clippy.sarif is a subject" in out and "report.json is a subject" in out
    assert "isolation: qemu kvm" in out and f"image: oci://registry.example/team/clippy:1.95 sha256:{DIGEST[7:]}" in out
    assert "toolchain: pkg:generic/rustc@1.95.0 (clippy 0.1.95," in out
    assert "kernel: sha256:" + "d" * 64 + " (package linux-image-6.1.0-40-amd64, version 6.1.153-1)" in out
    assert "findings: 0 (error 0, help 0, note 0, warning 0), build succeeded True" in out


def test_a_tampered_report_is_refused(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path)
    files["sarif"].write_text(files["sarif"].read_text().replace('"results": []', '"results": [] '))
    code, out = verify(files)
    assert code == 3
    assert "Refused the report" in out and "clippy.sarif" in out
    assert "is not a subject of the attestation: it was changed after the run" in out


def test_a_swapped_subject_breaks_the_signature(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path)
    files["sarif"].write_text(files["sarif"].read_text() + " ")  # the attacker's SARIF
    envelope = json.loads(files["attestation"].read_text())
    statement = json.loads(base64.b64decode(envelope["payload"]))
    statement["subject"][0]["digest"]["sha256"] = attest.subject("x", files["sarif"].read_bytes())["digest"]["sha256"]
    envelope["payload"] = base64.b64encode(attest.encode(statement)).decode()
    files["attestation"].write_text(json.dumps(envelope))
    code, out = verify(files)
    assert code == 3 and "no signature in it verifies with the key given" in out
    # and unsigned, the same swap is only as good as no --key: verify says it checked nothing
    files["attestation"].write_text(json.dumps(statement))
    code, out = verify(files, key=False)
    assert code == 0 and "signature: NOT checked (no --key)" in out
    code, out = verify(files)  # a key asks for a signature, and a bare statement has none
    assert code == 3 and "it is a bare statement, not a signed DSSE envelope" in out


def test_a_wrong_key_is_refused(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path)
    other = ed25519.Ed25519PrivateKey.generate().public_key()
    files["pub"].write_bytes(other.public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH))
    code, out = verify(files)
    assert code == 3 and "signed by another key" in out


def test_a_tcg_run_is_refused_by_require_isolation_kvm(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path, accelerator="tcg", description="QEMU microvm, TCG")
    code, out = verify(files, "--require", "isolation=kvm")
    assert code == 3
    assert "Refused --require isolation=kvm: the run was isolated by tcg (software emulation" in out
    assert verify(files, "--require", "isolation=tcg")[0] == 0  # control: what it was is accepted


@pytest.mark.parametrize(("require", "said"), [
    (f"image=sha256:{'0' * 64}", f"the run's image was {DIGEST}"),
    (f"commit={'2' * 40}", f"the tree linted was commit {COMMIT}"),
])
def test_every_unmet_requirement_is_refused(tmp_path: Path, require: str, said: str) -> None:
    code, out = verify(lint_outputs(tmp_path), "--require", require)
    assert code == 3 and said in out


def test_a_tree_that_was_no_clean_checkout_meets_no_commit_requirement(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path, tree={"name": "tree", "digest": {"roteiro-tree-v1": "c" * 64}})
    code, out = verify(files, "--require", f"commit={COMMIT}")
    assert code == 3 and "was not a clean git checkout" in out


@pytest.mark.parametrize("given", ["isolation=hvf", "image=latest", "commit=abc", "colour=blue", "image"])
def test_a_requirement_wrong_as_written_is_usage(tmp_path: Path, given: str) -> None:
    code, out = verify(lint_outputs(tmp_path), "--require", given)
    assert code == 2 and "--require" in out


def test_hostile_attestations_are_refused_and_their_text_escaped(tmp_path: Path) -> None:
    files = lint_outputs(tmp_path, signed=False, description="evil \x1b]0;owned\x07 ::error::x")
    code, out = verify(files, key=False)
    assert code == 0 and "\x1b" not in out and "\x07" not in out
    files["attestation"].write_bytes(b"[" * 100_000)
    assert verify(files, key=False)[0] == 3
    files["attestation"].write_bytes(b" " * (5 * 1024 * 1024))
    code, out = verify(files, key=False)
    assert code == 3 and "larger than" in out
    files["attestation"].write_text(json.dumps({"_type": "https://in-toto.io/Statement/v1",
                                                "predicateType": "https://slsa.dev/provenance/v1",
                                                "predicate": {"buildDefinition": {"buildType": "x"}}}))
    code, out = verify(files, key=False)
    assert code == 3 and "its buildType is not" in out


def test_the_attestation_needs_a_report_file_and_the_key_needs_an_attestation(tmp_path: Path) -> None:
    printed = [Target("json", None, "--format json")]
    with pytest.raises(UsageError, match="no report is written to a file"):
        check_attest(tmp_path / "att.json", None, printed)
    with pytest.raises(UsageError, match="no --attest FILE was given"):
        check_attest(None, tmp_path / "key", printed)


def _paths(value: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document, as the keys and indices that reach it."""
    found = [at]
    if isinstance(value, dict):
        for key, item in value.items():
            found += _paths(item, (*at, key))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found += _paths(item, (*at, index))
    return found


def test_any_field_of_any_type_is_accepted_or_refused_never_a_crash(tmp_path: Path) -> None:
    """Each place of a real statement replaced by each JSON type in turn: verify answers 0
    or 3, never 4: no exception but the refusal escapes (a crash on hostile input)."""
    files = lint_outputs(tmp_path, signed=False)
    original = json.loads(files["attestation"].read_text())
    answers = set()
    for path in _paths(original)[1:]:
        for replacement in (None, 7, "\x1b[2J", [], {}, [{"x": 1}], True):
            document = json.loads(json.dumps(original))
            place = document
            for key in path[:-1]:
                place = place[key]
            place[path[-1]] = replacement
            files["attestation"].write_text(json.dumps(document))
            request = VerifyRequest(reports=(files["sarif"], files["json"]), attestation=files["attestation"],
                                    requires=("isolation=kvm", f"image={DIGEST}", f"commit={COMMIT}"),
                                    allow_unsigned=True)
            try:  # the verb's core, as run_verify calls it: the CLI costs 5 ms a call more
                out = "".join(describe(verify_core(request), request.reports))
            except AttestationRefused as refused:
                answers.add(3)
                out = str(refused.guidance())
            else:
                answers.add(0)
            assert "\x1b" not in out, (path, replacement)
    assert answers == {0, 3}  # control: some replacements leave an acceptable statement


def test_no_key_is_refused_unless_unsigned_is_allowed_knowingly(tmp_path: Path) -> None:
    """A gate reads the exit status: without --key, a forged bare statement naming the
    reports and meeting every --require would pass (exit 0) unless the user said, with
    --allow-unsigned, that the signature is checked elsewhere."""
    files = lint_outputs(tmp_path, signed=False)
    bare = ["verify", str(files["sarif"]), "--attestation", str(files["attestation"]),
            "--require", "isolation=kvm"]
    refused = CliRunner().invoke(cli.app, bare)
    assert refused.exit_code == 2 and "no --key" in refused.output and "--allow-unsigned" in refused.output
    allowed = CliRunner().invoke(cli.app, [*bare, "--allow-unsigned"])  # control arm
    assert allowed.exit_code == 0 and "signature: NOT checked" in allowed.output
    both = CliRunner().invoke(cli.app, [*bare, "--allow-unsigned", "--key", str(files["pub"])])
    assert both.exit_code == 2 and "contradict" in both.output
