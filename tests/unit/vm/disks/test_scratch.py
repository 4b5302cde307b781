"""A scratch disk is a sparse file as large as asked, and once a guest has written it no
host program parses it (vm/disks/scratch.py): the only e2fsprogs the host runs on an
existing image are on the root filesystem, which the host's own mkfs.ext4 built.

The copy a CI cache makes of a dependency cache (a scratch disk a build VM wrote) keeps
its holes by the pack in ci/common.sh, bytes only: tests/unit/ci/test_deps_archive.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from roteiro_py.config_model import VmSettings
from roteiro_py.vm.disks import rootfs
from roteiro_py.vm.disks.scratch import create_scratch

MIB = 1024 * 1024
PACKAGE = Path(rootfs.__file__).resolve().parents[2]
#: What parses an ext4 image's metadata on the host: e2fsprogs' checkers and resizers
#: (mkfs.ext4 only writes a new one), and this package's wrappers of them.
PARSERS = re.compile(r'\b(ext4_tool|shrink_ext4|shrink_to_content)\('
                     r'|\bhost_tool\(\s*"(e2fsck|resize2fs|tune2fs|debugfs|dumpe2fs)"')


def test_a_scratch_disk_is_a_sparse_file_of_its_size(tmp_path: Path) -> None:
    size_mib = VmSettings().scratch_mib  # the default scratch disk: 8 GiB
    image = create_scratch(tmp_path / "work" / "scratch.ext4", size_mib)
    assert image.stat().st_size == size_mib * MIB
    # mkfs writes only metadata and the journal: the rest is holes, which the CI pack keeps
    assert image.stat().st_blocks * 512 < size_mib * MIB // 20


def callers() -> dict[str, list[str]]:
    found: dict[str, list[str]] = {}
    for module in sorted(PACKAGE.rglob("*.py")):
        for line in module.read_text().splitlines():
            code = line.split("#", 1)[0]
            if PARSERS.search(code) and not code.lstrip().startswith("def "):
                found.setdefault(str(module.relative_to(PACKAGE.parent)), []).append(line.strip())
    return found


def test_only_the_root_filesystem_is_parsed_by_a_host_tool() -> None:
    """The calls that run e2fsck, resize2fs and the like are in vm/disks/rootfs.py alone,
    where the image is the root filesystem the host just built (`_build_image`): red
    before, lint/dep_cache.py shrank the dependency cache the guest wrote
    (`shrink_to_content(disk)`), and vm/disks/scratch.py ran e2fsck and tune2fs on it."""
    found = callers()
    assert set(found) == {"roteiro_py/vm/disks/rootfs.py"}, found
    # control: the search does find them where they are
    assert any("shrink_ext4(staged" in line for line in found["roteiro_py/vm/disks/rootfs.py"])


@pytest.mark.parametrize("line", ["        shrink_to_content(disk)", '    ext4_tool(path, "e2fsck", [], (0,), 1.0)',
                                  '    run_tool([host_tool("debugfs", why), image])'])
def test_control_a_call_on_a_guest_written_image_would_be_found(line: str) -> None:
    assert PARSERS.search(line)
