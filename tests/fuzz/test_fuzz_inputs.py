"""Fuzz the CLI with damaged exports (hypothesis, deterministic).

Each example is one ``(family, seed)`` case from :mod:`tests.fuzz.cases`: a damaged copy of
a real export, or a small odd trace, run through ``nsys_rules.cli.main`` in process. The
contract (exit code in {0, 1, 3, 4}, no traceback, standard JSON valid against the schema,
input byte-for-byte unchanged, nothing left beside it) is asserted inside ``run_case``.

``derandomize=True`` and no example database make every CI run try the same inputs, so a
failure reproduces. The default budget (:data:`COUNTS`, 232 inputs, ~30 s on 2 busy cores) is
the CI run's: every family, every mutation kind, the same contract. ``NSYS_RULES_FUZZ=long`` runs
the long budget (:data:`LONG_COUNTS`, 2,220 inputs, ~2.5-4 minutes), the hunt before a release or
after a change to the loaders; ``NSYS_RULES_FUZZ_SCALE`` (default 1) multiplies either (0.1 for a
quick local pass, 10 for a longer hunt).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.fuzz.cases import run_case

SCALE = float(os.environ.get("NSYS_RULES_FUZZ_SCALE", "1"))
LONG = os.environ.get("NSYS_RULES_FUZZ", "").strip().lower() == "long"

#: Examples per family of the default (CI) run, at scale 1 (232 inputs).
COUNTS = {"bytes": 150, "sql": 50, "built": 20, "names": 12}
#: Examples per family of the long run, ``NSYS_RULES_FUZZ=long`` (2,220 inputs).
LONG_COUNTS = {"bytes": 1800, "sql": 300, "built": 60, "names": 60}


def examples(family: str, long: bool = LONG, scale: float = SCALE) -> int:
    """How many inputs of ``family`` a run tries."""
    return max(1, int((LONG_COUNTS if long else COUNTS)[family] * scale))


def _settings(family: str) -> settings:
    return settings(max_examples=examples(family), deadline=None, derandomize=True,
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
