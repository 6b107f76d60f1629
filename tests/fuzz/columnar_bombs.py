"""Hostile parquetdir/arrowdir exports, built with pyarrow from a small real-shaped export.

Each builder copies the base folder and plants one attack: small files that decode to GBs
(dictionary codes, compressed pages and buffers, string views, run-length repeats), headers that
lie (footer row counts, page sizes, message lengths), big metadata, odd types, damaged bytes.
The builders never hold the decoded size themselves: repeats are written as dictionary codes or
as compressed chunks a few MB at a time.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

MB = 1 << 20
#: The long NVTX text of the issue's bombs: 1 MB referenced 3,000 times.
BIG = "x" * MB
REPEATS = 3000


def _copy(base: Path, out: Path) -> Path:
    shutil.copytree(base, out)
    return out


def _read(folder: Path, table: str) -> pa.Table:
    kind = "parquet" if folder.suffix == ".parquetdir" else "arrow"
    path = folder / f"{table}.{kind}"
    if kind == "parquet":
        return pq.read_table(path)
    with pa.OSFile(str(path)) as fh:
        return pa.ipc.open_stream(fh).read_all()


def _write(folder: Path, table: str, data: pa.Table, **options: object) -> Path:
    if folder.suffix == ".parquetdir":
        path = folder / f"{table}.parquet"
        pq.write_table(data, path, **options)  # type: ignore[arg-type]
    else:
        path = folder / f"{table}.arrow"
        compression = options.get("compression")
        ipc = pa.ipc.IpcWriteOptions(compression=compression) if compression else pa.ipc.IpcWriteOptions()
        with pa.OSFile(str(path), "wb") as sink, pa.ipc.new_stream(sink, data.schema, options=ipc) as writer:
            writer.write_table(data)
    return path


def _repeat_rows(data: pa.Table, n: int) -> pa.Table:
    return data.take(pa.array(np.arange(n) % max(data.num_rows, 1)))


def _with(data: pa.Table, name: str, column: pa.Array) -> pa.Table:
    at = data.schema.get_field_index(name)
    return data.set_column(at, name, column) if at >= 0 else data.append_column(name, column)


def _nvtx(folder: Path, n: int = REPEATS) -> pa.Table:
    data = _repeat_rows(_read(folder, "NVTX_EVENTS"), n)
    data = _with(data, "start", pa.array(np.arange(n, dtype=np.int64) * 100_000))
    return _with(data, "end", pa.array(np.arange(n, dtype=np.int64) * 100_000 + 90_000))


def _coded(text: str, n: int) -> pa.DictionaryArray:
    return pa.DictionaryArray.from_arrays(pa.array(np.zeros(n, np.int32)), pa.array([text], pa.large_string()))


def nvtx_dictionary_text(base: Path, out: Path) -> Path:
    """The issue's case: one 1 MB NVTX text referenced 3,000 times through a dictionary page."""
    folder = _copy(base, out)
    data = _with(_nvtx(folder), "text", _coded(BIG, REPEATS))
    _write(folder, "NVTX_EVENTS", data, compression="zstd", use_dictionary=True, dictionary_pagesize_limit=8 * MB)
    return folder


def nvtx_compressed_text(base: Path, out: Path, rows: int = 300) -> Path:
    """Plain (not coded) 1 MB texts, compressed: pages (Parquet) or one record batch (Arrow) of 300 MB."""
    folder = _copy(base, out)
    data = _nvtx(folder, rows)
    if folder.suffix == ".parquetdir":
        with pq.ParquetWriter(folder / "NVTX_EVENTS.parquet", data.schema, compression="zstd",
                              use_dictionary=False) as writer:
            for lo in range(0, rows, 50):
                part = data.slice(lo, 50)
                writer.write_table(_with(part, "text", pa.array([BIG] * part.num_rows, pa.large_string())))
    else:
        _write(folder, "NVTX_EVENTS", _with(data, "text", pa.array([BIG] * rows, pa.large_string())),
               compression="zstd")
    return folder


def nvtx_view_text(base: Path, out: Path) -> Path:
    """Arrow string views: 3,000 views of one 1 MB buffer (a 1 MB file that is 3 GB as Python strings)."""
    folder = _copy(base, out)
    data = _nvtx(folder)
    views = np.zeros((REPEATS, 4), np.int32)
    views[:, 0] = MB  # length; prefix; buffer 0; offset 0
    views[:, 1] = int.from_bytes(b"xxxx", "little", signed=True)
    array = pa.Array.from_buffers(pa.string_view(), REPEATS, [None, pa.py_buffer(views.tobytes()),
                                                              pa.py_buffer(BIG.encode())])
    _write(folder, "NVTX_EVENTS", _with(data, "text", array))
    return folder


