"""The host reads the tree's manifests and lockfile as data (roteiro_py/cargo/workspace.py):
regular files only, no links, each bounded, and no parse of hostile TOML ends in a
traceback. What reads them: the lockfile's pins (cargo/lockfile.py, for fetch-deps and
the lint's preflight), a member's manifest (lint/preflight.py), the workspace root's walk."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roteiro_py.cargo import workspace as readers
from roteiro_py.cargo.lockfile import read_pins
from roteiro_py.errors import TreeFileRefused
from tests.unit.cargo_support import MEMBER, workspace

ROOT = Path(__file__).resolve().parents[3]
NESTED = "a = " + "[" * 5000 + "]" * 5000 + "\n"


def refusal_text(caught: pytest.ExceptionInfo[TreeFileRefused]) -> str:
    return caught.value.guidance().render_text()


def plant(path: Path, kind: str, tmp_path: Path, bound: int) -> None:
    """`path` made a link, a FIFO or a device in place of the regular file it was."""
    path.unlink()
    if kind == "big-file":  # a link to a regular file larger than the bound
        big = tmp_path / "big.toml"
        big.write_bytes(b"#" * (bound + 10) + b"\n")
        path.symlink_to(big)
    elif kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        host_file = tmp_path / "host-secret"
        host_file.write_text('[package]\nname = "HOST-SECRET"\nversion = "0.1.0"\n')
        path.symlink_to(host_file)


@pytest.mark.parametrize("kind", ["big-file", "fifo", "dev-zero", "host-file"])
def test_a_manifest_or_lockfile_that_is_a_link_or_not_a_file_is_refused_naming_it(
        tmp_path: Path, kind: str) -> None:
    root = workspace(tmp_path, "a", "b")
    member = root / "b" / "Cargo.toml"
    assert readers.read_manifest(member)["package"]["name"] == "b"  # control: a regular file
    assert read_pins(root / "Cargo.lock").path_packages == ("a",)
    plant(member, kind, tmp_path, readers.MANIFEST_MAX_BYTES)
    with pytest.raises(TreeFileRefused) as caught:
        readers.read_manifest(member)
    assert str(member) in refusal_text(caught) and "HOST-SECRET" not in refusal_text(caught)
    plant(root / "Cargo.lock", kind, tmp_path, readers.LOCKFILE_MAX_BYTES)
    with pytest.raises(TreeFileRefused) as caught:
        read_pins(root / "Cargo.lock")
    assert str(root / "Cargo.lock") in refusal_text(caught) and "HOST-SECRET" not in refusal_text(caught)


def test_an_oversized_manifest_is_refused_naming_the_bound(tmp_path: Path) -> None:
    root = workspace(tmp_path, "a")
    manifest = root / "a" / "Cargo.toml"
    manifest.write_text(MEMBER.format("a") + "#" * (readers.MANIFEST_MAX_BYTES - len(MEMBER.format("a"))))
    assert readers.read_manifest(manifest)["package"]["name"] == "a"  # control: at the bound
    manifest.write_text(manifest.read_text() + "#")
    with pytest.raises(TreeFileRefused) as caught:
        readers.read_manifest(manifest)
    assert f"larger than {readers.MANIFEST_MAX_BYTES} bytes" in refusal_text(caught)


def test_an_oversized_lockfile_is_refused_naming_the_bound(tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    with lock.open("wb") as out:
        out.write(b'version = 4\n')
        out.truncate(readers.LOCKFILE_MAX_BYTES + 1)  # sparse: no 16 MiB written
    for parse in (readers.read_lockfile, read_pins):
        with pytest.raises(TreeFileRefused) as caught:
            parse(lock)
        assert f"larger than {readers.LOCKFILE_MAX_BYTES} bytes" in refusal_text(caught)
    lock.write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    assert read_pins(lock).pins == ()  # control: the same file, within the bound


def test_deeply_nested_toml_is_refused_naming_the_file_wherever_it_is_parsed(tmp_path: Path) -> None:
    """tomllib recursed into a RecursionError (exit 4) for `a = [[[[...` 5,000 deep."""
    root = workspace(tmp_path, "a")
    (root / "a" / "Cargo.toml").write_text(MEMBER.format("a") + NESTED)
    with pytest.raises(TreeFileRefused) as caught:
        readers.read_manifest(root / "a" / "Cargo.toml")
    assert str(root / "a" / "Cargo.toml") in refusal_text(caught) and "nested" in refusal_text(caught)
    (root / "Cargo.lock").write_text(NESTED)
    for parse in (readers.read_lockfile, read_pins):
        with pytest.raises(TreeFileRefused) as caught:
            parse(root / "Cargo.lock")
        assert str(root / "Cargo.lock") in refusal_text(caught) and "nested" in refusal_text(caught)
    # an ancestor manifest only consulted for a [workspace] table: nested is "none"
    (root / "Cargo.toml").write_text("[workspace]\n" + NESTED)
    assert readers.find_workspace_root(root / "a") == root  # via the lockfile
    (root / "Cargo.lock").unlink()
    assert readers.find_workspace_root(root / "a") == root / "a"


def test_a_number_too_long_for_python_is_refused_naming_the_file(tmp_path: Path) -> None:
    """tomllib raised a bare ValueError for a 5,000-digit integer: exit 4 from a tree."""
    root = workspace(tmp_path, "a")
    manifest = root / "a" / "Cargo.toml"
    manifest.write_text(MEMBER.format("a") + "[package.metadata]\nn = " + "9" * 5000 + "\n")
    with pytest.raises(TreeFileRefused) as caught:
        readers.read_manifest(manifest)
    assert str(manifest) in refusal_text(caught) and "too long" in refusal_text(caught)
    (root / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n'
                                     "n = " + "9" * 5000 + "\n")
    with pytest.raises(TreeFileRefused, match="too long"):
        read_pins(root / "Cargo.lock")
    manifest.write_text(MEMBER.format("a") + "[package.metadata]\nn = " + "9" * 4000 + "\n")
    assert readers.read_manifest(manifest)["package"]["metadata"]["n"] > 0  # control


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
@pytest.mark.parametrize("which", ["member", "lockfile"])
def test_an_unreadable_file_is_refused_naming_it_not_a_traceback(which: str) -> None:
    """As root every file is readable, so the reader runs as `nobody` (setpriv) for real
    EACCES (in a directory under /tmp that `nobody` can traverse: pytest's own tmp is 0700)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="readers-unreadable-", dir="/tmp"))
    try:
        _unreadable_case(tmp_path, which)
    finally:
        shutil.rmtree(tmp_path)


def _unreadable_case(tmp_path: Path, which: str) -> None:
    tmp_path.chmod(0o755)
    root = workspace(tmp_path, "a")
    unreadable = root / "a" / "Cargo.toml" if which == "member" else root / "Cargo.lock"
    read = ("from roteiro_py.cargo.workspace import read_manifest as read\n" if which == "member"
            else "from roteiro_py.cargo.lockfile import read_pins as read\n")
    code = ("import sys\nfrom pathlib import Path\nfrom roteiro_py.errors import RoteiroError\n"
            + read + "try:\n    read(Path(sys.argv[1]))\nexcept RoteiroError as e:\n"
            "    print(type(e).__name__); print(e.guidance().render_text())\nelse:\n    print('READ')\n")
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)

    def as_nobody() -> subprocess.CompletedProcess[str]:
        return subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                               sys.executable, "-c", code, str(unreadable)], capture_output=True,
                              text=True, env={"PYTHONPATH": str(ROOT), "ROTEIRO_HOME": str(home),
                                              "PATH": "/nonexistent", "HOME": str(home)},
                              timeout=60, check=False)

    done = as_nobody()
    assert done.returncode == 0 and done.stdout == "READ\n", done.stderr  # control: readable
    unreadable.chmod(0o000)
    done = as_nobody()
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TreeFileRefused"), done.stdout
    assert str(unreadable) in done.stdout and "permission denied" in done.stdout
    assert "run the same command again" in done.stdout.replace("\n", " ")


