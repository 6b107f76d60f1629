"""Python call sites on real captures (issue 27, part 5).

tests/data/python: two programs captured on an H200 with `nsys-rules profile --python`'s flags and
exported with the NVTX payloads (its README). ../shared/traces/python: the first Python-sampling
captures, exported without them: they must say so, not pretend.
"""

from __future__ import annotations

import lzma
import shutil
import sqlite3
from pathlib import Path

import numpy as np
import pytest

from nsys_rules.api import call_site, host_sites, python_stacks
from nsys_rules.api.analysis import ANY_KERNEL_LAUNCH_APIS, call_site_rows, in_set
from nsys_rules.inputs import open_trace
from tests.conftest import SHARED, need_shared, run_cli, validate_report

HERE = Path(__file__).resolve().parents[1] / "data" / "python"


def _unxz(source: Path, folder: Path) -> Path:
    target = folder / source.name[: -len(".xz")]
    with lzma.open(source) as src, open(target, "wb") as dst:
        shutil.copyfileobj(src, dst)
    return target


@pytest.fixture(scope="module")
def captures(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("python")
    return {p.name.split(".")[0]: _unxz(p, folder) for p in sorted(HERE.glob("*.sqlite.xz"))}


def _host_blocks(trace) -> tuple[list[tuple[int, int]], int]:
    """Each `train_step N` range from its start to its first kernel launch (the GPU waits for the host there)."""
    nvtx = trace.frame("nvtx", ["start", "end", "name", "tid"])
    steps = nvtx[nvtx["name"].astype(str).str.startswith("train_step ")].sort_values("start")
    api = trace.frame("api", ["start", "tid"])
    launches = api[np.asarray(in_set(trace.api_names(), ANY_KERNEL_LAUNCH_APIS))]
    blocks = []
    for step in steps.itertuples():
        mine = launches[(launches["tid"] == step.tid) & (launches["start"] >= step.start) & (launches["start"] <= step.end)]
        blocks.append((int(step.start), int(mine["start"].min())))
    return blocks, int(steps["tid"].iloc[0])


def test_the_host_block_before_each_steps_first_launch_is_host_work(captures):
    trace = open_trace(captures["py_train"])
    blocks, tid = _host_blocks(trace)
    assert len(blocks) == 6
    assert all(38e6 < end - start < 45e6 for start, end in blocks[1:])  # 40 ms of host_work, the batch copy, a little forward
    for block in blocks[1:]:  # the first step also warms up (cuBLAS, the allocator): its own mix
        top = host_sites(trace, [block], tid=tid)[0]
        assert (top.frame.function, Path(top.frame.file).name, top.frame.line) == ("host_work", "train_py.py", 20)
        assert top.user_code and top.share >= 0.8 and top.inner is None
    [work, *rest] = host_sites(trace, blocks[1:], tid=tid, by="function")
    assert work.frame.function == "host_work" and work.share >= 0.9 and work.source == "samples"
    assert 150e6 < work.time_ns < 210e6  # ~40 samples of 1 ms per step, five steps
    assert {s.frame.function for s in rest} <= {"make_batch", "train_step"}


def test_the_training_loss_item_sync_is_named(captures):
    trace = open_trace(captures["py_train"])
    blocks, tid = _host_blocks(trace)
    api = trace.frame("api", ["start", "end", "tid"])
    names = trace.api_names().to_numpy()
    syncs = api[(names == "cudaStreamSynchronize") & (api["start"] >= blocks[1][0]).to_numpy()]
    [site] = call_site(trace, syncs)
    assert (site.frame.function, Path(site.frame.file).name, site.frame.line) == ("train_step", "train_py.py", 36)
    assert site.source == "backtraces" and site.share == 1.0 and site.count == len(syncs) == 5


def test_the_decode_syncs_are_made_in_generate_under_the_users_line(captures):
    trace = open_trace(captures["py_decode"])
    data = python_stacks(trace)
    assert data.reason is None and data.backtrace_note is None and data.undecodable == 0
    assert len(data.backtraces) == 104 and len(data.samples) > 10_000 and data.period_ns == pytest.approx(1e6, rel=0.05)
    api = trace.frame("api", ["start", "end", "tid"])
    syncs = api[trace.api_names().to_numpy() == "cudaStreamSynchronize"]
    sites = call_site(trace, syncs)
    assert (call_site_rows(trace, syncs)["stack"] == "backtraces").all()
    generate, load = sites
    assert (generate.frame.function, Path(generate.frame.file).name, generate.frame.line) == ("run_generate",
                                                                                            "decode_py.py", 14)
    assert generate.count >= 36 and generate.user_code  # one readback per token of both generate() calls, and more
    assert generate.inner is not None and generate.inner.file.endswith("transformers/generation/utils.py")
    assert (load.frame.function, load.frame.line) == ("<module>", 8)  # model.cuda(): the weights' copies
    assert sum(s.share for s in sites) == pytest.approx(1.0)


def test_the_cuda_backtrace_rows_are_not_calls(captures):
    path = captures["py_decode"]
    db = sqlite3.connect(path)
    calls, doubles = db.execute("SELECT sum(eventClass != 67), sum(eventClass = 67) FROM CUPTI_ACTIVITY_KIND_RUNTIME").fetchone()
    db.close()
    assert doubles == 104
    trace = open_trace(path)
    assert len(trace.frame("api", ["start"])) == calls
    assert int(np.sum(trace.api_names().to_numpy() == "cudaStreamSynchronize")) == 103


@pytest.mark.parametrize("name", ["p_train_loader_pysample", "p_decode_eager_pysample"])
def test_the_shared_captures_were_exported_without_their_frames(name, tmp_path):
    source = need_shared(SHARED / "traces" / "python") / f"{name}.sqlite.xz"
    trace = open_trace(_unxz(source, tmp_path))
    data = python_stacks(trace)
    # nsys recorded the samples (one mark each), but `nsys export` wrote no payload without --include-blobs=true.
    nvtx = trace.frame("nvtx", ["event_type", "payload"])
    assert int((nvtx["event_type"] == 34).sum()) > 10_000 and nvtx["payload"].isna().all()
    assert not data.available and "--include-blobs=true" in data.reason and "--include-blobs=true" in data.fix
    assert host_sites(trace, [(0, 2**62)]) == []


def _check(path: Path, fmt: str) -> dict:
    import json

    proc = run_cli("check", str(path), "--format", fmt, "--no-plugins")
    assert proc.returncode == 0, proc.stderr
    return validate_report(proc.stdout) if fmt == "json" else json.loads(proc.stdout)


def test_the_report_names_the_line_of_the_training_sync_and_of_the_host_block(captures):
    findings = {f["rule"]: f for f in _check(captures["py_train"], "json")["findings"]}
    sync, prep = findings["sync-stall"], findings["input-prep"]
    assert sync["location"]["source"] == {"file": "/tmp/py27/train_py.py", "line": 36, "function": "train_step"}
    assert "`train_step` (/tmp/py27/train_py.py:36)" in sync["message"] and "100 % of them" in sync["message"]
    assert prep["location"]["source"] == {"file": "/tmp/py27/train_py.py", "line": 20, "function": "host_work"}
    results = {r["ruleId"]: r for r in _check(captures["py_train"], "sarif")["runs"][0]["results"]}
    [related] = results["sync-stall"]["relatedLocations"]
    assert related["physicalLocation"] == {"artifactLocation": {"uri": "file:///tmp/py27/train_py.py"},
                                           "region": {"startLine": 36}}


def test_the_decode_sync_is_named_with_the_library_line_under_it(captures):
    [sync] = [f for f in _check(captures["py_decode"], "json")["findings"] if f["rule"] == "sync-stall"]
    assert sync["location"]["source"]["line"] == 14 and sync["location"]["source"]["function"] == "run_generate"
    assert "through `__call__` (transformers/generation/utils.py:383)" in sync["message"]
