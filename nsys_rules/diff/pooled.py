"""The runs of one side of a ``diff`` pooled: the shift of every series' median, the side's summary and rows.

A side may hold several runs of the program (``diff BASE1 BASE2 --new NEW1 NEW2``): each series'
median shift is measured over all of them (:func:`shifts`: steps resampled within each run, a
between-run effect from the runs' medians, or assumed when a side has one run: :func:`assumed_between`),
and the side's summary and profile rows are the runs' means (:func:`merged`, :func:`mean_rows`).
:mod:`.result` turns them into the verdicts.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from nsys_rules.analysis.shift import Shift, median_shifts, robust_spread
from nsys_rules.diff.sides import HOST_PARTS, Run

#: The confidence level of every interval.
LEVEL = 0.95
#: The four series every verdict speaks of, with the words for them.
TOTAL_SERIES = (("step", "time per step"), ("gpu", "GPU kernel time per step"), ("idle", "host/idle time per step"),
                ("host", "host-caused idle per step"))


def assumed_between(run: Run, names: Sequence[str], host_spread_pct: float) -> np.ndarray:
    """Per series, the between-run standard deviation of a run's median to assume when it cannot be measured.

    The in-run spread of the series (a run's median can land about one in-run standard deviation
    away in another run); for the step, its idle rest and the host-caused parts, at least
    ``host_spread_pct`` percent of the run's host-caused idle time: a host-bound loop's host time
    moves between runs by more than its steps scatter within one (other processes, clocks, caches).
    """
    out = np.zeros(len(names))
    host = float(np.median(run.series["host"])) if len(run.series.get("host", ())) else 0.0
    for i, name in enumerate(names):
        values = run.series.get(name)
        if values is None or not len(values):
            continue
        spread = float(robust_spread(values)[0])
        if name in ("step", "idle", "host"):
            spread = max(spread, host_spread_pct / 100.0 * host)
        elif name.startswith("part:") and name[5:] in HOST_PARTS:
            spread = max(spread, host_spread_pct / 100.0 * float(np.median(values)))
        out[i] = spread
    return out


def shifts(base_runs: list[Run], new_runs: list[Run],
            host_spread_pct: float) -> tuple[dict[str, Shift], dict[str, Shift]]:
    """The median's shift of every series any run has: the four totals, and the rest by series name."""
    names = [name for name, _ in TOTAL_SERIES]
    for run in (*base_runs, *new_runs):
        names += [k for k in run.series if k not in names]
    matrices = [[_matrix(run, names) for run in runs] for runs in (base_runs, new_runs)]
    assumed = tuple(np.sqrt(np.mean([assumed_between(r, names, host_spread_pct) ** 2 for r in runs], axis=0))
                    for runs in (base_runs, new_runs))
    shifts = median_shifts(matrices[0], matrices[1], (assumed[0], assumed[1]), level=LEVEL)
    by_name = dict(zip(names, shifts, strict=True))
    return {name: by_name[name] for name, _ in TOTAL_SERIES}, by_name


def _matrix(run: Run, names: list[str]) -> np.ndarray:
    steps = len(run.series["step"])
    return np.stack([run.series.get(name, np.zeros(steps)) for name in names])


def merged(runs: list[Run]) -> dict[str, Any]:
    """A side's summary: its first run's, with the per-step means averaged over the runs and the steps summed."""
    out = dict(runs[0].summary)
    out["runs"] = len(runs)
    out["paths"] = [r.summary["path"] for r in runs]
    if len(runs) == 1:
        return out
    for key in ("step_time_ns", "busy_per_step_ns", "idle_per_step_ns", "contention_per_step_ns",
                "gpu_time_per_step_ns"):
        out[key] = round(float(np.mean([r.summary[key] for r in runs])), 1)
    out["step_p50_ns"] = int(np.median([r.summary["step_p50_ns"] for r in runs]))
    out["steps"] = int(sum(r.summary["steps"] for r in runs))
    out["steps_per_run"] = [r.summary["steps"] for r in runs]
    names = list(dict.fromkeys(k for r in runs for k in r.summary["parts"]))
    out["parts"] = {k: round(float(np.mean([r.summary["parts"].get(k, 0.0) for r in runs])), 1) for k in names}
    out["part_labels"] = merged_labels(runs)
    out["has_kernels"] = all(r.summary["has_kernels"] for r in runs)
    return out


def merged_labels(runs: list[Run]) -> dict[str, str]:
    labels: dict[str, str] = {}
    for r in runs:
        labels.update(r.summary.get("part_labels", {}))
    return labels


def mean_rows(runs: list[Run], table: str, key: str) -> list[dict[str, Any]]:
    """The profile's rows (kernel classes or kernels) with the per-step time averaged over the runs."""
    sums: dict[str, float] = {}
    classes: dict[str, str] = {}
    for run in runs:
        for row in run.profile.get(table, []):
            name = str(row[key])
            sums[name] = sums.get(name, 0.0) + float(row["per_step_ns"])
            classes.setdefault(name, str(row["class"]))
    return [{key: name, "class": classes[name], "per_step_ns": total / len(runs)} for name, total in sums.items()]
