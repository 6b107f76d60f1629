"""The JSON Schemas of the tools: what each takes and what each returns.

The results reuse the shipped schemas: ``check`` returns the report of ``check --format json``
(``nsys-rules schema``), ``diff`` the JSON of ``diff --format json`` (``nsys-rules schema --diff``),
and ``finding``/``verify`` name a finding as the report does. Each output schema embeds the
shipped schema under ``$defs`` with its ``$id``, so a ``$ref`` to that id resolves inside the
document (JSON Schema 2020-12 embedded resources) and every result validates on its own.
"""

from __future__ import annotations

import copy
from functools import lru_cache
from typing import Any

#: Findings (or stats rows) per page: the default and the most one call returns.
DEFAULT_PAGE = 10
MAX_PAGE = 50
#: Runs per side a ``diff`` call may pool.
MAX_RUNS = 16

_DRAFT = "https://json-schema.org/draft/2020-12/schema"
_FINGERPRINT = {"type": "string", "pattern": "^[0-9a-f]{16}$",
                "description": "a finding's `fingerprint` from check (stable across runs of one program)"}
_TRACE = {"type": "string", "minLength": 1,
          "description": "path of one nsys export: a .sqlite file or a parquetdir/arrowdir folder (read-only)"}
_FILTER_TIME = {"type": "string", "description": "only this window, nsys syntax relative to the session start, "
                "e.g. 5s/7s or 6773689258ns/6860608882ns"}
_PAGE_IN = {
    "offset": {"type": "integer", "minimum": 0, "default": 0, "description": "first item of the page"},
    "limit": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": DEFAULT_PAGE,
              "description": "items per page"},
}
_PAGE_OUT = {"type": "object", "required": ["offset", "limit", "returned", "total", "next_offset"],
             "properties": {"offset": {"type": "integer"}, "limit": {"type": "integer"},
                            "returned": {"type": "integer"}, "total": {"type": "integer"},
                            "next_offset": {"type": ["integer", "null"],
                                            "description": "offset of the next page; null on the last"}}}
_SUMMARY = {"type": "string", "description": "the answer in a few lines, for reading before the JSON"}


def _report_schema() -> dict[str, Any]:
    from nsys_rules.formatters.json_out import report_schema

    return copy.deepcopy(report_schema())


def _diff_schema() -> dict[str, Any]:
    from nsys_rules.diff import diff_schema

    return copy.deepcopy(diff_schema())


