"""Issue 43 item 4: diff that knows its inputs.

One run given twice (the same file, a hard link, the same capture as .sqlite and .parquetdir) was pooled as
two independent runs: the between-run variation "measured" as zero turned an inconclusive pair into a
confident verdict. Damage that check reports (kernels with NULL ends) changed the verdict silently: a new
trace whose slow kernels lost their ends looked faster.
"""

from __future__ import annotations

import os
import random
import shutil
import sqlite3
from pathlib import Path

import pytest

from nsys_rules.testing import TraceBuilder
from tests.fuzz.harness import run_cli_inprocess
from tests.security.ci_safety import strict_loads
from tests.unit._folders import folder_from_sqlite

STEP = 1_000_000


def _run(path: Path, gemm_ns: int, seed: int) -> Path:
    rng = random.Random(seed)
    b = TraceBuilder()
    for i in range(40):
        t = i * STEP
        b.nvtx("step", t, t + 900_000, registered=False)
        b.kernel("gemm", t + 10_000, gemm_ns + rng.randint(0, 20_000))
        b.kernel("small", t + 300_000, 5_000)
        b.sync(t + 320_000, 10_000)
    return b.write(path)


def _null_ends(source: Path, target: Path) -> Path:
    """A copy of ``source`` whose every other gemm kernel has a NULL end (the table rebuilt without NOT NULL)."""
    shutil.copy(source, target)
    con = sqlite3.connect(target)
    con.executescript(
        "CREATE TABLE k2 AS SELECT * FROM CUPTI_ACTIVITY_KIND_KERNEL; DROP TABLE CUPTI_ACTIVITY_KIND_KERNEL; "
        "ALTER TABLE k2 RENAME TO CUPTI_ACTIVITY_KIND_KERNEL; "
        'UPDATE CUPTI_ACTIVITY_KIND_KERNEL SET "end" = NULL WHERE rowid % 4 = 1;')
    con.commit()
    con.close()
    return target


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("diffin")
    base = _run(folder / "a.sqlite", 400_000, 1)
    paths = {"a": base, "b": _run(folder / "b.sqlite", 400_000, 2), "new": _run(folder / "n.sqlite", 600_000, 3)}
    os.link(base, folder / "a_link.sqlite")
    shutil.copy(base, folder / "a_copy.sqlite")
    folder_from_sqlite(base, folder / "a.parquetdir", "parquet")
    paths.update({"link": folder / "a_link.sqlite", "copy": folder / "a_copy.sqlite",
                  "parquet": folder / "a.parquetdir", "damaged": _null_ends(paths["new"], folder / "nd.sqlite")})
    return paths


def _diff(*args: str) -> tuple[int, dict, str]:
    run = run_cli_inprocess("diff", *args, "--format", "json")
    assert "Traceback" not in run.stderr and "internal error" not in run.stderr, run.stderr
    return run.code, (strict_loads(run.stdout) if run.stdout else {}), run.stderr


@pytest.mark.parametrize("twin", ["a", "link", "copy", "parquet"])
def test_one_run_given_twice_in_a_side_counts_once(runs, twin):
    """BASE a + its twin against NEW: pooled as one run (runs 1 vs 1), with a note naming the repeat."""
    code, data, _ = _diff(str(runs["a"]), str(runs[twin]), "--new", str(runs["new"]))
    assert code == 0
    assert data["runs"] == {"base": 1, "new": 1}
    assert any("is the same run as" in note and "counted once" in note for note in data["notes"]), data["notes"]
    single = _diff(str(runs["a"]), str(runs["new"]))[1]
    assert data["change"]["step"] == single["change"]["step"]  # exactly the one-run comparison


def test_two_different_runs_are_two(runs):
    code, data, _ = _diff(str(runs["a"]), str(runs["b"]), "--new", str(runs["new"]))
    assert code in (0, 1) and data["runs"] == {"base": 2, "new": 1}
    assert not any("same run" in note for note in data["notes"])


@pytest.mark.parametrize("twin", ["a", "link", "parquet"])
def test_the_same_run_on_both_sides_says_so(runs, twin):
    """A run compared with itself: a zero change, and a note says it measures nothing."""
    code, data, _ = _diff(str(runs["a"]), str(runs[twin]))
    assert code == 0 and data["change"]["step"]["estimate_ns"] == 0 and data["decision"]["gate"] == "pass"
    assert any("is the same run as BASE" in n and "measures nothing" in n for n in data["notes"]), data["notes"]


def test_damaged_new_is_refused_without_force(runs):
    """Before: NEW with NULL kernel ends was compared as if whole (check reports the damage, diff said nothing)."""
    code, data, err = _diff(str(runs["a"]), str(runs["damaged"]))
    assert code == 3 and data == {} and err.count("\n") == 1
    assert "NEW" in err and "NULL" in err and "dropped" in err and "--force" in err


def test_damaged_new_under_force_voids_the_verdict(runs):
    code, data, _ = _diff(str(runs["a"]), str(runs["damaged"]), "--force")
    assert code == 0 and data["decision"]["verdict"] == "inconclusive" and data["decision"]["gate"] == "pass"
    assert all(data["change"][name]["verdict"] == "inconclusive" for name in data["change"])
    assert any("damaged" in note and "void" in note for note in data["notes"]), data["notes"]


def test_damaged_base_is_refused_too(runs):
    code, _, err = _diff(str(runs["damaged"]), str(runs["a"]))
    assert code == 3 and "BASE" in err and "damaged" in err
