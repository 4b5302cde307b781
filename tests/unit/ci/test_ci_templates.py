"""action.yml and the GitLab template, read as their runners read them (YAML), hold to what
their headers promise: every input documented and used, every shell step one script of
ci/ that exists, no `${{ }}` expression spliced into a `run:` (GitHub's script-injection
pitfall: the runner substitutes it into the shell text before bash reads it), inputs
reaching the scripts only as environment variables with the names the scripts read, only
pinned major versions of other actions, and caches of exactly the directories the tool
keeps its state in. Each check is a function returning what is wrong, and each is shown
to catch the fault it is for on a broken copy (the control arm)."""

from __future__ import annotations

import copy
import os
import re
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]

from roteiro_py import paths
from roteiro_py.cargo import store as cargo_store
from roteiro_py.depcache import store as depcache_store
from roteiro_py.image import build as image_build
from roteiro_py.vocabulary import ACCELS

ROOT = Path(__file__).resolve().parents[3]
ACTION = ROOT / "action.yml"
GITLAB = ROOT / "ci" / "gitlab" / "pylint-sandbox.gitlab-ci.yml"
#: A `run:` is exactly this: one script of ci/github, run by bash from the action's checkout.
RUN_LINE = re.compile(r'bash "\$GITHUB_ACTION_PATH/(ci/github/[a-z-]+\.sh)"')
#: `owner/repo@vN` or `owner/repo/path@vN`: a major version tag, nothing floating.
PINNED = re.compile(r"[A-Za-z0-9-]+/[A-Za-z0-9._-]+(/[A-Za-z0-9._/-]+)?@v\d+")
INPUT_VAR = re.compile(r"\bINPUT_[A-Z_]+\b")


def load(path: Path) -> dict[str, Any]:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict)
    return data


def steps(action: dict[str, Any]) -> list[dict[str, Any]]:
    found = action["runs"]["steps"]
    assert isinstance(found, list)
    return found


def step(action: dict[str, Any], step_id: str) -> dict[str, Any]:
    return next(s for s in steps(action) if s.get("id") == step_id)


def env_name(input_name: str) -> str:
    return "INPUT_" + input_name.upper().replace("-", "_")


# -- the checks ----------------------------------------------------------------------------


