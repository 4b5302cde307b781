"""The apt-free path to the VM assets: the InRelease verifier (cross-checked with gpgv, on a
key of the test's own), Packages parsing, the .deb reader and modinfo, bounded downloads."""

from __future__ import annotations

import base64
import contextlib
import gzip
import hashlib
import io
import lzma
import os
import shutil
import socket
import subprocess
import tarfile
import threading
import time
from collections.abc import Callable, Iterator
from importlib import resources
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.vm.assets import assets, debian_archive, debpkg, openpgp
from tests.unit.gpg_support import Gpg

NOW = time.time()


# -- a signing key of the test's own, made with gpg in a temporary GNUPGHOME ----------------


@pytest.fixture(scope="module")
def gpg(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    home = tmp_path_factory.mktemp("gnupg")
    os.chmod(home, 0o700)
    tool = Gpg(home)
    tool.run("--quick-gen-key", "Test Archive <a@example.org>", "ed25519", "sign", "never")
    tool.run("--quick-gen-key", "Test RSA <r@example.org>", "rsa2048", "sign", "never")
    tool.run("--quick-gen-key", "Stranger <s@example.org>", "ed25519", "sign", "never")
    yield tool
    subprocess.run(["gpgconf", "--kill", "all"], env={"GNUPGHOME": str(home), "PATH": os.environ["PATH"]},
                   check=False, timeout=30)


BODY = ("Origin: Test\nSuite: stable\nCodename: bookworm\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n"
        "-----BEGIN PGP SIGNATURE----- inside the body\n- a dash line\nTrailing blanks   \t\n"
        "SHA256:\n " + "a" * 64 + " 12 main/binary-amd64/Packages.xz\n")


def signed(gpg: Gpg, uid: str, body: str = BODY) -> bytes:
    return gpg.run("--local-user", uid, "--digest-algo", "SHA256", "--clearsign", data=body.encode())


def keys_of(gpg: Gpg, uid: str, pins: list[str]) -> list[openpgp.PublicKey]:
    return openpgp.load_keyring(gpg.run("--export", uid), pins)


def gpgv_accepts(gpg: Gpg, uid: str, message: bytes, tmp: Path) -> bool:
    (tmp / "ring.gpg").write_bytes(gpg.run("--export", uid))
    (tmp / "msg.asc").write_bytes(message)
    return subprocess.run(["gpgv", "--keyring", str(tmp / "ring.gpg"), str(tmp / "msg.asc")],
                          capture_output=True, timeout=60, check=False).returncode == 0


@pytest.mark.parametrize("uid", ["a@example.org", "r@example.org"])
def test_a_good_signature_verifies_as_gpgv_says_and_returns_the_signed_text(
        gpg: Gpg, uid: str, tmp_path: Path) -> None:
    message = signed(gpg, uid)
    assert b"\n- -----BEGIN PGP SIGNATURE----- inside" in message  # gpg dash-escaped it
    fpr = gpg.fingerprint(uid)
    verified = openpgp.verify_cleartext(message, keys_of(gpg, uid, [fpr]), NOW)
    assert gpgv_accepts(gpg, uid, message, tmp_path)
    assert verified.fingerprint == fpr
    assert verified.text == "\n".join(line.rstrip(" \t") for line in BODY.rstrip("\n").split("\n"))
    assert "-----BEGIN PGP SIGNATURE----- inside the body" in verified.text.split("\n")


def test_a_tampered_body_is_refused_by_both(gpg: Gpg, tmp_path: Path) -> None:
    fpr = gpg.fingerprint("a@example.org")
    message = signed(gpg, "a@example.org")
    tampered = message.replace(b"Codename: bookworm", b"Codename: bookwore")
    assert tampered != message
    assert not gpgv_accepts(gpg, "a@example.org", tampered, tmp_path)
    with pytest.raises(openpgp.Unverified, match="altered"):
        openpgp.verify_cleartext(tampered, keys_of(gpg, "a@example.org", [fpr]), NOW)
    # A line added with only trailing blanks changed is the same canonical text (RFC 4880 7.1).
    blanks = message.replace(b"Origin: Test\n", b"Origin: Test  \n")
    assert openpgp.verify_cleartext(blanks, keys_of(gpg, "a@example.org", [fpr]), NOW).fingerprint == fpr


def _signature_block(message: bytes) -> tuple[bytes, bytes, bytes]:
    head, rest = message.split(b"-----BEGIN PGP SIGNATURE-----\n", 1)
    armor, tail = rest.split(b"-----END PGP SIGNATURE-----", 1)
    lines = [line for line in armor.split(b"\n") if line and not line.startswith(b"=")
             and b":" not in line]
    return head, base64.b64decode(b"".join(lines)), tail


@pytest.mark.parametrize("uid", ["a@example.org", "r@example.org"])
def test_a_tampered_signature_is_refused_even_with_a_fresh_checksum(gpg: Gpg, uid: str, tmp_path: Path) -> None:
    fpr = gpg.fingerprint(uid)
    message = signed(gpg, uid)
    head, packets, tail = _signature_block(message)
    flipped = packets[:-5] + bytes([packets[-5] ^ 0x01]) + packets[-4:]
    rearmored = (head + b"-----BEGIN PGP SIGNATURE-----\n\n" + base64.b64encode(flipped) + b"\n="
                 + base64.b64encode(openpgp._crc24(flipped)) + b"\n-----END PGP SIGNATURE-----" + tail)
    assert not gpgv_accepts(gpg, uid, rearmored, tmp_path)
    with pytest.raises(openpgp.Unverified, match="does not verify"):
        openpgp.verify_cleartext(rearmored, keys_of(gpg, uid, [fpr]), NOW)
    # Control: the same re-armoring of the untouched packets verifies.
    control = (head + b"-----BEGIN PGP SIGNATURE-----\n\n" + base64.b64encode(packets) + b"\n="
               + base64.b64encode(openpgp._crc24(packets)) + b"\n-----END PGP SIGNATURE-----" + tail)
    assert openpgp.verify_cleartext(control, keys_of(gpg, uid, [fpr]), NOW).fingerprint == fpr


def test_a_key_that_is_not_pinned_counts_for_nothing(gpg: Gpg) -> None:
    message = signed(gpg, "s@example.org")
    pinned = gpg.fingerprint("a@example.org")
    # The stranger's key is in the keyring file but its fingerprint is not pinned: dropped.
    ring = gpg.run("--export", "s@example.org") + gpg.run("--export", "a@example.org")
    keys = openpgp.load_keyring(ring, [pinned])
    assert [k.fingerprint for k in keys] == [pinned]
    with pytest.raises(openpgp.Unverified, match="not a pinned key"):
        openpgp.verify_cleartext(message, keys, NOW)
    # A keyring file whose key is not the one pinned (the file swapped): nothing loads.
    assert openpgp.load_keyring(gpg.run("--export", "s@example.org"), [pinned]) == []


def test_a_truncated_or_framed_wrongly_message_is_refused(gpg: Gpg) -> None:
    fpr = gpg.fingerprint("a@example.org")
    keys = keys_of(gpg, "a@example.org", [fpr])
    message = signed(gpg, "a@example.org")
    cut = message[:message.index(b"-----END PGP SIGNATURE-----")]
    with pytest.raises(openpgp.Unverified, match="truncated"):
        openpgp.verify_cleartext(cut, keys, NOW)
    head, packets, tail = _signature_block(message)
    short = packets[:-3]
    armored = (head + b"-----BEGIN PGP SIGNATURE-----\n\n" + base64.b64encode(short)
               + b"\n-----END PGP SIGNATURE-----" + tail)
    with pytest.raises(openpgp.Unverified):
        openpgp.verify_cleartext(armored, keys, NOW)
    with pytest.raises(openpgp.Unverified, match="text after"):
        openpgp.verify_cleartext(message + b"Codename: evil\n", keys, NOW)
    undashed = message.replace(b"- - a dash line", b"-- a dash line")
    with pytest.raises(openpgp.Unverified, match="dash-escaped"):
        openpgp.verify_cleartext(undashed, keys, NOW)


def test_a_signature_from_the_future_is_refused(gpg: Gpg) -> None:
    fpr = gpg.fingerprint("a@example.org")
    message = signed(gpg, "a@example.org")
    keys = keys_of(gpg, "a@example.org", [fpr])
    assert openpgp.verify_cleartext(message, keys, time.time() - openpgp.MAX_CLOCK_SKEW_S + 60)
    with pytest.raises(openpgp.Unverified, match="future"):
        openpgp.verify_cleartext(message, keys, time.time() - openpgp.MAX_CLOCK_SKEW_S - 60)


def test_every_pinned_fingerprint_is_in_the_shipped_keyrings() -> None:
    found = {key.fingerprint for key in debian_archive.pinned_keys()}
    assert found == set(debian_archive.PINNED_KEYS)
    data = resources.files("roteiro_py") / "data"
    for name in set(debian_archive.PINNED_KEYS.values()):
        assert (data / f"{name}.gpg").is_file()


RELEASE = ("Origin: Test\nSuite: stable\nCodename: bookworm\nDate: Sat, 11 Jul 2026 10:16:37 UTC\n"
           "SHA256:\n " + "a" * 64 + " 12 main/binary-amd64/Packages.xz\n")


def test_release_fields_name_the_suite_and_refuse_an_expired_index() -> None:
    verified = openpgp.Verified(RELEASE, "F" * 40, 0)
    release = debian_archive.parse_release("file:///m", "bookworm", verified, NOW, kind="main")
    assert release.sha256 == {"main/binary-amd64/Packages.xz": ("a" * 64, 12)}
    with pytest.raises(debian_archive.ArchiveError, match="not 'trixie'"):
        debian_archive.parse_release("file:///m", "trixie", verified, NOW, kind="main")
    expired = openpgp.Verified(RELEASE.replace("Origin: Test\n", "Valid-Until: Sat, 11 Jul 2026 10:16:37 UTC\n"),
                               "F" * 40, 0)
    with pytest.raises(debian_archive.ArchiveError, match="Valid-Until"):
        debian_archive.parse_release("file:///m", "bookworm", expired, 1_900_000_000, kind="main")


# -- Packages -------------------------------------------------------------------------------


def stanza(name: str, filename: str | None = None, extra: str = "") -> str:
    data = f"{name}-data".encode()
    return (f"Package: {name}\nVersion: 1.0\nDepends: linux-image-6.1.0-9-amd64 (= 6.1)\n"
            f"Filename: {filename or f'pool/main/{name[0]}/{name}/{name}_1.0_amd64.deb'}\n"
            f"Size: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n{extra}\n")


def test_packages_keeps_what_is_asked_and_bounds_every_stanza() -> None:
    text = (stanza("linux-image-amd64") + stanza("other") + stanza("busybox-static")).encode()
    got = debian_archive.parse_packages(text, lambda n: n != "other")
    assert set(got) == {"linux-image-amd64", "busybox-static"}
    assert debian_archive.versioned_dependency(got["linux-image-amd64"],
                                               r"linux-image-[0-9][^\s]*-amd64") == "linux-image-6.1.0-9-amd64"
    huge = stanza("other", extra="Description: x\n" + " x\n" * debian_archive.MAX_STANZA_BYTES)
    with pytest.raises(debian_archive.ArchiveError, match=f"larger than {debian_archive.MAX_STANZA_BYTES}"):
        debian_archive.parse_packages(huge.encode(), lambda n: False)
    for bad in ("pool/../../etc/passwd.deb", "/etc/x.deb", "pool/main/x/./y.deb", "elsewhere/x.deb"):
        with pytest.raises(debian_archive.ArchiveError, match="unusable Filename"):
            debian_archive.parse_packages(stanza("busybox-static", bad).encode(), lambda n: True)
    with pytest.raises(debian_archive.ArchiveError, match="twice"):
        debian_archive.parse_packages((stanza("a") + stanza("a")).encode(), lambda n: True)


def test_a_package_index_bomb_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian_archive, "MAX_PACKAGES_BYTES", 1 << 20)
    bomb = lzma.compress(b"\n" * (2 << 20))
    with pytest.raises(debian_archive.ArchiveError, match=f"larger than {1 << 20} bytes"):
        debian_archive._decompress(bomb, "xz")
    assert debian_archive._decompress(lzma.compress(b"ok"), "xz") == b"ok"


