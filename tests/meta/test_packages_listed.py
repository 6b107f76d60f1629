"""The wheel ships every subpackage: pyproject's explicit ``packages`` list must name each one.

A package missing from the list still imports in an editable install (the tests' setup) but is
absent from a real ``pip install .``: that is how ``nsys_rules.commands`` once went missing.
"""

from __future__ import annotations

import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib

ROOT = Path(__file__).resolve().parents[2]


def _declared() -> tuple[set[str], dict[str, str]]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    return set(config["packages"]), dict(config.get("package-dir", {}))


def test_every_package_folder_is_listed():
    packages, package_dir = _declared()
    found = set()
    for package, folder in package_dir.items():
        base = ROOT / folder
        for init in base.rglob("__init__.py"):
            if "__pycache__" in init.parts:
                continue
            rel = init.parent.relative_to(base)
            name = ".".join((package, *rel.parts))
            # A sub-folder mapped elsewhere (nsys_rules.rules -> rules/) is checked under its own mapping.
            if not any(name.startswith(p + ".") or name == p for p in package_dir if p != package and len(p) > len(package)):
                found.add(name)
    missing = sorted(found - packages)
    assert not missing, f"pyproject [tool.setuptools] packages lacks {missing}: a real install would not ship them"


def test_stats_and_commands_ship():
    packages, _ = _declared()
    assert {"nsys_rules.commands", "nsys_rules.stats"} <= packages
