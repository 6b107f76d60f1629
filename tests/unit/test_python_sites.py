"""Python call sites (issue 27, part 5): nsys's Python stacks decoded from NVTX payloads, on built traces.

TraceBuilder writes the schema rows and blobs the way nsys 2025.3 does (nsys_rules/testing/payloads.py);
the decoder reads the layout back from those rows. The real captures are tests/corpus/test_python_captures.py.
"""

from __future__ import annotations

import struct

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsys_rules.api import call_site, host_sites, python_stacks
from nsys_rules.api.analysis import call_site_rows, is_library_file
from nsys_rules.inputs import open_trace
from nsys_rules.model.python_payload import SAMPLING_SCHEMA, decode, read_layouts, signed64
from nsys_rules.stats import REPORTS
from nsys_rules.testing import MAIN_TID, TraceBuilder
from nsys_rules.testing import payloads
from tests.unit._folders import folder_from_sqlite

APP = "/home/me/app/train.py"
TORCH = "/venv/lib/python3.12/site-packages/torch/nn/modules/module.py"
GEN = "/venv/lib/python3.12/site-packages/transformers/generation/utils.py"
HOST_WORK = [("host_work", APP, 20), ("train_step", APP, 30), ("<module>", APP, 42)]
FORWARD = [("_call_impl", TORCH, 1773), ("forward", APP, 12), ("train_step", APP, 31), ("<module>", APP, 42)]
MS = 1_000_000


def _open(b: TraceBuilder, tmp_path, name: str = "t.sqlite"):
    return open_trace(b.write(tmp_path / name))


def _training(b: TraceBuilder, steps: int = 3) -> list[tuple[int, int]]:
    """Steps of 40 ms host work then 10 ms of forward, sampled every ms; the host blocks."""
    blocks = []
    for step in range(steps):
        t0 = 100 * MS * (step + 1)
        for k in range(40):
            b.python_sample(t0 + k * MS, HOST_WORK)
        for k in range(40, 50):
            b.python_sample(t0 + k * MS, FORWARD)
        b.kernel("gemm", t0 + 41 * MS, 5 * MS)
        blocks.append((t0, t0 + 40 * MS))
    return blocks


def test_host_sites_name_the_users_function_and_line(tmp_path):
    b = TraceBuilder()
    blocks = _training(b)
    trace = _open(b, tmp_path)
    [site] = host_sites(trace, blocks)
    assert (site.frame.function, site.frame.file, site.frame.line) == ("host_work", APP, 20)
    assert site.user_code and site.share == 1.0 and site.count == 120 and site.source == "samples"
    assert site.time_ns == 120 * MS  # samples x the sampling period
    assert python_stacks(trace).period_ns == MS
    # Whole steps: the forward's samples sit in a library frame; the site is the user's line above it.
    steps = pd.DataFrame({"start": [s for s, _ in blocks], "end": [s + 50 * MS for s, _ in blocks]})
    first, second = host_sites(trace, steps)
    assert first.frame.function == "host_work" and first.share == pytest.approx(0.8)
    assert (second.frame.function, second.frame.line) == ("forward", 12) and second.share == pytest.approx(0.2)
    assert second.inner is not None and (second.inner.function, second.inner.file) == ("_call_impl", TORCH)
    assert second.to_json() == {"function": "forward", "file": APP, "line": 12, "user_code": True, "count": 30,
                                "share": 0.2, "time_ns": 30 * MS, "source": "samples",
                                "inner": {"function": "_call_impl", "file": TORCH, "line": 1773}}
    assert str(second.frame) == f"forward ({APP}:12)"
    running = host_sites(trace, steps, innermost=True)
    assert [(s.frame.function, s.user_code, s.inner) for s in running] == [("host_work", True, None),
                                                                           ("_call_impl", False, None)]


