"""`image build --from-dist SPEC` and `--toolchain-file FILE`: the image's toolchain from
Rust's distribution, end to end on this host. The distribution is the loopback stand-in
of test_rust_dist.py (its packages, its manifest signed by the test's release key, pinned
for the test); the Debian root comes from the local signed archive of test_build.py.
Proves: the command builds and provisions from the verified toolchain; a second build
of the same manifest is the same pin and comes from the cache, with nothing downloaded
but the manifest and its signature (a changed package hash is a new build); the pin a tree's
rust-toolchain.toml names is what is fetched (its targets too); a tampered manifest is
refused with nothing provisioned, even with the image of the good one cached; an undated
channel's stale manifest is refused with nothing provisioned, even with its image cached,
while the same manifest named by its date builds (or is the cached image); the date a build
accepted is recorded whether it downloaded or was the cached image; and the three ways of
naming a toolchain exclude one another."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from roteiro_py import errors
from roteiro_py.commands.image import run_image_build
from roteiro_py.errors import UsageError
from roteiro_py.image import rust_dist, toolchain
from roteiro_py.paths import cache_root, store_root
from roteiro_py.reference import parse_pinned
from roteiro_py.store import Store
from roteiro_py.vm.assets import openpgp
from tests.unit.gpg_support import Gpg, make_gpg
from tests.unit.image import test_build as debian
from tests.unit.image import test_rust_dist as rustdist


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Gpg]:
    yield from make_gpg(tmp_path_factory.mktemp("release-gnupg"))


@pytest.fixture
def served(release: Gpg, dist: rustdist.Dist, monkeypatch: pytest.MonkeyPatch) -> rustdist.Dist:
    keys = openpgp.load_keyring(release.run("--export", rustdist.RELEASE), [release.fingerprint(rustdist.RELEASE)])
    monkeypatch.setattr(rust_dist, "pinned_keys", lambda: keys)
    return dist


@pytest.fixture
def options(gpg: debian.archive_support.Gpg, pinned: None, tmp_path: Path, roteiro_home: Path,
            served: rustdist.Dist, monkeypatch: pytest.MonkeyPatch) -> dict[str, object]:
    archive = debian.make_archive(gpg, tmp_path / "archive", debian.PACKAGES)
    (roteiro_home / "config.toml").write_text(f'[vm]\ndebian_archive = "{archive}"\ndebian_security_archive = ""\n')
    monkeypatch.setenv(rust_dist.SERVER_ENV, served.url)
    monkeypatch.setenv("RUSTUP_HOME", str(tmp_path / "no-rustup"))  # no host toolchain is used
    return {"toolchain_name": None, "output": None, "with_clippy": True, "with_gcc": True, "archive": None,
            "suite": None, "security_archive": None, "force": False, "path": tmp_path}


gpg = debian.gpg
pinned = debian.pinned
dist = rustdist.dist


def test_a_toolchain_from_rusts_distribution_is_built_provisioned_and_cached(
        options: dict[str, object], served: rustdist.Dist, release: Gpg,
        capsys: pytest.CaptureFixture[str]) -> None:
    served.publish(release)
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    reference = out.strip()
    assert reference.startswith(f"localhost/roteiro/clippy:{rustdist.VERSION}@sha256:"), err
    assert Store.default().is_present(parse_pinned(reference))
    assert served.asked[:2] == [f"dist/channel-rust-{rustdist.VERSION}.toml",
                                f"dist/channel-rust-{rustdist.VERSION}.toml.asc"]
    # again: the same manifest, the same pin, the image from the cache of built images
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    again, err = capsys.readouterr()
    assert again.strip() == reference and "unchanged inputs" in err


MANIFEST = f"dist/channel-rust-{rustdist.VERSION}.toml"


def as_a_ci_job_restores_it() -> None:
    """What a CI job has of an earlier job's ROTEIRO_HOME: the action and the GitLab
    template cache the store, cache/rootfs and cache/images (action.yml, ci/gitlab/cache.sh),
    never cache/rust-dist, the packages a build downloaded (hundreds of MB for a real
    toolchain, the images cache's size again)."""
    shutil.rmtree(cache_root() / "rust-dist")


def test_a_second_build_of_the_same_manifest_downloads_only_the_manifest(
        options: dict[str, object], served: rustdist.Dist, release: Gpg,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The image's cache key was read from the toolchain's unpacked files, so every build
    downloaded and unpacked every package before it could look in the cache: each CI job
    of `image: build` fetched the whole toolchain with its image cache restored. The key
    is now what the verified manifest pins (its bytes, so each package's URL and sha256,
    and which packages were chosen): a build of the same manifest asks the server for the
    manifest and its signature, nothing else. Controls: a manifest pinning a new build of
    clippy is another key, and its packages are downloaded; so is one more target."""
    served.publish(release)
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    reference = capsys.readouterr().out.strip()
    packages = sorted(served.asked[2:])  # rustc, cargo, rust-std and clippy for the host
    assert len(packages) == 4
    as_a_ci_job_restores_it()
    served.asked.clear()
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    again, err = capsys.readouterr()
    assert again.strip() == reference and "unchanged inputs" in err
    assert served.asked == [MANIFEST, f"{MANIFEST}.asc"]
    # nothing downloaded, nothing unpacked (and a release has no date floor to record)
    assert not (cache_root() / "rust-dist").exists()
    # control: one package's hash changed in the signed manifest: a miss, the packages downloaded
    clippy = rustdist.installer("clippy", rustdist.HOST, {"clippy-preview": {
        "bin/cargo-clippy": b"#!cargo-clippy 2\n", "bin/clippy-driver": b"#!clippy-driver 2\n"}})
    served.publish(release, other={("clippy-preview", rustdist.HOST): clippy})
    served.asked.clear()
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    changed, err = capsys.readouterr()
    assert changed.strip() != reference and "unchanged inputs" not in err
    assert served.asked[:2] == [MANIFEST, f"{MANIFEST}.asc"] and sorted(served.asked[2:]) == packages
    # and the same manifest with one more target: a miss, its rust-std downloaded
    assert run_image_build(**options, from_dist=rustdist.VERSION, targets=(rustdist.ARM,)) == 0  # type: ignore[arg-type]
    target, err = capsys.readouterr()
    assert target.strip() not in (reference, changed.strip()) and "unchanged inputs" not in err
    assert f"dist/{rustdist.DATE}/rust-std-{rustdist.VERSION}-{rustdist.ARM}.tar.xz" in served.asked


def test_a_tampered_manifest_provisions_nothing_with_the_image_cached(
        options: dict[str, object], served: rustdist.Dist, release: Gpg) -> None:
    """The cache is looked in only after the manifest verified: a manifest altered after
    signing is refused as on a first build, though the image of the bytes it was signed as
    is built and cached. Control: the same build with the manifest intact provisions."""
    served.publish(release)
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    shutil.rmtree(store_root())
    served.publish(release, tamper=True)
    with pytest.raises(errors.ToolchainRefused, match="does not verify"):
        run_image_build(**options, from_dist=rustdist.VERSION)  # type: ignore[arg-type]
    assert Store.default().references() == []
    served.publish(release)
    assert run_image_build(**options, from_dist=rustdist.VERSION) == 0  # type: ignore[arg-type]
    assert len(Store.default().references()) == 1


def test_the_toolchain_file_of_a_tree_is_what_is_fetched(
        options: dict[str, object], served: rustdist.Dist, release: Gpg, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    served.publish(release)
    pin = tmp_path / "tree" / "rust-toolchain.toml"
    pin.parent.mkdir()
    pin.write_text(f'[toolchain]\nchannel = "{rustdist.VERSION}"\ntargets = ["{rustdist.ARM}"]\n')
    assert run_image_build(**options, toolchain_file_path=pin) == 0  # type: ignore[arg-type]
    assert capsys.readouterr().out.strip().startswith(f"localhost/roteiro/clippy:{rustdist.VERSION}@sha256:")
    assert f"dist/{rustdist.DATE}/rust-std-{rustdist.VERSION}-{rustdist.ARM}.tar.xz" in served.asked


def test_a_tampered_manifest_provisions_nothing(
        options: dict[str, object], served: rustdist.Dist, release: Gpg) -> None:
    served.publish(release, tamper=True)
    with pytest.raises(errors.ToolchainRefused, match="does not verify"):
        run_image_build(**options, from_dist=rustdist.VERSION)  # type: ignore[arg-type]
    assert Store.default().references() == []


@pytest.mark.parametrize("chosen", [{"toolchain_name": "1.95.0", "from_dist": "1.95.0"},
                                    {"from_dist": "stable", "toolchain_file_path": Path("rust-toolchain.toml")}])
def test_one_way_of_naming_the_toolchain_at_a_time(options: dict[str, object], chosen: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="each choose the toolchain"):
        run_image_build(**{**options, **chosen})  # type: ignore[arg-type]


def test_targets_need_a_toolchain_from_the_distribution(options: dict[str, object]) -> None:
    with pytest.raises(UsageError, match="--target and --component go with"):
        run_image_build(**options, targets=("aarch64-unknown-linux-gnu",))  # type: ignore[arg-type]


def test_a_fetched_toolchain_that_cannot_make_a_layer_is_not_called_a_rustup_toolchain(
        options: dict[str, object], served: rustdist.Dist, release: Gpg,
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A toolchain fetched from Rust's distribution that lacks a binary (here one the
    layer is made to want) was refused as "the rustup toolchain 1.95.0" with `rustup
    toolchain install` to run: rustup has nothing to do with it. The refusal names the
    toolchain from Rust's distribution and suggests no rustup command."""
    served.publish(release)
    monkeypatch.setattr(toolchain, "BINARIES", (*toolchain.BINARIES, "rust-analyzer"))
    with pytest.raises(errors.ImageBuildRefused) as refused:
        run_image_build(**options, from_dist=rustdist.VERSION)  # type: ignore[arg-type]
    assert "rust-analyzer" in refused.value.reason
    assert "rustup" not in refused.value.what and not any("rustup" in c for c in refused.value.commands)
    assert "Rust's distribution" in refused.value.what


def test_an_undated_toolchain_file_served_a_stale_manifest_provisions_nothing_and_a_dated_one_builds(
        options: dict[str, object], served: rustdist.Dist, release: Gpg, tmp_path: Path,
        roteiro_home: Path) -> None:
    """`channel = "stable"` served a stable manifest older than stable's maximum age: refused
    before any package, nothing provisioned, the way forward naming the dated pin; that pin
    in the file builds, and the date it accepted is recorded where the command keeps the
    floor ($ROTEIRO_HOME/cache/rust-dist)."""
    now = time.time()
    old = rustdist.day(now, rust_dist.MAX_AGE_DAYS["stable"] + 30)
    served.publish(release, date=old, at="dist/channel-rust-stable.toml")
    rustdist.serve_as(served, f"dist/{old}/channel-rust-stable.toml", "dist/channel-rust-stable.toml")
    pin = tmp_path / "tree" / "rust-toolchain.toml"
    pin.parent.mkdir()
    pin.write_text('[toolchain]\nchannel = "stable"\n')
    with pytest.raises(errors.ToolchainStale) as refused:
        run_image_build(**options, toolchain_file_path=pin)  # type: ignore[arg-type]
    assert f'`channel = "stable-{old}"` in rust-toolchain.toml' in refused.value.guidance().render_text()
    assert Store.default().references() == []
    record = roteiro_home / "cache" / "rust-dist" / rust_dist.FLOOR_RECORD
    assert not record.exists()
    pin.write_text(f'[toolchain]\nchannel = "stable-{old}"\n')
    assert run_image_build(**options, toolchain_file_path=pin) == 0  # type: ignore[arg-type]
    assert len(Store.default().references()) == 1
    assert json.loads(record.read_text())["channels"]["stable"]["date"] == old


STABLE = "dist/channel-rust-stable.toml"


def test_a_stale_manifest_provisions_nothing_with_its_own_image_cached(
        options: dict[str, object], served: rustdist.Dist, release: Gpg,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The date floor is checked with the signature, before the cache of built images is
    looked in: an undated stable manifest older than one this host accepted is refused
    though the image of that very manifest is built and cached (a replay must not be
    served from the cache any more than from the network). Control: the same manifest
    named by its date is that cached image, with nothing downloaded but the manifest."""
    now = time.time()
    older, newer = rustdist.day(now, 10), rustdist.day(now, 3)
    served.publish(release, date=older, at=STABLE)
    assert run_image_build(**options, from_dist="stable") == 0  # type: ignore[arg-type]
    reference = capsys.readouterr().out.strip()
    first = dict(served.files)  # a publication's bytes are its own (a .gz names when it was made)
    # a newer stable accepted by another build (without gcc: another tag, so another layout,
    # and the first stays cached: the cache holds one layout per tag)
    served.publish(release, date=newer, at=STABLE)
    assert run_image_build(**{**options, "with_gcc": False}, from_dist="stable") == 0  # type: ignore[arg-type]
    shutil.rmtree(store_root())
    served.files.update(first)  # the first manifest (and its packages), replayed
    served.asked.clear()
    with pytest.raises(errors.ToolchainStale, match=f"of {older}, older than {newer}, the newest stable"):
        run_image_build(**options, from_dist="stable")  # type: ignore[arg-type]
    assert served.asked == [STABLE, f"{STABLE}.asc"]
    assert Store.default().references() == []
    dated = f"dist/{older}/channel-rust-stable.toml"
    rustdist.serve_as(served, dated, STABLE)
    served.asked.clear()
    capsys.readouterr()
    assert run_image_build(**options, from_dist=f"stable-{older}") == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out.strip() == reference and "unchanged inputs" in err  # it was cached all along
    assert served.asked == [dated, f"{dated}.asc"]


def test_a_build_from_its_cached_image_records_the_date_it_accepted(
        options: dict[str, object], served: rustdist.Dist, release: Gpg, roteiro_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """A build that finds its image cached downloads no package, but it did accept and use
    the manifest: its date is the channel's floor as if the toolchain had been installed.
    A CI job restores cache/images, never cache/rust-dist where the record lives: without
    this, its next build took an older manifest within stable's maximum age. The record's
    directory is made for it though nothing was downloaded."""
    now = time.time()
    served.publish(release, date=rustdist.day(now, 3), at=STABLE)
    assert run_image_build(**options, from_dist="stable") == 0  # type: ignore[arg-type]
    as_a_ci_job_restores_it()
    served.asked.clear()
    assert run_image_build(**options, from_dist="stable") == 0  # type: ignore[arg-type]
    assert "unchanged inputs" in capsys.readouterr().err and served.asked == [STABLE, f"{STABLE}.asc"]
    downloads = roteiro_home / "cache" / "rust-dist"
    assert json.loads((downloads / rust_dist.FLOOR_RECORD).read_text())["channels"]["stable"] == {
        "date": rustdist.day(now, 3), "server": served.url}
    assert {p.name for p in downloads.iterdir()} <= {rust_dist.FLOOR_RECORD, rust_dist.FLOOR_RECORD + ".lock"}
    served.publish(release, date=rustdist.day(now, 10), at=STABLE)
    with pytest.raises(errors.ToolchainStale, match=f"older than {rustdist.day(now, 3)}, the newest stable"):
        run_image_build(**options, from_dist="stable")  # type: ignore[arg-type]


def test_a_floor_record_that_cannot_be_written_is_a_warning_and_the_build_completes(
        options: dict[str, object], served: rustdist.Dist, release: Gpg, roteiro_home: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    """The toolchain was verified and accepted before its date is recorded; the record only
    raises the floor for later builds. With channels.json a directory the write raised
    IsADirectoryError out of the build (exit 4, "a bug"): now the build completes and says,
    on stderr, which record was not written and that removing it is the way forward."""
    now = time.time()
    served.publish(release, date=rustdist.day(now, 3), at=STABLE)
    record = roteiro_home / "cache" / "rust-dist" / rust_dist.FLOOR_RECORD
    record.mkdir(parents=True)
    assert run_image_build(**options, from_dist="stable") == 0  # type: ignore[arg-type]
    out, err = capsys.readouterr()
    assert out.strip().startswith("localhost/roteiro/clippy:")
    assert f"the date floor of stable ({rustdist.day(now, 3)}) was not recorded in {record}" in err
    assert f"remove {record}" in err
    # control: with the directory gone, the same (cached) build records the floor, silently
    record.rmdir()
    assert run_image_build(**options, from_dist="stable") == 0  # type: ignore[arg-type]
    assert "not recorded" not in capsys.readouterr().err
    assert json.loads(record.read_text())["channels"]["stable"]["date"] == rustdist.day(now, 3)
