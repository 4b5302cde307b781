"""`pylint-sandbox lint clippy` end to end: real CLI, real VM (TCG), real image, real cargo."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path, PurePosixPath

import jsonschema

from roteiro_py.clippy.command import ClippyOptions, clippy_argv
from roteiro_py.clippy.parse import PathLayout, parse_messages
from roteiro_py.vm.assets import assets
from roteiro_py.vm.qemu import probe
from tests.integration.lint.lint_support import (
    HOME,
    ROOT,
    USES_FMT,
    Image,
    LocalRegistry,
    cli,
    crate_tree,
    write_lockfile,
)

SARIF_SCHEMA = ROOT / "tests" / "data" / "sarif" / "sarif-schema-2.1.0.json"


def host_findings(tree: Path, tmp: Path, all_targets: bool) -> set[tuple[str | None, str | None, int | None]]:
    """The same clippy, unsandboxed on the host: the reference the VM's answer must equal."""
    argv = clippy_argv(ClippyOptions(all_targets=all_targets))
    env = {**os.environ, "CARGO_TARGET_DIR": str(tmp / "host-target")}
    done = subprocess.run(argv, cwd=tree, env=env, capture_output=True, timeout=600, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    stream = parse_messages(done.stdout, PathLayout(PurePosixPath(".")))
    return {(f.code, f.path, f.line) for f in stream.findings}


def report_findings(report: dict[str, object]) -> set[tuple[str | None, str | None, int | None]]:
    findings = report["findings"]
    assert isinstance(findings, list)
    return {(f["code"], f["path"], f["line"]) for f in findings}


def test_sandboxed_findings_equal_host_findings(demo: Path, clippy_image: Image, tmp_path: Path) -> None:
    default = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "json",
                  "--fail-on", "never")
    assert default.returncode == 0, default.stderr
    report = json.loads(default.stdout)
    expected = host_findings(demo, tmp_path, all_targets=False)
    assert expected, "the host run must find something, or the comparison proves nothing"
    assert report_findings(report) == expected

    assert report["summary"]["build_succeeded"] is True
    assert report["isolation"] == {
        "backend": "qemu", "accelerator": "tcg", "hardware_isolated": False,
        "description": report["isolation"]["description"]}
    assert "not a hardware security boundary" in report["isolation"]["description"]
    assert report["provenance"]["image_reference"] == clippy_image.reference
    assert clippy_image.reference.endswith(report["provenance"]["image_digest"])
    assert report["toolchain"]["clippy_version"] == "0.1.95"
    assert report["toolchain"]["host"] == "x86_64-unknown-linux-gnu"
    assert "--offline" in report["command"] and "--locked" in report["command"]

    all_targets = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "sarif",
                      "--all-targets", "--output", str(tmp_path / "out.sarif"))
    assert all_targets.returncode == 1, all_targets.stderr  # warnings, at the default --fail-on
    sarif = json.loads((tmp_path / "out.sarif").read_text())
    jsonschema.validate(sarif, json.loads(SARIF_SCHEMA.read_text()))
    results = sarif["runs"][0]["results"]
    got = {(r["ruleId"], r["locations"][0]["physicalLocation"]["artifactLocation"]["uri"],
            r["locations"][0]["physicalLocation"]["region"]["startLine"]) for r in results}
    wanted = host_findings(demo, tmp_path, all_targets=True)
    assert got == wanted and wanted > expected


def test_fail_on_error_exits_0_and_human_output_states_provenance(demo: Path, clippy_image: Image) -> None:
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--fail-on", "error")
    assert done.returncode == 0, done.stderr
    assert "clippy::needless_return" in done.stdout
    assert clippy_image.reference in done.stdout and "clippy 0.1.95" in done.stdout
    assert "TCG" in done.stdout and "not a hardware security boundary" in done.stdout


def test_no_lockfile_is_refused_before_booting(demo: Path, clippy_image: Image) -> None:
    (demo / "Cargo.lock").unlink()
    started = time.monotonic()
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference)
    assert done.returncode == 3
    assert "would write Cargo.lock" in done.stderr and "commit an up-to-date Cargo.lock" in done.stderr
    assert "generate-lockfile" not in done.stderr  # no advice runs host cargo on the tree's sources
    assert time.monotonic() - started < 10  # refused in preflight: no VM was booted


