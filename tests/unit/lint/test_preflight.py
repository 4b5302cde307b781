"""lint/preflight.py check_selection: a `--package` or `--features` value that the tree's
own Cargo.lock and manifests (read as data) show cargo would refuse is exit 2 naming it,
before the hypervisor probe; what only cargo can decide (a glob, a dependency's
features) reaches it. Lockfiles are written by real cargo 1.95 (`generate-lockfile
--offline`) on the fixtures built here, never on a user's tree."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from roteiro_py import lint
from roteiro_py.cargo.workspace import workspace_members
from roteiro_py.errors import (
    EXIT_USAGE,
    LISTED_NAMES,
    SandboxUnavailable,
    UnknownFeature,
    UnknownPackage,
    UsageError,
)
from roteiro_py.lint.preflight import manifest_directory
from roteiro_py.vm.api import Isolation

PIN = "localhost/x/clippy@sha256:" + "c" * 64
DEMO = Path(__file__).resolve().parents[3] / "examples" / "demo-workspace"


def package(directory: Path, name: str, body: str = "") -> None:
    (directory / "src").mkdir(parents=True)
    (directory / "src" / "lib.rs").write_text("")
    (directory / "Cargo.toml").write_text(
        f'[package]\nname = "{name}"\nversion = "0.1.0"\nedition = "2021"\n{body}')


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A virtual workspace: `app` (features `fast`, implicit `extra` from an optional
    dependency, `hidden` hidden by `dep:`, a path dependency `outside` that is no member),
    and `core` (feature `slow`), locked by real cargo."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text('[workspace]\nmembers = ["crates/*"]\nresolver = "2"\n')
    package(root / "crates" / "app", "app",
            '[features]\nfast = []\nwith-hidden = ["dep:hidden"]\n[dependencies]\n'
            'core = { path = "../core" }\nextra = { path = "../../../extra", optional = true }\n'
            'hidden = { path = "../../../hidden", optional = true }\n'
            'outside = { path = "../../../outside" }\n')
    package(root / "crates" / "core", "core", "[features]\nslow = []\n")
    for name in ("extra", "hidden", "outside"):
        package(tmp_path / name, name)
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=root, check=True)
    return root


def request(path: Path, **flags: object) -> lint.LintRequest:
    chosen = {"lint.image": (PIN, "--image"), "vm.accel": ("tcg", "--accel")}
    chosen |= {f"lint.{key}": (value, key) for key, value in flags.items()}
    return lint.LintRequest(path=path, flags=chosen)


@pytest.fixture
def probes(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The hypervisor probe, recording that the run reached it and refusing there (a fake
    only to mark the place: the real probe boots QEMU, tests/integration)."""
    calls: list[str] = []

    class Backend:
        def __init__(self, options: object) -> None:
            pass

        def isolation(self) -> Isolation:
            calls.append("probe")
            raise SandboxUnavailable("stopped at the probe", accel="tcg")

    monkeypatch.setattr("roteiro_py.vm.BACKENDS", {"qemu": Backend})
    return calls


def refused(path: Path, error: type[UsageError], **flags: object) -> UsageError:
    with pytest.raises(error) as caught:
        lint.lint(request(path, **flags))
    assert caught.value.exit_code == EXIT_USAGE
    return caught.value


def reaches_the_probe(path: Path, probes: list[str], **flags: object) -> None:
    before = len(probes)
    with pytest.raises(SandboxUnavailable):
        lint.lint(request(path, **flags))
    assert len(probes) == before + 1


def test_an_unknown_package_is_exit_2_naming_it_before_the_probe(tree: Path, probes: list[str]) -> None:
    text = refused(tree, UnknownPackage, packages=["nope-7"]).guidance().render_text()
    assert probes == []
    assert "--package nope-7: no package of that name" in text
    assert "app, core, extra, hidden, outside" in text and "--workspace" in text
    # control: a member, a path dependency that is no member, and an optional one reach
    # the probe (cargo there judges whether the optional one is active)
    for name in ("core", "outside", "hidden"):
        reaches_the_probe(tree, probes, packages=[name])


def test_a_glob_or_a_spec_is_left_to_cargo(tree: Path, probes: list[str]) -> None:
    reaches_the_probe(tree, probes, packages=["zz*"])
    reaches_the_probe(tree, probes, packages=["nope@1.0.0"])


