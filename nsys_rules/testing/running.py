"""Running rules in a test: the real engine on a trace file, and short asserts on what it found.

:func:`run_rule` fails the test when the rule was skipped or raised, or when the engine would
refuse to register it (with the very message users would see); :func:`skip_reason` is its
opposite; :func:`only_finding` and :func:`metric_values` keep asserts short. The trace is usually
one :class:`~nsys_rules.testing.builder.TraceBuilder` wrote. This module is public API for plugin
authors (see docs/plugins.md).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Iterable, Mapping


def run_rule(rule: str | type, trace_path: str | Path, *, options: Mapping[str, Any] | None = None,
             filter_time: str | None = None, filter_nvtx: str | None = None, window: str | None = None) -> list[Any]:
    """Run one registered rule (by name, or a Rule class) on a trace file; returns its findings.

    Raises ``AssertionError`` when the engine would refuse to register the rule (the message users
    would see), or when the rule was skipped or raised, with the reason, so a test of a firing
    case cannot pass by accident. ``window="full"`` judges the whole capture instead of the rule's
    window (the default ``steady`` one keeps only the steady steps: see docs/plugins.md).
    """
    result = run_rules([rule], trace_path, options={_name(rule): dict(options or {})},
                       filter_time=filter_time, filter_nvtx=filter_nvtx, window=window)
    if result.errors:
        raise AssertionError(f"rule raised: {result.errors[0].error}\n{result.errors[0].traceback}")
    if result.skipped:
        raise AssertionError(f"rule skipped: {result.skipped[0].reason}")
    return result.findings


def run_rules(rules: Iterable[str | type], trace_path: str | Path, *, options: Mapping[str, Mapping[str, Any]] | None = None,
              filter_time: str | None = None, filter_nvtx: str | None = None, window: str | None = None) -> Any:
    """Run several rules on a trace; returns the :class:`nsys_rules.engine.TraceResult`.

    Each rule passes the engine's registration checks first (:func:`nsys_rules.plugin_manager.validate_rule`):
    a rule the engine would refuse fails here with the same message (``AssertionError``).
    """
    from nsys_rules.settings import Settings
    from nsys_rules.engine import analyze_trace
    from nsys_rules.inputs import open_trace
    from nsys_rules.plugin_manager import build_registry, validate_rule

    registry = build_registry(autoload=True)
    classes = []
    for rule in rules:
        if isinstance(rule, type):
            problem = validate_rule(rule, getattr(rule, "scope", "trace"))
            if problem:
                raise AssertionError(f"the engine refuses this rule: {problem}")
            classes.append(rule)
        elif str(rule) in registry.rules:
            classes.append(registry.rules[str(rule)])
        else:
            refused = "; ".join(f"{e.plugin}: {e.error}" for e in registry.errors)
            raise AssertionError(f"no rule {rule!r} is registered" + (f" (plugin errors: {refused})" if refused
                                                                      else " (is its plugin installed?)"))
    if window is not None:
        if window not in ("steady", "full"):
            raise ValueError(f"window must be 'steady' or 'full', not {window!r}")
        classes = [type(c.__name__, (c,), {"window": window, "__doc__": c.__doc__}) for c in classes]
    settings = Settings(rule_options={k: dict(v) for k, v in (options or {}).items()},
                        filter_time=filter_time, filter_nvtx=filter_nvtx)
    trace = open_trace(Path(trace_path))
    try:
        return analyze_trace(trace, classes, settings)
    finally:
        trace.close()


def _name(rule: str | type) -> str:
    return rule if isinstance(rule, str) else getattr(rule, "name", str(rule))


# -- assertions for pytest -------------------------------------------------------------------
def only_finding(findings: Iterable[Any], rule: str | None = None) -> Any:
    """The single finding (of ``rule`` when given); ``AssertionError`` listing them otherwise.

    For firing cases::

        finding = only_finding(run_rule("nvtx-coverage", path))
        assert finding.severity is Severity.INFO
    """
    found = [f for f in findings if rule is None or f.rule == rule]
    if len(found) != 1:
        listed = "; ".join(f"{f.rule} [{f.severity.value}] {f.message[:80]}" for f in found) or "none"
        raise AssertionError(f"expected exactly one finding{f' of {rule}' if rule else ''}, got {len(found)}: {listed}")
    return found[0]


def metric_values(finding: Any) -> dict[str, float | int]:
    """``{metric name: value}`` of a finding, for plain ``==`` / ``pytest.approx`` asserts."""
    return {name: m.value for name, m in finding.metrics.items()}


def skip_reason(rule: str | type, trace_path: str | Path, *, options: Mapping[str, Any] | None = None) -> str:
    """Why the engine skipped ``rule`` on this trace; ``AssertionError`` when it ran instead.

    For the "missing table / capture option" cases, which :func:`run_rule` treats as failures.
    """
    result = run_rules([rule], trace_path, options={_name(rule): dict(options or {})})
    if result.errors:
        raise AssertionError(f"rule raised instead of being skipped: {result.errors[0].error}")
    if not result.skipped:
        raise AssertionError(f"rule ran ({len(result.findings)} findings) instead of being skipped")
    return f"{result.skipped[0].reason} ({result.skipped[0].fix})"