def _obj(properties: dict[str, Any], required: list[str], defs: dict[str, Any] | None = None,
         description: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {"$schema": _DRAFT, "type": "object", "properties": properties, "required": required}
    if defs:
        out["$defs"] = defs
    if description:
        out["description"] = description
    return out


def _inputs() -> dict[str, dict[str, Any]]:
    rules = {"type": "array", "items": {"type": "string"}, "maxItems": 100,
             "description": "only these rules (names from `rules`); default all"}
    return {
        "check": _obj({"trace": _TRACE, "rules": rules, "filter_time": _FILTER_TIME, **_PAGE_IN}, ["trace"]),
        "explain": _obj({"rule": {"type": "string", "minLength": 1, "description": "a rule name, e.g. sync-stall"}},
                        ["rule"]),
        "finding": _obj({"trace": _TRACE, "fingerprint": _FINGERPRINT, "rules": rules, "filter_time": _FILTER_TIME},
                        ["trace", "fingerprint"]),
        "diff": _obj({"before": {"type": "array", "items": _TRACE, "minItems": 1, "maxItems": MAX_RUNS,
                                 "description": "runs of the program before the change (2+ measure run-to-run noise)"},
                      "after": {"type": "array", "items": _TRACE, "minItems": 1, "maxItems": MAX_RUNS,
                                "description": "runs after the change"},
                      "gate_pct": {"type": "number", "minimum": 0, "default": 5,
                                   "description": "regressed when the whole interval lies above this percent"},
                      "force": {"type": "boolean", "default": False,
                                "description": "compare traces that do not look like runs of one program and step"},
                      "top": {"type": "integer", "minimum": 1, "maximum": MAX_PAGE, "default": 10,
                              "description": "movers to list"}},
                     ["before", "after"]),
        "verify": _obj({"before": _TRACE, "after": _TRACE, "fingerprint": _FINGERPRINT,
                        "gate_pct": {"type": "number", "minimum": 0, "default": 5}},
                       ["before", "after", "fingerprint"]),
        "stats": _obj({"trace": _TRACE,
                       "report": {"type": "string", "minLength": 1,
                                  "description": "an nsys stats report: cuda_gpu_kern_sum, cuda_api_sum, "
                                                 "cuda_kern_exec_sum, cuda_gpu_mem_time_sum, cuda_gpu_mem_size_sum, "
                                                 "nvtx_sum, gpu_metric_sum (NAME[:VARIANT])"},
                       "filter_time": _FILTER_TIME, **_PAGE_IN}, ["trace", "report"]),
        "profile": _obj({"command": {"type": "array", "items": {"type": "string"}, "minItems": 1, "maxItems": 256,
                                     "description": "the program and its arguments, one word each"},
                         "dry_run": {"type": "boolean", "default": True,
                                     "description": "only say the nsys command and the preflight verdict (running "
                                                    "needs a server started with --allow-profile)"},
                         "trace": {"type": "string", "description": "what nsys traces (default cuda,nvtx,osrt)"},
                         "metrics": {"type": "boolean", "default": False, "description": "also sample GPU metrics"},
                         "python": {"type": "boolean", "default": False,
                                    "description": "also record Python call sites"}},
                        ["command"]),
    }


def _finding_ref(report_id: str) -> dict[str, Any]:
    return {"$ref": f"{report_id}#/$defs/finding"}


def _step() -> dict[str, Any]:
    number = {"type": "number"}
    return {"type": "object", "required": ["verdict", "line", "base_median_ns", "new_median_ns", "estimate_ns",
                                           "low_ns", "high_ns"],
            "properties": {"verdict": {"enum": ["slower", "faster", "no change", "inconclusive"]},
                           "line": {"type": "string"}, "base_median_ns": number, "new_median_ns": number,
                           "estimate_ns": number, "low_ns": number, "high_ns": number,
                           "estimate_pct": {"type": ["number", "null"]}, "low_pct": {"type": ["number", "null"]},
                           "high_pct": {"type": ["number", "null"]}}}


def _outputs() -> dict[str, dict[str, Any]]:
    report = _report_schema()
    diff = _diff_schema()
    rid, did = report["$id"], diff["$id"]
    window = {"type": "object", "required": ["what", "start_ns", "end_ns", "filter_time"],
              "properties": {"what": {"type": "string"}, "start_ns": {"type": "integer"},
                             "end_ns": {"type": "integer"}, "filter_time": {"type": "string"}}}
    problem = {"type": "object", "required": ["kind", "message", "fix"],
               "properties": {"kind": {"enum": ["stop", "warning"]}, "message": {"type": "string"},
                              "fix": {"type": "string"}}}
    return {
        "check": _obj({"summary": _SUMMARY, "page": _PAGE_OUT, "report": {"$ref": rid}},
                      ["summary", "page", "report"], {"report": report},
                      "the check report; `report.findings` holds this page's findings, ranked as check ranks them"),
        "explain": _obj({"rule": {"type": "string"}, "title": {"type": "string"}, "plugin": {"type": "string"},
                         "markdown": {"type": "string"}}, ["rule", "title", "plugin", "markdown"]),
        "finding": _obj({"summary": _SUMMARY, "trace": {"type": "string"}, "finding": _finding_ref(rid),
                         "symptoms": {"type": "array", "items": _finding_ref(rid),
                                      "description": "findings folded into this one (its symptoms)"},
                         "windows": {"type": "array", "items": window},
                         "steps": {"type": ["integer", "null"], "description": "steady steps of the trace"},
                         "savings_per_step_ns": {"type": ["number", "null"]},
                         "recapture": {"type": "string", "description": "the nsys command that captures it again"}},
                        ["summary", "trace", "finding", "symptoms", "windows", "steps", "savings_per_step_ns",
                         "recapture"], {"report": report}),
        "diff": _obj({"summary": _SUMMARY, "diff": {"$ref": did}}, ["summary", "diff"], {"diff": diff}),
        "verify": _obj({"summary": _SUMMARY, "finding": _finding_ref(rid),
                        "cause": {"type": "object", "required": ["status", "before_savings_ns", "after_savings_ns",
                                                                 "after", "same_rule_after"],
                                  "properties": {"status": {"enum": ["gone", "smaller", "unchanged", "larger", "not judged"],
                                                            "description": "not judged: the rule was skipped or "
                                                                           "failed on AFTER"},
                                                 "before_savings_ns": {"type": ["integer", "null"]},
                                                 "after_savings_ns": {"type": ["integer", "null"]},
                                                 "after": {"anyOf": [_finding_ref(rid), {"type": "null"}]},
                                                 "same_rule_after": {"type": "array", "items": _finding_ref(rid)}}},
                        "promise": {"type": "object", "required": ["savings_ns", "steps", "per_step_ns"],
                                    "properties": {"savings_ns": {"type": ["integer", "null"]},
                                                   "steps": {"type": ["integer", "null"]},
                                                   "per_step_ns": {"type": ["number", "null"]}}},
                        "step": {"anyOf": [_step(), {"type": "null"}],
                                 "description": "the diff of the median step; null when a side has no steps"},
                        "promise_verdict": {"enum": ["exceeded", "met", "short", "not kept", "unproven",
                                                     "no promise"]},
                        "realized_pct": {"type": ["number", "null"],
                                         "description": "the step time saved, percent of the promised saving"},
                        "diff": {"anyOf": [{"$ref": did}, {"type": "null"}]}},
                       ["summary", "finding", "cause", "promise", "step", "promise_verdict", "realized_pct", "diff"],
                       {"report": report, "diff": diff}),
        "stats": _obj({"report": {"type": "string"}, "columns": {"type": "array", "items": {"type": "string"}},
                       "rows": {"type": "array", "items": {"type": "object"}}, "page": _PAGE_OUT,
                       "reason": {"type": ["string", "null"], "description": "why the report is empty"}},
                      ["report", "columns", "rows", "page", "reason"]),
        "profile": _obj({"summary": _SUMMARY, "command": {"type": "array", "items": {"type": "string"}},
                         "shell": {"type": "string"}, "preflight": {"type": "array", "items": problem},
                         "verdict": {"enum": ["ok", "stops"]}, "ran": {"type": "boolean"},
                         "exit_code": {"type": ["integer", "null"]},
                         "traces": {"type": "array", "items": {"type": "string"}}},
                        ["summary", "command", "shell", "preflight", "verdict", "ran", "exit_code", "traces"]),
    }


#: What each tool is for, as the agent reads it in the tool list.
DESCRIPTIONS = {
    "check": "Run the rules on one nsys export: the step budget and the ranked findings (what to fix first, each "
             "with its estimated savings in ns over the steady state), paged; read `summary` first.",
    "explain": "A rule's documentation: what it detects, why it hurts, its evidence, next optimizations, options.",
    "finding": "One finding of a trace by fingerprint: its evidence, its symptoms, the time windows to look at "
               "(with --filter-time values) and the nsys command that captures the program again.",
    "diff": "Compare runs per step: the verdict (slower / faster / no change / inconclusive) on the median step with "
            "its 95 % interval, and the movers. One run per side cannot show a regression from noise: pass 2+ runs.",
    "verify": "Did a change remove a finding's cause? The finding in BEFORE looked up in AFTER, and the step's "
              "change (the diff verdict) against the saving the finding promised.",
    "stats": "An nsys stats report (same numbers as `nsys stats`), paged rows.",
    "profile": "The nsys capture command for a program and the preflight verdict (dry run, the default); running "
               "it is refused unless the server was started with --allow-profile.",
}


@lru_cache(maxsize=1)
def tool_schemas() -> dict[str, tuple[dict[str, Any], dict[str, Any]]]:
    """Each tool's (input schema, output schema), in the order the tools are listed."""
    inputs, outputs = _inputs(), _outputs()
    return {name: (inputs[name], outputs[name]) for name in DESCRIPTIONS}