def test_host_sites_fall_back_to_the_innermost_frame_without_user_code(tmp_path):
    b = TraceBuilder()
    for k in range(5):
        b.python_sample(MS + k * MS, [("wait", "/usr/lib/python3.12/threading.py", 359),
                                      ("_worker", "/usr/lib/python3.12/concurrent/futures/thread.py", 93),
                                      ("_bootstrap", "/usr/lib/python3.12/threading.py", 1032)])
    [site] = host_sites(_open(b, tmp_path), [(0, 10 * MS)])
    assert (site.frame.function, site.frame.line, site.user_code, site.inner) == ("wait", 359, False, None)


def test_host_sites_by_function_threads_overlaps_and_nothing_inside(tmp_path):
    b = TraceBuilder()
    for k in range(6):
        b.python_sample(MS * (k + 1), [("host_work", APP, 18 + k % 3), ("<module>", APP, 42)])
    for k in range(4):
        b.python_sample(MS * (k + 1), [("loader", "/home/me/app/data.py", 7)], tid=9999)
    trace = _open(b, tmp_path)
    by_line = host_sites(trace, [(0, 10 * MS)], tid=MAIN_TID)
    assert [s.frame.line for s in by_line] == [18, 19, 20] and sum(s.count for s in by_line) == 6
    [whole] = host_sites(trace, [(0, 10 * MS), (2 * MS, 5 * MS)], tid=MAIN_TID, by="function")  # overlap counted once
    assert (whole.frame.function, whole.count, whole.share) == ("host_work", 6, 1.0)
    both = host_sites(trace, ([0], [10 * MS]), tid=[MAIN_TID, 9999], by="function")
    assert [(s.frame.function, s.count) for s in both] == [("host_work", 6), ("loader", 4)]
    assert host_sites(trace, [(20 * MS, 30 * MS)]) == []
    with pytest.raises(ValueError, match="by="):
        host_sites(trace, [(0, 10 * MS)], by="file")


def test_call_site_from_the_backtrace_at_the_call(tmp_path):
    b = TraceBuilder()
    stack = [("__call__", GEN, 383), ("_sample", GEN, 3083), ("generate", GEN, 2802), ("run_generate", APP, 14),
             ("<module>", APP, 19)]
    for i in range(4):
        b.api("cudaStreamSynchronize_v3020", 10 * MS * (i + 1), 20_000, python_stack=stack)
    b.api("cudaStreamSynchronize_v3020", 60 * MS, 20_000, cuda_backtrace=True)  # a backtrace, no Python one
    trace = _open(b, tmp_path)
    api = trace.frame("api", ["start", "end", "tid", "name"])
    assert len(api) == 5  # the backtrace rows nsys adds (eventClass 67) are no calls of their own
    [site] = call_site(trace, api)
    assert (site.frame.function, site.frame.file, site.frame.line) == ("run_generate", APP, 14)
    assert site.inner is not None and (site.inner.function, site.inner.file, site.inner.line) == ("__call__", GEN, 383)
    assert site.count == 4 and site.share == pytest.approx(0.8) and site.time_ns == 80_000
    assert site.source == "backtraces"
    rows = call_site_rows(trace, api)
    assert list(rows["stack"]) == ["backtraces"] * 4 + [None] and list(rows.index) == list(api.index)


def test_call_site_from_samples_when_there_is_no_backtrace(tmp_path):
    b = TraceBuilder()
    item = [("train_step", APP, 36), ("<module>", APP, 42)]
    b.api("cudaStreamSynchronize_v3020", 10 * MS, 3 * MS)  # blocks 3 ms: sampled while it waits
    for k in range(1, 4):
        b.python_sample(10 * MS + k * MS - 100_000, item, state=payloads.BLOCKING_WAIT)
    b.api("cudaStreamSynchronize_v3020", 20 * MS, 10_000)  # 10 us: only a sample just before it
    b.python_sample(20 * MS - 300_000, [("loss_of", APP, 50), ("<module>", APP, 42)])
    b.api("cudaStreamSynchronize_v3020", 40 * MS, 10_000)  # nothing near it
    b.python_sample(30 * MS, item)
    trace = _open(b, tmp_path)
    api = trace.frame("api", ["start", "end", "tid"])
    assert list(call_site_rows(trace, api)["stack"]) == ["samples", "nearby samples", None]
    sites = call_site(trace, api)
    assert [(s.frame.line, s.source, s.count) for s in sites] == [(36, "samples", 1), (50, "nearby samples", 1)]
    assert sum(s.share for s in sites) == pytest.approx(2 / 3)  # the third call has no known site


