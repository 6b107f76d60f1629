"""Small modules with one job: no module of the package, the rule pack or the example plugin over 400 lines.

A module that grows past the limit is split by what its parts do (see how ``loaders/folders.py``,
``diff/pooled.py`` and ``testing/running.py`` came out of their modules); the few that must wait are
named below, each with why, and leave the list once they are split.
"""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
FOLDERS = (ROOT / "nsys_rules", ROOT / "rules", ROOT / "plugins")

#: Modules allowed over the limit for now (path from the repository root -> why).
OVER_THE_LIMIT: dict[str, str] = {}


def _modules() -> list[Path]:
    return sorted(p for folder in FOLDERS for p in folder.rglob("*.py") if "build" not in p.relative_to(ROOT).parts)


def _lines(path: Path) -> int:
    return len(path.read_text(encoding="utf-8").splitlines())


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(ROOT)))
def test_no_module_is_over_the_limit(path):
    name = path.relative_to(ROOT).as_posix()
    if name in OVER_THE_LIMIT:
        pytest.skip(f"{name}: {OVER_THE_LIMIT[name]}")
    assert _lines(path) <= MAX_LINES, f"{name} has {_lines(path)} lines (at most {MAX_LINES}): split it by job"


def test_the_allowed_ones_are_still_over_it():
    """An entry whose module was split (or is gone) leaves the list, so the list stays the truth."""
    stale = [name for name in OVER_THE_LIMIT if not (ROOT / name).is_file() or _lines(ROOT / name) <= MAX_LINES]
    assert stale == [], f"{stale}: no longer over {MAX_LINES} lines; remove them from OVER_THE_LIMIT"


def test_the_limit_is_seen():
    assert len(_modules()) > 100
    assert max(_lines(p) for p in _modules() if p.relative_to(ROOT).as_posix() not in OVER_THE_LIMIT) <= MAX_LINES
