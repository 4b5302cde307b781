"""Docker credential helpers, run as the docker client runs them (store/auth.py).

Each helper here is a real executable on PATH speaking the docker-credential-helpers
protocol (`get`, the server on stdin, JSON on stdout): the real component on this machine
would be docker-credential-pass or -secretservice, which need a keyring daemon.
"""

from __future__ import annotations

import base64
import json
import stat
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.errors import EXIT_REFUSED
from roteiro_py.store import auth
from roteiro_py.store.auth import Credentials, credentials_for

SECRET = "hunter2-not-for-messages"


def _helper(bin_dir: Path, name: str, body: str) -> Path:
    bin_dir.mkdir(exist_ok=True)
    program = bin_dir / f"docker-credential-{name}"
    program.write_text("#!/bin/sh\n" + body)
    program.chmod(program.stat().st_mode | stat.S_IXUSR)
    return program


@pytest.fixture
def bin_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    bins = tmp_path / "bin"
    bins.mkdir()
    monkeypatch.setenv("PATH", f"{bins}:/usr/bin:/bin")
    return bins


def _config(tmp_path: Path, **data: object) -> Path:
    config = tmp_path / "config.json"
    config.write_text(json.dumps(data))
    return config


ECHO_SERVER = ('[ "$1" = get ] || exit 9\nread server\n'
               'printf \'{"ServerURL":"%s","Username":"%s","Secret":"' + SECRET + '"}\' '
               '"$server" "$server"\n')


def test_a_cred_helper_answers_for_its_registry_and_hears_the_server(bin_dir: Path, tmp_path: Path) -> None:
    _helper(bin_dir, "fake", ECHO_SERVER)
    inline = {"registry.example:5000": {"auth": base64.b64encode(b"inline:pw").decode()}}
    config = _config(tmp_path, auths=inline, credHelpers={"registry.example:5000": "fake"})
    assert credentials_for("registry.example:5000", config) == Credentials("registry.example:5000", SECRET)
    # Control: without the helper entry the inline credentials are used, as before.
    config = _config(tmp_path, auths=inline)
    assert credentials_for("registry.example:5000", config) == Credentials("inline", "pw")


def test_creds_store_serves_every_registry_and_cred_helpers_win(bin_dir: Path, tmp_path: Path) -> None:
    _helper(bin_dir, "store", ECHO_SERVER)
    _helper(bin_dir, "other", 'read s\nprintf \'{"Username":"other","Secret":"x"}\'\n')
    config = _config(tmp_path, credsStore="store", credHelpers={"ghcr.io": "other"})
    assert credentials_for("quay.io", config) == Credentials("quay.io", SECRET)
    assert credentials_for("ghcr.io", config) == Credentials("other", "x")
    # Docker Hub is asked for under its legacy index address, as the docker client asks.
    assert credentials_for("registry-1.docker.io", config) == Credentials(
        "https://index.docker.io/v1/", SECRET)


def test_a_helper_holding_nothing_means_anonymous(bin_dir: Path, tmp_path: Path) -> None:
    _helper(bin_dir, "empty", "read s\necho 'credentials not found in native keychain'\nexit 1\n")
    config = _config(tmp_path, credsStore="empty")
    assert credentials_for("quay.io", config) is None


@pytest.mark.parametrize(("name", "body", "reason"), [
    ("absent", None, "it is not on PATH"),
    ("../../bin/sh", None, "that is not a credential helper's name"),
    ("fails", f"read s\necho 'token {SECRET} expired' >&2\nexit 3\n", "it exited with status 3"),
    ("garbled", f"read s\necho 'not json {SECRET}'\n", "its answer was not JSON"),
    ("shapeless", 'read s\necho \'{"Username": 1}\'\n', "its answer had no Username and Secret strings"),
])
def test_a_helper_that_cannot_answer_is_refused_naming_it_and_quoting_nothing(
        bin_dir: Path, tmp_path: Path, name: str, body: str | None, reason: str) -> None:
    if body is not None:
        _helper(bin_dir, name, body)
    config = _config(tmp_path, credHelpers={"quay.io": name})
    with pytest.raises(errors.CredentialHelperFailed) as caught:
        credentials_for("quay.io", config)
    refusal = caught.value
    assert refusal.exit_code == EXIT_REFUSED
    text = refusal.guidance().render_text()
    assert f"docker-credential-{name}" in text and "quay.io" in text and reason in text
    assert str(config) in text
    assert SECRET not in text


def test_a_helper_that_hangs_is_cut_at_its_deadline(bin_dir: Path, tmp_path: Path,
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(auth, "HELPER_TIMEOUT_S", 1)
    _helper(bin_dir, "slow", "exec sleep 30\n")
    config = _config(tmp_path, credsStore="slow")
    with pytest.raises(errors.CredentialHelperFailed, match="did not answer within 1 s"):
        credentials_for("quay.io", config)
