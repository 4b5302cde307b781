"""Image references: `registry/repository[:tag]@sha256:<64 hex>`.

The image is where the repository's build scripts and proc macros run, so it is named by
the digest of its manifest, never by a tag alone: a tag is a mutable pointer that whoever
can push to the repository can move. `parse_pinned` refuses a reference without a digest
(`TagNotDigest`) and says exactly what is malformed about a bad one.

The grammar follows the distribution reference format (docker/distribution `reference`):
a domain is the first component when it contains a `.` or a `:` or is `localhost`;
otherwise the image is on Docker Hub, and one-component names live under `library/`.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

from roteiro_py.errors import MalformedReference, TagNotDigest

DEFAULT_REGISTRY = "registry-1.docker.io"
_DOCKER_HUB_ALIASES = {"docker.io", "index.docker.io", "registry-1.docker.io"}

_COMPONENT = re.compile(r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*")
_DOMAIN = re.compile(
    r"(?:localhost|[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?"
    r"(?:\.[a-zA-Z0-9](?:[a-zA-Z0-9-]*[a-zA-Z0-9])?)*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
)
#: ASCII only, as the distribution spec says: `\w` in Python matches any Unicode letter,
#: invisible Hangul fillers included, and a tag is printed as provenance.
_TAG = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}")
_HEX64 = re.compile(r"[0-9a-f]{64}")


@dataclass(frozen=True)
class ImageReference:
    registry: str
    repository: str
    tag: str | None
    digest: str | None

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    @property
    def name(self) -> str:
        """registry/repository, as a user would write it (Docker Hub shown as docker.io)."""
        registry = "docker.io" if self.registry == DEFAULT_REGISTRY else self.registry
        return f"{registry}/{self.repository}"

    def __str__(self) -> str:
        text = self.name
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text

    @property
    def is_loopback(self) -> bool:
        host = self.registry[1:].split("]", 1)[0] if self.registry.startswith("[") else (
            self.registry.rsplit(":", 1)[0])
        return is_loopback_host(host)


def is_loopback_host(host: str) -> bool:
    """True for `localhost` and loopback IP addresses only (`127.evil.example` is a name)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def parse(text: str) -> ImageReference:
    """Parse any reference, pinned or not; malformed ones raise `MalformedReference`."""
    raw = text
    text = text.strip()
    if not text:
        raise MalformedReference(raw, "it is empty")
    if any(ch.isspace() for ch in text):
        raise MalformedReference(raw, "it contains whitespace")
    digest: str | None = None
    if "@" in text:
        text, digest = text.split("@", 1)
        algorithm, sep, hexpart = digest.partition(":")
        if not sep:
            raise MalformedReference(raw, f"the digest {digest!r} has no algorithm prefix "
                                          "(expected sha256:<64 hex>)")
        if algorithm != "sha256":
            raise MalformedReference(raw, f"the digest algorithm {algorithm!r} is not "
                                          "supported (expected sha256)")
        if len(hexpart) != 64:
            raise MalformedReference(raw, f"the sha256 digest has {len(hexpart)} hex digits, "
                                          "not 64")
        if not _HEX64.fullmatch(hexpart):
            bad = next((c for c in hexpart if c not in "0123456789abcdef"), "?")
            raise MalformedReference(raw, f"the sha256 digest contains {bad!r}; only "
                                          "lowercase hex digits 0-9a-f are allowed")
    tag: str | None = None
    last_slash = text.rfind("/")
    colon = text.rfind(":")
    if colon > last_slash:
        text, tag = text[:colon], text[colon + 1:]
        if not _TAG.fullmatch(tag):
            raise MalformedReference(raw, f"the tag {tag!r} is not a valid tag")
    parts = text.split("/")
    if len(parts) > 1 and (("." in parts[0]) or (":" in parts[0]) or parts[0] == "localhost"
                           or parts[0].startswith("[")):
        registry, path = parts[0], parts[1:]
        if not _DOMAIN.fullmatch(registry):
            raise MalformedReference(raw, f"the registry {registry!r} is not a host name")
    else:
        registry, path = DEFAULT_REGISTRY, parts
    if registry in _DOCKER_HUB_ALIASES:
        registry = DEFAULT_REGISTRY
        if len(path) == 1:
            path = ["library", *path]
    if not path or not all(path):
        raise MalformedReference(raw, "the repository name is empty")
    for component in path:
        if not _COMPONENT.fullmatch(component):
            raise MalformedReference(raw, f"the repository component {component!r} is not "
                                          "valid (lowercase letters, digits, and . _ - "
                                          "separators)")
    return ImageReference(registry=registry, repository="/".join(path), tag=tag, digest=digest)


def parse_pinned(text: str, *, source: str | None = None) -> ImageReference:
    """Parse a reference that must carry a digest; a tag alone is refused."""
    reference = parse(text)
    if reference.digest is None:
        raise TagNotDigest(text.strip(), source)
    return reference