def string_table_text(base: Path, out: Path) -> Path:
    """``StringIds`` whose every value is one 1 MB string, through dictionary codes."""
    folder = _copy(base, out)
    data = _read(folder, "StringIds")
    n = max(REPEATS, data.num_rows)
    ids = pa.array(np.arange(n, dtype=np.int32))
    table = pa.table({"id": ids, "value": _coded(BIG, n)})
    _write(folder, "StringIds", table, compression="zstd", dictionary_pagesize_limit=8 * MB)
    return folder


def metadata_text(base: Path, out: Path, table: str = "META_DATA_CAPTURE", column: str = "value",
                  rows: int = 100_000) -> Path:
    """A metadata table read while the trace opens (before any guard): 100k rows of one 1 MB value."""
    folder = _copy(base, out)
    data = _repeat_rows(_read(folder, table), rows)
    _write(folder, table, _with(data, column, _coded(BIG, rows)), compression="zstd",
           dictionary_pagesize_limit=8 * MB)
    return folder


def gpu_name_text(base: Path, out: Path) -> Path:
    """TARGET_INFO_GPU's name, 1 MB, in 100k rows (read at open for the GPU list)."""
    return metadata_text(base, out, "TARGET_INFO_GPU", "name")


def kernel_start_text(base: Path, out: Path) -> Path:
    """The kernels' integer ``start`` as a 1 MB text repeated in every row (damage, priced as text)."""
    folder = _copy(base, out)
    data = _repeat_rows(_read(folder, "CUPTI_ACTIVITY_KIND_KERNEL"), REPEATS)
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", _with(data, "start", _coded(BIG, REPEATS)), compression="zstd",
           dictionary_pagesize_limit=8 * MB)
    return folder


