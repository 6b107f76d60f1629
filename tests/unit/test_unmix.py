"""Unmixing sampled counters among the work that ran in each sample's period (analysis/unmix.py)."""

from __future__ import annotations

import numpy as np
import pytest

from nsys_rules.analysis.unmix import interval_means, sample_periods, unmix, weighted_levels


def mixed(n: int = 2000, levels=(80.0, 20.0, 0.0), noise: float = 0.0, seed: int = 1):
    """Random shares of three columns (the last one idle) and the values they make."""
    rng = np.random.default_rng(seed)
    shares = rng.dirichlet(np.ones(len(levels)), size=n)
    values = shares @ np.array(levels) + rng.normal(0.0, noise, n)
    return shares, values


def test_periods_run_to_the_next_sample_and_skip_holes():
    starts, ends, index = sample_periods(np.array([0, 100, 200, 300, 2_000, 2_100]))
    assert starts.tolist() == [0, 100, 200, 2_000] and ends.tolist() == [100, 200, 300, 2_100]
    assert index.tolist() == [0, 1, 2, 4]  # the 1,700 ns hole is no sample's period; the last sample has none
    assert len(sample_periods(np.array([5]))[0]) == 0


def test_exact_mixtures_give_back_each_level():
    shares, values = mixed()
    fit = unmix(shares, values)
    assert fit.resolved.all()
    assert fit.level == pytest.approx([80.0, 20.0, 0.0], abs=1e-6)
    # The share-weighted mean mixes the others in: what unmixing corrects.
    assert weighted_levels(shares, values)[0] < 60


def test_noise_stays_within_the_standard_error():
    shares, values = mixed(noise=3.0, seed=7)
    fit = unmix(shares, values)
    assert fit.resolved.all()
    assert abs(fit.level[0] - 80) < 4 * fit.stderr[0] and fit.stderr[0] < 1.0
    assert fit.rmse == pytest.approx(3.0, rel=0.1)


def test_a_column_with_too_little_time_is_not_resolved_and_does_not_spoil_the_rest():
    shares, values = mixed(levels=(80.0, 20.0, 0.0))
    tiny = np.zeros(len(shares))
    tiny[:3] = 0.001  # three thousandths of one period in all
    shares = np.column_stack([shares, tiny])
    fit = unmix(shares, values, min_weight=5.0)
    assert not fit.resolved[3] and fit.resolved[:3].all()
    assert fit.level[:3] == pytest.approx([80.0, 20.0, 0.0], abs=1e-3)


def test_an_impossible_level_is_left_unresolved():
    # Column 1 always runs beside column 0 (the same share): their levels cannot be told apart.
    rng = np.random.default_rng(3)
    a = rng.uniform(0, 0.5, 3000)
    idle = 1 - 2 * a
    shares = np.column_stack([a, a, idle])
    values = a * 150 + rng.normal(0, 1, 3000)  # 150 % for the pair: one of them alone reads as impossible
    fit = unmix(shares, values, keep=np.array([False, False, True]))
    assert not fit.resolved[:2].all()
    assert fit.resolved[2] and abs(fit.level[2]) < 2  # idle: kept and fitted


def test_interval_means_of_piecewise_constant_values():
    starts = np.array([0, 100, 200])
    ends = np.array([100, 200, 300])
    values = np.array([10.0, 30.0, 50.0])
    means = interval_means(starts, ends, values, np.array([0, 50, 250, 400]), np.array([300, 150, 300, 500]))
    assert means[:3] == pytest.approx([30.0, 20.0, 50.0])
    assert np.isnan(means[3])  # no sample covers it


def test_levels_stay_in_the_counters_range_and_an_impossible_neighbour_is_not_reported():
    # A kernel that reads 40 % alone, but 20 % in the periods it shares with a small one: fitted freely, the small one
    # would read -20 % and lift the big one's level; held at 0 it is unresolved, and the big one stays between.
    n = 400
    pure = np.column_stack([np.ones(n), np.zeros(n), np.zeros(n)])
    shared = np.column_stack([np.full(n, 0.5), np.full(n, 0.5), np.zeros(n)])
    idle = np.column_stack([np.zeros(n), np.zeros(n), np.ones(n)])
    shares = np.vstack([pure, shared, idle])
    values = np.concatenate([np.full(n, 40.0), np.full(n, 10.0), np.zeros(n)])
    values += np.random.default_rng(2).normal(0, 0.5, len(values))
    fit = unmix(shares, values, keep=np.array([False, False, True]))
    assert not fit.resolved[1] and fit.level[1] == pytest.approx(0, abs=1e-6)
    assert fit.resolved[0] and 20 < fit.level[0] < 40
    assert (fit.level >= 0).all() and (fit.level <= 100).all()
