"""Registry credentials and the WWW-Authenticate challenge, without a credential library.

Credentials come only from the user's Docker client configuration
(`$DOCKER_CONFIG/config.json`, default `~/.docker/config.json`): `auths.<host>.auth`,
base64 of `user:password`, as `docker login` writes it. Credential helpers
(`credsStore`, `credHelpers`) run arbitrary programs and are not used; an image behind
one must be pulled with docker and imported with `--from docker`.

A password is held in a `Credentials` whose repr hides it, and no message built here
contains it: the only place it goes is an Authorization header to the registry's own
token endpoint (or to the registry, for Basic challenges).
"""

from __future__ import annotations

import base64
import binascii
import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from roteiro_py.store.manifest import ManifestError, load_json

#: Docker Hub's credentials are stored under the legacy index URL, not the registry host.
_HUB_KEYS = ("https://index.docker.io/v1/", "index.docker.io", "docker.io",
             "registry-1.docker.io")


@dataclass(frozen=True)
class Credentials:
    username: str
    password: str = field(repr=False)

    def basic_header(self) -> str:
        raw = f"{self.username}:{self.password}".encode()
        return "Basic " + base64.b64encode(raw).decode("ascii")

    def __repr__(self) -> str:
        return f"Credentials(username={self.username!r}, password=<redacted>)"

    __str__ = __repr__


def docker_config_path() -> Path:
    base = os.environ.get("DOCKER_CONFIG")
    return (Path(base).expanduser() if base else Path.home() / ".docker") / "config.json"


def credentials_for(registry: str, config: Path | None = None) -> Credentials | None:
    """The inline credentials `docker login` stored for `registry`, or None.

    An unreadable or malformed config yields None (anonymous access), never an error
    that quotes the file: it holds secrets.
    """
    path = config or docker_config_path()
    try:
        data = load_json(path.read_bytes())
    except (OSError, ManifestError):
        return None
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
    keys = [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"]
    if registry in _HUB_KEYS:
        keys = [*_HUB_KEYS, *keys]
    for key in keys:
        entry = auths.get(key)
        if not isinstance(entry, dict):
            continue
        encoded = entry.get("auth")
        if isinstance(encoded, str) and encoded:
            try:
                user, sep, password = base64.b64decode(encoded, validate=True).decode().partition(":")
            except (binascii.Error, UnicodeDecodeError):
                return None
            if sep and user:
                return Credentials(user, password)
        legacy_user, legacy_password = entry.get("username"), entry.get("password")
        if isinstance(legacy_user, str) and isinstance(legacy_password, str) and legacy_user:
            return Credentials(legacy_user, legacy_password)
    return None


@dataclass(frozen=True)
class Challenge:
    scheme: str  # lower-cased: "bearer", "basic"
    params: dict[str, str]


_TOKEN = r"[!#$%&'*+.^_`|~0-9A-Za-z-]+"
_PARAM = re.compile(rf'\s*({_TOKEN})\s*=\s*(?:"((?:[^"\\]|\\.)*)"|({_TOKEN}))\s*(?:,|$)')
_SCHEME = re.compile(rf"\s*({_TOKEN})(?:\s+|$)")


def parse_www_authenticate(header: str) -> list[Challenge]:
    """Parse RFC 7235 challenges, e.g. `Bearer realm="…",service="…",scope="…"`.

    Several challenges may share one header (`Basic realm="x", Bearer realm="y"`); a
    parameter is `name=token` or `name="quoted \\" string"`. Unparseable input yields the
    challenges recognised before it, so a strange header degrades to "no usable challenge".
    """
    challenges: list[Challenge] = []
    pos = 0
    while pos < len(header):
        if header[pos] in ", \t":
            pos += 1
            continue
        scheme = _SCHEME.match(header, pos)
        if not scheme:
            break
        pos = scheme.end()
        params: dict[str, str] = {}
        while pos < len(header):
            param = _PARAM.match(header, pos)
            if not param:
                break
            quoted, bare = param.group(2), param.group(3)
            value = re.sub(r"\\(.)", r"\1", quoted) if quoted is not None else bare
            params[param.group(1).lower()] = value
            pos = param.end()
        challenges.append(Challenge(scheme.group(1).lower(), params))
    return challenges
