"""``diff`` and ``verify``: what a change did to the step, and whether it removed a finding's cause.

``diff`` is :func:`nsys_rules.diff.compare` on the runs of each side, as ``nsys-rules diff`` runs
it. ``verify`` joins it with two checks: the finding of BEFORE is looked up in AFTER by its
fingerprint (stable across runs: rule + kernel/api/nvtx/device, never timestamps), and the step's
change (the diff verdict, with its 95 % interval) is set against the saving the finding promised
(``estimated_savings_ns`` over the steady state, per step).
"""

from __future__ import annotations

from typing import Any

from nsys_rules.diff import DEFAULT_GATE_PCT, DEFAULT_HOST_SPREAD_PCT, DiffResult, compare
from nsys_rules.errors import UsageError
from nsys_rules.mcp_server.work import Work, find, savings_words
from nsys_rules.textsafe import clip_value
from nsys_rules.units import human_ns

#: A finding still present counts as smaller (larger) when its saving per step fell (grew) by this share.
CHANGED_SHARE = 0.25


def _compare(work: Work, before: list[Any], after: list[Any], gate: float, force: bool) -> DiffResult:
    base = [work.run_of(p, f"before[{i}]") for i, p in enumerate(before)]
    new = [work.run_of(p, f"after[{i}]") for i, p in enumerate(after)]
    return compare(base, new, gate, force=force, host_spread_pct=DEFAULT_HOST_SPREAD_PCT)


def diff_summary(result: DiffResult) -> str:
    """The verdict line, its reasons and notes, and what never to conclude from it."""
    lines = [result.line, *[f"- {r}" for r in result.verdict["reasons"]], *[f"note: {n}" for n in result.notes]]
    if result.step_verdict == "inconclusive":
        lines.append("inconclusive: the noise is larger than the change; capture more runs per side (3+) and diff "
                     "them all, do not read it as slower or faster")
    elif min(result.runs) < 2:
        lines.append("one run on a side: run-to-run noise was assumed, not measured; confirm with 3+ runs per side")
    return "\n".join(lines)


def diff_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``diff``: the verdict on the median step, its interval, the movers (``diff --format json``)."""
    try:
        result = _compare(work, list(a["before"]), list(a["after"]), float(a.get("gate_pct", DEFAULT_GATE_PCT)),
                          bool(a.get("force", False)))
    except UsageError as exc:  # the CLI's words name its flag; the tool's argument is force
        raise UsageError(str(exc).replace("pass --force", "pass force=true")) from None
    return {"summary": diff_summary(result), "diff": result.to_json(int(a.get("top", 10)))}


def _per_step(finding: dict[str, Any] | None, envelope: dict[str, Any]) -> float | None:
    if finding is None or finding.get("estimated_savings_ns") is None:
        return None
    steps = ((envelope["traces"] or [{}])[0].get("budget") or {}).get("steps")
    return finding["estimated_savings_ns"] / steps if steps else None


def cause_status(before: float | None, after_finding: dict[str, Any] | None, after: float | None) -> str:
    """gone (no such finding after), smaller / larger (its saving per step moved by a quarter), or unchanged."""
    if after_finding is None:
        return "gone"
    if not before or after is None:
        return "unchanged"
    if after < before * (1 - CHANGED_SHARE):
        return "smaller"
    if after > before * (1 + CHANGED_SHARE):
        return "larger"
    return "unchanged"


def promise_verdict(step: dict[str, Any], promised: float | None) -> str:
    """The step's change against the promised saving per step (ns).

    exceeded: even the interval's least saving is above the promise; met: the promise lies within the
    interval of a faster step; short: even the interval's largest saving is below it; not kept: the step
    got slower; unproven: the diff could not tell (no change or inconclusive) and the promise is within reach.
    """
    if not promised:
        return "no promise"
    saved_least, saved_most = -step["high_ns"], -step["low_ns"]
    if step["verdict"] == "slower":
        return "not kept"
    if saved_most < promised:
        return "short"
    if step["verdict"] != "faster":
        return "unproven"
    return "exceeded" if saved_least > promised else "met"


def verify_tool(work: Work, a: dict[str, Any]) -> dict[str, Any]:
    """``verify``: the finding's cause in AFTER, and the step's change against the finding's promise."""
    fingerprint = str(a["fingerprint"])
    before_report = work.report(a["before"], what="before")
    finding = find(before_report, fingerprint, "before")
    after_report = work.report(a["after"], what="after")
    after = next((f for f in after_report["findings"] if f["fingerprint"] == fingerprint), None)
    same_rule = [f for f in after_report["findings"] if f["rule"] == finding["rule"] and f["fingerprint"] != fingerprint]
    promised = _per_step(finding, before_report)
    after_per_step = _per_step(after, after_report)
    status = cause_status(promised, after, after_per_step)
    unjudged = _not_run(after_report, finding["rule"])
    if after is None and unjudged:
        status = "not judged"  # absent because the rule did not run on AFTER: no proof the cause is gone
    result, notes = _step_change(work, a)
    diff = None if result is None else result.to_json(5)
    step = None if result is None or diff is None else _step_of(result, diff)
    verdict = "unproven" if step is None else promise_verdict(step, promised)
    if not promised:
        verdict = "no promise"
    realized = round(100 * -step["estimate_ns"] / promised, 1) if promised and step else None
    cause = (f"not judged: the rule did not run on AFTER ({unjudged})" if status == "not judged"
             else _cause_words(status, finding, after, same_rule))
    lines = [f"{finding['rule']} ({fingerprint}) in AFTER: {cause}"]
    lines += [f"step: {step['line']}"] if step else []
    if promised and step:
        lines.append(f"promised: {savings_words(finding, before_report)}; the step changed by "
                     f"{human_ns(step['estimate_ns'], signed=True)} per step (95 % interval "
                     f"{human_ns(step['low_ns'], signed=True)} to {human_ns(step['high_ns'], signed=True)}), "
                     f"{realized} % of the promised saving: {verdict}")
    elif not promised:
        lines.append("the finding promised no saving figure, so only its cause can be judged")
    if result is not None and min(result.runs) < 2:
        lines.append("one run per side: a step change within the noise is no verdict; capture 3+ runs per side and "
                     "call diff to confirm")
    lines += [f"note: {n}" for n in notes]
    return {"summary": "\n".join(lines), "finding": finding,
            "cause": {"status": status, "before_savings_ns": finding.get("estimated_savings_ns"),
                      "after_savings_ns": None if after is None else after.get("estimated_savings_ns"),
                      "after": after, "same_rule_after": same_rule},
            "promise": {"savings_ns": finding.get("estimated_savings_ns"),
                        "steps": ((before_report["traces"] or [{}])[0].get("budget") or {}).get("steps"),
                        "per_step_ns": None if promised is None else round(promised, 1)},
            "step": step, "promise_verdict": verdict, "realized_pct": realized, "diff": diff}