def test_a_package_the_lockfile_does_not_pin_is_not_in_the_guest_whatever_the_store_holds(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    """The guest's view holds exactly what the lockfile pins: a manifest naming a package
    the lockfile does not (an outdated lockfile) is refused from the guest, naming it,
    although the host's package store holds that package (fetched for another tree)."""
    other = crate_tree(tmp_path / "other", local_registry, ["loopfmt"], USES_FMT)
    assert cli("fetch-deps", str(other), env=local_registry.env).returncode == 0
    local_registry.publish("pinned")
    tree = crate_tree(tmp_path / "outdated", local_registry, ["pinned"], USES_FMT)
    manifest = tree / "Cargo.toml"
    manifest.write_text(manifest.read_text() + local_registry.dependency("loopfmt"))
    fetched = cli("fetch-deps", str(tree), env=local_registry.env)
    assert fetched.returncode == 0, fetched.stderr  # it reads only the lockfile
    assert "1 pinned package" in fetched.stdout
    done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, env=local_registry.env)
    assert done.returncode == 3, done.stdout + done.stderr
    assert "loopfmt" in done.stderr and "Traceback" not in done.stderr
    # control: the lockfile brought up to date, the same tree lints
    write_lockfile(tree, local_registry, ["loopfmt", "pinned"])
    linted = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json",
                 env=local_registry.env)
    assert linted.returncode == 1, linted.stdout + linted.stderr[-3000:]
    assert ("clippy::needless_return", "src/lib.rs", 3) in report_findings(json.loads(linted.stdout))


def test_image_without_clippy_is_refused_as_lacking_the_linter(demo: Path, noclippy_image: Image) -> None:
    done = cli("lint", "clippy", str(demo), "--image", noclippy_image.reference)
    assert done.returncode == 3
    assert "has no working `cargo clippy`" in done.stderr and noclippy_image.reference in done.stderr


def test_a_tree_config_cannot_forge_the_toolchain_or_which_clippy_ran(clippy_image: Image, tmp_path: Path) -> None:
    """The review's forgery: the tree's .cargo/config.toml aliases `cargo clippy` to its own
    program, which said "clippy 1.99.0" and reported a clean build (exit 0) of a crate with
    `compile_error!`. Control: the same tree without the alias, where the error is seen."""
    forged = tmp_path / "forged"
    shutil.copytree(ROOT / "tests" / "data" / "forged-toolchain", forged,
                    ignore=shutil.ignore_patterns("target"))
    (forged / "roteiro.toml").write_text(f'[lint]\nimage = "{clippy_image.reference}"\n')
    plain = tmp_path / "plain"
    shutil.copytree(forged, plain)
    shutil.rmtree(plain / ".cargo")
    for tree in (forged, plain):
        done = cli("lint", "clippy", str(tree), "--format", "json")
        assert done.returncode == 1, done.stdout + done.stderr
        report = json.loads(done.stdout)
        assert report["toolchain"]["clippy_version"] == "0.1.95"
        assert report["summary"]["build_succeeded"] is False
        assert any("the real clippy ran on forged-toolchain" in finding["message"]
                   for finding in report["findings"])
        assert report["command"][:2] == ["cargo-clippy", "clippy"]
        assert (report["provenance"]["image_chosen_by"], report["provenance"]["image_chosen_in"]) == (
            "repo", "roteiro.toml")


def test_image_absent_is_refused_fast_without_a_vm(demo: Path, clippy_image: Image) -> None:
    absent = clippy_image.reference.rsplit("@", 1)[0] + "@sha256:" + "0" * 64
    started = time.monotonic()
    done = cli("lint", "clippy", str(demo), "--image", absent)
    elapsed = time.monotonic() - started
    assert done.returncode == 3
    assert "is not in the local store" in done.stderr and absent in done.stderr
    assert "pylint-sandbox prefetch --analyzer clippy --image" in done.stderr
    assert elapsed < 3, f"a refusal before any VM took {elapsed:.2f} s"


def test_real_dependencies_lint_after_fetch_deps_and_not_before(
        tmp_path: Path, clippy_image: Image, local_registry: LocalRegistry) -> None:
    """A lint never downloads: a pin the package store lacks is refused before boot,
    naming it and the command that fetches it, and the registry is asked nothing; after
    `fetch-deps` (which downloads it) the same lint runs."""
    name = f"fresh{uuid.uuid4().hex[:12]}"  # bytes no earlier run put in the shared store
    local_registry.publish(name, nonce=name)
    lib = USES_FMT.replace("loopfmt::", f"{name}::")
    tree = crate_tree(tmp_path / "with-deps", local_registry, [name], lib)
    env = local_registry.env
    missing = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, env=env)
    assert missing.returncode == 3, missing.stdout + missing.stderr
    assert (f"The package store at {HOME / 'packages'} lacks {name} 1.0.0, which the lockfile pins."
            in " ".join(missing.stderr.split()))
    assert f"pylint-sandbox fetch-deps {tree}" in missing.stderr
    assert local_registry.crate_requests(name) == 0  # the lint downloaded nothing

    fetched = cli("fetch-deps", str(tree), env=env)
    assert fetched.returncode == 0, fetched.stderr
    assert "1 downloaded" in fetched.stdout and local_registry.crate_requests(name) == 1
    linted = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", "json", env=env)
    assert linted.returncode == 1, linted.stderr
    report = json.loads(linted.stdout)
    assert ("clippy::needless_return", "src/lib.rs", 3) in report_findings(report)
    assert report["summary"]["outside_repository"] == 0
    assert local_registry.crate_requests(name) == 1  # nor did this one


