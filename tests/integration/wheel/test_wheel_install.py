"""The wheel stands alone (issue 14): built from the package, installed into a fresh
virtual environment outside the checkout, it runs `--help`, `doctor` and a refusal, and
every command a refusal points at prints the file it names, byte for byte.

The wheel and the environment are made once per session (pip reaches PyPI for setuptools
and the dependencies, with a cache under the session's temporary directory, so nothing of
the user's pip cache is read or written). Measured on the 2-core machine, shared with
other test runs: 33 to 40 s for both; the whole file about 50 s.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
import venv
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from roteiro_py import shipped

ROOT = Path(__file__).resolve().parents[3]


@dataclass(frozen=True)
class Installed:
    wheel: Path
    venv: Path
    #: A directory outside the checkout, for cwd.
    outside: Path

    @property
    def exe(self) -> Path:
        return self.venv / "bin" / "pylint-sandbox"


def _pip(python: Path, *args: str, cache: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "PIP_", "VIRTUAL_ENV"))}
    env.update(PIP_CACHE_DIR=str(cache), PIP_DISABLE_PIP_VERSION_CHECK="1")
    subprocess.run([str(python), "-m", "pip", *args], check=True, env=env, capture_output=True,
                   text=True, timeout=600)


@pytest.fixture(scope="session")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    started = time.monotonic()
    base = tmp_path_factory.mktemp("wheel")
    assert ROOT not in base.parents
    # The source as the package directory holds it (a copy: pip's in-tree build would leave
    # build/ and *.egg-info in the checkout).
    source = base / "source"
    shutil.copytree(ROOT / "roteiro_py", source / "roteiro_py",
                    ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copyfile(ROOT / name, source / name)
    cache = base / "pip-cache"
    _pip(Path(sys.executable), "wheel", "--no-deps", "-w", str(base / "dist"), str(source), cache=cache)
    (wheel,) = (base / "dist").glob("pylint_sandbox-*.whl")
    env_dir = base / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    _pip(env_dir / "bin" / "python", "install", str(wheel), cache=cache)
    outside = base / "elsewhere"
    outside.mkdir()
    print(f"wheel built and installed in {time.monotonic() - started:.1f} s")
    return Installed(wheel=wheel, venv=env_dir, outside=outside)


def _env(installed: Installed, home: Path) -> dict[str, str]:
    """The environment of a user with no checkout: nothing of this test's Python path, a
    fresh $ROTEIRO_HOME and $CARGO_HOME, the installed command first on PATH."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "VIRTUAL_ENV", "ROTEIRO_"))}
    env.update(ROTEIRO_HOME=str(home / "roteiro"), CARGO_HOME=str(home / "cargo"), NO_COLOR="1",
               PATH=f"{installed.venv / 'bin'}{os.pathsep}{env.get('PATH', '')}")
    return env


def _run(installed: Installed, *args: str, home: Path) -> subprocess.CompletedProcess[bytes]:
    """The installed command, as a user with no checkout runs it (`_env`)."""
    return subprocess.run([str(installed.exe), *args], cwd=installed.outside, env=_env(installed, home),
                          capture_output=True, timeout=300)


