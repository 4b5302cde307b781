"""Reading what a child wrote to a pseudo-terminal, for the tests that need a real one."""

from __future__ import annotations

import os


def drain(primary: int) -> bytes:
    """Everything written to the pty's other end until the child closed it (Linux says so
    with EIO, not end of file), then the primary end closed."""
    written = b""
    while True:
        try:
            data = os.read(primary, 65536)
        except OSError:  # EIO: the child closed its end
            break
        if not data:
            break
        written += data
    os.close(primary)
    return written
