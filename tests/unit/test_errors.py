"""Every refusal renders, names its subject, and is a well-formed guidance value."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.guidance import Guidance, printable

D = "sha256:" + "d" * 64

# One factory per user-facing class, each with distinctive values, and the values that must
# come out the other side. A class added to errors.py without a line here fails
# test_every_class_has_a_factory.
FACTORIES: dict[type[errors.RoteiroError], Callable[[], tuple[errors.RoteiroError, list[str]]]] = {
    errors.UsageError: lambda: (errors.UsageError("bad flag --zork.", hint="Try --help."),
                                ["--zork", "Try --help."]),
    errors.PathNotFound: lambda: (errors.PathNotFound(Path("/src/gone-8")),
                                  ["The path /src/gone-8 does not exist.", "Pass the repository to lint."]),
    errors.StdoutUnwritable: lambda: (errors.StdoutUnwritable("pylint-sandbox config get vm.cpus-9",
                                                              "Input/output error"),
                                      ["`pylint-sandbox config get vm.cpus-9 > FILE`", "Input/output error"]),
    errors.UnknownPackage: lambda: (errors.UnknownPackage("nope-41", Path("/src/ws-41"), ["app-41", "core-41"]),
                                    ["--package nope-41", "/src/ws-41", "app-41, core-41", "--workspace"]),
    errors.UnknownFeature: lambda: (errors.UnknownFeature("fast-42", ["app-42", "core-42"], ["slow-42"]),
                                    ["--features fast-42", "(app-42, core-42)", "slow-42", "--all-features"]),
    errors.CargoRefusedSelection: lambda: (errors.CargoRefusedSelection(
        Path("/src/ws-43"), "package ID specification `nope-43` did not match any packages"),
        ["/src/ws-43", "Cargo said: package ID specification `nope-43`", "--features"]),
    errors.ConfigError: lambda: (errors.ConfigError(Path("/cfg/roteiro-7.toml"), "wrong type",
                                                    key="vm.cpus", line=17, column=4),
                                 ["/cfg/roteiro-7.toml", "vm.cpus", "line 17", "column 4"]),
    errors.ReportFileInvalid: lambda: (errors.ReportFileInvalid(Path("/ci/artifacts/r-12.json"),
                                                                "findings.3.level: Input should be 'error'"),
                                       ["/ci/artifacts/r-12.json", "findings.3.level", "--format json"]),
    errors.ReviewUnavailable: lambda: (errors.ReviewUnavailable("GITHUB_EVENT_PATH", "has no pull_request.number"),
                                       ["review cannot post: GITHUB_EVENT_PATH has no pull_request.number",
                                        "pull-requests: write", "GITHUB_TOKEN"]),
    errors.MalformedReference: lambda: (errors.MalformedReference("reg.example/x@sha256:zz",
                                                                  "the digest has 2 hex digits"),
                                        ["reg.example/x@sha256:zz", "2 hex digits"]),
    errors.BaselineUnusable: lambda: (errors.BaselineUnusable(Path("/ci/base-31.json"), "it is larger than 9 bytes"),
                                      ["--baseline /ci/base-31.json", "larger than 9 bytes", "--format json",
                                       "pylint-sandbox docs adopting"]),
    errors.DiffUnusable: lambda: (errors.DiffUnusable(Path("/ci/pr-32.diff"), "a hunk ends early", 77),
                                  ["--diff /ci/pr-32.diff, line 77", "a hunk ends early", "--no-ext-diff --no-textconv",
                                   "pylint-sandbox docs adopting"]),
    errors.DiffHidesLines: lambda: (errors.DiffHidesLines(Path("/ci/pr-33.diff"), "src/lib-33.rs", 78),
                                    ["--diff /ci/pr-33.diff, line 78", "src/lib-33.rs", "*.rs -diff",
                                     "--attr-source=", "pylint-sandbox docs adopting"]),
    errors.NoImageConfigured: lambda: (errors.NoImageConfigured(Path("/home/u9/.roteiro/config.toml"),
                                                                Path("/src/r8/roteiro.toml")),
                                       ["/home/u9/.roteiro/config.toml", "/src/r8/roteiro.toml",
                                        "[lint]", 'image = "', "@sha256:<64 hex>",
                                        "no default image on purpose", "what the report vouches for",
                                        "pylint-sandbox prefetch --analyzer clippy",
                                        "pylint-sandbox dockerfile clippy | docker build -t roteiro-clippy:local -",
                                        "--from docker --image roteiro-clippy:local",
                                        "pylint-sandbox docs threat-model"]),
    errors.TagNotDigest: lambda: (errors.TagNotDigest("ghcr.io/acme/clippy:1.95", "flag --image"),
                                  ["ghcr.io/acme/clippy:1.95", "flag --image"]),
    errors.ImageNotAllowed: lambda: (errors.ImageNotAllowed(
        "ghcr.io/evil7/c@" + D, "/src/r4/roteiro.toml", ("ghcr.io/ours3/", "quay.io/q2"),
        "/home/u5/.roteiro/config.toml"),
        ["ghcr.io/evil7/c@" + D, "/src/r4/roteiro.toml", "ghcr.io/ours3/", "quay.io/q2",
         "/home/u5/.roteiro/config.toml", "lint.allowed_images", "--image"]),
    errors.SandboxUnavailable: lambda: (errors.SandboxUnavailable(
        "the KVM canary did not boot within 5.0 s", accel="auto",
        findings=("kvm: exit 134 after 35 ms",), tcg_possible=True,
        install="apt-get install qemu-system-x86"),
        ["KVM canary", "5.0 s", "accel=auto", "exit 134 after 35 ms", "--accel tcg",
         "apt-get install qemu-system-x86", "security boundary"]),
    errors.VmAssetsMissing: lambda: (errors.VmAssetsMissing("guest kernel", Path("/h/vm/vmlinux-6")),
                                     ["guest kernel", "/h/vm/vmlinux-6", "prefetch --vm-assets"]),
    errors.ImageNotProvisioned: lambda: (errors.ImageNotProvisioned(
        "localhost:5000/t/c@" + D, Path("/h/store-3"), "blob sha256:beef is corrupt"),
        ["localhost:5000/t/c@" + D, "/h/store-3", "sha256:beef",
         "prefetch --analyzer clippy --image localhost:5000/t/c@" + D]),
    errors.ImageNotInStore: lambda: (errors.ImageNotInStore(
        "r.example/gone@" + D, Path("/h/store-4"), ["r/a@" + D, "r/b@" + D, "r/c@" + D, "r/d@" + D]),
        ["r.example/gone@" + D, "nothing was removed", "r/a@" + D, "r/c@" + D, "and 1 more",
         "cache list"]),
    errors.ImageInUse: lambda: (errors.ImageInUse("r/busy@" + D),
                                ["r/busy@" + D, "running lint", "nothing was removed",
                                 "pylint-sandbox cache remove-image r/busy@" + D]),
    errors.DownloadNotAllowed: lambda: (errors.DownloadNotAllowed(
        "r.example/a@" + D, "https://r.example/v2/", "3 layers (41 MB)"),
        ["r.example/a@" + D, "https://r.example/v2/", "3 layers (41 MB)", "--allow-download"]),
    errors.PrefetchFailed: lambda: (errors.PrefetchFailed("r.example/b@" + D, "registry r.example",
                                                          "manifest digest sha256:0f mismatch"),
                                    ["r.example/b@" + D, "registry r.example", "sha256:0f"]),
    errors.ImageBuildRefused: lambda: (errors.ImageBuildRefused(
        "the Debian archive file:///srv/mirror-6 (suite bookworm-7)", "gcc 12 depends on cpp-9, which no package "
        "in the archive satisfies", commands=("pylint-sandbox image build --archive MIRROR-URL-OR-DIRECTORY",)),
        ["file:///srv/mirror-6", "bookworm-7", "depends on cpp-9", "pinned Debian archive key", "nothing was stored",
         "image build --archive"]),
    errors.ArchiveRefused: lambda: (errors.ArchiveRefused("file:///srv/mirror-5", "bookworm-9",
                                                          "Packages.xz does not match the SHA256"),
                                    ["file:///srv/mirror-5", "bookworm-9", "does not match the SHA256",
                                     "[vm] debian_archive", "[vm] kernel", "config set vm.debian_archive",
                                     "prefetch --vm-assets"]),
    errors.SecurityIndexStale: lambda: (errors.SecurityIndexStale(
        "/srv/security-3", "bookworm-security-4", "2026-11-01 00:53:13 UTC", "2026-11-08 00:53:13 UTC", 7),
        ["/srv/security-3", "bookworm-security-4", "2026-11-01 00:53:13 UTC", "expired at 2026-11-08 00:53:13 UTC",
         "valid for 7 days", "goes stale every 7 days", "Refresh the copy", "`[vm] debian_security_archive`",
         "config set vm.debian_security_archive ''", "prefetch --vm-assets"]),
    errors.UnsafeImageLayer: lambda: (errors.UnsafeImageLayer("sha256:feed01", "../../etc/x", "`..` in member name"),
                                      ["sha256:feed01", "../../etc/x", "`..` in member name"]),
    errors.CredentialHelperFailed: lambda: (errors.CredentialHelperFailed(
        "docker-credential-pass", "ghcr.io", Path("/home/u/.docker/config.json"), "it is not on PATH"),
        ["docker-credential-pass", "ghcr.io", "/home/u/.docker/config.json", "not on PATH"]),
    errors.HostToolMissing: lambda: (errors.HostToolMissing("mkfs.ext4", "e2fsprogs-x",
                                                            "make the scratch disk /h/s-4.img"),
                                     ["mkfs.ext4", "apt-get install e2fsprogs-x", "/h/s-4.img"]),
    errors.NoPackageCache: lambda: (errors.NoPackageCache(Path("/c/.cargo/registry"), Path("/t/tree-5"),
                                                          "itoa-77 1.0.15"),
                                    ["/c/.cargo/registry", "itoa-77 1.0.15",
                                     "pylint-sandbox fetch-deps /t/tree-5"]),
    errors.PackageRefused: lambda: (errors.PackageRefused(
        Path("/t/tree-21/Cargo.lock"), "privdep-3 0.1.0", "its source 'git+ssh://h/x#1' is not https."),
        ["/t/tree-21/Cargo.lock", "pins privdep-3 0.1.0, which is not fetched: its source "
         "'git+ssh://h/x#1' is not https.", "Only the lockfile is read",
         "pylint-sandbox fetch-deps /t/tree-21"]),
    errors.PackageSourceUnreachable: lambda: (errors.PackageSourceUnreachable(
        "https://index.example-4/", "serde-4 1.0.219", "connection refused", Path("/t/tree-22")),
        ["Fetching serde-4 1.0.219 from https://index.example-4/ failed: connection refused.",
         "air-gapped", "pylint-sandbox fetch-deps /t/tree-22\n",
         "pylint-sandbox fetch-deps /t/tree-22 --from DIR"]),
    errors.ToolchainSpecInvalid: lambda: (errors.ToolchainSpecInvalid("nightly-2026-13-41", "not a date"),
                                          ["nightly-2026-13-41", "(--from-dist)", "not a date",
                                           "`nightly-2026-11-01`"]),
    errors.HostileSuggestion: lambda: (errors.HostileSuggestion("src/lib-41.rs", "its range 3..99 ends past "
                                                                "the file's 12 bytes, in another file"),
                                       ["A suggestion for src/lib-41.rs was refused: its range 3..99",
                                        "Nothing was written to the tree."]),
    errors.FixTargetUnsafe: lambda: (errors.FixTargetUnsafe("src/main-42.rs", "it changed since the lint staged it"),
                                     ["--fix will not write src/main-42.rs: it changed since the lint staged it.",
                                      "Nothing was written"]),
    errors.NoVcsForFix: lambda: (errors.NoVcsForFix(Path("/t/tree-43")),
                                 ["No VCS found for /t/tree-43", "--allow-no-vcs", "--fix=patch"]),
    errors.DirtyTreeForFix: lambda: (errors.DirtyTreeForFix(Path("/t/repo-44"), ["src/a-44.rs"], ["b-44.rs"]),
                                     ["/t/repo-44 has uncommitted changes", "--allow-dirty",
                                      "* src/a-44.rs (dirty)", "* b-44.rs (staged)"]),
    errors.VcsUnreadable: lambda: (errors.VcsUnreadable(Path("/t/repo-31"), "its index is 9 bytes"),
                                   ["Could not read the git repository at /t/repo-31: its index is 9 bytes.",
                                    "`git status`"]),
    errors.ToolchainRefused: lambda: (errors.ToolchainRefused("1.95.7", "https://mirror-7.example",
                                                              "clippy has sha256 0f, not 1e"),
                                      ["Refused the Rust toolchain 1.95.7 from https://mirror-7.example: "
                                       "clippy has sha256 0f, not 1e.",
                                       "108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE", "nothing was stored",
                                       "RUSTUP_DIST_SERVER"]),
    errors.ToolchainStale: lambda: (errors.ToolchainStale(
        "stable", "https://mirror-3.example", "2026-09-03", "2026-11-12", today="2026-12-02", max_age_days=56,
        recorded_from="https://static-4.example", record=Path("/h/cache-5/channels.json")),
        ["Refused the Rust toolchain stable from https://mirror-3.example: its signed manifest is of "
         "2026-09-03, older than 2026-11-12, the newest stable manifest this host already accepted (from "
         "https://static-4.example, recorded in /h/cache-5/channels.json).",
         "https://mirror-3.example is behind the server that served 2026-11-12",
         "pylint-sandbox image build --from-dist stable-2026-11-12",
         "RUSTUP_DIST_SERVER=https://static-4.example pylint-sandbox image build --from-dist stable",
         "108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE"]),
    errors.ToolchainIncomplete: lambda: (errors.ToolchainIncomplete("nightly-2026-11-08", "clippy-8",
                                                                    "riscv64gc-unknown-linux-gnu"),
                                         ["The Rust toolchain nightly-2026-11-08 has no clippy-8 for "
                                          "riscv64gc-unknown-linux-gnu.", "nightly without clippy"]),
    errors.ToolchainUnreachable: lambda: (errors.ToolchainUnreachable("1.96.0", "https://mirror-9.example",
                                                                      "HTTP 503 from the mirror-9"),
                                          ["Fetching the Rust toolchain 1.96.0 from https://mirror-9.example "
                                           "failed: HTTP 503 from the mirror-9.", "set RUSTUP_DIST_SERVER"]),
    errors.SourceReplacementRefused: lambda: (errors.SourceReplacementRefused(
        Path("/h/.cargo/config-3.toml"), "source.vendored-9.directory", "it is a path on this host",
        Path("/t/tree-13")), ["/h/.cargo/config-3.toml", "source.vendored-9.directory",
                              "a path on this host", "pylint-sandbox fetch-deps /t/tree-13"]),
    errors.ScratchUnavailable: lambda: (errors.ScratchUnavailable(Path("/h/scratch-9.img"), "No space left"),
                                        ["/h/scratch-9.img", "No space left"]),
    errors.CacheContended: lambda: (errors.CacheContended("root filesystem", Path("/h/rootfs/ab-3.ext4"), 3),
                                    ["root filesystem", "/h/rootfs/ab-3.ext4", "removed 3 times",
                                     "cache prune", "pylint-sandbox cache list"]),
    errors.ImageLacksLinter: lambda: (errors.ImageLacksLinter("r/x@" + D, "error: no such command: `clippy`"),
                                      ["r/x@" + D, "no such command", "pylint-sandbox dockerfile clippy",
                                       f"{errors.DOCKERFILE_LINES}-line",
                                       "pylint-sandbox dockerfile clippy | docker build -t roteiro-clippy:local -"]),
    errors.ProbeFailed: lambda: (errors.ProbeFailed("r/p@" + D, "rustc -vV printed no host triple", "garbage-42"),
                                 ["the image r/p@" + D, "rustc -vV printed no host triple", "garbage-42"]),
    errors.ColdCache: lambda: (errors.ColdCache(Path("/t/tree-6"), "serde v1.0.219",
                                                "error: no matching package named `serde` found"),
                               ["/t/tree-6", "serde v1.0.219", "no matching package",
                                "pylint-sandbox fetch-deps /t/tree-6"]),
    errors.LockfileWouldBeWritten: lambda: (errors.LockfileWouldBeWritten(
        Path("/t/tree-7"), "the lock file /t/tree-7/Cargo.lock needs to be updated"),
        ["/t/tree-7", "needs to be updated", "commit an up-to-date Cargo.lock",
         "pylint-sandbox fetch-deps /t/tree-7"]),
    errors.TreeFileRefused: lambda: (errors.TreeFileRefused(Path("/t/tree-8/Cargo.toml"),
                                                            "a symbolic link"),
                                     ["/t/tree-8/Cargo.toml", "a symbolic link", "run the same command"]),
    errors.KilledBySignal: lambda: (errors.KilledBySignal("SIGKILL", 1536, "cargo clippy", oom_kills=3),
                                    ["SIGKILL", "1536 MiB", "--memory", "--memory 3072", "cargo clippy",
                                     "ran out of memory", "killed 3 processes"]),
    errors.UnexpectedStatus: lambda: (errors.UnexpectedStatus("cargo clippy --offline", 77, (0, 101),
                                                              "boom line\nlast line 3"),
                                      ["cargo clippy --offline", "status 77", "0 or 101", "last line 3"]),
    errors.DeadlineExceeded: lambda: (errors.DeadlineExceeded("cargo clippy --locked", 321.0),
                                      ["cargo clippy --locked", "321 s", "--timeout 642"]),
    errors.VmFailed: lambda: (errors.VmFailed("the guest's init failed: no root disk", "[ 0.1] Kernel panic 77"),
                              ["no root disk", "Kernel panic 77"]),
    errors.OutputTooLarge: lambda: (errors.OutputTooLarge("stderr", 67108864, "cargo-clippy clippy -q"),
                                    ["on the stderr of `cargo-clippy clippy -q`", "67108864",
                                     "all streams together"]),
    errors.AttestationRefused: lambda: (errors.AttestationRefused(
        "the report /ci/out-61.sarif", "its sha256 61ab is not a subject", hint="Lint again-61."),
        ["Refused the report /ci/out-61.sarif: its sha256 61ab is not a subject.", "Lint again-61.",
         "nothing here says who made them"]),
    errors.AttestKeyUnusable: lambda: (errors.AttestKeyUnusable("--attest-key", Path("/keys/k-62"),
                                                                "not an Ed25519 key"),
                                       ["--attest-key /keys/k-62: not an Ed25519 key",
                                        "ssh-keygen -t ed25519"]),
    errors.TreeTooLarge: lambda: (errors.TreeTooLarge(Path("/t/tree-13"), "more than 77 files and "
                                                      "directories", "stage_max_files", 77),
                                  ["/t/tree-13", "more than 77 files", "[vm] stage_max_files",
                                   "config set vm.stage_max_files 154"]),
    errors.TreeIncomplete: lambda: (errors.TreeIncomplete(Path("/t/tree-14"),
                                                          [("crate/Cargo.toml", "unreadable"),
                                                           ("src/dev/", "other filesystem")]),
                                    ["/t/tree-14", "2 file(s)", "crate/Cargo.toml (unreadable)",
                                     "src/dev/ (other filesystem)"]),
    errors.BuildProducedNothing: lambda: (errors.BuildProducedNothing("r/y@" + D, "openssl-sys: pkg-config not found"),
                                          ["r/y@" + D, "pkg-config not found", "native build dependencies"]),
    errors.TargetNotInImage: lambda: (errors.TargetNotInImage("riscv64gc-unknown-linux-gnu", "r/y@" + D),
                                      ["riscv64gc-unknown-linux-gnu", "r/y@" + D, "rustup target add",
                                       "No report was made"]),
    errors.Unenforceable: lambda: (errors.Unenforceable("net:egress:crates.io:443", "cargo fetch",
                                                        "the VM has no network device"),
                                   ["net:egress:crates.io:443", "cargo fetch", "no network device"]),
    errors.HostToolFailed: lambda: (errors.HostToolFailed("mkfs.ext4", "make the scratch disk /c/s-17.img",
                                                          "it did not finish within 300 s"),
                                    ["mkfs.ext4 could not make the scratch disk /c/s-17.img",
                                     "within 300 s", "pylint-sandbox doctor"]),
    errors.OutputCut: lambda: (errors.OutputCut("stderr", 3, "cargo-clippy clippy -q",
                                                "reading it failed: connection reset 41"),
                               ["The stderr of step 3, `cargo-clippy clippy -q`",
                                "connection reset 41", "partly lost"]),
    errors.SpawnFailed: lambda: (errors.SpawnFailed("/usr/bin/qemu-x", "No such file or directory"),
                                 ["/usr/bin/qemu-x", "No such file"]),
    errors.PlatformUnsupported: lambda: (errors.PlatformUnsupported("Plan9 mips-77", "Linux x86_64",
                                                                     "`pylint-sandbox docs platforms`"),
                                         ["This host (Plan9 mips-77) cannot run a lint: lints run only "
                                          "on Linux x86_64.", "pylint-sandbox docs platforms", "render REPORT.json"]),
    errors.LayoutImageNotChosen: lambda: (
        errors.LayoutImageNotChosen("oci:/l/layout-31", [(f"r/x:{n}", "sha256:" + f"{n:02d}" * 32)
                                                        for n in range(12)]),
        ["oci:/l/layout-31", "holds 12 images", "r/x:0 @ sha256:0000", "r/x:9 @ sha256:0909",
         "and 2 more", "--image localhost/clippy@sha256:0000"]),
    errors.InternalError: lambda: (errors.InternalError("unexpected state 12"), ["unexpected state 12"]),
    errors.RoteiroError: lambda: (errors.RoteiroError("base error 99"), ["base error 99"]),
    errors.Refusal: lambda: (errors.Refusal("generic refusal 5"), ["generic refusal 5"]),
}


def all_error_classes() -> set[type[errors.RoteiroError]]:
    found: set[type[errors.RoteiroError]] = set()
    stack: list[type[errors.RoteiroError]] = [errors.RoteiroError]
    while stack:
        cls = stack.pop()
        if cls.__module__ == "roteiro_py.errors":
            found.add(cls)
        stack.extend(cls.__subclasses__())
    return found


def test_every_class_has_a_factory() -> None:
    assert all_error_classes() - set(FACTORIES) == set()


@pytest.mark.parametrize("cls", sorted(FACTORIES, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_refusal_renders_its_subject(cls: type[errors.RoteiroError]) -> None:
    error, subjects = FACTORIES[cls]()
    assert type(error) is cls
    guidance = error.guidance()
    assert guidance.defects() == []
    text = guidance.render_text()
    for subject in subjects:
        assert subject in text, f"{subject!r} missing from:\n{text}"
    assert text.startswith("error: ")


def test_a_sigkill_is_called_out_of_memory_only_with_the_kernels_evidence() -> None:
    """Status 137 is any SIGKILL; only the guest kernel's count of OOM kills during the
    step (guest_init.sh) makes it one, and only then is more memory the way forward."""
    bare = errors.KilledBySignal("SIGKILL", 1536, "cargo clippy").guidance()
    text = bare.render_text()
    assert "`cargo clippy` was killed by SIGKILL in the guest" in text
    assert "the guest ran out of memory" not in text and "--memory" not in text and not bare.commands
    assert "counted no out-of-memory kill" in text
    oom = errors.KilledBySignal("SIGKILL", 1536, "cargo clippy", oom_kills=1).guidance()
    assert "the guest ran out of memory" in oom.summary and "killed 1 process for" in oom.render_text()
    assert "`--memory 3072`" in oom.render_text()  # a rerun (tests/unit/test_rerun.py: the whole line)


def test_exit_codes_follow_the_documented_table() -> None:
    assert errors.UsageError("x").exit_code == errors.EXIT_USAGE == 2
    assert errors.ConfigError("f", "p").exit_code == 2
    assert errors.InternalError("x").exit_code == errors.EXIT_INTERNAL == 4
    for cls in all_error_classes():
        if issubclass(cls, errors.Refusal):
            assert cls.exit_code == errors.EXIT_REFUSED == 3, cls
    codes = [cls.code for cls in all_error_classes() if cls not in (errors.Refusal,)]
    assert len(codes) == len(set(codes)), "every class has its own machine-readable code"
    # the rule (errors.py): a reference that is wrong as written is usage, whatever the
    # store holds; one the host or the policy cannot honour is refused
    assert errors.MalformedReference.exit_code == errors.TagNotDigest.exit_code == errors.EXIT_USAGE
    for cls in (errors.NoImageConfigured, errors.ImageNotAllowed, errors.ImageNotProvisioned):
        assert cls.exit_code == errors.EXIT_REFUSED


def test_no_image_configured_offers_the_stores_images_as_commands() -> None:
    stored = [f"r.example/c{i}:1@sha256:{str(i) * 64}" for i in range(errors.MAX_STORED_SHOWN + 2)]
    guidance = errors.NoImageConfigured(Path("/u/c.toml"), Path("/r/roteiro.toml"), stored).guidance()
    assert guidance.defects() == []
    assert guidance.commands == (f"pylint-sandbox config set lint.image '{stored[0]}'",)
    text = guidance.render_text()
    assert f'image = "{stored[0]}"' in text and "<64 hex>" not in text
    assert sum(f"config set lint.image '{ref}'" in text for ref in stored) == errors.MAX_STORED_SHOWN
    assert "lists the other 2" in text
    assert errors.config_set_image_command("a'b") == "pylint-sandbox config set lint.image 'a'\"'\"'b'"


def test_hostile_values_are_escaped_in_every_rendering() -> None:
    hostile = "evil\x1b[2J\x1b]8;;http://x\x07tree\u202e"
    error = errors.ColdCache(Path(hostile), hostile, hostile)
    text = error.guidance().render_text()
    assert "\x1b" not in text and "\x07" not in text and "\u202e" not in text
    assert "\\x1b[2J" in text
    from rich.console import Console

    console = Console(record=True, force_terminal=True, width=200)
    console.print(error.guidance().render_rich())
    exported = console.export_text(styles=False)
    assert "\x1b" not in exported and "\\x1b" in exported


def test_rendering_asserts_the_shape() -> None:
    bad = [
        Guidance(summary=""),
        Guidance(summary="no full stop"),
        Guidance(summary="Two.\nlines."),
        Guidance(summary="Fine.", notes=("lowercase note.",)),
        Guidance(summary="Fine.", notes=("",)),
        Guidance(summary="Fine.", commands=("two\nlines",)),
        Guidance(summary="Fine.", commands=("$ prompt",)),
        Guidance(summary="Fine.", commands=(" padded ",)),
        Guidance(summary="Fine.", snippet_title="t"),
        Guidance(summary="Raw \x1b escape."),
    ]
    for guidance in bad:
        assert guidance.defects(), guidance
        with pytest.raises(AssertionError, match="malformed guidance"):
            guidance.render_text()
    assert Guidance(summary="Fine.", notes=("A note.",), commands=("ls -l",)).defects() == []


def test_printable_keeps_text_and_escapes_controls() -> None:
    assert printable("plain ü ✓ text") == "plain ü ✓ text"
    assert printable("a\nb\tc\rd\x9b") == "a\\x0ab\\x09c\\x0dd\\x9b"  # report/safe.py's scheme
    assert printable("a\nb", keep_newlines=True) == "a\nb"
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", printable("".join(map(chr, range(0xa0)))))


def test_paths_in_commands_are_quoted() -> None:
    text = errors.NoPackageCache(Path("/c/r"), Path("/t/my tree; rm -rf ~")).guidance().render_text()
    assert "pylint-sandbox fetch-deps '/t/my tree; rm -rf ~'" in text


def test_quotes_from_tools_are_bounded_at_the_stated_limit() -> None:
    line = "q" * (errors.QUOTE_LIMIT - 1) + "@#" + "%" * 5000
    text = errors.ColdCache(Path("/t"), None, line).guidance().render_text()
    assert "q" * (errors.QUOTE_LIMIT - 1) + "@." in text and "#" not in text and "%" not in text


@pytest.mark.parametrize("cls", sorted(FACTORIES, key=lambda c: c.__name__), ids=lambda c: c.__name__)
def test_every_refusal_says_once_that_no_report_was_made_and_nothing_ran_instead(
        cls: type[errors.RoteiroError]) -> None:
    """Issue 14: eight refusals (cold cache, no package cache, ...) did not say it. The
    Refusal base says it for every class, in the first note; control: a usage error, an
    internal error, does not claim it (a usage error may come from `config set`)."""
    from rich.console import Console

    error, _ = FACTORIES[cls]()
    guidance = error.guidance()
    text = guidance.render_text()
    console = Console(record=True, width=400, color_system=None)
    console.print(guidance.render_rich())
    shown = console.export_text(styles=False)
    expected = 1 if isinstance(error, errors.Refusal) else 0
    assert text.count(errors.NOTHING_RAN) == expected, text
    assert shown.count(errors.NOTHING_RAN) == expected, shown
    if expected:
        assert guidance.notes[0] == errors.NOTHING_RAN
        # no class says it again in its own words
        assert text.lower().count("no report was made") == 1, text
        assert text.lower().count("nothing was run") == 0, text


def test_a_refusal_written_later_says_the_promise_too() -> None:
    class Later(errors.Refusal):
        code = "later-test-only"

        def guidance(self) -> Guidance:
            return Guidance(summary="A later refusal.", notes=(errors.NOTHING_RAN, "Its own note."))

    class Child(Later):
        def guidance(self) -> Guidance:
            return super().guidance()

    for error in (Later(), Child()):
        assert error.guidance().notes == (errors.NOTHING_RAN, "Its own note.")


def test_only_a_lints_refusal_says_no_report_was_made(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23: prefetch's refusals ended with the lint's promise, "No report was made",
    of a command that makes no report. The command line's boundary decides (cli/app.py
    `_guard`); both refusals through it, word for word."""
    from roteiro_py.cli.app import main

    reference = "registry.example/team/clippy@" + D
    assert main(["prefetch", "--analyzer", "clippy", "--image", reference]) == errors.EXIT_REFUSED
    assert capsys.readouterr().err == (
        f"error: Prefetch would download the image {reference} (its manifest {D}, its config and "
        "its layers) from https://registry.example/v2/team/clippy/; downloading was not allowed.\n"
        f"  note: Image: {reference}.\n"
        "  run:\n"
        f"    pylint-sandbox prefetch --analyzer clippy --image {reference} --allow-download\n")
    # control: a lint's refusal says it, first among its notes
    (tmp_path / "Cargo.toml").write_text('[package]\nname = "t"\nversion = "0.1.0"\n')
    from roteiro_py import paths

    assert main(["lint", "clippy", str(tmp_path), "--image", reference, "-q"]) == errors.EXIT_REFUSED
    assert capsys.readouterr().err == (
        f"error: The VM's asset manifest is not provisioned at {paths.vm_assets_root()}/manifest.json.\n"
        f"  note: {errors.NOTHING_RAN}\n"
        "  note: Assets are provisioned ahead of time and verified by digest; a run never downloads "
        "them, from a Debian archive (`[vm] debian_archive`: a mirror or a local copy). A host that "
        "reaches none can point `[vm] kernel` and `[vm] initrd` at its own.\n"
        "  run:\n"
        "    pylint-sandbox prefetch --vm-assets\n")


