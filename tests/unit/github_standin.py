"""A stand-in for GitHub's REST API on loopback, for `review`'s tests (a fake: GitHub cannot
be made to answer 403 or 422 on demand here). It records every request (method, path,
headers, JSON body), serves the pull request's comments and reviews (those it accepted
earlier, by `github-actions[bot]`, as GitHub lists them), answers a POST with the status
a test chooses, and a GET of a path in `redirect` with a 302."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Seen:
    method: str
    path: str
    headers: dict[str, str]
    body: Any


@dataclass
class StandIn:
    """The API's stand-in: `post_status` answers a POST; `redirect` (path -> URL) answers
    a GET with a 302; `message` is the error's `message`."""

    seen: list[Seen] = field(default_factory=list)
    comments: list[dict[str, Any]] = field(default_factory=list)
    reviews: list[dict[str, Any]] = field(default_factory=list)
    post_status: int = 201
    message: str = "Resource not accessible by integration"
    redirect: dict[str, str] = field(default_factory=dict)
    #: path -> URL: a POST of that path answered with a 302 there
    post_redirect: dict[str, str] = field(default_factory=dict)
    #: Seconds a GET trickles its headers, a byte every 0.3 s, before answering: each read
    #: gets a byte long before a socket timeout, so only a deadline over the whole
    #: request ends it.
    stall: float = 0.0
    url: str = ""

    def posts(self) -> list[Seen]:
        return [seen for seen in self.seen if seen.method == "POST"]


def serve(state: StandIn) -> Iterator[StandIn]:
    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def _answer(self, status: int, body: Any, headers: dict[str, str] | None = None) -> None:
            data = json.dumps(body).encode()
            self.send_response(status)
            for key, value in (headers or {}).items():
                self.send_header(key, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _record(self) -> Any:
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            state.seen.append(Seen(self.command, self.path, dict(self.headers.items()), body))
            return body

        def do_GET(self) -> None:
            self._record()
            if state.stall:
                self.wfile.write(b"HTTP/1.1 200 OK\r\nX-Slow: ")
                until = time.monotonic() + state.stall
                while time.monotonic() < until:
                    self.wfile.write(b"a")
                    self.wfile.flush()
                    time.sleep(0.3)
            route = self.path.split("?", 1)[0]
            if route in state.redirect:
                self._answer(302, {}, {"Location": state.redirect[route]})
            elif route.endswith("/comments"):
                self._answer(200, state.comments if "page=1" in self.path else [])
            elif route.endswith("/reviews"):
                self._answer(200, state.reviews if "page=1" in self.path else [])
            else:
                self._answer(200, [])

        def do_POST(self) -> None:
            body = self._record()
            if self.path in state.post_redirect:
                self._answer(302, {}, {"Location": state.post_redirect[self.path]})
                return
            if state.post_status != 201:
                self._answer(state.post_status, {"message": state.message})
                return
            bot = {"login": "github-actions[bot]", "type": "Bot"}
            state.reviews.append({"user": bot, "body": body["body"]})
            state.comments += [{"user": bot, "body": comment["body"], "path": comment["path"]}
                               for comment in body["comments"]]
            self._answer(201, {"id": len(state.reviews)})

    class Server(ThreadingHTTPServer):
        def handle_error(self, request: Any, client_address: Any) -> None:
            pass  # a client that hung up on a trickle (the deadline test): expected

    server = Server(("127.0.0.1", 0), Handler)
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
        thread.join()
