"""Session fixtures for real-VM tests: assets provisioned once into a ROTEIRO_HOME that is
shared across test runs (/var/tmp/roteiro-test-home, or $ROTEIRO_TEST_HOME), so a re-run
does not download or build again; a busybox OCI image flattened into a root filesystem."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py.vm.assets import assets
from roteiro_py.vm.disks import rootfs
from tests.integration.vm.oci_fixture import busybox_image

HOME = Path(os.environ.get("ROTEIRO_TEST_HOME", "/var/tmp/roteiro-test-home"))


@pytest.fixture(scope="session")
def vm_home() -> Iterator[Path]:
    old = os.environ.get("ROTEIRO_HOME")
    os.environ["ROTEIRO_HOME"] = str(HOME)
    try:
        assets.provision_assets()
    finally:
        if old is None:
            del os.environ["ROTEIRO_HOME"]
        else:
            os.environ["ROTEIRO_HOME"] = old
    yield HOME


@pytest.fixture(autouse=True)
def roteiro_home(vm_home: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Overrides the suite's empty per-test home: these tests share the provisioned one."""
    monkeypatch.setenv("ROTEIRO_HOME", str(vm_home))
    yield vm_home


@pytest.fixture(scope="session")
def rootfs_image(vm_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    layers, digest = busybox_image(tmp_path_factory.mktemp("oci"))
    old = os.environ.get("ROTEIRO_HOME")
    os.environ["ROTEIRO_HOME"] = str(vm_home)
    try:
        return rootfs.rootfs_image(layers, digest).path
    finally:
        if old is None:
            del os.environ["ROTEIRO_HOME"]
        else:
            os.environ["ROTEIRO_HOME"] = old
