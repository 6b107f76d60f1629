"""Names cut to fit a column and still told apart.

C++ kernel names share long heads: three different kernels all start
``void at::native::vectorized_elementwise_kernel<(int)8, at::native::`` and differ only in the
functor further in. Cut at the same width, they read the same. :func:`distinct_names` keeps the
head and, for names a plain cut would merge, the part where each differs from the others.
"""

from __future__ import annotations

from os.path import commonprefix
from typing import Iterable

from nsys_rules.formatters.layout import one_line, shorten


def distinct_names(names: Iterable[str], limit: int) -> dict[str, str]:
    """Each name as at most ``limit`` characters (one visible line); names that differ stay different."""
    full = {name: " ".join(one_line(name).split()) for name in dict.fromkeys(names)}
    shown = {name: shorten(text, limit) for name, text in full.items()}
    groups: dict[str, list[str]] = {}
    for name, text in shown.items():
        groups.setdefault(text, []).append(name)
    for same in groups.values():
        if len(same) < 2:
            continue
        for name in same:
            text = full[name]
            others = [full[o] for o in same if o != name and full[o] != text]
            if not others:
                continue
            at = max(len(commonprefix([text, o])) for o in others)  # where this one differs from the nearest
            shown[name] = _around(text, at, limit)
    # Names equal after cleaning (or too alike to part in ``limit``) are numbered, never merged.
    seen: dict[str, int] = {}
    for name in shown:
        count = seen.get(shown[name], 0)
        seen[shown[name]] = count + 1
        if count:
            shown[name] = f"{shown[name][: max(1, limit - 5)]} [{count + 1}]"
    return shown


def _around(text: str, at: int, limit: int) -> str:
    """``text``'s head (through its template's ``<``), "…", then the argument where it differs from ``at`` on."""
    if len(text) <= limit or at < limit // 2:
        return shorten(text, limit)
    bracket = text.find("<")
    head, end = text[:limit // 3], limit // 3
    if 0 < bracket < 2 * limit // 3:
        head, end = text[:bracket + 1], bracket + 1
    elif 0 < bracket:  # the template's own name, without its return type and namespaces
        own = text[:bracket].replace(" ", "::").rsplit("::", 1)[-1] + "<"
        if len(own) <= limit // 2:
            head, end = own, bracket + 1
    start = at
    while start > end and text[start - 1] not in " ,<(":  # from the start of the differing argument's name
        start -= 1
    if start <= end:
        return shorten(text, limit)
    room = limit - len(head) - 1
    tail = text[start:start + room]
    if start + room < len(text):
        tail = tail[:-1] + "…"
    return head + "…" + tail