def test_a_download_is_bounded_by_its_size_and_kept_only_with_its_digest(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian_archive, "_CHUNK", 10)
    mirror = tmp_path / "mirror"
    (mirror / "pool").mkdir(parents=True)
    (mirror / "pool" / "p.deb").write_bytes(b"x" * 100)
    good = debian_archive.Package("p", "1", "pool/p.deb", hashlib.sha256(b"x" * 100).hexdigest(), 100, "")
    debian_archive.download(str(mirror), good, tmp_path / "ok.deb")
    assert (tmp_path / "ok.deb").read_bytes() == b"x" * 100
    seen: list[int] = []
    short = debian_archive.Package("p", "1", "pool/p.deb", good.sha256, 40, "")
    with pytest.raises(debian_archive.ArchiveError, match="larger than 40 bytes"):
        debian_archive.download(f"file://{mirror}", short, tmp_path / "short.deb",
                                progress=lambda _p, done, _t: seen.append(done))
    assert seen == [10, 20, 30, 40]  # the read after Size asked for one byte more, and stopped
    assert not (tmp_path / "short.deb").exists()
    wrong = debian_archive.Package("p", "1", "pool/p.deb", "0" * 64, 100, "")
    with pytest.raises(debian_archive.ArchiveError, match="does not match the SHA256"):
        debian_archive.download(str(mirror), wrong, tmp_path / "wrong.deb")
    assert not (tmp_path / "wrong.deb").exists()


# -- .deb and modules ----------------------------------------------------------------------


