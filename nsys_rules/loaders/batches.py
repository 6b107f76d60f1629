"""Arrow record batches into preallocated numpy columns: the one copy every format's bulk read makes.

Filling final arrays batch by batch never holds the whole Arrow table next to its numpy copy:
on the 1M-kernel trace that halves the read's peak memory, whether the batches come from
SQLite (ADBC), a Parquet file or an Arrow IPC file.
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator, Sequence

import numpy as np

from nsys_rules.loaders.export import NULL_INT
from nsys_rules.loaders.tables import BLOB_SOURCES

_INT64_LIMIT = 2**63
#: Id sources that usually hold one value in every row (one process, one thread, one device, one stream, no
#: graph node): read as that one value until a row differs (issue 39: 8 bytes a row of a serialized global id and
#: 4 of each narrow id, for every kernel and API row, while both big tables are read side by side).
ONE_VALUE_SOURCES = frozenset({"globalPid", "globalTid", "deviceId", "streamId", "contextId", "graphNodeId"})
#: Rows from which a column that holds one value is kept as that value (``loaders.columns.ONE_VALUE_ROWS``:
#: the canonical frames hold such columns as one-value views from that size on anyway).
ONE_VALUE_FROM = 4096


#: Python bytes of one str/bytes object beyond its characters (header, hash, the array slot).
OBJECT_BYTES = 96


class ReadStopped(Exception):
    """A read given up because its ``stop`` event was set (a read-ahead no longer wanted)."""


class UnsupportedColumn(ValueError):
    """A column of a type no nsys export has (lists, structs, maps, unions, run-end encoded): damage, not data."""


def stoppable(batches: Iterable[Any], stop: Any) -> Iterator[Any]:
    """``batches``, ending with :class:`ReadStopped` once ``stop`` (a ``threading.Event``, or None) is set."""
    for batch in batches:
        if stop is not None and stop.is_set():
            raise ReadStopped
        yield batch


def note_column(line: str, what: str) -> str:
    """The column a note of :func:`fill_columns` (``what.column: ...``) is about; "" for another note."""
    return line[len(what) + 1:].split(":", 1)[0] if line.startswith(what + ".") else ""


def fill_columns(batches: Iterable[Any], names: Sequence[str], expected_rows: int,
                 narrow: set[str] | frozenset[str] = frozenset(), positions: Sequence[int] | None = None,
                 damage: list[str] | None = None, what: str = "",
                 spend: Callable[[int], None] | None = None) -> dict[str, np.ndarray]:
    """Stream ``batches`` into one numpy array per name.

    Column ``names[i]`` is the batch's column ``positions[i]`` (default: ``i``). Integer columns
    (signed or unsigned) land in int64 arrays, int32 for ``narrow`` names while every value
    fits (widened when one does not), NULL as :data:`NULL_INT`. A column that turns out not to
    be integer (text, a REAL in an integer column: damage) becomes an object array so the
    caller's converters can judge each value. An unsigned value beyond int64 (no nsys id or
    time comes near) reads as NULL_INT, with a note in ``damage``.

    An id source of :data:`ONE_VALUE_SOURCES` that holds one value in every row of a read of at least
    :data:`ONE_VALUE_FROM` rows comes back as a read-only one-value view (as ``loaders.columns.one_value``
    makes it), and is no array at all while the read runs: its array is made, the rows so far filled,
    at the first batch that differs.

    ``spend``, when given, is told after each batch the bytes the read holds so far (the arrays,
    the Python objects made, the batch itself); it raises to stop a read that outgrew its price.
    """
    import pyarrow as pa

    size = max(int(expected_rows), 0)
    where = list(positions) if positions is not None else list(range(len(names)))
    # A column that may hold one value in every row is no array until a row differs (``single``: the value
    # so far, None: no row yet); an id of one process or device costs nothing per row during the read.
    lazy = [size >= ONE_VALUE_FROM and name in ONE_VALUE_SOURCES for name in names]
    single: list[int | None] = [None for _ in names]
    ints: list[np.ndarray | None] = [None if lazy[i] else np.empty(size, np.int32 if name in narrow else np.int64)
                                     for i, name in enumerate(names)]
    objs: list[np.ndarray | None] = [None for _ in names]

    def materialize(i: int, upto: int) -> None:
        """Column ``i`` made an array of ``size`` rows, its first ``upto`` rows the one value seen so far."""
        lazy[i] = False
        value = single[i]
        fits = value is None or -(2**31) <= value < 2**31
        out = ints[i] = np.empty(size, np.int32 if names[i] in narrow and fits else np.int64)
        if upto:
            out[:upto] = value
    huge = [0 for _ in names]
    pos = 0
    made = 0  # bytes of the Python objects made so far
    for batch in batches:
        rows = batch.num_rows
        if pos + rows > size:  # more rows than the metadata said (should not happen on a finished export)
            size = max(pos + rows, size * 2)
            ints = [None if a is None else np.resize(a, size) for a in ints]
            objs = [None if a is None else np.resize(a, size) for a in objs]
        for i, at in enumerate(where):
            column = batch.column(at)
            obj = objs[i]
            if lazy[i]:
                if not rows:
                    continue
                if pa.types.is_null(column.type):
                    seen: tuple[np.ndarray, int] | None = (np.full(1, NULL_INT, np.int64), 0)
                elif pa.types.is_integer(column.type):
                    seen = _integers(column)
                else:
                    seen = None
                if seen is not None and not seen[1]:
                    values = seen[0]
                    if not len(values):
                        continue
                    low, high = int(values.min()), int(values.max())
                    if low == high and single[i] in (None, low):
                        single[i] = low  # still one value: nothing stored per row
                        continue
                materialize(i, pos)
            if obj is None:
                target = ints[i]
                assert target is not None  # a column is integers until it turns to objects
                if pa.types.is_null(column.type):
                    target[pos:pos + rows] = NULL_INT
                    continue
                if pa.types.is_integer(column.type):
                    values, beyond = _integers(column)
                    huge[i] += beyond
                    if target.dtype == np.int32 and len(values) and not (
                            int(values.min()) >= -(2**31) and int(values.max()) < 2**31):
                        target = ints[i] = target.astype(np.int64)  # a value too big for int32: widen
                    target[pos:pos + rows] = values
                    continue
                obj = objs[i] = np.full(size, None, dtype=object)
                if pos:
                    done = target[:pos].astype(object)
                    done[target[:pos] == NULL_INT] = None
                    obj[:pos] = done
                ints[i] = None
            if not pa.types.is_null(column.type):
                obj[pos:pos + rows] = _blobs(column) if names[i] in BLOB_SOURCES else _objects(column)
                made += object_bytes(column)
        pos += rows
        if spend is not None:
            held = sum(a.nbytes for a in ints if a is not None) + sum(a.nbytes for a in objs if a is not None)
            spend(held + made + _arrow_bytes(batch))
    out: dict[str, np.ndarray] = {}
    for i, name in enumerate(names):
        if lazy[i]:  # one value in every row (or no row): a read-only view of it, as loaders.columns.one_value
            value = NULL_INT if single[i] is None else int(single[i])  # type: ignore[arg-type]
            fits = -(2**31) <= value < 2**31
            ints[i] = np.broadcast_to(np.array([value], np.int32 if name in narrow and fits else np.int64), (pos,))
    for name, as_int, as_obj, beyond in zip(names, ints, objs, huge, strict=True):
        arr = as_obj if as_obj is not None else as_int
        assert arr is not None
        out[name] = arr[:pos] if pos != len(arr) else arr
        if beyond and damage is not None:
            damage.append(f"{what}.{name}: {beyond} value(s) beyond int64 read as unknown")
    return out


def _integers(column: Any) -> tuple[np.ndarray, int]:
    """A batch's integer column as numpy, NULL as NULL_INT; unsigned values beyond int64 too (and how many).

    Done on numpy views of the Arrow buffers, not with ``Array.to_numpy``, ``fill_null`` or Arrow scalars:
    each of those imports pandas on first use, and a read-ahead worker would then wait for the main
    thread's pandas import (~0.2 s) before its first batch.
    """
    values = _fixed_width(column)
    valid = _validity(column)
    beyond = 0
    if values.dtype == np.uint64 and len(values) and values.max() >= _INT64_LIMIT:
        over = values >= np.uint64(_INT64_LIMIT)
        if valid is not None:
            over &= valid
        beyond = int(np.count_nonzero(over))
        if beyond:
            valid = ~over if valid is None else valid & ~over
    if valid is None:
        return values, beyond
    out = values.astype(np.int64) if values.dtype.kind == "u" else values.copy()
    out[~valid] = NULL_INT
    return out, beyond


def _fixed_width(column: Any) -> np.ndarray:
    """An integer Arrow array's values as a numpy view of its data buffer (undefined where NULL)."""
    import pyarrow as pa

    kind = "u" if pa.types.is_unsigned_integer(column.type) else "i"
    dtype = np.dtype(f"{kind}{column.type.bit_width // 8}")
    data = column.buffers()[1]
    if data is None:  # an empty array may come without a data buffer
        return np.empty(0, dtype)
    return np.frombuffer(data, dtype=dtype, count=len(column), offset=column.offset * dtype.itemsize)


