"""Shared fixtures: where the real traces are, and JSON validation against the shipped schema."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED = Path(os.environ.get("NSYS_RULES_SHARED", ROOT.parent / "shared"))
H200 = SHARED / "traces" / "h200"
CORPUS = SHARED / "corpus" / "public"
EXAMPLE = ROOT / "examples" / "rust_release_build.sqlite"

# pytest-xdist's workers set COLUMNS/LINES to 80x24; the CLI lays out for COLUMNS when it is set, and the tests
# expect what a pipe gets (no terminal). A test that wants a width sets COLUMNS itself.
for _name in ("COLUMNS", "LINES"):
    os.environ.pop(_name, None)


def need_shared(path: Path = H200) -> Path:
    """Skip the calling test, with the reason, when ../shared is not beside the checkout."""
    if not path.exists():
        pytest.skip(f"{path} is absent (the shared traces sit beside the checkout in CI; a fresh clone has none)")
    return path


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per CPU, at most 4 (each may hold a few hundred MB while it checks a big trace)."""
    return max(1, min(4, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1))


@pytest.fixture
def h200() -> Path:
    return need_shared(H200)


@pytest.fixture
def corpus() -> Path:
    return need_shared(CORPUS)


def run_cli(*args: str, cwd: Path | None = None, env: dict[str, str] | None = None,
            timeout: int = 300) -> subprocess.CompletedProcess[str]:
    """Run ``nsys-rules`` as a subprocess, the way users do; past ``timeout`` it is killed with what it started
    and the test fails saying so (:mod:`tests.bounded`)."""
    from tests import bounded

    full_env = dict(os.environ)
    full_env.update(env or {})
    return bounded.run([sys.executable, "-m", "nsys_rules", *args], capture_output=True, text=True,
                       cwd=cwd or ROOT, env=full_env, timeout=timeout)


def validate_report(text: str) -> dict:
    """Parse a ``check --format json`` output and validate it against ``nsys-rules schema``."""
    from nsys_rules.formatters.json_out import report_schema

    from tests.security.ci_safety import strict_loads

    data = strict_loads(text)  # as a strict parser reads it: no NaN/Infinity, no lone surrogate
    jsonschema.validate(data, report_schema())
    return data
