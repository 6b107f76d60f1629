"""What every output of the attack tests must be: no CI workflow command a trace chose, JSON a strict parser takes.

A GitHub Actions runner reads its log line by line: a line that starts with ``::`` once its leading whitespace is
trimmed is a workflow command (``::error``, ``::add-mask::``, ``::stop-commands::``), and ``##[command]`` runs
anywhere in a line. A strict JSON parser refuses ``NaN``/``Infinity`` and lone surrogates (``\\udcff``).
"""

from __future__ import annotations

import json
import re
from typing import Any

#: The names a hostile trace gives its kernels, ranges and command: each a workflow command if printed first on a
#: line (the newline one starts a second line), and a legacy ``##[`` command anywhere.
EVIL_KERNEL = "::error title=pwned::owned ##[add-mask]x"
EVIL_NEWLINE = "::add-mask::secret\n::error::nl"
EVIL_RANGE = "::stop-commands::tok"
EVIL_COMMAND = ("::warning::cmd", "##[error]x")

# The runner trims .NET whitespace; a terminal shows the zero-width characters as nothing.
_COMMAND_LINE = re.compile(r"^[\s\u200b-\u200d\u2060\ufeff]*::")
_SURROGATE = re.compile("[\ud800-\udfff]")


def command_lines(text: str) -> list[str]:
    """The lines of ``text`` a CI runner would run as workflow commands (empty: none)."""
    return [line for line in text.splitlines() if _COMMAND_LINE.match(line) or "##[" in line]


def _reject_constant(name: str) -> Any:
    raise ValueError(f"JSON holds {name}, which is not JSON")


def lone_surrogates(value: Any, where: str = "$") -> list[str]:
    """Where a parsed JSON value holds a lone surrogate (in a key or a string)."""
    found: list[str] = []
    if isinstance(value, str):
        if _SURROGATE.search(value):
            found.append(where)
    elif isinstance(value, dict):
        for key, item in value.items():
            found += lone_surrogates(key, f"{where} key") + lone_surrogates(item, f"{where}.{key}")
    elif isinstance(value, list):
        for i, item in enumerate(value):
            found += lone_surrogates(item, f"{where}[{i}]")
    return found


def strict_loads(text: str) -> Any:
    """``text`` parsed as a strict parser does: NaN, Infinity and lone surrogates refused (AssertionError)."""
    data = json.loads(text, parse_constant=_reject_constant)
    bad = lone_surrogates(data)
    assert not bad, f"lone surrogates at {bad[:5]}"
    return data