def test_the_wheel_carries_the_guest_init_and_every_file_a_message_points_at(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = set(wheel.namelist())
        assert "roteiro_py/vm/qemu/guest_init.sh" in names
        for entry in shipped.ALL:
            member = f"roteiro_py/docs_data/{entry.name}"
            assert wheel.read(member) == (ROOT / entry.source).read_bytes(), member


def test_the_installed_package_is_the_wheels_not_the_checkouts(installed: Installed, tmp_path: Path) -> None:
    """Asked in the environment every other test here runs the command in (`_env`), not
    under `python -I`, which would hide a PYTHONPATH this session leaks (the suite runs with
    PYTHONPATH naming the checkout)."""
    def where(env: dict[str, str]) -> Path:
        probe = subprocess.run([str(installed.venv / "bin" / "python"), "-c",
                                "import roteiro_py.cli.app as a; print(a.__file__)"], env=env,
                               cwd=installed.outside, capture_output=True, text=True, timeout=60, check=True)
        return Path(probe.stdout.strip())

    env = _env(installed, tmp_path)
    assert installed.venv in where(env).parents and ROOT not in where(env).parents
    # The control: the probe does see a leaked path.
    assert ROOT in where({**env, "PYTHONPATH": str(ROOT)}).parents


def test_help_doctor_and_the_shipped_documents_run_from_the_wheel(installed: Installed, tmp_path: Path) -> None:
    helped = _run(installed, "--help", home=tmp_path)
    assert helped.returncode == 0 and b"docs" in helped.stdout and b"dockerfile" in helped.stdout
    doctor = _run(installed, "doctor", home=tmp_path)
    assert doctor.returncode in (0, 3), doctor.stderr[-2000:]
    assert b"Traceback" not in doctor.stdout + doctor.stderr and doctor.stdout.strip()
    for name, entry in shipped.DOCS.items():
        printed = _run(installed, "docs", name, home=tmp_path)
        assert printed.returncode == 0 and printed.stdout == (ROOT / entry.source).read_bytes(), name
    listed = _run(installed, "docs", home=tmp_path)
    assert listed.returncode == 0 and all(name.encode() in listed.stdout for name in shipped.DOCS)


def test_a_refusal_from_the_wheel_points_at_commands_that_work_there(installed: Installed, tmp_path: Path) -> None:
    tree = tmp_path / "tree"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "t"\nversion = "0.1.0"\nedition = "2021"\n')
    (tree / "src" / "lib.rs").write_text("")
    (tree / "Cargo.lock").write_text("version = 4\n\n[[package]]\nname = \"t\"\nversion = \"0.1.0\"\n")
    refused = _run(installed, "lint", "clippy", str(tree), home=tmp_path)
    assert refused.returncode == 3, refused.stderr[-2000:]
    text = refused.stderr.decode()
    assert "No linter image is configured" in text and "Traceback" not in text
    pointers = re.findall(r"pylint-sandbox (?:docs|dockerfile) [\w-]+", text)
    assert "pylint-sandbox dockerfile clippy" in pointers and "pylint-sandbox docs threat-model" in pointers
    for pointer in set(pointers):
        kind, name = pointer.split()[1:]
        entry = (shipped.DOCS if kind == "docs" else shipped.DOCKERFILES)[name]
        printed = _run(installed, kind, name, home=tmp_path)
        assert printed.returncode == 0 and printed.stdout == (ROOT / entry.source).read_bytes(), pointer
    built = _run(installed, "dockerfile", "clippy", home=tmp_path)
    assert shipped.build_command() in built.stderr.decode() and shipped.build_command() in text


#: What the stand-in base's `rustup` writes each call to: the RUN lines really ran.
_RUSTUP_STUB = "#!/bin/sh\necho \"$*\" >> /rustup-calls\n"


@pytest.fixture
def stand_in_base(tmp_path: Path) -> Iterator[str]:
    """A local image in place of the Dockerfile's pinned Rust base, which this engine cannot
    pull (no registry is reachable): busybox as /bin/sh and a `rustup` that records its
    arguments. Made with `docker import`, so no pull either."""
    import tarfile
    import uuid

    rootfs = tmp_path / "rootfs.tar"
    with tarfile.open(rootfs, "w") as tar:
        tar.add(os.path.realpath(shutil.which("busybox") or "/bin/busybox"), "bin/busybox")
        link = tarfile.TarInfo("bin/sh")
        link.type, link.linkname = tarfile.SYMTYPE, "busybox"
        tar.addfile(link)
        stub = tmp_path / "rustup"
        stub.write_text(_RUSTUP_STUB)
        stub.chmod(0o755)
        tar.add(stub, "usr/local/bin/rustup")
    tag = f"roteiro-test/rust-stand-in:{uuid.uuid4().hex[:8]}"
    subprocess.run(["docker", "import", str(rootfs), tag], check=True, capture_output=True, timeout=300)
    try:
        yield tag
    finally:
        subprocess.run(["docker", "rmi", "-f", tag, shipped.LOCAL_TAG], capture_output=True, timeout=300)


def test_the_printed_build_and_pin_commands_work_verbatim_from_the_wheel(
        installed: Installed, stand_in_base: str, tmp_path: Path) -> None:
    """The lines a refusal prints, run as printed by bash, with the installed command and
    the real engine; only the base image is swapped in the Dockerfile's FROM line, since
    the engine cannot pull the pinned one."""
    from roteiro_py import errors

    triple = "riscv64gc-unknown-linux-gnu"
    wrapper = (f"pylint-sandbox() {{ command pylint-sandbox \"$@\" | "
               f"sed '1s|^FROM .*|FROM {stand_in_base}|'; }}\n")
    env = _env(installed, tmp_path)
    calls = []
    for line in (shipped.build_command(), errors.target_build_command(triple)):
        built = subprocess.run(["bash", "-c", "set -o pipefail\n" + wrapper + line], cwd=installed.outside,
                               env=env, capture_output=True, text=True, timeout=600)
        assert built.returncode == 0, built.stderr[-2000:]
        ran = subprocess.run(["docker", "run", "--rm", "--network", "none", shipped.LOCAL_TAG,
                              "/bin/sh", "-c", "cat /rustup-calls"],
                             capture_output=True, text=True, timeout=300, check=True)
        calls.append(ran.stdout.splitlines())
    assert calls == [["component add clippy"], ["component add clippy", f"target add {triple}"]]
    pinned = subprocess.run(["bash", "-c", shipped.prefetch_from_docker_command()], cwd=installed.outside,
                            env=env, capture_output=True, text=True, timeout=600)
    assert pinned.returncode == 0, pinned.stderr[-2000:]
    assert re.fullmatch(rf"localhost/{re.escape(shipped.LOCAL_TAG)}@sha256:[0-9a-f]{{64}}\n", pinned.stdout)
    assert "config set lint.image" in pinned.stderr
