"""One answer per trace: savings drawn from the step budget, symptoms folded into causes, a noise floor.

Rules estimate what fixing their finding would save and name the budget part it comes from
(:mod:`nsys_rules.model.budget`). Here, after every rule ran:

1. On a trace that an error-level finding calls misleading (``CUDA_LAUNCH_BLOCKING``, a debug
   build, graph-mode hidden kernels) every timing-based saving is withheld, with the reason.
2. Each saving is capped by its budget part; findings of one part share it, causes first, then
   step-outliers (slow steps: a symptom), then the idle-time symptoms, each group by severity and
   saving, so the owner of a part keeps its saving. Idle-time symptoms draw on idle parts only (slow
   steps may draw on the busy time that grew in them), and a saving
   without a part on what the idle parts leave: the savings of a trace add up to at most its idle
   time plus the busy time of the parts a finding removes (a kernel class it speeds up). A saving
   outside the steady steps (``budget_part="outside"``: an earlier regime) is not in their budget.
3. Every idle part of the median step is owned by the finding that claims most of it (``owners``);
   an owner of a part of at least :data:`WARN_PART_SHARE` of the median step is at least a warning
   when its own saving is at least :data:`RAISE_SAVING_SHARE` of the part.
4. Symptoms (GPU idle gaps, low utilization, queue delay) whose idle time a root-cause finding
   explains are folded into it (``folded_into``; never into a cause under the noise floor, which
   explains too little); start-up symptoms fold into capture-scope, and
   so does any other finding about start-up or shutdown alone: one without step-time savings whose
   location lies wholly before or after the steady state (the weight load's pageable copies, the
   final readback).
5. Findings that are not errors (or are errors only because the user set the rule's severity) and
   save less than the noise floor are marked ``minor`` and shown as info at most, and so are timing
   findings whose savings were withheld: they wait for a re-capture.
6. A folded finding is at most as severe as its owner (the answer judges them as one), so the
   exit code of ``--fail-on`` is decided by what the human formats show.

On a debug build (the debug-build error), the advice of rules that tune the program from its measured
times (``Rule.needs_release_build``) is replaced by the re-capture: the times are the debug build's.
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

#: Slow steps: what grew in them is explained by the causes first.
STEP_SYMPTOM_RULES = frozenset({"step-outliers"})

#: An idle part of at least this share of the median step makes its owner at least a warning; under
#: :data:`OWNED_PART_SHARE` a part needs no owner.
WARN_PART_SHARE = 0.2
OWNED_PART_SHARE = 0.1
#: ...when its own saving is at least this share of the part: the fix it recommends recovers that time.
RAISE_SAVING_SHARE = 0.5

#: ``budget_part`` of a saving made outside the steady steps (an earlier regime): not in their budget.
OUTSIDE = "outside"


def finalize(findings: Iterable[Finding], budget: Budget | None, steady: tuple[int, int] | None,
             noise_floor_pct: float = 0.5, judged_ns: int = 0, fixed: frozenset[str] = frozenset(),
             release_only: frozenset[str] = frozenset()) -> list[Finding]:
    """The findings of one trace, made into one consistent answer (see the module docstring).

    ``steady`` is the steady state's host span (start-up symptoms lie before it); ``judged_ns`` the
    time the noise floor is a share of when there are no steps (the judged window's length);
    ``fixed`` the rules whose severity the user set (never raised here); ``release_only`` the rules
    whose advice needs the release build's times (``Rule.needs_release_build``).
    """
    out = list(findings)
    floor = noise_floor_pct / 100.0 * (budget.total_ns if budget is not None else judged_ns)
    out = _withhold(out)
    out = _on_debug_build(out, release_only)
    out = _cap(out, budget)
    out = _fold(out, steady, floor, fixed)
    out = _raise_owners(out, budget, fixed)
    out = [_as_minor(f) if _is_minor(f, floor, fixed) else f for f in out]
    return _judged_by_owner(out)


def part_owners(findings: Iterable[Finding], budget: Budget) -> dict[str, dict[str, object]]:
    """Per idle part of the budget, the finding that owns it (claims most of its time), or why none does.

    ``{part: {"rule": ..., "fingerprint": ..., "severity": ...}}`` for an owned part,
    ``{part: {"owner": None, "why": ...}}`` otherwise: the part is under
    :data:`OWNED_PART_SHARE` of the median step, or no rule of the run explains it.
    """
    median = budget.quantile(0.5) or 1
    claims: dict[str, list[Finding]] = {}
    for f in findings:
        if f.folded_into or not f.budget_part or f.budget_part == OUTSIDE:
            continue
        for name in f.budget_part.split("+"):
            claims.setdefault(name, []).append(f)
    # On a trace an error calls misleading (CUDA_LAUNCH_BLOCKING, a debug build), that error explains
    # the idle time no other finding claims: re-capture before judging it.
    misleading = sorted((f for f in findings if f.severity is Severity.ERROR and f.rule in MISLEADING_RULES),
                        key=_claim_order)
    out: dict[str, dict[str, object]] = {}
    for part in budget.parts:
        if part.kind != "idle":
            continue
        owners = sorted(claims.get(part.name, []), key=lambda f: (f.minor, _claim_order(f))) or misleading[:1]
        if owners:
            top = owners[0]
            out[part.name] = {"rule": top.rule, "fingerprint": top.fingerprint, "severity": top.severity.value}
        elif part.median_step_ns < OWNED_PART_SHARE * median:
            out[part.name] = {"owner": None, "why": f"under {OWNED_PART_SHARE:.0%} of the median step"}
        else:
            out[part.name] = {"owner": None, "why": _unowned_reason(part.name)}
    return out


def _unowned_reason(part: str) -> str:
    return {"graph_internal": "the graph's own nodes waiting on each other: no host-side fix; see the graph's structure",
            "idle_other": "waiting on other streams, events or processes: no finding of this run names them",
            }.get(part, "no rule of this run explains it")


def _raise_owners(findings: list[Finding], budget: Budget | None, fixed: frozenset[str]) -> list[Finding]:
    """An owner of an idle part of at least :data:`WARN_PART_SHARE` of the median step is at least a warning.

    Only when its own saving is at least :data:`RAISE_SAVING_SHARE` of the part: the owner's fix gives that time back.
    """
    if budget is None:
        return findings
    median = budget.quantile(0.5)
    big = {p.name for p in budget.parts if p.kind == "idle" and median and p.median_step_ns >= WARN_PART_SHARE * median}
    if not big:
        return findings
    owners = part_owners(findings, budget)
    # The part's time each raised owner would give back: an owner whose own fix recovers little of
    # it (a host-bound loop's sync: the GPU idles for the host's pace, not for the wait) stays as judged.
    part_ns = {p.name: p.ns for p in budget.parts}
    raise_prints = {str(o["fingerprint"]): part_ns[name] for name, o in owners.items()
                    if name in big and "fingerprint" in o}

    def raised(f: Finding) -> bool:
        return (f.fingerprint in raise_prints and f.severity is Severity.INFO and f.rule not in fixed
                and not (f.savings_note or "").startswith("withheld")
                and (f.estimated_savings_ns or 0) >= RAISE_SAVING_SHARE * raise_prints[f.fingerprint])

    return [dataclasses.replace(f, severity=Severity.WARNING) if raised(f) else f for f in findings]


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


#: The advice of a ``needs_release_build`` rule on a debug build: what to do before tuning anything.
DEBUG_BUILD_ADVICE = ("Re-capture the release build first (the debug-build finding gives the command) and judge this "
                      "again there: this trace's kernel and host times are the debug build's, so tuning from them "
                      "misleads.")

#: Why such a finding carries no saving.
DEBUG_BUILD_NOTE = "judged on a debug build: its times are the debug build's; re-capture the release build first"


def debug_build_error(findings: Iterable[Finding]) -> Finding | None:
    """The debug-build error among ``findings`` (the trace runs a debug build), or None."""
    return next((f for f in findings if f.rule == "debug-build" and f.severity is Severity.ERROR), None)


def _on_debug_build(findings: list[Finding], release_only: frozenset[str]) -> list[Finding]:
    """On a debug build, advice that tunes measured times becomes the re-capture, at most info, without a saving."""
    if not release_only or debug_build_error(findings) is None:
        return findings
    return [dataclasses.replace(f, recommendation=DEBUG_BUILD_ADVICE, estimated_savings_ns=None, savings_range=None,
                                savings_note=DEBUG_BUILD_NOTE, severity=min(f.severity, Severity.INFO, key=lambda s: s.rank))
            if f.rule in release_only else f for f in findings]


def _claim_order(f: Finding) -> tuple[int, int, int, str]:
    """Causes claim their parts first, then slow steps, then idle-time symptoms; within each, by rank."""
    tier = 2 if f.rule in SYMPTOM_RULES else 1 if f.rule in STEP_SYMPTOM_RULES else 0
    return (tier, -f.severity.rank, -(f.estimated_savings_ns or 0), f.rule)


def _cap(findings: list[Finding], budget: Budget | None) -> list[Finding]:
    """Savings capped by their part and shared within it; savings without a part share what the parts leave."""
    if budget is None:
        return findings
    remaining = {p.name: p.ns for p in budget.parts}
    out = list(findings)
    # Replayed savings first: the replay may give back more than its own parts (graphs also shorten the idle
    # after a sync), and what it takes from other idle parts is then no longer there for their owners.
    order = sorted(range(len(out)), key=lambda i: (out[i].savings_replay is None, _claim_order(out[i])))
    for i in order:
        f = out[i]
        if f.estimated_savings_ns is None or f.budget_part is None or f.budget_part == OUTSIDE:
            continue
        # A finding may draw on several parts ("host_prep+launch_wait"), listed where most of its time
        # went first: its room is their sum, and it takes from each in that order, so a part it names
        # last (a little of its time) keeps what other owners need. An idle-time symptom never claims kernels.
        parts = [p for p in f.budget_part.split("+") if p and (_claims_busy(f) or KINDS.get(p) == "idle")]
        room = sum(remaining.get(p, 0) for p in parts)
        take = min(f.estimated_savings_ns, room)
        left = take
        for p in parts:
            share = min(left, remaining.get(p, 0))
            remaining[p] = remaining.get(p, 0) - share
            left -= share
        if f.savings_replay is None:  # a replayed saving is bounded by the replay (nsys_rules.replay_savings)
            out[i] = _with_savings(f, take, room)
            continue
        excess = f.estimated_savings_ns - take
        for p in remaining:
            if excess <= 0:
                break
            if p not in parts and KINDS.get(p) == "idle":
                share = min(excess, remaining[p])
                remaining[p] -= share
                excess -= share
    # A saving without a part comes out of the idle time the parts' owners left.
    pool = max(0, sum(v for name, v in remaining.items() if KINDS.get(name) == "idle"))
    for i in order:
        f = out[i]
        if f.estimated_savings_ns is None or f.budget_part is not None:
            continue
        take = min(f.estimated_savings_ns, pool)
        pool -= take
        out[i] = _with_savings(f, take, take)
    return out


def _claims_busy(f: Finding) -> bool:
    """Whether a finding may claim busy parts: one that removes kernel or copy time, never an idle-time symptom.

    Slow steps (step-outliers) may: their excess over the median step is the busy time that grew in
    them (kernels that ran slower, another stream's work), drawn after the causes took theirs.
    """
    return f.rule not in SYMPTOM_RULES


def _with_savings(f: Finding, take: int, room: int) -> Finding:
    if take == f.estimated_savings_ns and (f.savings_range is None or f.savings_range[1] <= room):
        return f
    bounds = None if f.savings_range is None else (min(f.savings_range[0], take), min(f.savings_range[1], room))
    note = f.savings_note
    if take < (f.estimated_savings_ns or 0):
        note = "capped by the step budget (shared with other findings of the same part)" if not note else note
    return dataclasses.replace(f, estimated_savings_ns=int(take), savings_range=bounds, savings_note=note)


def _judged_by_owner(findings: list[Finding]) -> list[Finding]:
    """A folded finding is at most as severe as the finding it is folded into.

    Folded, it is that finding seen from another side ("also explains"), and the answer judges the
    two as one: so ``--fail-on`` and the counts follow what the report shows, never a warning hidden
    under an info owner. What it would be on its own stays in its note.
    """
    owners = {(f.location.trace, f.fingerprint): f for f in findings if not f.folded_into}
    out = []
    for f in findings:
        owner = owners.get((f.location.trace, f.folded_into)) if f.folded_into else None
        if owner is not None and f.severity.rank > owner.severity.rank:
            note = f"{f.savings_note or 'explained by ' + owner.rule} ({f.severity.value} on its own)"
            f = dataclasses.replace(f, severity=owner.severity, savings_note=note)
        out.append(f)
    return out


def _fold(findings: list[Finding], steady: tuple[int, int] | None, floor: float = 0.0,
          fixed: frozenset[str] = frozenset()) -> list[Finding]:
    # A cause under the noise floor explains too little to own a symptom: the symptom stands on its own
    # (a warning of 17.7 ms idle gaps is not "explained" by a sync whose removal saves 1.2 ms).
    causes = [f for f in findings if f.rule not in SYMPTOM_RULES and not _is_minor(f, floor, fixed) and (
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


def _is_minor(f: Finding, floor: float, fixed: frozenset[str] = frozenset()) -> bool:
    """Not an error the rule judged, and a known saving under the floor (nothing to gain is always under it).

    An error the user set (``[tool.nsys-rules.severity]``, a rule in ``fixed``) makes the rule's findings
    fail the gate, not its noise: a kernel tail that saves 0 ns stays minor (info).
    """
    if (f.severity is Severity.ERROR and f.rule not in fixed) or f.folded_into or f.estimated_savings_ns is None:
        return False
    saving = f.estimated_savings_ns
    if f.savings_replay is not None:  # a replayed saving shown after overlapping fixes: its fix's own worth judges it
        saving = max(saving, int(f.savings_replay.get("own_ns", 0)), int(f.savings_replay.get("after_fixes_above_ns", 0)))
    return saving == 0 or saving < floor
