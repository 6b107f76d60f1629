"""`nsys-rules stats` matches NVIDIA's `nsys stats` JSON for every trace and report we have a reference for.

References: ``<dir>/ref/<trace>_<report>.json`` beside the traces in ../shared/traces/h200 (our
H200 captures) and ../shared/corpus/public/converted (other people's reports, NVIDIA's output).
The comparison is the judge's own (``../shared/tools/parity.py``'s ``compare``: same columns,
same rows, numbers within nsys's printed rounding), run in-process on the exact JSON the CLI
prints, one test per trace with every report in it.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
from pathlib import Path
from types import ModuleType

import pytest

from nsys_rules.cli import main
from nsys_rules.inputs import open_trace
from nsys_rules.stats import REPORTS
from nsys_rules.stats.filters import stats_window
from nsys_rules.stats.output import render

from ..conftest import CORPUS, H200, SHARED, need_shared

PARITY_TOOL = SHARED / "tools" / "parity.py"
CONVERTED = CORPUS / "converted"


def _parity_tool() -> ModuleType:
    need_shared(PARITY_TOOL)
    spec = importlib.util.spec_from_file_location("shared_parity", PARITY_TOOL)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _traces(folder: Path) -> list[Path]:
    return sorted(folder.glob("*.sqlite")) if folder.exists() else [folder / "(absent).sqlite"]


def _problems(path: Path, tool: ModuleType) -> list[str]:
    problems: list[str] = []
    trace = open_trace(path)
    try:
        for report in tool.REPORTS:
            ref_file = path.parent / "ref" / f"{path.stem}_{report}.json"
            if not ref_file.exists():
                continue
            text = ref_file.read_text().strip()
            ref = json.loads(text) if text else []
            mine = json.loads(render(REPORTS[report].build(trace, None), "json"))
            problems += [f"{report}: {p}" for p in tool.compare(report, mine, ref)]
    finally:
        trace.close()
    return problems


@pytest.mark.parametrize("path", _traces(H200), ids=lambda p: p.stem)
def test_h200_stats_match_nsys(path):
    need_shared(path)
    assert _problems(path, _parity_tool()) == []


@pytest.mark.parametrize("path", _traces(CONVERTED), ids=lambda p: p.stem)
def test_public_corpus_stats_match_nsys(path):
    need_shared(path)
    assert _problems(path, _parity_tool()) == []


def test_every_h200_reference_is_checked(h200):
    """102 references: 17 traces x 6 reports, so no report silently drops out of the comparison."""
    refs = [p for p in (h200 / "ref").glob("*.json") if any(p.stem.endswith("_" + r) for r in REPORTS)]
    assert len(refs) == 102


def test_nvtx_filter_keeps_kernels_launched_from_worker_threads(h200):
    """engine_worker_thread: `serve_request` is on the main thread, every kernel launched from a worker."""
    trace = open_trace(h200 / "engine_worker_thread.sqlite")
    try:
        window = stats_window(trace, None, "serve_request")
        rows = REPORTS["cuda_gpu_kern_sum"].build(trace, window).rows
        everything = REPORTS["cuda_gpu_kern_sum"].build(trace, None).rows
    finally:
        trace.close()
    assert sum(r["Instances"] for r in rows) == 3752
    assert rows == everything


@pytest.mark.parametrize("report", ["cuda_api_sum", "cuda_gpu_kern_sum"])
def test_csv_is_byte_identical_to_nsys(corpus, report):
    """nsys 2023.1.2's own `--format csv` output for a Julia CUDA.jl trace, kept beside it in the corpus."""
    stem = "nsys2023.1.2-julia-cudajl-v100"
    expected = need_shared(corpus / f"{stem}.{report}.csv").read_text()
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(["stats", "--report", report, "--format", "csv", str(corpus / f"{stem}.sqlite")])
    assert code == 0
    assert out.getvalue() == expected


@pytest.mark.parametrize("args", [[], ["-r", "cuda_gpu_kern_sum,cuda_api_sum"], ["-r", "cuda_kern_exec_sum",
                                                                              "--report", "nvtx_sum"]])
def test_nsys_habits_give_nsys_numbers(h200, tmp_path, args):
    """`stats TRACE` (nsys's default set) and `-r` lists, written with `-o`, each file equal to NVIDIA's output."""
    tool = _parity_tool()
    path = h200 / "decode_eager.sqlite"
    code = main(["stats", *args, "-f", "json", "-o", str(tmp_path / "out"), str(path)])
    assert code == 0
    written = sorted(p.name for p in tmp_path.iterdir())
    reports = [r for a in args[1::2] for r in a.split(",")] or ["nvtx_sum", "cuda_api_sum", "cuda_gpu_kern_sum",
                                                                 "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum"]
    assert written == sorted(f"out_{r}.json" for r in reports)
    for report in reports:
        text = (h200 / "ref" / f"decode_eager_{report}.json").read_text().strip()
        mine = json.loads((tmp_path / f"out_{report}.json").read_text())
        assert tool.compare(report, mine, json.loads(text) if text else []) == [], report