def test_workspace_members_agree_with_cargo_metadata(tmp_path: Path) -> None:
    """workspace_members against real cargo 1.95's `metadata --no-deps` on a fixture with
    every way of being a member: a glob, the root package, `exclude`, `default-members`, a
    path dependency inside the workspace (a member without being listed) and one inherited
    from [workspace.dependencies]; features with an implicit one and a `dep:`-hidden one."""
    import json

    root = tmp_path / "ws"

    def crate(where: Path, name: str, body: str = "") -> None:
        (where / "src").mkdir(parents=True)
        (where / "src" / "lib.rs").write_text("")
        (where / "Cargo.toml").write_text(
            f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n{body}')

    crate(root, "top", '[workspace]\nmembers = ["crates/*"]\nexclude = ["crates/skip"]\n'
          'default-members = ["crates/a"]\n[workspace.dependencies]\nshared = { path = "libs/shared" }\n'
          "[dependencies]\nshared = { workspace = true }\n")
    crate(root / "crates" / "a", "a", '[features]\nfast = []\nuse-h = ["dep:h"]\n[dependencies]\n'
          'inner = { path = "../../libs/inner" }\nh = { path = "../../libs/h", optional = true }\n'
          'o = { path = "../../libs/o", optional = true }\n')
    crate(root / "crates" / "skip", "skip")
    (root / "crates" / "skip" / "Cargo.toml").write_text(
        '[package]\nname = "skip"\nversion = "0.1.0"\n[workspace]\n')
    for name in ("inner", "h", "o", "shared"):
        crate(root / "libs" / name, name)
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=root, check=True)
    metadata = json.loads(subprocess.run(
        ["cargo", "metadata", "--no-deps", "--offline", "--format-version", "1"], cwd=root,
        check=True, capture_output=True, text=True).stdout)
    by_id = {package["id"]: package for package in metadata["packages"]}
    members = readers.workspace_members(root)
    assert members is not None
    assert sorted(members.all) == sorted(by_id[i]["name"] for i in metadata["workspace_members"])
    assert sorted(members.default) == sorted(by_id[i]["name"]
                                             for i in metadata["workspace_default_members"])
    for package in metadata["packages"]:
        assert members.all[package["name"]].features == set(package["features"]), package["name"]
    assert members.all["a"].features == {"fast", "use-h", "o"}  # not a test of nothing
    assert sorted(members.all) == ["a", "h", "inner", "o", "shared", "top"]


