"""Findings serialize to valid, deterministic JSON."""

import json

from nsys_rules.findings import Finding, Location, Metric, Severity


def test_non_finite_metrics_are_left_out_of_json():
    f = Finding("x-rule", Severity.INFO, "t", "m", "r",
                {"ok": Metric(1.5, "ratio"), "bad": Metric(float("inf"), "ratio"), "nan": Metric(float("nan"), "ns")})
    out = f.to_json()
    assert out["metrics"] == {"ok": {"value": 1.5, "unit": "ratio"}}
    json.dumps(out, allow_nan=False)


def test_fingerprint_ignores_timestamps():
    a = Finding("x-rule", Severity.INFO, "t", "m", "r", location=Location(kernel="k", start_ns=1, end_ns=2))
    b = Finding("x-rule", Severity.WARNING, "t", "other", "r", location=Location(kernel="k", start_ns=9, end_ns=20))
    c = Finding("x-rule", Severity.INFO, "t", "m", "r", location=Location(kernel="k2"))
    assert a.fingerprint == b.fingerprint != c.fingerprint


def test_ranking_puts_recapture_errors_first_then_savings():
    from nsys_rules.findings import rank_key

    small = Finding("a-rule", Severity.INFO, "t", "m", "r", estimated_savings_ns=10)
    big = Finding("b-rule", Severity.WARNING, "t", "m", "r", estimated_savings_ns=1000)
    error = Finding("c-rule", Severity.ERROR, "t", "m", "r")
    none = Finding("d-rule", Severity.WARNING, "t", "m", "r")
    # Errors, then warnings by savings, then infos: a warning outranks any info, whatever it saves.
    assert sorted([none, small, error, big], key=rank_key) == [error, big, none, small]
    minor = Finding("e-rule", Severity.WARNING, "t", "m", "r", estimated_savings_ns=5, minor=True)
    assert sorted([minor, small], key=rank_key) == [small, minor]  # under the noise floor: last