def test_no_python_capture_and_an_export_without_blobs_say_why(tmp_path):
    plain = TraceBuilder()
    plain.kernel("k", MS, MS)
    data = python_stacks(_open(plain, tmp_path, "plain.sqlite"))
    assert not data.available and "no Python stacks" in data.reason and "profile --python" in data.fix
    blobless = TraceBuilder(include_blobs=False)
    _training(blobless, 1)
    trace = _open(blobless, tmp_path, "blobless.sqlite")
    data = python_stacks(trace)
    assert not data.available and "--include-blobs=true" in data.reason and "nsys export" in data.fix
    assert host_sites(trace, [(0, 10**12)]) == [] and call_site(trace, trace.frame("api", ["start", "end", "tid"])) == []
    sampled_only = TraceBuilder()
    _training(sampled_only, 1)
    note = python_stacks(_open(sampled_only, tmp_path, "samples.sqlite")).backtrace_note
    assert note and "--cudabacktrace" in note


def test_nsys_escapes_are_undone_and_library_paths_known(tmp_path):
    b = TraceBuilder()
    b.python_sample(MS, [("<lambda>", TORCH, 1097), ("<module>", APP, 8)])
    [site] = host_sites(_open(b, tmp_path), [(0, 2 * MS)])
    assert site.frame.function == "<module>" and site.inner is not None and site.inner.function == "<lambda>"
    for path in (TORCH, "/usr/lib/python3.12/threading.py", "<frozen runpy>", "/opt/conda/lib/python3.10/runpy.py",
                 "/opt/pytorch/torch/nn/functional.py", "C:\\Python312\\Lib\\threading.py", ""):
        assert is_library_file(path), path
    for path in (APP, "/workspace/torchtitan_fork/train.py", "/home/me/transformer_tools/run.py"):
        assert not is_library_file(path), path


def _layouts(trace):
    export = trace.export
    return read_layouts(
        export.rows("NVTX_PAYLOAD_SCHEMAS", ["domainId", "schemaId", "name", "payloadSize"]),
        export.rows("NVTX_PAYLOAD_SCHEMA_ENTRIES", ["domainId", "schemaId", "idx", "flags", "type", "name",
                                                    "arrayOrUnionDetail", "offset"]),
        export.rows("NVTX_PAYLOAD_ENUMS", ["domainId", "schemaId", "size"]))


def test_the_layout_comes_from_the_schema_rows(tmp_path):
    b = TraceBuilder()
    b.python_sample(MS, HOST_WORK)
    layouts = _layouts(_open(b, tmp_path))
    sampling = layouts[SAMPLING_SCHEMA]
    assert (sampling.schema_id, sampling.count.offset, sampling.frames_offset, sampling.frame_size) == (
        payloads.SAMPLING_SCHEMA_ID, 12, 16, 24)
    assert (sampling.state.offset, sampling.state.size) == (8, 4)  # the enum's size, from NVTX_PAYLOAD_ENUMS
    assert (sampling.function.offset, sampling.file.offset, sampling.line.offset, sampling.line.signed) == (0, 8, 16, True)
    # Arrow exports write domain -2 as an unsigned 64-bit id.
    assert signed64(2**64 - 2) == -2 and signed64(None) is None and signed64("x") is None
    moved = [(d, s, i, f, t, n, a, (o + 8 if o is not None and s == payloads.SAMPLING_FRAME_SCHEMA_ID else o))
             for d, s, i, f, t, n, _desc, a, o in payloads.ENTRY_ROWS]
    schemas = [(r[0], r[1], r[2], 32 if r[1] == payloads.SAMPLING_FRAME_SCHEMA_ID else r[6]) for r in payloads.SCHEMA_ROWS]
    layout = read_layouts(schemas, moved, [(r[0], r[1], r[4]) for r in payloads.ENUM_ROWS])[SAMPLING_SCHEMA]
    assert (layout.file.offset, layout.line.offset, layout.frame_size) == (16, 24, 32)  # a later nsys moving a field
    assert read_layouts([], [], []) == {}