def _step_change(work: Work, a: dict[str, Any]) -> tuple[DiffResult | None, list[str]]:
    """The diff of BEFORE and AFTER, and notes; None when a side has no steps to compare (the cause still is)."""
    gate = float(a.get("gate_pct", DEFAULT_GATE_PCT))
    try:
        return _compare(work, [a["before"]], [a["after"]], gate, force=False), []
    except UsageError as exc:
        if "has no steps" in str(exc):
            return None, [f"no step comparison: {exc}"]
        if "--force" not in str(exc):
            raise
        # A change can make the program look like another one (other kernels, another step mark): the step
        # is still the thing to judge, so compare anyway and say so.
        note = f"compared although the traces do not look like runs of one program and step: {exc}"
        return _compare(work, [a["before"]], [a["after"]], gate, force=True), [note]


def _step_of(result: DiffResult, diff: dict[str, Any]) -> dict[str, Any]:
    s = diff["change"]["step"]
    return {"verdict": result.step_verdict, "line": result.line, "base_median_ns": s["base_median_ns"],
            "new_median_ns": s["new_median_ns"], "estimate_ns": s["estimate_ns"], "low_ns": s["low_ns"],
            "high_ns": s["high_ns"], "estimate_pct": s["estimate_pct"], "low_pct": s["low_pct"],
            "high_pct": s["high_pct"]}


def _not_run(report: dict[str, Any], rule: str) -> str:
    """Why ``rule`` did not run on the report's trace ("" when it ran): skipped (with its fix) or failed."""
    for skipped in report["skipped"]:
        if skipped["rule"] == rule:
            return f"skipped: {skipped['reason']}" + (f"; {skipped['fix']}" if skipped.get("fix") else "")
    for error in report["errors"]:
        if error.get("rule") == rule:
            return f"failed: {error['error']}"
    return ""


def _cause_words(status: str, finding: dict[str, Any], after: dict[str, Any] | None, same: list[dict[str, Any]]) -> str:
    if status == "gone":
        words = "gone (no finding with this fingerprint)"
        if same:
            words += f"; {len(same)} other {finding['rule']} finding(s) there: {clip_value(same[0]['title'], 120)}"
        return words
    assert after is not None
    return f"{status}: still found ({after['severity']}): {clip_value(after['message'], 300)}"
