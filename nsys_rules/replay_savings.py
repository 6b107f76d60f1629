"""Findings' savings from the step replay (issue 36): what the recommended fix gives back.

A finding whose rule's edit is proven on real pairs (:data:`REPLAYED`, among
:data:`~nsys_rules.model.replay_what_if.EDITS`) and that
claims step time gets the replayed saving: the median step's change with its fix, times the
steady steps, with the range its edit's assumptions set and ``savings_replay`` saying so. Several
findings of one rule share the rule's saving in proportion to what each claimed. Then the shown
savings together never pass one replay with every shown fix (:func:`cap_together`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from nsys_rules.findings import Finding
from nsys_rules.units import human_ns
from nsys_rules.model.replay_what_if import StepReplay

#: The rules whose findings take the replayed saving. Only edits proven on real before/after pairs are applied
#: (launch-bound: the replay predicted 1.00-1.01x of the measured change on 5 pairs of decode loops, eager vs
#: CUDA graphs). The other edits (sync removed, input prep on a worker, cached allocations, pinned copies, TF32,
#: resident weights) answer `--what-if` but do not set a finding's saving until their pairs are captured: on
#: synthetic and public traces they claimed more than the step's idle time where the rule's own bound did not
#: (sync-stall on an OpenACC loop, 2.6 s of a 31 ms idle; pageable-memcpy on an OpenMP offload).
REPLAYED = frozenset({"launch-bound"})


def with_replayed_savings(findings: Iterable[Finding], replay: StepReplay | None) -> list[Finding]:
    """``findings`` with each replayable rule's savings the replayed ones (unchanged without a replay)."""
    out = list(findings)
    if replay is None or replay.measured_ns <= 0:
        return out
    by_rule: dict[str, list[int]] = {}
    for i, f in enumerate(out):
        if f.rule in REPLAYED and f.estimated_savings_ns is not None and f.estimated_savings_ns > 0:
            by_rule.setdefault(f.rule, []).append(i)
    for rule, rows in by_rule.items():
        saving = replay.saving(rule)
        if saving is None or not replay.touches(rule):
            continue  # no edit, or its cause is not in the median step (other steps hold it): the rule's own estimate
        claimed = sum(out[i].estimated_savings_ns or 0 for i in rows) or 1
        for i in rows:
            f = out[i]
            share = (f.estimated_savings_ns or 0) / claimed
            steps = replay.steps
            low, high = replay.over_steps(saving.low_ns * share), replay.over_steps(saving.high_ns * share)
            # The note says where the number comes from, in the finding's own words (the JSON keeps the figures).
            note = (f"the median step replayed with this fix: {human_ns(saving.step_ns)} -> {human_ns(saving.after_ns)}; "
                    f"{saving.assumption}")
            out[i] = dataclasses.replace(
                f, estimated_savings_ns=replay.over_steps(saving.per_step_ns * share), savings_range=(low, high),
                savings_note=note, savings_replay={**saving.to_json(), "steps": steps, "share": round(share, 4)})
    return out


def shown_rules(findings: Iterable[Finding]) -> tuple[str, ...]:
    """The replayable rules among the shown findings (not folded into another, not minor, with a saving)."""
    return tuple(sorted({f.rule for f in findings if f.rule in REPLAYED and not f.folded_into and not f.minor
                         and f.estimated_savings_ns}))


def in_sequence(findings: list[Finding], replay: StepReplay | None) -> list[Finding]:
    """The replayed savings kept from adding up past their fixes replayed together (before the answer's noise floor
    and folding).

    Rules in order of their own saving: each shows its own saving while the fixes so far, replayed together, give
    it back, else what is left of them (fixes overlap: CUDA graphs take the allocations out of the step too, so
    alloc-churn adds little after launch-bound). ``savings_replay`` keeps the fix's own saving (``own_ns``) and
    what it adds to the fixes above it (``after_fixes_above_ns``: faster kernels pay off in a host-bound step only
    once its launches are graphed); the noise floor judges a finding by the larger of its three figures.
    """
    if replay is None:
        return findings
    rows = [i for i, f in enumerate(findings) if f.savings_replay is not None and f.estimated_savings_ns]
    by_rule: dict[str, list[int]] = {}
    for i in rows:
        by_rule.setdefault(findings[i].rule, []).append(i)
    order = sorted(by_rule, key=lambda r: (-sum(findings[i].estimated_savings_ns or 0 for i in by_rule[r]), r))
    out = list(findings)
    shown, before, done = 0, 0, []
    for rule in order:
        done.append(rule)
        claimed = sum(out[i].estimated_savings_ns or 0 for i in by_rule[rule])
        together = replay.over_steps(replay.together(tuple(done)))
        adds, room = max(0, together - before), max(0, together - shown)
        before = together
        take = min(claimed, room)
        shown += take
        scale = take / claimed if claimed else 0.0
        for i in by_rule[rule]:
            f = out[i]
            share = (f.estimated_savings_ns or 0) / claimed if claimed else 0.0
            facts = {**(f.savings_replay or {}), "own_ns": int(f.estimated_savings_ns or 0),
                     "after_fixes_above_ns": int(adds * share)}
            if take >= claimed:
                out[i] = dataclasses.replace(f, savings_replay=facts)
                continue
            bounds = None if f.savings_range is None else (int(f.savings_range[0] * scale),
                                                             int(f.savings_range[1] * scale))
            out[i] = dataclasses.replace(
                f, estimated_savings_ns=int((f.estimated_savings_ns or 0) * scale), savings_range=bounds,
                savings_replay=facts,
                savings_note=f"{f.savings_note}; the fixes above it ({', '.join(done[:-1])}) take the rest: "
                             f"{100 * claimed / max(replay.total_ns, 1):.1f} % of the steady state on its own, "
                             f"{100 * adds / max(replay.total_ns, 1):.1f} % after them")
    return out


def cap_together(findings: list[Finding], replay: StepReplay | None) -> list[Finding]:
    """The shown replayed savings scaled down, should they add up past one replay with every shown fix (a fix in
    the sequence hidden since, folded or minor, left the others' savings as they were)."""
    if replay is None:
        return findings
    rows = [i for i, f in enumerate(findings) if f.savings_replay is not None and not f.folded_into and not f.minor
            and f.estimated_savings_ns]
    together = replay.over_steps(replay.together(shown_rules(findings)))
    claimed = sum(findings[i].estimated_savings_ns or 0 for i in rows)
    if claimed <= together or not claimed:
        return findings
    scale = together / claimed
    out = list(findings)
    for i in rows:
        f = out[i]
        bounds = None if f.savings_range is None else (int(f.savings_range[0] * scale), int(f.savings_range[1] * scale))
        out[i] = dataclasses.replace(f, estimated_savings_ns=int((f.estimated_savings_ns or 0) * scale),
                                     savings_range=bounds,
                                     savings_note=f"{f.savings_note}; scaled by {scale:.2f} to the shown fixes together")
    return out
