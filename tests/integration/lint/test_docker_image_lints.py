"""An image built in the local Docker engine is provisioned with --from docker, and the
reference prefetch prints is the one that then lints (issue: provisioning fetches, running reads)."""

from __future__ import annotations

import json
import os
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.integration.lint.lint_support import Image, cli

DOCKERFILE = """FROM scratch
ADD base.tar /
ADD tools.tar /
ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
"""


@pytest.fixture
def engine_image(clippy_image: Image, tmp_path: Path) -> Iterator[str]:
    """The linter image's own layers rebuilt by `docker build` (no registry is reachable here)."""
    index = json.loads((clippy_image.layout / "index.json").read_text())
    blobs = clippy_image.layout / "blobs" / "sha256"
    manifest = json.loads((blobs / index["manifests"][0]["digest"].split(":")[1]).read_text())
    context = tmp_path / "context"
    context.mkdir()
    for name, layer in zip(("base.tar", "tools.tar"), manifest["layers"], strict=True):
        os.link(blobs / layer["digest"].split(":")[1], context / name)
    (context / "Dockerfile").write_text(DOCKERFILE)
    tag = f"roteiro-test/clippy-engine:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "build", "-q", "-t", tag, str(context)], check=True, capture_output=True,
                   timeout=900)
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag], capture_output=True, check=False, timeout=300)


def test_engine_image_is_provisioned_and_its_printed_reference_lints(engine_image: str, demo: Path) -> None:
    provisioned = cli("prefetch", "--analyzer", "clippy", "--from", "docker", "--image", engine_image,
                      timeout=900)
    assert provisioned.returncode == 0, provisioned.stderr
    pinned = provisioned.stdout.strip()
    assert pinned.startswith(f"localhost/{engine_image}@sha256:") and "config set lint.image" in provisioned.stderr
    linted = cli("lint", "clippy", str(demo), "--image", pinned, "--format", "json")
    assert linted.returncode == 1, linted.stderr
    report = json.loads(linted.stdout)
    assert report["provenance"]["image_reference"] == pinned
    assert {f["code"] for f in report["findings"]} >= {"clippy::needless_return", "clippy::len_zero"}
