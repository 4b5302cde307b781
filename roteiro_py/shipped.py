"""The documents and the Dockerfile the wheel carries, so every pointer in a message works
from an installed wheel (issue 14).

A refusal that said "see SANDBOXED_LINTING.md" or "`docker build -f Dockerfile.clippy`"
pointed an installed user at files only a checkout has, and the build command had neither
a context nor a tag. Each file a message points at is package data under
`roteiro_py/docs_data/`, printed by `pylint-sandbox docs NAME` or `pylint-sandbox
dockerfile ANALYZER`; messages name those commands, never a path of the repository.

The top-level files of the repository (`SANDBOXED_LINTING.md`, `Dockerfile.clippy`,
`docs/ADOPTING.md`) are the source of truth: they are where people read and edit them
(GitHub renders them, `docker build -f Dockerfile.clippy` works in a checkout). The
package holds byte-identical copies, not symlinks: a symlink is one line of path text on
GitHub's pages and in a Windows checkout, and sdists and wheels treat links differently
from one setuptools version to the next. tests/unit/test_shipped.py fails when a copy
differs, and `scripts/sync-docs-data` makes them equal again.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from importlib import resources


@dataclass(frozen=True)
class Shipped:
    """One file the wheel carries: its source in the repository and what it is."""

    #: Where the file lives in the repository (the source of truth), relative to its root.
    source: str
    #: One line for `pylint-sandbox docs`' listing.
    about: str

    @property
    def name(self) -> str:
        return self.source.rsplit("/", 1)[-1]

    def read(self) -> bytes:
        return resources.files("roteiro_py").joinpath("docs_data", self.name).read_bytes()


#: What `pylint-sandbox docs NAME` prints (the CLI's DocTopic has the same names; a test
#: checks).
DOCS: dict[str, Shipped] = {
    # the threat model: what the sandbox guarantees, the mounts, the image, a CI recipe
    "threat-model": Shipped("SANDBOXED_LINTING.md", "what the sandbox guarantees and what it does not, "
                            "the mounts, the linter image, a CI recipe"),
    # --baseline and --diff on a repository that already has warnings
    "adopting": Shipped("docs/ADOPTING.md", "--baseline and --diff: adopting the lint on a repository "
                        "that already has warnings"),
    # what runs (Linux x86_64), and on paper what aarch64 Linux and macOS would need
    "platforms": Shipped("docs/PLATFORMS.md", "the platforms a lint runs on, and what aarch64 Linux and "
                         "macOS (HVF) would need"),
    # --attest and verify: what each field of the statement means, what it proves and what not
    "attestation": Shipped("docs/ATTESTATION.md", "--attest and verify: the signed provenance of a "
                           "lint, what it proves and what it does not"),
    # the JSON Schema of --format json's report, generated from the model (scripts/report-schema)
    "report-schema": Shipped("docs/report.schema.json", "the JSON Schema of the report --format json "
                             "writes"),
}

#: What `pylint-sandbox dockerfile ANALYZER` prints: the Dockerfile of its linter image.
DOCKERFILES: dict[str, Shipped] = {
    # a digest-pinned Rust base plus `rustup component add clippy`
    "clippy": Shipped("Dockerfile.clippy", "the clippy linter image"),
}

#: Every file the wheel carries for the commands above.
ALL: tuple[Shipped, ...] = (*DOCS.values(), *DOCKERFILES.values())

#: The tag the printed build command gives the image, and prefetch then pins.
LOCAL_TAG = "roteiro-clippy:local"


def docs_command(topic: str) -> str:
    return f"pylint-sandbox docs {topic}"


def dockerfile_command(analyzer: str = "clippy") -> str:
    return f"pylint-sandbox dockerfile {analyzer}"


def build_command(analyzer: str = "clippy") -> str:
    """The image built from the shipped Dockerfile alone: `docker build -` reads it from
    stdin with no context, which a Dockerfile that COPYs nothing needs."""
    return f"{dockerfile_command(analyzer)} | docker build -t {LOCAL_TAG} -"


def dockerfile_lines(analyzer: str = "clippy") -> tuple[str, ...]:
    """The instructions of the Dockerfile `dockerfile ANALYZER` prints (comments and blank
    lines left out), as a refusal shows them: the base image's version is stated there
    and nowhere else."""
    text = DOCKERFILES[analyzer].read().decode("utf-8")
    return tuple(line for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#"))


def prefetch_from_docker_command(analyzer: str = "clippy") -> str:
    """Provisions what `build_command()` built and prints its pinned reference."""
    return f"pylint-sandbox prefetch --analyzer {analyzer} --from docker --image {LOCAL_TAG}"


def listing() -> str:
    width = max(len(name) for name in DOCS)
    lines = [f"{name.ljust(width)}  {doc.about}" for name, doc in DOCS.items()]
    lines.append("")
    lines.append(f"Print one with `{docs_command('NAME')}`; `{dockerfile_command()}` prints the "
                 "linter image's Dockerfile.")
    return "\n".join(lines) + "\n"


def build_hint(analyzer: str = "clippy") -> str:
    """What `dockerfile ANALYZER` says on stderr: stdout is the Dockerfile alone, so it pipes."""
    return ("# build it, then pin what was built:\n"
            f"#   {build_command(analyzer)}\n"
            f"#   {prefetch_from_docker_command(analyzer)}\n")


def _emit(data: bytes) -> int:
    """Write `data` on stdout as its bytes (a document's own encoding, not the locale's).

    These commands exist to be piped (`| docker build -`, `| less`): a reader that leaves
    first, or a stdout that is closed or full, ends the command as roteiro_py/stdout.py
    says for every command (141, silent; exit 2), raised from here."""
    sys.stdout.flush()
    sys.stdout.buffer.write(data)
    sys.stdout.buffer.flush()  # before the build hint on stderr: no hint after a failure
    return 0


def run_docs(topic: str | None) -> int:
    if topic is None:
        return _emit(listing().encode())
    return _emit(DOCS[topic].read())


def run_dockerfile(analyzer: str) -> int:
    _emit(DOCKERFILES[analyzer].read())
    sys.stderr.write(build_hint(analyzer))
    return 0