def kernel_rows(base: Path, out: Path, rows: int = 4_000_000, chunk: int = 500_000,
                compression: str = "zstd") -> Path:
    """4 M kernels of repeated values: a few hundred KB stored, about a GB read."""
    folder = _copy(base, out)
    one = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    part = _repeat_rows(one, chunk)
    starts = np.arange(chunk, dtype=np.int64) * 1000
    part = _with(_with(part, "start", pa.array(starts)), "end", pa.array(starts + 500))
    if folder.suffix == ".parquetdir":
        with pq.ParquetWriter(folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet", part.schema,
                              compression=compression) as writer:
            for _ in range(rows // chunk):
                writer.write_table(part)
    else:
        ipc = pa.ipc.IpcWriteOptions(compression=None if compression == "none" else compression)
        with pa.OSFile(str(folder / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"), "wb") as sink, \
                pa.ipc.new_stream(sink, part.schema, options=ipc) as writer:
            for _ in range(rows // chunk):
                writer.write_table(part)
    return folder


def footer_rows_lie(base: Path, out: Path) -> Path:
    """The issue's case: 4 M kernels whose footer says 1,000 rows (file and row groups)."""
    folder = kernel_rows(base, out)
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    groups = pq.read_metadata(path).num_row_groups
    patch_footer(path, {(3,): 1000, (4, 3): 1000 // groups})
    return folder


def footer_values_lie(base: Path, out: Path) -> Path:
    """4 M kernels whose footer says 1,000 rows and 1,000 values per column chunk."""
    folder = kernel_rows(base, out)
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    groups = pq.read_metadata(path).num_row_groups
    patch_footer(path, {(3,): 1000, (4, 3): 1000 // groups, (4, 1, 3, 5): 1000 // groups})
    return folder


def big_footer(base: Path, out: Path, size: int = 48 * MB) -> Path:
    """A kernel table whose footer carries ``size`` bytes of key-value metadata."""
    folder = _copy(base, out)
    data = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    data = data.replace_schema_metadata({"planted": "m" * size})
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", data)
    return folder


def many_row_groups(base: Path, out: Path) -> Path:
    """2,000 row groups of one kernel each: a footer of many small parts."""
    folder = _copy(base, out)
    data = _repeat_rows(_read(folder, "CUPTI_ACTIVITY_KIND_KERNEL"), 2_000)
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", data, row_group_size=1)
    return folder


def huge_schema_metadata(base: Path, out: Path, size: int = 48 * MB) -> Path:
    """An Arrow schema message carrying ``size`` bytes of custom metadata."""
    folder = _copy(base, out)
    data = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", data.replace_schema_metadata({"planted": "m" * size}))
    return folder


def file_format_bomb(base: Path, out: Path) -> Path:
    """The dictionary bomb in the Arrow file format (``ARROW1`` magic, footer)."""
    folder = _copy(base, out)
    data = _with(_nvtx(folder), "text", _coded(BIG, REPEATS))
    with pa.OSFile(str(folder / "NVTX_EVENTS.arrow"), "wb") as sink, \
            pa.ipc.new_file(sink, data.schema, options=pa.ipc.IpcWriteOptions(compression="zstd")) as writer:
        writer.write_table(data)
    return folder


def batch_rows_lie(base: Path, out: Path) -> Path:
    """An Arrow record batch header that says 2^40 rows."""
    folder = _copy(base, out)
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"
    raw = bytearray(path.read_bytes())
    at = _first_batch_length(bytes(raw))
    raw[at:at + 8] = struct.pack("<q", 2**40)
    path.write_bytes(bytes(raw))
    return folder


def body_length_lie(base: Path, out: Path) -> Path:
    """An Arrow message whose body length runs past the end of the file."""
    folder = _copy(base, out)
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"
    raw = bytearray(path.read_bytes())
    at = _first_batch_length(bytes(raw), field=3, message=True)
    raw[at:at + 8] = struct.pack("<q", 2**40)
    path.write_bytes(bytes(raw))
    return folder


def delta_dictionaries(base: Path, out: Path) -> Path:
    """NVTX text through dictionary batches: a 1 MB entry added in each of 60 delta batches."""
    folder = _copy(base, out)
    data = _nvtx(folder, 60)
    options = pa.ipc.IpcWriteOptions(compression="zstd", emit_dictionary_deltas=True)
    schema = data.schema.set(data.schema.get_field_index("text"), pa.field("text", pa.dictionary(pa.int32(),
                                                                                                 pa.large_string())))
    with pa.OSFile(str(folder / "NVTX_EVENTS.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, schema, options=options) as writer:
        entries: list[str] = []
        for i in range(60):
            entries.append(BIG[:-8] + f"{i:08d}")
            text = pa.DictionaryArray.from_arrays(pa.array([i], pa.int32()), pa.array(entries, pa.large_string()))
            writer.write_table(_with(data.slice(i, 1), "text", text))
    return folder


def nested_start(base: Path, out: Path) -> Path:
    """The kernels' ``start`` as a list column (a type no nsys export has)."""
    folder = _copy(base, out)
    data = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    starts = data.column("start").to_pylist()
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", _with(data, "start", pa.array([[s, s] for s in starts])))
    return folder


def float_start(base: Path, out: Path) -> Path:
    """The kernels' ``start`` as float64 (damage: the loader judges each value)."""
    folder = _copy(base, out)
    data = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", _with(data, "start", data.column("start").cast(pa.float64())))
    return folder


def null_columns(base: Path, out: Path) -> Path:
    """Every kernel column but the times typed null."""
    folder = _copy(base, out)
    data = _read(folder, "CUPTI_ACTIVITY_KIND_KERNEL")
    for name in data.column_names:
        if name not in ("start", "end"):
            data = _with(data, name, pa.nulls(data.num_rows))
    _write(folder, "CUPTI_ACTIVITY_KIND_KERNEL", data)
    return folder


def invalid_utf8(base: Path, out: Path) -> Path:
    """NVTX texts and StringIds values that are not UTF-8 (Parquet and Arrow do not check)."""
    folder = _copy(base, out)
    data = _nvtx(folder, 300)
    bad = pa.array([b"\xff\xfe step \x1b[31m"] * 300, pa.large_binary()).view(pa.large_string())
    _write(folder, "NVTX_EVENTS", _with(data, "text", bad))
    return folder


def many_batches(base: Path, out: Path) -> Path:
    """Kernels as 5,000 record batches of one row."""
    folder = _copy(base, out)
    data = _repeat_rows(_read(folder, "CUPTI_ACTIVITY_KIND_KERNEL"), 5_000)
    with pa.OSFile(str(folder / "CUPTI_ACTIVITY_KIND_KERNEL.arrow"), "wb") as sink, \
            pa.ipc.new_stream(sink, data.schema) as writer:
        for batch in data.to_batches(max_chunksize=1):
            writer.write_batch(batch)
    return folder


def empty_tables(base: Path, out: Path) -> Path:
    """Every table with its columns and no rows."""
    folder = _copy(base, out)
    for path in folder.iterdir():
        data = _read(folder, path.stem)
        _write(folder, path.stem, data.slice(0, 0))
    return folder


def truncated_table(base: Path, out: Path) -> Path:
    """The kernel table cut to half its bytes."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    raw = path.read_bytes()
    path.write_bytes(raw[:len(raw) // 2])
    return folder


def garbage_pages(base: Path, out: Path) -> Path:
    """The kernel table with its data bytes overwritten (footer or headers intact)."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    raw = bytearray(path.read_bytes())
    rng = np.random.default_rng(7)
    lo, hi = (4, len(raw) // 2) if path.suffix == ".parquet" else (len(raw) // 3, len(raw) - 16)
    raw[lo:hi] = rng.integers(0, 256, hi - lo, dtype=np.uint8).tobytes()
    path.write_bytes(bytes(raw))
    return folder


def footer_length_lie(base: Path, out: Path) -> Path:
    """A Parquet file whose footer length runs before the start of the file."""
    folder = _copy(base, out)
    path = folder / "CUPTI_ACTIVITY_KIND_KERNEL.parquet"
    raw = bytearray(path.read_bytes())
    raw[-8:-4] = struct.pack("<I", 2**31 - 1)
    path.write_bytes(bytes(raw))
    return folder


def text_file_as_table(base: Path, out: Path) -> Path:
    """A table file holding plain text (what a wrong file or a link to one would show)."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    path.write_text("root:x:0:0:SECRET-LINE:/root:/bin/bash\n" * 10)
    return folder


def fifo_table(base: Path, out: Path) -> Path:
    """The kernel table file replaced by a FIFO (a read would block forever)."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    path.unlink()
    os.mkfifo(path)
    return folder


def link_outside(base: Path, out: Path) -> Path:
    """The kernel table a symbolic link to a file outside the folder."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    outside = out.parent / f"outside-{out.name}{path.suffix}"
    shutil.move(path, outside)
    path.symlink_to(outside)
    return folder


def link_inside(base: Path, out: Path) -> Path:
    """The kernel table a symbolic link to a file inside the folder (allowed)."""
    folder = _copy(base, out)
    path = next(folder.glob("CUPTI_ACTIVITY_KIND_KERNEL.*"))
    (folder / "data").mkdir()
    kept = folder / "data" / path.name
    shutil.move(path, kept)
    path.symlink_to(kept)
    return folder


def run_length_codes(base: Path, out: Path) -> Path:
    """NVTX text: a 1 MB dictionary entry and 10 M codes in one RLE run (a 1 KB page, 10 TB decoded)."""
    folder = _copy(base, out)
    rows = 10_000_000
    data = pa.table({name: pa.array(np.zeros(rows, np.int64)) if name in ("start", "end") else pa.nulls(rows)
                     for name in ("start", "end")})
    data = _with(data, "eventType", pa.array(np.full(rows, 59, np.uint32)))
    data = _with(data, "text", _coded(BIG, rows))
    _write(folder, "NVTX_EVENTS", data, compression="zstd", dictionary_pagesize_limit=8 * MB)
    return folder


#: name -> (folder kind, builder): the attack cases of ``test_columnar_bombs``.
Builder = Callable[[Path, Path], Path]
CASES: dict[str, tuple[str, Builder]] = {}
for _kind in ("parquet", "arrow"):
    for _builder in (nvtx_dictionary_text, nvtx_compressed_text, string_table_text, metadata_text, gpu_name_text,
                     kernel_start_text, kernel_rows, nested_start, float_start, null_columns, invalid_utf8,
                     empty_tables, truncated_table, garbage_pages, text_file_as_table, fifo_table, link_outside,
                     link_inside):
        CASES[f"{_kind}-{_builder.__name__}"] = (_kind, _builder)
for _builder in (footer_rows_lie, footer_values_lie, big_footer, many_row_groups, footer_length_lie,
                 run_length_codes):
    CASES[f"parquet-{_builder.__name__}"] = ("parquet", _builder)
for _builder in (nvtx_view_text, huge_schema_metadata, file_format_bomb, batch_rows_lie, body_length_lie,
                 delta_dictionaries, many_batches):
    CASES[f"arrow-{_builder.__name__}"] = ("arrow", _builder)


# -- Thrift compact protocol, to plant lies in a Parquet footer or page header ------------------
def _zigzag(value: int) -> int:
    return (value << 1) ^ (value >> 63)


def _padded_varint(value: int, width: int) -> bytes:
    """``value`` as a varint of exactly ``width`` bytes (continuation bits on padding: still valid)."""
    out = bytearray()
    for i in range(width):
        byte = value & 0x7F
        value >>= 7
        out.append(byte | (0x80 if i < width - 1 else 0))
    assert value == 0, "value too big for the width"
    return bytes(out)


def thrift_spots(data: bytes, pos: int) -> dict[tuple[int, ...], list[tuple[int, int]]]:
    """Where each integer field of the compact struct at ``pos`` lies, by its path of field ids."""
    spots: dict[tuple[int, ...], list[tuple[int, int]]] = {}
    _struct(data, pos, (), spots)
    return spots


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    value = shift = 0
    while True:
        byte = data[pos]
        pos += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, pos
        shift += 7


def _struct(data: bytes, pos: int, path: tuple[int, ...], spots: dict) -> int:
    last = 0
    while True:
        byte = data[pos]
        pos += 1
        if byte == 0:
            return pos
        kind, delta = byte & 0x0F, byte >> 4
        if delta:
            field = last + delta
        else:
            raw, pos = _varint(data, pos)
            field = (raw >> 1) ^ -(raw & 1)
        last = field
        pos = _value(data, pos, kind, path + (field,), spots)


def _value(data: bytes, pos: int, kind: int, path: tuple[int, ...], spots: dict) -> int:
    if kind in (1, 2):
        return pos
    if kind == 3:
        return pos + 1
    if kind in (4, 5, 6):
        _, end = _varint(data, pos)
        spots.setdefault(path, []).append((pos, end))
        return end
    if kind == 7:
        return pos + 8
    if kind == 8:
        length, pos = _varint(data, pos)
        return pos + length
    if kind in (9, 10):
        head = data[pos]
        pos += 1
        count, element = head >> 4, head & 0x0F
        if count == 15:
            count, pos = _varint(data, pos)
        for _ in range(count):
            pos = _value(data, pos, 3 if element == 1 else element, path, spots)
        return pos
    if kind == 11:
        count, pos = _varint(data, pos)
        if count:
            types = data[pos]
            pos += 1
            for _ in range(count):
                pos = _value(data, pos, types >> 4, path, spots)
                pos = _value(data, pos, types & 0x0F, path, spots)
        return pos
    if kind == 12:
        return _struct(data, pos, path, spots)
    raise ValueError(f"Thrift type {kind}")


def patch_footer(path: Path, values: dict[tuple[int, ...], int]) -> None:
    """Rewrite the integer fields at ``values``' paths of a Parquet footer, keeping every byte offset."""
    raw = bytearray(path.read_bytes())
    length = struct.unpack("<I", raw[-8:-4])[0]
    start = len(raw) - 8 - length
    spots = thrift_spots(bytes(raw[start:len(raw) - 8]), 0)
    for where, value in values.items():
        for lo, hi in spots[where]:
            width = hi - lo
            raw[start + lo:start + hi] = _padded_varint(_zigzag(value), width)
    path.write_bytes(bytes(raw))


# -- Arrow IPC flatbuffers, to plant lies in a message -----------------------------------------
def _first_batch_length(raw: bytes, field: int = 0, message: bool = False) -> int:
    """Byte offset of the first record batch's ``length`` (or, ``message``, its message's body length)."""

    def slot(table: int, index: int) -> int | None:
        vtable = table - struct.unpack_from("<i", raw, table)[0]
        if 4 + 2 * index >= struct.unpack_from("<H", raw, vtable)[0]:
            return None
        offset = struct.unpack_from("<H", raw, vtable + 4 + 2 * index)[0]
        return table + offset if offset else None

    pos = 0
    while True:
        length = struct.unpack_from("<i", raw, pos + 4)[0]
        meta_at = pos + 8
        root = meta_at + struct.unpack_from("<I", raw, meta_at)[0]
        kind_at, body_at = slot(root, 1), slot(root, 3)
        body = struct.unpack_from("<q", raw, body_at)[0] if body_at is not None else 0
        if kind_at is not None and raw[kind_at] == 3:
            if message:
                assert body_at is not None
                return body_at
            at = slot(root, 2)
            assert at is not None
            header = at + struct.unpack_from("<I", raw, at)[0]
            found = slot(header, field)
            assert found is not None
            return found
        pos = meta_at + length + body
