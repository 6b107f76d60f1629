"""Parquet files of every physical type and encoding pyarrow writes, for fuzzing the memory price.

:func:`cases` yields (name, table, write options): each column type (BOOLEAN, INT32, INT64, INT96,
FLOAT, DOUBLE, FIXED_LEN_BYTE_ARRAY plain and as a decimal or float16, BYTE_ARRAY as strings and
binaries, dictionary types, decimals stored as integers, lists, structs and maps) crossed with every
encoding that type takes (dictionary, PLAIN, RLE, DELTA_BINARY_PACKED, DELTA_LENGTH_BYTE_ARRAY,
DELTA_BYTE_ARRAY, BYTE_STREAM_SPLIT), both data page versions, and values drawn to repeat (long
values many times: what dictionary codes and prefixes make small).
"""

from __future__ import annotations

import decimal
from typing import Any, Callable, Iterator

import numpy as np
import pyarrow as pa

#: Encodings a column may be given without a dictionary, by physical type (what the Parquet spec allows).
ENCODINGS = {
    "BOOLEAN": ["PLAIN", "RLE"],
    "INT32": ["PLAIN", "DELTA_BINARY_PACKED", "BYTE_STREAM_SPLIT"],
    "INT64": ["PLAIN", "DELTA_BINARY_PACKED", "BYTE_STREAM_SPLIT"],
    "INT96": ["PLAIN"],
    "FLOAT": ["PLAIN", "BYTE_STREAM_SPLIT"],
    "DOUBLE": ["PLAIN", "BYTE_STREAM_SPLIT"],
    "FIXED_LEN_BYTE_ARRAY": ["PLAIN", "DELTA_BYTE_ARRAY", "BYTE_STREAM_SPLIT"],
    "BYTE_ARRAY": ["PLAIN", "DELTA_LENGTH_BYTE_ARRAY", "DELTA_BYTE_ARRAY"],
}


def _nulls(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.random(n) < rng.choice([0.0, 0.1, 0.6])


def _repeating_text(rng: np.random.Generator, n: int) -> list[str | None]:
    """A few long values (up to 4 KB), each repeated many times, some NULL."""
    pool = ["".join(rng.choice(list("abcxyz"), int(rng.integers(0, 4096)))) for _ in range(int(rng.integers(1, 6)))]
    picks = rng.integers(0, len(pool), n)
    nulls = _nulls(rng, n)
    return [None if nulls[i] else pool[picks[i]] for i in range(n)]


def _fixed(width: int) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        pool = [bytes(rng.integers(0, 3, width, dtype=np.uint8)) for _ in range(3)]
        nulls = _nulls(rng, n)
        return pa.array([None if nulls[i] else pool[i % 3] for i in range(n)], pa.binary(width))
    return make


def _ints(dtype: str, arrow: pa.DataType) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        values = rng.integers(-5, 5, n).astype(dtype) * rng.choice([1, 1000, 2**20])
        return pa.array(values, arrow, mask=_nulls(rng, n))
    return make


def _floats(arrow: pa.DataType) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        return pa.array(rng.integers(0, 4, n).astype("float64") / 3, pa.float64(), mask=_nulls(rng, n)).cast(arrow)
    return make


def _decimals(precision: int, scale: int, arrow: pa.DataType) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        nulls = _nulls(rng, n)
        return pa.array([None if nulls[i] else decimal.Decimal(int(rng.integers(-999, 999))).scaleb(-scale)
                         for i in range(n)], arrow)
    return make


def _strings(arrow: pa.DataType) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        values = _repeating_text(rng, n)
        if pa.types.is_binary(arrow) or pa.types.is_large_binary(arrow):
            return pa.array([None if v is None else v.encode() for v in values], arrow)
        return pa.array(values, arrow)
    return make


def _dictionary_text(rng: np.random.Generator, n: int) -> pa.Array:
    return pa.array(_repeating_text(rng, n), pa.large_string()).dictionary_encode()


def _lists(item: Callable[[np.random.Generator, int], pa.Array]) -> Callable[[np.random.Generator, int], pa.Array]:
    def make(rng: np.random.Generator, n: int) -> pa.Array:
        lengths = rng.integers(0, 40, n)
        values = item(rng, int(lengths.sum()))
        offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32)
        return pa.ListArray.from_arrays(pa.array(offsets), values)
    return make


def _struct(rng: np.random.Generator, n: int) -> pa.Array:
    return pa.StructArray.from_arrays([_ints("int64", pa.int64())(rng, n), _strings(pa.string())(rng, n)], ["a", "b"])


