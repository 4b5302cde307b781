"""What watching the guest's output for progress costs the VM's read loop.

Feeds OUTPUT_LIMIT bytes (the most the guest may send) of hostile shapes, in the 64 KiB
chunks the read loop receives, through `JobWatch.feed` with a real renderer (plain, into
a StringIO: its writes are rate-limited; and a terminal renderer whose spinner thread is
off, so only what `note()` costs the read loop is measured), and prints the seconds per
shape and the cost per chunk. Not a test: numbers are reported, never asserted.
"""

from __future__ import annotations

import io
import time

from rich.console import Console

from roteiro_py import progress as P
from roteiro_py.vm.qemu.machine import OUTPUT_LIMIT
from roteiro_py.vm.qemu.watch import JobWatch

CHUNK = 1 << 16

SHAPES = {
    "newlines": b"\n",
    "CRs": b"\r",
    "Checking lines": b"   Checking demo-core v0.1.0 (/w/crates/demo-core)\n",
    "short Checking lines": b"Checking x\n",
    "one endless line": b"A",
    "escapes, no newline": b"\x1b[2J::error::##[",
    "noise lines": b"warning: x\n",
}


def run(shape: bytes, progress: P.Progress) -> float:
    chunk = (shape * (CHUNK // len(shape) + 1))[:CHUNK]
    watch = JobWatch(progress, steps=3)
    watch.feed("status", b"start 0\nstart 1\nstart 2\n")
    started = time.perf_counter()
    for _ in range(OUTPUT_LIMIT // CHUNK):
        watch.feed("stderr2", chunk)
    return time.perf_counter() - started


def main() -> None:
    chunks = OUTPUT_LIMIT // CHUNK
    print(f"{OUTPUT_LIMIT >> 20} MiB in {chunks} chunks of {CHUNK >> 10} KiB")
    for name, shape in SHAPES.items():
        plain = run(shape, P.Plain(io.StringIO()))
        console = Console(file=io.StringIO(), force_terminal=True, width=100)
        terminal = P.Terminal(console, auto_refresh=False)
        seconds = run(shape, terminal)
        terminal.finish()
        print(f"{name:<22} plain {plain:6.3f} s   terminal {seconds:6.3f} s   "
              f"({max(plain, seconds) / chunks * 1e6:5.1f} µs per chunk)")


if __name__ == "__main__":
    main()
