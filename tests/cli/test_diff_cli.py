"""``diff`` from the command line on synthetic traces: runs per side, the JSON and its schema, exit codes."""

from __future__ import annotations

import json

import jsonschema

from tests.conftest import run_cli
from tests.unit.test_diff import program


def _runs(tmp_path, name, scales):
    return [str(program(tmp_path / f"{name}{i}.sqlite", scale=s)) for i, s in enumerate(scales)]


def test_schema_diff_prints_the_diff_schema():
    proc = run_cli("schema", "--diff")
    assert proc.returncode == 0, proc.stderr
    schema = json.loads(proc.stdout)
    assert "decision" in schema["required"] and schema["properties"]["schema_version"]["const"] == "1.0"


def test_several_runs_per_side_pool_and_the_json_validates(tmp_path):
    base = _runs(tmp_path, "b", (1.0, 1.01, 0.99))
    new = _runs(tmp_path, "n", (1.2, 1.21, 1.19))
    proc = run_cli("diff", *base, "--new", *new, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    jsonschema.validate(data, json.loads(run_cli("schema", "--diff").stdout))
    assert data["runs"] == {"base": 3, "new": 3} and data["base"]["paths"] == base
    step = data["change"]["step"]
    assert step["noise"]["between_run"] == "measured" and step["noise"]["between_run_sd_ns"] > 0
    assert 19 < step["estimate_pct"] < 21 and step["low_pct"] > 5 and step["verdict"] == "slower"
    assert data["decision"] == {"verdict": "slower", "gate": "fail", "exit_code": 1, "line": data["verdict"]["line"]}
    assert data["decision"]["line"].startswith("slower: time per step +") and "runs 3 vs 3" in data["decision"]["line"]
    # Every row carries its own interval, and rows are ranked by the size of their change.
    effects = [abs(r["median"]["estimate_ns"]) for r in data["parts"]]
    assert effects == sorted(effects, reverse=True) and all("median" in r for r in data["classes"])


def test_the_same_runs_on_both_sides_pass_and_say_no_change(tmp_path):
    # Runs that differ by 0.2 %: the interval lies within +-1 %, so "no change" (runs 1 % apart would be inconclusive).
    base = _runs(tmp_path, "b", (1.0, 1.002, 0.998))
    again = _runs(tmp_path, "a", (1.001, 0.999, 1.0005))  # other runs: never the same steps to the ns as BASE's
    for fmt in ("table", "markdown"):
        # 200 columns: the verdict on one line (piped, the table is laid out for 80 and wraps it).
        proc = run_cli("diff", *base, "--new", *again, "--format", fmt, env={"COLUMNS": "200"})
        assert proc.returncode == 0, proc.stderr
        line = proc.stdout.splitlines()[0] if fmt == "markdown" else \
            next(x for x in proc.stdout.splitlines() if x.startswith("verdict: "))
        assert "no change: time per step" in line and "runs 3 vs 3" in line and "gate 5 %: pass" in line
    assert proc.stdout.startswith("## nsys-rules diff ✅ no change")


def test_the_two_argument_form_still_works_and_three_traces_need_new(tmp_path):
    a, b = _runs(tmp_path, "x", (1.0, 1.2))
    proc = run_cli("diff", a, b, "--format", "json")
    assert proc.returncode in (0, 1), proc.stderr
    assert json.loads(proc.stdout)["runs"] == {"base": 1, "new": 1}
    proc = run_cli("diff", a, b, a)
    assert proc.returncode == 2 and "--new" in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
