"""Helpers shared by unit and integration tests, imported as a package
(`from tests.support.https_server import ...`: `tests/` and its folders are packages, and
pytest puts the repository root on sys.path).

- `https_server`: a self-signed CA and a loopback HTTPS server with a request log and a
  hook for extra routes (a git smart-HTTP CGI, a misbehaving registry).
- `registry`: a cargo sparse registry built in a directory from `.crate` files made in
  Python (no cargo needed), and lockfile entries pinning them.
"""
