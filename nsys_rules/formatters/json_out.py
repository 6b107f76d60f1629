"""The versioned JSON envelope (see ``nsys-rules schema``)."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

from nsys_rules.report import SCHEMA_VERSION, Report, tool_info
from nsys_rules.textsafe import json_safe, unicode_safe


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
    """``value`` as indented JSON a strict parser accepts (:func:`~nsys_rules.textsafe.json_safe`: NaN and
    infinity as null, lone surrogates as escapes), numpy scalars as numbers, sets and tuples as lists, anything
    else as its ``str``; the JSON and SARIF outputs both write this way."""
    return json.dumps(json_safe(value), indent=2, default=_plain, allow_nan=False) + "\n"


def _plain(value: Any) -> Any:
    # What json_safe left: an object the encoder does not know, made plain and made safe again.
    if hasattr(value, "item"):
        return json_safe(value.item())
    if isinstance(value, (set, frozenset, tuple)):
        return json_safe(list(value))
    return unicode_safe(str(value))


@lru_cache(maxsize=1)
def report_schema() -> dict[str, Any]:
    """The JSON Schema of the envelope, shipped in the package."""
    text = resources.files("nsys_rules").joinpath("schema/report.schema.json").read_text(encoding="utf-8")
    return json.loads(text)