def strings(value: object) -> list[str]:
    """Every string in a parsed YAML document, keys and values."""
    if isinstance(value, str):
        return [value]
    if isinstance(value, dict):
        return [s for k, v in value.items() for s in strings(k) + strings(v)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return []


def input_problems(action: dict[str, Any]) -> list[str]:
    """Inputs without a description or default, and inputs no step uses."""
    problems = []
    text = "\n".join(strings(action["runs"]))
    for name, spec in action["inputs"].items():
        if not str(spec.get("description", "")).strip():
            problems.append(f"{name}: no description")
        if not isinstance(spec.get("default"), str):
            problems.append(f"{name}: no default")
        if f"inputs.{name} }}}}" not in text:
            problems.append(f"{name}: used by no step")
    return problems


def run_problems(action: dict[str, Any]) -> list[str]:
    """Shell steps that are not one existing script of ci/github, or that splice an expression."""
    problems = []
    for step in steps(action):
        if "run" not in step:
            continue
        run = step["run"]
        if "${{" in run:
            problems.append(f"{step.get('name')}: an expression inside run: {run!r}")
        match = RUN_LINE.fullmatch(run.strip())
        if match is None:
            problems.append(f"{step.get('name')}: run is not one script: {run!r}")
        elif not (ROOT / match.group(1)).is_file():
            problems.append(f"{step.get('name')}: {match.group(1)} does not exist")
        if step.get("shell") != "bash":
            problems.append(f"{step.get('name')}: shell is not bash")
    return problems


def env_problems(action: dict[str, Any]) -> list[str]:
    """Each INPUT_* a step's script (with ci/common.sh) reads must be in that step's env,
    and each INPUT_* there must be exactly `${{ inputs.<its input> }}`."""
    problems = []
    common = (ROOT / "ci" / "common.sh").read_text()
    inputs = action["inputs"]
    for step in steps(action):
        if "run" not in step:
            continue
        match = RUN_LINE.fullmatch(step["run"].strip())
        if match is None:
            continue
        script = (ROOT / match.group(1)).read_text()
        env = step.get("env", {})
        for name in sorted(set(INPUT_VAR.findall(script + common)) - set(env)):
            problems.append(f"{step.get('name')}: {match.group(1)} reads {name}, which its env lacks")
        for key, value in env.items():
            if not key.startswith("INPUT_"):
                continue
            wanted = [f"${{{{ inputs.{n} }}}}" for n in inputs if env_name(n) == key]
            if [value] != wanted:
                problems.append(f"{step.get('name')}: {key} is {value!r}, not {wanted}")
    return problems


def uses_problems(action: dict[str, Any]) -> list[str]:
    return [f"{step.get('name')}: {step['uses']} is not a pinned major version"
            for step in steps(action) if "uses" in step and not PINNED.fullmatch(step["uses"])]


def accel_choices(text: str) -> tuple[str, ...]:
    """The accelerators a description's first sentence offers, each in backquotes
    ("The accelerator, `auto`, `kvm` or `tcg`. ...")."""
    return tuple(re.findall(r"`([a-z]+)`", text.split(". ", 1)[0]))


def accel_problems(action: dict[str, Any]) -> list[str]:
    """The `accel` input offers exactly the accelerators a lint takes (vocabulary.ACCELS:
    issue 23, it still offered `hvf`, which a lint refuses as a usage error), and its
    default is one of them."""
    accel = action["inputs"]["accel"]
    offered = accel_choices(" ".join(accel["description"].split()))
    problems = [] if offered == ACCELS else [
        f"accel: the description offers {offered}, not vocabulary.ACCELS {ACCELS}"]
    if accel["default"] not in ACCELS:
        problems.append(f"accel: the default {accel['default']!r} is not in vocabulary.ACCELS")
    return problems


# -- the action ----------------------------------------------------------------------------


def test_the_action_is_a_composite_whose_checks_pass() -> None:
    action = load(ACTION)
    assert action["runs"]["using"] == "composite"
    assert action["name"] and action["description"]
    assert set(action["inputs"]) == {"path", "image", "fail-on", "category", "sarif", "baseline",
                                     "diff", "accel", "version", "args", "review", "attest"}
    assert {name: action["inputs"][name]["default"] for name in ("path", "fail-on", "category", "sarif",
                                                                  "diff", "accel", "version")} == {
        "path": ".", "fail-on": "warning", "category": "clippy", "sarif": "true", "diff": "auto",
        "accel": "auto", "version": ""}
    assert input_problems(action) == []
    assert run_problems(action) == []
    assert env_problems(action) == []
    assert uses_problems(action) == []
    assert accel_problems(action) == []
    # install, unpack-deps, prepare, lint, keep-image, pack-deps, sarif-skipped, review, finish
    assert sum("run" in step for step in steps(action)) == 9


@pytest.mark.parametrize(("mutate", "check", "expected"), [
    (lambda a: step(a, "install").update(run='bash "$GITHUB_ACTION_PATH/ci/github/install.sh" '
                                              '"${{ inputs.version }}"'),
     run_problems, "an expression inside run"),
    (lambda a: step(a, "install").update(run="pip install pylint-sandbox"), run_problems, "not one script"),
    (lambda a: step(a, "install").update(run='bash "$GITHUB_ACTION_PATH/ci/github/nope.sh"'),
     run_problems, "does not exist"),
    (lambda a: a["inputs"]["path"].update(description=" "), input_problems, "path: no description"),
    (lambda a: a["inputs"].update(unused={"description": "x", "default": ""}), input_problems,
     "unused: used by no step"),
    (lambda a: step(a, "lint")["env"].pop("INPUT_DIFF"), env_problems, "reads INPUT_DIFF, which its env lacks"),
    (lambda a: step(a, "lint")["env"].update(INPUT_PATH="${{ inputs.image }}"), env_problems, "INPUT_PATH is"),
    (lambda a: step(a, "vm-cache").update(uses="actions/cache/restore@main"), uses_problems, "pinned"),
    (lambda a: step(a, "vm-cache").update(uses="actions/cache/restore"), uses_problems, "pinned"),
    (lambda a: a["inputs"]["accel"].update(description="The accelerator, `auto`, `kvm`, `hvf` or `tcg`. x"),
     accel_problems, "not vocabulary.ACCELS"),
    (lambda a: a["inputs"]["accel"].update(description="The accelerator, `auto` or `kvm`. `tcg` is slow."),
     accel_problems, "not vocabulary.ACCELS"),
    (lambda a: a["inputs"]["accel"].update(default="hvf"), accel_problems, "the default 'hvf'"),
])
def test_each_check_catches_its_fault(mutate: Any, check: Any, expected: str) -> None:
    """The control arm: each check, on a copy of action.yml with one fault put in."""
    action = copy.deepcopy(load(ACTION))
    assert check(action) == []
    mutate(action)
    assert any(expected in problem for problem in check(action)), check(action)


def test_the_action_outputs_are_what_the_lint_script_writes() -> None:
    action = load(ACTION)
    script = (ROOT / "ci" / "github" / "lint.sh").read_text()
    written = set(re.findall(r"printf '([a-z-]+)(?:=%s\\n'|<<)", script))  # <<: a multiline output
    assert {"exit-code", "findings", "sarif"} <= set(action["outputs"]) == written
    for name, spec in action["outputs"].items():
        assert spec["value"] == f"${{{{ steps.lint.outputs.{name} }}}}" and spec["description"]


def test_sarif_is_uploaded_only_when_written_and_the_job_fails_last() -> None:
    action = load(ACTION)
    listed = steps(action)
    upload = next(s for s in listed if s.get("uses", "").startswith("github/codeql-action/upload-sarif@"))
    assert upload["if"] == "steps.lint.outputs.sarif != ''"
    assert upload["with"]["sarif_file"] == "${{ steps.lint.outputs.sarif }}"
    lint = step(action, "lint")
    assert lint["continue-on-error"] is True  # so the upload and the cache saves still run
    assert listed[-1]["run"].strip().endswith('/ci/github/finish.sh"')
    assert listed[-1]["env"]["EXIT_CODE"] == "${{ steps.lint.outputs.exit-code }}"
    assert listed.index(lint) < listed.index(upload) < len(listed) - 1
    # a failed upload (a private repository without code scanning) is said, not silent
    skipped = listed[listed.index(upload) + 1]
    assert upload["id"] == "upload-sarif" and skipped["if"] == "steps.upload-sarif.outcome == 'failure'"
    assert skipped["run"].strip().endswith('/ci/github/sarif-skipped.sh"')


def test_attest_hands_the_lints_predicate_and_reports_to_actions_attest() -> None:
    """`attest: true`: the lint step gets the input, and actions/attest (pinned) runs after
    it only when the lint wrote a statement, with the predicate and the report files the
    lint step named, as the SLSA Provenance v1 type the statement has."""
    action = load(ACTION)
    listed = steps(action)
    lint = step(action, "lint")
    attest = step(action, "attest")
    assert lint["env"]["INPUT_ATTEST"] == "${{ inputs.attest }}" and action["inputs"]["attest"]["default"] == "false"
    assert attest["uses"] == "actions/attest@v2" and listed.index(lint) < listed.index(attest)
    assert attest["if"] == "steps.lint.outputs.predicate != ''"
    assert attest["with"] == {"subject-path": "${{ steps.lint.outputs.attest-subjects }}",
                              "predicate-type": "https://slsa.dev/provenance/v1",
                              "predicate-path": "${{ steps.lint.outputs.predicate }}"}
    assert "continue-on-error" not in attest  # asked for and not made: the job fails
    description = " ".join(action["inputs"]["attest"]["description"].split())
    assert "`id-token: write`" in description and "`attestations: write`" in description


def _cached_paths(action: dict[str, Any]) -> dict[str, set[str]]:
    """Each cache's restored and saved paths, by the cache name in its key."""
    found: dict[str, set[str]] = {}
    for step in steps(action):
        uses = step.get("uses", "")
        if uses.startswith("actions/cache/"):
            key = step["with"]["key"]
            name = re.search(r"pylint-sandbox-([a-z]+)", key) or re.search(r"steps\.([a-z]+)-cache", key)
            assert name is not None, key
            path = {line.strip() for line in step["with"]["path"].splitlines() if line.strip()}
            found.setdefault(name.group(1), path)
            assert found[name.group(1)] == path, f"{name.group(1)} restored and saved from different paths"
    return found


def test_the_caches_hold_the_directories_the_tool_keeps_its_state_in(monkeypatch: pytest.MonkeyPatch,
                                                                     tmp_path: Path) -> None:
    """What is cached is where the tool reads it: paths.py and the dependency cache's store,
    asked under a ROTEIRO_HOME of the action's own naming."""
    action = load(ACTION)
    home = "${{ steps.install.outputs.roteiro-home }}"
    monkeypatch.setenv("ROTEIRO_HOME", str(tmp_path))

    def under(path: Path, base: Path, name: str) -> str:
        return f"{name}/{path.relative_to(base)}"

    assert _cached_paths(action) == {
        "image": {under(paths.store_root(), tmp_path, home), f"{home}/cache/rootfs",
                  under(image_build.images_root(), tmp_path, home)},  # image: build's layouts
        "vm": {under(paths.vm_assets_root(), tmp_path, home)},
        "deps": {f"{home}/ci-cache/deps-packed"},  # the dependency caches' sparse archive
        "cargo": {under(cargo_store.packages_root(), tmp_path, home)},  # what fetch-deps fills
    }
    # ... of the directory the dependency caches are kept in, packed after the lint and before
    # the save, unpacked after the restore and before anything reads it, under the save's
    # and the restore's own conditions
    deps = under(depcache_store.cache_dir(), tmp_path, "$home")
    assert f'pack_deps "{deps}" "$home/ci-cache/deps-packed"' in (ROOT / "ci/github/pack-deps.sh").read_text()
    assert f'unpack_deps "$home/ci-cache/deps-packed" "{deps}"' in (ROOT / "ci/github/unpack-deps.sh").read_text()
    named = [s.get("name") for s in steps(action)]
    order = [named.index(n) for n in (
        "Provision, check this runner, fetch dependencies", "Restore the dependency caches",
        "Unpack the dependency caches", "Lint with clippy in a microVM",
        "Pack the dependency caches", "Save the dependency caches")]
    assert order == sorted(order), named
    by_name = {s.get("name"): s for s in steps(action)}
    assert by_name["Unpack the dependency caches"]["if"] == "steps.deps-cache.outputs.cache-hit == 'true'"
    assert by_name["Pack the dependency caches"]["if"] == by_name["Save the dependency caches"]["if"] == (
        "steps.deps-cache.outputs.cache-hit != 'true'")
    rootfs = (ROOT / "roteiro_py" / "vm" / "disks" / "rootfs.py").read_text()
    assert 'cache = paths.cache_root() / "rootfs"' in rootfs
    keys = {step["id"]: step["with"]["key"] for step in steps(action) if step.get("id", "").endswith("-cache")}
    assert "hashFiles('**/Cargo.lock', '**/Cargo.toml', '**/.cargo/config.toml')" in keys["deps-cache"]
    assert "steps.prepare.outputs.image-key" in keys["deps-cache"] and "image-key" in keys["image-cache"]
    assert "hashFiles('**/Cargo.lock')" in keys["cargo-cache"]
    vm_save = next(s for s in steps(action) if s.get("name") == "Save the VM assets")
    assert vm_save["with"]["key"].endswith("${{ steps.prepare.outputs.vm-key }}")


IMAGE_USED = "${{ steps.prepare.outputs.image-key }}"


def image_key_problems(action: dict[str, Any]) -> list[str]:
    """The image and the dependency caches are saved under the image the job used, known
    only after the prepare step (`image: build` makes it there): the image cache's save
    key names prepare's image-key and runs only when the restored cache was not that one
    (as the VM assets'); its restore takes the newest under the install step's key by
    prefix; the dependency caches are restored and unpacked after prepare and before the
    lint, keyed on prepare's image-key; and prepare.sh writes that output."""
    problems = []
    listed = steps(action)
    by_name = {s.get("name"): s for s in listed}
    index = {s.get("id") or s.get("name"): i for i, s in enumerate(listed)}
    restore = step(action, "image-cache")["with"]
    base = "pylint-sandbox-image-${{ runner.os }}-${{ steps.install.outputs.image-key }}"
    if restore.get("key") != base or restore.get("restore-keys") != base + "-":
        problems.append(f"the image restore: key {restore.get('key')!r}, restore-keys {restore.get('restore-keys')!r}")
    save = by_name["Save the image store and root filesystems"]
    wanted = "pylint-sandbox-image-${{ runner.os }}-" + IMAGE_USED
    if save["with"]["key"] != wanted:
        problems.append(f"the image save key is {save['with']['key']!r}, not {wanted!r}")
    condition = ("steps.image-cache.outputs.cache-matched-key != "
                 "format('pylint-sandbox-image-{0}-{1}', runner.os, steps.prepare.outputs.image-key)")
    if save.get("if") != condition:
        problems.append(f"the image save runs if {save.get('if')!r}")
    deps = step(action, "deps-cache")
    if not deps["with"]["key"].startswith("pylint-sandbox-deps-${{ runner.os }}-" + IMAGE_USED + "-"):
        problems.append(f"the dependency caches' key does not name the image used: {deps['with']['key']!r}")
    order = [index[n] for n in ("prepare", "deps-cache", "Unpack the dependency caches", "lint")]
    if order != sorted(order):
        problems.append("the dependency caches are not restored and unpacked between prepare and the lint")
    if "printf 'image-key=%s\\n'" not in (ROOT / "ci" / "github" / "prepare.sh").read_text():
        problems.append("prepare.sh writes no image-key")
    return problems


def test_the_image_and_dependency_caches_are_keyed_on_the_image_the_job_used() -> None:
    """`image: build` from a moving toolchain (the runner's stable, `channel = "stable"`):
    keyed before the build on the toolchain file's bytes, the image cache kept hitting
    after the toolchain moved, so every job built the new image and none saved it, and
    the dependency caches (keyed the same) were rebuilt and never saved either
    (tests/unit/ci/test_ci_scripts.py runs the keys; this is their shape)."""
    action = load(ACTION)
    assert image_key_problems(action) == []
    # control: the keys as they were, each caught
    old = copy.deepcopy(action)
    by_name = {s.get("name"): s for s in steps(old)}
    by_name["Save the image store and root filesystems"].update(
        {"if": "steps.image-cache.outputs.cache-hit != 'true'"},
        **{"with": {**by_name["Save the image store and root filesystems"]["with"],
                    "key": "${{ steps.image-cache.outputs.cache-primary-key }}"}})
    step(old, "deps-cache")["with"]["key"] = step(old, "deps-cache")["with"]["key"].replace(
        "steps.prepare.outputs.image-key", "steps.install.outputs.image-key")
    listed = steps(old)
    moved = [listed.pop(listed.index(step(old, "deps-cache")))]
    moved.append(listed.pop(listed.index(by_name["Unpack the dependency caches"])))
    listed[listed.index(step(old, "prepare")):listed.index(step(old, "prepare"))] = moved
    found = " | ".join(image_key_problems(old))
    for fault in ("the image save key", "the image save runs if", "does not name the image used",
                  "not restored and unpacked between"):
        assert fault in found, found


KEEP_SCRIPT = 'bash "$GITHUB_ACTION_PATH/ci/github/keep-image.sh"'


def keep_only_problems(action: dict[str, Any]) -> list[str]:
    """Before the image cache is saved, and only when it is, every image and image build
    but the one the lint used is removed: a step runs ci/github/keep-image.sh with the
    save's `if:`, after the lint and before the save, given prepare's `image` (what
    `image: build` made), and that script runs `cache remove-image --all-except`."""
    problems = []
    listed = steps(action)
    save = next(s for s in listed if s.get("name") == "Save the image store and root filesystems")
    keep = [s for s in listed if str(s.get("run", "")).strip() == KEEP_SCRIPT]
    if len(keep) != 1:
        return [f"{len(keep)} steps run keep-image.sh, not one"]
    if keep[0].get("if") != save.get("if"):
        problems.append(f"keep-image runs if {keep[0].get('if')!r}, the save if {save.get('if')!r}")
    if not listed.index(step(action, "lint")) < listed.index(keep[0]) < listed.index(save):
        problems.append("keep-image does not run between the lint and the image save")
    if keep[0].get("env", {}).get("BUILT_IMAGE") != "${{ steps.prepare.outputs.image }}":
        problems.append("keep-image is not given the image prepare built")
    script = (ROOT / "ci" / "github" / "keep-image.sh").read_text()
    if 'pylint-sandbox cache remove-image --all-except "$image"' not in script:
        problems.append("keep-image.sh does not run `cache remove-image --all-except`")
    return problems


def test_only_the_image_the_lint_used_is_saved_in_the_image_cache() -> None:
    """Restored by prefix, the previous toolchain's image (blobs, root filesystem, build
    layout: ~2.5 GB) was saved again beside each new one, until GitHub's 10 GB per
    repository evicted every cache; a step before the save keeps only the lint's image."""
    action = load(ACTION)
    assert keep_only_problems(action) == []
    # control: each fault caught
    gone = copy.deepcopy(action)
    gone["runs"]["steps"] = [s for s in steps(gone) if str(s.get("run", "")).strip() != KEEP_SCRIPT]
    assert keep_only_problems(gone) == ["0 steps run keep-image.sh, not one"]
    always = copy.deepcopy(action)
    next(s for s in steps(always) if str(s.get("run", "")).strip() == KEEP_SCRIPT)["if"] = "always()"
    assert "keep-image runs if 'always()'" in " | ".join(keep_only_problems(always))
    late = copy.deepcopy(action)
    listed = steps(late)
    keep = listed.pop(next(i for i, s in enumerate(listed) if str(s.get("run", "")).strip() == KEEP_SCRIPT))
    listed.append(keep)
    assert "between the lint and the image save" in " | ".join(keep_only_problems(late))
    blind = copy.deepcopy(action)
    next(s for s in steps(blind) if str(s.get("run", "")).strip() == KEEP_SCRIPT)["env"].pop("BUILT_IMAGE")
    assert "not given the image prepare built" in " | ".join(keep_only_problems(blind))


def test_the_diff_is_made_with_the_options_the_adopting_guide_gives() -> None:
    """The guide's command is the one a refusal of a diff prints (errors.DIFF_COMMAND),
    and ci/common.sh runs git with the same options (its --attr-source is a variable: it
    is left out on a git that lacks it, tests/unit/ci/test_ci_scripts.py)."""
    from roteiro_py.errors import DIFF_COMMAND

    guide = (ROOT / "docs" / "ADOPTING.md").read_text().replace("\\\n      ", "")
    given = re.search(r"^    (GIT_ATTR_NOSYSTEM=1 git [^\n]*? origin/main\.\.\.HEAD > pr\.diff)$", guide, re.M)
    assert given is not None
    assert given.group(1) == DIFF_COMMAND
    common = (ROOT / "ci" / "common.sh").read_text().replace("\\\n    ", "")
    made = re.search(r'^  GIT_ATTR_NOSYSTEM=1 git \$\{attr_source\[@\]\+"\$\{attr_source\[@\]\}"\} '
                     r'(-c [^\n]*?) +"origin/\$base\.\.\.HEAD" >"\$out"$', common, re.M)
    assert made is not None, "make_pr_diff's git command"
    assert 'attr_source=("--attr-source=$empty")' in common
    attr_source = '--attr-source="$(git hash-object -t tree /dev/null)" '
    assert attr_source + made.group(1) + " origin/main...HEAD" in given.group(1)


# -- the Debian packages ---------------------------------------------------------------------


def test_the_ci_installs_what_setup_sh_installs_less_the_test_only_packages() -> None:
    def listed(path: Path, name: str) -> set[str]:
        found = re.search(rf"^{name}=\(([^)]*)\)", path.read_text(), re.M)
        assert found is not None, f"{path} has no {name}"
        return set(found.group(1).split())

    runtime = listed(ROOT / "ci" / "common.sh", "RUNTIME_PACKAGES")
    setup = listed(ROOT / "scripts" / "lib" / "setup.sh", "APT_PACKAGES")
    assert runtime <= setup
    # the registry tests, the tests' own guests, the depmod cross-check and what fetch-deps
    # executes (strace); the linter image needs no host tool (`image build`)
    assert setup - runtime == {"docker-registry", "busybox-static", "cpio", "kmod", "strace"}
    assert runtime == {"qemu-system-x86", "e2fsprogs", "zstd"}  # no apt-only tool: Ubuntu runners


def test_the_docs_show_the_action_as_it_is() -> None:
    """README's inputs table and example name the action's inputs; the recipe by hand in
    SANDBOXED_LINTING.md installs what the action installs."""
    action = load(ACTION)
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("## CI\n"):readme.index("## Exit codes")]
    assert set(re.findall(r"^\| `([a-z-]+)` \|", section, re.M)) == set(action["inputs"])
    example = yaml.safe_load(re.search(r"```yaml\n(.*?)```", section, re.S).group(1))  # type: ignore[union-attr]
    uses = next(s for s in example["jobs"]["clippy"]["steps"] if "pylint-sandbox@" in s.get("uses", ""))
    assert uses["uses"] == "OWNER/pylint-sandbox@v1" and set(uses["with"]) <= set(action["inputs"])
    assert "`OWNER/pylint-sandbox`\nbelow is where the project is published" in section
    assert "docs/ADOPTING.md" in section and "ci/gitlab/pylint-sandbox.gitlab-ci.yml" in section
    recipe = (ROOT / "SANDBOXED_LINTING.md").read_text()
    installed = re.search(r"apt-get install -y -qq ([^\n]*)", recipe)
    assert installed is not None
    runtime = re.search(r"^RUNTIME_PACKAGES=\(([^)]*)\)", (ROOT / "ci" / "common.sh").read_text(), re.M)
    assert runtime is not None
    assert set(installed.group(1).split()) == set(runtime.group(1).split()) | {"git", "python3-venv"}


