"""Real components for the store's integration tests.

- `registry`: Debian's docker-registry (distribution 2.8) on 127.0.0.1, filesystem
  storage in a temp dir, started once per session and stopped at the end.
- `token_registry`: a second one configured for bearer-token auth, with a token server
  on loopback (a thread here) that checks Basic credentials and mints RS256 JWTs signed
  with `openssl` (the registry verifies them against the self-signed certificate).
- `push_image`: a minimal client of the distribution push API (monolithic blob upload,
  manifest PUT), so tests serve images they made themselves, a few KiB each.
"""

from __future__ import annotations

import base64
import hashlib
import json
import os
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

REGISTRY_BIN = "/usr/bin/docker-registry"
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


def sha(data: bytes) -> str:
    return f"sha256:{hashlib.sha256(data).hexdigest()}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Registry:
    host: str
    process: subprocess.Popen[bytes]
    log: Path
    #: Authorization header value for pushes (token registries), None for open ones.
    push_auth: str | None = None
    mint: object = None

    @property
    def url(self) -> str:
        return f"http://{self.host}"

    def _request(self, method: str, url: str, data: bytes | None = None,
                 headers: dict[str, str] | None = None) -> tuple[int, dict[str, str]]:
        request = urllib.request.Request(url, data=data, method=method, headers=headers or {})
        if self.push_auth:
            request.add_header("Authorization", self.push_auth)
        with _NO_PROXY.open(request, timeout=30) as response:
            return response.status, dict(response.headers)

    def push_blob(self, repo: str, data: bytes) -> str:
        digest = sha(data)
        _, headers = self._request("POST", f"{self.url}/v2/{repo}/blobs/uploads/", b"")
        location = urllib.parse.urljoin(self.url, headers["Location"])
        sep = "&" if "?" in location else "?"
        status, _ = self._request("PUT", f"{location}{sep}digest={digest}", data,
                                  {"Content-Type": "application/octet-stream"})
        assert status == 201, status
        return digest

    def push_manifest(self, repo: str, body: bytes, media_type: str,
                      reference: str | None = None) -> str:
        digest = sha(body)
        status, _ = self._request("PUT", f"{self.url}/v2/{repo}/manifests/{reference or digest}",
                                  body, {"Content-Type": media_type})
        assert status == 201, status
        return digest


def _start_registry(tmp: Path, auth: dict[str, object] | None = None) -> Registry:
    port = _free_port()
    config: dict[str, object] = {
        "version": 0.1,
        "log": {"level": "warn", "accesslog": {"disabled": True}},
        "storage": {"filesystem": {"rootdirectory": str(tmp / "data")},
                    "delete": {"enabled": True}},
        "http": {"addr": f"127.0.0.1:{port}", "secret": uuid.uuid4().hex},
    }
    if auth:
        config["auth"] = auth
    # JSON is YAML: no YAML library needed.
    (tmp / "config.yml").write_text(json.dumps(config))
    log = tmp / "registry.log"
    with log.open("wb") as sink:
        process = subprocess.Popen([REGISTRY_BIN, "serve", str(tmp / "config.yml")],
                                   stdout=sink, stderr=sink, stdin=subprocess.DEVNULL)
    registry = Registry(f"127.0.0.1:{port}", process, log)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        try:
            _NO_PROXY.open(f"{registry.url}/v2/", timeout=1).close()
            return registry
        except urllib.error.HTTPError as exc:
            if exc.code == 401:
                return registry
        except OSError:
            pass
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    raise RuntimeError(f"docker-registry did not start: {log.read_text()[-2000:]}")


def _stop(registry: Registry) -> None:
    registry.process.terminate()
    try:
        registry.process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        registry.process.kill()
        registry.process.wait()


@pytest.fixture(scope="session")
def registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Registry]:
    if not Path(REGISTRY_BIN).exists():
        pytest.fail(f"{REGISTRY_BIN} is required (apt-get install docker-registry)")
    reg = _start_registry(tmp_path_factory.mktemp("registry"))
    yield reg
    _stop(reg)


# -- bearer-token auth -----------------------------------------------------------------

def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


@dataclass
class TokenServer:
    url: str
    username: str
    password: str
    key: Path
    cert_der: bytes
    service: str = "roteiro-test"
    issuer: str = "roteiro-test-issuer"
    requests: list[dict[str, str]] = field(default_factory=list)

    def mint(self, scope: str, subject: str) -> str:
        access = []
        if scope:
            kind, name, actions = scope.split(":")
            access.append({"type": kind, "name": name, "actions": actions.split(",")})
        now = int(time.time())
        header = {"typ": "JWT", "alg": "RS256", "x5c": [base64.b64encode(self.cert_der).decode()]}
        claims = {"iss": self.issuer, "sub": subject, "aud": self.service, "exp": now + 600,
                  "nbf": now - 60, "iat": now, "jti": uuid.uuid4().hex, "access": access}
        signing_input = f"{_b64url(json.dumps(header).encode())}." \
                        f"{_b64url(json.dumps(claims).encode())}"
        signature = subprocess.run(["openssl", "dgst", "-sha256", "-sign", str(self.key)],
                                   input=signing_input.encode(), capture_output=True,
                                   check=True).stdout
        return f"{signing_input}.{_b64url(signature)}"


def _serve_tokens(server: TokenServer, port_holder: list[int],
                  ready: threading.Event) -> ThreadingHTTPServer:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's naming
            query = dict(urllib.parse.parse_qsl(urllib.parse.urlsplit(self.path).query))
            auth = self.headers.get("Authorization", "")
            server.requests.append({"authorization": auth.split(" ")[0], **query})
            expected = "Basic " + base64.b64encode(
                f"{server.username}:{server.password}".encode()).decode()
            if auth != expected:
                self.send_response(401)
                self.end_headers()
                return
            body = json.dumps({"token": server.mint(query.get("scope", ""),
                                                    server.username)}).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    port_holder.append(httpd.server_address[1])
    return httpd


@pytest.fixture(scope="session")
def token_registry(tmp_path_factory: pytest.TempPathFactory) -> Iterator[
        tuple[Registry, TokenServer]]:
    if shutil.which("openssl") is None:
        pytest.fail("openssl is required to sign the test registry's tokens")
    tmp = tmp_path_factory.mktemp("token-registry")
    key, cert = tmp / "key.pem", tmp / "cert.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout",
                    str(key), "-out", str(cert), "-days", "2", "-subj", "/CN=roteiro-token"],
                   check=True, capture_output=True)
    der = subprocess.run(["openssl", "x509", "-in", str(cert), "-outform", "DER"],
                         check=True, capture_output=True).stdout
    ports: list[int] = []
    tokens = TokenServer("", "tester", f"pw-{uuid.uuid4().hex}", key, der)
    httpd = _serve_tokens(tokens, ports, threading.Event())
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    tokens.url = f"http://127.0.0.1:{ports[0]}/token"
    reg = _start_registry(tmp, {"token": {"realm": tokens.url, "service": tokens.service,
                                          "issuer": tokens.issuer,
                                          "rootcertbundle": str(cert)}})
    try:
        yield reg, tokens
    finally:
        _stop(reg)
        httpd.shutdown()
        httpd.server_close()


@pytest.fixture
def docker_config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """An empty Docker client config dir for this test; write config.json into it."""
    directory = tmp_path / "docker-config"
    directory.mkdir()
    monkeypatch.setenv("DOCKER_CONFIG", str(directory))
    return directory


@pytest.fixture
def subprocess_env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[3])
    return env

