"""`pylint-sandbox verify REPORT... --attestation FILE [--key PUB] [--require K=V]...`: is
this report what the attested run wrote, and was that run what the policy asks for?
And `pylint-sandbox tree-digest PATH`: the attested content digest of a worktree, recomputed.

What `verify` checks, in order, each failure an errors.AttestationRefused (exit 3):
1. The attestation is at most MAX_ATTESTATION_BYTES of JSON: a DSSE envelope (report/attest.py
   `open_envelope`; with `--key`, a signature must verify over the DSSE PAE) or, without
   `--key`, a bare statement. `--key` given and a bare statement found: refused (nothing
   is signed). No `--key`: a usage error (exit 2) unless `--allow-unsigned` says the
   statement's authenticity is checked elsewhere (a CI system that signed it: `gh
   attestation verify`); then the output says on its first line that it was not checked.
   Without that flag a gate reading only the exit status would pass a statement anyone
   could have written.
2. The statement is an in-toto Statement v1 with a SLSA Provenance v1 predicate of our
   buildType, every subject a name and a sha256.
3. Every REPORT's sha256 (read without following a link, at most MAX_REPORT_BYTES) is a
   subject's: a report changed after the run, or another run's, is refused by name.
4. Each `--require`: `image=sha256:<hex>` (the image's manifest digest), `isolation=kvm`
   or `isolation=tcg` (the accelerator the job's backend obtained; kvm also needs it to
   have been hardware-isolated), `commit=<40 hex>` (the tree's gitCommit, present only for a
   clean checkout). An unknown requirement is a usage error (exit 2).

Then the provenance is printed, every value from the file escaped (untrusted.sanitise):
the attestation and the reports are the input of a gate and may be hostile.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from roteiro_py.errors import AttestationRefused, UsageError
from roteiro_py.report.attest import (
    BUILD_TYPE,
    PROVENANCE_TYPE,
    STATEMENT_TYPE,
    is_envelope,
    load_public_key,
    open_envelope,
)
from roteiro_py.untrusted import FileRefused, read_bounded, sanitise

#: An attestation of one run is a few KiB; past this it is not one of ours.
MAX_ATTESTATION_BYTES = 4 * 1024 * 1024
#: A report is hashed as it is read, never held: a SARIF file of the report's cap of
#: findings stays well under this.
MAX_REPORT_BYTES = 1024 * 1024 * 1024
#: Subjects one statement may name (a run writes at most lint/output.py MAX_TARGETS files).
MAX_SUBJECTS = 64
#: At most this many of a dependency's annotations are printed (ours carry fewer).
MAX_NOTES_SHOWN = 8
#: The requirements `--require` knows.
REQUIREMENTS = ("image", "isolation", "commit")
_HEX64 = re.compile(r"[0-9a-f]{64}")
_COMMIT = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")


@dataclass(frozen=True)
class VerifyRequest:
    reports: tuple[Path, ...]
    attestation: Path
    key: Path | None = None
    requires: tuple[str, ...] = ()
    #: `--allow-unsigned`: no `--key`, knowingly (the signature is checked elsewhere).
    allow_unsigned: bool = False


@dataclass(frozen=True)
class Verified:
    statement: Mapping[str, Any]
    signed: bool


def parse_requires(given: Sequence[str]) -> list[tuple[str, str]]:
    """Each `--require KEY=VALUE`, checked as written (a UsageError says what is wrong)."""
    parsed = []
    for text in given:
        name, equals, value = text.partition("=")
        if not equals or name not in REQUIREMENTS or not value:
            raise UsageError(f"--require {text}: expected one of "
                             + ", ".join(f"{n}=VALUE" for n in REQUIREMENTS) + ".",
                             hint="For example --require isolation=kvm --require "
                             "image=sha256:<64 hex>.")
        if name == "image" and not (value.startswith("sha256:")
                                    and _HEX64.fullmatch(value.removeprefix("sha256:"))):
            raise UsageError(f"--require {text}: an image is named by its manifest digest, "
                             "sha256:<64 lowercase hex>.")
        if name == "isolation" and value not in ("kvm", "tcg"):
            raise UsageError(f"--require {text}: isolation is kvm or tcg.")
        if name == "commit" and not _COMMIT.fullmatch(value):
            raise UsageError(f"--require {text}: a commit is its full id (40 or 64 lowercase hex).")
        parsed.append((name, value))
    return parsed


def verify(request: VerifyRequest) -> Verified:
    """The checks of the module docstring; the statement, once every one has passed."""
    requires = parse_requires(request.requires)
    if request.key is None and not request.allow_unsigned:
        raise UsageError("verify was given no --key: nothing would check who wrote the "
                         "attestation, and its exit status would gate on a file anyone can write.",
                         hint="Give --key PUB (the Ed25519 public key of --attest-key), or "
                         "--allow-unsigned where the statement's signature is checked elsewhere "
                         "(gh attestation verify, for the Action's actions/attest).")
    if request.key is not None and request.allow_unsigned:
        raise UsageError("--allow-unsigned and --key contradict each other: with a key the "
                         "signature must verify.")
    key = load_public_key(request.key) if request.key is not None else None
    shown = f"the attestation {request.attestation}"
    document = _json(_read(request.attestation, MAX_ATTESTATION_BYTES, shown), shown)
    if is_envelope(document):
        payload, signed = open_envelope(document, key, shown)
        statement = _json(payload, shown + "'s payload")
    elif key is not None:
        raise AttestationRefused(shown, "it is a bare statement, not a signed DSSE envelope, "
                                 "so --key has nothing to verify",
                                 hint="Attest with --attest-key KEY, or verify with --allow-unsigned "
                                 "where a CI system's own attestation is checked.")
    else:
        statement, signed = document, False
    subjects = _checked_statement(statement, shown)
    for report in request.reports:
        digest = _sha256_of(report)
        if digest not in subjects:
            raise AttestationRefused(f"the report {report}", f"its sha256 {digest} is not a "
                                     "subject of the attestation: it was changed after the run, "
                                     "or another run wrote it")
    for name, value in requires:
        _require(statement["predicate"], name, value)
    return Verified(statement, signed)


def _read(path: Path, limit: int, shown: str) -> bytes:
    try:
        return read_bounded(path, limit, follow_links=True)
    except FileNotFoundError:
        raise AttestationRefused(shown, "no such file") from None
    except FileRefused as refused:
        raise AttestationRefused(shown, refused.reason) from None


def _json(data: bytes, shown: str) -> Any:
    try:
        return json.loads(data)
    except (ValueError, RecursionError):
        raise AttestationRefused(shown, "it is not JSON") from None


def _checked_statement(statement: Any, shown: str) -> set[str]:
    """The sha256 digests of the subjects of a well-formed statement of ours."""
    if not isinstance(statement, dict) or statement.get("_type") != STATEMENT_TYPE:
        raise AttestationRefused(shown, f"it is not an in-toto statement ({STATEMENT_TYPE})")
    if statement.get("predicateType") != PROVENANCE_TYPE:
        raise AttestationRefused(shown, f"its predicate is not SLSA provenance ({PROVENANCE_TYPE})")
    predicate = statement.get("predicate")
    definition = predicate.get("buildDefinition") if isinstance(predicate, dict) else None
    if not isinstance(definition, dict) or definition.get("buildType") != BUILD_TYPE:
        raise AttestationRefused(shown, f"its buildType is not {BUILD_TYPE}")
    subjects = statement.get("subject")
    if not isinstance(subjects, list) or not 0 < len(subjects) <= MAX_SUBJECTS:
        raise AttestationRefused(shown, f"it names no subject, or more than {MAX_SUBJECTS}")
    digests = set()
    for entry in subjects:
        digest = entry.get("digest") if isinstance(entry, dict) else None
        value = digest.get("sha256") if isinstance(digest, dict) else None
        if not isinstance(value, str) or not _HEX64.fullmatch(value):
            raise AttestationRefused(shown, "a subject has no sha256 digest")
        digests.add(value)
    return digests


def _sha256_of(path: Path) -> str:
    """The sha256 of the regular file `path`, read without following a link, bounded."""
    shown = f"the report {path}"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise AttestationRefused(shown, "no such file") from None
    except OSError as error:
        raise AttestationRefused(shown, f"it cannot be opened ({error.strerror})") from None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise AttestationRefused(shown, "it is not a regular file")
        digest = hashlib.sha256()
        size = 0
        while chunk := os.read(fd, 1 << 20):
            size += len(chunk)
            if size > MAX_REPORT_BYTES:
                raise AttestationRefused(shown, f"it is larger than {MAX_REPORT_BYTES} bytes")
            digest.update(chunk)
        return digest.hexdigest()
    finally:
        os.close(fd)


def _dependency(predicate: Mapping[str, Any], name: str) -> Mapping[str, Any]:
    dependencies = predicate["buildDefinition"].get("resolvedDependencies")
    for entry in dependencies if isinstance(dependencies, list) else ():
        if isinstance(entry, dict) and entry.get("name") == name:
            return entry
    return {}


def _require(predicate: Mapping[str, Any], name: str, value: str) -> None:
    what = f"--require {name}={value}"
    if name == "image":
        digest = _dependency(predicate, "image").get("digest")
        found = digest.get("sha256") if isinstance(digest, dict) else None
        if f"sha256:{found}" != value:
            raise AttestationRefused(what, f"the run's image was sha256:{found}")
    elif name == "isolation":
        internal = predicate["buildDefinition"].get("internalParameters")
        isolation = internal.get("isolation") if isinstance(internal, dict) else None
        accelerator = isolation.get("accelerator") if isinstance(isolation, dict) else None
        hardware = isolation.get("hardwareIsolated") if isinstance(isolation, dict) else None
        if accelerator != value or (value == "kvm" and hardware is not True):
            raise AttestationRefused(what, f"the run was isolated by {accelerator} "
                                     + ("(hardware-isolated)" if hardware is True else
                                        "(software emulation, not a security boundary)"))
    elif name == "commit":
        digest = _dependency(predicate, "tree").get("digest")
        found = digest.get("gitCommit") if isinstance(digest, dict) else None
        if found != value:
            raise AttestationRefused(what, f"the tree linted was commit {found}" if found else
                                     "the tree linted was not a clean git checkout (no commit "
                                     "is attested, only its content digest)")


def describe(verified: Verified, reports: Sequence[Path]) -> list[str]:
    """What `verify` prints: the verdict, then the provenance, each value escaped."""
    statement = verified.statement
    predicate = statement["predicate"]
    definition = predicate["buildDefinition"]
    lines = ["signature: verified with the key given" if verified.signed else
             "signature: NOT checked (no --key): anyone could have written this statement"]
    lines += [f"report: {_s(report)} is a subject" for report in reports]
    internal = definition.get("internalParameters")
    if isinstance(internal, dict):
        isolation = internal.get("isolation")
        if isinstance(isolation, dict):
            lines.append(f"isolation: {_s(isolation.get('backend'))} {_s(isolation.get('accelerator'))}"
                         f" ({_s(isolation.get('description'))})")
        lines.append(f"grant: memory {_s(internal.get('memoryMib'))} MiB, cpus "
                     f"{_s(internal.get('cpus'))}, deadline {_s(internal.get('timeoutSeconds'))} s, "
                     f"network {_s(internal.get('network'))}, worktree {_s(internal.get('worktree'))}")
    dependencies = definition.get("resolvedDependencies")
    for entry in dependencies if isinstance(dependencies, list) else ():
        if isinstance(entry, dict):
            digest = entry.get("digest")
            shown = " ".join(f"{_s(k)}:{_s(v)}" for k, v in sorted(digest.items())) \
                if isinstance(digest, dict) else ""
            notes = entry.get("annotations")
            said = ", ".join(f"{_s(k)} {_s(v)}" for k, v in sorted(notes.items())[:MAX_NOTES_SHOWN]
                             if isinstance(v, str | int | bool)) if isinstance(notes, dict) else ""
            lines.append(f"{_s(entry.get('name'))}: " + " ".join(
                part for part in (_s(entry.get("uri")) if entry.get("uri") else "", shown,
                                  f"({said})" if said else "") if part))
    details = predicate.get("runDetails")
    details = details if isinstance(details, dict) else {}
    metadata = details.get("metadata")
    if isinstance(metadata, dict):
        lines.append(f"ran: {_s(metadata.get('startedOn'))} to {_s(metadata.get('finishedOn'))}")
    byproducts = details.get("byproducts")
    for entry in byproducts if isinstance(byproducts, list) else ():
        if not isinstance(entry, dict) or entry.get("name") != "findings":
            continue
        notes = entry.get("annotations")
        if isinstance(notes, dict):
            counts = notes.get("counts")
            levels = ", ".join(f"{_s(level)} {_s(count)}" for level, count in sorted(counts.items())
                               [:MAX_NOTES_SHOWN]) if isinstance(counts, dict) else ""
            lines.append(f"findings: {_s(notes.get('total'))} ({levels}), build succeeded "
                         f"{_s(notes.get('buildSucceeded'))}")
    return lines


def _s(value: object) -> str:
    return sanitise(str(value), limit=200)


def run_verify(request: VerifyRequest) -> int:
    verified = verify(request)
    sys.stdout.write("".join(line + "\n" for line in describe(verified, request.reports)))
    return 0


def run_tree_digest(path: Path) -> int:
    """`tree-digest PATH`: the digest `lint clippy --attest` records for a tree it staged."""
    # lazy: vm/ (the staging rules and their settings) only for this verb
    from roteiro_py import config
    from roteiro_py.vm.disks.share_image import StageLimits
    from roteiro_py.vm.disks.tree_digest import ALGORITHM, tree_digest

    if not path.is_dir():
        raise UsageError(f"tree-digest {sanitise(str(path))}: not a directory.")
    # the [vm] stage limits the lint copied under (user config, roteiro.toml, environment):
    # with the defaults, a tree the lint copied under raised limits would be refused here
    result = tree_digest(path, StageLimits.of(config.resolve(path).settings.vm))
    sys.stdout.write(f"{result.digest}  {ALGORITHM}  ({result.files} files, {result.dirs} "
                     f"directories, {result.symlinks} links)\n")
    return 0
