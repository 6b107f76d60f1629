"""The built-in loaders: nsys SQLite exports and ``parquetdir``/``arrowdir`` export folders.

Registered through the very same hook as a plugin's loaders (``register_loaders``), as the first plugin
(:data:`nsys_rules.plugin_manager.BUILTIN_PLUGINS`), so that their suffixes are taken before any plugin
asks. Each loader opens the file as an :class:`~nsys_rules.loaders.export.Export`;
:func:`nsys_rules.inputs.open_trace` hands it the memory meter and makes the
:class:`~nsys_rules.model.trace.Trace`. A folder loader also ``claims`` an export folder by its files
when its name does not say what it is. ``.nsys-rep`` reports are no loader: nsys exports them to one
of these formats first (:mod:`nsys_rules.inputs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from nsys_rules.hooks import hookimpl
from nsys_rules.loaders.arrowdir import ArrowDirExport
from nsys_rules.loaders.folders import folder_kind
from nsys_rules.loaders.export import Export
from nsys_rules.loaders.sqlite import SqliteExport


def open_sqlite(path: Path) -> Export:
    """An nsys SQLite export (``nsys export --type=sqlite``), opened read-only."""
    return SqliteExport(path)


@dataclass(frozen=True)
class FolderLoader:
    """An nsys export folder of one kind (``parquet``: ``--type=parquetdir``; ``arrow``: ``--type=arrowdir``)."""

    kind: str

    def __call__(self, path: Path) -> Export:
        """The folder opened as an export of :attr:`kind`."""
        return ArrowDirExport(path, self.kind)

    def claims(self, path: Path) -> bool:
        """Whether ``path`` is an export folder of this kind by its files, whatever its name."""
        return folder_kind(path) == self.kind


#: Suffix -> loader, in the order they are tried for a path no suffix names (the folders by their files).
LOADERS: dict[str, Callable[[Path], Export]] = {
    ".sqlite": open_sqlite,
    ".parquetdir": FolderLoader("parquet"),
    ".arrowdir": FolderLoader("arrow"),
}


@hookimpl
def register_loaders() -> dict[str, Callable[[Path], Export]]:
    """The built-in loaders (see :data:`LOADERS`)."""
    return dict(LOADERS)
