"""What an nsys export folder is: its kind by its name or by its files, and its Arrow values as Python values.

Kept apart from :mod:`.arrowdir` (which reads the folders) so that finding a trace on the command line
and in a folder of traces costs no read.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from nsys_rules.loaders.batches import check_supported
from nsys_rules.loaders.decoded_price import is_text_type
from nsys_rules.loaders.export import MAX_STRING, has_nsys_tables

#: Folder kinds by the file suffix nsys gives each table.
SUFFIXES = {"parquet": ".parquet", "arrow": ".arrow"}
#: Folder name endings ``nsys export`` uses by default for each kind.
FOLDER_ENDINGS = {".parquetdir": "parquet", ".arrowdir": "arrow"}


def folder_kind(path: Path) -> str | None:
    """``parquet`` or ``arrow`` when ``path`` looks like an nsys export folder (by name or by its files), else None."""
    by_name = FOLDER_ENDINGS.get(path.suffix.lower())
    if by_name is not None:
        return by_name
    try:
        if not path.is_dir():
            return None
        for kind, suffix in SUFFIXES.items():
            if (path / f"StringIds{suffix}").exists():
                return kind
        # No StringIds but nsys table files: still an export folder (a damaged one, said when opened).
        for entry in path.iterdir():
            for kind, suffix in SUFFIXES.items():
                if entry.name.endswith(suffix) and has_nsys_tables([entry.name]):
                    return kind
    except OSError:
        return None
    return None


def guess_kind(path: Path) -> str:
    """The kind of an export folder whose name does not say it: the suffix most of its files have."""
    try:
        names = [p.suffix for p in path.iterdir()]
    except OSError:
        return "parquet"
    return "arrow" if names.count(".arrow") > names.count(".parquet") else "parquet"


def py_values(array: Any, as_text: bool = False) -> list[Any]:
    """``array`` as Python values, text cut to MAX_STRING characters before Python sees it whole (bytes that
    are not UTF-8 show as U+FFFD); a dictionary's entries are made once and shared by their codes, so a long
    entry repeated costs one string. ``as_text``: binary values read as text too (StringIds)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    check_supported(array)
    if pa.types.is_dictionary(array.type):
        entries = py_values(array.dictionary, as_text)
        return [None if code is None else entries[code] for code in array.indices.to_pylist()]
    if not is_text_type(array.type):
        return list(array.to_pylist())
    text = as_text or not (pa.types.is_binary(array.type) or pa.types.is_large_binary(array.type)
                           or pa.types.is_fixed_size_binary(array.type)
                           or getattr(pa.types, "is_binary_view", lambda t: False)(array.type))
    cut = pc.binary_slice(array.cast(pa.large_binary()), 0, 4 * MAX_STRING).to_pylist()
    if not text:
        return cut
    return [None if v is None else v.decode("utf-8", "replace")[:MAX_STRING] for v in cut]
