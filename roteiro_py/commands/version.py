"""`pylint-sandbox --version`: the tool's version and the image a lint here would use.

A bug report or a CI log wants both in one line each. It must stay cheap and never
refuse: with nothing configured it prints the version alone; the image is read from the
configuration's layers without validating them when only `lint.image` is set
(`Layers.unvalidated_image`, no settings model built) and is never looked up in the
store or the registry. A configuration that cannot be read is said in one line, not
raised: `config show` is where it is explained. The toolchain is not printed: the store
does not record it (a lint's report names the one that ran, `Report.toolchain`).
"""

from __future__ import annotations

from pathlib import Path

from roteiro_py import __version__, config
from roteiro_py.errors import RoteiroError
from roteiro_py.guidance import printable


def version_text(path: Path = Path(".")) -> str:
    """The version line, then `image: REF (SOURCE)` when an image is configured for `path`."""
    lines = [f"pylint-sandbox {__version__}"]
    try:
        layers = config.read_layers(path)
        chosen = layers.unvalidated_image()
        if chosen is None:  # other keys set: validate, as a lint would (the settings model)
            resolved = config.resolve(path, layers=layers)
            chosen = resolved.settings.lint.image, resolved.source_of("lint.image")
    except RoteiroError:
        lines.append("image: unknown, the configuration cannot be read "
                     "(`pylint-sandbox config show` says why)")
    else:
        image, source = chosen
        if image:
            lines.append(f"image: {printable(image)} ({printable(str(source))})")
    return "\n".join(lines) + "\n"
