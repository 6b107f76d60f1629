"""Header walks bounded by the file: a forged Parquet footer or page header is damage, found at once.

The memory guard walks Parquet page headers before any read (:mod:`nsys_rules.loaders.parquet_layout`).
The issue's 1.9 MB file pointed 200 row groups' chunks at one 1 MB run of zero bytes; a zero byte is a
complete, empty Thrift struct, so the walk advanced one byte a step and check, stats and diff hung for
about an hour. Now chunk ranges outside the file's data or sharing bytes, and page headers without their
required fields, are damage: exit 3, one line, in well under 2 s; and a walk of honest-looking but tiny
pages reads each byte of its chunk about once.
"""

from __future__ import annotations

import io
import shutil
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from nsys_rules.loaders.parquet_layout import LayoutError, check_ranges, chunk_pages, read_struct
from tests.fuzz.harness import CliRun, check_run, run_cli_inprocess
from tests.security import parquet_forgeries as forge
from tests.unit._folders import step_exports

TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"
#: The issue's bound for the 1.9 MB case, measured in this process (imports done).
WALK_SECONDS = 2.0


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    return step_exports(tmp_path_factory.mktemp("bases"), ranges=20, kernels=40)


def _forged(bases: dict[str, Path], tmp_path: Path, build) -> Path:  # type: ignore[no-untyped-def]
    folder = shutil.copytree(bases["parquet"], tmp_path / f"{build.__name__}.parquetdir")
    build(folder / f"{TABLE}.parquet")
    return folder


def _timed(*args: str) -> tuple[CliRun, float]:
    start = time.perf_counter()
    run = run_cli_inprocess(*args)
    return run, time.perf_counter() - start


def test_the_issue_shared_zero_region_is_damage_found_at_once(bases, tmp_path, monkeypatch):
    """200 row groups' chunks on one 1 MB zero region: check, stats and diff end in < 2 s, exit 3, one line."""
    monkeypatch.setenv("COLUMNS", "")
    folder = _forged(bases, tmp_path, forge.shared_zero_region)
    size = (folder / f"{TABLE}.parquet").stat().st_size
    assert 1 << 20 < size < 2 << 20 and pq.read_metadata(folder / f"{TABLE}.parquet").num_row_groups == 200
    runs = {"check": ["check", "--no-plugins", "--format", "json", str(folder)],
            "check --max-memory": ["check", "--no-plugins", "--max-memory", "300M", str(folder)],
            "stats": ["stats", "-r", "cuda_gpu_kern_sum", "--format", "csv", str(folder)],
            "diff": ["diff", str(bases["parquet"]), str(folder)]}
    for what, args in runs.items():
        run, seconds = _timed(*args)
        check_run(run, json_output=False)
        assert run.code == 3 and "share bytes" in run.stderr, (what, run.code, run.stderr[-400:])
        assert seconds < WALK_SECONDS, f"{what}: {seconds:.2f} s"


@pytest.mark.parametrize("build, reason", [(forge.chunk_past_the_end, "outside the data of the file"),
                                           (forge.chunk_before_the_start, "outside the data of the file"),
                                           (forge.chunks_overlap, "share bytes")])
def test_chunk_ranges_outside_the_file_or_shared_are_damage(bases, tmp_path, monkeypatch, build, reason):
    monkeypatch.setenv("COLUMNS", "")
    folder = _forged(bases, tmp_path, build)
    run, seconds = _timed("check", "--no-plugins", "--max-memory", "300M", str(folder))
    check_run(run, json_output=False)
    assert run.code == 3 and reason in run.stderr and f"{TABLE}.parquet" in run.stderr, run.stderr
    assert seconds < WALK_SECONDS, seconds


class _Counting(io.BytesIO):
    """A file that counts the bytes read from it."""

    read_bytes = 0

    def read(self, size: int | None = -1) -> bytes:  # type: ignore[override]
        data = super().read(size)
        self.read_bytes += len(data)
        return data


def test_a_walk_of_tiny_pages_reads_each_byte_about_once(bases, tmp_path):
    """512 KB of 7-byte index pages (75,000 headers): the walk reads the chunk in windows, not 4 KB a header,
    and the run completes (pyarrow skips index pages)."""
    folder = shutil.copytree(bases["parquet"], tmp_path / "tiny.parquetdir")
    path = forge.tiny_pages(folder / f"{TABLE}.parquet", size=512 * 1024)
    chunk = pq.read_metadata(path).row_group(0).column(0)
    fh = _Counting(path.read_bytes())
    found = chunk_pages(fh, chunk.data_page_offset, chunk.total_compressed_size)
    assert found.values == 0 and found.decompressed == 0
    assert fh.read_bytes <= 2 * chunk.total_compressed_size, fh.read_bytes
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", "--select", "kernel-tail", str(folder))
    check_run(run)


