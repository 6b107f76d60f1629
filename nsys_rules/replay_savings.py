"""Findings' savings from the step replay (issue 36): what the recommended fix gives back.

A finding whose rule has an edit (:data:`~nsys_rules.model.replay_what_if.EDITS`) and that
claims step time gets the replayed saving: the median step's change with its fix, times the
steady steps, with the range its edit's assumptions set and ``savings_replay`` saying so. Several
findings of one rule share the rule's saving in proportion to what each claimed. Then the shown
savings together never pass one replay with every shown fix (:func:`cap_together`).
"""

from __future__ import annotations

import dataclasses
from typing import Iterable

from nsys_rules.findings import Finding
from nsys_rules.model.replay_what_if import EDITS, StepReplay


def with_replayed_savings(findings: Iterable[Finding], replay: StepReplay | None) -> list[Finding]:
    """``findings`` with each replayable rule's savings the replayed ones (unchanged without a replay)."""
    out = list(findings)
    if replay is None or replay.measured_ns <= 0:
        return out
    by_rule: dict[str, list[int]] = {}
    for i, f in enumerate(out):
        if f.rule in EDITS and f.estimated_savings_ns is not None and f.estimated_savings_ns > 0:
            by_rule.setdefault(f.rule, []).append(i)
    for rule, rows in by_rule.items():
        saving = replay.saving(rule)
        if saving is None:
            continue
        claimed = sum(out[i].estimated_savings_ns or 0 for i in rows) or 1
        for i in rows:
            f = out[i]
            share = (f.estimated_savings_ns or 0) / claimed
            steps = replay.steps
            low, high = replay.over_steps(saving.low_ns * share), replay.over_steps(saving.high_ns * share)
            note = "replayed: the median step with this fix (savings_replay says the assumptions of its range)"
            out[i] = dataclasses.replace(
                f, estimated_savings_ns=replay.over_steps(saving.per_step_ns * share), savings_range=(low, high),
                savings_note=note, savings_replay={**saving.to_json(), "steps": steps, "share": round(share, 4)})
    return out


def shown_rules(findings: Iterable[Finding]) -> tuple[str, ...]:
    """The replayable rules among the shown findings (not folded into another, not minor, with a saving)."""
    return tuple(sorted({f.rule for f in findings if f.rule in EDITS and not f.folded_into and not f.minor
                         and f.estimated_savings_ns}))


def in_sequence(findings: list[Finding], replay: StepReplay | None) -> list[Finding]:
    """The replayed savings as a sequence of fixes that adds up to their replay together (before the answer's
    noise floor and folding, which then judge these savings).

    Rules in order of their own saving: the first shows its own; each next one what its fix adds to the fixes
    above it, replayed together (fixes overlap: CUDA graphs take the allocations out of the step too, so
    alloc-churn adds little after launch-bound; and they compound: faster kernels shorten a host-bound step only
    once the launches are graphed). A saving that differs from the fix's own says both, in its note.
    """
    if replay is None:
        return findings
    rows = [i for i, f in enumerate(findings) if f.savings_replay is not None and f.estimated_savings_ns]
    by_rule: dict[str, list[int]] = {}
    for i in rows:
        by_rule.setdefault(findings[i].rule, []).append(i)
    order = sorted(by_rule, key=lambda r: (-sum(findings[i].estimated_savings_ns or 0 for i in by_rule[r]), r))
    out = list(findings)
    shown, done = 0, []
    for rule in order:
        done.append(rule)
        claimed = sum(out[i].estimated_savings_ns or 0 for i in by_rule[rule])
        adds = max(0, replay.over_steps(replay.together(tuple(done))) - shown)
        shown += adds
        if len(done) == 1 or abs(adds - claimed) <= 0.01 * max(claimed, 1):
            continue
        scale = adds / claimed if claimed else 0.0
        for i in by_rule[rule]:
            f = out[i]
            bounds = None if f.savings_range is None else (int(f.savings_range[0] * scale),
                                                             int(f.savings_range[1] * scale))
            out[i] = dataclasses.replace(
                f, estimated_savings_ns=int((f.estimated_savings_ns or 0) * scale), savings_range=bounds,
                savings_note=f"{f.savings_note}; after the fixes above it ({', '.join(done[:-1])}): "
                             f"{100 * adds / max(replay.total_ns, 1):.1f} % of the steady state, "
                             f"{100 * claimed / max(replay.total_ns, 1):.1f} % on its own")
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
