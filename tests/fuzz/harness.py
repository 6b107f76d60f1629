"""Run the CLI in process and judge one run of a hostile input.

In process (``nsys_rules.cli.main`` with stdout/stderr captured) instead of one subprocess a
case: the fuzz suite runs thousands of inputs and a subprocess costs ~0.5 s of imports each.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path

from nsys_rules.cli import main

#: Exit codes a run may end with: 0/1 ran, 3 unusable input, 4 a rule failed (2, a usage error, only
#: for a --filter-time that selects nothing of the damaged trace: see check_run).
ALLOWED_EXITS = frozenset({0, 1, 3, 4})


@dataclass(frozen=True)
class CliRun:
    """Exit code and captured output of one in-process CLI run."""

    code: int
    stdout: str
    stderr: str


def run_cli_inprocess(*args: str) -> CliRun:
    """``nsys-rules ARGS`` in this process, output captured."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(list(args))
    return CliRun(int(code), out.getvalue(), err.getvalue())


def strict_json(text: str) -> dict:
    """Parse ``text`` as standard JSON, as a strict parser does (NaN, Infinity and lone surrogates rejected)."""
    from tests.security.ci_safety import strict_loads

    return strict_loads(text)


def check_run(run: CliRun, *, json_output: bool = True) -> dict | None:
    """Assert the contract of any run and return the parsed JSON (None when nothing was printed).

    Exit code in {0, 1, 3, 4} (or 2 for a time filter that selects nothing); never a traceback;
    exit 2 and 3 print exactly one line on stderr and nothing on stdout; printed JSON is complete,
    standard and valid against the schema.
    """
    filter_miss = (run.code == 2 and run.stderr.startswith("nsys-rules: --filter-time ")
                   and " selects nothing: " in run.stderr)
    assert run.code in ALLOWED_EXITS or filter_miss, (run.code, run.stderr[-2000:])
    assert "Traceback" not in run.stderr, run.stderr[-4000:]
    assert "internal error" not in run.stderr, run.stderr[-2000:]
    if run.code in (2, 3):
        assert run.stdout == "", run.stdout[:500]
        lines = run.stderr.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("nsys-rules: "), run.stderr
        return None
    if not json_output or not run.stdout:
        return None
    data = strict_json(run.stdout)
    _validator().validate(data)
    assert data["summary"]["exit_code"] == run.code
    return data


@functools.lru_cache(maxsize=1)
def _validator():  # type: ignore[no-untyped-def]
    # Built once: jsonschema.validate() re-checks the schema itself on every call (0.18 s).
    import jsonschema

    from nsys_rules.formatters.json_out import report_schema

    schema = report_schema()
    return jsonschema.validators.validator_for(schema)(schema)


def digest(path: Path) -> str:
    """sha256 of a file's bytes."""
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def folder_listing(folder: Path) -> list[str]:
    """Names in ``folder``, sorted (to spot a -journal/-wal/-shm left behind)."""
    return sorted(p.name for p in Path(folder).iterdir())
