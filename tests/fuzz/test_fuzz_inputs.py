"""Fuzz the CLI with damaged exports (hypothesis, deterministic).

Each example is one ``(family, seed)`` case from :mod:`tests.fuzz.cases`: a damaged copy of
a real export, or a small odd trace, run through ``nsys_rules.cli.main`` in process. The
contract (exit code in {0, 1, 3, 4}, no traceback, standard JSON valid against the schema,
input byte-for-byte unchanged, nothing left beside it) is asserted inside ``run_case``.

``derandomize=True`` and no example database make every CI run try the same inputs, so a
failure reproduces; ``NSYS_RULES_FUZZ_SCALE`` (default 1) multiplies the counts (0.1 for a
quick local pass, 10 for a long hunt). Counts are sized for ~2.5 minutes on 2 busy cores.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.cases import run_case

SCALE = float(os.environ.get("NSYS_RULES_FUZZ_SCALE", "1"))

#: Examples per family at scale 1 (2,220 inputs).
COUNTS = {"bytes": 1800, "sql": 300, "built": 60, "names": 60}


def _settings(family: str) -> settings:
    return settings(max_examples=max(1, int(COUNTS[family] * SCALE)), deadline=None, derandomize=True,
                    database=None, suppress_health_check=[HealthCheck.too_slow])


SEEDS = st.integers(min_value=0, max_value=2**32 - 1)


@_settings("bytes")
@given(seed=SEEDS)
def test_fuzz_byte_damage(seed):
    run_case("bytes", seed)


@_settings("sql")
@given(seed=SEEDS)
def test_fuzz_sql_damage(seed):
    run_case("sql", seed)


@_settings("built")
@given(seed=SEEDS)
def test_fuzz_odd_traces_through_every_rule(seed):
    run_case("built", seed)


@_settings("names")
@given(seed=SEEDS)
def test_fuzz_hostile_names_stay_inert(seed):
    run_case("names", seed)
