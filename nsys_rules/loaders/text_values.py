"""Which Arrow types arrive as Python text, and how much text an Arrow array holds once decoded.

Shared by the memory prices of every columnar format (:mod:`.decoded_price`, :mod:`.parquet_price`):
strings, binaries, fixed-size binaries, their views and their dictionaries are text; an array's text is
counted from its lengths, dictionary codes expanded, without making a Python value.
"""

from __future__ import annotations

from typing import Any

from nsys_rules.loaders.stored_bytes import TextUse


def is_text_type(arrow_type: Any) -> bool:
    """Whether values of ``arrow_type`` arrive as Python str/bytes (strings, binaries, their views and dictionaries)."""
    import pyarrow as pa

    if pa.types.is_dictionary(arrow_type):
        return is_text_type(arrow_type.value_type)
    return bool(pa.types.is_string(arrow_type) or pa.types.is_large_string(arrow_type)
                or pa.types.is_binary(arrow_type) or pa.types.is_large_binary(arrow_type)
                or pa.types.is_fixed_size_binary(arrow_type) or is_view(arrow_type))


def is_view(arrow_type: Any) -> bool:
    """Whether ``arrow_type`` is a string or binary view (16-byte views into shared buffers)."""
    import pyarrow as pa

    return bool(getattr(pa.types, "is_string_view", lambda t: False)(arrow_type)
                or getattr(pa.types, "is_binary_view", lambda t: False)(arrow_type))


def add_text(a: TextUse, b: TextUse) -> TextUse:
    """Two text uses as one (sums, the larger largest value)."""
    return TextUse(a.values + b.values, a.bytes + b.bytes, a.chars + b.chars, max(a.largest, b.largest))


def text_use(array: Any) -> TextUse:
    """Text values, bytes and largest value of one Arrow array as decoded (dictionary codes expanded)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    if isinstance(array, pa.ChunkedArray):
        total = TextUse()
        for chunk in array.chunks:
            total = add_text(total, text_use(chunk))
        return total
    if pa.types.is_dictionary(array.type):
        lengths = _lengths(array.dictionary)
        if lengths is None:
            return TextUse()
        codes = array.indices
        picked = pc.take(lengths, codes)
    else:
        picked = _lengths(array)
        if picked is None:
            return TextUse()
    values = len(picked) - picked.null_count
    size = int(pc.sum(picked).as_py() or 0)
    largest = int(pc.max(picked).as_py() or 0)
    return TextUse(values, size, size, largest)


def _lengths(array: Any) -> Any:
    import pyarrow as pa
    import pyarrow.compute as pc

    if pa.types.is_fixed_size_binary(array.type):
        return pa.array([array.type.byte_width if v else None for v in array.is_valid().to_pylist()], pa.int64())
    if not is_text_type(array.type):
        return None
    if is_view(array.type):
        # No length kernel for views: each 16-byte view starts with its value's length.
        import numpy as np

        views = np.frombuffer(array.buffers()[1], np.int32)[::4][array.offset:array.offset + len(array)]
        return pa.array(views.astype(np.int64), mask=None if not array.null_count else
                        np.asarray(array.is_null().to_numpy(zero_copy_only=False), bool))
    return pc.cast(pc.binary_length(array), pa.int64())
