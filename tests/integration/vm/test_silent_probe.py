"""A clippy probe that exits 0 and prints nothing stops the job before the tree's build.

A real TCG guest runs the steps lint/run.py builds (`steps_for`: the two probes, then the
lint in the tree) from an image whose toolchain is a stub: `rustc` names a sysroot whose
`cargo-clippy --version` exits 0 and prints what STUB_SAYS holds, and whose `cargo-clippy
clippy` (the tree's build, as far as this test is concerned) prints BUILD-RAN. Before
clippy/command.py's PROBE_SCRIPT the silent probe exited 0, the guest went on, and the
build ran; the host refused (ImageLacksLinter) only afterwards. Cold and from a VM
template (which runs the probes once per image), as a lint runs it.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.clippy.command import SILENT_PROBE_STATUS
from roteiro_py.clippy.toolchain import ProbeOutput, parse_clippy_version
from roteiro_py.config import Settings
from roteiro_py.errors import ImageLacksLinter
from roteiro_py.vm.api import JobOutcome
from roteiro_py.vm.disks import rootfs, scratch
from roteiro_py.vm.options import VmOptions
from roteiro_py.vm.qemu.backend import QemuBackend
from tests.integration.vm.oci_fixture import _add, _blob, busybox_image

STUBS = {
    "usr/bin/rustc": '#!/bin/sh\n[ "$1" = --print ] && { echo /stub; exit 0; }\n'
                     'printf "rustc 1.95.0\\nrelease: 1.95.0\\nhost: x86_64-unknown-linux-gnu\\n"\n',
    "stub/bin/rustc": "#!/bin/sh\nexec /usr/bin/rustc \"$@\"\n",
    "stub/bin/cargo-clippy": '#!/bin/sh\ncase "$1" in\n'
                             '--version) [ -z "$STUB_SAYS" ] || echo "$STUB_SAYS"; exit 0;;\n'
                             "clippy) echo BUILD-RAN; exit 0;;\nesac\nexit 2\n",
}


@pytest.fixture(scope="module")
def stub_rootfs(vm_home: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("stub-oci")
    layers, digest = busybox_image(root)

    def stubs(tar):  # type: ignore[no-untyped-def]
        for directory in ("usr", "usr/bin", "stub", "stub/bin"):
            _add(tar, directory, kind=b"5", mode=0o755)
        for name, text in STUBS.items():
            _add(tar, name, data=text.encode(), mode=0o755)

    layers.append(_blob(root, stubs, "application/vnd.oci.image.layer.v1.tar"))
    manifest = "sha256:" + hashlib.sha256(digest.encode() + repr(STUBS).encode()).hexdigest()
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("ROTEIRO_HOME", str(vm_home))
        return rootfs.rootfs_image(layers, manifest).path


def run_lint_steps(tmp_path: Path, image: Path, says: str, template: bool) -> JobOutcome:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text("[package]\nname = 'x'\n")
    settings = Settings()
    env = {"PATH": "/usr/bin:/bin", "STUB_SAYS": says}
    shaped = lint.Tree(asked=tree, workspace=tree, repo_root=tree)
    steps = lint.steps_for(shaped, settings, env, lint.clippy_command(settings))
    disk = scratch.create_scratch(tmp_path / "scratch.img", 64)
    backend = QemuBackend(VmOptions(rootfs=image, scratch=disk, accel="tcg", template=template,
                                    template_root=tmp_path / "templates"))
    return backend.run_steps(steps, lint.grant_for(shaped, None, None), stop_on_failure=True,
                             deadline=300, template_steps=2 if template else 0)


@pytest.mark.parametrize("template", [False, True], ids=["cold", "template"])
def test_a_silent_clippy_probe_stops_the_job_before_the_build(
        tmp_path: Path, stub_rootfs: Path, template: bool) -> None:
    job = run_lint_steps(tmp_path, stub_rootfs, "", template)
    ran = [(step.exit, step.stdout) for step in job.steps]
    assert len(job.steps) == 1, f"steps that ran after the silent probe: {ran}"
    assert all(b"BUILD-RAN" not in step.stdout for step in job.steps)
    probe = job.steps[0]
    assert probe.exit == SILENT_PROBE_STATUS and probe.stdout == b"", probe
    with pytest.raises(ImageLacksLinter):  # and the verdict the host gives it
        parse_clippy_version(ProbeOutput(probe.exit, probe.stdout, probe.stderr), reference="r")


def test_control_a_probe_that_answers_lets_the_build_run(tmp_path: Path, stub_rootfs: Path) -> None:
    job = run_lint_steps(tmp_path, stub_rootfs, "clippy 0.1.95 (59807616e1 2026-04-14)", False)
    assert [step.exit for step in job.steps] == [0, 0, 0], job
    assert job.steps[0].stdout == b"clippy 0.1.95 (59807616e1 2026-04-14)\n"
    assert job.steps[2].stdout == b"BUILD-RAN\n"
