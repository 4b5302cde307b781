"""A toolchain from a local stand-in for Rust's distribution server (roteiro_py/image/rust_dist.py).

The server is http.server on loopback serving a channel manifest and rust-installer
tarballs built here, the manifest signed by real gpg with a test key; the code under test
is told to trust that key in place of the shipped Rust key (and a control shows the
shipped key refuses the test's signature). Every refusal is checked to leave nothing: no
`dest`, no temporary directory beside it, and no cache file whose name is not its sha256.
"""

from __future__ import annotations

import hashlib
import http.server
import io
import json
import lzma
import os
import shutil
import tarfile
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.image import rust_dist, toolchain
from roteiro_py.vm.assets import openpgp
from tests.unit.gpg_support import Gpg, make_gpg

HOST = "x86_64-unknown-linux-gnu"
ARM = "aarch64-unknown-linux-gnu"
DATE = "2026-11-01"
VERSION = "1.95.0"
RELEASE = "release@example.org"
#: The rustc version a manifest of each undated channel says, as Rust's do.
RUSTC = {"stable": VERSION, "beta": "1.96.0-beta.3", "nightly": "1.97.0-nightly"}


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    yield from make_gpg(tmp_path_factory.mktemp("gnupg"))


# -- rust-installer tarballs, as Rust's dist builds them -------------------------------------


def installer(pkg: str, triple: str, components: dict[str, dict[str, bytes]], *, xz: bool = True,
              extra: list[tarfile.TarInfo] | None = None) -> bytes:
    """`<pkg>-<version>-<triple>/` with `components`, `rust-installer-version`, and per
    component its files and a `manifest.in` listing them (`file:`; a path ending in `/`
    is a `dir:` entry whose files follow it)."""
    top = f"{pkg}-{VERSION}-{triple}"
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz" if xz else "w:gz", format=tarfile.GNU_FORMAT) as tar:
        def add(name: str, data: bytes, mode: int = 0o644) -> None:
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 1
            tar.addfile(info, io.BytesIO(data))

        directory = tarfile.TarInfo(top)
        directory.type, directory.mode = tarfile.DIRTYPE, 0o755
        tar.addfile(directory)
        add(f"{top}/components", "".join(f"{c}\n" for c in components).encode())
        add(f"{top}/rust-installer-version", b"3\n")
        for component, files in components.items():
            lines = []
            for path, data in files.items():
                if path.endswith("/"):
                    lines.append(f"dir:{path.rstrip('/')}")
                    continue
                if not any(path.startswith(d) for d in files if d.endswith("/")):
                    lines.append(f"file:{path}")
                add(f"{top}/{component}/{path}", data, 0o755 if path.startswith("bin/") else 0o644)
            add(f"{top}/{component}/manifest.in", "".join(f"{line}\n" for line in lines).encode())
        for info in extra or []:
            info.name = f"{top}/{info.name}"
            tar.addfile(info, io.BytesIO(b"x" * info.size) if info.isreg() else None)
    return out.getvalue()


def packages() -> dict[tuple[str, str], tuple[str, bytes, bool]]:
    """(manifest name, target) -> (component name, tarball, is xz)."""
    std = lambda t: {f"lib/rustlib/{t}/lib/libstd-0123.rlib": f"std for {t}".encode()}  # noqa: E731
    return {
        ("rustc", HOST): ("rustc", installer("rustc", HOST, {"rustc": {
            "bin/rustc": b"#!rustc\n", "lib/librustc_driver-0123.so": b"driver"}}), True),
        ("cargo", HOST): ("cargo", installer("cargo", HOST, {"cargo": {"bin/cargo": b"#!cargo\n"}},
                                             xz=False), False),
        ("rust-std", HOST): ("rust-std", installer("rust-std", HOST, {f"rust-std-{HOST}": std(HOST)}), True),
        ("rust-std", ARM): ("rust-std", installer("rust-std", ARM, {f"rust-std-{ARM}": std(ARM)}), True),
        ("clippy-preview", HOST): ("clippy-preview", installer("clippy", HOST, {"clippy-preview": {
            "bin/cargo-clippy": b"#!cargo-clippy\n", "bin/clippy-driver": b"#!clippy-driver\n"}}), True),
        ("rust-src", "*"): ("rust-src", installer("rust-src", "noarch", {"rust-src": {
            "lib/rustlib/src/rust/": b"", "lib/rustlib/src/rust/library/core/lib.rs": b"//! core\n"}}), True),
    }


# -- the stand-in server -------------------------------------------------------------------


@dataclass
class Dist:
    """What the server serves (path -> bytes) and what it was asked for."""

    files: dict[str, bytes] = field(default_factory=dict)
    asked: list[str] = field(default_factory=list)
    redirects: dict[str, str] = field(default_factory=dict)
    url: str = ""

    def publish(self, gpg: Gpg, *, signer: str = RELEASE, drop: tuple[tuple[str, str], ...] = (),
                unavailable: tuple[tuple[str, str], ...] = (),
                replace: dict[tuple[str, str], bytes] | None = None,
                other: dict[tuple[str, str], bytes] | None = None, tamper: bool = False,
                date: str = DATE, at: str = f"dist/channel-rust-{VERSION}.toml", rustc: str = VERSION) -> None:
        """The manifest for `packages()` (less `drop`, `unavailable` marked so), each
        package under the default server's URL (as Rust's manifests name them), signed by
        `signer`; `replace` serves other bytes than the manifest's hash describes; `other`
        publishes other bytes, the manifest listing their hash (a new build of a package);
        `tamper` alters the manifest after signing; `date` is its date field, `at` the
        path it is served at, `rustc` the version its packages say (a channel's own:
        RUSTC)."""
        lines = ['manifest-version = "2"', f'date = "{date}"']
        for (name, target), (_component, tarball, xz) in packages().items():
            if (name, target) in drop:
                continue
            tarball = (other or {}).get((name, target), tarball)
            if not any(line == f"[pkg.{name}]" for line in lines):
                lines += [f"[pkg.{name}]", f'version = "{rustc} (abcdef012 {DATE})"']
            shown = '"*"' if target == "*" else target
            lines.append(f"[pkg.{name}.target.{shown}]")
            if (name, target) in unavailable:
                lines.append("available = false")
                continue
            file = f"dist/{DATE}/{name}-{VERSION}-{target.replace('*', 'noarch')}.tar.{'xz' if xz else 'gz'}"
            self.files[file] = (replace or {}).get((name, target), tarball)
            key = "xz_" if xz else ""
            lines += ["available = true", f'{key}url = "https://static.rust-lang.org/{file}"',
                      f'{key}hash = "{hashlib.sha256(tarball).hexdigest()}"']
        lines += ["[renames.clippy]", 'to = "clippy-preview"', "[renames.rls]", 'to = "rls-preview"']
        manifest = ("\n".join(lines) + "\n").encode()
        self.files[at + ".asc"] = gpg.detach_sign(signer, manifest)
        self.files[at] = manifest.replace(b"available = true", b"available = true ", 1) if tamper else manifest


