"""clippy/command.py (argv) and clippy/toolchain.py (probe parsing), against the host's
real `cargo clippy --version` and `rustc -vV`."""

from __future__ import annotations

import subprocess

import pytest

from roteiro_py.clippy.command import PROBE_CLIPPY, PROBE_RUSTC, ClippyOptions, clippy_argv
from roteiro_py.clippy.toolchain import (
    PROBE_LIMIT_BYTES,
    ProbeOutput,
    parse_clippy_version,
    parse_rustc_vv,
    toolchain_from_probe,
)
from roteiro_py.errors import ImageLacksLinter, ProbeFailed, UsageError

REF = "registry.example/clippy@sha256:" + "cd" * 32
CLIPPY_OK = ProbeOutput(0, b"clippy 0.1.95 (59807616e1 2026-04-14)\n", b"")
RUSTC_OK = ProbeOutput(0, b"rustc 1.95.0 (59807616e 2026-04-14)\nbinary: rustc\n"
                          b"commit-hash: 59807616e1fa2540724bfbac14d7976d7e4a3860\n"
                          b"commit-date: 2026-04-14\nhost: x86_64-unknown-linux-gnu\n"
                          b"release: 1.95.0\nLLVM version: 22.1.2\n", b"")


def real(argv: tuple[str, ...]) -> ProbeOutput:
    done = subprocess.run(argv, capture_output=True, check=False, timeout=60)
    return ProbeOutput(done.returncode, done.stdout, done.stderr)


def test_argv_exactly() -> None:
    base = ["cargo-clippy", "clippy", "--message-format=json", "--color=never", "--offline", "--locked"]
    assert clippy_argv(ClippyOptions()) == base
    assert clippy_argv(ClippyOptions(all_targets=True, features=("a, b", "pkg/c", "a"),
                                     no_default_features=True)) == [
        *base, "--all-targets", "--features", "a,b,pkg/c", "--no-default-features"]
    assert clippy_argv(ClippyOptions(all_features=True)) == [*base, "--all-features"]


@pytest.mark.parametrize("bad", ["--config=x", "a;rm", "$(x)", "-x", "a/b/c"])
def test_feature_names_that_could_be_flags_are_refused(bad: str) -> None:
    with pytest.raises(UsageError):
        clippy_argv(ClippyOptions(features=(bad,)))


def test_features_and_all_features_conflict() -> None:
    with pytest.raises(UsageError):
        clippy_argv(ClippyOptions(features=("a",), all_features=True))


def test_real_host_probe_parses() -> None:
    toolchain = toolchain_from_probe(real(PROBE_CLIPPY), real(PROBE_RUSTC), reference=REF)
    assert toolchain.clippy_version.startswith("0.1.")
    assert toolchain.rustc_release.split(".")[1] == toolchain.clippy_version.split(".")[2]
    assert toolchain.host == "x86_64-unknown-linux-gnu"


def test_probe_fields() -> None:
    toolchain = toolchain_from_probe(CLIPPY_OK, RUSTC_OK, reference=REF)
    assert (toolchain.clippy_version, toolchain.clippy_commit, toolchain.clippy_date,
            toolchain.rustc_release, toolchain.host) == (
        "0.1.95", "59807616e1", "2026-04-14", "1.95.0", "x86_64-unknown-linux-gnu")


def test_missing_clippy_is_image_lacks_linter() -> None:
    """cargo's real wording for an unknown subcommand (`cargo no-such-sub`)."""
    missing = real(("cargo", "clippy-not-installed-here", "--version"))
    assert b"no such command" in missing.stderr
    with pytest.raises(ImageLacksLinter):
        parse_clippy_version(missing, reference=REF)


@pytest.mark.parametrize("stdout", [
    b"clippy 0.1.95 (59807616e1 2026-04-14)\x1b]8;;http://x\x07\n",
    b"clippy 0.1.95\nclippy 0.1.96\n",
    b"clippy latest\n",
    b"clippy 0.1.95 (ZZZZ 2026-04-14)\n",
    b"\xff\xfe",
    b"clippy 0.1.95 " + b"x" * PROBE_LIMIT_BYTES,
])
def test_garbage_clippy_version_is_refused(stdout: bytes) -> None:
    with pytest.raises(ProbeFailed):
        toolchain_from_probe(ProbeOutput(0, stdout, b""), RUSTC_OK, reference=REF)


