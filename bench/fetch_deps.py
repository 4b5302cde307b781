"""`fetch-deps` of a 100-package lockfile, cold (every `.crate` downloaded) and warm (all
in the package store), and the vendored view a lint gives its guest: made from the store
(cold) and found sealed (warm: the lint's whole stage for it, which issue 20 wants under
0.2 s), in one run.

The registry is a sparse registry served over https on loopback (tests/support: a CA
made here, given as CARGO_HTTP_CAINFO), holding PACKAGES generated crates of about
CRATE_FILES files each; nothing leaves this machine. Not a test: numbers are reported,
never asserted.

    python bench/fetch_deps.py [--packages N] [--runs N]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from support.https_server import make_tls, serve  # noqa: E402
from support.registry import build_registry, make_crate  # noqa: E402

EXE = str(Path(sys.executable).with_name("pylint-sandbox"))
PACKAGES = 100
CRATE_FILES = 12
RUNS = 5


def crate(name: str) -> bytes:
    files = {"Cargo.toml": f'[package]\nname = "{name}"\nversion = "1.0.0"\nedition = "2021"\n'.encode()}
    for i in range(CRATE_FILES - 1):
        files[f"src/m{i}.rs" if i else "src/lib.rs"] = (f"// {name} {i}\n" + "pub fn f() -> u64 { 7 }\n" * 200).encode()
    return make_crate(name, "1.0.0", files)


def timed(argv: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{argv[1:]} exited {done.returncode}:\n{done.stderr[-2000:]}")
    return took


def view_seconds(tree: Path, env: dict[str, str]) -> float:
    """The lint's stage: read the lockfile's pins and hold the vendored view (in a child,
    as a lint would, with this run's ROTEIRO_HOME; its modules imported first, as a lint
    has them by then)."""
    code = ("import time,sys; from pathlib import Path;"
            "from roteiro_py.cargo.lockfile import read_pins; from roteiro_py.cargo import vendor;"
            "import roteiro_py.cargo.registry, roteiro_py.locks; t=time.perf_counter();"
            f"vendor.vendored(read_pins(Path({str(tree / 'Cargo.lock')!r})), Path({str(tree)!r}));"
            "print(time.perf_counter()-t)")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.strip())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--packages", type=int, default=PACKAGES)
    parser.add_argument("--runs", type=int, default=RUNS)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        base = Path(scratch)
        tls = make_tls(base / "tls")
        names = [f"pkg{i:03d}" for i in range(options.packages)]
        with serve(base / "registry", tls) as server:
            checksums = build_registry(base / "registry", server.url, [(n, "1.0.0", crate(n)) for n in names])
            tree = base / "tree"
            (tree / "src").mkdir(parents=True)
            (tree / "src" / "lib.rs").write_text("")
            (tree / "Cargo.toml").write_text('[package]\nname = "me"\nversion = "0.1.0"\n')
            (tree / "Cargo.lock").write_text("version = 4\n" + "".join(
                f'[[package]]\nname = "{n}"\nversion = "1.0.0"\nsource = "sparse+{server.url}/"\n'
                f'checksum = "{checksums[(n, "1.0.0")]}"\n' for n in names))
            cold, warm, made, found = [], [], [], []
            for run in range(options.runs):
                home = base / f"home{run}"
                env = {**os.environ, "ROTEIRO_HOME": str(home), "CARGO_HOME": str(base / f"cargo{run}"),
                       "CARGO_HTTP_CAINFO": str(tls.ca_pem)}
                cold.append(timed([EXE, "fetch-deps", str(tree)], env))
                warm.append(timed([EXE, "fetch-deps", str(tree)], env))
                made.append(view_seconds(tree, env))
                found.append(view_seconds(tree, env))
    size = sum(len(crate(n)) for n in names[:3]) / 3
    print(f"{options.packages} packages (~{size / 1024:.0f} KiB .crate, {CRATE_FILES} files each), "
          f"medians of {options.runs} runs:")
    rows = [("fetch-deps cold (download)", cold), ("fetch-deps warm (store)", warm),
            ("vendored view made from the store", made), ("vendored view found sealed (lint's stage)", found)]
    for label, samples in rows:
        print(f"  {label:45s} {statistics.median(samples):7.3f} s")
    print(f"  warm / cold fetch-deps: {statistics.median(warm) / statistics.median(cold):.2f}; "
          f"view found / made: {statistics.median(found) / statistics.median(made):.2f}")


if __name__ == "__main__":
    main()