def test_damaged_and_foreign_payloads_are_skipped_and_counted():
    layout = read_layouts([(r[0], r[1], r[2], r[6]) for r in payloads.SCHEMA_ROWS],
                          [(d, s, i, f, t, n, a, o) for d, s, i, f, t, n, _desc, a, o in payloads.ENTRY_ROWS],
                          [(r[0], r[1], r[4]) for r in payloads.ENUM_ROWS])[SAMPLING_SCHEMA]
    good = payloads.encode_stack(payloads.SAMPLING_SCHEMA_ID, 1, [(5, 6, 7), (8, 9, 10)])
    other = payloads.encode_stack(payloads.BACKTRACE_SCHEMA_ID, 1, [(5, 6, 7)])
    too_many = good[:44] + struct.pack("<I", 99) + good[48:]  # 99 frames in a payload of two
    # Two payloads on one mark: a foreign one first, then a stack (offsets past both list entries).
    body = good[32:]
    two = struct.pack("<QQQQQQQ", 2, 77, 4, 56, payloads.SAMPLING_SCHEMA_ID, len(body), 60) + b"\0" * 4 + body
    blobs = np.array([good, other, good[:50], too_many, None, b"", two, "text"], dtype=object)
    n = len(blobs)
    stacks = decode(blobs, np.arange(n) * 10, np.zeros(n, int), np.ones(n, int), layout)
    assert list(stacks.time) == [0, 60] and list(stacks.depth) == [2, 2] and stacks.undecodable == 2
    assert list(stacks.function) == [5, 8, 5, 8] and list(stacks.line) == [7, 10, 7, 10]


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_folder_exports_carry_the_payloads_as_nsys_types_them(tmp_path, kind):
    b = TraceBuilder()
    blocks = _training(b, 2)
    sqlite_path = b.write(tmp_path / "t.sqlite")
    folder = folder_from_sqlite(sqlite_path, tmp_path / f"t.{kind}dir", kind)
    # nsys types binaryData as a string column holding raw bytes (not UTF-8): rewrite it so.
    events = folder / f"NVTX_EVENTS.{kind}"
    table = pq.read_table(events) if kind == "parquet" else pa.ipc.open_stream(pa.OSFile(str(events))).read_all()
    index = table.schema.get_field_index("binaryData")
    raw = pa.array(table.column(index).to_pylist(), pa.large_binary()).view(pa.large_string())
    table = table.set_column(index, "binaryData", raw)
    if kind == "parquet":
        pq.write_table(table, events)
    else:
        with pa.OSFile(str(events), "wb") as sink, pa.ipc.new_stream(sink, table.schema) as out:
            out.write_table(table)
    [site] = host_sites(open_trace(folder), blocks)
    assert (site.frame.function, site.frame.line, site.count) == ("host_work", 20, 80)


def test_rules_see_each_call_once_and_stats_count_as_nsys_does(tmp_path):
    b = TraceBuilder()
    for i in range(3):
        b.api("cudaStreamSynchronize_v3020", 10 * MS * (i + 1), 20_000, cuda_backtrace=True)
    trace = _open(b, tmp_path)
    assert len(trace.frame("api", ["start"])) == 3
    # nsys stats counts --cudabacktrace's second row of each call, under its own name id: two rows of the same
    # name, as NVIDIA's cuda_api_sum prints for a real export (the parity tests check one).
    rows = REPORTS["cuda_api_sum"].build(trace, None).rows
    assert [(r["Name"], r["Num Calls"]) for r in rows] == [("cudaStreamSynchronize", 3)] * 2
    assert len(trace.frame("api", ["start"])) == 3  # the rules' frame is left as it was
