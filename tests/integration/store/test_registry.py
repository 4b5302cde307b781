"""Pulling from a real OCI registry (Debian's docker-registry) on loopback."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roteiro_py.errors import DownloadNotAllowed, PrefetchFailed
from roteiro_py.store import RegistrySourceSpec, Store, prefetch
from roteiro_py.store.manifest import OCI_INDEX, OCI_MANIFEST
from tests.integration.store.conftest import Registry, TokenServer
from tests.unit.store.store_images import Image, make_image, make_index, sha

REPO_ROOT = Path(__file__).resolve().parents[3]


def push(registry: Registry, repo: str, image: Image) -> str:
    for blob in (image.config, *image.layers):
        registry.push_blob(repo, blob)
    return registry.push_manifest(repo, image.manifest, OCI_MANIFEST)


def blob_files(store: Store) -> list[str]:
    return sorted(p.name for p in store.blobs_dir.iterdir()) if store.blobs_dir.exists() else []


def test_pull_by_digest_then_corrupt(registry: Registry, tmp_path: Path) -> None:
    image = make_image({"etc/hello": b"hello\n"}, {"usr/bin/tool": b"#!/bin/sh\n" * 50})
    digest = push(registry, "team/clippy", image)
    ref = f"{registry.host}/team/clippy:1.95@{digest}"
    store = Store(tmp_path / "store")

    with pytest.raises(DownloadNotAllowed) as refused:
        prefetch(store, ref, RegistrySourceSpec(), allow_download=False)
    assert f"{registry.url}/v2/team/clippy/" in refused.value.guidance().render_text()
    assert blob_files(store) == []

    seen: list[tuple[str, int, int]] = []
    result = prefetch(store, ref, RegistrySourceSpec(), allow_download=True,
                      progress=lambda d, done, total: seen.append((d, done, total)))
    assert result.reference == ref and result.manifest_digest == digest
    assert result.bytes_fetched == len(image.config) + sum(map(len, image.layers))
    assert {d for d, _, _ in seen} == {sha(x) for x in (image.config, *image.layers)}
    resolved = store.resolve(ref)
    assert [layer.path.read_bytes() for layer in resolved.layers] == image.layers
    assert prefetch(store, ref, RegistrySourceSpec()).already_present

    victim = resolved.layers[0]
    data = bytearray(victim.path.read_bytes())
    data[700] ^= 0x40
    victim.path.write_bytes(bytes(data))
    presence = store.is_present(ref)
    assert not presence and victim.digest in (presence.detail or "")
    # Re-pulling repairs it: the corrupt blob does not verify, so it is fetched again.
    assert prefetch(store, ref, RegistrySourceSpec(), allow_download=True).blobs_fetched == 1
    assert store.is_present(ref)


def test_index_pin_and_platform_manifest_pin(registry: Registry, tmp_path: Path) -> None:
    amd = make_image({"arch": b"amd64"})
    arm = make_image({"arch": b"arm64"}, arch="arm64")
    push(registry, "team/multi", amd)
    push(registry, "team/multi", arm)
    index = make_index((arm, "arm64"), (amd, "amd64"))
    index_digest = registry.push_manifest("team/multi", index, OCI_INDEX)

    store = Store(tmp_path / "store")
    result = prefetch(store, f"{registry.host}/team/multi@{index_digest}",
                      RegistrySourceSpec(), allow_download=True)
    assert (result.pinned_digest, result.manifest_digest) == (index_digest, amd.digest)
    [stored] = store.references()
    assert stored.descriptor.media_type == OCI_INDEX
    assert not store.blob_path(sha(arm.layers[0])).exists()  # only the host's platform

    direct = prefetch(store, f"{registry.host}/team/multi@{amd.digest}",
                      RegistrySourceSpec(), allow_download=True)
    assert direct.manifest_digest == amd.digest and direct.blobs_fetched == 0
    assert {r.descriptor.media_type for r in store.references()} == {OCI_INDEX, OCI_MANIFEST}


def test_wrong_digest_is_refused_and_leaves_nothing(registry: Registry, tmp_path: Path) -> None:
    image = make_image({"x": b"x"})
    push(registry, "team/wrong", image)
    store = Store(tmp_path / "store")
    wrong = sha(image.config)  # a digest the registry has, but as a blob, not a manifest
    with pytest.raises(PrefetchFailed) as caught:
        prefetch(store, f"{registry.host}/team/wrong@{wrong}", RegistrySourceSpec(),
                 allow_download=True)
    assert wrong in caught.value.guidance().render_text()
    assert blob_files(store) == [] and store.references() == []


def test_bearer_token_auth_with_docker_config_credentials(
    token_registry: tuple[Registry, TokenServer], docker_config: Path, tmp_path: Path
) -> None:
    registry, tokens = token_registry
    registry.push_auth = "Bearer " + tokens.mint("repository:team/private:pull,push", "pusher")
    image = make_image({"secret": b"s"})
    digest = push(registry, "team/private", image)
    ref = f"{registry.host}/team/private@{digest}"

    # Control arm: anonymous gets a 401 from the token server; the registry is really closed.
    with pytest.raises(PrefetchFailed) as anonymous:
        prefetch(Store(tmp_path / "anon"), ref, RegistrySourceSpec(), allow_download=True)
    assert "refused a pull token (HTTP 401)" in anonymous.value.guidance().render_text()

    auth = base64.b64encode(f"{tokens.username}:{tokens.password}".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {registry.host:
                                                                     {"auth": auth}}}))
    tokens.requests.clear()
    store = Store(tmp_path / "store")
    prefetch(store, ref, RegistrySourceSpec(), allow_download=True)
    assert store.is_present(ref)
    assert tokens.requests == [{"authorization": "Basic", "service": tokens.service,
                                "scope": "repository:team/private:pull"}]

    # Wrong password: refused, and the password appears in no message.
    wrong = base64.b64encode(f"{tokens.username}:not-{tokens.password}".encode()).decode()
    (docker_config / "config.json").write_text(json.dumps({"auths": {registry.host:
                                                                     {"auth": wrong}}}))
    with pytest.raises(PrefetchFailed) as refused:
        prefetch(Store(tmp_path / "wrong"), ref, RegistrySourceSpec(), allow_download=True)
    text = refused.value.guidance().render_text()
    assert "HTTP 401" in text and tokens.password not in text and wrong not in text


_CHILD = """
import os, sys, time
from pathlib import Path
from roteiro_py.store import RegistrySourceSpec, Store, prefetch
root, ref, delay, go = sys.argv[1], sys.argv[2], float(sys.argv[3]), sys.argv[4]
while go != "-" and not os.path.exists(go):
    time.sleep(0.005)
