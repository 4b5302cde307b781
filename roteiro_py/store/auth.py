"""Registry credentials and the WWW-Authenticate challenge, without a credential library.

Credentials come only from the user's Docker client configuration
(`$DOCKER_CONFIG/config.json`, default `~/.docker/config.json`), read as the docker client
reads it: a `credHelpers` entry for the registry first, else the `credsStore`, else the
inline `auths.<host>.auth` (base64 of `user:password`, as `docker login` writes it).
A helper is the program `docker-credential-<name>` on PATH, run with `get` and the
registry's address on stdin (the docker-credential-helpers protocol), through the process
layer: bounded in time (HELPER_TIMEOUT_S) and output (HELPER_MAX_BYTES), its name checked
before it is looked up. It is the user's own program, named by the user's own file, never
by a tree. A helper that says it holds nothing for the registry means anonymous access;
one that is missing or fails is a refusal (CredentialHelperFailed) naming it, never a
silent anonymous pull that then fails with a less precise 401.

A password is held in a `Credentials` whose repr hides it, and no message built here
contains it: the only place it goes is an Authorization header to the registry's own
token endpoint (or to the registry, for Basic challenges).
"""

from __future__ import annotations

import base64
import binascii
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from roteiro_py import errors
from roteiro_py.process.stream import collect, spawn
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


#: A credential helper may ask a keychain or a cloud metadata service; it gets this long.
HELPER_TIMEOUT_S = 30
#: Bytes of a helper's output read (its JSON answer is a few hundred).
HELPER_MAX_BYTES = 64 * 1024
#: What follows `docker-credential-` (docker-credential-helpers names: osxkeychain,
#: secretservice, pass, ecr-login, gcloud, desktop); anything else is refused unread.
_HELPER_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
#: What a helper prints when it holds nothing for the server (docker-credential-helpers'
#: `credentials.NewErrCredentialsNotFound`).
_NOT_FOUND = b"credentials not found in native keychain"


def _helper_for(data: dict[str, object], keys: list[str]) -> str | None:
    """The helper the docker client would ask for one of `keys`: credHelpers, then credsStore."""
    helpers = data.get("credHelpers")
    if isinstance(helpers, dict):
        for key in keys:
            name = helpers.get(key)
            if isinstance(name, str) and name:
                return name
    store = data.get("credsStore")
    return store if isinstance(store, str) and store else None


def helper_credentials(name: str, registry: str, config: Path) -> Credentials | None:
    """Ask `docker-credential-<name>` for `registry`'s credentials, or refuse naming it."""
    program = f"docker-credential-{name}"

    def refused(reason: str) -> errors.CredentialHelperFailed:
        return errors.CredentialHelperFailed(program, registry, config, reason)

    if not _HELPER_NAME.fullmatch(name):
        raise refused("that is not a credential helper's name")
    found = shutil.which(program)
    if found is None:
        raise refused("it is not on PATH")
    stream = spawn([found, "get"], stdin="pipe", timeout=HELPER_TIMEOUT_S,
                   max_bytes=HELPER_MAX_BYTES)
    if stream.stdin is not None:
        try:
            stream.stdin.write(registry.encode() + b"\n")
            stream.stdin.close()
        except OSError:
            pass  # it exited without reading; its status says why
    collected = collect(stream)
    if collected.timed_out:
        raise refused(f"it did not answer within {HELPER_TIMEOUT_S} s")
    if collected.exit != 0:
        if _NOT_FOUND in collected.stdout + collected.stderr:
            return None
        # Its output is not quoted: a helper's error may carry what it was asked to keep.
        raise refused(f"it exited with status {collected.exit}")
    try:
        answer = json.loads(collected.stdout)
    except (ValueError, UnicodeDecodeError):
        raise refused("its answer was not JSON") from None
    user = answer.get("Username") if isinstance(answer, dict) else None
    secret = answer.get("Secret") if isinstance(answer, dict) else None
    if not isinstance(user, str) or not isinstance(secret, str):
        raise refused("its answer had no Username and Secret strings")
    if not secret:
        return None
    # An identity token (Username "<token>") is an OAuth refresh token; the registry's
    # token endpoint takes it as Basic credentials as docker sends them.
    return Credentials(user, secret)


def credentials_for(registry: str, config: Path | None = None) -> Credentials | None:
    """The credentials the docker client would use for `registry`, or None (anonymous).

    An unreadable or malformed config yields None (anonymous access), never an error
    that quotes the file: it holds secrets. A credential helper it names that cannot
    answer raises CredentialHelperFailed.
    """
    path = config or docker_config_path()
    try:
        data = load_json(path.read_bytes())
    except (OSError, ManifestError):
        return None
    keys = [registry, f"https://{registry}", f"http://{registry}", f"https://{registry}/v1/"]
    if registry in _HUB_KEYS:
        keys = [*_HUB_KEYS, *keys]
    helper = _helper_for(data, keys) if isinstance(data, dict) else None
    if helper is not None:
        server = "https://index.docker.io/v1/" if registry in _HUB_KEYS else registry
        return helper_credentials(helper, server, path)
    auths = data.get("auths") if isinstance(data, dict) else None
    if not isinstance(auths, dict):
        return None
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
