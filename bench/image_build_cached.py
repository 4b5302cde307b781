"""The second `image build --from-dist` of one manifest under several revisions of the
package, interleaved in one run: what a CI job of `image: build` pays when its image cache
is restored (the store, cache/rootfs and cache/images; never cache/rust-dist, the
downloaded packages: action.yml, ci/gitlab/cache.sh).

The distribution is the loopback stand-in of tests/unit/image/test_rust_dist.py (its
packages and manifest, signed by a key of this run's own), the Debian root the local
signed archive of tests/unit/image/test_build.py; each run is a child
`PYTHONPATH=REV python -c` that trusts those two keys in place of the shipped ones, then
calls the CLI's main. `--rustc-mib N` adds N MiB of random bytes to the rustc package
(Rust's own is ~80 MB of xz that unpacks to ~600 MB); loopback has no bandwidth cost, so
the ratio understates what a runner pays over the network. Per revision, one unmeasured
first build fills its own ROTEIRO_HOME; per round, every revision runs once, in an order
rotated from round to round, after cache/rust-dist is removed ("ci") and with it kept
("local"). Printed: each run's wall time and the packages the server was asked for, the
median per arm and revision, and the median of each round's paired ratio to the first
revision. Not a test: reported, never asserted.

    .venv/bin/python bench/image_build_cached.py before=DIR after=DIR [--runs 5] [--rustc-mib 64]

Each DIR holds a `roteiro_py/` (`git archive <commit> roteiro_py | tar -x -C DIR`).
"""

from __future__ import annotations

import argparse
import http.server
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.unit.gpg_support import Gpg  # noqa: E402 (after the path is set)
from tests.unit.image import test_build as debian  # noqa: E402
from tests.unit.image import test_rust_dist as rustdist  # noqa: E402

_CHILD = """
import sys
from roteiro_py.vm.assets import openpgp, debian_archive
from roteiro_py.image import rust_dist
from roteiro_py.cli.app import main
rust = openpgp.load_keyring(open(sys.argv[1], "rb").read(), [sys.argv[2]])
deb = openpgp.load_keyring(open(sys.argv[3], "rb").read(), [sys.argv[4]])
rust_dist.pinned_keys = lambda: rust
debian_archive.pinned_keys = lambda: deb
sys.exit(main(sys.argv[5:]))
"""


def serve(dist: rustdist.Dist) -> http.server.ThreadingHTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (http.server's name)
            path = self.path.lstrip("/")
            dist.asked.append(path)
            body = dist.files.get(path)
            self.send_response(200 if body is not None else 404)
            self.send_header("Content-Length", str(len(body or b"")))
            self.end_headers()
            self.wfile.write(body or b"")

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    dist.url = f"http://127.0.0.1:{server.server_address[1]}"
    return server


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("revisions", nargs="+", help="NAME=DIR")
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--rustc-mib", type=int, default=0)
    options = parser.parse_args()
    revisions = [tuple(spec.split("=", 1)) for spec in options.revisions]
    work = Path(tempfile.mkdtemp(prefix="image-build-cached-"))
    gnupg = work / "gnupg"
    gnupg.mkdir(mode=0o700)
    gpg = Gpg(gnupg)
    gpg.run("--quick-gen-key", "Test Release <release@example.org>", "rsa4096", "sign", "never")
    gpg.run("--quick-gen-key", "Test Archive <a@example.org>", "ed25519", "sign", "never")
    keys = []
    for uid in (rustdist.RELEASE, "a@example.org"):
        (work / f"{uid}.gpg").write_bytes(gpg.run("--export", uid))
        keys += [str(work / f"{uid}.gpg"), gpg.fingerprint(uid)]
    archive = debian.make_archive(gpg, work / "archive", debian.PACKAGES)
    if options.rustc_mib:
        big = os.urandom(options.rustc_mib << 20)
        stock = rustdist.packages
        rustc = rustdist.installer("rustc", rustdist.HOST, {"rustc": {
            "bin/rustc": b"#!rustc\n", "lib/librustc_driver-0123.so": big}})
        rustdist.packages = lambda: {**stock(), ("rustc", rustdist.HOST): ("rustc", rustc, True)}
    dist = rustdist.Dist()
    server = serve(dist)
    dist.publish(gpg)
    homes = {}
    for name, _ in revisions:
        homes[name] = work / f"home-{name}"
        homes[name].mkdir()
        (homes[name] / "config.toml").write_text(
            f'[vm]\ndebian_archive = "{archive}"\ndebian_security_archive = ""\n')

    def build(name: str, source: str) -> tuple[float, int]:
        env = {**os.environ, "PYTHONPATH": source, "ROTEIRO_HOME": str(homes[name]),
               rustdist.rust_dist.SERVER_ENV: dist.url, "RUSTUP_HOME": str(work / "no-rustup")}
        dist.asked.clear()
        started = time.monotonic()
        subprocess.run([sys.executable, "-c", _CHILD, *keys, "image", "build", "--no-set-image",
                        "--from-dist", rustdist.VERSION], env=env, check=True, capture_output=True, timeout=3600,
                       cwd=work)  # not this tree: `-c` puts the working directory first on sys.path
        return time.monotonic() - started, len(dist.asked)

    for name, source in revisions:
        build(name, source)  # the first build: the image made and cached
    times: dict[tuple[str, str], list[float]] = {}
    ratios: dict[tuple[str, str], list[float]] = {}
    try:
        for round_ in range(options.runs):
            for arm in ("ci", "local"):
                order = revisions[round_ % len(revisions):] + revisions[:round_ % len(revisions)]
                this: dict[str, float] = {}
                for name, source in order:
                    if arm == "ci":
                        shutil.rmtree(homes[name] / "cache" / "rust-dist", ignore_errors=True)
                    seconds, asked = build(name, source)
                    this[name] = seconds
                    times.setdefault((arm, name), []).append(seconds)
                    print(f"round {round_} {arm:5} {name:10} {seconds:7.3f} s  {asked} requests", flush=True)
                first = revisions[0][0]
                for name, _ in revisions[1:]:
                    ratios.setdefault((arm, name), []).append(this[name] / this[first])
    finally:
        server.shutdown()
        subprocess.run(["gpgconf", "--kill", "all"], env={"GNUPGHOME": str(gnupg), "PATH": os.environ["PATH"]},
                       check=False, timeout=30)
        shutil.rmtree(work, ignore_errors=True)
    for (arm, name), values in times.items():
        print(f"{arm:5} {name:10} median {statistics.median(values):.3f} s")
    for (arm, name), values in ratios.items():
        print(f"{arm:5} {name}/{revisions[0][0]}: median paired ratio {statistics.median(values):.3f}")


if __name__ == "__main__":
    main()
