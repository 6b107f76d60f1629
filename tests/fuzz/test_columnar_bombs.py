"""``--max-memory`` holds for parquetdir/arrowdir exports whatever their files claim.

Each case (:mod:`tests.fuzz.columnar_bombs`) plants one attack in a copy of a small export and
runs ``check`` (and ``stats -r nvtx_sum``) under ``--max-memory 300M`` in a child process whose
peak resident memory is measured (``wait4``). The promise: exit 0, 1 or 3; exit 3 is one line
on stderr and nothing on stdout; a printed report is valid JSON against the schema; no traceback,
no file bytes in the message; and the peak stays under 600 MB.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.corpus.test_public_corpus import run_with_rss
from tests.fuzz.columnar_bombs import CASES
from tests.fuzz.harness import CliRun, check_run
from tests.unit._folders import step_exports

MB = 1 << 20
#: Cases that cannot fit 300 MB whatever the reader does (GBs decoded, or a footer that big parsed): each
#: must stop with the memory line SQLite's refusals print, naming the limit (``--max-memory``).
REFUSED = {"parquet-nvtx_dictionary_text", "arrow-nvtx_dictionary_text", "parquet-nvtx_compressed_text",
           "arrow-nvtx_compressed_text", "arrow-nvtx_view_text", "arrow-file_format_bomb", "parquet-footer_rows_lie",
           "parquet-footer_values_lie", "parquet-big_footer", "parquet-run_length_codes", "parquet-kernel_rows",
           "arrow-kernel_rows", "arrow-batch_rows_lie", "parquet-kernel_start_text", "arrow-kernel_start_text",
           "parquet-string_table_text", "arrow-string_table_text", "arrow-huge_schema_metadata"}
#: Cases that must be refused as unreadable, one line naming the file, never its bytes.
DAMAGED = {"parquet-link_outside": "symbolic link", "arrow-link_outside": "symbolic link",
           "parquet-truncated_table": "cannot read", "arrow-truncated_table": "cannot read",
           "parquet-text_file_as_table": "cannot read", "arrow-text_file_as_table": "cannot read",
           "arrow-body_length_lie": "cannot read", "parquet-footer_length_lie": "cannot read"}
#: The bound every case must keep under ``--max-memory 300M`` (the interpreter and imports take ~120 MB).
PEAK_LIMIT = 600 * MB

def run_measured(*args: str, timeout: float = 60) -> tuple[CliRun, int]:
    """``nsys-rules ARGS`` in a child process (``run_with_rss``): its output and its peak RSS in bytes."""
    code, out, err, peak = run_with_rss(*args, timeout=timeout)
    return CliRun(code, out, err), peak


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    """A small export (300 NVTX ranges, 600 kernels) as a parquetdir and as an arrowdir."""
    return step_exports(tmp_path_factory.mktemp("bases"), ranges=300, kernels=600)


def _promise(run: CliRun, peak: int, what: str) -> None:
    assert run.code in (0, 1, 3), (what, run.code, run.stderr[-2000:])
    check_run(run, json_output=run.stdout.startswith("{"))
    assert "SECRET-LINE" not in run.stderr + run.stdout, (what, run.stderr)
    assert peak < PEAK_LIMIT, f"{what}: peak RSS {peak / MB:.0f} MB (exit {run.code}: {run.stderr.strip()[:300]})"


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="peak RSS needs os.wait4")
@pytest.mark.parametrize("case", sorted(CASES))
def test_columnar_attack_keeps_the_promises(case, bases, tmp_path):
    kind, build = CASES[case]
    folder = build(bases[kind], tmp_path / f"t.{kind}dir")
    run, peak = run_measured("check", "--no-plugins", "--format", "json", "--max-memory", "300M", str(folder))
    _promise(run, peak, f"{case} check")
    if case in REFUSED:
        assert run.code == 3 and "(--max-memory)" in run.stderr and "needs about" in run.stderr, run.stderr
    if case in DAMAGED:
        assert run.code == 3 and DAMAGED[case] in run.stderr, run.stderr
    if case.endswith("link_inside"):
        assert run.code in (0, 1), run.stderr
    if run.code in (0, 1):
        report = json.loads(run.stdout)
        assert report["summary"]["exit_code"] == run.code
    stats, peak = run_measured("stats", "-r", "nvtx_sum", "--format", "csv", "--max-memory", "300M", str(folder))
    _promise(stats, peak, f"{case} stats")