# -- the GitLab template ---------------------------------------------------------------------


def gitlab_problems(template: dict[str, Any]) -> list[str]:
    """The job's shell lines call the scripts of ci/gitlab that exist, in their order."""
    problems = []
    job = template["pylint-sandbox"]
    calls = []
    for section in ("before_script", "script", "after_script"):
        for line in job.get(section, []):
            for script in re.findall(r'"\$PYLINT_SANDBOX_DIR/src/(ci/gitlab/[a-z-]+\.sh)"', line):
                calls.append((section, script, line.rsplit('"', 1)[-1].strip()))
                if not (ROOT / script).is_file():
                    problems.append(f"{script} does not exist")
    if calls != [("before_script", "ci/gitlab/install.sh", ""), ("before_script", "ci/gitlab/cache.sh", "restore"),
                 ("script", "ci/gitlab/lint.sh", ""), ("after_script", "ci/gitlab/cache.sh", "save")]:
        problems.append(f"the scripts called: {calls}")
    if job.get("script") != ['bash "$PYLINT_SANDBOX_DIR/src/ci/gitlab/lint.sh"']:
        problems.append(f"script is not the lint script alone: {job.get('script')}")
    return problems


def test_the_gitlab_template_calls_its_scripts_and_reports_code_quality() -> None:
    template = load(GITLAB)
    assert list(template) == ["pylint-sandbox"]  # one job, no global keys imposed on the pipeline
    assert gitlab_problems(template) == []
    broken = copy.deepcopy(template)
    broken["pylint-sandbox"]["script"] = ["pylint-sandbox lint clippy ."]
    assert any("script is not the lint script" in p for p in gitlab_problems(broken))  # control

    job = template["pylint-sandbox"]
    lint = (ROOT / "ci" / "gitlab" / "lint.sh").read_text()
    quality = job["artifacts"]["reports"]["codequality"]
    assert f'quality="$CI_PROJECT_DIR/{quality}"' in lint and '"--format=gitlab=$quality"' in lint
    assert job["artifacts"]["when"] == "always" and quality in job["artifacts"]["paths"]

    # Every PYLINT_SANDBOX_* the scripts read is a variable of the job, and the other way round.
    scripts = "".join((ROOT / "ci" / "gitlab" / name).read_text() for name in ("install.sh", "cache.sh", "lint.sh"))
    read = set(re.findall(r"\bPYLINT_SANDBOX_[A-Z_]+\b", scripts))
    defined = {name for name in job["variables"] if name.startswith("PYLINT_SANDBOX_")}
    assert read - {"PYLINT_SANDBOX_SOURCE", "PYLINT_SANDBOX_REF"} <= defined
    assert defined - read == {"PYLINT_SANDBOX_SOURCE", "PYLINT_SANDBOX_REF"}  # the clone line's


