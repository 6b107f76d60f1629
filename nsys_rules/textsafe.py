"""Text from a trace made safe to print on a terminal.

Kernel, API and NVTX names come from the file, and a hostile file can put terminal control
sequences in them (``ESC ] 0 ; title BEL`` renames the window, ``ESC [ 2 J`` clears the screen,
a carriage return overwrites the line that says what is wrong). Human-readable formats show
such characters escaped (``\\x1b``); JSON escapes them itself.
"""

from __future__ import annotations

import re

# C0 controls except tab and newline, DEL, and the C1 controls (8-bit CSI etc.).
_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")

#: Formats whose text is meant for a terminal or a text log.
TERMINAL_FORMATS = frozenset({"table", "compact", "markdown"})


def terminal_safe(text: str) -> str:
    """``text`` with every control character but tab and newline shown as an escape."""
    return _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)


#: Longest finding message or recommendation, and recorded command, any output carries. Real ones
#: stay under 1 KB (17 H200 traces: 802 characters at most); a trace can record a 4 MB command,
#: which text layout (wrapping, tables) handled in 83 s.
TEXT_CHARS = 4000
#: Longest name (kernel, API, NVTX range, GPU) a layout shows; identity fields in JSON keep theirs.
NAME_CHARS = 1000


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` cut to at most ``limit`` characters, the cut said at its end; unchanged when it fits."""
    if len(text) <= limit:
        return text
    marker = f" … [{len(text)} characters, cut]"
    return text[:max(0, limit - len(marker))] + marker
