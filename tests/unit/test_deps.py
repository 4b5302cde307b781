"""fetch-deps reads the tree's manifests and lockfile on the host: regular files only, no
links, each bounded, a bounded walk, and no parse of hostile TOML ends in a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from roteiro_py import cargo_view, deps
from roteiro_py.errors import LockfileWouldBeWritten, TreeFileRefused

ROOT = Path(__file__).resolve().parents[2]
MEMBER = '[package]\nname = "{}"\nversion = "0.1.0"\n'


def workspace(base: Path, *members: str) -> Path:
    root = base / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text(
        "[workspace]\nmembers = [" + ", ".join(f'"{m}"' for m in members) + "]\n")
    for member in members:
        (root / member / "src").mkdir(parents=True)
        (root / member / "Cargo.toml").write_text(MEMBER.format(member))
    (root / "Cargo.lock").write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    return root


def refusal_text(caught: pytest.ExceptionInfo[TreeFileRefused]) -> str:
    return caught.value.guidance().render_text()


def test_a_clean_copy_holds_the_manifests_and_the_lockfile(tmp_path: Path) -> None:
    root = workspace(tmp_path, "a", "b")
    (root / "a" / "src" / "lib.rs").write_text("secret code\n")
    copy = tmp_path / "copy"
    copy.mkdir()
    assert deps.make_clean_copy(root, copy) == 3
    assert (copy / "a" / "Cargo.toml").read_text() == MEMBER.format("a")
    assert (copy / "Cargo.lock").read_bytes() == (root / "Cargo.lock").read_bytes()
    assert (copy / "a" / "src" / "lib.rs").read_text() == ""  # a placeholder, not the code


@pytest.mark.parametrize("kind", ["big-file", "fifo", "dev-zero", "host-file"])
def test_a_member_manifest_that_is_a_link_or_not_a_file_is_refused_naming_it(tmp_path: Path, kind: str) -> None:
    root = workspace(tmp_path, "a", "b")
    member = root / "b" / "Cargo.toml"
    member.unlink()
    if kind == "big-file":  # a link to a regular file larger than the bound
        big = tmp_path / "big.toml"
        big.write_bytes(b"#" * (deps.MANIFEST_MAX_BYTES + 10) + b"\n")
        member.symlink_to(big)
    elif kind == "fifo":
        os.mkfifo(member)
    elif kind == "dev-zero":
        member.symlink_to("/dev/zero")
    else:
        host_file = tmp_path / "host-secret"
        host_file.write_text('[package]\nname = "HOST-SECRET"\n')
        member.symlink_to(host_file)
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(TreeFileRefused) as caught:
        deps.make_clean_copy(root, copy)
    assert str(member) in refusal_text(caught)
    assert not (copy / "b" / "Cargo.toml").exists()
    assert sum(p.stat().st_size for p in copy.rglob("*") if p.is_file()) < 4096


def test_an_oversized_regular_manifest_is_refused_naming_the_bound(tmp_path: Path) -> None:
    root = workspace(tmp_path, "a")
    (root / "a" / "Cargo.toml").write_text(MEMBER.format("a") + "#" * deps.MANIFEST_MAX_BYTES)
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(TreeFileRefused) as caught:
        deps.make_clean_copy(root, copy)
    assert f"larger than {deps.MANIFEST_MAX_BYTES} bytes" in refusal_text(caught)


def test_too_many_manifests_or_too_deep_a_walk_is_refused_naming_the_bound(tmp_path: Path) -> None:
    root = tmp_path / "many"
    for index in range(deps.MAX_MANIFESTS + 1):
        (root / f"m{index}").mkdir(parents=True)
        (root / f"m{index}" / "Cargo.toml").write_text(MEMBER.format(f"m{index}"))
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(TreeFileRefused) as caught:
        deps.make_clean_copy(root, copy)
    assert f"more than {deps.MAX_MANIFESTS} manifests" in refusal_text(caught)

    deep = tmp_path / "deep"
    (deep / Path(*["d"] * (deps.MAX_WALK_DEPTH + 1))).mkdir(parents=True)
    (deep / "Cargo.toml").write_text(MEMBER.format("deep"))
    with pytest.raises(TreeFileRefused) as caught:
        deps.make_clean_copy(deep, tmp_path / "copy")
    assert f"more than {deps.MAX_WALK_DEPTH} directories" in refusal_text(caught)
    # control: at the bound the walk goes on
    shallow = tmp_path / "shallow"
    (shallow / Path(*["d"] * deps.MAX_WALK_DEPTH)).mkdir(parents=True)
    (shallow / Path(*["d"] * deps.MAX_WALK_DEPTH) / "Cargo.toml").write_text(MEMBER.format("s"))
    (tmp_path / "copy2").mkdir()
    assert deps.make_clean_copy(shallow, tmp_path / "copy2") == 1


NESTED = "a = " + "[" * 5000 + "]" * 5000 + "\n"


def test_deeply_nested_toml_is_refused_naming_the_file_wherever_it_is_parsed(tmp_path: Path) -> None:
    root = workspace(tmp_path, "a")
    (root / "a" / "Cargo.toml").write_text(MEMBER.format("a") + NESTED)
    copy = tmp_path / "copy"
    copy.mkdir()
    with pytest.raises(TreeFileRefused) as caught:
        deps.make_clean_copy(root, copy)
    assert str(root / "a" / "Cargo.toml") in refusal_text(caught) and "nested" in refusal_text(caught)

    (root / "Cargo.lock").write_text(NESTED)
    for parse in (deps.unsafe_sources, cargo_view.pins):
        with pytest.raises(TreeFileRefused) as caught:
            parse(root / "Cargo.lock")
        assert str(root / "Cargo.lock") in refusal_text(caught)
    # an ancestor manifest only consulted for a [workspace] table: nested is "none"
    (root / "Cargo.toml").write_text("[workspace]\n" + NESTED)
    assert deps.find_workspace_root(root / "a") == root  # via the lockfile
    (root / "Cargo.lock").unlink()
    assert deps.find_workspace_root(root / "a") == root / "a"


def test_a_number_too_long_for_python_is_refused_naming_the_file(tmp_path: Path) -> None:
    """tomllib raised a bare ValueError for a 5,000-digit integer: exit 4 from a tree."""
    root = workspace(tmp_path, "a")
    (root / "a" / "Cargo.toml").write_text(MEMBER.format("a") + "[package.metadata]\nn = " + "9" * 5000 + "\n")
    with pytest.raises(TreeFileRefused) as caught:
        deps.read_manifest(root / "a" / "Cargo.toml")
    assert str(root / "a" / "Cargo.toml") in refusal_text(caught) and "too long" in refusal_text(caught)
    (root / "a" / "Cargo.toml").write_text(MEMBER.format("a") + "[package.metadata]\nn = " + "9" * 4000 + "\n")
    assert deps.read_manifest(root / "a" / "Cargo.toml")["package"]["metadata"]["n"] > 0  # control


def test_a_lockfile_that_is_a_link_is_refused_before_cargo_runs(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    root = workspace(tmp_path, "a")
    (root / "Cargo.lock").unlink()
    secret = tmp_path / "host-secret"
    secret.write_text("SECRET\n")
    (root / "Cargo.lock").symlink_to(secret)
    monkeypatch.setenv("PATH", "/nonexistent")  # no cargo: a refusal must come before it is looked for
    with pytest.raises(TreeFileRefused) as caught:
        deps.fetch_deps(root)
    assert str(root / "Cargo.lock") in refusal_text(caught) and "symbolic link" in refusal_text(caught)


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to drop to another user")
@pytest.mark.parametrize("which", ["member", "lockfile"])
def test_an_unreadable_file_is_refused_naming_it_not_a_traceback(which: str) -> None:
    """As root every file is readable, so the run drops to `nobody` (setpriv) for real EACCES
    (in a directory under /tmp that `nobody` can traverse: pytest's own tmp is 0700)."""
    import shutil
    import tempfile

    tmp_path = Path(tempfile.mkdtemp(prefix="deps-unreadable-", dir="/tmp"))
    try:
        _unreadable_case(tmp_path, which)
    finally:
        shutil.rmtree(tmp_path)


def _unreadable_case(tmp_path: Path, which: str) -> None:
    tmp_path.chmod(0o755)
    root = workspace(tmp_path, "a")
    unreadable = root / "a" / "Cargo.toml" if which == "member" else root / "Cargo.lock"
    unreadable.chmod(0o000)
    home = tmp_path / "home"
    home.mkdir(mode=0o777)
    home.chmod(0o777)
    code = ("import sys\nfrom pathlib import Path\nfrom roteiro_py.errors import RoteiroError\n"
            "from roteiro_py.deps import fetch_deps\n"
            "try:\n    fetch_deps(Path(sys.argv[1]))\nexcept RoteiroError as e:\n"
            "    print(type(e).__name__); print(e.guidance().render_text())\n")
    done = subprocess.run(["/usr/bin/setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                           sys.executable, "-c", code, str(root)], capture_output=True, text=True,
                          env={"PYTHONPATH": str(ROOT), "ROTEIRO_HOME": str(home), "PATH": "/nonexistent",
                               "HOME": str(home)}, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("TreeFileRefused"), done.stdout
    assert str(unreadable) in done.stdout and "permission denied" in done.stdout
    assert "run the same command again" in done.stdout.replace("\n", " ")


@pytest.mark.parametrize(("member", "target"), [
    ("a", "inner/Cargo.toml/x.rs"),  # would make a directory where a nested member's manifest goes
    ("", "Cargo.lock/x.rs"),  # a root package: would make a directory where the lockfile goes
    ("a", "../../../outside.rs"), ("a", "/tmp/abs-outside.rs"), ("a", "src/\x00nul.rs"),
    ("a", "x" * 5000 + ".rs")])
def test_declared_target_paths_cannot_clobber_the_copy_or_escape_it(tmp_path: Path, member: str,
                                                                    target: str) -> None:
    root = workspace(tmp_path, "a", "a/inner", "b")
    manifest = root / member / "Cargo.toml"
    head = MEMBER.format("root") + manifest.read_text() if member == "" else manifest.read_text()
    escaped = target.replace("\x00", "\\u0000")
    manifest.write_text(head + f'[[bin]]\nname = "x"\npath = "{escaped}"\n')
    copy = tmp_path / "copy"
    copy.mkdir()
    assert deps.make_clean_copy(root, copy) == 4
    for name in ("", "a", "a/inner", "b"):
        assert (copy / name / "Cargo.toml").read_bytes() == (root / name / "Cargo.toml").read_bytes()
    assert (copy / "Cargo.lock").read_bytes() == (root / "Cargo.lock").read_bytes()
    assert not (tmp_path / "outside.rs").exists() and not Path("/tmp/abs-outside.rs").exists()
    assert (copy / "b" / "src" / "main.rs").is_file()  # control: the implied targets are placed


def test_the_lockfile_advice_never_runs_host_cargo_on_the_tree() -> None:
    text = LockfileWouldBeWritten(Path("/t/tree"), "needs to be updated").guidance().render_text()
    assert "commit an up-to-date Cargo.lock" in text
    assert "generate-lockfile" not in text and "cargo update" not in text
    for line in text.splitlines():
        if "cargo " in line and "pylint-sandbox" not in line:
            assert not line.strip().startswith(("$", "cd ", "cargo")), line


@pytest.mark.parametrize("declared", ['{ git = "file:///etc/private-repo" }', '{ git = "ssh://git@internal/x" }',
                                      '{ version = "1", registry-index = "file:///srv/index" }'])
@pytest.mark.parametrize("table", ["dependencies", "target.'cfg(unix)'.build-dependencies",
                                   "workspace.dependencies", "patch.crates-io"])
def test_a_manifest_declaring_a_source_other_than_https_is_refused_before_cargo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, table: str, declared: str) -> None:
    """cargo fetch --locked resolves declared sources before it compares with the lockfile."""
    from roteiro_py.errors import FetchFailed

    root = workspace(tmp_path, "a")
    manifest = root / "a" / "Cargo.toml"
    manifest.write_text(manifest.read_text() + f"[{table}]\nsneaky = {declared}\n")
    monkeypatch.setenv("PATH", "/nonexistent")  # cargo is never even looked for
    with pytest.raises(FetchFailed) as caught:
        deps.fetch_deps(root)
    text = caught.value.guidance().render_text()
    assert "Refused before cargo ran" in text and "Cargo said" not in text
    assert declared.split('"')[-2] in text and "a/Cargo.toml" in text


def test_https_sources_in_manifests_are_not_refused() -> None:
    """Control arm: what fetch-deps does fetch is not caught by the refusal."""
    assert deps.unsafe_manifest_sources({"dependencies": {
        "x": {"git": "https://github.com/a/b"}, "y": "1", "z": {"path": "../z"}}}) == []
    assert deps.unsafe_manifest_sources({"dependencies": {"x": {"git": 7}}}) == ["git = 7"]


def test_an_oversized_lockfile_is_refused_naming_the_bound(tmp_path: Path) -> None:
    lock = tmp_path / "Cargo.lock"
    with lock.open("wb") as out:
        out.write(b'version = 4\n')
        out.truncate(deps.LOCKFILE_MAX_BYTES + 1)  # sparse: no 16 MiB written
    for parse in (deps.unsafe_sources, cargo_view.pins):
        with pytest.raises(TreeFileRefused) as caught:
            parse(lock)
        assert f"larger than {deps.LOCKFILE_MAX_BYTES} bytes" in refusal_text(caught)
    lock.write_text('version = 4\n[[package]]\nname = "a"\nversion = "0.1.0"\n')
    assert cargo_view.pins(lock) == []  # control: the same file, within the bound


_UNUSED_PATCH = ('\n[[patch.unused]]\nname = "privcrate"\nversion = "0.1.0"\n'
                 'source = "{}#2fcedca101685667c80995a10cefc3dad2c78566"\n')


def test_an_unused_patch_in_the_lockfile_is_refused_before_cargo(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A `[patch]` no package uses is written to Cargo.lock as `[[patch.unused]]` with its
    source, and host `cargo fetch --locked` clones it: a `git+file://` there copied a host
    repository into the cache. Every source in the lockfile is checked, not only packages'."""
    from roteiro_py.errors import FetchFailed

    root = workspace(tmp_path, "a")
    lock = root / "Cargo.lock"
    base = lock.read_text()
    # control arm: an https unused patch is what fetch-deps may fetch, and is not refused
    lock.write_text(base + _UNUSED_PATCH.format("git+https://github.com/a/privcrate"))
    assert deps.unsafe_sources(lock) == []
    lock.write_text(base + _UNUSED_PATCH.format("git+file:///home/user/private"))
    assert deps.unsafe_sources(lock) == ["git+file:///home/user/private#2fcedca101685667c80995a10cefc3dad2c78566"]
    monkeypatch.setenv("PATH", "/nonexistent")  # cargo is never even looked for
    with pytest.raises(FetchFailed) as caught:
        deps.fetch_deps(root)
    text = caught.value.guidance().render_text()
    assert "git+file:///home/user/private" in text and "Cargo said" not in text
