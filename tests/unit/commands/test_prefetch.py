"""`prefetch --from oci:PATH` without a digest: the layout's one image, or a refusal
listing them (commands/prefetch.py, store/prefetch.py `pin_from_layout`).

Through the installed command line, as a user runs it, with real layouts (a directory
and a tar of one) written here; the store is the test's own $ROTEIRO_HOME. The layout
is hostile input: its index.json as a link to a host file, an entry whose digest is a
path, an index past the document bound, and a name whose digest is not the entry's are
each refused, with the well-formed layout beside them as the control.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tarfile
from pathlib import Path

from roteiro_py import paths
from roteiro_py.errors import EXIT_OK, EXIT_REFUSED, EXIT_USAGE, MAX_LAYOUT_IMAGES_SHOWN
from roteiro_py.reference import parse
from roteiro_py.store import Store
from roteiro_py.store.manifest import MAX_DOCUMENT, OCI_MANIFEST
from tests.unit.store.store_images import Image, make_image

EXE = Path(sys.executable).with_name("pylint-sandbox")


def prefetch(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(EXE), "prefetch", "--analyzer", "clippy", *args], cwd=cwd,
                          env=dict(os.environ), capture_output=True, text=True, timeout=120)


def layout(root: Path, *images: tuple[Image, str | None]) -> Path:
    """An OCI layout holding `images`, each listed in index.json with its ref name."""
    blobs = root / "blobs" / "sha256"
    blobs.mkdir(parents=True)
    (root / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')
    entries = []
    for image, name in images:
        for digest, data in image.blobs().items():
            (blobs / digest.split(":")[1]).write_bytes(data)
        entry: dict[str, object] = {"mediaType": OCI_MANIFEST, "digest": image.digest,
                                    "size": len(image.manifest)}
        if name is not None:
            entry["annotations"] = {"org.opencontainers.image.ref.name": name}
        entries.append(entry)
    (root / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": entries}))
    return root


def stored() -> bool:
    return bool(Store(paths.store_root()).references()) if paths.store_root().exists() else False


def test_the_one_image_of_a_layout_is_provisioned_and_its_pin_printed(tmp_path: Path) -> None:
    image = make_image({"etc/a": b"one"})
    oci = layout(tmp_path / "l", (image, "localhost/clippy:1.80"))  # as image build --output names it
    done = prefetch("--from", f"oci:{oci}", cwd=tmp_path)
    assert done.returncode == EXIT_OK, done.stderr
    pinned = f"localhost/clippy:1.80@{image.digest}"
    assert done.stdout == pinned + "\n"
    assert f"config set lint.image {pinned}" in done.stderr  # how to pin it
    assert Store(paths.store_root()).is_present(parse(pinned))
    # as a tar of the layout too
    with tarfile.open(tmp_path / "l.tar", "w") as tar:
        for name in ("oci-layout", "index.json", "blobs"):
            tar.add(oci / name, arcname=name)
    again = prefetch("--from", f"oci:{tmp_path / 'l.tar'}", cwd=tmp_path)
    assert (again.returncode, again.stdout) == (EXIT_OK, pinned + "\n"), again.stderr


def test_a_name_without_a_digest_names_the_one_image(tmp_path: Path) -> None:
    image = make_image({"etc/a": b"tagged"})
    oci = layout(tmp_path / "l", (image, "latest"))  # skopeo's and buildx's ref name: a tag
    unnamed = prefetch("--from", f"oci:{oci}", cwd=tmp_path)
    assert unnamed.returncode == EXIT_USAGE and "--image NAME" in unnamed.stderr, unnamed.stderr
    assert "'latest'" in unnamed.stderr and not stored()  # a tag is no repository: not docker.io/library/latest
    named = prefetch("--from", f"oci:{oci}", "--image", "localhost/mine:local", cwd=tmp_path)
    assert named.returncode == EXIT_OK, named.stderr
    assert named.stdout == f"localhost/mine:local@{image.digest}\n"


def test_a_configured_image_is_still_the_one_provisioned(tmp_path: Path) -> None:
    first, second = make_image({"a": b"1"}), make_image({"a": b"2"})
    oci = layout(tmp_path / "l", (first, "localhost/a:1"), (second, "localhost/a:2"))
    paths.user_config_path().parent.mkdir(parents=True, exist_ok=True)
    paths.user_config_path().write_text(f'[lint]\nimage = "localhost/a:2@{second.digest}"\n')
    done = prefetch("--from", f"oci:{oci}", cwd=tmp_path)
    assert (done.returncode, done.stdout) == (EXIT_OK, f"localhost/a:2@{second.digest}\n"), done.stderr


def test_a_layout_of_several_images_is_refused_listing_them_bounded(tmp_path: Path) -> None:
    images = [make_image({"n": str(n).encode()}) for n in range(MAX_LAYOUT_IMAGES_SHOWN + 2)]
    oci = layout(tmp_path / "l", *[(image, f"localhost/a:{n}") for n, image in enumerate(images)])
    done = prefetch("--from", f"oci:{oci}", cwd=tmp_path)
    assert done.returncode == EXIT_USAGE, done.stderr
    assert f"holds {len(images)} images" in done.stderr and "and 2 more" in done.stderr
    shown = [image.digest for image in images if image.digest in done.stderr]
    assert shown == [image.digest for image in images[:MAX_LAYOUT_IMAGES_SHOWN]]  # the rest counted
    assert not stored()
    # the command it offers, with a name, provisions the first
    chosen = prefetch("--from", f"oci:{oci}", "--image", f"localhost/clippy@{images[0].digest}", cwd=tmp_path)
    assert chosen.returncode == EXIT_OK, chosen.stderr
    empty = layout(tmp_path / "e")
    none = prefetch("--from", f"oci:{empty}", cwd=tmp_path)
    assert none.returncode == EXIT_USAGE and "lists no image" in none.stderr


def test_a_hostile_index_is_refused_and_nothing_is_provisioned(tmp_path: Path) -> None:
    image = make_image({"etc/a": b"x"})
    good = layout(tmp_path / "good", (image, "localhost/clippy:1"))
    cases: dict[str, tuple[str, int]] = {}

    linked = layout(tmp_path / "linked", (image, "localhost/clippy:1"))
    secret = tmp_path / "host-index.json"
    secret.write_text((linked / "index.json").read_text())
    (linked / "index.json").unlink()
    (linked / "index.json").symlink_to(secret)
    cases["linked"] = ("index.json in", EXIT_REFUSED)

    pathy = layout(tmp_path / "pathy", (image, "localhost/clippy:1"))
    doc = json.loads((pathy / "index.json").read_text())
    doc["manifests"][0]["digest"] = "sha256:../../../../etc/passwd"
    (pathy / "index.json").write_text(json.dumps(doc))
    cases["pathy"] = ("has no sha256 digest", EXIT_REFUSED)

    huge = layout(tmp_path / "huge", (image, "localhost/clippy:1"))
    doc = json.loads((huge / "index.json").read_text())
    doc["padding"] = "x" * MAX_DOCUMENT
    (huge / "index.json").write_text(json.dumps(doc))
    cases["huge"] = (f"larger than {MAX_DOCUMENT} bytes", EXIT_REFUSED)

    layout(tmp_path / "lying", (image, f"localhost/clippy:1@sha256:{'0' * 64}"))
    cases["lying"] = ("lists it with the digest", EXIT_REFUSED)

    for name, (says, code) in cases.items():
        done = prefetch("--from", f"oci:{tmp_path / name}", cwd=tmp_path)
        assert done.returncode == code and says in done.stderr, (name, done.stderr)
        assert done.stdout == "" and not stored(), name
    control = prefetch("--from", f"oci:{good}", cwd=tmp_path)
    assert control.returncode == EXIT_OK, control.stderr
