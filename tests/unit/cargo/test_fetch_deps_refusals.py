"""fetch-deps reads the tree's Cargo.lock alone, and refuses what it will not fetch before
anything is fetched or any host configuration is read (roteiro_py/commands/fetch_deps.py): a
lockfile that is a link, a pin that is not https or has no checksum, no lockfile at all.

The fetchers (cargo/registry.py, cargo/git.py) are replaced by guards that fail the test
when anything of them is used: what is proved is that the refusal comes first. Their own
tests are tests/unit/cargo/test_registry*.py and test_git*.py."""

from __future__ import annotations

import os
import sys
import types
from pathlib import Path

import pytest

import roteiro_py.cargo
from roteiro_py.cargo.lockfile import CRATES_IO_SOURCE, read_pins
from roteiro_py.commands.fetch_deps import fetch_deps
from roteiro_py.errors import LockfileWouldBeWritten, PackageRefused, TreeFileRefused
from tests.unit.cargo_support import MEMBER, lockfile, workspace

COMMIT = "2fcedca101685667c80995a10cefc3dad2c78566"


class NotReached(types.ModuleType):
    """A fetcher module any use of which fails the test."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"{self.__name__}.{name} was used before the refusal")


@pytest.fixture
def fetchers_unreached(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("registry", "git"):
        guard = NotReached(f"roteiro_py.cargo.{name}")
        monkeypatch.setitem(sys.modules, f"roteiro_py.cargo.{name}", guard)
        monkeypatch.setattr(roteiro_py.cargo, name, guard, raising=False)


def test_the_guard_sees_a_fetcher_used() -> None:
    """Control for every test here: the guard does fail a fetch that goes ahead."""
    with pytest.raises(AssertionError, match="HostCargo was used"):
        NotReached("roteiro_py.cargo.registry").HostCargo  # noqa: B018


def test_a_lockfile_that_is_a_link_is_refused_before_anything_is_fetched(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fetchers_unreached: None) -> None:
    root = workspace(tmp_path, "a")
    (root / "Cargo.lock").unlink()
    secret = tmp_path / "host-secret"
    secret.write_text("SECRET\n")
    (root / "Cargo.lock").symlink_to(secret)
    monkeypatch.setenv("PATH", "/nonexistent")  # no host tool is looked for either
    with pytest.raises(TreeFileRefused) as caught:
        fetch_deps(root)
    text = caught.value.guidance().render_text()
    assert str(root / "Cargo.lock") in text and "symbolic link" in text and "SECRET" not in text


@pytest.mark.parametrize(("source", "checksum", "said"), [
    (f"git+file:///home/user/private#{COMMIT}", None, "not https"),
    (f"git+ssh://git@internal/x#{COMMIT}", None, "not https"),
    ("sparse+file:///srv/index/", "a" * 64, "not https"),
    ("sparse+https://[x/", "a" * 64, "does not parse"),  # urlsplit's ValueError was exit 4
    (CRATES_IO_SOURCE, None, "no sha256 checksum"),
])
def test_a_pin_fetch_deps_would_not_fetch_is_refused_before_anything_is_fetched(
        tmp_path: Path, fetchers_unreached: None, source: str, checksum: str | None,
        said: str) -> None:
    """Every pin is checked before the first is fetched: a hostile one after an ordinary
    one still refuses the whole lockfile, naming the package."""
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text(MEMBER.format("top"))
    lockfile(tree, ("itoa", "1.0.15", CRATES_IO_SOURCE, "b" * 64), ("sneaky", "0.1.0", source, checksum))
    with pytest.raises(PackageRefused) as caught:
        fetch_deps(tree)
    text = caught.value.guidance().render_text()
    assert "sneaky 0.1.0" in text and said in text and str(tree / "Cargo.lock") in text, text
    assert caught.value.exit_code == 3


def test_an_unused_patch_in_the_lockfile_is_never_a_pin(tmp_path: Path) -> None:
    """A `[patch]` no package uses is written to Cargo.lock as `[[patch.unused]]` with its
    source, and host `cargo fetch --locked` cloned it (a `git+file://` there copied a host
    repository into the cache). Only `[[package]]` entries are pins now."""
    tree = tmp_path / "tree"
    tree.mkdir()
    lock = lockfile(tree)
    unused = (f'\n[[patch.unused]]\nname = "privcrate"\nversion = "0.1.0"\n'
              f'source = "git+file:///home/user/private#{COMMIT}"\n')
    lock.write_text(lock.read_text() + unused)
    assert read_pins(lock).pins == ()
    # control: the same source on a package is read, and refused
    lockfile(tree, ("privcrate", "0.1.0", f"git+file:///home/user/private#{COMMIT}", None))
    with pytest.raises(PackageRefused, match="privcrate 0.1.0"):
        read_pins(lock)


def test_a_tree_without_a_lockfile_is_refused_before_anything_is_fetched(
        tmp_path: Path, fetchers_unreached: None) -> None:
    tree = tmp_path / "tree"
    tree.mkdir()
    (tree / "Cargo.toml").write_text(MEMBER.format("top"))
    with pytest.raises(LockfileWouldBeWritten) as caught:
        fetch_deps(tree)
    assert str(tree / "Cargo.lock") in caught.value.guidance().render_text()
    assert not (tree / "Cargo.lock").exists()  # nothing wrote one


def test_the_lockfile_advice_never_runs_host_cargo_on_the_tree() -> None:
    text = LockfileWouldBeWritten(Path("/t/tree"), "needs to be updated").guidance().render_text()
    assert "commit an up-to-date Cargo.lock" in text
    assert "generate-lockfile" not in text and "cargo update" not in text
    for line in text.splitlines():
        if "cargo " in line and "pylint-sandbox" not in line:
            assert not line.strip().startswith(("$", "cd ", "cargo")), line


def test_fetch_deps_opens_no_manifest_of_the_tree(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Host cargo fetched what manifests declared ([build_dependencies] with a `file://`
    git source, a path dependency outside the copy) before --locked could refuse: now no
    manifest is read at all. Every Cargo.toml of the tree is a FIFO (the one reader
    refuses it, and a plain open would hang), and fetch-deps still hands every pin to its
    fetchers. The fetchers here record what they are given and fetch nothing (their own
    tests drive them); what is proved is what fetch-deps itself reads."""
    from roteiro_py.cargo.workspace import read_manifest

    root = workspace(tmp_path, "a", "b")
    checksum = "c" * 64
    lockfile(root, ("itoa", "1.0.15", CRATES_IO_SOURCE, checksum))
    for manifest in (root / "Cargo.toml", root / "a" / "Cargo.toml", root / "b" / "Cargo.toml"):
        manifest.unlink()
        os.mkfifo(manifest)
    with pytest.raises(TreeFileRefused):  # control: a manifest read would have been refused
        read_manifest(root / "a" / "Cargo.toml")
    given: list[str] = []
    registry = types.ModuleType("roteiro_py.cargo.registry")
    registry.HostCargo = types.SimpleNamespace(read=lambda: None)  # type: ignore[attr-defined]
    registry.fetch_crate = lambda pin, **_: given.append(pin.label()) or "store"  # type: ignore[attr-defined]
    for name, module in (("registry", registry), ("git", NotReached("roteiro_py.cargo.git"))):
        monkeypatch.setitem(sys.modules, f"roteiro_py.cargo.{name}", module)
        monkeypatch.setattr(roteiro_py.cargo, name, module, raising=False)
    fetched = fetch_deps(root / "a")  # asked from a member: the walk up finds the lockfile
    assert fetched.root == root and given == ["itoa 1.0.15"] and fetched.origins == {"store": 1}
