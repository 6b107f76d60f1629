"""Regimes of step times: change points found, noise, ramps and lone outliers left alone."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.regimes import regimes, steady_regime


def test_two_regimes_are_cut_where_the_pace_changes():
    rng = np.random.default_rng(1)
    slow = rng.uniform(50e6, 75e6, 63)  # a new attention plan every token
    fast = rng.normal(15e6, 0.5e6, 63)
    assert regimes(np.concatenate([slow, fast])) == [(0, 63), (63, 126)]


def test_three_regimes():
    rng = np.random.default_rng(2)
    series = np.concatenate([rng.normal(10e6, 0.3e6, 20), rng.normal(40e6, 1e6, 15), rng.normal(20e6, 0.3e6, 30)])
    assert regimes(series) == [(0, 20), (20, 35), (35, 65)]


@pytest.mark.parametrize("seed", range(20))
def test_noise_is_one_regime(seed):
    # (A 1.3x jump in host time is within what host-bound loops do between runs: no regime below 1.5x.)
    # A host-bound eager loop: 17 ms with a 1.5 ms spread, and an occasional slow step.
    rng = np.random.default_rng(seed)
    series = rng.normal(17e6, 1.5e6, 80)
    series[rng.integers(0, 80, 3)] *= 2.5
    assert regimes(series) == [(0, 80)]


def test_a_ramp_is_not_a_regime():
    # A KV cache growing by one token per step: the step time rises smoothly by 60 %.
    series = np.linspace(15e6, 24e6, 120) + np.random.default_rng(3).normal(0, 0.2e6, 120)
    assert regimes(series) == [(0, 120)]


def test_a_few_slow_steps_are_outliers_not_a_regime():
    series = np.full(40, 10e6)
    series[10:13] = 40e6
    assert regimes(series) == [(0, 40)]


def test_short_series_and_the_steady_choice():
    assert regimes(np.array([1.0, 2.0, 3.0])) == [(0, 3)]
    assert regimes(np.array([])) == []
    assert steady_regime([(0, 63), (63, 126)], 5) == 1
    assert steady_regime([(0, 60), (60, 63)], 5) == 0
    # A short run at the end (11 % of the steps) is a phase; the long run is the loop's pace.
    assert steady_regime([(0, 2003), (2003, 2253)], 5) == 0


def test_coverage_of_known_shifts():
    # 200 simulated series with a 1.6x shift at a random point: the cut lands within two steps of it.
    rng = np.random.default_rng(7)
    hits = 0
    for _ in range(200):
        n1, n2 = rng.integers(10, 60, 2)
        series = np.concatenate([rng.normal(16e6, 1e6, n1), rng.normal(10e6, 0.8e6, n2)])
        runs = regimes(series)
        hits += len(runs) == 2 and abs(runs[0][1] - n1) <= 2
    assert hits >= 190
