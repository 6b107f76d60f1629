"""Type-check the package, its rule pack and the example plugin with mypy, as they are installed.

The rule pack lives in the top-level folder ``rules/`` and is installed as ``nsys_rules.rules``
(pyproject: ``package-dir``). mypy finds a module by its folder and cannot follow setuptools'
editable import hook: ``mypy nsys_rules rules`` checks the pack as a top-level package ``rules``
(its absolute imports ``nsys_rules.rules.x`` left unresolved) and ``mypy -p nsys_rules.rules``
finds nothing. So this script lays out the installed shape in ``.mypy_cache/layout/``:
``nsys_rules/`` holds a link to each entry of the repository's ``nsys_rules/`` plus
``nsys_rules/rules`` -> ``rules/``, and ``nsys_rules_nvtx_coverage`` -> the example plugin's
package. It runs mypy there with the project's configuration (``[tool.mypy]`` in pyproject.toml)
and prints mypy's report with the repository's paths. The layout is rebuilt on every run and
stays at one place, so mypy's incremental cache (``.mypy_cache/``) serves the next run.

Usage:
    python tools/typecheck.py [MYPY OPTION...]

The exit code is mypy's: 0 clean, 1 type errors, 2 usage or crash. Needs mypy and the stubs of
the ``test`` extra (``pip install -e '.[test]'``); nothing else, no network.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CACHE = ROOT / ".mypy_cache"
LAYOUT = CACHE / "layout"
PLUGIN = ROOT / "plugins" / "nsys-rules-nvtx-coverage" / "src" / "nsys_rules_nvtx_coverage"

# Installed module folder (relative to the layout) -> its folder in the repository, longest first
# so that nsys_rules/rules/ is mapped before nsys_rules/.
MAPPING: list[tuple[str, Path]] = [
    ("nsys_rules/rules", ROOT / "rules"),
    ("nsys_rules", ROOT / "nsys_rules"),
    ("nsys_rules_nvtx_coverage", PLUGIN),
]
TARGETS = ["nsys_rules", "nsys_rules_nvtx_coverage"]


def _link(target: Path, link: Path) -> None:
    """A symlink, or a copy where the file system or the platform refuses symlinks."""
    try:
        link.symlink_to(target, target_is_directory=target.is_dir())
    except OSError:
        if target.is_dir():
            shutil.copytree(target, link, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy2(target, link)


def build_layout(layout: Path = LAYOUT) -> Path:
    """Lay out the installed package shape under ``layout`` (emptied first); returns it."""
    if (ROOT / "nsys_rules" / "rules").exists():
        raise SystemExit("nsys_rules/rules exists in the repository: the rule pack belongs in rules/ only")
    if layout.exists():
        shutil.rmtree(layout)
    package = layout / "nsys_rules"
    package.mkdir(parents=True)
    for entry in sorted((ROOT / "nsys_rules").iterdir()):
        if entry.name != "__pycache__":
            _link(entry, package / entry.name)
    _link(ROOT / "rules", package / "rules")
    _link(PLUGIN, layout / "nsys_rules_nvtx_coverage")
    return layout


def to_repository_paths(text: str, layout: Path = LAYOUT) -> str:
    """mypy's report with each layout path (relative to the layout, or absolute) made the repository's."""
    out = []
    for line in text.splitlines(keepends=True):
        for installed, source in MAPPING:
            absolute = f"{layout}{os.sep}{installed.replace('/', os.sep)}{os.sep}"
            line = line.replace(absolute, f"{source}{os.sep}")
        for installed, source in MAPPING:
            prefix = installed.replace("/", os.sep) + os.sep
            if line.startswith(prefix):
                line = f"{source.relative_to(ROOT)}{os.sep}{line[len(prefix):]}"
                break
        out.append(line)
    return "".join(out)


def main(argv: list[str]) -> int:
    layout = build_layout()
    command = [sys.executable, "-m", "mypy", "--config-file", str(ROOT / "pyproject.toml"),
               "--cache-dir", str(CACHE), *argv, *TARGETS]
    done = subprocess.run(command, cwd=layout, capture_output=True, text=True, check=False)
    sys.stdout.write(to_repository_paths(done.stdout, layout))
    sys.stderr.write(to_repository_paths(done.stderr, layout))
    return done.returncode


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
