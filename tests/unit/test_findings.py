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