def progress(digest, done, total):
    print(f"progress {digest} {done} {total}", flush=True)
    time.sleep(delay)
result = prefetch(Store(Path(root)), ref, RegistrySourceSpec(), allow_download=True,
                  progress=progress)
print(f"result {result.reference} {result.bytes_fetched}", flush=True)
"""


def _child(env: dict[str, str], root: Path, ref: str, delay: float,
           go: str = "-") -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", _CHILD, str(root), ref, str(delay), go],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=env, cwd=REPO_ROOT)


def _big_image() -> Image:
    # Incompressible, so the blob is as large on the wire as on disk: 16 MiB, 16 chunks.
    return make_image({"big": os.urandom(16 << 20)})


def test_killed_pull_leaves_no_present_reference(
    registry: Registry, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    image = _big_image()
    digest = push(registry, "team/big", image)
    ref = f"{registry.host}/team/big@{digest}"
    root = tmp_path / "store"
    big = sha(image.layers[0])
    child = _child(subprocess_env, root, ref, 0.2)
    assert child.stdout is not None
    for line in child.stdout:
        _, blob, done, _total = line.split()
        if blob == big and int(done) >= 2 << 20:
            break
    child.send_signal(signal.SIGKILL)
    child.wait()
    child.stdout.close()
    assert child.stderr is not None
    child.stderr.close()

    store = Store(root)
    temps = [p for p in store.blobs_dir.iterdir() if p.name.startswith(".tmp-")]
    assert temps and temps[0].stat().st_size >= 2 << 20  # control: killed mid-blob
    assert not store.blob_path(big).exists()
    assert not store.index_path.exists()  # index.json is written last
    assert not store.is_present(ref)

    # A new pull ignores the temp file and completes (reusing the config the killed one
    # finished); prune then removes the leftover temp file and nothing else.
    leftover = sum(t.stat().st_size for t in temps)
    again = prefetch(store, ref, RegistrySourceSpec(), allow_download=True)
    assert (again.blobs_fetched, again.blobs_reused) == (1, 1)
    assert store.prune(grace_seconds=0) == leftover
    assert not any(t.exists() for t in temps) and store.is_present(ref)


def test_two_concurrent_pulls_both_succeed(
    registry: Registry, tmp_path: Path, subprocess_env: dict[str, str]
) -> None:
    image = _big_image()
    digest = push(registry, "team/race", image)
    ref = f"{registry.host}/team/race@{digest}"
    root, go = tmp_path / "store", tmp_path / "go"
    children = [_child(subprocess_env, root, ref, 0.01, str(go)) for _ in range(2)]
    time.sleep(0.5)  # both interpreters up and waiting on the go file
    go.touch()
    outputs = [child.communicate(timeout=120) for child in children]
    for child, (out, err) in zip(children, outputs, strict=True):
        assert child.returncode == 0, err
        assert f"result {ref}" in out
    # Both downloaded the big blob (they overlapped) rather than one finding it present.
    assert all(f"progress {sha(image.layers[0])} {16 << 20}" in out for out, _ in outputs)
    store = Store(root)
    assert [r.name for r in store.references()] == [ref]
    assert store.is_present(ref)
    assert [p for p in store.blobs_dir.iterdir() if p.name.startswith(".tmp-")] == []
