"""Helpers for the real-lint tests: the linter image built by scripts/build-image and
provisioned into the store, the VM assets provisioned, and the real CLI run under TCG
(the only accelerator that boots a guest on these machines; the tests opt in to it as a
user would, with ROTEIRO_VM_ACCEL). Everything is provisioned once into a ROTEIRO_HOME
shared across runs (/var/tmp/roteiro-test-home, or $ROTEIRO_TEST_HOME), as the VM tests do.
"""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
EXE = Path(sys.executable).with_name("pylint-sandbox")
HOME = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"))


@dataclass(frozen=True)
class Image:
    reference: str
    layout: Path


IMAGES = Path(os.environ.get("ROTEIRO_TEST_IMAGES", "/var/tmp/roteiro-images"))


def build_image(name: str, *extra: str) -> Image:
    """scripts/build-image into IMAGES/name (cached there across runs by its inputs)."""
    layout = IMAGES / name
    done = subprocess.run([sys.executable, str(ROOT / "scripts" / "build-image"), "--output",
                           str(layout), *extra], capture_output=True, text=True, timeout=1500,
                          check=False)
    assert done.returncode == 0, done.stderr[-3000:]
    return Image(done.stdout.strip().splitlines()[-1], layout)


def cli(*args: str, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 900) -> subprocess.CompletedProcess[str]:
    full = {**os.environ, "ROTEIRO_HOME": str(HOME), "ROTEIRO_VM_ACCEL": "tcg", **(env or {})}
    return subprocess.run([str(EXE), *args], capture_output=True, text=True, env=full, cwd=cwd,
                          timeout=timeout, check=False)


def provision_vm_assets() -> Path:
    """The VM assets in HOME (downloaded once; a no-op when they are intact)."""
    HOME.mkdir(parents=True, exist_ok=True)
    done = cli("prefetch", "--vm-assets", "--allow-download", timeout=1500)
    assert done.returncode == 0, done.stderr
    return HOME


def provision(image: Image) -> Image:
    """`image` in HOME's store, from its OCI layout (a no-op when it is there)."""
    done = cli("prefetch", "--analyzer", "clippy", "--from", f"oci:{image.layout}", "--image",
               image.reference, timeout=1500)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == image.reference
    return image
