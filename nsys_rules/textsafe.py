"""Text from a trace made safe for where it goes: a shell, a terminal, Markdown, CSV, HTML, SARIF.

Kernel, API and NVTX names, the recorded command line, environment values and file names all
come from the file, and a hostile file chooses them. Each output kind has one function here,
and every place that puts such text into an output goes through it:

* :func:`shell_word` / :func:`shell_join`: a value that becomes part of a suggested command is
  one quoted shell word. Printable text is single-quoted (``shlex.quote``); text holding a
  backtick, a control character, a newline or an invisible/bidi character is written as a
  bash ``$'...'`` word with those characters as escapes, so a suggestion is one printable line
  that can be cut out of its backticks and pasted without running anything.
* :func:`terminal_safe`: control characters (``ESC ] 0 ; title BEL`` renames the window, ``CR``
  overwrites the line that says what is wrong, ``LF`` inside a name prints a fake report line)
  and bidi overrides (``U+202E`` shows text reversed) are shown as escapes (``\\x1b``, ``\\u202e``).
* :func:`markdown_safe` / :func:`markdown_code`: GitHub renders PR comments, so nothing from a
  trace may become a link, an image, HTML, a mention or an issue reference.
* :func:`csv_cell`: a cell a spreadsheet would run as a formula (``=``, ``+``, ``-``, ``@``, tab,
  CR first) is prefixed with ``'``.
* :func:`html_safe`: ``html.escape`` plus the invisible characters of :func:`terminal_safe`.
* :func:`sarif_text`: SARIF message text reads ``[text](target)`` as a link; brackets are escaped.
* :func:`ci_log_safe` / :func:`json_log_safe`: a CI runner reads its log for commands (GitHub Actions runs a
  line that starts with ``::``, after its leading whitespace, and ``##[command]`` anywhere in a line), and
  every output may land in a CI log: a command a trace chose is shown escaped, never run.
* :func:`json_safe`: JSON a strict parser accepts: no NaN or infinity (``null``), no lone surrogate (shown
  as its escape, as on a terminal: a file name's byte ``\xff``).

JSON keeps the exact names otherwise (the encoder escapes the rest).
"""

from __future__ import annotations

import codecs
import html
import math
import re
import shlex
from typing import Any, Iterable

#: C0 controls, DEL, C1 controls, and the invisible "format" characters that reorder or hide
#: text: soft hyphen, Arabic letter mark, zero-width and direction marks, the bidi embeddings,
#: overrides and isolates (U+202A-E, U+2066-9), line/paragraph separators, BOM, tag characters;
#: and lone surrogates, which no output encoding can write: Python holds a path's non-UTF-8 byte
#: (a Linux path is bytes) as U+DC80-U+DCFF, shown as that byte (``\xff``).
_INVISIBLE = ("\x7f-\x9f\xad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f\ufeff\ufff9-\ufffb"
              "\U000e0000-\U000e007f\ud800-\udfff")
_CONTROL_KEEP_LAYOUT = re.compile(f"[\x00-\x08\x0b-\x1f{_INVISIBLE}]")
_CONTROL_ALL = re.compile(f"[\x00-\x1f{_INVISIBLE}]")

#: Formats whose text is meant for a terminal or a text log.
TERMINAL_FORMATS = frozenset({"table", "compact", "markdown"})
#: Formats whose text is JSON (``json_log_safe`` keeps it JSON).
JSON_FORMATS = frozenset({"json", "sarif"})

#: Longest value quoted in an error line (a 100 kB --filter-nvtx name must not become a 100 kB line).
MESSAGE_VALUE_LIMIT = 120


def _escape_char(ch: str, byte_limit: int = 0x100) -> str:
    # bash's $'\xHH' is a raw byte: above 0x7f a shell word needs \u00HH to stay UTF-8.
    code = ord(ch)
    if 0xDC80 <= code <= 0xDCFF:
        # A byte of a non-UTF-8 file name (surrogateescape): shown, and in a shell word given, as the byte.
        return f"\\x{code - 0xDC00:02x}"
    if code < byte_limit:
        return f"\\x{code:02x}"
    return f"\\u{code:04x}" if code < 0x10000 else f"\\U{code:08x}"


# -- streams -------------------------------------------------------------------------------
#: The error handler :func:`escape_unwritable` sets on the standard streams.
STREAM_ERRORS = "nsys-rules-escape"


def _escape_unwritable(exc: UnicodeError) -> tuple[str, int]:
    if not isinstance(exc, UnicodeEncodeError):
        raise exc
    return "".join(_escape_char(ch, 0x80) for ch in exc.object[exc.start:exc.end]), exc.end