@pytest.mark.parametrize("data", [
    bytes([0x19, 0xF2]) + forge.varint(2**62) + bytes(64),  # field 1: a list of 2^62 booleans (type 2): 0 bytes each before
    bytes([0x1B]) + forge.varint(2**62) + bytes([0x22]) + bytes(64),  # field 1: a map of 2^62 boolean pairs
])
def test_thrift_counts_beyond_the_bytes_end_the_walk(data):
    """A list or map of booleans took no bytes per element: a count of 2^62 looped for ever. Now each element
    takes its byte, and a count beyond the bytes at hand is cut off: LayoutError once the chunk ends."""
    start = time.perf_counter()
    with pytest.raises(IndexError):
        read_struct(data, 0)
    with pytest.raises(LayoutError):
        chunk_pages(io.BytesIO(data), 0, len(data))
    assert time.perf_counter() - start < 1.0


@pytest.mark.parametrize("page, reason", [
    (bytes(16), "not a page header"),  # a zero byte: an empty struct, no type, no sizes
    (bytes([0x15, 0x00, 0x15, 0x08, 0x15, 0x08, 0x00]) + bytes(4), "no value count"),  # a data page, no details
    (bytes([0x15, 0x04, 0x15, 0x08, 0x15, 0x08, 0x00]) + bytes(4), "no dictionary page header"),
    (bytes([0x15, 0x02, 0x15, 0x08, 0x15, 0x40, 0x00]) + bytes(4), "runs past the end"),  # 32 bytes in 4
])
def test_page_headers_that_do_not_hold_together_are_damage(page, reason):
    with pytest.raises(LayoutError, match=reason):
        chunk_pages(io.BytesIO(page), 0, len(page))


def test_chunk_ranges_are_checked_before_a_byte_is_walked():
    check_ranges([(4, 10), (14, 6), (30, 0)], 40)  # adjacent and empty ranges are fine
    for ranges, data_end in (([(4, 10), (13, 6)], 40), ([(4, 10), (4, 10)], 40), ([(0, 4)], 40),
                             ([(30, 20)], 40)):
        with pytest.raises(LayoutError):
            check_ranges(ranges, data_end)


def test_an_ipc_walk_reads_each_body_byte_at_most_once(tmp_path, monkeypatch):
    """A record batch whose compressed buffers all name one spot of the body: before, a seek and a read for
    each (a 64 MB header lists 4 M of them); now each distinct prefix is read once, and the price still
    counts every buffer's decompressed length (pyarrow decompresses each)."""
    import struct as st

    import numpy as np
    import pyarrow as pa

    from nsys_rules.loaders import ipc_layout as ipc

    path = tmp_path / "t.arrow"
    data = pa.table({f"c{i}": pa.array(np.arange(50_000, dtype=np.int64) % 7) for i in range(20)})
    with pa.OSFile(str(path), "wb") as sink, \
            pa.ipc.new_stream(sink, data.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(data)
    raw = bytearray(path.read_bytes())
    pos = 0
    while True:  # the first record batch message
        length = st.unpack_from("<i", raw, pos + 4)[0]
        meta = bytes(raw[pos + 8:pos + 8 + length])
        kind, header, body = ipc._message(meta)
        if kind == ipc.RECORD_BATCH:
            break
        pos += 8 + length + body
    assert header is not None
    buffers = ipc._offset_field(meta, header, 2)
    assert buffers is not None
    spots = [buffers + 4 + 16 * i for i in range(st.unpack_from("<I", meta, buffers)[0])]
    compressed = [at for at in spots if st.unpack_from("<qq", meta, at)[1] >= 8]
    first = st.unpack_from("<qq", meta, compressed[0])
    for at in compressed:  # every compressed buffer names the first one
        st.pack_into("<qq", raw, pos + 8 + at, *first)
    path.write_bytes(bytes(raw))
    body_start = pos + 8 + length
    prefix = st.unpack_from("<q", raw, body_start + first[0])[0]
    reads: list[int] = []

    class Counted(io.FileIO):
        def read(self, size: int = -1) -> bytes:  # type: ignore[override]
            out = super().read(size)
            reads.append(len(out or b""))
            return out or b""

    monkeypatch.setattr(ipc, "open", lambda name, mode="rb": Counted(name, "r"), raising=False)
    forged = ipc.ipc_layout(path)
    assert len(compressed) >= 20 and forged.rows == 50_000
    assert forged.batches == [body + len(compressed) * prefix]  # every buffer priced at the shared length
    assert len(reads) <= 3 * 2 + 2  # the stream's start, head and header of 3 messages, one prefix read
    assert sum(reads) <= path.stat().st_size
