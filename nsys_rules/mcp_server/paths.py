"""Which paths a tool call may read: the only trace input an agent gives the server.

A path is text from the agent (a model, steered by whatever it read), so it is checked before
anything opens it: no NUL, no empty or absurdly long value, no ``..`` part, and under ``--root``
the path (symlinks resolved, so a link planted inside the folder cannot point out of it) must lie
inside that folder. A relative path is taken from ``--root`` when one is set, else from the
server's working folder. The loaders then open the resolved path read-only, as the CLI does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from nsys_rules.errors import InputError, UsageError
from nsys_rules.textsafe import clip_value

#: Longest path text accepted (Linux's PATH_MAX): anything longer cannot name a file.
MAX_PATH = 4096
#: Suffixes a tool call may not read: a ``.nsys-rep`` needs nsys to export it, which writes a file.
REFUSED_SUFFIXES = (".nsys-rep", ".qdrep", ".qdstrm")


@dataclass(frozen=True)
class PathPolicy:
    """Where tool calls may read: ``root`` (resolved) confines them; None lets them read any path."""

    root: Path | None = None

    @staticmethod
    def confined_to(root: str | None) -> PathPolicy:
        """The policy of ``--root DIR`` (None: no confinement); a root that is no folder is a usage error."""
        if root is None:
            return PathPolicy()
        folder = Path(root).expanduser()
        if not folder.is_dir():
            raise UsageError(f"--root {clip_value(str(root), 200)!r} is not a folder")
        return PathPolicy(folder.resolve(strict=True))

    def trace(self, value: object, what: str = "trace") -> Path:
        """The resolved path of one trace argument, checked; raises UsageError (exit 2) or InputError (exit 3)."""
        if not isinstance(value, str) or not value.strip():
            raise UsageError(f"{what}: give the path of an nsys export (.sqlite file or parquetdir/arrowdir folder)")
        if "\0" in value or len(value) > MAX_PATH:
            raise UsageError(f"{what}: {clip_value(value, 80)!r} is no path (a NUL byte, or longer than {MAX_PATH})")
        given = Path(value).expanduser() if self.root is None else Path(value)
        if ".." in given.parts:
            raise UsageError(f"{what}: {clip_value(value, 200)!r} has a '..' part; name the trace without one")
        base = self.root if self.root is not None else Path.cwd()
        joined = given if given.is_absolute() else base / given
        try:
            resolved = joined.resolve(strict=True)
        except (OSError, RuntimeError):  # missing, a symlink loop, a part that is no folder
            if self.root is not None and not _inside(Path(os.path.abspath(joined)), self.root):
                raise UsageError(f"{what}: {clip_value(value, 200)!r} is outside the server's --root "
                                 f"{clip_value(str(self.root), 200)}") from None
            raise InputError(f"{what}: {clip_value(value, 200)}: no such file or folder") from None
        if self.root is not None and not _inside(resolved, self.root):
            raise UsageError(f"{what}: {clip_value(value, 200)!r} is outside the server's --root "
                             f"{clip_value(str(self.root), 200)} (symbolic links resolved)")
        if resolved.name.lower().endswith(REFUSED_SUFFIXES):
            raise UsageError(f"{what}: {clip_value(resolved.name, 120)} is an nsys report; the server reads exports only "
                             "(nsys export --type=sqlite REPORT writes one)")
        return resolved

    def output_folder(self) -> Path:
        """Where an allowed capture writes its report: under the root, else the working folder."""
        return (self.root or Path.cwd()) / "nsys-rules-captures"


def _inside(path: Path, root: Path) -> bool:
    return path == root or root in path.parents
