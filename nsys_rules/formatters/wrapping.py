"""Text wrapped to a width without cutting what a reader copies: commands and code.

Findings write code in Markdown backticks (`` `torch.cuda.graph(g)` ``) and the commands to run
next the same way (`` `nsys profile -c cudaProfilerApi ... python3 llm.py` ``). A plain wrap
breaks a command at any space, so copying the line gets half of it. Here:

* a **command** (a code span that starts with a program a user runs in a shell: ``nsys``,
  ``nsys-rules``, ``python3``, ``export``..., see :data:`COMMAND`) always gets its own line,
  unbroken and without its backticks, so the whole line can be pasted; it is the one line
  allowed to be wider than the width (a command cannot be shortened without changing it);
* any other code span is one unit: moved whole to the next line, and broken only when it is
  longer than a line;
* words longer than a line are broken (kernel names have no spaces), so only commands pass the width.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A code span whose first word is a program run from a shell (optionally after ``VAR=value``
#: assignments), followed by at least one argument: what a user copies and pastes.
COMMAND = re.compile(r"(?:[A-Z_][A-Z0-9_]*=\S*\s+)*(?:nsys|nsys-rules|python3?|pip|cargo|export|compute-sanitizer"
                     r"|ncu|torchrun|mpirun|srun|CUDA_[A-Z_]+=\S*)\s+\S")
#: A code span: backticks around text without backticks (suggested commands quote a backtick as ``$'\\x60'``).
CODE = re.compile(r"`([^`\n]+)`")


def is_command(code: str) -> bool:
    """Whether the text of a code span is a command to paste into a shell (see the module docstring)."""
    return COMMAND.match(code) is not None


def is_command_line(line: str) -> bool:
    """Whether ``line`` is a command set on its own line by :func:`wrap_text` (the one kind that may be wide)."""
    return is_command(line.strip())


@dataclass(frozen=True)
class Token:
    """A unit of wrapping: ``text``, and whether it is a command (own line) or must stay whole (code)."""

    text: str
    command: bool = False
    whole: bool = False
    #: The white space before it in the text, kept between it and the word before on one line (``NEW  path``).
    gap: str = " "


def tokens(text: str) -> list[Token]:
    """``text`` cut into words, code spans (one token with the text glued to them) and commands."""
    out: list[Token] = []
    pos = 0
    for m in CODE.finditer(text):
        if m.start() < pos:  # already taken, glued to the span before it (``(`a`/`b`)``)
            continue
        out += _words(text[pos:m.start()])
        glued = _GLUED.match(text, m.end())
        tail = glued.group(0) if glued else ""
        gap = _gap_before(text, m.start())
        if is_command(m.group(1)):
            out.append(Token(m.group(1), command=True))
            # What follows a command on its line would be pasted with it: a sentence's end is left out,
            # anything else starts the next line.
            if tail and not (tail in ".,;:" and not text[m.end() + len(tail):].strip()):
                out.append(Token(tail))
        else:
            head = ""
            if out and not out[-1].command and not gap:
                head, gap = out[-1].text, out[-1].gap  # punctuation glued before the span (``(`x`),``)
                out.pop()
            out.append(Token(head + m.group(0) + tail, whole=True, gap=gap or " "))
        pos = m.end() + len(tail)
    out += _words(text[pos:])
    return out


def _gap_before(text: str, at: int) -> str:
    """The spaces right before ``at`` (empty when a word is glued to it)."""
    start = at
    while start > 0 and text[start - 1] == " ":
        start -= 1
    return text[start:at]


def _words(text: str) -> list[Token]:
    # ASCII white space only, as textwrap: a no-break space (U+00A0) keeps two words on one line.
    out = []
    for m in _WORD.finditer(text):
        gap = m.group(1)
        out.append(Token(m.group(2), gap=gap if gap and set(gap) == {" "} else " "))
    return out


_WORD = re.compile(r"([ \t\n\r\f\v]*)([^ \t\n\r\f\v]+)")
_GLUED = re.compile(r"[^ \t\n\r\f\v]*")




def wrap_text(text: str, width: int, first: str = "", rest: str | None = None, command_indent: str = "  ") -> list[str]:
    """``text`` as lines of at most ``width`` columns, ``first`` before the first and ``rest`` before the others.

    A command gets a line of its own, indented by ``rest`` plus ``command_indent``, whatever its
    length; the text after it goes on under ``rest``.
    """
    rest = first if rest is None else rest
    width = max(width, len(rest) + 10)
    lines: list[str] = []
    line = first
    fresh = True  # nothing but the indent on ``line`` yet

    def flush() -> None:
        nonlocal line, fresh
        if not fresh:
            lines.append(line.rstrip())
        line, fresh = rest, True

    for token in tokens(text):
        if token.command:
            flush()
            lines.append(rest + command_indent + token.text)
            continue
        word = token.text
        if not fresh and len(line) + len(token.gap) + len(word) <= width:
            line += token.gap + word
            continue
        if not fresh:
            flush()
        while len(line) + len(word) > width:  # longer than a line: broken, code spans too
            room = width - len(line)
            lines.append(line + word[:room])
            line, word = rest, word[room:]
        line += word
        fresh = False
    if not fresh or not lines:
        lines.append(line.rstrip())
    return lines


def fill_cell(text: str, width: int) -> list[str]:
    """``text`` wrapped for a table cell ``width`` wide; a command on its own line (wider when it must be)."""
    return wrap_text(text, width, command_indent="") or [""]


def commands_in(text: str) -> list[str]:
    """The commands of ``text`` (code spans that are commands), in order."""
    return [m.group(1) for m in CODE.finditer(text) if is_command(m.group(1))]
