"""The report's name for the one sanitiser (roteiro_py/untrusted.py): `clean()`.

Everything in a finding came from the guest (message, code, path, related labels) or
from the repository's own files (the snippet): a build script or a proc macro decides
what rustc prints, and a repository decides what its source lines contain. `clean()` is
applied by the report model's validators (report/model.py) to every string field, so no
renderer can forget it and a report reloaded from JSON is cleaned again; `render()` then
puts the finished output through `guard()` (untrusted.py says what each one guarantees).
Refusals use the same function under the name `guidance.printable()`.
"""

from __future__ import annotations

from roteiro_py.untrusted import MAX_FIELD_CHARS, guard
from roteiro_py.untrusted import is_sanitised as is_clean
from roteiro_py.untrusted import sanitise as clean

__all__ = ["MAX_FIELD_CHARS", "clean", "guard", "is_clean"]