def test_hostile_build_output_never_reaches_the_terminal_raw(tmp_path: Path, clippy_image: Image) -> None:
    tree = tmp_path / "evil-build"
    shutil.copytree(ROOT / "tests" / "data" / "evil-build", tree)
    for fmt in ("human", "github"):
        done = cli("lint", "clippy", str(tree), "--image", clippy_image.reference, "--format", fmt)
        assert done.returncode in (0, 1), done.stderr
        out = done.stdout + done.stderr
        assert "\x1b" not in out and "\x07" not in out and "\x9b" not in out and "\u202e" not in out
        assert "\\x1b" in out or "\\u001b" in out, "the escape must be shown, escaped, not dropped"
        if fmt == "github":
            assert "\n::error::forged" not in done.stdout


def test_keep_cache_persists_and_concurrent_lints_take_turns(demo: Path, clippy_image: Image) -> None:
    builds = HOME / "cache" / "builds"
    before = set(builds.glob("*.ext4")) if builds.exists() else set()

    def lint() -> subprocess.CompletedProcess[str]:
        return cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--keep-cache",
                   "--format", "json")

    with ThreadPoolExecutor(2) as pool:
        first, second = pool.map(lambda _: lint(), range(2))
    assert first.returncode == second.returncode == 1, first.stderr + second.stderr
    assert report_findings(json.loads(first.stdout)) == report_findings(json.loads(second.stdout))
    kept = set(builds.glob("*.ext4")) - before
    assert len(kept) == 1, "one build cache for (worktree, image, features)"
    for disk in kept:
        disk.unlink()
        disk.with_suffix(".manifest.json").unlink()  # both runs completed: each wrote one


def test_default_run_leaves_no_scratch_behind(demo: Path, clippy_image: Image) -> None:
    """This run's scratch disk is gone when it ends. Judged against what the directory held
    before it: the shared test home may hold another run's disk, left by a test that kills
    a lint without unwinding (lint/caches.py `_sweep` removes those once stale)."""
    scratch = HOME / "cache" / "scratch"
    before = set(scratch.glob("*.ext4")) if scratch.exists() else set()
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "json")
    assert done.returncode == 1, done.stderr
    assert scratch.is_dir(), "the run made its scratch disk in the default place"
    assert set(scratch.glob("*.ext4")) - before == set()


#: Seconds the CLI may take to start and reach its accelerator check (step 3 of a lint),
#: on a loaded 2-core host.
CLI_ALLOWANCE = 20.0


def test_auto_lints_under_kvm_where_it_boots_and_never_falls_back_to_tcg(demo: Path, clippy_image: Image) -> None:
    """`--accel auto` on this host, whichever kind it is (the tests' own default is TCG, by
    name). The real KVM probe, run fresh here, says what the host is; the CLI reads the
    verdict it stored. Where KVM boots, the lint runs and its report says KVM, hardware
    isolated; where it does not, the lint refuses before booting, names the opt-in, and
    writes no report. tests/unit/vm/qemu/test_accel_choice.py drives every other verdict."""
    kvm = probe.probe("kvm", assets.load_assets(), use_cache=False)
    started = time.monotonic()
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--accel", "auto",
               "--format", "json", "--fail-on", "never")
    elapsed = time.monotonic() - started
    if kvm.usable:
        assert done.returncode == 0, done.stderr
        isolation = json.loads(done.stdout)["isolation"]
        assert isolation["accelerator"] == "kvm" and isolation["hardware_isolated"] is True, isolation
        assert "not a hardware security boundary" not in isolation["description"]
        return
    assert done.returncode == 3, done.stderr
    assert done.stdout == ""  # no report: nothing ran
    assert "No usable sandbox for accel=auto" in done.stderr and "--accel tcg" in done.stderr
    assert "kvm" in done.stderr
    # KVM's verdict is cached; what is left is at most TCG's probe (the refusal says whether
    # TCG would work), and the CLI getting there.
    assert elapsed < probe.TCG_DEADLINE + CLI_ALLOWANCE, elapsed


def test_snippets_come_from_the_staged_copy_and_never_through_a_link(demo: Path, clippy_image: Image) -> None:
    """A real run: the guest builds through a committed link (it resolves it in its own
    copy), and the host's report quotes no line through it, while a regular file's is."""
    core = demo / "crates" / "demo-core"
    (core / "real.rs").write_text((core / "src" / "lib.rs").read_text())
    (core / "src" / "lib.rs").unlink()
    (core / "src" / "lib.rs").symlink_to("../real.rs")
    done = cli("lint", "clippy", str(demo), "--image", clippy_image.reference, "--format", "json",
               "--fail-on", "never")
    assert done.returncode == 0, done.stderr
    findings = json.loads(done.stdout)["findings"]
    by_code = {f["code"]: f for f in findings}
    linked = by_code["clippy::needless_return"]
    assert linked["path"] == "crates/demo-core/src/lib.rs" and linked["snippet"] is None
    regular = by_code["clippy::len_zero"]  # control: crates/demo-app/src/main.rs
    assert regular["path"] == "crates/demo-app/src/main.rs"
    assert regular["snippet"] == "    if names.len() == 0 {"