def test_the_gitlab_caches_are_the_parts_cache_sh_moves() -> None:
    job = load(GITLAB)["pylint-sandbox"]
    directory = job["variables"]["PYLINT_SANDBOX_CACHE"]
    cache_sh = (ROOT / "ci" / "gitlab" / "cache.sh").read_text()
    assert f'name="${{PYLINT_SANDBOX_CACHE:-{directory}}}"' in cache_sh
    parts = set(re.findall(r'^  "([a-z/]+)\|', cache_sh, re.M))
    cached = {path for cache in job["cache"] for path in cache["paths"]}
    packed = re.search(r'^deps_packed="([a-z/-]+)"$', cache_sh, re.M)
    assert packed is not None
    assert cached == {f"{directory}/{part}" for part in parts} | {f"{directory}/{packed.group(1)}"}
    assert parts == {"roteiro/store", "roteiro/vm", "roteiro/cache/rootfs", "roteiro/packages"}
    assert 'pack_deps "$home/cache/deps" "$cache/$deps_packed"' in cache_sh
    assert 'unpack_deps "$cache/$deps_packed" "$home/cache/deps"' in cache_sh
    assert all(cache["when"] == "always" for cache in job["cache"])
    keyed = {cache["key"]["prefix"]: cache["key"]["files"] for cache in job["cache"] if isinstance(cache["key"], dict)}
    assert set(keyed) == {"pylint-sandbox-image", "pylint-sandbox-deps", "pylint-sandbox-packages"}
    assert keyed["pylint-sandbox-image"] == ["roteiro.toml"]
    assert all(len(files) <= 2 for files in keyed.values())  # GitLab's limit
    # The state lives beside the project directory, never inside the tree a lint copies.
    assert job["variables"]["ROTEIRO_HOME"].startswith("${CI_PROJECT_DIR}.")
    assert job["variables"]["PYLINT_SANDBOX_DIR"].startswith("${CI_PROJECT_DIR}.")