def _host_and_tree(tmp_path: Path, members: str, path_dependency: str = "") -> tuple[Path, Path]:
    """A host directory outside the tree holding a crate with a feature named HOST_SECRET,
    and a workspace whose root manifest says `members` (and a path dependency)."""
    host = tmp_path / "host"
    (host / "deep" / "crate").mkdir(parents=True)
    (host / "deep" / "crate" / "Cargo.toml").write_text(
        '[package]\nname = "hostcrate"\nversion = "0.1.0"\n[features]\nHOST_SECRET = []\n')
    root = tmp_path / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text(
        f'[workspace]\nmembers = {members}\n[package]\nname = "top"\nversion = "0.1.0"\n'
        f'[dependencies]\n{path_dependency}')
    return host, root


@pytest.mark.parametrize(("members", "dependency"), [
    ('["linked/crate"]', ""),                         # a member through a linked directory
    ('["linked/*"]', ""),                             # a glob through it
    ('["*/crate"]', ""),                              # a glob whose wildcard matches the link
    ("[]", 'hostcrate = { path = "linked/crate" }'),  # a path dependency through it
])
def test_a_member_through_a_linked_directory_is_not_read(tmp_path: Path, members: str,
                                                         dependency: str) -> None:
    """Only the manifest's own name was opened without following a link: a directory of the
    tree that is a link took the host's Cargo.toml as a member, and its features into a
    refusal (lint/preflight.py UnknownFeature lists them), and a glob walked the host's
    directories (`l -> /` with `l/*/*/*/*` is the host's whole file system). A link on the
    way leaves the selection to cargo in the guest (None), whose tree has no host."""
    host, root = _host_and_tree(tmp_path, members, dependency)
    (root / "linked").symlink_to(host / "deep")
    assert readers.workspace_members(root) is None
    # control: the same directories copied into the tree are members, HOST_SECRET with them
    (root / "linked").unlink()
    (host / "deep").rename(root / "linked")
    found = readers.workspace_members(root)
    assert found is not None and found.all["hostcrate"].features == {"HOST_SECRET"}


def test_a_glob_walk_is_bounded(tmp_path: Path) -> None:
    """A glob over a directory of more entries than the walk reads is cargo's to expand."""
    _, root = _host_and_tree(tmp_path, '["many/*/x"]')
    for index in range(readers.MAX_GLOB_ENTRIES + 1):
        (root / "many" / f"d{index}").mkdir(parents=True)
    assert readers.workspace_members(root) is None
    # control: one entry fewer, and the walk answers (no member matched: the root alone)
    os.rmdir(root / "many" / "d0")
    found = readers.workspace_members(root)
    assert found is not None and sorted(found.all) == ["top"]


def test_the_member_manifests_read_are_bounded_in_total(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    """Review of issue 23: MAX_MEMBERS manifests of MANIFEST_MAX_BYTES each let a tree have
    the host parse 2 GiB of TOML before any VM starts. Past MAX_MEMBER_BYTES in all the
    members are cargo's to tell (no refusal: the check is only an early courtesy)."""
    root = tmp_path / "ws"
    members = [f"m{index}" for index in range(8)]
    (root).mkdir()
    (root / "Cargo.toml").write_text(f"[workspace]\nmembers = {members!r}\n".replace("'", '"'))
    padding = "# " + "x" * 1000 + "\n"
    for name in members:
        (root / name / "src").mkdir(parents=True)
        (root / name / "Cargo.toml").write_text(
            f'[package]\nname = "{name}"\nversion = "0.1.0"\n' + padding)
    monkeypatch.setattr(readers, "MAX_MEMBER_BYTES", 5 * 1024)
    assert readers.workspace_members(root) is None
    # control: the same workspace within the bound is read whole
    monkeypatch.setattr(readers, "MAX_MEMBER_BYTES", 64 * 1024)
    found = readers.workspace_members(root)
    assert found is not None and sorted(found.all) == members