def test_a_host_tool_that_did_not_finish_and_output_that_was_cut_render_exactly() -> None:
    """Issue 21 items 5 and 6: the two refusals, word for word."""
    hung = errors.HostToolFailed("mkfs.ext4", "make the scratch disk /c/s-17.img",
                                 "it did not finish within 300 s, and its process group was killed")
    assert hung.guidance().render_text() == (
        "error: mkfs.ext4 could not make the scratch disk /c/s-17.img: it did not finish within "
        "300 s, and its process group was killed.\n"
        f"  note: {errors.NOTHING_RAN}\n"
        "  note: It is a program of this host, not of the tree: a host under heavy load or a "
        "tool that hangs does this. Run the same command again; `pylint-sandbox doctor` checks "
        "the host's tools.\n"
        "  run:\n"
        "    pylint-sandbox doctor\n")
    cut = errors.OutputCut("stdout", 3, "cargo-clippy clippy --locked",
                           "reading it failed: [Errno 104] Connection reset by peer")
    assert cut.guidance().render_text() == (
        "error: The stdout of step 3, `cargo-clippy clippy --locked`, did not arrive whole from "
        "the guest: reading it failed: [Errno 104] Connection reset by peer.\n"
        f"  note: {errors.NOTHING_RAN}\n"
        "  note: The status the step exited with is not reported over output that was partly "
        "lost: what was lost could be the errors that decide the run.\n"
        "  note: It is this host failing to read the VM's output, not the tree: run the same "
        "command again; if it recurs, `pylint-sandbox doctor` checks the host.\n"
        "  run:\n"
        "    pylint-sandbox doctor\n")
