"""Every trace we have: input-prep, module-loading (lazy loading) and recompile name their cause only with its evidence.

The H200 traces, our own captures (tests/data, tests/data/causes when merged) and the public corpus
(plain and converted), each through the same cached ``check --format json`` run as the verdict tests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.capture_verdicts import check_json, packed_report
from tests.cause_evidence import cause_evidence_problems
from tests.conftest import CORPUS, H200

DATA = Path(__file__).resolve().parents[1] / "data"


def _cases() -> list:
    paths = sorted(H200.glob("*.sqlite")) if H200.exists() else []
    paths += sorted(DATA.glob("*/*.sqlite.xz")) + sorted(DATA.glob("*/*.sqlite"))
    if CORPUS.exists():
        paths += sorted(CORPUS.glob("*.sqlite")) + sorted((CORPUS / "converted").glob("*.sqlite"))
    return [pytest.param(p, id=f"{p.parent.name}/{p.name}") for p in paths]


@pytest.fixture(scope="module")
def unpacked(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("captures")


@pytest.mark.parametrize("path", _cases())
def test_a_cause_is_named_only_with_its_evidence(path, unpacked):
    report = packed_report(path, unpacked) if path.suffix == ".xz" else check_json(path)
    assert cause_evidence_problems(report) == []


def test_the_check_catches_a_cause_without_evidence():
    # The check itself: an input-prep finding that claims input with no evidence, and a recompile with none.
    def finding(rule: str, message: str, **metrics: float) -> dict:
        return {"rule": rule, "message": message, "metrics": {k: {"value": v, "unit": "count"} for k, v in metrics.items()}}
    report = {"findings": [finding("input-prep", "... the next step's input prepared on ...", input_evidence=0),
                           finding("recompile", "new GPU code was built", module_loads=0, graph_captures=0),
                           finding("input-prep", "... its cause is not in this capture ...", input_evidence=0),
                           finding("module-loading", "lazy", load_calls=3)]}
    assert len(cause_evidence_problems(report)) == 2
