"""The versioned JSON envelope (see ``nsys-rules schema``)."""

from __future__ import annotations

import json
import math
from functools import lru_cache
from importlib import resources
from typing import Any

from nsys_rules.report import SCHEMA_VERSION, Report, tool_info


def envelope(report: Report) -> dict[str, Any]:
    """The report as the JSON envelope object."""
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": tool_info(report),
        "traces": [r.info.to_json() for r in report.results],
        "rules": report.rules,
        "findings": [f.to_json() for f in report.findings],
        "skipped": [s.to_json() for s in report.all_skipped],
        "errors": [e.to_json() for e in report.all_errors],
        "summary": report.summary(),
    }
    if getattr(report, "cross_trace", None) is not None:
        out["cross_trace"] = report.cross_trace  # only when several traces ran (schema: optional)
    capped = report.all_capped
    if capped:
        out["capped"] = [c.to_json() for c in capped]  # only when a rule's findings were cut (schema 1.3: optional)
    if getattr(report, "job", None) is not None:
        out["job"] = report.job.info  # only when the traces held a multi-rank job (schema 1.1: optional)
    return out


def format_json(report: Report) -> str:
    """Deterministic, indented JSON of the envelope."""
    return json_text(envelope(report))


def json_text(value: Any) -> str:
    """``value`` as indented JSON text: NaN and infinity as null (:func:`finite`), numpy scalars as numbers, sets
    and tuples as lists, anything else as its ``str``; the JSON and SARIF outputs both write this way."""
    return json.dumps(finite(value), indent=2, default=_plain, allow_nan=False) + "\n"


def finite(value: Any) -> Any:
    """``value`` with every NaN or infinite float replaced by None: JSON has neither, so the output stays valid
    whatever a plugin rule's options or a metric hold."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [finite(v) for v in value]
    return value


def _plain(value: Any) -> Any:
    if hasattr(value, "item"):
        return value.item()
    if isinstance(value, (set, tuple)):
        return list(value)
    return str(value)


@lru_cache(maxsize=1)
def report_schema() -> dict[str, Any]:
    """The JSON Schema of the envelope, shipped in the package."""
    text = resources.files("nsys_rules").joinpath("schema/report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)