def _map(rng: np.random.Generator, n: int) -> pa.Array:
    lengths = rng.integers(0, 6, n)
    total = int(lengths.sum())
    keys = pa.array([f"k{i % 7}" for i in range(total)])
    items = _strings(pa.string())(rng, total)
    offsets = pa.array(np.concatenate([[0], np.cumsum(lengths)]).astype(np.int32))
    return pa.MapArray.from_arrays(offsets, keys, items)


def _int96(rng: np.random.Generator, n: int) -> pa.Array:
    return pa.array(rng.integers(0, 10**15, n), pa.timestamp("ns"), mask=_nulls(rng, n))


#: (name, physical type, builder, extra write options)
COLUMNS: list[tuple[str, str, Callable[[np.random.Generator, int], pa.Array], dict[str, Any]]] = [
    ("bool", "BOOLEAN", lambda rng, n: pa.array(rng.random(n) < 0.5, mask=_nulls(rng, n)), {}),
    ("int8", "INT32", _ints("int8", pa.int8()), {}),
    ("uint32", "INT32", _ints("int64", pa.int64()), {}),
    ("int32", "INT32", _ints("int32", pa.int32()), {}),
    ("int64", "INT64", _ints("int64", pa.int64()), {}),
    ("uint64", "INT64", lambda rng, n: pa.array(rng.integers(0, 2**40, n).astype("uint64"), pa.uint64()), {}),
    ("date32", "INT32", lambda rng, n: pa.array(rng.integers(0, 9, n).astype("int32"), pa.int32()).cast(pa.date32()),
     {}),
    ("timestamp", "INT64", lambda rng, n: pa.array(rng.integers(0, 10**15, n), pa.timestamp("us")), {}),
    ("int96", "INT96", _int96, {"use_deprecated_int96_timestamps": True}),
    ("float32", "FLOAT", _floats(pa.float32()), {}),
    ("float64", "DOUBLE", _floats(pa.float64()), {}),
    ("float16", "FIXED_LEN_BYTE_ARRAY", _floats(pa.float16()), {}),
    ("flba3", "FIXED_LEN_BYTE_ARRAY", _fixed(3), {}),
    ("flba700", "FIXED_LEN_BYTE_ARRAY", _fixed(700), {}),
    ("decimal128", "FIXED_LEN_BYTE_ARRAY", _decimals(30, 2, pa.decimal128(30, 2)), {}),
    ("decimal256", "FIXED_LEN_BYTE_ARRAY", _decimals(60, 3, pa.decimal256(60, 3)), {}),
    ("decimal_int32", "INT32", _decimals(7, 2, pa.decimal128(7, 2)), {"store_decimal_as_integer": True}),
    ("decimal_int64", "INT64", _decimals(15, 2, pa.decimal128(15, 2)), {"store_decimal_as_integer": True}),
    ("string", "BYTE_ARRAY", _strings(pa.string()), {}),
    ("large_string", "BYTE_ARRAY", _strings(pa.large_string()), {}),
    ("binary", "BYTE_ARRAY", _strings(pa.binary()), {}),
    ("dictionary_string", "BYTE_ARRAY", _dictionary_text, {}),
    ("list_int64", "INT64", _lists(_ints("int64", pa.int64())), {}),
    ("list_string", "BYTE_ARRAY", _lists(_strings(pa.string())), {}),
    ("list_flba", "FIXED_LEN_BYTE_ARRAY", _lists(_fixed(40)), {}),
    ("struct", "", _struct, {}),
    ("map", "", _map, {}),
]


def cases(seed: int = 0, rows: int = 1500) -> Iterator[tuple[str, pa.Table, dict[str, Any]]]:
    """Every column type crossed with its encodings and both page versions, as (name, table, write options)."""
    rng = np.random.default_rng(seed)
    for name, physical, build, extra in COLUMNS:
        n = int(rng.integers(1, rows))
        data = pa.table({"c": build(rng, n)})
        encodings = [None] + (ENCODINGS.get(physical, []) if physical else [])
        for encoding in encodings:
            for version in ("1.0", "2.0"):
                options: dict[str, Any] = {"data_page_version": version, "compression": str(rng.choice(
                    ["none", "zstd", "snappy"])), "data_page_size": int(rng.choice([512, 4096, 1 << 20])), **extra}
                if encoding is None:
                    options["use_dictionary"] = True
                    options["dictionary_pagesize_limit"] = int(rng.choice([256, 1 << 20]))
                else:
                    options["use_dictionary"] = False
                    options["column_encoding"] = {"c": encoding}
                yield f"{name}-{encoding or 'dictionary'}-v{version}", data, options
