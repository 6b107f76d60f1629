"""What a loader plugin builds on: the trace model, the export interface, the memory meter.

A plugin that reads another kind of file registers a loader through the ``register_loaders`` hook
(``docs/plugins.md``, "Adding an export format"): ``load(path)`` returns an :class:`Export` (or a
:class:`Trace` it built itself). :class:`ColumnarExport` turns raw columns into the canonical typed
frames, so a format only reads its own columns and schema; the :class:`ReadMeter` the export is
handed when the trace opens prices each read against ``--max-memory``. A file the loader cannot
read is an :class:`InputError` with one line (exit 3).

Rules never need these names: a rule reads the trace through its context (``ctx.frame(...)``).
These names keep their meaning across minor releases; until the next release,
:mod:`nsys_rules.api` still forwards the ones it used to export, with a deprecation warning.
"""

from __future__ import annotations

from nsys_rules.errors import InputError
from nsys_rules.loaders.columnar import ColumnarExport
from nsys_rules.loaders.export import Export, ReadMeter
from nsys_rules.loaders.tables import TABLES, Column, Table
from nsys_rules.model.trace import CaptureInfo, ExportInfo, GpuInfo, Trace

__all__ = [
    # what a loader returns
    "Trace", "Export", "ColumnarExport",
    # what it fills: the canonical tables and their columns, the capture's facts
    "TABLES", "Table", "Column", "GpuInfo", "CaptureInfo", "ExportInfo",
    # what its reads are priced against, and what it raises
    "ReadMeter", "InputError",
]
