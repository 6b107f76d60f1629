"""Packaging conventions: the rule pack lives under nsys_rules, never as a top-level `rules`."""

from __future__ import annotations

import subprocess
import sys


def test_rules_is_not_a_top_level_package(tmp_path):
    code = "import importlib.util, sys; sys.exit(0 if importlib.util.find_spec('rules') is None else 1)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, "an installed top-level package called `rules` exists"


def test_builtin_pack_imports_as_nsys_rules_rules(tmp_path):
    code = "import nsys_rules.rules as r; print(r.__name__)"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and proc.stdout.strip() == "nsys_rules.rules"