codecs.register_error(STREAM_ERRORS, _escape_unwritable)


def escape_unwritable(*streams: Any) -> None:
    """Make ``streams`` write what their encoding cannot as escapes instead of failing.

    A line that names a path with a non-UTF-8 byte (a Linux path is bytes; Python holds the byte
    as a lone surrogate) then shows the byte as ``\\xff``, on any terminal encoding, where a
    strict stream would end the run with an internal error and the C locale's ``surrogateescape``
    would write the raw byte. The outputs escape such text themselves (:func:`terminal_safe`);
    this covers every other line, the error lines on stderr first of all.
    """
    for stream in streams:
        reconfigure = getattr(stream, "reconfigure", None)
        if reconfigure is not None:
            try:
                reconfigure(errors=STREAM_ERRORS)
            except (OSError, ValueError):
                pass


# -- shell ----------------------------------------------------------------------------------
_SHELL_PLAIN = re.compile(r"[A-Za-z0-9_@%+=:,./-]+")


def shell_word(value: object) -> str:
    """``value`` as exactly one shell word that expands to nothing else (see the module docstring)."""
    text = str(value)
    if _SHELL_PLAIN.fullmatch(text):
        return text
    if "`" not in text and text.isprintable():
        return shlex.quote(text)
    out = []
    for ch in text:
        if ch in "\\'":
            out.append("\\" + ch)
        elif ch == "`" or not ch.isprintable():
            out.append(_escape_char(ch, 0x80))
        else:
            out.append(ch)
    return "$'" + "".join(out) + "'"


def shell_join(words: Iterable[object]) -> str:
    """Words as one command line, each quoted by :func:`shell_word`."""
    return " ".join(shell_word(w) for w in words)


# -- terminal -------------------------------------------------------------------------------
def terminal_safe(text: str, *, newlines: bool = True) -> str:
    """``text`` with control and invisible characters shown as escapes.

    ``newlines=True`` keeps tab and newline (a whole rendered output, whose layout they are);
    ``newlines=False`` escapes them too (one value from the trace: a name, a message).
    """
    pattern = _CONTROL_KEEP_LAYOUT if newlines else _CONTROL_ALL
    return pattern.sub(lambda m: _escape_char(m.group()), text)


