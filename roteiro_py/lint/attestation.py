"""`lint clippy --attest FILE [--attest-key KEY]`: the run's provenance as an in-toto
statement (report/attest.py builds it; docs/ATTESTATION.md says what it proves).

The stage's three moments, so the conductor stays a conductor:
- `check_attest`, before anything runs: the attestation's file can be written, some
  report goes to a file (the subjects are files: a report printed on stdout has no
  digest anyone can check later), and the key, when given, is an Ed25519 private key
  (a wrong key costs milliseconds, not a VM run).
- `gather`, while the staged copy the guest read still exists: the tree's content digest
  of that copy (vm/disks/tree_digest.py), its Cargo.lock's digest, the kernel and
  initramfs the backend boots (vm/assets/assets.py `asset_descriptors`), the grant.
- `write_attestation`, after the reports were written: subjects are the sha256 of each
  report file's bytes as written, and the statement (or its DSSE envelope) is written
  through the reports' own door (lint/output.py `write_output`). The key is never printed.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from roteiro_py.errors import UsageError
from roteiro_py.lint.output import Target, write_output
from roteiro_py.lint.preflight import check_output
from roteiro_py.untrusted import FileRefused, read_bounded

if TYPE_CHECKING:
    from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

    from roteiro_py import config
    from roteiro_py.lint.tree import Tree
    from roteiro_py.report.attest import Facts
    from roteiro_py.report.model import Report
    from roteiro_py.vm.api import JobOutcome

#: A Cargo.lock larger than this is not hashed from the copy (cargo/ reads it with the same cap).
MAX_LOCKFILE_BYTES = 64 * 1024 * 1024
#: The settings recorded as the request's effective values (externalParameters.settings).
_RECORDED = ("features", "all_features", "no_default_features", "all_targets", "packages",
             "workspace", "exclude", "no_deps", "targets", "target", "levels", "fail_on")


def check_attest(attest: Path | None, key: Path | None,
                 targets: Sequence[Target]) -> Ed25519PrivateKey | None:
    """The refusals of the module docstring's first moment; the signing key, if given."""
    if attest is None:
        if key is not None:
            raise UsageError("--attest-key signs the attestation, and no --attest FILE was given.",
                             hint="Add --attest FILE, or leave out --attest-key.")
        return None
    check_output(attest, shown=f"--attest {attest}")
    if not any(target.path is not None for target in targets):
        raise UsageError(f"--attest {attest}: no report is written to a file, and the "
                         "attestation's subjects are report files.",
                         hint="Write the report with --format FMT=PATH (or --output FILE).")
    if any(target.path is not None and _same_file(Path(target.path), attest) for target in targets):
        raise UsageError(f"--attest {attest} names a report's file.",
                         hint="Give the attestation a file of its own.")
    if key is None:
        return None
    # lazy: report/ (cryptography) and vm/ load only when --attest is given; lint/__init__.py
    # imports this stage at its top, before the first refusals (bench/cli_startup.py)
    from roteiro_py.report.attest import load_private_key

    return load_private_key(key)


def _same_file(one: Path, other: Path) -> bool:
    """Whether two output paths name one file: their directories resolved (`sub/..`, a linked
    directory), their last names compared as given (a final link is replaced on writing,
    lint/output.py `write_output`, never written through)."""
    return (Path(os.path.realpath(one.absolute().parent)) / one.name
            == Path(os.path.realpath(other.absolute().parent)) / other.name)


def request_parameters(path: Path, flags: Mapping[str, tuple[Any, str]], formats: Sequence[str],
                       settings: config.Settings) -> dict[str, Any]:
    """externalParameters: the request as given (the flags set on the command line, by
    their spelling) and the lint settings it resolved to. No secret is among them: a lint
    takes no credential on its command line or in [lint]."""
    given = {spelling: value for value, spelling in flags.values() if value is not None}
    lint = settings.lint
    return {"analyzer": "clippy", "path": str(path), "flags": given, "formats": list(formats),
            "settings": {name: getattr(lint, name) for name in _RECORDED if hasattr(lint, name)}}


