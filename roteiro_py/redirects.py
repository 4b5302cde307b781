"""A redirect's body is closed unread, by every client of a server we do not trust.

urllib's `HTTPRedirectHandler.http_error_302` reads a redirect reply's whole body
(`fp.read()`, no bound) and closes it only afterwards, outside any try/finally. So a
server's `302` with `Content-Length: 99999999999` made the client allocate 100 GB
(MemoryError, an internal error); a chunked body that broke off raised IncompleteRead, and
a Location that did not parse (`https://[::1/`) raised ValueError, each leaving the reply
and its socket open for as long as the error was kept, then to the garbage collector.
Nothing of a redirect's body is used, and urllib sends `Connection: close` with every
request, so closing it first loses nothing.

Shared by the crate fetcher (cargo/registry.py), the image registry client
(store/registry.py) and the Debian archive reader (vm/assets/debian_archive.py); imports
nothing of ours.
"""

from __future__ import annotations

import http.client
import urllib.request
from typing import IO, cast


class UnreadRedirectHandler(urllib.request.HTTPRedirectHandler):
    """urllib's redirect handling with the redirect's body closed before it runs. A
    subclass that overrides `http_error_302` names it again for 301, 303, 307 and 308
    (they are this class's method otherwise) and ends in `super().http_error_302`."""

    def http_error_302(self, req: urllib.request.Request, fp: IO[bytes], code: int, msg: str,
                       headers: http.client.HTTPMessage) -> IO[bytes] | None:
        fp.close()
        return cast("IO[bytes] | None", super().http_error_302(req, fp, code, msg, headers))

    http_error_301 = http_error_303 = http_error_307 = http_error_308 = http_error_302
