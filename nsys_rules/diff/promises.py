"""Promises kept: BASE's replayed savings against the change ``diff`` measured (issue 36).

``check`` promises, for each cause it finds, what fixing it gives back per step (the median step
replayed with the fix, :mod:`nsys_rules.model.replay_what_if`). When NEW no longer has a cause that
BASE had (NEW's own replay promises under :data:`GONE_SHARE` of BASE's promise for it), the fix
was made, and the measured change of the median step, with its interval, is the promise's test:
"promised X, measured Y [interval]". Several causes gone at once are judged together too (their
replay with every fix at once), since the step moved by all of them.
"""

from __future__ import annotations

from typing import Any, Sequence

from nsys_rules.analysis.shift import Shift

#: A cause is promised when BASE's replay gives back at least this share of its median step.
PROMISE_SHARE = 0.03
#: NEW no longer has the cause when its replay promises less than this share of BASE's promise.
GONE_SHARE = 0.25
#: The measured saving keeps the promise within this ratio (the range issue 36's pairs are held to).
KEPT = (0.8, 1.25)


def run_promises(replay: Any) -> dict[str, Any]:
    """What one run's replay promises per rule (``{rule: [per step, low, high]}``), and the rules' combined saving.

    ``replay`` is a :class:`~nsys_rules.model.replay_what_if.StepReplay` or None.
    """
    if replay is None:
        return {}
    from nsys_rules.model.replay_what_if import EDITS

    out: dict[str, Any] = {"step_ns": replay.baseline_ns, "rules": {}}
    for rule in EDITS:
        saving = replay.saving(rule)
        if saving is not None and saving.per_step_ns >= PROMISE_SHARE * replay.baseline_ns:
            out["rules"][rule] = [saving.per_step_ns, saving.low_ns, saving.high_ns]
    out["replay"] = replay  # kept for the combined saving of the causes NEW lost (never written out)
    return out


def promises_kept(base: Sequence[dict[str, Any]], new: Sequence[dict[str, Any]], step: Shift) -> list[dict[str, Any]]:
    """Each cause BASE promised a saving for and NEW no longer has: promised vs measured, with the verdict."""
    if not base or not all(base) or not all(new):
        return []
    promised: dict[str, list[list[float]]] = {}
    for run in base:
        for rule, values in run["rules"].items():
            promised.setdefault(rule, []).append(values)
    gone = []
    for rule, values in sorted(promised.items()):
        if len(values) != len(base):
            continue  # promised by some BASE runs only: no clear promise
        mean = [sum(v[k] for v in values) / len(values) for k in range(3)]
        left = sum(run["rules"].get(rule, [0, 0, 0])[0] for run in new) / len(new)
        if left < GONE_SHARE * mean[0]:
            gone.append((rule, mean))
    measured = -step.estimate
    interval = sorted((-step.high, -step.low))
    out = [_entry([rule], mean, measured, interval) for rule, mean in gone]
    if len(gone) > 1:
        rules = tuple(rule for rule, _ in gone)
        together = sum(run["replay"].together(rules) for run in base) / len(base)
        out.append(_entry(list(rules), [together, together, together], measured, interval))
    return out


def _entry(rules: list[str], promise: list[float], measured: float, interval: list[float]) -> dict[str, Any]:
    ratio = measured / promise[0] if promise[0] else 0.0
    verdict = ("kept" if KEPT[0] <= ratio <= KEPT[1] or interval[0] <= promise[0] <= interval[1]
               else "short" if ratio < KEPT[0] else "exceeded")
    line = (f"{' + '.join(rules)}: promised {_ms(promise[0])} per step [{_ms(promise[1])}, {_ms(promise[2])}], "
            f"measured {_ms(measured)} [{_ms(interval[0])}, {_ms(interval[1])}]: {verdict}")
    return {"rules": rules, "promised_ns": round(promise[0], 1), "promised_range_ns": [round(promise[1], 1),
            round(promise[2], 1)], "measured_ns": round(measured, 1),
            "measured_interval_ns": [round(interval[0], 1), round(interval[1], 1)], "ratio": round(ratio, 3),
            "verdict": verdict, "line": line}


def _ms(ns: float) -> str:
    return f"{ns / 1e6:.3f} ms"
