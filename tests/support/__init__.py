"""Helpers shared by unit and integration tests (`tests/` is on sys.path: pytest puts the
directory of tests/conftest.py there), imported as `from support.https_server import ...`.

- `https_server`: a self-signed CA and a loopback HTTPS server with a request log and a
  hook for extra routes (a git smart-HTTP CGI, a misbehaving registry).
- `registry`: a cargo sparse registry built in a directory from `.crate` files made in
  Python (no cargo needed), and lockfile entries pinning them.
"""