def test_the_package_a_path_names_is_checked_like_one_given(tree: Path, probes: list[str]) -> None:
    text = refused(tree / "crates" / "app", UnknownFeature, features=["slow"]).guidance().render_text()
    assert "--features slow: the package app has no such feature." in text
    assert "Features defined: extra, fast, with-hidden." in text
    reaches_the_probe(tree / "crates" / "core", probes, features=["slow"])


def test_an_unknown_feature_is_exit_2_naming_it_before_the_probe(tree: Path, probes: list[str]) -> None:
    text = refused(tree, UnknownFeature, features=["fast,nope-3"]).guidance().render_text()
    assert probes == []
    assert "--features nope-3: none of the selected packages (app, core) has that feature." in text
    assert "Features defined: extra, fast, slow, with-hidden." in text and "--all-features" in text
    # control: one feature of each member, and the optional dependency's implicit one
    reaches_the_probe(tree, probes, features=["fast slow", "extra"])
    reaches_the_probe(tree, probes, features=["nope-3"], packages=["outside"])  # a dependency's: cargo's


def test_an_optional_dependency_hidden_by_dep_is_no_feature(tree: Path, probes: list[str]) -> None:
    text = refused(tree, UnknownFeature, features=["hidden"], packages=["app"]).guidance().render_text()
    assert "--features hidden: the package app has no such feature." in text
    assert "Features defined: extra, fast, with-hidden." in text
    reaches_the_probe(tree, probes, features=["with-hidden"], packages=["app"])


def test_package_slash_feature(tree: Path, probes: list[str]) -> None:
    """`pkg/feat` is refused for a selected member without it; a dependency's is cargo's."""
    refused(tree, UnknownFeature, features=["core/nope"], workspace=True)
    reaches_the_probe(tree, probes, features=["core/slow"], workspace=True)
    reaches_the_probe(tree, probes, features=["core/nope"], packages=["app"])  # cargo resolves it


def test_the_demo_workspace_members_and_features(probes: list[str]) -> None:
    members = workspace_members(DEMO)
    assert members is not None and sorted(members.all) == ["demo-app", "demo-core"]
    assert sorted(members.default) == ["demo-app", "demo-core"]
    refused(DEMO, UnknownPackage, packages=["demo"])
    reaches_the_probe(DEMO, probes, packages=["demo-app"])


def test_a_long_list_is_bounded(tmp_path: Path) -> None:
    names = [f"p{index:02}" for index in range(LISTED_NAMES + 5)]
    error = UnknownPackage("zz", tmp_path, names)
    assert f"p{LISTED_NAMES - 1:02} and 5 more" in error.guidance().render_text()
    assert f"p{LISTED_NAMES:02}" not in error.guidance().render_text()


def test_a_members_entry_leaving_the_workspace_is_undecided(tree: Path, probes: list[str]) -> None:
    (tree / "Cargo.toml").write_text('[workspace]\nmembers = ["crates/*", "../extra"]\n')
    assert workspace_members(tree) is None
    reaches_the_probe(tree, probes, features=["nope"])


def test_manifest_path(tmp_path: Path) -> None:
    manifest = tmp_path / "Cargo.toml"
    manifest.write_text("")
    assert manifest_directory(manifest, Path(".")) == tmp_path
    assert manifest_directory(None, Path("x")) == Path("x")
    with pytest.raises(UsageError, match="both say what to lint"):
        manifest_directory(manifest, Path("elsewhere"))
    other = tmp_path / "other.toml"
    other.write_text("")
    with pytest.raises(UsageError, match="is not a file named Cargo.toml"):
        manifest_directory(other, Path("."))
    with pytest.raises(UsageError, match="does not exist"):
        manifest_directory(tmp_path / "gone" / "Cargo.toml", Path("."))


