"""What diff must know about its inputs before it pools them: one run given twice, and damaged runs.

* **One run given twice** (the same file twice, a hard link, a copy, the same capture exported as ``.sqlite``
  and ``.parquetdir``) is not two runs: pooled as two, the between-run variation is "measured" as zero and an
  inconclusive pair becomes a confident verdict. A run is known by what it measured (:func:`capture_key`: every
  steady step's time and GPU time, to the nanosecond), which no two captures share and every export format of
  one capture does. Within a side a repeat is counted once, with a note; BASE and NEW holding the same run
  is compared with a note saying it measures nothing, so that a CI job given one artifact twice does not
  read its verdict as a measurement.
* **Damage** ``check`` reports (rows dropped: NULL or impossible times, ends before starts, non-numeric values)
  changes what a side measured: a new trace whose slow kernels have NULL ends looks faster. Such a run voids
  the verdict: refused (exit 3) unless ``--force``, which compares what is left with the verdict
  ``inconclusive`` and the damage in its notes. Damage that drops no measured row (unknown GPU specs, a
  private copy of unmerged rows, exact duplicate rows) is only noted.
"""

from __future__ import annotations

import hashlib
from typing import Sequence

import numpy as np

from nsys_rules.diff.sides import Run
from nsys_rules.errors import InputError
from nsys_rules.textsafe import clip_value

#: Damage lines that change what a run measured: rows of timed work dropped or read as unknown.
_VOIDING = (" dropped", "read as unknown", "point to no StringIds row")
#: ...except exact repeats of a row, whose removal leaves the measure as it was.
_HARMLESS = ("duplicate row(s) dropped",)


def capture_key(series: dict[str, np.ndarray]) -> str:
    """What identifies one capture across files and formats: its steady steps' times and GPU times (ns)."""
    digest = hashlib.sha256()
    for name in ("step", "gpu"):
        values = np.ascontiguousarray(series.get(name, np.zeros(0)), dtype=np.float64)
        digest.update(name.encode() + len(values).to_bytes(8, "little") + values.tobytes())
    return digest.hexdigest()


def distinct_runs(base: Sequence[Run], new: Sequence[Run]) -> tuple[list[Run], list[Run], list[str]]:
    """(BASE runs, NEW runs, notes): each capture once per side; a capture on both sides noted."""
    sides: list[list[Run]] = [[], []]
    notes: list[str] = []
    seen: dict[str, tuple[str, str]] = {}
    for label, runs, kept in (("BASE", base, sides[0]), ("NEW", new, sides[1])):
        for run in runs:
            key = run.capture or capture_key(run.series)
            path = clip_value(run.summary.get("path", "?"), 200)
            if key in seen:
                side, first = seen[key]
                if side == label:
                    notes.append(f"{label} {path} is the same run as {first} (one capture given twice): counted once")
                    continue
                notes.append(f"{label} {path} is the same run as {side} {first} (the same steps to the nanosecond: "
                             "one file, a link or a copy, or one capture in two export formats): a run compared "
                             "with itself measures nothing")
            else:
                seen[key] = (label, path)
            kept.append(run)
    return sides[0], sides[1], notes


def damage_notes(base: Sequence[Run], new: Sequence[Run], force: bool) -> tuple[list[str], bool]:
    """(notes, void): each run's damage as a note; void when a run lost measured rows. Without ``force`` such a
    run is refused (:class:`InputError`, exit 3), naming the damage."""
    notes: list[str] = []
    void = False
    for label, runs in (("BASE", base), ("NEW", new)):
        for run in runs:
            if not run.damage:
                continue
            path = clip_value(run.summary.get("path", "?"), 200)
            lines = "; ".join(clip_value(line, 200) for line in run.damage[:5])
            more = f" (+{len(run.damage) - 5} more)" if len(run.damage) > 5 else ""
            voiding = any(any(v in line for v in _VOIDING) and not any(h in line for h in _HARMLESS)
                          for line in run.damage)
            if voiding and not force:
                raise InputError(f"{label} {path} is damaged ({lines}{more}): its steps measure less than the "
                                 "capture did, so no verdict can stand on it; re-export it (`nsys-rules check` lists "
                                 "the damage), or pass --force to compare what is left (the verdict is then "
                                 "inconclusive)")
            void = void or voiding
            notes.append(f"{label} {path} is damaged: {lines}{more}"
                         + ("; the verdict is void (inconclusive)" if voiding else ""))
    return notes, void