def git_commit(tree: Tree) -> tuple[str, str] | str:
    """The (commit, tree) a clean git checkout holding the tree is at, else why there is
    none (lint/vcs.py reads .git as data; no git process runs). Read before the copy is
    staged and again after (`gather`): only a tree clean at the same commit both times, whose
    staged copy is that commit's content file for file (vcs.py `copy_differs`: git calls
    clean a tree holding ignored files or skip-worktree edits, which the copy stages), is
    attested by its commit, so neither an edit during the run nor an ignored file can
    borrow it."""
    # lazy: dulwich loads only for --attest
    from roteiro_py.errors import VcsUnreadable
    from roteiro_py.lint.vcs import git_state

    try:
        state = git_state(tree.repo_root)
    except VcsUnreadable as unreadable:
        return f"unreadable ({unreadable})"
    if state is None:
        return "not a git work tree"
    if state.commit is None or state.tree is None:
        return "no commit yet"
    if not state.clean:
        return "uncommitted changes"
    return state.commit, state.tree


def gather(job: JobOutcome, tree: Tree, settings: config.Settings,
           request: Mapping[str, Any], before: tuple[str, str] | str) -> Facts:
    """The facts beyond the report (module docstring), read while the staged copy exists;
    `before` is `git_commit` as it was before the copy was staged."""
    # lazy: report/ (cryptography) and vm/ load only when --attest is given; lint/__init__.py
    # imports this stage at its top, before the first refusals (bench/cli_startup.py)
    import hashlib

    from roteiro_py.lint.vcs import copy_differs
    from roteiro_py.report.attest import Facts
    from roteiro_py.vm.assets.assets import asset_descriptors
    from roteiro_py.vm.disks.share_image import StageLimits
    from roteiro_py.vm.disks.tree_digest import ALGORITHM, tree_digest

    vm = settings.vm
    staged = next((share.copy for share in job.staged if share.host == tree.workspace), None)
    if staged is None:
        raise UsageError("--attest: the run kept no copy of the tree to take its digest from.")
    content = tree_digest(staged, StageLimits.of(vm))
    descriptor: dict[str, Any] = {"name": "tree", "digest": {
        ALGORITHM: content.digest.removeprefix("sha256:")},
        "annotations": {"workspace": tree.layout_workspace.as_posix(), "files": content.files}}
    after = git_commit(tree)
    differs = copy_differs(tree.workspace, before[1], staged) \
        if isinstance(before, tuple) and before == after else None
    if isinstance(before, tuple) and before == after and differs is None:
        descriptor["digest"] |= {"gitCommit": before[0], "gitTree": before[1]}
    elif differs is not None:  # git said clean: an ignored file or a skip-worktree edit was staged
        descriptor["annotations"]["git"] = f"the copy linted is not that commit ({differs[:300]})"
    else:
        descriptor["annotations"]["git"] = after if isinstance(after, str) else \
            "changed during the run" if isinstance(before, tuple) else before
    try:
        lockfile: str | None = hashlib.sha256(read_bounded(staged / "Cargo.lock",
                                                           MAX_LOCKFILE_BYTES)).hexdigest()
    except (FileNotFoundError, FileRefused):
        lockfile = None
    kernel = Path(vm.kernel) if vm.kernel else None
    initrd = Path(vm.initrd) if vm.initrd else None
    return Facts(request=request, memory_mib=vm.memory_mib, cpus=vm.cpus, timeout_s=vm.timeout_s,
                 tree=descriptor, lockfile_sha256=lockfile, assets=asset_descriptors(kernel, initrd))


def write_attestation(report: Report, facts: Facts, rendered: Sequence[tuple[Target, str]],
                      attest: Path, key: Ed25519PrivateKey | None) -> None:
    """The statement (signed when `key` is given) at `attest`; subjects are the report
    files as written."""
    # lazy: report/ (cryptography) and vm/ load only when --attest is given; lint/__init__.py
    # imports this stage at its top, before the first refusals (bench/cli_startup.py)
    import json

    from roteiro_py.report.attest import encode, provenance, sign, statement, subject

    subjects = [subject(Path(target.path).name, text.encode("utf-8"))
                for target, text in rendered if target.path is not None]
    document = statement(subjects, provenance(report, facts))
    if key is not None:
        document = sign(encode(document), key)
    write_output(attest, json.dumps(document, indent=2, sort_keys=True) + "\n",
                 shown=f"--attest {attest}")