def test_a_member_manifest_that_is_a_link_leaves_it_to_cargo(tree: Path, tmp_path: Path,
                                                             probes: list[str]) -> None:
    """The manifests are read through the one door (no link, bounded): a member whose
    Cargo.toml is a link to a host file is not read, and nothing is judged from it."""
    host = tmp_path / "host-secret.toml"
    host.write_text('[package]\nname = "HOST-SECRET"\nversion = "0.1.0"\n[features]\nnope = []\n')
    assert workspace_members(tree) is not None  # control: read when it is a file
    manifest = tree / "crates" / "core" / "Cargo.toml"
    manifest.unlink()
    manifest.symlink_to(host)
    assert workspace_members(tree) is None
    reaches_the_probe(tree, probes, features=["nope-8"])


@pytest.mark.parametrize("resolver", ["", 'resolver = "1"\n'])
def test_features_under_resolver_1_are_cargos_to_judge(tmp_path: Path, probes: list[str],
                                                        resolver: str) -> None:
    """Resolver 1 (a root package of edition 2015/2018 without `resolver = "2"`, or a
    virtual workspace without it) gives --features to the package of the current
    directory, whatever -p selects: real cargo 1.95 builds `-p bar --features foofeat` in
    foo's directory, and refuses `barfeat`. Judged by the selected package's features, it
    was refused as UnknownFeature: a refusal of what cargo accepts."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text(
        '[package]\nname = "foo"\nversion = "0.1.0"\nedition = "2018"\n[features]\nfoofeat = []\n'
        f'[workspace]\nmembers = ["bar"]\n{resolver}')
    package(root / "bar", "bar", "[features]\nbarfeat = []\n")
    (root / "bar" / "Cargo.toml").write_text(
        (root / "bar" / "Cargo.toml").read_text().replace('edition = "2021"', 'edition = "2018"'))
    (root / "src").mkdir()
    (root / "src" / "lib.rs").write_text("")
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=root, check=True)
    reaches_the_probe(root, probes, features=["foofeat"], packages=["bar"])
    # control: with resolver 2 the same request is refused here, as cargo refuses it
    text = (root / "Cargo.toml").read_text().replace(resolver, "")
    (root / "Cargo.toml").write_text(text.replace("[workspace]\n", '[workspace]\nresolver = "2"\n'))
    refused(root, UnknownFeature, features=["foofeat"], packages=["bar"])


def test_an_explicit_member_is_not_excluded_by_a_path_it_lies_under(tmp_path: Path, probes: list[str]) -> None:
    """cargo's rule (Workspace::find_path_deps, WorkspaceRootConfig::is_excluded): a path
    under an `exclude` entry is no member unless it lies under an explicit `members`
    entry, so `tools/sub` (a path dependency of the member `tools`) stays a member though
    `exclude` names it; real cargo 1.95 accepts `--workspace --features subfeat` here."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text('[workspace]\nmembers = ["tools"]\nexclude = ["tools/sub"]\nresolver = "2"\n')
    package(root / "tools", "tools", '[dependencies]\nsub = { path = "sub" }\n')
    package(root / "tools" / "sub", "sub", "[features]\nsubfeat = []\n")
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=root, check=True)
    members = workspace_members(root)
    assert members is not None and sorted(members.all) == ["sub", "tools"]  # cargo metadata's
    reaches_the_probe(root, probes, features=["subfeat"], workspace=True)
    refused(root, UnknownFeature, features=["nope"], workspace=True)  # control


def test_package_slash_feature_through_a_renamed_dependency_is_cargos(tmp_path: Path, probes: list[str]) -> None:
    """`a/feat` names the dependency `a` of any selected member before the member `a`
    (cargo's collect_matching_features): here `b`'s dependency keyed `a` is the package
    `x`, which has `feat`, and real cargo 1.95 accepts `-p a -p b --features a/feat`."""
    root = tmp_path / "ws"
    root.mkdir()
    (root / "Cargo.toml").write_text('[workspace]\nmembers = ["a", "b", "x"]\nresolver = "2"\n')
    package(root / "a", "a")
    package(root / "x", "x", "[features]\nfeat = []\n")
    package(root / "b", "b", '[dependencies]\na = { package = "x", path = "../x" }\n')
    subprocess.run(["cargo", "generate-lockfile", "--offline", "-q"], cwd=root, check=True)
    reaches_the_probe(root, probes, features=["a/feat"], packages=["a", "b"])
    refused(root, UnknownFeature, features=["a/feat"], packages=["a"])  # control: cargo refuses this one
