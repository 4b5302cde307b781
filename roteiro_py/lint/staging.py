"""What the copy of the tree for the guest left out, told to the user.

The copy itself is made by the qemu backend (vm/disks/share_image.py) into a staging
directory the run owns, and kept until the report is built: snippets are read from it,
never from the tree (report/snippet.py).
"""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from roteiro_py.vm.api import JobOutcome


def report_left_out(job: JobOutcome, *, shown: int = 5) -> None:
    """One line on stderr per copied share that left something out (share_image.py)."""
    # lazy: lint/__init__.py imports this stage at its top, so report/ (pydantic) would load
    # on the refusals before any VM (bench/cli_startup.py)
    from roteiro_py.report.safe import clean

    for share in job.staged:
        if share.left_out:
            names = ", ".join(f"{clean(where)} ({why})" for where, why in share.left_out[:shown])
            more = len(share.left_out) - shown
            sys.stderr.write(f"pylint-sandbox: {len(share.left_out)} entries of "
                             f"{clean(str(share.host))} were not copied for the VM: {names}"
                             + (f" and {more} more" if more > 0 else "") + "\n")
