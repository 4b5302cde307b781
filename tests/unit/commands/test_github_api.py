"""commands/github_api.py against a server that answers what it likes (the API's origin is
outside: GitHub, a GHES host, or whatever answers there). A loopback http.server in a
thread stands in, since GitHub cannot be made to answer hostile bytes on demand."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from roteiro_py.commands.github_api import Api, ApiError, Token

#: JSON nested deeper than CPython's json module recurses: a RecursionError, not a ValueError.
NESTED = b"[" * 100_000 + b"]" * 100_000


@pytest.fixture
def answering() -> Iterator[tuple[str, dict[str, Any]]]:
    """A server answering every request with `answer["status"]` and `answer["body"]`."""
    answer: dict[str, Any] = {"status": 200, "body": b"[]"}

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *args: Any) -> None:
            pass

        def do_GET(self) -> None:
            self.send_response(answer["status"])
            self.send_header("Content-Length", str(len(answer["body"])))
            self.end_headers()
            self.wfile.write(answer["body"])

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", answer
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("status", [200, 404])
def test_json_nested_past_the_parsers_depth_is_an_api_error(
        answering: tuple[str, dict[str, Any]], status: int) -> None:
    """An answer (or an error's body, read for its `message`) nested 100,000 deep was a
    RecursionError out of `review`: an internal error (exit 4) where an API that answers
    nonsense is a review that could not be posted (exit 0, the findings as annotations)."""
    url, answer = answering
    api = Api(url, Token("t0ken"))
    answer.update(status=status, body=b'[{"a": 1}]' if status == 200 else b'{"message": "Not Found"}')
    if status == 200:  # control: the same server's well-formed answer is read
        assert api.request("GET", "/x") == [{"a": 1}]
    else:
        with pytest.raises(ApiError, match="HTTP 404: Not Found"):
            api.request("GET", "/x")
    answer.update(status=status, body=NESTED)
    with pytest.raises(ApiError) as caught:
        api.request("GET", "/x")
    assert caught.value.status == status
