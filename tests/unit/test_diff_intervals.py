"""The interval behind ``diff``'s verdict: synthetic step series with a known shift and known noise.

Each case simulates 200 BASE/NEW pairs and counts how often the 95 % interval of the median's
change holds the true shift: at least 90 % must (a 95 % interval that covers 90 % of 200 pairs is
within the binomial noise of 95 %; one that covers less is too narrow).
"""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.shift import LONG_RUN, Shift, median_shifts, robust_spread, verdict

PAIRS = 200
STEPS = 48


def _coverage(runs_per_side: int, in_run_sd: float, between_sd: float, shift: float, assume: bool,
              pairs: int = PAIRS, steps: int = STEPS) -> tuple[float, float]:
    """(share of pairs whose interval holds ``shift``, median width) for steps ~ N(1000 + run effect, in_run_sd)."""
    rng = np.random.default_rng(7)
    hits, widths = 0, []
    for _ in range(pairs):
        sides = []
        for centre in (1000.0, 1000.0 + shift):
            sides.append([(centre + rng.normal(0, between_sd) + rng.normal(0, in_run_sd, steps))[None, :]
                          for _ in range(runs_per_side)])
        assumed = (robust_spread(sides[0][0]), robust_spread(sides[1][0])) if assume else None
        [s] = median_shifts(sides[0], sides[1], assumed)
        hits += s.low <= shift <= s.high
        widths.append(s.high - s.low)
    return hits / pairs, float(np.median(widths))


def test_one_run_per_side_without_run_effects_covers_the_true_shift():
    covered, _ = _coverage(1, in_run_sd=30.0, between_sd=0.0, shift=40.0, assume=False)
    assert covered >= 0.90, covered


def test_long_runs_resample_the_median_rank_and_cover():
    # Past LONG_RUN steps the resampled median's rank comes from its normal limit (no steps drawn).
    covered, width = _coverage(1, in_run_sd=30.0, between_sd=0.0, shift=5.0, assume=False, steps=LONG_RUN + 100)
    assert covered >= 0.90, covered
    assert width < 12  # about 2 x 1.96 x 1.2533 x 30 x sqrt(2 / 400)


def test_one_run_per_side_covers_run_effects_as_large_as_the_in_run_spread_when_assumed():
    # The run's median lands a whole in-run standard deviation away between runs: the in-run bootstrap alone
    # misses most of that, the assumed between-run spread (the in-run spread) covers it.
    covered, _ = _coverage(1, in_run_sd=30.0, between_sd=30.0, shift=25.0, assume=True)
    assert covered >= 0.90, covered
    blind, _ = _coverage(1, in_run_sd=30.0, between_sd=30.0, shift=25.0, assume=False, pairs=60)
    assert blind < 0.6, blind


def test_three_runs_per_side_measure_the_between_run_spread_and_cover():
    covered, width = _coverage(3, in_run_sd=30.0, between_sd=20.0, shift=-15.0, assume=False)
    assert covered >= 0.90, covered
    # Runs that agree give a narrower interval than one run with the assumed spread.
    _, steady = _coverage(3, in_run_sd=30.0, between_sd=0.0, shift=10.0, assume=False, pairs=30)
    _, single = _coverage(1, in_run_sd=30.0, between_sd=0.0, shift=10.0, assume=True, pairs=30)
    assert steady < single


def test_the_interval_is_reproducible_and_series_are_resampled_together():
    rng = np.random.default_rng(1)
    base = [np.vstack([rng.normal(100, 5, 40), rng.normal(10, 1, 40)])]
    new = [np.vstack([rng.normal(110, 5, 40), rng.normal(10, 1, 40)])]
    first, again = median_shifts(base, new), median_shifts(base, new)
    assert first == again
    step, other = first
    assert step.low > 0 and verdict(step, 1.0) == "slower" and step.effect_size is not None and step.effect_size > 1
    assert other.low <= 0 <= other.high


def test_an_interval_never_reaches_below_zero_time():
    base = [np.full((1, 20), 1000.0)]
    new = [np.full((1, 20), 10.0)]
    [s] = median_shifts(base, new, (np.array([3000.0]), np.array([0.0])))
    assert s.low == pytest.approx(-1000.0) and s.high >= s.estimate == pytest.approx(-990.0)


@pytest.mark.parametrize(("low", "high", "said"), [(-0.5, 0.8, "no change"), (0.5, 3.0, "slower"), (-4.0, -2.0, "faster"),
                                                  (-3.0, 6.0, "inconclusive"), (0.0, 0.0, "no change")])
def test_verdicts_from_the_interval(low, high, said):
    shift = Shift(100.0, 100.0 + (low + high) / 2, (low + high) / 2, low, high, None, 1.0, 1.0, 0.0, False)
    assert verdict(shift, 1.0) == said


def test_work_that_is_new_is_judged_in_time():
    shift = Shift(0.0, 50.0, 50.0, 40.0, 60.0, None, 0.0, 1.0, 0.0, False)
    assert shift.estimate_pct is None and verdict(shift, 1.0) == "slower"


def test_a_small_uncertain_part_of_a_long_step_is_no_change_but_a_sure_move_is_not():
    part = Shift(20.0, 12.0, -8.0, -20.0, 10.0, None, 5.0, 5.0, 0.0, False)  # -40 %, unsure, of 20 us
    assert verdict(part, 1.0) == "inconclusive"
    assert verdict(part, 1.0, reference=16_000.0) == "no change"  # within 1 % of a 16 ms step
    sure = Shift(1800.0, 1905.0, 105.0, 76.0, 134.0, None, 5.0, 5.0, 0.0, False)
    assert verdict(sure, 1.0, reference=16_800.0) == "slower"  # small against the step, but it moved