@pytest.mark.parametrize("replace", [
    (b"host: x86_64-unknown-linux-gnu", b"host: x86_64\x1b[2J"),
    (b"host: x86_64-unknown-linux-gnu", b"host: ../../etc"),
    (b"release: 1.95.0\n", b""),
    (b"release: 1.95.0", b"release: 1.95.0\nrelease: 9.9.9"),
    (b"binary: rustc", b"binary rustc"),
    (b"rustc 1.95.0", b"gcc 1.95.0"),
])
def test_garbage_rustc_vv_is_refused(replace: tuple[bytes, bytes]) -> None:
    rustc = ProbeOutput(0, RUSTC_OK.stdout.replace(*replace), b"")
    with pytest.raises(ProbeFailed):
        toolchain_from_probe(CLIPPY_OK, rustc, reference=REF)


def test_a_failed_probe_quotes_stderr_then_stdout() -> None:
    """Outcome.diagnostics' view: a clippy that fails with its words on stdout is quoted
    too (it was `stderr or stdout`: the stdout half was dropped when stderr held a line)."""
    with pytest.raises(ImageLacksLinter) as lacking:
        parse_clippy_version(ProbeOutput(127, b"usage: clippy-out-77\n", b"sh: err-77\n"), reference=REF)
    assert lacking.value.output == "sh: err-77\nusage: clippy-out-77"
    with pytest.raises(ProbeFailed) as failed:
        parse_rustc_vv(ProbeOutput(1, b"out-78\n", b"err-78\n"), reference=REF)
    assert "exit status 1: err-78\nout-78" in failed.value.detail


@pytest.mark.parametrize("stderr", [b"", b"warning: something unrelated\n"])
def test_a_probe_that_exits_0_and_prints_nothing_is_an_image_without_the_linter(stderr: bytes) -> None:
    """No clippy answered, so the way forward is another image (ImageLacksLinter, naming
    it), not `doctor`. Control: garbage on stdout is a probe that answered wrongly."""
    for blank in (b"", b"\n  \n"):
        with pytest.raises(ImageLacksLinter) as lacks:
            toolchain_from_probe(ProbeOutput(0, blank, stderr), RUSTC_OK, reference=REF)
        assert f"The image {REF} has no working `cargo clippy`." in lacks.value.guidance().render_text()
        with pytest.raises(ImageLacksLinter) as lacks:
            toolchain_from_probe(CLIPPY_OK, ProbeOutput(0, blank, stderr), reference=REF)
        text = lacks.value.guidance().render_text()
        assert "`rustc -vV` in the guest said" in text
        # cargo-clippy answered: the summary names rustc, never "no working `cargo clippy`"
        assert f"The image {REF} has no working `rustc` (`rustc -vV` answered nothing)" in text, text
    with pytest.raises(ProbeFailed) as garbage:
        toolchain_from_probe(ProbeOutput(0, b"garbage-77\n", stderr), RUSTC_OK, reference=REF)
    assert f"the image {REF} failed" in garbage.value.guidance().render_text()
    with pytest.raises(ProbeFailed):
        toolchain_from_probe(CLIPPY_OK, ProbeOutput(0, b"garbage-78\n", stderr), reference=REF)


def test_every_probe_refusal_names_the_image() -> None:
    cases = [ProbeOutput(0, b"\xff\xfe", b""), ProbeOutput(0, b"x" * (PROBE_LIMIT_BYTES + 1), b""),
             ProbeOutput(0, b"clippy 0.1.95 (ZZZZ 2026-04-14)\n", b"")]
    for clippy in cases:
        with pytest.raises(ProbeFailed) as refused:
            toolchain_from_probe(clippy, RUSTC_OK, reference=REF)
        assert REF in refused.value.guidance().render_text()
    for rustc in (ProbeOutput(3, b"", b"boom"), ProbeOutput(0, b"rustc 1.95.0\nhost: x\n", b"")):
        with pytest.raises(ProbeFailed) as refused:
            toolchain_from_probe(CLIPPY_OK, rustc, reference=REF)
        assert REF in refused.value.guidance().render_text()
