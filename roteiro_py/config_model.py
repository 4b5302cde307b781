"""The settings model: each key's type, bounds and description, validated by pydantic.

Only validation needs it (`config._validate`), so it is imported there and by the code
that holds settings, never on the way to a refusal that needs no validation: pydantic
and these models cost ~200 ms to import and build, more than `--help` does in all
(bench/cli_startup.py). `config.FIELDS` states the same keys by name (test_config checks).
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from roteiro_py.vocabulary import (
    DEFAULT_DEBIAN_ARCHIVE,
    DEFAULT_DEBIAN_SECURITY_ARCHIVE,
    DEFAULT_DEBIAN_SUITE,
    IMAGE_PREFIX,
    MAX_ALLOWED_IMAGES,
    MAX_MEMORY_MIB,
    MAX_TIMEOUT_S,
    Accel,
    Color,
    FailOn,
    Format,
)


class LintSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    image: str | None = Field(None, description="linter image, pinned: registry/repo[:tag]@sha256:<64 hex>")
    backend: Literal["qemu"] = Field("qemu", description="the VM backend that runs the lint")
    fail_on: FailOn = Field("warning", description="lowest level that makes the exit status 1")
    format: Format = Field("human", description="report format")
    keep_cache: bool = Field(False, description="keep the build cache between runs (trusted trees only)")
    dep_cache: bool = Field(True, description="build the dependencies once per lockfile, in a VM "
                            "of their own, and reuse them (never written by the tree's code)")
    dep_cache_max_mib: int = Field(20480, ge=64, le=1 << 24, description="cap on the disk space "
                                   "all dependency caches take together, oldest used removed first")
    quiet: bool = Field(False, description="no progress on stderr (refusals and warnings still go there)")
    color: Color | None = Field(None, description="colour in the human report: auto (on a terminal, "
                                "without NO_COLOR), always or never; unset: CARGO_TERM_COLOR, else auto")
    all_targets: bool = Field(False, description="lint tests, benches and examples too")
    features: list[str] = Field(default_factory=list, description="cargo features to enable")
    all_features: bool = Field(False, description="enable every cargo feature")
    no_default_features: bool = Field(False, description="do not enable the default feature")
    packages: list[str] = Field(default_factory=list, description="packages to lint (cargo -p); "
                                "empty: the workspace's default members, or the member PATH names")
    workspace: bool = Field(False, description="lint every member of the workspace (cargo --workspace)")
    exclude: list[str] = Field(default_factory=list, description="members left out of --workspace")
    no_deps: bool = Field(False, description="lint only the selected packages, not their path "
                          "dependencies (clippy --no-deps)")
    targets: list[str] = Field(default_factory=list, description="target selection: lib, bins, "
                               "tests, examples, benches, or bin:NAME, test:NAME, example:NAME, bench:NAME")
    target: str | None = Field(None, description="target triple to check for (the image needs its "
                               "standard library)")
    levels: list[str] = Field(default_factory=list, description="lint levels, as after `--`: "
                              "-D warnings, -A clippy::NAME, ...")
    allowed_images: list[str] = Field(
        default_factory=list, max_length=MAX_ALLOWED_IMAGES,
        description="registry/repository prefixes an image chosen by a repository's "
        "roteiro.toml must match (empty: any image)")

    @field_validator("features", "allowed_images", "packages", "exclude", "targets", "levels",
                     mode="before")
    @classmethod
    def _split_features(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [part for part in re.split(r"[,\s]+", value) if part]
        return value

    @field_validator("features", mode="before")
    @classmethod
    def _split_each_feature(cls, value: Any) -> Any:
        """`-F "a b" -F c,d` as cargo takes it: each entry split on commas and spaces."""
        if isinstance(value, list) and all(isinstance(entry, str) for entry in value):
            return [part for entry in value for part in re.split(r"[,\s]+", entry) if part]
        return value

    @field_validator("allowed_images")
    @classmethod
    def _image_prefixes(cls, value: list[str]) -> list[str]:
        for entry in value:
            if not IMAGE_PREFIX.fullmatch(entry):
                raise ValueError(f"{entry!r} is not a registry/repository prefix "
                                 "(e.g. ghcr.io/myorg/)")
        return value


class VmSettings(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    accel: Accel = Field("auto", description="auto uses hardware acceleration; tcg is an explicit opt-in")
    cpus: int = Field(2, ge=1, le=256, description="guest vCPUs")
    memory_mib: int = Field(2048, ge=128, le=MAX_MEMORY_MIB, description="guest memory in MiB")
    timeout_s: int = Field(1800, ge=1, le=MAX_TIMEOUT_S, description="deadline for one run, seconds")
    output_limit_mib: int = Field(64, ge=1, le=4096, description="cap on the guest's output, all streams together")
    stage_max_mib: int = Field(2048, ge=1, le=1 << 20, description="cap on the bytes of the tree copied for the VM")
    stage_max_files: int = Field(200_000, ge=1, le=100_000_000, description="cap on the entries copied for the VM")
    stage_max_depth: int = Field(128, ge=1, le=400, description="cap on how deep the copied tree's directories nest")
    scratch_mib: int = Field(8192, ge=64, le=1 << 22, description="size of the writable scratch disk")
    kernel: str | None = Field(None, description="guest kernel to use instead of the provisioned one")
    initrd: str | None = Field(None, description="guest initramfs to use instead of the provisioned one")
    template: bool = Field(True, description="restore each run from a booted, probed VM template instead of booting")
    debian_archive: str = Field(DEFAULT_DEBIAN_ARCHIVE, min_length=1, max_length=4096,
                                description="Debian archive the VM assets are provisioned from: an http(s) "
                                "or file URL, or a directory with the same dists/ and pool/ layout")
    debian_suite: str = Field(DEFAULT_DEBIAN_SUITE, pattern=r"^[a-z][a-z0-9.-]{0,63}$",
                              description="suite of that archive, by codename (read once, at prefetch)")
    debian_security_archive: str = Field(DEFAULT_DEBIAN_SECURITY_ARCHIVE, max_length=4096,
                                         description="Debian security archive read beside it (suite "
                                         "SUITE-security), the newer kernel of the two provisioned; "
                                         "empty: read none (the kernel then lags its security fixes)")


class Settings(BaseModel):
    model_config = ConfigDict(extra="forbid")

    lint: LintSettings = Field(default_factory=lambda: LintSettings())
    vm: VmSettings = Field(default_factory=lambda: VmSettings())


SECTIONS: dict[str, type[BaseModel]] = {"lint": LintSettings, "vm": VmSettings}
