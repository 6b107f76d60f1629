"""Parquet and Arrow folders: prices from the files' own headers, reads metered as they go, links kept
inside the folder, and a file truncated while it is read (exit 3, never SIGBUS).

The attack sweep with measured peaks is ``tests/fuzz/test_columnar_bombs.py``; these tests pin the parts.
"""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from nsys_rules.errors import InputError
from nsys_rules.loaders.arrowdir import ArrowDirExport
from nsys_rules.loaders.ipc_layout import ipc_layout
from nsys_rules.loaders.memory_limit import FIXED_BYTES, estimate
from nsys_rules.loaders.read_guard import ReadGuard
from nsys_rules.loaders.parquet_layout import chunk_pages
from nsys_rules.model.trace import Trace
from tests.fuzz.columnar_bombs import footer_rows_lie, kernel_rows
from tests.fuzz.harness import check_run, run_cli_inprocess
from tests.unit._folders import step_exports

MB = 1 << 20


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    return step_exports(tmp_path_factory.mktemp("bases"), ranges=50, kernels=200)


def _compact_page_header(kind: int, raw: int, stored: int, values: int) -> bytes:
    """A Parquet page header in Thrift's compact protocol (fields 1-3 i32, 5 a data page header struct)."""
    def varint(v: int) -> bytes:
        out = bytearray()
        while True:
            byte, v = v & 0x7F, v >> 7
            out.append(byte | (0x80 if v else 0))
            if not v:
                return bytes(out)

    def zz(v: int) -> bytes:
        return varint((v << 1) ^ (v >> 63))

    return (bytes([0x15]) + zz(kind) + bytes([0x15]) + zz(raw) + bytes([0x15]) + zz(stored)
            + bytes([0x2C]) + bytes([0x15]) + zz(values) + bytes([0x15]) + zz(8) + b"\x00" + b"\x00")


def test_page_headers_are_what_is_priced_not_the_footer():
    """Two pages whose headers say 2 GB and 5 values each: the walk reports them, nothing is decompressed."""
    page = _compact_page_header(0, 2**31 - 1, 3, 5)
    data = (page + b"abc") * 2
    found = chunk_pages(io.BytesIO(data), 0, len(data))
    assert (found.values, found.largest, found.decompressed, found.coded) == (10, 2**31 - 1, 2 * (2**31 - 1), True)


def test_ipc_layout_counts_rows_and_decompressed_bytes(tmp_path):
    path = tmp_path / "t.arrow"
    data = pa.table({"a": pa.array(np.zeros(100_000, np.int64)), "s": pa.array(["y" * 100] * 100_000)})
    options = pa.ipc.IpcWriteOptions(compression="zstd")
    with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema, options=options) as writer:
        writer.write_table(data, max_chunksize=40_000)
    layout = ipc_layout(path)
    assert layout.rows == 100_000 and len(layout.batches) == 3
    # What pyarrow will hold decompressed, read from 8-byte prefixes: far more than the file.
    assert layout.decoded > 100_000 * (8 + 100) > 10 * path.stat().st_size


def test_a_footer_that_says_fewer_rows_is_priced_by_its_pages(bases, tmp_path):
    folder = footer_rows_lie(bases["parquet"], tmp_path / "lie.parquetdir")
    export = ArrowDirExport(folder)
    assert export.count("CUPTI_ACTIVITY_KIND_KERNEL") == 1000  # what the footer says
    trace = Trace(export)
    cost = estimate(trace.export, {"kernels": ["start", "end"]}, 300 * MB)
    (kernels,) = cost.tables
    assert kernels.rows == 4_000_000 and cost.total > 100 * MB
    trace.close()


def test_a_read_that_outgrows_its_price_is_stopped(bases, tmp_path):
    """The meter judges what a read holds as it goes: here no price was charged; one batch (19 MB decoded)
    fits 24 MB, five columns of 1 M rows (40 MB) do not."""
    folder = kernel_rows(bases["arrow"], tmp_path / "k.arrowdir", rows=1_000_000, chunk=100_000)
    export = ArrowDirExport(folder)
    export.meter = ReadGuard(FIXED_BYTES + 24 * MB, True, label="k")
    columns = ["start", "end", "deviceId", "streamId", "correlationId"]
    with pytest.raises(InputError, match=r"^k: reading k\.arrowdir/CUPTI_ACTIVITY_KIND_KERNEL needs about .* "
                                         r"left of the 40\.0 MB limit \(--max-memory\)"):
        export.fetch_direct("CUPTI_ACTIVITY_KIND_KERNEL", columns)
    export.meter = ReadGuard(FIXED_BYTES + 64 * MB, True, label="k")
    assert len(export.fetch_direct("CUPTI_ACTIVITY_KIND_KERNEL", columns)["start"]) == 1_000_000


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_link_out_of_the_folder_is_refused_without_its_bytes(bases, tmp_path, kind):
    folder = tmp_path / f"t.{kind}dir"
    import shutil

    shutil.copytree(bases[kind], folder)
    secret = tmp_path / "secret.txt"
    secret.write_text("root:x:0:0:SECRET-LINE:/root\n" * 4)
    table = folder / f"CUPTI_ACTIVITY_KIND_KERNEL.{kind}"
    table.unlink()
    table.symlink_to(secret)
    run = run_cli_inprocess("check", "--no-plugins", "--format", "json", str(folder))
    check_run(run)
    assert run.code == 3 and "CUPTI_ACTIVITY_KIND_KERNEL" in run.stderr and "symbolic link" in run.stderr
    assert "SECRET" not in run.stderr
    # A link to a file inside the folder is the folder's own file.
    inside = folder / "kept"
    inside.mkdir()
    table.unlink()
    shutil.copy(bases[kind] / table.name, inside / table.name)
    table.symlink_to(inside / table.name)
    assert run_cli_inprocess("check", "--no-plugins", "--format", "json", "--fail-on", "never", str(folder)).code == 0


#: Reads the kernel table through the CLI and truncates the file once the first batch has been decoded.
_TRUNCATE = """
import os, sys
from nsys_rules.loaders import arrowdir
original = arrowdir.ArrowDirExport._batches
def cut_after_first(self, table, columns, rows):
    for i, batch in enumerate(original(self, table, columns, rows)):
        yield batch
        if i == 0 and table == "CUPTI_ACTIVITY_KIND_KERNEL":
            path = self._files[table]
            os.truncate(path, os.path.getsize(path) // 3)
arrowdir.ArrowDirExport._batches = cut_after_first
from nsys_rules.cli import main
sys.exit(main(sys.argv[1:]))
"""


@pytest.mark.parametrize("kind", ["parquet", "arrow"])
def test_a_file_truncated_while_it_is_read_is_exit_3_not_sigbus(bases, tmp_path, kind):
    folder = kernel_rows(bases[kind], tmp_path / f"t.{kind}dir", rows=400_000, chunk=100_000, compression="none")
    if kind == "parquet":  # several row groups, so the read is under way when the file shrinks
        assert pq.read_metadata(folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet").num_row_groups > 1
    env = {k: v for k, v in os.environ.items() if k != "COLUMNS"}
    proc = subprocess.run([sys.executable, "-c", _TRUNCATE, "check", "--no-plugins", "--format", "json",
                           str(folder)], capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 3, (proc.returncode, proc.stderr[-2000:])  # a signal would be negative
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "cannot read CUPTI_ACTIVITY_KIND_KERNEL" in lines[0], proc.stderr
    assert proc.stdout == ""