def gitlab_accel_problems(template: dict[str, Any], text: str) -> list[str]:
    """PYLINT_SANDBOX_ACCEL's default is an accelerator a lint takes, and the comment that
    documents the variable (YAML drops comments: read from the text) offers exactly
    vocabulary.ACCELS, as the action's input does."""
    problems = []
    default = template["pylint-sandbox"]["variables"]["PYLINT_SANDBOX_ACCEL"]
    if default not in ACCELS:
        problems.append(f"PYLINT_SANDBOX_ACCEL: the default {default!r} is not in vocabulary.ACCELS")
    line = next(line for line in text.splitlines() if line.strip().startswith("PYLINT_SANDBOX_ACCEL:"))
    comment = line.split("#", 1)[1] if "#" in line else ""
    offered = tuple(choice.split()[0] for choice in comment.split("|") if choice.strip())
    if offered != ACCELS:
        problems.append(f"PYLINT_SANDBOX_ACCEL: the comment offers {offered}, not vocabulary.ACCELS {ACCELS}")
    return problems


def test_the_gitlab_accelerator_is_one_a_lint_takes() -> None:
    text = GITLAB.read_text()
    assert gitlab_accel_problems(load(GITLAB), text) == []
    # control: a template offering hvf, or defaulting to it, is caught
    offering = text.replace("# auto | kvm | tcg", "# auto | kvm | hvf | tcg")
    assert offering != text
    assert "offers ('auto', 'kvm', 'hvf', 'tcg')" in " ".join(
        gitlab_accel_problems(yaml.safe_load(offering), offering))
    defaulting = text.replace('PYLINT_SANDBOX_ACCEL: "auto"', 'PYLINT_SANDBOX_ACCEL: "hvf"')
    assert defaulting != text
    assert "the default 'hvf'" in " ".join(gitlab_accel_problems(yaml.safe_load(defaulting), defaulting))