#: Longest finding message or recommendation, and recorded command, any output carries. Real ones
#: stay far below it; a trace can record a command of megabytes, which text layout (wrapping,
#: tables) would take minutes over.
TEXT_CHARS = 4000
#: Longest name (kernel, API, NVTX range, GPU) a layout shows; identity fields in JSON keep theirs.
NAME_CHARS = 1000


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, the cut said at its end; unchanged when it fits."""
    if len(text) <= limit:
        return text
    marker = f" … [{len(text)} characters, cut]"
    return text[:max(0, limit - len(marker))] + marker


def clip_value(value: object, limit: int = MESSAGE_VALUE_LIMIT) -> str:
    """``value`` as one visible line of at most ``limit`` characters (for error messages)."""
    text = terminal_safe(str(value), newlines=False)
    return text if len(text) <= limit else f"{text[:limit]}... ({len(text):,} characters)"


# -- markdown (as GitHub renders it) --------------------------------------------------------
# Words GitHub may turn into a link by itself (URLs, www., e-mail addresses, @mentions, issue refs),
# whatever stands before them: the whole word becomes code.
_AUTOLINK = re.compile(r"(?i)\S*(?:://|www\.|@|#\d|mailto:|xmpp:|javascript:|data:)\S*")
# Backslash escapes for the characters that start markup: links and images ([ ] !), HTML and
# autolinks (< >), entities (&), emphasis (* _ ~), math ($), headings (#), code (`), escapes (\).
_MD_SPECIAL = re.compile(r"([\\`*_\[\]<>!&~$#])")


def markdown_code(text: str) -> str:
    """``text`` as one inline code span (GitHub renders its content literally: no link, no HTML)."""
    value = " ".join(str(text).split())
    if not value:
        return "` `"
    longest = max((len(run) for run in re.findall("`+", value)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if value.startswith("`") or value.endswith("`") else ""
    return f"{fence}{pad}{value}{pad}{fence}"


def _markdown_prose(text: str) -> str:
    out, last = [], 0
    for m in _AUTOLINK.finditer(text):
        out.append(_MD_SPECIAL.sub(r"\\\1", text[last:m.start()]))
        out.append(markdown_code(m.group()))
        last = m.end()
    out.append(_MD_SPECIAL.sub(r"\\\1", text[last:]))
    return "".join(out)


def markdown_safe(text: str) -> str:
    """A message for Markdown: its `code spans` stay code, everything else is escaped text.

    Rules write messages with commands and names in backticks. Whatever the text holds,
    each part either renders literally inside a code span or is escaped prose, so no link,
    image, HTML, mention or issue reference can come out of it. One line (whitespace folded).
    """
    parts = " ".join(str(text).split()).split("`")
    if len(parts) % 2 == 0:  # an unpaired backtick: the tail is prose
        parts[-2:] = ["`".join(parts[-2:])]
    return "".join(_markdown_prose(p) if i % 2 == 0 else markdown_code(p) for i, p in enumerate(parts))


# -- csv, html, sarif -----------------------------------------------------------------------
# The fullwidth forms too: spreadsheets with an East Asian input method read ＝SUM(...) as a formula.
_FORMULA_START = ("=", "+", "-", "@", "\t", "\r", "\uff1d", "\uff0b", "\uff0d", "\uff20")


def csv_cell(value: Any) -> Any:
    """A text cell made inert for spreadsheets and terminals; numbers pass unchanged."""
    if not isinstance(value, str):
        return value
    text = terminal_safe(value, newlines=False)
    return "'" + text if value.startswith(_FORMULA_START) else text


def html_safe(text: object) -> str:
    """``text`` for HTML content or a quoted attribute, control and invisible characters shown as escapes."""
    return html.escape(terminal_safe(str(text)), quote=True)


def sarif_text(text: str) -> str:
    """Plain SARIF message text: ``\\``, ``[`` and ``]`` escaped so no embedded link is formed."""
    return re.sub(r"([\\\[\]])", r"\\\1", text)


# -- CI logs ----------------------------------------------------------------------------------
# A GitHub Actions workflow command: "::" first on a line once the runner trims the line's leading
# whitespace (.NET's, and the invisible characters a terminal shows as nothing), after any of the
# line breaks a log reader splits on.
_LINE_COMMAND = re.compile("(?:^|(?<=[\n\r\x0b\x0c\x1c-\x1e\x85\u2028\u2029]))([\\s\u200b-\u200d\u2060\ufeff]*)::")
# The older form, "##[command]data", which the runner still reads anywhere in a line.
_LEGACY_COMMAND = "##["


def ci_log_safe(text: str) -> str:
    """``text`` (a whole rendered output, any text format) with every CI workflow command shown, not run.

    A line that starts with ``::`` gets a backslash first (``\\::error``: Markdown renders the escaped
    colon as a colon), and ``##[`` becomes ``#\\#[``. Apply after the output is laid out: wrapping can
    put any name first on a line.
    """
    if "::" in text:
        text = _LINE_COMMAND.sub(r"\1\\::", text)
    return text.replace(_LEGACY_COMMAND, "#\\#[") if _LEGACY_COMMAND in text else text


def output_safe(text: str, fmt: str) -> str:
    """A whole output in format ``fmt`` made safe for the terminal or CI log it is printed to: JSON formats
    keep their exact text (:func:`json_log_safe`); terminal formats show control characters as escapes
    (:func:`terminal_safe`); every text format has its CI commands shown, not run (:func:`ci_log_safe`)."""
    if fmt in JSON_FORMATS:
        return json_log_safe(text)
    return ci_log_safe(terminal_safe(text) if fmt in TERMINAL_FORMATS else text)


def json_log_safe(text: str) -> str:
    """Indented JSON text with ``##[`` written ``#\\u0023[`` (the same string to a parser, no command to a
    CI runner). Its lines start with indentation and a quote or a bracket, never with a value's text."""
    return text.replace(_LEGACY_COMMAND, "#\\u0023[") if _LEGACY_COMMAND in text else text


# -- strict JSON ------------------------------------------------------------------------------
_SURROGATE = re.compile("[\ud800-\udfff]")


def unicode_safe(text: str) -> str:
    """``text`` with each lone surrogate shown as its escape (``\\xff`` for a file name's byte held by
    ``surrogateescape``, ``\\ud800`` else): valid Unicode that every encoder and strict parser takes."""
    if text.isascii() or not _SURROGATE.search(text):
        return text
    return _SURROGATE.sub(lambda m: _escape_char(m.group()), text)


def json_safe(value: Any) -> Any:
    """``value`` ready for a strict JSON parser: NaN and infinite floats as None, every string and key
    through :func:`unicode_safe`, numpy scalars as Python numbers, tuples as lists."""
    if isinstance(value, str):
        return unicode_safe(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {unicode_safe(k) if isinstance(k, str) else k: json_safe(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(v) for v in value]
    if type(value).__module__ == "numpy" and hasattr(value, "item"):
        return json_safe(value.item())
    return value