@pytest.fixture
def dist() -> Iterator[Dist]:
    served = Dist()

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.lstrip("/")
            served.asked.append(path)
            if path in served.redirects:
                self.send_response(302)
                self.send_header("Location", served.redirects[path])
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            body = served.files.get(path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    served.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield served
    server.shutdown()
    server.server_close()


@pytest.fixture
def trust_test_key(gpg: Gpg, monkeypatch: pytest.MonkeyPatch) -> None:
    """The test's release key stands in for the shipped Rust key (only the key: every
    check of the signature is the code's own)."""
    keys = openpgp.load_keyring(gpg.run("--export", RELEASE), [gpg.fingerprint(RELEASE)])
    monkeypatch.setattr(rust_dist, "pinned_keys", lambda: keys)


def nothing_stored(dest: Path, cache: Path) -> None:
    assert not os.path.lexists(dest)
    # the cache is made only once the manifest verified (read_manifest, then install)
    assert sorted(p.name for p in dest.parent.iterdir()) in ([], ["cache"]), "a temporary directory was left"
    for kept in cache.iterdir() if cache.exists() else ():  # only what verified, named by its sha256
        if kept.name not in (rust_dist.FLOOR_RECORD, rust_dist.FLOOR_RECORD + ".lock"):  # and the floors' record
            assert kept.name == hashlib.sha256(kept.read_bytes()).hexdigest()


def fetch(dist: Dist, tmp_path: Path, **kwargs: object) -> Path:
    return rust_dist.fetch_toolchain(VERSION, tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache",
                                     **kwargs)  # type: ignore[arg-type]


# -- good ------------------------------------------------------------------------------------


def test_a_verified_toolchain_is_laid_out_as_rustup_lays_one(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    dist.publish(gpg)
    monkeypatch.setenv(rust_dist.SERVER_ENV, dist.url)  # the mirror, as rustup reads it
    dest = rust_dist.fetch_toolchain(VERSION, tmp_path / "toolchain", cache=tmp_path / "cache",
                                     targets=[ARM], components=["rust-src"])
    assert list(rust_dist.files_of(dest)) == [
        "bin/cargo", "bin/cargo-clippy", "bin/clippy-driver", "bin/rustc", "lib/librustc_driver-0123.so",
        f"lib/rustlib/{ARM}/lib/libstd-0123.rlib", "lib/rustlib/multirust-channel-manifest.toml",
        "lib/rustlib/src/rust/library/core/lib.rs", f"lib/rustlib/{HOST}/lib/libstd-0123.rlib"]
    assert (dest / "bin/clippy-driver").read_bytes() == b"#!clippy-driver\n"
    # the verified manifest where rustup keeps it: image build reads the rustc version there
    assert toolchain.toolchain_version(dest, "fallback") == VERSION
    assert os.stat(dest / "bin/cargo").st_mode & 0o777 == 0o755
    assert os.stat(dest / "lib/librustc_driver-0123.so").st_mode & 0o777 == 0o644
    # the manifest and its signature first, then packages, from the mirror (rewritten URLs)
    assert dist.asked[:2] == [f"dist/channel-rust-{VERSION}.toml", f"dist/channel-rust-{VERSION}.toml.asc"]
    assert sorted(dist.asked[2:]) == sorted(f for f in dist.files if f.startswith(f"dist/{DATE}/"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cache", "toolchain"]
    # the cache is keyed by sha256: a second toolchain needs no package from the server
    dist.asked.clear()
    for file in [f for f in dist.files if f.startswith(f"dist/{DATE}/")]:
        del dist.files[file]
    again = rust_dist.fetch_toolchain(VERSION, tmp_path / "again", cache=tmp_path / "cache",
                                      targets=[ARM], components=["rust-src"])
    assert list(rust_dist.files_of(again)) == list(rust_dist.files_of(dest))
    assert len(dist.asked) == 2


def test_a_files_mode_is_the_archives_whatever_the_umask(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """The image build's key for a toolchain from the distribution is what the manifest
    pins (rust_dist.Pinned.key), not the unpacked files' modes, and the layer takes a
    file's mode from whether it is executable (toolchain._file_mode). A umask that takes
    the owner's x bit (0o177) made rustc 0644 on disk, so a layer whose rustc cannot run
    was built, and cached, under the same key as the good one. Red before: 0o600."""
    dist.publish(gpg)
    old = os.umask(0o177)
    try:
        dest = fetch(dist, tmp_path)
    finally:
        os.umask(old)
    assert os.stat(dest / "bin/rustc").st_mode & 0o777 == 0o755
    assert os.stat(dest / "lib/librustc_driver-0123.so").st_mode & 0o777 == 0o644
    assert toolchain.toolchain_layer(dest).entries["usr/local/bin/rustc"].mode == 0o755


def test_the_shipped_rust_key_is_what_is_trusted_by_default(gpg: Gpg, dist: Dist, tmp_path: Path) -> None:
    """Control for `trust_test_key`: without it, the test's signature is refused."""
    dist.publish(gpg)
    assert {key.fingerprint for key in rust_dist.pinned_keys()} == set(rust_dist.PINNED_KEYS)
    with pytest.raises(errors.ToolchainRefused, match="not a pinned key"):
        fetch(dist, tmp_path)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


# -- refused, nothing stored ----------------------------------------------------------------


def test_a_tampered_manifest_is_refused_before_it_is_read(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    dist.publish(gpg, tamper=True)
    with pytest.raises(errors.ToolchainRefused) as refused:
        fetch(dist, tmp_path)
    assert "does not verify with the Rust release key" in str(refused.value)
    assert refused.value.exit_code == errors.EXIT_REFUSED
    assert len(dist.asked) == 2  # no package was asked for
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


def test_a_manifest_signed_by_another_key_is_refused(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    dist.publish(gpg, signer="s@example.org")
    with pytest.raises(errors.ToolchainRefused, match="not a pinned key"):
        fetch(dist, tmp_path)
    assert len(dist.asked) == 2
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


def test_a_package_whose_sha256_differs_is_refused_and_not_cached(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    other = installer("clippy", HOST, {"clippy-preview": {"bin/cargo-clippy": b"evil", "bin/clippy-driver": b"x"}})
    dist.publish(gpg, replace={("clippy-preview", HOST): other})
    with pytest.raises(errors.ToolchainRefused) as refused:
        fetch(dist, tmp_path)
    message = str(refused.value)
    assert f"clippy-preview for {HOST} has sha256 {hashlib.sha256(other).hexdigest()}" in message
    assert "as the signed manifest lists" in message
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    assert hashlib.sha256(other).hexdigest() not in os.listdir(tmp_path / "cache")


@pytest.mark.parametrize("how", ["dropped", "unavailable"])
def test_a_missing_component_is_refused_by_name(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, how: str) -> None:
    gone = (("clippy-preview", HOST),)
    dist.publish(gpg, **({"drop": gone} if how == "dropped" else {"unavailable": gone}))  # type: ignore[arg-type]
    with pytest.raises(errors.ToolchainIncomplete) as refused:
        fetch(dist, tmp_path)
    assert str(refused.value) == f"The Rust toolchain {VERSION} ({DATE}) has no clippy for {HOST}."
    assert len(dist.asked) == 2
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


def test_a_missing_target_is_refused_by_name(gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    dist.publish(gpg)
    with pytest.raises(errors.ToolchainIncomplete) as refused:
        fetch(dist, tmp_path, targets=["riscv64gc-unknown-linux-gnu"])
    assert "has no rust-std for riscv64gc-unknown-linux-gnu" in str(refused.value)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    # control: a target the manifest has is fetched
    assert (fetch(dist, tmp_path, targets=[ARM]) / f"lib/rustlib/{ARM}/lib/libstd-0123.rlib").exists()


def _member(name: str, kind: bytes = tarfile.REGTYPE, size: int = 1, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size if kind == tarfile.REGTYPE else 0, link
    return info


@pytest.mark.parametrize(("extra", "why"), [
    (_member("rustc/bin/sh", tarfile.SYMTYPE, link="/bin/sh"), "is a link"),
    (_member("rustc/bin/inner", tarfile.SYMTYPE, link="rustc"), "is a link"),
    (_member("rustc/bin/hard", tarfile.LNKTYPE, link="rustc-1.95.0-x86_64-unknown-linux-gnu/rustc/bin/rustc"),
     "is a link"),
    (_member("rustc/dev/null", tarfile.CHRTYPE), "a device, FIFO or special member"),
    (_member("rustc/fifo", tarfile.FIFOTYPE), "a device, FIFO or special member"),
    (_member("../../escape"), "has a '..' component"),
    (_member("rustc/bin/rustc"), "appears twice"),
])
def test_an_unsafe_tarball_is_refused(gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path,
                                      extra: tarfile.TarInfo, why: str) -> None:
    evil = installer("rustc", HOST, {"rustc": {"bin/rustc": b"#!rustc\n"}}, extra=[extra])
    dist.publish(gpg)  # then re-signed listing the evil tarball's own sha256: only unpacking can refuse it
    manifest = dist.files[f"dist/channel-rust-{VERSION}.toml"]
    good = packages()[("rustc", HOST)][1]
    manifest = manifest.replace(hashlib.sha256(good).hexdigest().encode(), hashlib.sha256(evil).hexdigest().encode())
    dist.files[f"dist/channel-rust-{VERSION}.toml"] = manifest
    dist.files[f"dist/channel-rust-{VERSION}.toml.asc"] = gpg.detach_sign(RELEASE, manifest)
    dist.files[f"dist/{DATE}/rustc-{VERSION}-{HOST}.tar.xz"] = evil
    with pytest.raises(errors.ToolchainRefused, match=why):
        fetch(dist, tmp_path)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    assert not (tmp_path.parent / "escape").exists()


def test_an_absolute_member_is_refused() -> None:
    with pytest.raises(rust_dist._Unsafe, match="is an absolute path"):
        rust_dist._relative("/etc/passwd", "the member")
    assert str(rust_dist._relative("./a//b/./c", "the member")) == "a/b/c"  # control


# -- where from ------------------------------------------------------------------------------


def test_plain_http_is_spoken_to_loopback_only() -> None:
    assert rust_dist.not_fetchable("https://static.rust-lang.org/dist/x") is None
    for ok in ("http://127.0.0.1:8080/", "http://[::1]/", "http://localhost/", "http://127.3.4.5/"):
        assert rust_dist.not_fetchable(ok) is None, ok
    for bad in ("http://static.rust-lang.org/", "http://10.0.0.1/", "ftp://127.0.0.1/", "file:///etc/passwd",
                "https://user@static.rust-lang.org/", "https:///nohost", "https://a b/"):
        assert rust_dist.not_fetchable(bad) is not None, bad
    with pytest.raises(errors.ToolchainSpecInvalid, match="is not https"):
        rust_dist.resolve_server(None, {rust_dist.SERVER_ENV: "http://mirror.example/"})
    assert rust_dist.resolve_server(None, {}) == rust_dist.DEFAULT_SERVER


def test_a_redirect_off_https_is_refused_before_it_is_followed(gpg: Gpg, dist: Dist, tmp_path: Path) -> None:
    dist.redirects["dist/channel-rust-1.95.0.toml"] = "http://192.0.2.1/channel-rust-1.95.0.toml"
    started = time.monotonic()
    with pytest.raises(errors.ToolchainRefused, match="which is not https"):
        fetch(dist, tmp_path)
    assert time.monotonic() - started < 10  # refused, not tried (TEST-NET-1 answers nobody)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    # control: a redirect to a fetchable URL is followed
    dist.publish(gpg)
    dist.redirects["dist/channel-rust-1.95.0.toml"] = dist.url + "/dist/channel-rust-1.95.0.toml.asc"
    with pytest.raises(errors.ToolchainRefused, match="does not verify"):
        fetch(dist, tmp_path)  # followed: the .asc served as the manifest does not verify


def test_an_oversized_manifest_is_refused(dist: Dist, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rust_dist, "MAX_MANIFEST_BYTES", 100)
    dist.files[f"dist/channel-rust-{VERSION}.toml"] = b"#" * 101
    with pytest.raises(errors.ToolchainRefused, match="larger than 100 bytes"):
        fetch(dist, tmp_path)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


def test_a_server_that_is_down_is_unreachable(tmp_path: Path) -> None:
    with pytest.raises(errors.ToolchainUnreachable, match="could not be fetched"):
        rust_dist.fetch_toolchain(VERSION, tmp_path / "t", server="http://127.0.0.1:9", cache=tmp_path / "cache")


# -- names -------------------------------------------------------------------------------------


@pytest.mark.parametrize(("text", "channel", "date", "path"), [
    ("1.95.0", "1.95.0", None, "dist/channel-rust-1.95.0.toml"),
    ("1.95", "1.95", None, "dist/channel-rust-1.95.toml"),
    ("stable", "stable", None, "dist/channel-rust-stable.toml"),
    ("nightly-2026-11-01", "nightly", "2026-11-01", "dist/2026-11-01/channel-rust-nightly.toml"),
    ("beta-2026-10-30", "beta", "2026-10-30", "dist/2026-10-30/channel-rust-beta.toml"),
])
def test_a_spec_names_its_manifest(text: str, channel: str, date: str | None, path: str) -> None:
    spec = rust_dist.parse_spec(text)
    assert (spec.channel, spec.date, spec.manifest_path, str(spec)) == (channel, date, path, text)


@pytest.mark.parametrize("text", ["", "1.95.0-2026-11-01", "nightly-2026-13-01", "stable-x86_64-unknown-linux-gnu",
                                  "../../etc", "nightly-2026-11-01/../x", "1.95.0 ", "v1.95.0", "x" * 65])
def test_a_spec_that_is_not_one_is_a_usage_error(text: str) -> None:
    with pytest.raises(errors.ToolchainSpecInvalid) as refused:
        rust_dist.parse_spec(text)
    assert refused.value.exit_code == errors.EXIT_USAGE


def test_a_manifest_that_is_not_v2_is_refused() -> None:
    with pytest.raises(rust_dist._Malformed, match="manifest-version"):
        rust_dist.parse_manifest(b'manifest-version = "1"\ndate = "2026-11-01"\n')
    with pytest.raises(rust_dist._Malformed, match="not TOML"):
        rust_dist.parse_manifest(b"[[[")
    with pytest.raises(rust_dist._Malformed, match="no url and sha256"):
        rust_dist.parse_manifest(b'manifest-version = "2"\ndate = "2026-11-01"\n'
                                 b'[pkg.rustc.target.x]\navailable = true\nurl = "https://a/b"\nhash = "zz"\n')


def test_the_fingerprint_a_refusal_names_is_the_pinned_primary_key() -> None:
    named = [fpr for fpr in rust_dist.PINNED_KEYS if fpr in errors.RUST_DIST_CHECKED]
    assert named == ["108F66205EAEB0AAA8DD5E1C85AB96E6FA1BE5FE"]
    primary = openpgp.load_keyring(
        (rust_dist.resources.files("roteiro_py") / "data" / "rust-key.gpg.ascii").read_bytes(), named)
    assert [key.fingerprint for key in primary] == named


# -- Rust's own bytes --------------------------------------------------------------------------

REAL = Path(__file__).resolve().parents[2] / "data" / "rust-dist"
REAL_SHA256 = "2f66712691e7b1e2d8eaa48417d935424008f8a1757c377db48c2ca88ccb42f4"


def real_manifest() -> tuple[bytes, bytes]:
    manifest = lzma.decompress((REAL / "channel-rust-1.38.0.toml.xz").read_bytes())
    assert hashlib.sha256(manifest).hexdigest() == REAL_SHA256
    return manifest, (REAL / "channel-rust-1.38.0.toml.asc").read_bytes()


def test_a_manifest_rust_signed_verifies_with_the_shipped_key() -> None:
    """Rust 1.38.0's stable manifest (2019-09-26), signed by the release key's signing
    subkey: verified with the key in roteiro_py/data, refused once altered by one byte, and
    refused without the subkey's pin (so pinning the subkey is what lets it in)."""
    manifest, signature = real_manifest()
    verified = openpgp.verify_detached(manifest, signature, rust_dist.pinned_keys(), time.time())
    assert verified.fingerprint == "C13466B7E169A085188632165CB4A9347B3B09DC"
    assert time.strftime("%Y-%m-%d", time.gmtime(verified.created)) == "2019-09-26"
    with pytest.raises(openpgp.Unverified, match="does not match|does not verify"):
        openpgp.verify_detached(manifest.replace(b"1.38.0", b"1.38.1", 1), signature, rust_dist.pinned_keys(),
                                time.time())
    primary_only = [k for k in rust_dist.pinned_keys() if k.fingerprint.startswith("108F")]
    with pytest.raises(openpgp.Unverified, match="not a pinned key"):
        openpgp.verify_detached(manifest, signature, primary_only, time.time())
    parsed = rust_dist.parse_manifest(manifest)
    assert (parsed.date, parsed.renames["clippy"]) == ("2019-09-26", "clippy-preview")
    clippy = parsed.find("clippy", HOST)
    assert clippy is not None and clippy.url.endswith(f"/dist/2019-09-26/clippy-0.0.212-{HOST}.tar.xz")
    assert parsed.find("rust-src", HOST) is not None  # published for target "*"


def test_rusts_manifest_is_followed_to_its_packages_on_a_mirror(dist: Dist, tmp_path: Path) -> None:
    """The real manifest served by the stand-in (as a mirror would), with the shipped key
    and nothing patched: it verifies, is read, and the first package is asked for at the
    mirror's rewritten URL; the mirror has none, so the fetch is unreachable, nothing kept."""
    manifest, signature = real_manifest()
    dist.files["dist/channel-rust-1.38.0.toml"] = manifest
    dist.files["dist/channel-rust-1.38.0.toml.asc"] = signature
    with pytest.raises(errors.ToolchainUnreachable, match="HTTP 404"):
        rust_dist.fetch_toolchain("1.38.0", tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache")
    assert dist.asked == ["dist/channel-rust-1.38.0.toml", "dist/channel-rust-1.38.0.toml.asc",
                          f"dist/2019-09-26/rustc-1.38.0-{HOST}.tar.xz"]
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    dist.asked.clear()
    with pytest.raises(errors.ToolchainIncomplete, match="has no rust-std for x86_64-unknown-nonesuch"):
        rust_dist.fetch_toolchain("1.38.0", tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache",
                                  targets=["x86_64-unknown-nonesuch"])
    assert len(dist.asked) == 2


def serve_as(dist: Dist, path: str, source: str) -> None:
    """Serve the manifest (and signature) at `source` also at `path`."""
    for suffix in ("", ".asc"):
        dist.files[path + suffix] = dist.files[source + suffix]


def test_a_signed_manifest_of_another_release_or_date_is_refused(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """A mirror serving a validly signed but other manifest (a downgrade) is refused."""
    dist.publish(gpg)
    ours = f"dist/channel-rust-{VERSION}.toml"
    for path in ("dist/channel-rust-1.96.0.toml", "dist/channel-rust-1.9.toml", "dist/channel-rust-nightly.toml",
                 "dist/2026-11-02/channel-rust-nightly.toml"):
        serve_as(dist, path, ours)

    def get(spec: str, name: str = "toolchain") -> Path:
        return rust_dist.fetch_toolchain(spec, tmp_path / name, server=dist.url, cache=tmp_path / "cache")

    with pytest.raises(errors.ToolchainRefused, match=r"signed, but it is the manifest of rustc 1\.95\.0, not 1\.96"):
        get("1.96.0")
    with pytest.raises(errors.ToolchainRefused, match="not 1.9 "):  # 1.95.0 is not a 1.9.x
        get("1.9")
    with pytest.raises(errors.ToolchainRefused, match="it is the manifest of 2026-11-01, not of 2026-11-02"):
        get("nightly-2026-11-02")
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    # control: the same bytes under the names they belong to are taken
    serve_as(dist, "dist/channel-rust-1.95.toml", ours)
    assert (get("1.95", "a") / "bin/clippy-driver").exists()
    dist.publish(gpg, at="dist/2026-11-01/channel-rust-nightly.toml", rustc=RUSTC["nightly"])
    assert (get("nightly-2026-11-01", "b") / "bin/clippy-driver").exists()
    # undated: no date to compare with; but this manifest is older than an undated nightly
    # may be (the date floor's tests below take it further)
    serve_as(dist, "dist/channel-rust-nightly.toml", "dist/2026-11-01/channel-rust-nightly.toml")
    with pytest.raises(errors.ToolchainStale, match=f"more than the {rust_dist.MAX_AGE_DAYS['nightly']} days"):
        get("nightly", "c")


# -- undated channels: the date floor ----------------------------------------------------------


def day(now: float, days_before: int) -> str:
    """The UTC date `days_before` days before `now`, as a manifest's date field spells it."""
    return time.strftime("%Y-%m-%d", time.gmtime(now - days_before * 86400))


def test_an_older_signed_manifest_after_a_newer_was_accepted_is_refused(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """The freeze attack: a mirror (or the network) serves `channel-rust-stable.toml` of a
    date before one this host already took. Validly signed, and within the channel's
    maximum age, so only the record of what was accepted tells it is a replay. Red before
    the record: the older manifest was built."""
    now = time.time()
    newer, older = day(now, 3), day(now, 10)
    stable = "dist/channel-rust-stable.toml"

    def get(name: str) -> Path:
        return rust_dist.fetch_toolchain("stable", tmp_path / name, server=dist.url, cache=tmp_path / "cache",
                                         now=now)

    dist.publish(gpg, date=newer, at=stable)
    assert (get("first") / "bin/clippy-driver").exists()
    dist.publish(gpg, date=older, at=stable)
    dist.asked.clear()
    with pytest.raises(errors.ToolchainRefused) as refused:
        get("replayed")
    assert dist.asked == [stable, stable + ".asc"]  # refused before any package was asked for
    record = tmp_path / "cache" / rust_dist.FLOOR_RECORD
    assert isinstance(refused.value, errors.ToolchainStale)
    assert refused.value.exit_code == errors.EXIT_REFUSED
    text = refused.value.guidance().render_text()
    assert (f"Refused the Rust toolchain stable from {dist.url}: its signed manifest is of {older}, older than "
            f"{newer}, the newest stable manifest this host already accepted (from {dist.url}, recorded in "
            f"{record})") in text
    assert f"pylint-sandbox image build --from-dist stable-{newer}" in text
    assert f'channel = "stable-{newer}"' in text
    assert "served 20" in text and "an old manifest replayed" in text  # the same server went back
    shutil.rmtree(tmp_path / "first")
    nothing_stored(tmp_path / "replayed", tmp_path / "cache")
    # control: the same date again is taken, and a newer one raises the floor
    dist.publish(gpg, date=newer, at=stable)
    assert (get("again") / "bin/clippy-driver").exists()
    newest = day(now, 1)
    dist.publish(gpg, date=newest, at=stable)
    assert (get("newest") / "bin/clippy-driver").exists()
    assert json.loads(record.read_text())["channels"]["stable"]["date"] == newest
    dist.publish(gpg, date=newer, at=stable)
    with pytest.raises(errors.ToolchainStale, match=f"older than {newest}, the newest stable manifest"):
        get("replayed")
    # a dated spec is not held to the floor: what it names is exactly what it gets
    dist.publish(gpg, date=older, at=f"dist/{older}/channel-rust-stable.toml")
    dated = rust_dist.fetch_toolchain(f"stable-{older}", tmp_path / "dated", server=dist.url,
                                      cache=tmp_path / "cache", now=now)
    assert (dated / "bin/clippy-driver").exists()
    assert json.loads(record.read_text())["channels"]["stable"]["date"] == newest  # and lowers nothing


def test_a_newer_dated_manifest_raises_the_floor_of_its_channel(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """`nightly-D` verified proves a nightly of D exists: an undated nightly older than it
    is a stale one, whichever way this host learned of D."""
    now = time.time()
    dist.publish(gpg, date=day(now, 1), at=f"dist/{day(now, 1)}/channel-rust-nightly.toml", rustc=RUSTC["nightly"])
    rust_dist.fetch_toolchain(f"nightly-{day(now, 1)}", tmp_path / "dated", server=dist.url,
                              cache=tmp_path / "cache", now=now)
    dist.publish(gpg, date=day(now, 2), at="dist/channel-rust-nightly.toml", rustc=RUSTC["nightly"])
    with pytest.raises(errors.ToolchainStale, match=f"of {day(now, 2)}, older than {day(now, 1)}"):
        rust_dist.fetch_toolchain("nightly", tmp_path / "undated", server=dist.url, cache=tmp_path / "cache", now=now)
    # control: with no record (another cache) the same manifest is within nightly's age
    assert (rust_dist.fetch_toolchain("nightly", tmp_path / "undated", server=dist.url, cache=tmp_path / "other",
                                      now=now) / "bin/cargo").exists()


@pytest.mark.parametrize(("spec", "served"), [
    ("stable", RUSTC["nightly"]), ("stable", RUSTC["beta"]), ("beta", RUSTC["nightly"]), ("beta", VERSION),
    ("nightly", VERSION), ("nightly", RUSTC["beta"]), ("stable-{day}", RUSTC["nightly"]),
    ("nightly-{day}", VERSION), ("1.95", "1.95.0-beta.3"), ("1.95", "1.95.0-nightly")])
def test_a_signed_manifest_of_another_channel_is_refused_and_raises_no_floor(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, spec: str, served: str) -> None:
    """A manifest does not name its channel, and Rust signs every channel's: a mirror could
    serve today's nightly manifest as channel-rust-stable.toml (or `1.95.0-nightly`'s as
    1.95's). Red before: it was taken, the image was a nightly toolchain where stable was
    asked for, and its date became stable's floor, so the real stable (weeks older than
    any nightly) was refused as stale until the next stable release. The rustc version
    says the channel (`1.95.0`, `1.96.0-beta.3`, `1.97.0-nightly`): another's is refused,
    and records nothing."""
    now = time.time()
    parsed = rust_dist.parse_spec(spec.format(day=day(now, 1)))
    own = RUSTC.get(parsed.channel, "1.95.2")
    dist.publish(gpg, date=day(now, 1), at=parsed.manifest_path, rustc=served)
    with pytest.raises(errors.ToolchainRefused) as refused:
        rust_dist.fetch_toolchain(parsed, tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache", now=now)
    assert not isinstance(refused.value, errors.ToolchainStale)
    assert f"is signed, but it is the manifest of rustc {served}, not " in refused.value.guidance().summary
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    assert not (tmp_path / "cache" / rust_dist.FLOOR_RECORD).exists()
    # control: the channel's own manifest, however older than the one refused, is taken
    dist.publish(gpg, date=day(now, 1 if parsed.date else 5), at=parsed.manifest_path, rustc=own)
    got = rust_dist.fetch_toolchain(parsed, tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache", now=now)
    assert (got / "bin" / "clippy-driver").exists()


def test_an_older_release_of_a_release_line_after_a_newer_was_accepted_is_refused(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """`1.95` is channel-rust-1.95.toml, the newest 1.95.x: it moves when a point release
    comes out, as stable does, so 1.95.0's manifest replayed after 1.95.1's was accepted
    is a downgrade (a point release is often a fix). Red before: it was taken, since only
    stable, beta and nightly had a floor. A line has no maximum age (it stops moving once
    the next minor is out): an old one with nothing newer recorded is taken, and the
    refusal names the release this host accepted, which can be built by name."""
    now = time.time()
    line = "dist/channel-rust-1.95.toml"

    def get(name: str) -> Path:
        return rust_dist.fetch_toolchain("1.95", tmp_path / name, server=dist.url, cache=tmp_path / "cache", now=now)

    dist.publish(gpg, date="2026-01-10", at=line, rustc="1.95.0")  # control: years old, nothing recorded
    assert (get("old") / "bin/clippy-driver").exists()
    dist.publish(gpg, date="2026-01-24", at=line, rustc="1.95.1")
    assert (get("newer") / "bin/clippy-driver").exists()
    dist.publish(gpg, date="2026-01-10", at=line, rustc="1.95.0")
    dist.asked.clear()
    with pytest.raises(errors.ToolchainStale) as refused:
        get("replayed")
    assert dist.asked == [line, line + ".asc"]
    record = tmp_path / "cache" / rust_dist.FLOOR_RECORD
    guidance = refused.value.guidance()
    assert guidance.summary == (
        f"Refused the Rust toolchain 1.95 from {dist.url}: its signed manifest is of 2026-01-10, older than "
        f"2026-01-24, the newest 1.95 manifest this host already accepted (from {dist.url}, recorded in "
        f"{record}).")
    assert guidance.commands == ("pylint-sandbox image build --from-dist 1.95.1",)
    assert 'channel = "1.95.1"' in guidance.render_text() and "1.95-2026" not in guidance.render_text()
    shutil.rmtree(tmp_path / "old")
    shutil.rmtree(tmp_path / "newer")
    nothing_stored(tmp_path / "replayed", tmp_path / "cache")
    # the release it names builds (a release is taken as named, and records nothing)
    dist.publish(gpg, date="2026-01-24", at="dist/channel-rust-1.95.1.toml", rustc="1.95.1")
    assert (rust_dist.fetch_toolchain("1.95.1", tmp_path / "named", server=dist.url, cache=tmp_path / "cache",
                                      now=now) / "bin/clippy-driver").exists()
    assert json.loads(record.read_text())["channels"] == {
        "1.95": {"date": "2026-01-24", "server": dist.url, "release": "1.95.1"}}


@pytest.mark.parametrize("channel", ["stable", "beta", "nightly"])
def test_an_undated_manifest_older_than_its_channels_age_is_refused_and_a_dated_one_is_not(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, channel: str) -> None:
    """The first fetch on a host has no record to compare with: an undated channel's
    manifest more than MAX_AGE_DAYS[channel] days old by this host's clock is refused;
    the boundary itself is taken; and the old manifest asked for by its date builds."""
    now = time.time()
    most = rust_dist.MAX_AGE_DAYS[channel]
    undated = f"dist/channel-rust-{channel}.toml"
    dist.publish(gpg, date=day(now, most + 1), at=undated, rustc=RUSTC[channel])
    with pytest.raises(errors.ToolchainStale) as refused:
        rust_dist.fetch_toolchain(channel, tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache", now=now)
    assert refused.value.guidance().summary == (
        f"Refused the Rust toolchain {channel} from {dist.url}: its signed manifest is of {day(now, most + 1)}, "
        f"older than {day(now, most)}, {most} days before today ({day(now, 0)} by this host's clock), more "
        f"than the {most} days an undated {channel} manifest may lag.")
    assert f"--from-dist {channel}-{day(now, most + 1)}" in refused.value.guidance().render_text()
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
    assert not (tmp_path / "cache" / rust_dist.FLOOR_RECORD).exists()  # a refusal records nothing
    old = f"dist/{day(now, most + 1)}/channel-rust-{channel}.toml"
    serve_as(dist, old, undated)
    dated = rust_dist.fetch_toolchain(f"{channel}-{day(now, most + 1)}", tmp_path / "dated", server=dist.url,
                                      cache=tmp_path / "cache", now=now)
    assert (dated / "bin/clippy-driver").exists()
    dist.publish(gpg, date=day(now, most), at=undated, rustc=RUSTC[channel])  # control: the boundary is taken
    assert (rust_dist.fetch_toolchain(channel, tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache",
                                      now=now) / "bin/clippy-driver").exists()


def test_rusts_own_old_stable_manifest_served_as_stable_is_refused(dist: Dist, tmp_path: Path) -> None:
    """Rust 1.38.0's manifest (2019-09-26), signed by Rust and verified with the shipped key,
    nothing patched: served as `channel-rust-stable.toml` it is the freeze attack itself.
    Red before the floor: it was taken, and only the mirror's missing package stopped it
    (HTTP 404 for rustc 1.38.0)."""
    manifest, signature = real_manifest()
    dist.files["dist/channel-rust-stable.toml"] = manifest
    dist.files["dist/channel-rust-stable.toml.asc"] = signature
    with pytest.raises(errors.ToolchainStale, match="its signed manifest is of 2019-09-26"):
        rust_dist.fetch_toolchain("stable", tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache")
    assert dist.asked == ["dist/channel-rust-stable.toml", "dist/channel-rust-stable.toml.asc"]
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


@pytest.mark.parametrize("date", ["2026-02-30", "2026-13-01", "0000-01-01", "2026-1-01", "2026-11-01T00:00:00"])
def test_a_signed_manifest_whose_date_is_not_a_date_is_refused(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, date: str) -> None:
    """The date is what the floor compares: one that only looks like YYYY-MM-DD (a 30th of
    February passed the pattern) is refused, dated spec or not."""
    dist.publish(gpg, date=date, at="dist/channel-rust-stable.toml")
    with pytest.raises(errors.ToolchainRefused, match="its date is not a date as YYYY-MM-DD"):
        rust_dist.fetch_toolchain("stable", tmp_path / "toolchain", server=dist.url, cache=tmp_path / "cache")
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


def test_a_floor_record_that_is_not_one_is_no_floor_and_is_rewritten(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    """The record is the tool's own state, read bounded; one it cannot read (truncated,
    altered, a link) is as no record: the maximum age still holds, and the next accepted
    manifest writes it whole again. Arrays nested 60,000 deep (within its bound) raised
    RecursionError from json.loads: exit 4 on every build of an undated channel."""
    now = time.time()
    record = tmp_path / "cache" / rust_dist.FLOOR_RECORD
    record.parent.mkdir()
    dist.publish(gpg, date=day(now, 2), at="dist/channel-rust-beta.toml", rustc=RUSTC["beta"])
    for text in ("{", '{"channels": {"beta": {"date": "2026-02-30", "server": "x"}}}', "[]", "x" * (1 << 20),
                 "[" * 60_000, "1" * 5000):
        record.write_text(text)
        got = rust_dist.fetch_toolchain("beta", tmp_path / "t", server=dist.url, cache=tmp_path / "cache", now=now)
        shutil.rmtree(got)
        assert json.loads(record.read_text())["channels"]["beta"] == {"date": day(now, 2), "server": dist.url}
    far = tmp_path / "far-future.json"  # a link is not followed, to a record or anywhere; nor a FIFO opened
    far.write_text('{"channels": {"beta": {"date": "2999-01-01", "server": "x"}}}')
    for plant in (lambda: record.symlink_to(far), lambda: os.mkfifo(record)):
        record.unlink()
        plant()
        got = rust_dist.fetch_toolchain("beta", tmp_path / "t", server=dist.url, cache=tmp_path / "cache", now=now)
        shutil.rmtree(got)
        assert not record.is_symlink() and record.is_file()
        assert json.loads(record.read_text())["channels"]["beta"] == {"date": day(now, 2), "server": dist.url}
    assert far.read_text() == '{"channels": {"beta": {"date": "2999-01-01", "server": "x"}}}'


def test_a_loopback_server_is_reached_past_the_environments_proxy(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A host with `http_proxy` set (a CI runner) still reaches the stand-in: red before,
    when urllib sent http://127.0.0.1/ to the proxy (port 9, nothing listens)."""
    dist.publish(gpg)
    for name in ("http_proxy", "HTTP_PROXY", "https_proxy"):
        monkeypatch.setenv(name, "http://127.0.0.1:9")
    monkeypatch.delenv("no_proxy", raising=False)
    monkeypatch.delenv("NO_PROXY", raising=False)
    assert (fetch(dist, tmp_path) / "bin/cargo-clippy").exists()
    # control: the environment's proxy is used for a server that is not loopback
    assert urllib.request.getproxies()["http"] == "http://127.0.0.1:9"
    with pytest.raises(errors.ToolchainUnreachable, match="Connection refused"):  # by port 9
        rust_dist.fetch_toolchain(VERSION, tmp_path / "t2", server="https://static.rust-lang.org",
                                  cache=tmp_path / "cache")


def test_a_cache_file_whose_bytes_are_not_its_name_is_fetched_again(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path) -> None:
    dist.publish(gpg)
    fetch(dist, tmp_path)
    clippy = hashlib.sha256(packages()[("clippy-preview", HOST)][1]).hexdigest()
    (tmp_path / "cache" / clippy).write_bytes(b"altered on disk")
    dist.asked.clear()
    again = rust_dist.fetch_toolchain(VERSION, tmp_path / "again", server=dist.url, cache=tmp_path / "cache")
    assert (again / "bin/clippy-driver").read_bytes() == b"#!clippy-driver\n"
    assert dist.asked[2:] == [f"dist/{DATE}/clippy-preview-{VERSION}-{HOST}.tar.xz"]  # only that one, again
    nothing_stored_but = sorted(p.name for p in tmp_path.iterdir())
    assert nothing_stored_but == ["again", "cache", "toolchain"]
    # and with the server gone, an altered cache file is never unpacked
    (tmp_path / "cache" / clippy).write_bytes(b"altered again")
    dist.files.clear()
    dist.publish(gpg)
    del dist.files[f"dist/{DATE}/clippy-preview-{VERSION}-{HOST}.tar.xz"]
    with pytest.raises(errors.ToolchainUnreachable, match="HTTP 404"):
        rust_dist.fetch_toolchain(VERSION, tmp_path / "third", server=dist.url, cache=tmp_path / "cache")
    assert not (tmp_path / "cache" / clippy).exists()


@pytest.mark.parametrize("length", ["\u00b2", "\u00b9\u00b2", "1_0", " +5"])
def test_a_content_length_that_is_not_ascii_digits_is_no_crash(length: str, tmp_path: Path) -> None:
    """A hostile server's Content-Length reached int() when str.isdigit() said yes: `²`
    (latin-1 0xB2, as http.client decodes a header) is a digit to isdigit and not to int
    (ValueError: exit 4, before any signature was read). Only ASCII digits are a length."""

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            self.send_response(200)
            self.send_header("Content-Length", length)
            self.end_headers()
            self.wfile.write(b"not a manifest")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        with pytest.raises((errors.ToolchainRefused, errors.ToolchainUnreachable)):
            rust_dist.fetch_toolchain(VERSION, tmp_path / "toolchain", server=f"http://127.0.0.1:{server.server_address[1]}",
                                      cache=tmp_path / "cache")
    finally:
        server.shutdown()
        server.server_close()
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")


@pytest.mark.parametrize("component", ["clippy-preview", "clippy"])
def test_a_component_named_as_the_manifest_renames_it_is_fetched_once(
        gpg: Gpg, dist: Dist, trust_test_key: None, tmp_path: Path, component: str) -> None:
    """A tree's `components = ["clippy-preview"]` (the name the manifest publishes clippy
    under, which rustup takes) chose clippy's package twice, once for REQUIRED's `clippy`:
    the second install found its files there and refused the distribution ("installed by
    two components", ToolchainRefused), for what the tree had asked. One package is
    installed once, however it is named."""
    dist.publish(gpg)
    dest = fetch(dist, tmp_path, components=[component])
    assert (dest / "bin" / "clippy-driver").read_bytes() == b"#!clippy-driver\n"


def _tarball(members: dict[str, bytes]) -> bytes:
    out = io.BytesIO()
    with tarfile.open(fileobj=out, mode="w:xz", format=tarfile.GNU_FORMAT) as tar:
        for name, data in members.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return out.getvalue()


@pytest.mark.parametrize("evil", [
    {"rustc-top": b"a file, not the top directory"},  # components read under a file
    {"rustc/components": b"rustc\n", "rustc/rustc": b"a file, not the component's directory"},
    {"rustc/components": b"rustc\nmore\n", "rustc/rustc/manifest.in": b"file:bin\n", "rustc/rustc/bin": b"x",
     "rustc/more/manifest.in": b"file:bin/rustc\n", "rustc/more/bin/rustc": b"x"},  # installed under a file
])
def test_a_tarball_laid_out_wrong_is_refused_not_a_crash(gpg: Gpg, dist: Dist, trust_test_key: None,
                                                         tmp_path: Path, evil: dict[str, bytes]) -> None:
    """rust-installer's layout placed (`_place`) outside the unpacking's guard: a top that
    is a file, a component that is a file, or a path installed under a file raised
    NotADirectoryError / FileExistsError (exit 4). Each is the tarball's refusal."""
    tarball = _tarball(evil)
    dist.publish(gpg)
    manifest = dist.files[f"dist/channel-rust-{VERSION}.toml"]
    good = packages()[("rustc", HOST)][1]
    manifest = manifest.replace(hashlib.sha256(good).hexdigest().encode(), hashlib.sha256(tarball).hexdigest().encode())
    dist.files[f"dist/channel-rust-{VERSION}.toml"] = manifest
    dist.files[f"dist/channel-rust-{VERSION}.toml.asc"] = gpg.detach_sign(RELEASE, manifest)
    dist.files[f"dist/{DATE}/rustc-{VERSION}-{HOST}.tar.xz"] = tarball
    with pytest.raises(errors.ToolchainRefused):
        fetch(dist, tmp_path)
    nothing_stored(tmp_path / "toolchain", tmp_path / "cache")