def make_deb(path: Path, members: list[tarfile.TarInfo | tuple[str, bytes]], data_name: str = "data.tar.xz") -> Path:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:xz" if data_name.endswith("xz") else "w") as tar:
        for member in members:
            if isinstance(member, tarfile.TarInfo):
                tar.addfile(member)
            else:
                info = tarfile.TarInfo(member[0])
                info.size = len(member[1])
                tar.addfile(info, io.BytesIO(member[1]))
    out = b"!<arch>\n"
    for name, data in (("debian-binary", b"2.0\n"), ("control.tar.xz", b""), (data_name, buffer.getvalue())):
        out += f"{name + '/':<16}{0:<12}{0:<6}{0:<6}{100644:<8}{len(data):<10}`\n".encode() + data
        out += b"\n" if len(data) % 2 else b""
    path.write_bytes(out)
    return path


def test_the_deb_reader_keeps_only_wanted_regular_files(tmp_path: Path) -> None:
    deb = make_deb(tmp_path / "ok.deb", [("./bin/busybox", b"BB"), ("./usr/share/doc/x", b"doc")])
    assert list(debpkg.read_members(deb, lambda n: n == "bin/busybox")) == [("bin/busybox", b"BB")]
    link = tarfile.TarInfo("./bin/busybox")
    link.type, link.linkname = tarfile.SYMTYPE, "/etc/shadow"
    with pytest.raises(debpkg.DebError, match="not a regular file"):
        list(debpkg.read_members(make_deb(tmp_path / "l.deb", [link]), lambda n: n == "bin/busybox"))
    for name in ("../../etc/cron.d/x", "/etc/passwd", "./lib/../../x"):
        with pytest.raises(debpkg.DebError, match="outside the package"):
            list(debpkg.read_members(make_deb(tmp_path / "e.deb", [(name, b"x")]), lambda n: True))
    with pytest.raises(debpkg.DebError, match="zstd"):
        list(debpkg.read_members(make_deb(tmp_path / "z.deb", [("a", b"")], "data.tar.zst"), lambda n: True))
    (tmp_path / "not.deb").write_bytes(b"PK\x03\x04")
    with pytest.raises(debpkg.DebError, match="not an ar archive"):
        list(debpkg.read_members(tmp_path / "not.deb", lambda n: True))


def test_a_member_larger_than_the_bound_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    deb = make_deb(tmp_path / "big.deb", [("./boot/vmlinuz", b"k" * 2000)])
    monkeypatch.setattr(debpkg, "MAX_MEMBER_BYTES", 1000)
    with pytest.raises(debpkg.DebError, match="larger than 1000 bytes"):
        list(debpkg.read_members(deb, lambda n: True))
    monkeypatch.setattr(debpkg, "MAX_MEMBER_BYTES", 2000)
    assert len(list(debpkg.read_members(deb, lambda n: True))[0][1]) == 2000


def elf_module(info: dict[str, str]) -> bytes:
    """A minimal ELF64 relocatable with a .shstrtab and a .modinfo section."""
    modinfo = b"".join(f"{k}={v}".encode() + b"\0" for k, v in info.items())
    shstrtab = b"\0.shstrtab\0.modinfo\0"
    data_at = 0x40
    shoff = data_at + len(shstrtab) + len(modinfo)
    header = (b"\x7fELF\x02\x01\x01" + b"\0" * 9 + (1).to_bytes(2, "little") + (62).to_bytes(2, "little")
              + (1).to_bytes(4, "little") + b"\0" * 16 + shoff.to_bytes(8, "little") + b"\0" * 4
              + (0x40).to_bytes(2, "little") + b"\0" * 4 + (0x40).to_bytes(2, "little")
              + (3).to_bytes(2, "little") + (1).to_bytes(2, "little"))

    def section(name: int, offset: int, size: int) -> bytes:
        return (name.to_bytes(4, "little") + (3).to_bytes(4, "little") + b"\0" * 16
                + offset.to_bytes(8, "little") + size.to_bytes(8, "little") + b"\0" * 24)

    return (header + shstrtab + modinfo + b"\0" * 0x40 + section(1, data_at, len(shstrtab))
            + section(11, data_at + len(shstrtab), len(modinfo)))


def test_modinfo_gives_the_dependencies_and_the_load_order_follows_them() -> None:
    infos = {
        "kernel/fs/ext4/ext4.ko": debpkg.modinfo(elf_module({"name": "ext4", "depends": "mbcache,jbd2,crc16"})),
        "kernel/fs/jbd2/jbd2.ko": debpkg.modinfo(elf_module({"name": "jbd2", "depends": ""})),
        "kernel/fs/mbcache.ko": debpkg.modinfo(elf_module({"name": "mbcache", "depends": ""})),
        "kernel/lib/crc16.ko": debpkg.modinfo(elf_module({"name": "crc16", "depends": ""})),
        "kernel/crypto/crc32c_generic.ko": debpkg.modinfo(elf_module({"name": "crc32c_generic"})),
    }
    assert infos["kernel/fs/ext4/ext4.ko"]["depends"] == "mbcache,jbd2,crc16"
    order = assets.module_load_order(debpkg.modules_dep(infos), ("crc32c_generic", "ext4"))
    assert order == ["kernel/crypto/crc32c_generic.ko", "kernel/fs/mbcache.ko", "kernel/fs/jbd2/jbd2.ko",
                     "kernel/lib/crc16.ko", "kernel/fs/ext4/ext4.ko"]
    del infos["kernel/lib/crc16.ko"]
    with pytest.raises(debpkg.DebError, match="'crc16', which the package does not ship"):
        debpkg.modules_dep(infos)
    xz = lzma.compress(elf_module({"name": "virtio"}))
    assert debpkg.modinfo(debpkg.module_bytes("virtio.ko.xz", xz))["name"] == "virtio"
    with pytest.raises(debpkg.DebError, match="no .modinfo"):
        debpkg.modinfo(elf_module({}).replace(b".modinfo", b".notinfo"))
    with pytest.raises(debpkg.DebError, match="outside the file"):
        debpkg.modinfo(elf_module({"name": "x"})[:100])


# -- review: hostile mirrors, odd signature blocks, local copies, odd .debs ------------------


class RawServer:
    """A loopback TCP server that answers every connection with `reply(conn)`: what a
    hostile or broken HTTP mirror (or a proxy on the path to http://deb.debian.org) sends."""

    def __init__(self, reply: Callable[[socket.socket], None]) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(4)
        self.reply = reply
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}/debian"

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn, contextlib.suppress(OSError):
                conn.recv(65536)
                self.reply(conn)

    def close(self) -> None:
        self.sock.close()


@pytest.fixture
def serve() -> Iterator[Callable[[Callable[[socket.socket], None]], RawServer]]:
    servers: list[RawServer] = []

    def start(reply: Callable[[socket.socket], None]) -> RawServer:
        servers.append(RawServer(reply))
        return servers[-1]

    yield start
    for server in servers:
        server.close()