def _validity(column: Any) -> np.ndarray | None:
    """True where an Arrow array holds a value, from its validity bitmap; None when it holds no NULL."""
    if not column.null_count:
        return None
    bits = np.unpackbits(np.frombuffer(column.buffers()[0], np.uint8), bitorder="little")
    return bits[column.offset:column.offset + len(column)].astype(bool)


def _arrow_bytes(batch: Any) -> int:
    try:
        return int(batch.get_total_buffer_size())
    except (AttributeError, TypeError):
        return 0


def object_bytes(column: Any) -> int:
    """Python bytes :func:`_objects` makes of ``column``: one object per value (per dictionary entry when coded)."""
    import pyarrow as pa

    if pa.types.is_dictionary(column.type):
        return object_bytes(column.dictionary) + 8 * len(column)
    return _arrow_bytes(column) + OBJECT_BYTES * len(column)


def check_supported(column: Any) -> None:
    """Raise :class:`UnsupportedColumn` for a column no nsys export writes (nested or run-end encoded)."""
    import pyarrow as pa

    kind = column.type.value_type if pa.types.is_dictionary(column.type) else column.type
    if pa.types.is_nested(kind) or getattr(pa.types, "is_run_end_encoded", lambda t: False)(kind) or \
            pa.types.is_union(kind):
        raise UnsupportedColumn(f"a column of type {str(column.type)[:60]}, which no nsys export has")


