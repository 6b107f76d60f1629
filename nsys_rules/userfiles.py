"""Reading the small text files a user points at: ``--config``, ``--baseline``, a model's config.json.

``open()`` on a FIFO blocks until a writer comes, and ``/dev/zero`` or a multi-GB file is read
until memory runs out. Each of these files is small by nature, so anything that is not a
regular file, or is larger than :data:`TEXT_LIMIT`, is refused with one line before it is read.
:func:`read_user_file` is the whole ladder for a file named on the command line: missing,
unreadable or not parseable, each one usage-error line.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Callable, TypeVar

from nsys_rules.errors import UsageError
from nsys_rules.textsafe import clip_value

T = TypeVar("T")

#: Largest config, baseline or model config read (real ones are a few kB; a baseline of 100k findings ~15 MB).
TEXT_LIMIT = 64 * 1024**2


class UnreadableFile(OSError):
    """The path is not a regular file, or is too large: the message says which."""


def read_small_text(path: str | Path, limit: int | None = None) -> str:
    """The UTF-8 text of ``path``; :class:`UnreadableFile` (an ``OSError``) when it is not a small regular file.

    ``FileNotFoundError`` and other ``OSError`` from the system pass through, so callers keep
    their own "does not exist" wording.
    """
    limit = TEXT_LIMIT if limit is None else limit
    info = Path(path).stat()
    if stat.S_ISDIR(info.st_mode):
        raise UnreadableFile(f"{clip_value(path, 200)} is a folder, not a file")
    if not stat.S_ISREG(info.st_mode):
        raise UnreadableFile(f"{clip_value(path, 200)} is not a regular file (a pipe, socket or device)")
    if info.st_size > limit:
        raise UnreadableFile(f"{clip_value(path, 200)} is {info.st_size:,} bytes, over the {limit:,}-byte limit for this file")
    with open(path, "rb") as fh:
        data = fh.read(limit + 1)
    if len(data) > limit:  # grew while being read
        raise UnreadableFile(f"{clip_value(path, 200)} is over the {limit:,}-byte limit for this file")
    return data.decode("utf-8")


def read_user_file(path: Path, what: str, parse: Callable[[str], T], language: str, missing_hint: str = "") -> T:
    """``parse`` of the text of a file the user named (``--config``, ``--baseline``); one :class:`UsageError` otherwise.

    ``what`` names the file in the line (``config file``, ``baseline``), ``language`` what ``parse``
    reads (``TOML``, ``JSON``), ``missing_hint`` what to do when the file does not exist. A file
    :func:`read_small_text` refuses (a folder, a FIFO, too large, not UTF-8) cannot be read; a
    ``ValueError`` from ``parse`` (``json.JSONDecodeError``, ``tomllib.TOMLDecodeError``) or a ``RecursionError``
    (nesting deeper than the parser's stack) is invalid.
    """
    named = f"{what} {clip_value(path, 200)}"
    try:
        text = read_small_text(path)
    except FileNotFoundError:
        raise UsageError(f"{named} does not exist{missing_hint}") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{named}: cannot read ({clip_value(exc, 300)})") from None
    try:
        return parse(text)
    except ValueError as exc:
        raise UsageError(f"{named}: invalid {language} ({clip_value(exc, 300)})") from None
    except RecursionError:  # tomllib and json recurse per level: '[' * 100_000 exhausts the stack
        raise UsageError(f"{named}: invalid {language} (nested too deeply)") from None