@pytest.mark.parametrize("reply", [
    b"garbage\r\n\r\n",  # not a status line: http.client.BadStatusLine
    b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",  # IncompleteRead
    b"HTTP/1.1 200 OK\r\n" + b"X: y\r\n" * 200 + b"\r\n",  # too many headers
])
def test_a_mirror_that_speaks_broken_http_is_a_failure_to_reach_it_not_a_crash(
        serve: Callable[[Callable[[socket.socket], None]], RawServer], reply: bytes,
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    server = serve(lambda conn: conn.sendall(reply))
    with pytest.raises(debian_archive.ArchiveError) as failed:
        debian_archive.fetch(server.url, "dists/bookworm/InRelease", 1000)
    assert not failed.value.refused and "dists/bookworm/InRelease" in str(failed.value)
    # Through provisioning: the user's refusal, naming the archive (not "internal error").
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path / "home"))
    with pytest.raises(errors.PrefetchFailed) as prefetch:
        assets.provision_assets(archive=server.url, suite="bookworm")
    assert server.url in prefetch.value.guidance().summary
    # Control: the same server speaking HTTP is read.
    good = serve(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    assert debian_archive.fetch(good.url, "dists/bookworm/InRelease", 1000) == b"ok"


def test_a_mirror_that_trickles_is_given_up_on_at_the_minimum_rate(
        serve: Callable[[Callable[[socket.socket], None]], RawServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(debian_archive, "NETWORK_TIMEOUT_S", 1)
    monkeypatch.setattr(debian_archive, "MIN_BYTES_PER_S", 1000)

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n")
        for _ in range(200):  # a byte every 50 ms: each read waits far less than the timeout
            conn.sendall(b"x")
            time.sleep(0.05)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(debian_archive.ArchiveError, match="less than 1000 bytes a second") as slow:
        debian_archive.fetch(server.url, "pool/k.deb", 1000)
    assert not slow.value.refused
    # The bound: 1 s of grace plus 1000 bytes at 1000 bytes a second, and one read's timeout.
    assert time.monotonic() - started < 1 + 1 + 1 + 1
    # Control: the same size sent at once is read whole.
    fast = serve(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000))
    assert debian_archive.fetch(fast.url, "pool/k.deb", 1000) == b"x" * 1000


def test_a_mirror_that_trickles_its_headers_is_given_up_on_at_the_deadline(
        serve: Callable[[Callable[[socket.socket], None]], RawServer],
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The rate was checked only on the body's reads: a mirror sending its status line and
    headers a byte every 50 ms (each read far within the timeout; http.client takes 100
    headers of 64 KiB) held the fetch for as long as it liked. The whole request, headers
    included, ends at the fetch's deadline (socket_deadline.py, as rust_dist.py has it)."""
    monkeypatch.setattr(debian_archive, "NETWORK_TIMEOUT_S", 1)
    monkeypatch.setattr(debian_archive, "MIN_BYTES_PER_S", 1000)

    def trickle(conn: socket.socket) -> None:
        conn.sendall(b"HTTP/1.1 200 OK\r\nX: ")
        for _ in range(200):  # 10 s of header, a byte every 50 ms
            try:
                conn.sendall(b"y")
            except OSError:
                return
            time.sleep(0.05)

    server = serve(trickle)
    started = time.monotonic()
    with pytest.raises(debian_archive.ArchiveError) as slow:
        debian_archive.fetch(server.url, "pool/k.deb", 1000)
    assert not slow.value.refused
    assert time.monotonic() - started < 1 + 1 + 1 + 1  # the deadline: 1 s + 1000 bytes at 1000 a second


def _rearmored(message: bytes, packets: bytes) -> bytes:
    head, _, tail = _signature_block(message)
    return (head + b"-----BEGIN PGP SIGNATURE-----\n\n" + base64.b64encode(packets)
            + b"\n-----END PGP SIGNATURE-----" + tail)


def _packet(tag: int, body: bytes) -> bytes:
    return bytes([0xC0 | tag, 255]) + len(body).to_bytes(4, "big") + body


def test_a_signature_this_reader_cannot_parse_does_not_void_a_good_one(gpg: Gpg) -> None:
    """Debian may add a v6 (RFC 9580) signature beside its v4 ones; a v6, or a malformed v4
    packet, counts for nothing, as an unpinned key's signature does, and the good one
    still verifies."""
    fpr = gpg.fingerprint("a@example.org")
    keys = keys_of(gpg, "a@example.org", [fpr])
    message = signed(gpg, "a@example.org")
    _head, good, _tail = _signature_block(message)
    v6 = _packet(2, b"\x06\x01\x1b\x08" + b"\0" * 40)
    truncated_v4 = _packet(2, b"\x04\x01\x01\x08\x00\x09\x05\x02")  # hashed area runs past
    for extra in (v6 + good, truncated_v4 + good, good + v6):
        assert openpgp.verify_cleartext(_rearmored(message, extra), keys, NOW).fingerprint == fpr
    # Control: without the good signature, nothing verifies, and the reason is given.
    with pytest.raises(openpgp.Unverified, match="version 6"):
        openpgp.verify_cleartext(_rearmored(message, v6), keys, NOW)
    with pytest.raises(openpgp.Unverified, match="truncated"):
        openpgp.verify_cleartext(_rearmored(message, truncated_v4 + v6), keys, NOW)


def test_a_local_copy_needs_only_one_of_the_listed_package_indexes(tmp_path: Path) -> None:
    """An air-gapped copy may hold Packages.gz, or the uncompressed Packages (what apt keeps in
    /var/lib/apt/lists), and not Packages.xz, which the InRelease lists first."""
    text = (stanza("linux-image-amd64") + stanza("busybox-static")).encode()
    forms = {"Packages.xz": lzma.compress(text), "Packages.gz": gzip.compress(text), "Packages": text}
    listed = {f"main/binary-amd64/{name}": (hashlib.sha256(data).hexdigest(), len(data))
              for name, data in forms.items()}
    for present in forms:
        mirror = tmp_path / present
        index = mirror / "dists" / "bookworm" / "main" / "binary-amd64"
        index.mkdir(parents=True)
        (index / present).write_bytes(forms[present])
        release = debian_archive.Release(str(mirror), "bookworm", "main", 0, "F" * 40, listed)
        assert set(debian_archive.read_packages(release, lambda n: True)) == {"linux-image-amd64",
                                                                              "busybox-static"}
    # An index that is there but altered is refused, not passed over for another.
    (tmp_path / "Packages.xz" / "dists" / "bookworm" / "main" / "binary-amd64" / "Packages.gz").write_bytes(
        forms["Packages.gz"])
    altered = tmp_path / "Packages.xz" / "dists" / "bookworm" / "main" / "binary-amd64" / "Packages.xz"
    altered.write_bytes(altered.read_bytes()[:-1] + b"\0")
    release = debian_archive.Release(str(tmp_path / "Packages.xz"), "bookworm", "main", 0, "F" * 40, listed)
    with pytest.raises(debian_archive.ArchiveError, match="Packages.xz does not match") as refused:
        debian_archive.read_packages(release, lambda n: True)
    assert refused.value.refused
    # None present: the failure names the index it looked for first.
    empty = debian_archive.Release(str(tmp_path / "none"), "bookworm", "main", 0, "F" * 40, listed)
    with pytest.raises(debian_archive.ArchiveError, match="Packages.xz") as missing:
        debian_archive.read_packages(empty, lambda n: True)
    assert not missing.value.refused


def test_an_ar_member_size_that_is_not_decimal_digits_is_refused(tmp_path: Path) -> None:
    deb = make_deb(tmp_path / "ok.deb", [("./bin/busybox", b"BB")])
    assert list(debpkg.read_members(deb, lambda n: True)) == [("bin/busybox", b"BB")]
    data = deb.read_bytes()
    at = len(debpkg.AR_MAGIC) + 48  # the size of the first member (debian-binary, 4 bytes)
    for size in (b"-1000     ", b"+4        ", b"0_4       "):
        (tmp_path / "bad.deb").write_bytes(data[:at] + size + data[at + 10:])
        with pytest.raises(debpkg.DebError, match="no size"):
            list(debpkg.read_members(tmp_path / "bad.deb", lambda n: True))


def test_a_stanza_with_a_field_twice_is_refused_and_a_package_listed_twice_is_its_highest_version() -> None:
    twice = stanza("busybox-static").replace("Size:", "Filename: pool/main/b/evil.deb\nSize:")
    with pytest.raises(debian_archive.ArchiveError, match="field .Filename. twice"):
        debian_archive.parse_packages(twice.encode(), lambda n: True)
    # Debian's own indexes list some packages at several versions (bookworm's linux-doc,
    # Architecture: all, twice); the highest version is the package, as apt takes it.
    older = stanza("linux-image-amd64").replace("Version: 1.0", "Version: 6.1.90-1")
    newer = stanza("linux-image-amd64").replace("Version: 1.0", "Version: 6.1.176-1")
    for text in (older + newer, newer + older):
        got = debian_archive.parse_packages(text.encode(), lambda n: True)
        assert got["linux-image-amd64"].version == "6.1.176-1"
    with pytest.raises(debian_archive.ArchiveError, match="twice at version 1.0"):
        debian_archive.parse_packages((stanza("a") + stanza("a")).encode(), lambda n: True)


VERSIONS = ["0.9", "1.0~rc1", "1.0", "1.0-0", "1.0-1", "1.0+b1", "1.0a", "1.00.1", "1.0.1",
            "6.1.90-1", "6.1.176-1", "6.1.176-1+deb12u1", "6.1.192-3", "1:0.1", "2:0~", "1.0-1~bpo12+1"]


def test_debian_version_ordering_agrees_with_dpkg() -> None:
    # The case that a string comparison gets wrong: 90 < 176 as numbers.
    assert debian_archive.compare_versions("6.1.90-1", "6.1.176-1") < 0
    assert debian_archive.compare_versions("6.1.192-3", "6.1.176-1") > 0
    assert debian_archive.compare_versions("1.0-0", "1.0") == 0
    dpkg = shutil.which("dpkg")
    if dpkg is None:
        pytest.skip("dpkg is not installed: nothing to cross-check against")
    for a in VERSIONS:
        for b in VERSIONS:
            ours = debian_archive.compare_versions(a, b)
            def dpkg_says(relation: str, a: str = a, b: str = b) -> bool:
                return subprocess.run([dpkg, "--compare-versions", a, relation, b], check=False).returncode == 0

            theirs = 0 if dpkg_says("eq") else (1 if dpkg_says("gt") else -1)
            assert (ours > 0) - (ours < 0) == theirs, (a, b)
    for bad in ("", "a1", "1 0", "1:", "x:1"):
        with pytest.raises(debian_archive.ArchiveError, match="not a Debian version"):
            debian_archive.compare_versions(bad, "1")


def test_a_redirect_is_followed_to_http_or_https_only(
        serve: Callable[[Callable[[socket.socket], None]], RawServer]) -> None:
    """urllib's default opener follows a redirect to ftp://, whose login the rate bound never
    sees (a trickling FTP greeting held a registry pull past its deadline: store/registry.py)."""
    contacted: list[bool] = []
    ftp = serve(lambda conn: contacted.append(True))
    port = ftp.sock.getsockname()[1]
    hostile = serve(lambda conn: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: ftp://127.0.0.1:{port}/pool/k.deb\r\nContent-Length: 0\r\n\r\n".encode()))
    with pytest.raises(debian_archive.ArchiveError, match="redirected to ftp") as refused:
        debian_archive.fetch(hostile.url, "pool/k.deb", 1000)
    assert not refused.value.refused
    time.sleep(0.2)
    assert contacted == []
    # Control: a redirect to another HTTP mirror is followed (the content is checked by digest).
    good = serve(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    moved = serve(lambda conn: conn.sendall(
        f"HTTP/1.1 302 Found\r\nLocation: {good.url}/pool/k.deb\r\nContent-Length: 0\r\n\r\n".encode()))
    assert debian_archive.fetch(moved.url, "pool/k.deb", 1000) == b"ok"


def replies_then_waits_for_close(reply: bytes, closed: threading.Event) -> Callable[[socket.socket], None]:
    """Sends `reply`, then sets `closed` once the client closes the connection. The server
    sees the close: a plain-HTTP socket left to the garbage collector gives no ResourceWarning
    (its makefile() closes it quietly; measured), so the client side cannot tell."""
    def answer(conn: socket.socket) -> None:
        conn.sendall(reply)
        conn.settimeout(10)
        if conn.recv(1) == b"":
            closed.set()
    return answer


def test_a_redirect_whose_location_does_not_parse_closes_its_connection(
        serve: Callable[[Callable[[socket.socket], None]], RawServer]) -> None:
    """urllib parses the Location before `redirect_request` sees it; its ValueError left the
    reply and its socket open for as long as the error was kept (here: held)."""
    closed = threading.Event()
    hostile = serve(replies_then_waits_for_close(
        b"HTTP/1.1 302 Found\r\nLocation: https://[::1/\r\nContent-Length: 5\r\n\r\nabcde", closed))
    with pytest.raises(debian_archive.ArchiveError, match="Invalid IPv6 URL") as failed:
        debian_archive.fetch(hostile.url, "pool/k.deb", 1000)
    assert not failed.value.refused
    assert closed.wait(5), "the redirect's connection is still open, its error held"


@pytest.mark.parametrize("framing", [b"Content-Length: 99999999999\r\n\r\n",
                                     b"Transfer-Encoding: chunked\r\n\r\n5\r\nab"],
                         ids=["100-GB", "broken-chunk"])
def test_a_redirects_body_is_never_read(
        serve: Callable[[Callable[[socket.socket], None]], RawServer], framing: bytes) -> None:
    """urllib read a redirect's body whole before following it: a 100 GB Content-Length was
    a 100 GB allocation (MemoryError, an internal error), a chunk that broke off failed the
    download. The body is closed unread (the connection with it) and the redirect followed."""
    closed = threading.Event()
    good = serve(lambda conn: conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok"))
    moved = serve(replies_then_waits_for_close(
        f"HTTP/1.1 302 Found\r\nLocation: {good.url}/pool/k.deb\r\n".encode() + framing, closed))
    assert debian_archive.fetch(moved.url, "pool/k.deb", 1000) == b"ok"
    assert closed.wait(5), "the redirect's connection was left open"


# -- two archives: the main suite and the security archive, each signed (here by the test's
# own key, pinned in place of Debian's: the only fake, since no test can make Debian sign) --


DAY = 86400


def rfc2822(epoch: float) -> str:
    return time.strftime("%a, %d %b %Y %H:%M:%S UTC", time.gmtime(epoch))


def kernel_deb(path: Path, release: str) -> bytes:
    """A kernel .deb as provisioning reads it: boot/vmlinuz-RELEASE (a bzImage whose xz
    payload is an ELF naming the release) and every wanted module with a .modinfo."""
    vmlinux = b"\x7fELF" + f"kernel {release}".encode() + b"\0" * 64
    bzimage = b"\0" * 0x202 + b"HdrS" + lzma.compress(vmlinux, format=lzma.FORMAT_XZ)
    modules = [(f"./lib/modules/{release}/kernel/{name}.ko", elf_module({"name": name, "depends": ""}))
               for name in assets.WANTED_MODULES]
    return make_deb(path, [(f"./boot/vmlinuz-{release}", bzimage), *modules]).read_bytes()


def archive(gpg: Gpg, root: Path, suite: str, *, date: float, kernel: tuple[str, str] | None,
            busybox: str | None, valid_until: float | None = None) -> Path:
    """A local archive in the dists/ pool/ layout: `kernel` (ABI, version) gives
    linux-image-amd64 and the linux-image-6.1.0-ABI-amd64 it depends on, `busybox` a
    busybox-static of that version; the InRelease signed by the test's key."""
    stanzas, pool = [], root / "pool" / "main"
    pool.mkdir(parents=True, exist_ok=True)

    def add(name: str, version: str, data: bytes, depends: str = "") -> None:
        filename = f"pool/main/{name}_{version.replace(':', '%3a')}_amd64.deb"
        (root / filename).write_bytes(data)
        stanzas.append(f"Package: {name}\nVersion: {version}\n" + (f"Depends: {depends}\n" if depends else "")
                       + f"Filename: {filename}\nSize: {len(data)}\nSHA256: {hashlib.sha256(data).hexdigest()}\n")

    if kernel is not None:
        abi, version = kernel
        versioned = f"linux-image-6.1.0-{abi}-amd64"
        add(versioned, version, kernel_deb(root / "k.deb", f"6.1.0-{abi}-amd64"))
        add("linux-image-amd64", version, make_deb(root / "m.deb", []).read_bytes(), f"{versioned} (= {version})")
    if busybox is not None:
        add("busybox-static", busybox, make_deb(root / "b.deb", [("./bin/busybox", f"busybox {busybox}".encode())])
            .read_bytes())
    index = lzma.compress("\n".join(stanzas).encode())
    dists = root / "dists" / suite
    (dists / "main" / "binary-amd64").mkdir(parents=True, exist_ok=True)
    (dists / "main" / "binary-amd64" / "Packages.xz").write_bytes(index)
    body = (f"Origin: Debian\nSuite: {suite}\nCodename: {suite}\nDate: {rfc2822(date)}\n"
            + (f"Valid-Until: {rfc2822(valid_until)}\n" if valid_until is not None else "")
            + f"SHA256:\n {hashlib.sha256(index).hexdigest()} {len(index)} main/binary-amd64/Packages.xz\n")
    (dists / "InRelease").write_bytes(signed(gpg, "a@example.org", body))
    return root


@pytest.fixture
def pinned_test_key(gpg: Gpg, monkeypatch: pytest.MonkeyPatch) -> str:
    fpr = gpg.fingerprint("a@example.org")
    keys = keys_of(gpg, "a@example.org", [fpr])
    monkeypatch.setattr(debian_archive, "pinned_keys", lambda: keys)
    return fpr


def manifest_of(home: Path) -> dict[str, object]:
    import json

    data: dict[str, object] = json.loads((home / "vm" / assets.MANIFEST).read_text())
    return data


@pytest.mark.parametrize(("main_kernel", "security_kernel", "security_busybox", "kernel_from", "busybox_from"), [
    # Today's case: the security archive has the newer kernel; busybox only in main.
    (("50", "6.1.176-1"), ("57", "6.1.192-3"), None, "security", "main"),
    # After a point release, main may have the newer; 176 > 90 as numbers, not as strings.
    (("50", "6.1.176-1"), ("40", "6.1.90-1"), "1:1.35.0-4", "main", "main"),
    # busybox too is the highest found, and a security update of it is taken.
    (("50", "6.1.176-1"), ("57", "6.1.192-3"), "1:1.35.0-4+deb12u1", "security", "security"),
])
def test_the_highest_version_across_the_two_archives_is_provisioned_from_the_archive_that_listed_it(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path,
        main_kernel: tuple[str, str], security_kernel: tuple[str, str], security_busybox: str | None,
        kernel_from: str, busybox_from: str) -> None:
    now = time.time()
    main = archive(gpg, tmp_path / "main", "bookworm", date=now - DAY, kernel=main_kernel, busybox="1:1.35.0-4")
    security = archive(gpg, tmp_path / "security", "bookworm-security", date=now - 3600, kernel=security_kernel,
                       busybox=security_busybox, valid_until=now + 6 * DAY)
    assets.provision_assets(archive=str(main), suite="bookworm", security_archive=f"file://{security}")
    manifest = manifest_of(roteiro_home)
    expected = {"main": main_kernel, "security": security_kernel}[kernel_from]
    kernel_name = f"linux-image-6.1.0-{expected[0]}-amd64"
    assert manifest["kernel_package"] == kernel_name
    packages = manifest["packages"]
    assert isinstance(packages, dict)
    assert packages[kernel_name]["version"] == expected[1]
    assert packages[kernel_name]["source"] == kernel_from
    assert packages["busybox-static"]["source"] == busybox_from
    assert packages["busybox-static"]["version"] == (security_busybox if busybox_from == "security" else "1:1.35.0-4")
    # What is booted is that kernel, and busybox that busybox, not only what the manifest says.
    loaded = assets.load_assets()
    assert f"kernel 6.1.0-{expected[0]}-amd64".encode() in loaded.kernel.read_bytes()
    assert (roteiro_home / "vm" / assets.BUSYBOX_FILE).read_bytes() == \
        f"busybox {packages['busybox-static']['version']}".encode()
    # Both archives are recorded, and doctor shows both.
    sources = manifest["sources"]
    assert isinstance(sources, dict)
    assert (sources["main"]["archive"], sources["main"]["suite"]) == (str(main), "bookworm")
    assert (sources["security"]["archive"], sources["security"]["suite"]) == (f"file://{security}",
                                                                              "bookworm-security")
    assert sources["security"]["signing_key"] == pinned_test_key
    shown = assets.source_of_assets()
    assert shown is not None
    assert shown[0] == (f"main: {main} bookworm (InRelease of {debian_archive.when(int(now - DAY))}, "
                        f"signed by {pinned_test_key})")
    assert shown[1] == (f"security: file://{security} bookworm-security (InRelease of "
                        f"{debian_archive.when(int(now - 3600))}, signed by {pinned_test_key})")
    assert f"{kernel_name} {expected[1]} from {kernel_from}" in shown[2]


def test_an_empty_security_setting_reads_the_main_archive_alone(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Through `prefetch --vm-assets` and the configuration, as a user sets it."""
    from roteiro_py.commands import prefetch

    now = time.time()
    main = archive(gpg, tmp_path / "main", "bookworm", date=now - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    security = archive(gpg, tmp_path / "security", "bookworm-security", date=now - 3600,
                       kernel=("57", "6.1.192-3"), busybox=None, valid_until=now + 6 * DAY)
    read: list[tuple[str, str]] = []
    real_fetch = debian_archive.fetch

    def spy(where: str, path: str, *args: object, **kwargs: object) -> bytes:
        read.append((where, path))
        return real_fetch(where, path, *args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(debian_archive, "fetch", spy)
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_ARCHIVE", str(main))
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_SECURITY_ARCHIVE", "")
    prefetch.run_prefetch(analyzer=None, image=None, allow_download=True, source="registry",
                           vm_assets=True, path=tmp_path)
    manifest = manifest_of(roteiro_home)
    assert manifest["kernel_package"] == "linux-image-6.1.0-50-amd64"
    assert manifest["sources"] == {"main": manifest["sources"]["main"], "security": None}  # type: ignore[index]
    assert read and {where for where, _path in read} == {str(main)}
    assert (assets.source_of_assets() or [])[1] == "security: not read ([vm] debian_security_archive is empty)"
    # Control: the same prefetch with the setting naming the security archive reads it, and
    # takes its newer kernel.
    (roteiro_home / "vm" / assets.KERNEL_FILE).unlink()
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_SECURITY_ARCHIVE", str(security))
    prefetch.run_prefetch(analyzer=None, image=None, allow_download=True, source="registry",
                           vm_assets=True, path=tmp_path)
    assert manifest_of(roteiro_home)["kernel_package"] == "linux-image-6.1.0-57-amd64"
    assert (str(security), "dists/bookworm-security/InRelease") in read
    capsys.readouterr()


def test_a_stale_security_index_is_refused_saying_a_copy_must_be_refreshed_or_the_setting_emptied(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path) -> None:
    now = time.time()
    main = archive(gpg, tmp_path / "main", "bookworm", date=now - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    security = archive(gpg, tmp_path / "security", "bookworm-security", date=now - 8 * DAY,
                       kernel=("57", "6.1.192-3"), busybox=None, valid_until=now - DAY)
    with pytest.raises(errors.SecurityIndexStale) as stale:
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(security))
    text = stale.value.guidance().render_text()
    assert f"The Debian security archive {security} (suite bookworm-security) serves a stale index" in text
    assert f"expired at {debian_archive.when(int(now - DAY))}" in text
    assert "valid for 7 days" in text and "goes stale every 7 days" in text  # Valid-Until minus Date
    assert "Refresh the copy" in text and "pylint-sandbox config set vm.debian_security_archive ''" in text
    assert sorted(p.name for p in (roteiro_home / "vm").iterdir()) == [".provision.lock"]
    # Control: the same archive, its index re-signed valid for another day, provisions.
    archive(gpg, security, "bookworm-security", date=now - 6 * DAY, kernel=("57", "6.1.192-3"), busybox=None,
            valid_until=now + DAY)
    assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(security))
    assert manifest_of(roteiro_home)["kernel_package"] == "linux-image-6.1.0-57-amd64"


@pytest.mark.parametrize("kind", debian_archive.KINDS)
def test_an_index_older_than_the_shipped_floor_is_refused_even_on_a_first_provisioning(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path, kind: str) -> None:
    """A replayed old InRelease still verifies (the main archive's has no Valid-Until); with
    no earlier provisioning recorded, only the floor the tool ships refuses it."""
    now = time.time()
    floor = debian_archive.floor_epoch(kind)
    assert debian_archive.when(floor) == f"{debian_archive.DATE_FLOOR[kind]} 00:00:00 UTC"
    assert floor < now

    def provision(date: float) -> None:
        dates = {"main": now - DAY, "security": now - 3600, kind: date}
        main = archive(gpg, tmp_path / "main", "bookworm", date=dates["main"], kernel=("50", "6.1.176-1"),
                       busybox="1:1.35.0-4")
        security = archive(gpg, tmp_path / "security", "bookworm-security", date=dates["security"],
                           kernel=("57", "6.1.192-3"), busybox=None, valid_until=now + DAY)
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(security))

    with pytest.raises(errors.ArchiveRefused) as refused:
        provision(floor - 1)
    assert (f"InRelease is dated {debian_archive.when(floor - 1)}, before {debian_archive.DATE_FLOOR[kind]}, "
            f"the oldest {kind} archive index") in refused.value.reason
    assert refused.value.archive == str(tmp_path / kind)
    assert not (roteiro_home / "vm" / assets.MANIFEST).exists()
    # Control: an index dated at the floor provisions.
    provision(floor)
    assert manifest_of(roteiro_home)["sources"][kind]["inrelease_epoch"] == floor  # type: ignore[index]


def test_an_older_index_than_the_one_recorded_is_refused_for_each_archive(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path) -> None:
    now = time.time()

    def provision(main_date: float, security_date: float) -> None:
        main = archive(gpg, tmp_path / "main", "bookworm", date=main_date, kernel=("50", "6.1.176-1"),
                       busybox="1:1.35.0-4")
        security = archive(gpg, tmp_path / "security", "bookworm-security", date=security_date,
                           kernel=("57", "6.1.192-3"), busybox=None, valid_until=now + DAY)
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(security))

    provision(now - 2 * DAY, now - 3600)
    for older, kind in (((now - 3 * DAY, now - 3600), "main"), ((now - 2 * DAY, now - 7200), "security")):
        (roteiro_home / "vm" / assets.KERNEL_FILE).unlink(missing_ok=True)
        with pytest.raises(errors.ArchiveRefused) as refused:
            provision(*older)
        assert "this host already provisioned from: an old index replayed" in refused.value.reason
        assert refused.value.archive == str(tmp_path / kind)
        setting = "debian_security_archive" if kind == "security" else "debian_archive"
        assert f"config set vm.{setting} " in refused.value.guidance().render_text()
    # Control: the same dates again, and newer ones, prefetch.
    provision(now - 2 * DAY, now - 3600)
    provision(now - DAY, now - 60)


@pytest.mark.parametrize("where", ["dists/bookworm/InRelease", "dists/bookworm/main/binary-amd64/Packages.xz",
                                   "pool/main/busybox-static_1%3a1.35.0-4_amd64.deb"])
def test_a_fifo_in_a_local_archive_is_refused_and_does_not_block(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path, where: str) -> None:
    now = time.time()
    main = archive(gpg, tmp_path / "main", "bookworm", date=now - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    target = main / where
    regular = target.read_bytes()
    target.unlink()
    os.mkfifo(target)
    outcome: list[BaseException | None] = []

    def run() -> None:
        try:
            assets.provision_assets(archive=str(main), suite="bookworm", security_archive="")
            outcome.append(None)
        except BaseException as exc:  # noqa: BLE001 - handed to the test's thread
            outcome.append(exc)

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(timeout=10)
    if worker.is_alive():  # blocked in open(): a writer releases it, and the test fails
        os.close(os.open(target, os.O_WRONLY | os.O_NONBLOCK))
        worker.join(timeout=10)
        pytest.fail(f"provisioning blocked on the FIFO at {where}")
    assert time.monotonic() - started < 10
    assert isinstance(outcome[0], errors.ArchiveRefused), outcome
    assert f"{where} in the local archive is not a regular file (mode prw" in outcome[0].reason
    # Control: a symlink to a regular file holding the same bytes is read (its bytes are
    # checked by digest, as any file's are).
    target.unlink()
    (tmp_path / "elsewhere").write_bytes(regular)
    target.symlink_to(tmp_path / "elsewhere")
    assets.provision_assets(archive=str(main), suite="bookworm", security_archive="")
    assert manifest_of(roteiro_home)["kernel_package"] == "linux-image-6.1.0-50-amd64"


def test_prefetch_vm_assets_provisions_without_allow_download(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path,
        monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    """Issue 23: `prefetch --vm-assets` refused without --allow-download, though
    provisioning is all it does: the archive is the user's own setting (a repository's
    roteiro.toml cannot name one), nothing is downloaded when the assets are intact, and no
    other source stands to be chosen instead (an image's `--from docker|oci:PATH`).
    --allow-download is still accepted, and changes nothing here."""
    from roteiro_py.commands import prefetch

    main = archive(gpg, tmp_path / "main", "bookworm", date=time.time() - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_ARCHIVE", str(main))
    monkeypatch.setenv("ROTEIRO_VM_DEBIAN_SECURITY_ARCHIVE", "")
    assert prefetch.run_prefetch(analyzer=None, image=None, allow_download=False, source="registry",
                                 vm_assets=True, path=tmp_path) == 0
    assert manifest_of(roteiro_home)["kernel_package"] == "linux-image-6.1.0-50-amd64"
    assert "vmlinux" in capsys.readouterr().out
    # control: with the flag, the same command (the assets intact: nothing read again)
    assert prefetch.run_prefetch(analyzer=None, image=None, allow_download=True, source="registry",
                                 vm_assets=True, path=tmp_path) == 0
    assert "VM assets already provisioned and intact" in capsys.readouterr().err


def test_a_security_archive_that_cannot_be_reached_is_a_failure_that_offers_the_way_around_it(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path) -> None:
    """Never a silent fall back to the main archive alone: the user chooses that."""
    main = archive(gpg, tmp_path / "main", "bookworm", date=time.time() - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    with pytest.raises(errors.PrefetchFailed) as failed:
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(tmp_path / "gone"))
    text = failed.value.guidance().render_text()
    assert f"from the Debian security archive {tmp_path / 'gone'}: dists/bookworm-security/InRelease" in text
    assert "pylint-sandbox config set vm.debian_security_archive ''" in text
    assert not (roteiro_home / "vm" / assets.MANIFEST).exists()
    # Control: the main archive unreachable is the plain failure, naming it, with no such advice.
    with pytest.raises(errors.PrefetchFailed) as main_failed:
        assets.provision_assets(archive=str(tmp_path / "gone"), suite="bookworm", security_archive=str(main))
    assert f"from the Debian archive {tmp_path / 'gone'}:" in main_failed.value.guidance().summary
    assert "debian_security_archive" not in main_failed.value.guidance().render_text()


def test_one_archives_signed_index_cannot_stand_in_for_the_others(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path) -> None:
    """Both archives are verified against the same pinned keys, so what keeps a mirror of the
    security archive from serving the main suite's index (or the reverse) is the suite its
    signed text names: refused, naming the archive that served it and its setting."""
    now = time.time()
    main = archive(gpg, tmp_path / "main", "bookworm", date=now - DAY, kernel=("50", "6.1.176-1"),
                   busybox="1:1.35.0-4")
    security = archive(gpg, tmp_path / "security", "bookworm-security", date=now - 3600,
                       kernel=("57", "6.1.192-3"), busybox=None, valid_until=now + DAY)
    posing = tmp_path / "posing"  # the main archive, its bookworm index served as bookworm-security
    shutil.copytree(main, posing)
    (posing / "dists" / "bookworm").rename(posing / "dists" / "bookworm-security")
    with pytest.raises(errors.ArchiveRefused) as as_security:
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(posing))
    assert as_security.value.archive == str(posing)
    assert "InRelease is signed but for suite 'bookworm', not 'bookworm-security'" in as_security.value.reason
    assert "config set vm.debian_security_archive " in as_security.value.guidance().render_text()
    reverse = tmp_path / "reverse"  # the security index served as the main suite's
    shutil.copytree(security, reverse)
    (reverse / "dists" / "bookworm-security").rename(reverse / "dists" / "bookworm")
    with pytest.raises(errors.ArchiveRefused) as as_main:
        assets.provision_assets(archive=str(reverse), suite="bookworm", security_archive=str(security))
    assert "InRelease is signed but for suite 'bookworm-security', not 'bookworm'" in as_main.value.reason
    assert as_main.value.setting == "debian_archive"
    assert not (roteiro_home / "vm" / assets.MANIFEST).exists()
    # Control: each served where it belongs provisions.
    assets.provision_assets(archive=str(main), suite="bookworm", security_archive=str(security))
    assert manifest_of(roteiro_home)["kernel_package"] == "linux-image-6.1.0-57-amd64"


def test_a_manifest_written_before_the_security_archive_still_refuses_an_older_main_index(
        gpg: Gpg, pinned_test_key: str, tmp_path: Path, roteiro_home: Path) -> None:
    """A host provisioned by the previous version has its one archive recorded at the top of
    the manifest, no `sources`: its date still refuses a replayed older index, doctor still
    names it, and nothing crashes on the missing keys."""
    import json

    now = time.time()

    def provision(main_date: float) -> None:
        main = archive(gpg, tmp_path / "main", "bookworm", date=main_date, kernel=("50", "6.1.176-1"),
                       busybox="1:1.35.0-4")
        assets.provision_assets(archive=str(main), suite="bookworm", security_archive="")

    provision(now - 2 * DAY)
    manifest = manifest_of(roteiro_home)
    recorded = manifest.pop("sources")["main"]  # type: ignore[index]
    old = {**manifest, **{key: recorded[key] for key in ("archive", "suite", "inrelease_date",
                                                        "inrelease_epoch", "signing_key")}}
    for entry in old["packages"].values():  # type: ignore[attr-defined]
        del entry["source"], entry["archive"]
    (roteiro_home / "vm" / assets.MANIFEST).write_text(json.dumps(old))
    assert assets.source_of_assets() == [
        f"main: {tmp_path / 'main'} bookworm (InRelease of {debian_archive.when(int(now - 2 * DAY))}, "
        f"signed by {pinned_test_key})", "security: not read",
        "busybox-static 1:1.35.0-4, linux-image-6.1.0-50-amd64 6.1.176-1"]
    (roteiro_home / "vm" / assets.KERNEL_FILE).unlink()
    with pytest.raises(errors.ArchiveRefused) as refused:
        provision(now - 3 * DAY)
    assert "this host already provisioned from: an old index replayed" in refused.value.reason
    # Control: a newer index provisions, and the manifest is written in the new form.
    provision(now - DAY)
    assert "sources" in manifest_of(roteiro_home)