#: A repository with a workspace at the root, a nested one (its own lockfile) and files
#: whose names a careless pattern would also take.
_TREE = ["Cargo.lock", "Cargo.toml", "crates/a/Cargo.toml", "tools/gen/Cargo.lock", "tools/gen/Cargo.toml",
         ".cargo/config.toml", "src/lib.rs", "src/cargo_util.rs", "README.md"]


def _matched(patterns: list[str], repo: Path) -> dict[str, set[str]]:
    """What each reading GitLab has had of `key: files:` takes: git pathspecs (`git
    ls-files`, older GitLab) and globs (Python's, `**` matching zero directories too, as
    GitLab's since its fix; and without that, as before the fix)."""
    import fnmatch
    import glob

    listed = subprocess.run(["git", "ls-files", "--", *patterns], cwd=repo, capture_output=True, text=True,
                            check=True, timeout=30, env={**os.environ, "GIT_CONFIG_GLOBAL": os.devnull}).stdout
    globbed = {hit for pattern in patterns for hit in glob.glob(pattern, root_dir=repo, recursive=True)}
    # before the fix: `*` within one name, and `**/` needing a directory (none at the top)
    old_glob = {path for path in _TREE for pattern in patterns
                if ("/" not in pattern and "/" not in path and fnmatch.fnmatchcase(path, pattern))
                or (pattern.startswith("**/") and "/" in path
                    and fnmatch.fnmatchcase(path.rsplit("/", 1)[1], pattern[3:]))}
    return {"pathspec": set(listed.split()), "glob": globbed, "glob before the fix": old_glob}


