"""Every real trace we have loads: version, tables present, no exception."""

from __future__ import annotations

import pytest

from nsys_rules.loaders.sqlite import SqliteExport
from nsys_rules.loaders.tables import TABLES
from nsys_rules.model.trace import Trace
from tests.conftest import CORPUS, H200


def _traces():
    paths = sorted(H200.glob("*.sqlite")) + sorted(CORPUS.glob("*.sqlite")) + sorted((CORPUS / "converted").glob("*.sqlite"))
    return paths or [pytest.param(None, marks=pytest.mark.skip(reason=f"{H200.parent.parent} is absent"))]


@pytest.mark.parametrize("path", _traces(), ids=lambda p: p.name if p else "none")
def test_every_trace_loads(path):
    trace = Trace(SqliteExport(path))
    assert isinstance(trace.tables_present, tuple)
    for name in trace.tables_present:
        frame = trace.frame(name)
        assert list(frame.columns) == list(TABLES[name].column_names)
        if "start" in frame and "end" in frame and len(frame):
            assert (frame["end"] >= frame["start"]).all()
    if path.parent == H200:
        assert trace.export_info.nsys_version == "2025.3.2.0"
        assert trace.gpu(0) is not None and trace.gpu(0).memory_bandwidth
    trace.close()
