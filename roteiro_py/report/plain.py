"""The report's plain-text pieces that the terminal, github and markdown formats share:
a suggestion as cargo shows it, and where the dependencies came from. Apart from
human.py, which needs rich: the github and markdown formats load no console (render.py
imports human.py only for the human format; bench/cli_startup.py)."""

from __future__ import annotations

from roteiro_py.report.model import Fix, Report


def fix_text(fix: Fix) -> str:
    """One suggestion as cargo shows it (human.py `_fix`, without colour and with every line: the
    github format and the step summary each cut the whole at their own bound)."""
    lines = [f"help: {fix.message}"]
    if fix.before is not None and fix.after is not None and fix.line is not None:
        old, new = fix.before.removesuffix("\n").split("\n"), fix.after.removesuffix("\n").split("\n")
        gutter = len(str(fix.line + max(len(old), len(new)) - 1))
        if len(old) == len(new):  # line by line: an unchanged line is context
            for offset, (was, now) in enumerate(zip(old, new, strict=True)):
                number = f"{fix.line + offset:>{gutter}}"
                lines += [f"{number}   {was}"] if was == now else [f"{number} - {was}", f"{number} + {now}"]
        else:
            lines += [f"{fix.line + offset:>{gutter}} - {was}" for offset, was in enumerate(old)]
            lines += [f"{fix.line + offset:>{gutter}} + {now}" for offset, now in enumerate(new)]
        return "\n".join(lines)
    for edit in fix.edits:
        where = f"  {edit.path}:{edit.line}:{edit.column}: "
        if not edit.replacement:
            lines.append(where + "remove")
        elif "\n" in edit.replacement:
            lines.append(where + "replace with:\n" + edit.replacement)
        else:
            lines.append(where + f"replace with `{edit.replacement}`")
    return "\n".join(lines)


def dependency_line(report: Report) -> str:
    """Where the run's dependencies came from, with cargo's own count of what it compiled."""
    cache, summary = report.dependency_cache, report.summary
    assert cache is not None
    counted = (f"{summary.dependencies_fresh} dependency units fresh, "
               f"{summary.dependencies_compiled} compiled")
    if cache.state == "skipped":
        return f"dependency cache skipped: {cache.reason}; {counted}"
    key = (cache.key or "")[:16]
    if cache.state == "built":
        took = f" in {cache.build_seconds:.0f} s" if cache.build_seconds is not None else ""
        again = f" ({cache.reason})" if cache.reason else ""
        return f"dependency cache {key} built{took}{again}, then used; {counted}"
    return f"dependency cache {key} used; {counted}"
