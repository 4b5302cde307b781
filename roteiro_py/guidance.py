"""Refusal text as a structured value that checks its own shape.

A refusal is the whole interface to a failed state: the user sees nothing else. So the
text is not assembled ad hoc where an error is raised; it is a `Guidance` value (one
sentence, then notes, an optional config snippet, and runnable command lines), and the
value can say what is wrong with itself (`defects()`). Rendering asserts there are none,
so a refusal whose "command" spans two lines or whose note is an empty string fails in
the test that renders it rather than in front of a user.

Values that came from outside (a path, an image reference, a line of guest stderr) are
made printable with `printable()` (the one sanitiser, roteiro_py/untrusted.py) before
they are put into a guidance value: a guest can put escape sequences or a CI runner's
workflow command in a crate name as easily as in a diagnostic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from roteiro_py.untrusted import is_unsafe_char, sanitise

if TYPE_CHECKING:
    from rich.console import RenderableType


def counted(count: int, singular: str, plural: str | None = None) -> str:
    """`1 image`, `2 images`: a count with its noun, singular for one (`plural`: when the
    noun does not take an `s`, e.g. "help")."""
    return f"{count} {singular if count == 1 else (plural or singular + 's')}"


def printable(text: str, *, keep_newlines: bool = False) -> str:
    """`text` made safe to print in a refusal: `untrusted.sanitise()`, under the name
    errors.py and the commands use. Newlines survive only where the caller says a
    multi-line block is expected."""
    return sanitise(text, keep_newlines=keep_newlines)


@dataclass(frozen=True)
class Guidance:
    """What went wrong, in one sentence, and the way forward.

    summary:  one sentence naming the thing it is about (an image, a path, a command).
    notes:    further sentences: why, what was found, what is and is not guaranteed.
    blocks:   files to write, each (title, text), shown verbatim before the snippet (the
              Dockerfile that builds a linter image).
    snippet:  an optional block to paste into a file (a config table), shown verbatim.
    commands: runnable command lines, one per entry, in the order to run them.
    """

    summary: str
    notes: tuple[str, ...] = ()
    commands: tuple[str, ...] = ()
    snippet: str | None = None
    snippet_title: str | None = None
    details: tuple[str, ...] = field(default=())
    blocks: tuple[tuple[str, str], ...] = ()

    def defects(self) -> list[str]:
        """Everything about this value that would make it a bad message; empty when sound."""
        found: list[str] = []
        if not self.summary.strip():
            found.append("the summary is empty")
        elif "\n" in self.summary:
            found.append("the summary spans more than one line")
        elif not self.summary.rstrip().endswith((".", "?", "!", ":")):
            found.append(f"the summary is not a sentence: {self.summary!r}")
        for note in self.notes:
            if not note.strip():
                found.append("a note is empty")
            elif not note[0].isupper() and not note[0].isdigit() and note[0] not in "`'\"(":
                found.append(f"a note does not start a sentence: {note!r}")
            elif not note.rstrip().endswith((".", "?", "!", ":")):
                found.append(f"a note is not a sentence: {note!r}")
        for command in self.commands:
            if not command.strip():
                found.append("a command is empty")
            elif "\n" in command or "\r" in command:
                found.append(f"a command is not one runnable line: {command!r}")
            elif command != command.strip():
                found.append(f"a command has surrounding whitespace: {command!r}")
            elif command.startswith("$"):
                found.append(f"a command carries a prompt: {command!r}")
        if self.snippet is not None and not self.snippet.strip():
            found.append("the snippet is empty")
        if self.snippet_title is not None and self.snippet is None:
            found.append("a snippet title without a snippet")
        for detail in self.details:
            if not detail.strip():
                found.append("a detail line is empty")
        for title, block in self.blocks:
            if not title.strip() or not block.strip():
                found.append(f"a block or its title is empty: {title!r}")
        blocks = [text for block in self.blocks for text in block]
        for text in (self.summary, *self.notes, *self.commands, *self.details, *blocks):
            if any(is_unsafe_char(ch) for ch in text.replace("\n", "")):
                found.append(f"raw control characters in {text!r}")
        return found

    def _check(self) -> None:
        defects = self.defects()
        assert not defects, f"malformed guidance: {'; '.join(defects)}"

    def render_text(self) -> str:
        """Plain text, for logs, pipes and CI: no colour, no markup, stable layout."""
        self._check()
        lines = [f"error: {self.summary}"]
        for note in self.notes:
            lines.append(f"  note: {note}")
        for detail in self.details:
            lines.append(f"  | {detail}")
        for title, block in self.blocks:
            lines.append(f"  {title}:")
            lines.extend(f"    {line}" for line in block.splitlines())
        if self.snippet is not None:
            lines.append(f"  {self.snippet_title or 'add this'}:")
            lines.extend(f"    {line}" for line in self.snippet.splitlines())
        if self.commands:
            lines.append("  run:" if len(self.commands) == 1 else "  run, in order:")
            lines.extend(f"    {command}" for command in self.commands)
        return "\n".join(lines) + "\n"

    def render_rich(self) -> RenderableType:
        """The same content for a terminal; text is never parsed as markup."""
        # lazy: rich only when a refusal is rendered on a terminal; --help must not import it
        from rich.console import Group
        from rich.text import Text

        self._check()
        parts: list[Text] = [Text.assemble(("error", "bold red"), ": ", (self.summary, "bold"))]
        for note in self.notes:
            parts.append(Text.assemble("  ", ("note", "cyan"), ": ", note))
        for detail in self.details:
            parts.append(Text.assemble("  | ", (detail, "dim")))
        for title, block in self.blocks:
            parts.append(Text.assemble("  ", (title, "cyan"), ":"))
            for line in block.splitlines():
                parts.append(Text.assemble("    ", (line, "green"), no_wrap=True, overflow="ignore"))
        if self.snippet is not None:
            parts.append(Text.assemble("  ", (self.snippet_title or "add this", "cyan"), ":"))
            for line in self.snippet.splitlines():
                parts.append(Text.assemble("    ", (line, "green")))
        if self.commands:
            parts.append(Text("  run:" if len(self.commands) == 1 else "  run, in order:"))
            # Never wrapped: rich wraps with real newlines, and a command pasted in two
            # pieces runs the first alone. Print with crop=False; the terminal folds it.
            for command in self.commands:
                parts.append(Text.assemble("    ", (command, "bold green"), no_wrap=True, overflow="ignore"))
        return Group(*parts)