@pytest.mark.parametrize(("prefix", "wanted"), [
    ("pylint-sandbox-deps", {"Cargo.lock", "Cargo.toml", "crates/a/Cargo.toml", "tools/gen/Cargo.lock",
                             "tools/gen/Cargo.toml"}),
    ("pylint-sandbox-packages", {"Cargo.lock", "tools/gen/Cargo.lock"}),
])
def test_the_gitlab_cache_keys_cover_every_lockfile_and_manifest(tmp_path: Path, prefix: str,
                                                                  wanted: set[str]) -> None:
    """Issue 23: the keys named the root's Cargo.lock and Cargo.toml only, so a nested
    workspace's lockfile changed no key (the Action's hashFiles('**/Cargo.lock', ...) did)."""
    repo = tmp_path / "repo"
    for name in _TREE:
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text("x\n")
    subprocess.run(["git", "init", "-q", str(repo)], check=True, timeout=30)
    subprocess.run(["git", "add", "."], cwd=repo, check=True, timeout=30)
    job = load(GITLAB)["pylint-sandbox"]
    files = next(c["key"]["files"] for c in job["cache"] if isinstance(c["key"], dict) and c["key"]["prefix"] == prefix)
    for reading, matched in _matched(files, repo).items():
        assert matched == wanted, (reading, files)
    for reading, matched in _matched(["Cargo.lock", "Cargo.toml"], repo).items():  # control: the old key
        assert "tools/gen/Cargo.lock" not in matched, reading