def _dictionary_objects(column: Any, convert: Callable[[Any], np.ndarray]) -> np.ndarray:
    """A dictionary-coded column as objects: each entry converted once and shared by its codes, so a code
    repeated 3,000 times costs one string, not 3,000 copies of it."""
    entries = convert(column.dictionary)
    codes = column.indices
    out = np.empty(len(column), dtype=object)
    if not len(column):
        return out
    picks = _fixed_width(codes).astype(np.int64, copy=False)
    valid = _validity(codes)
    if len(entries) == 0:
        return out  # every code is NULL (a code into an empty dictionary is not valid Arrow)
    if valid is None:
        out[:] = entries[np.clip(picks, 0, len(entries) - 1)]
    else:
        out[valid] = entries[np.clip(picks[valid], 0, len(entries) - 1)]
    return out


def _objects(column: Any) -> np.ndarray:
    """Any other column as Python objects; bytes that are not UTF-8 become U+FFFD, not an error.

    Text through ``to_pylist`` (the same values, as fast): ``to_numpy`` would import pandas, as
    :func:`_integers` explains.
    """
    import pyarrow as pa

    check_supported(column)
    if pa.types.is_dictionary(column.type):
        return _dictionary_objects(column, _objects)
    try:
        if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or \
                getattr(pa.types, "is_string_view", lambda t: False)(column.type):
            out = np.empty(len(column), dtype=object)
            out[:] = column.to_pylist()
            return out
        return column.to_numpy(zero_copy_only=False)
    except (UnicodeDecodeError, pa.ArrowInvalid):
        raw = column.cast(pa.large_binary()).to_pylist()
        return np.array([None if v is None else v.decode("utf-8", "replace") for v in raw], dtype=object)


def _blobs(column: Any) -> np.ndarray:
    """A column of raw bytes (``BLOB_SOURCES``) as ``bytes`` objects, None where NULL: never decoded as text.

    Parquet and Arrow exports type ``binaryData`` as a string column holding any bytes; SQLite ones as BLOB.
    """
    import pyarrow as pa

    check_supported(column)
    if pa.types.is_dictionary(column.type):
        return _dictionary_objects(column, _blobs)
    out = np.empty(len(column), dtype=object)
    if pa.types.is_string(column.type) or pa.types.is_large_string(column.type) or pa.types.is_binary(
            column.type) or pa.types.is_large_binary(column.type):
        out[:] = column.cast(pa.large_binary()).to_pylist()
    else:
        out[:] = None  # a type no payload has (damage): nothing to decode
    return out