ROOT = Path(__file__).resolve().parents[2]


def _dockerfile_block() -> str:
    """The repository's Dockerfile.clippy as a refusal indents it: the version it pins is
    read from the file, so the refusal and the file cannot disagree."""
    lines = [line for line in (ROOT / "Dockerfile.clippy").read_text().splitlines()
             if line.strip() and not line.lstrip().startswith("#")]
    assert len(lines) == errors.DOCKERFILE_LINES and lines[-1] == "RUN rustup component add clippy"
    assert lines[0].startswith("FROM docker.io/library/rust:")
    return "".join(f"    {line}\n" for line in lines)


WHY_NOT_OFFICIAL = ("  note: An official Rust image (`rust:<version>`) will not do as it is: it installs its "
                    "toolchain with `rustup --profile minimal`, which has no clippy component.\n")
DOCKERFILE_TITLE = ("  the 2-line Dockerfile of a clippy image (`pylint-sandbox dockerfile clippy` "
                    "prints it):\n")
BUILD_AND_PIN = ("  run, in order:\n"
                 "    pylint-sandbox dockerfile clippy | docker build -t roteiro-clippy:local -\n"
                 "    pylint-sandbox prefetch --analyzer clippy --from docker --image roteiro-clippy:local\n")


def test_image_lacks_linter_says_why_an_official_image_will_not_do_and_prints_the_fix() -> None:
    """Issue 21: it pointed at `pylint-sandbox dockerfile clippy` without saying why the
    official image a user tried first has no clippy, or what the two lines are."""
    text = errors.ImageLacksLinter("r/x@" + D, "error: no such command: `clippy`").guidance().render_text()
    assert text == (
        f"error: The image r/x@{D} has no working `cargo clippy`.\n"
        "  note: No report was made, and nothing ran on this host instead.\n"
        "  note: `cargo-clippy --version` in the guest said: error: no such command: `clippy`.\n"
        + WHY_NOT_OFFICIAL +
        "  note: Build an image from the Dockerfile below and pin its digest: the commands below "
        "build it and print the pinned reference.\n"
        + DOCKERFILE_TITLE + _dockerfile_block() + BUILD_AND_PIN)
    # control: an image whose rustc is what answered nothing is not an official image
    # missing a component; the same fix, without that explanation
    rustc = errors.ImageLacksLinter("r/x@" + D, "", probe="rustc -vV").guidance().render_text()
    assert "rustup --profile minimal" not in rustc and _dockerfile_block() in rustc


