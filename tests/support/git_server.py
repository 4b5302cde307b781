"""A git host for tests: git's own smart-HTTP CGI as a route of `https_server.serve`.

`git_route(project_root)` answers every request under its prefix with `git http-backend`
(GIT_PROJECT_ROOT, GIT_HTTP_EXPORT_ALL), so a client fetches the repositories under
`project_root` over TLS from 127.0.0.1 exactly as from a real host:

    with serve(tmp, tls, {"/git/": git_route(repos)}) as server:
        url = f"{server.url}/git/dep.git"

- `protocol_v0=True` drops the client's Git-Protocol header, so the backend speaks protocol
  v0, where (by default) a commit no ref names cannot be fetched by id: a host that
  refuses fetching by sha (uploadpack.allowReachableSHA1InWant off).
- `auth_route()` answers 401 with a Basic challenge: what makes git ask a credential
  helper or a prompt.

The backend runs with no system or global git configuration, so the developer's
configuration cannot change what the tests' host serves.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from http.server import BaseHTTPRequestHandler
from pathlib import Path

from tests.support.https_server import Route

#: The most bytes a client may send in one request (a fetch negotiation is a few KiB).
MAX_BODY_BYTES = 16 * 1024 * 1024
_BACKEND = "/usr/lib/git-core/git-http-backend"


def _read_body(handler: BaseHTTPRequestHandler) -> bytes:
    if handler.headers.get("Transfer-Encoding", "").lower() == "chunked":
        body = b""
        while True:
            size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
            if size == 0:
                handler.rfile.readline()
                return body
            body += handler.rfile.read(size)
            handler.rfile.readline()
            if len(body) > MAX_BODY_BYTES:
                raise ValueError("request body too large")
    length = int(handler.headers.get("Content-Length") or 0)
    if length > MAX_BODY_BYTES:
        raise ValueError("request body too large")
    return handler.rfile.read(length)


def git_route(project_root: Path, *, prefix: str = "/git", protocol_v0: bool = False) -> Route:
    """A route serving the repositories under `project_root` at `<prefix>/<repository>`."""
    backend = shutil.which("git-http-backend") or _BACKEND

    def route(handler: BaseHTTPRequestHandler) -> bool:
        path, _, query = handler.path.partition("?")
        body = _read_body(handler)
        env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"),
               "GIT_PROJECT_ROOT": str(project_root), "GIT_HTTP_EXPORT_ALL": "1",
               "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
               "REQUEST_METHOD": handler.command, "PATH_INFO": path[len(prefix):],
               "QUERY_STRING": query, "CONTENT_TYPE": handler.headers.get("Content-Type", ""),
               "CONTENT_LENGTH": str(len(body)), "REMOTE_ADDR": "127.0.0.1"}
        if handler.headers.get("Content-Encoding"):
            env["HTTP_CONTENT_ENCODING"] = handler.headers["Content-Encoding"]
        if handler.headers.get("Git-Protocol") and not protocol_v0:
            env["GIT_PROTOCOL"] = handler.headers["Git-Protocol"]
        done = subprocess.run([backend], input=body, env=env, capture_output=True, timeout=60,
                              check=False)
        head, separator, payload = done.stdout.partition(b"\r\n\r\n")
        if not separator:
            head, _, payload = done.stdout.partition(b"\n\n")
        status, headers = 200, []
        for line in head.decode("latin-1").splitlines():
            name, _, value = line.partition(":")
            if name.lower() == "status":
                status = int(value.split()[0])
            elif name:
                headers.append((name, value.strip()))
        handler.send_response(status)
        for name, value in headers:
            handler.send_header(name, value)
        handler.send_header("Content-Length", str(len(payload)))
        handler.end_headers()
        handler.wfile.write(payload)
        return True

    return route


def auth_route(handler: BaseHTTPRequestHandler) -> bool:
    """Every request needs credentials: 401 with a Basic challenge."""
    _read_body(handler)
    handler.send_response(401)
    handler.send_header("WWW-Authenticate", 'Basic realm="test"')
    handler.send_header("Content-Length", "0")
    handler.end_headers()
    return True
