"""A minimal QMP client over a socket qemu connected to us (machine.Control.qmp).

Guarantees: every reply is bounded (REPLY_LIMIT bytes a line) and read within a deadline
(the socket's timeout), events are skipped, and an `error` reply raises QmpError naming
the command. Only what the VM templates need: commands, and passing a file descriptor
with `getfd` (SCM_RIGHTS), which lets qemu under `-sandbox spawn=deny` save or load its
state to a file we opened, with no `exec:` helper process.
"""

from __future__ import annotations

import json
import socket
import time
from typing import Any

#: Bytes of one QMP line we accept; replies here are a few hundred bytes.
REPLY_LIMIT = 1 << 20


class QmpError(Exception):
    pass


class Qmp:
    def __init__(self, sock: socket.socket, *, until: float) -> None:
        self.sock = sock
        self.until = until
        self._buffer = b""
        sock.setblocking(True)
        greeting = self._message()
        if "QMP" not in greeting:
            raise QmpError("qemu's monitor did not greet")
        self.execute("qmp_capabilities")

    def _line(self) -> bytes:
        while b"\n" not in self._buffer:
            left = self.until - time.monotonic()
            if left <= 0:
                raise QmpError("qemu's monitor did not answer before the deadline")
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except TimeoutError:
                continue
            if not chunk:
                raise QmpError("qemu's monitor closed (qemu exited)")
            self._buffer += chunk
            if len(self._buffer) > REPLY_LIMIT and b"\n" not in self._buffer:
                raise QmpError(f"a monitor reply passed {REPLY_LIMIT} bytes")
        line, self._buffer = self._buffer.split(b"\n", 1)
        return line

    def _message(self) -> dict[str, Any]:
        while True:
            line = self._line().strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except ValueError:
                raise QmpError("qemu's monitor sent something that is not JSON") from None
            if isinstance(message, dict) and "event" not in message:
                return message

    def execute(self, command: str, fds: tuple[int, ...] = (), **arguments: object) -> Any:
        request = json.dumps({"execute": command, **({"arguments": arguments} if arguments
                                                     else {})}).encode() + b"\n"
        if fds:
            socket.send_fds(self.sock, [request], list(fds))
        else:
            self.sock.sendall(request)
        reply = self._message()
        if "error" in reply:
            error = reply["error"]
            text = error.get("desc", "") if isinstance(error, dict) else str(error)
            raise QmpError(f"qemu refused {command}: {str(text)[:300]}")
        return reply.get("return")