def test_no_image_configured_says_why_an_official_image_will_not_do_and_prints_the_fix() -> None:
    text = errors.NoImageConfigured(Path("/u/c.toml"), Path("/r/roteiro.toml")).guidance().render_text()
    assert text == (
        "error: No linter image is configured: `[lint] image` is not set.\n"
        "  note: No report was made, and nothing ran on this host instead.\n"
        "  note: Set it in the repository's /r/roteiro.toml or in your /u/c.toml (or pass --image "
        "for one run).\n"
        "  note: There is no default image on purpose: the image is where the repository's build "
        "scripts and proc macros execute and what the report vouches for, so the tool never picks "
        "one for you; you choose it, by digest, never by tag.\n"
        + WHY_NOT_OFFICIAL +
        "  note: To build one from the Dockerfile below, run the two commands at the end: the "
        "second prints the pinned reference and the `config set` that makes it yours.\n"
        "  note: For an image in a registry, name it as below and provision it with "
        "`pylint-sandbox prefetch --analyzer clippy --allow-download`; `pylint-sandbox docs "
        "threat-model` says what the image is trusted with.\n"
        + DOCKERFILE_TITLE + _dockerfile_block() +
        "  or add to /r/roteiro.toml:\n"
        "    [lint]\n"
        '    image = "registry.example/team/clippy@sha256:<64 hex>"\n'
        + BUILD_AND_PIN)


