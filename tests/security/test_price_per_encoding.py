"""One memory price for every Parquet type and encoding, never below what pyarrow's decoder makes of it.

The price (:mod:`nsys_rules.loaders.parquet_price`) reads only the footer and page headers. Fuzzed
against the real decoder over files of every physical type and encoding (:mod:`tests.security.encodings`):
the decoded bytes, the text (or object) values and their bytes, the rows, and one batch of the read as
the loader makes it are all at or above what pyarrow decodes. The issue's case, a FIXED_LEN_BYTE_ARRAY
dictionary in ``StringIds`` (an 11 KB file, 4 GB decoded), is refused under ``--max-memory 300M`` below
350 MB of peak memory.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest

from nsys_rules.loaders.arrowdir import BATCH_ROWS, ArrowDirExport
from nsys_rules.loaders.decoded_price import is_text_type
from nsys_rules.loaders.parquet_price import leaf_prices, scan_text
from tests.corpus.test_public_corpus import run_with_rss
from tests.security.encodings import COLUMNS, cases
from tests.security.parquet_forgeries import fixed_width_dictionary
from tests.unit._folders import step_exports

MB = 1 << 20
TABLE = "CUPTI_ACTIVITY_KIND_KERNEL"


@pytest.fixture(scope="module")
def bases(tmp_path_factory) -> dict[str, Path]:
    return step_exports(tmp_path_factory.mktemp("bases"), ranges=20, kernels=40)


@pytest.fixture(scope="module")
def flba(bases, tmp_path_factory) -> Path:
    """The small export with the issue's StringIds: a 1 MB FIXED_LEN_BYTE_ARRAY dictionary entry in 4,096 rows."""
    folder = shutil.copytree(bases["parquet"], tmp_path_factory.mktemp("flba") / "flba.parquetdir")
    fixed_width_dictionary(folder / "StringIds.parquet")
    return folder


def _buffers(array: pa.ChunkedArray) -> int:
    return sum(chunk.get_total_buffer_size() for chunk in array.chunks)


def _text_bytes(array: pa.ChunkedArray) -> tuple[int, int]:
    """(non-NULL values, their bytes) of a flat column as the loader turns it into Python values."""
    if pa.types.is_dictionary(array.type):
        array = array.cast(array.type.value_type)
    if pa.types.is_fixed_size_binary(array.type):
        valid = len(array) - array.null_count
        return valid, valid * array.type.byte_width
    if is_text_type(array.type):
        return len(array) - array.null_count, int(pc.sum(pc.binary_length(array)).as_py() or 0)
    return len(array) - array.null_count, 0


def test_the_price_is_never_below_the_decoded_columns(bases, tmp_path):
    """Every type x encoding x page version (about 130 files): price >= what pyarrow decodes."""
    seen: dict[str, int] = {}
    for i, (name, data, options) in enumerate(cases(seed=int(os.environ.get("NSYS_RULES_FUZZ_SEED", "0")))):
        folder = tmp_path / f"f{i}.parquetdir"
        shutil.copytree(bases["parquet"], folder)
        path = folder / f"{TABLE}.parquet"
        try:
            pq.write_table(data, path, **options)
        except (pa.ArrowNotImplementedError, pa.ArrowInvalid, ValueError, TypeError):
            continue  # a combination this pyarrow does not write (e.g. an encoding for a nested leaf)
        try:
            decoded = pq.read_table(path, columns=["c"]).column("c")
        except OSError:  # written but not read back by this pyarrow (a dictionary type by DELTA_LENGTH_BYTE_ARRAY)
            continue
        seen[name.split("-")[0]] = seen.get(name.split("-")[0], 0) + 1
        export = ArrowDirExport(folder)
        price = export.decoded_price(TABLE, ["c"], None)
        what = f"{name}: {price}"
        assert price.rows >= len(decoded), what
        assert price.decoded >= _buffers(decoded), (what, _buffers(decoded))
        try:
            batches = list(export._batches(TABLE, ["c"], BATCH_ROWS))
        except OSError:  # e.g. DELTA_LENGTH_BYTE_ARRAY text read with its dictionary kept: pyarrow cannot
            continue
        largest = max((b.get_total_buffer_size() for b in batches), default=0)
        assert price.transient >= largest, (what, largest)
        if not (pa.types.is_integer(decoded.type) or pa.types.is_nested(decoded.type)):
            values, size = _text_bytes(decoded)
            assert price.text.values >= values and price.text.bytes >= size, (what, values, size)
            for leaf in leaf_prices(export, TABLE, ["c"]):
                if leaf.loose:  # a bound from codes or prefixes: the scan finds the exact text
                    exact = scan_text(export, TABLE, leaf, None)
                    assert exact is not None and (exact.values, exact.bytes) == (values, size), (what, exact)
    # Every column type was written with more than one encoding or page version.
    assert {name for name, *_ in COLUMNS} == set(seen), seen
    assert all(count >= 2 for count in seen.values()), seen


def test_a_fixed_width_dictionary_is_priced_without_decoding_it(flba):
    assert (flba / "StringIds.parquet").stat().st_size < 64 * 1024
    export = ArrowDirExport(flba)
    price = export.decoded_price("StringIds", ["id", "value"], 300 * MB)
    assert price.text.bytes == 4096 * MB and price.text.largest == MB  # every code expanded, from the headers
    assert price.transient >= 4096 * MB  # one batch of the read holds every row: 4 GB
    assert "_text_scans" not in export.__dict__  # nothing was decoded to price it


@pytest.mark.skipif(not hasattr(os, "wait4"), reason="peak RSS needs os.wait4")
def test_the_issue_fixed_width_dictionary_is_refused_below_350_mb(flba, monkeypatch):
    """The issue's case: 4.3 GB peak under --max-memory 300M before (the exact scan decoded it); now refused
    from the headers, exit 3, one line."""
    monkeypatch.setenv("COLUMNS", "")  # the error line unwrapped, as a pipe gets it
    folder = flba
    for command in (["check", "--no-plugins", "--format", "json"], ["stats", "-r", "nvtx_sum", "--format", "csv"]):
        code, out, err, peak = run_with_rss(*command, "--max-memory", "300M", str(folder), timeout=120)
        assert code == 3 and out == "" and err.count("\n") == 1, (command, code, err[-500:])
        assert "(--max-memory)" in err and "needs about" in err, err
        assert peak < 350 * MB, f"{command[0]}: peak {peak / MB:.0f} MB"
