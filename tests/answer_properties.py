"""What every report's answer must satisfy: savings within what can be recovered, every big idle part owned.

Used by the corpus tests (every public export), the H200 traces and our own captures.
"""

from __future__ import annotations

from typing import Any

#: Idle parts that must have an owning finding when they reach this share of the median step.
OWNED_SHARE = 0.1
#: Parts whose time no rule can give back from the host side: they need a reason, not an owner.
EXPLAINED_ONLY = {"graph_internal", "idle_other"}


def savings_problems(report: dict[str, Any]) -> list[str]:
    """Savings that claim more than the step budget can give back (empty when they hold)."""
    problems = []
    for trace in report["traces"]:
        budget = trace.get("budget")
        if not budget:
            continue
        kinds = {p["name"]: p["kind"] for p in budget["parts"]}
        idle = sum(p["ns"] for p in budget["parts"] if p["kind"] == "idle")
        mine = [f for f in report["findings"] if f["location"].get("trace") == trace["path"]
                and not f.get("folded_into") and f.get("estimated_savings_ns") and f.get("budget_part") != "outside"]
        total = sum(f["estimated_savings_ns"] for f in mine)
        # Busy time a finding removes (a kernel class it speeds up) is recoverable too, by that finding alone.
        busy_named = {p for f in mine for p in (f.get("budget_part") or "").split("+") if kinds.get(p) == "busy"}
        room = idle + sum(p["ns"] for p in budget["parts"] if p["name"] in busy_named)
        if total > room:
            problems.append(f"{trace['path']}: savings {total} > idle {idle} + named busy parts ({room})")
        if total > budget["total_ns"]:
            problems.append(f"{trace['path']}: savings {total} > the steady state {budget['total_ns']}")
        only_idle = sum(f["estimated_savings_ns"] for f in mine
                        if f.get("budget_part") and all(kinds.get(p) == "idle" for p in f["budget_part"].split("+")))
        if only_idle > idle:
            problems.append(f"{trace['path']}: idle-part savings {only_idle} > idle {idle}")
    return problems


def coverage_problems(report: dict[str, Any]) -> list[str]:
    """Idle parts of 10 % or more of the median step without an owning finding (or, for the few parts
    no host-side fix recovers, without a reason)."""
    problems = []
    for trace in report["traces"]:
        budget = trace.get("budget")
        if not budget:
            continue
        median = budget["step_ns"]["p50"]
        for part in budget["parts"]:
            if part["kind"] != "idle" or part.get("median_step_ns", 0) < OWNED_SHARE * median:
                continue
            owner = part.get("owner") or {}
            if owner.get("rule"):
                continue
            if part["name"] in EXPLAINED_ONLY and owner.get("why"):
                continue
            problems.append(f"{trace['path']}: {part['name']} ({part['median_step_ns']} ns of {median}) has no owner")
    return problems


_RANK = {"info": 0, "warning": 1, "error": 2}


def severity_problems(report: dict[str, Any]) -> list[str]:
    """Severities the human formats would not show: a folded finding more severe than the finding it is
    folded into, or a minor one above info. Either would let ``--fail-on`` fail on what no output shows."""
    problems = []
    owners = {(f["location"].get("trace"), f["fingerprint"]): f for f in report["findings"] if not f.get("folded_into")}
    for f in report["findings"]:
        if f.get("minor") and f["severity"] != "info":
            problems.append(f"{f['rule']} {f['fingerprint']}: minor but {f['severity']}")
        owner = owners.get((f["location"].get("trace"), f.get("folded_into"))) if f.get("folded_into") else None
        if owner is not None and _RANK[f["severity"]] > _RANK[owner["severity"]]:
            problems.append(f"{f['rule']} {f['fingerprint']}: {f['severity']} folded into {owner['rule']} "
                            f"{owner['severity']}")
    return problems