def test_cold_cache_says_in_one_line_why_the_vm_cannot_fetch() -> None:
    """With a vendored view holding every pin, a package cargo cannot find is one the
    lockfile does not pin: the advice is an up-to-date lockfile, not fetch-deps alone (which
    found every pin present and exited 0: the user looped, issue 20's integration port)."""
    text = errors.ColdCache(Path("/t/tree-6"), "serde v1.0.219",
                            "error: no matching package named `serde` found").guidance().render_text()
    assert text == (
        "error: Cargo in the VM looked for the package serde v1.0.219, which the lockfile of "
        "/t/tree-6 does not pin.\n"
        "  note: No report was made, and nothing ran on this host instead.\n"
        "  note: Cargo said: error: no matching package named `serde` found.\n"
        "  note: The VM cannot fetch what is missing: it has no network device, by design, since "
        "the tree's build scripts and proc macros run in it. It is given every package the "
        "lockfile pins, and nothing else.\n"
        "  note: Ask the branch's author to commit a Cargo.lock that matches its manifests. If a "
        "manifest names a registry (`registry = \"<name>\"`), define it as [registries.<name>] "
        "index in $CARGO_HOME/config.toml or in the tree's .cargo/config.toml. Then fetch what "
        "the lockfile pins:\n"
        "  run:\n"
        "    pylint-sandbox fetch-deps /t/tree-6\n")


def test_a_block_is_checked_like_the_rest_of_a_guidance() -> None:
    assert Guidance(summary="Fine.", blocks=(("t", "FROM x\nRUN y"),)).defects() == []
    assert Guidance(summary="Fine.", blocks=(("t", " "),)).defects()
    assert Guidance(summary="Fine.", blocks=(("t", "RUN \x1b[2J"),)).defects()
