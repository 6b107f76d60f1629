"""One answer per trace: savings drawn from the step budget, symptoms folded into causes, a noise floor.

Rules estimate what fixing their finding would save and name the budget part it comes from
(:mod:`nsys_rules.model.budget`). Here, after every rule ran:

1. On a trace that an error-level finding calls misleading (``CUDA_LAUNCH_BLOCKING``, a debug
   build, graph-mode hidden kernels) every timing-based saving is withheld, with the reason.
2. Each saving is capped by its budget part; findings of one part share it, the highest ranked
   first, so the savings of a trace add up to at most its steady-state time.
3. Symptoms (GPU idle gaps, low utilization, queue delay) whose idle time a root-cause finding
   explains are folded into it (``folded_into``); start-up symptoms fold into capture-scope, and
   so does any other finding about start-up or shutdown alone: one without step-time savings whose
   location lies wholly before or after the steady state (the weight load's pageable copies, the
   final readback).
4. Findings that are not errors and save less than the noise floor are marked ``minor`` and shown
   as info at most, and so are timing findings whose savings were withheld: they wait for a re-capture.
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from nsys_rules.model.budget import KINDS, Budget
from nsys_rules.findings import Finding, Severity

#: Rules whose error says the trace's timings cannot be trusted.
MISLEADING_RULES = frozenset({"launch-blocking", "debug-build", "graph-trace-hidden"})

#: Rules that measure a symptom (idle time) rather than its cause.
SYMPTOM_RULES = frozenset({"gpu-idle-gaps", "gpu-low-utilization", "queue-delay"})

#: Budget parts whose time is GPU idle (or waiting on others): the causes symptoms fold into.
CAUSE_PARTS = frozenset(name for name, kind in KINDS.items() if kind == "idle") | {"contention"}

#: step-outliers' causes (its fingerprint key) and the rule that reports that cause for every step.
OUTLIER_CAUSES = {"kernels": "kernel-tail", "module loading": "module-loading", "allocation": "alloc-churn",
                  "synchronization": "sync-stall"}

#: Rules that explain idle time without a budget part of their own (the trace is misleading as a whole).
CAUSE_RULES = frozenset({"launch-blocking"})


def finalize(findings: Iterable[Finding], budget: Budget | None, steady: tuple[int, int] | None,
             noise_floor_pct: float = 0.5, judged_ns: int = 0) -> list[Finding]:
    """The findings of one trace, made into one consistent answer (see the module docstring).

    ``steady`` is the steady state's host span (start-up symptoms lie before it); ``judged_ns`` the
    time the noise floor is a share of when there are no steps (the judged window's length).
    """
    out = list(findings)
    out = _withhold(out)
    out = _cap(out, budget)
    out = _fold(out, steady)
    floor = noise_floor_pct / 100.0 * (budget.total_ns if budget is not None else judged_ns)
    return [_as_minor(f) if _is_minor(f, floor) else f for f in out]


def _as_minor(f: Finding) -> Finding:
    """A finding under the noise floor: minor, and never above info (it must not fail a CI gate)."""
    return dataclasses.replace(f, minor=True, severity=min(f.severity, Severity.INFO, key=lambda s: s.rank))


def _withhold(findings: list[Finding]) -> list[Finding]:
    misleading = sorted({f.rule for f in findings if f.severity is Severity.ERROR and f.rule in MISLEADING_RULES})
    if not misleading:
        return findings
    note = (f"withheld: {', '.join(misleading)} says this trace's timings mislead; re-capture first "
            "(see that finding)")
    # A timing judgement on a misleading trace is at most information: its cause may be the capture.
    out = []
    for f in findings:
        if f.rule in MISLEADING_RULES:
            out.append(f)
        elif f.estimated_savings_ns is not None:
            out.append(dataclasses.replace(f, estimated_savings_ns=None, savings_range=None, savings_note=note,
                                           minor=True, severity=min(f.severity, Severity.INFO, key=lambda s: s.rank)))
        elif f.rule in SYMPTOM_RULES and f.severity is not Severity.INFO:
            out.append(dataclasses.replace(f, severity=Severity.INFO, savings_note=note))
        else:
            out.append(f)
    return out


def _claim_order(f: Finding) -> tuple[int, int, str]:
    return (-f.severity.rank, -(f.estimated_savings_ns or 0), f.rule)


def _cap(findings: list[Finding], budget: Budget | None) -> list[Finding]:
    """Savings capped by their part and shared within it; savings without a part share what the parts leave."""
    if budget is None:
        return findings
    remaining = {p.name: p.ns for p in budget.parts}
    claimed = 0
    out = list(findings)
    order = sorted(range(len(out)), key=lambda i: _claim_order(out[i]))
    for i in order:
        f = out[i]
        if f.estimated_savings_ns is None or f.budget_part is None:
            continue
        # A finding may draw on several parts ("gemv+idle_other"): its room is their sum, and what
        # it takes comes out of each in proportion.
        parts = [p for p in f.budget_part.split("+") if p]
        room = sum(remaining.get(p, 0) for p in parts)
        take = min(f.estimated_savings_ns, room)
        for p in parts:
            share = take * remaining.get(p, 0) // room if room else 0
            remaining[p] = remaining.get(p, 0) - share
        claimed += take
        out[i] = _with_savings(f, take, room)
    pool = max(0, budget.total_ns - claimed)
    for i in order:
        f = out[i]
        if f.estimated_savings_ns is None or f.budget_part is not None:
            continue
        take = min(f.estimated_savings_ns, pool)
        pool -= take
        out[i] = _with_savings(f, take, take)
    return out


def _with_savings(f: Finding, take: int, room: int) -> Finding:
    if take == f.estimated_savings_ns and (f.savings_range is None or f.savings_range[1] <= room):
        return f
    bounds = None if f.savings_range is None else (min(f.savings_range[0], take), min(f.savings_range[1], room))
    note = f.savings_note
    if take < (f.estimated_savings_ns or 0):
        note = "capped by the step budget (shared with other findings of the same part)" if not note else note
    return dataclasses.replace(f, estimated_savings_ns=int(take), savings_range=bounds, savings_note=note)


def _fold(findings: list[Finding], steady: tuple[int, int] | None) -> list[Finding]:
    causes = [f for f in findings if f.rule not in SYMPTOM_RULES and (
        f.budget_part in CAUSE_PARTS or f.rule in CAUSE_RULES)]
    causes.sort(key=_claim_order)
    # On a misleading trace the capture explains idle time when no finding of the steady state does.
    causes += sorted((f for f in findings if f.severity is Severity.ERROR and f.rule in MISLEADING_RULES),
                     key=_claim_order)
    scope = next((f for f in findings if f.rule == "capture-scope"), None)
    out = []
    for f in findings:
        target = None
        start_up = False
        if f.rule == "step-outliers" and f.key in OUTLIER_CAUSES:
            # Slow steps whose cause another finding already reports (its kernels' tail, its module
            # loading, allocations, syncs) are that finding seen per step: one finding, not two.
            owner = OUTLIER_CAUSES[f.key]
            grown = set((f.budget_part or "").split("+"))
            target = next((t for t in sorted(findings, key=_claim_order) if t.rule == owner and t.budget_part
                           and t.budget_part in grown and t.estimated_savings_ns), None)
        if f.rule in SYMPTOM_RULES:
            # Symptoms that begin before the steady state are about loading and warm-up.
            start_up = steady is not None and f.location.start_ns is not None and f.location.start_ns < steady[0]
            if start_up and scope is not None:
                target = scope
            elif not start_up and causes:
                target = causes[0]
        elif target is None and _outside_steady(f, steady):
            # A finding located wholly before the steady state (the weight load's copies) or after it
            # (the final readback) is about start-up or shutdown: capture-scope's to say, and
            # nothing the steady state gains.
            start_up = True
            target = scope
        if target is None:
            if start_up:  # idle during start-up is not step time: nothing the steady state gains
                f = dataclasses.replace(f, estimated_savings_ns=0, savings_note="start-up, not step time")
            out.append(f)
            continue
        out.append(dataclasses.replace(f, folded_into=target.fingerprint, estimated_savings_ns=None,
                                       savings_range=None, savings_note=f"explained by {target.rule}"))
    return out


def _outside_steady(f: Finding, steady: tuple[int, int] | None) -> bool:
    """A finding about start-up or shutdown alone: not an error, no step-time savings, located wholly outside the steady state."""
    loc = f.location
    return (steady is not None and f.rule != "capture-scope" and f.severity is not Severity.ERROR
            and not f.estimated_savings_ns and loc.start_ns is not None and loc.end_ns is not None
            and (loc.end_ns < steady[0] or loc.start_ns > steady[1]))


def _is_minor(f: Finding, floor: float) -> bool:
    """Not an error, and a known saving under the floor (nothing to gain is always under it)."""
    if f.severity is Severity.ERROR or f.folded_into or f.estimated_savings_ns is None:
        return False
    return f.estimated_savings_ns == 0 or f.estimated_savings_ns < floor
