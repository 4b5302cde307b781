"""The command line the user ran, so a suggested rerun repeats it with one value changed.

A refusal that said `pylint-sandbox lint clippy --memory 3072` dropped the user's path and
every option they gave (the package, the features, the image, the report files, the lint
levels after `--`): pasted, it linted something else, or the current directory. The
command line's boundary records the words it was given and which of the command's
options take a value; `with_option()` removes every occurrence of one option and puts it
back, once, with the new value, before `--`, and quotes every word so the line pastes
into a shell as the same words: a path with spaces, quotes or `$(...)` stays one inert
word, and one with a newline or another control character is written in bash's `$'...'`
(the only single-line form of such a word), with undecodable bytes given back as the
bytes they were.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass

from roteiro_py.untrusted import is_unsafe_char

#: The program name a rerun starts with: the console script the package installs.
PROGRAM = "pylint-sandbox"

#: A rerun longer than this is not offered as a line (a note says which option to change):
#: no one pastes it, and the words come from outside.
MAX_RERUN_CHARS = 4096


def shell_word(word: str) -> str:
    """`word` as one shell word that a POSIX shell (bash, for `$'...'`) reads back as
    `word`, on one line, with no character a terminal acts on, and no `##[`: the refusal
    printer's `guard()` would write that `[` as `\\x5b` inside quotes that keep it literal,
    and the pasted word would be another path (`$'##\\x5b'` is `##[` to bash)."""
    if "##[" not in word and not any(is_unsafe_char(ch) or ch in "\n\t" for ch in word):
        return shlex.quote(word)
    out: list[str] = []
    for index, ch in enumerate(word):
        code = ord(ch)
        if ch == "[" and word[max(index - 2, 0):index] == "##":
            out.append("\\x5b")
        elif ch in "\\'":
            out.append("\\" + ch)
        elif 0xDC80 <= code <= 0xDCFF:
            # os.fsdecode's surrogateescape: the byte the user's argv really held.
            out.append(f"\\x{code - 0xDC00:02x}")
        elif ch in "\n\t" or is_unsafe_char(ch):
            out.append(f"\\x{code:02x}" if code < 0x80 else
                       f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}")
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


@dataclass(frozen=True)
class Invocation:
    """What the user typed after the program name, and the grammar of the command."""

    words: tuple[str, ...]
    #: Every option name the command takes (`--memory`, `-p`, `--package`, ...).
    options: frozenset[str]
    #: Those of them that take a value (the next word, or after `=`).
    takes_value: frozenset[str]

    def _value_follows(self, word: str) -> bool:
        """Whether the word after `word` is `word`'s value, as click parses it."""
        if word.startswith("--"):
            return word in self.takes_value
        if word.startswith("-") and len(word) > 1:
            # A cluster of short options (`-qp NAME`): the first one that takes a value
            # takes the rest of the word, or the next word when it is the last.
            for index, letter in enumerate(word[1:], start=1):
                if f"-{letter}" in self.takes_value:
                    return index == len(word) - 1
        return False

    def with_option(self, option: str, value: str) -> str | None:
        """The line to paste: the same words, with `option value` in place of every
        `option` given; None when the command has no such option or the line is too long."""
        if option not in self.options or option not in self.takes_value:
            return None
        kept: list[str] = []
        rest: list[str] = []
        index = 0
        while index < len(self.words):
            word = self.words[index]
            if word == "--":
                rest = list(self.words[index:])
                break
            if word == option:
                index += 2
                continue
            if word.startswith(option + "="):
                index += 1
                continue
            kept.append(word)
            if self._value_follows(word) and index + 1 < len(self.words):
                kept.append(self.words[index + 1])
                index += 1
            index += 1
        return command_line((*kept, option, value, *rest))


def command_line(words: tuple[str, ...] | list[str]) -> str | None:
    """`pylint-sandbox WORDS...` as one line to paste, every word quoted by `shell_word()`;
    None when it is longer than MAX_RERUN_CHARS."""
    line = " ".join([PROGRAM, *(shell_word(word) for word in words)])
    return line if len(line) <= MAX_RERUN_CHARS else None
