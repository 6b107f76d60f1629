"""Time windows: which part of the capture a rule judges.

The steady-state window comes from the step model (:mod:`nsys_rules.model.steps`): the
steady steps, or, where no step model fits, the profiler-API capture range, the capture after
its one-off initialization kernels, or the whole capture. ``--filter-time`` and
``--filter-nvtx`` select a user window instead.

GPU work belongs to a window by the time of the API call that launched it (see
:func:`nsys_rules.model.launches.launch_times`), on any thread of the process.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from nsys_rules.analysis.intervals import merge_intervals, point_in
from nsys_rules.model.launches import launch_times
from nsys_rules.model.steps import DEFAULT_STEADY, SteadyOptions, StepModel, capture_end, step_model
from nsys_rules.errors import UsageError
from nsys_rules.loaders.damage import MAX_TIME_NS
from nsys_rules.textsafe import clip_value
from nsys_rules.model.trace import Trace


@dataclass(frozen=True)
class Window:
    """A set of time intervals (ns) and a sentence saying where it came from.

    ``steps`` are the instances of the step range inside the window, when one was found:
    rules use them for per-step numbers.
    """

    intervals: tuple[tuple[int, int], ...] | None  # None: the whole capture
    source: str
    steps: tuple[tuple[int, int], ...] = ()
    step_name: str | None = None
    #: How the steps were found (``nvtx``, ``graph``, ``marker``, ``kernels``), ``none`` without steps,
    #: ``filter`` for a user window; empty for a plain window.
    kind: str = ""
    model: StepModel | None = field(default=None, compare=False, hash=False, repr=False)
    #: The user's filter (first, last instant) when this is the steady state cut by it (``kind`` ``filter``).
    cut: tuple[int, int] | None = None

    @property
    def name(self) -> str:
        """The window in a few words, for a finding's text: ``source`` up to its first "; " (what the
        window is, without why no step model fits, which the report's header says once)."""
        return self.source.split("; ", 1)[0]

    @property
    def start(self) -> int | None:
        """First instant in the window, or None for the whole capture."""
        return self.intervals[0][0] if self.intervals else None

    @property
    def end(self) -> int | None:
        """Last instant in the window, or None for the whole capture."""
        return self.intervals[-1][1] if self.intervals else None

    @property
    def bounds(self) -> tuple[int, int] | None:
        """(first instant, last instant) of the window, or None for the whole capture."""
        return (self.intervals[0][0], self.intervals[-1][1]) if self.intervals else None

    def mask(self, times: np.ndarray) -> np.ndarray:
        """Which of ``times`` fall inside the window."""
        times = np.asarray(times)
        if self.intervals is None:
            return np.ones(len(times), bool)
        if len(self.intervals) == 1:  # the usual window: two comparisons beat a search per row
            lo, hi = self.intervals[0]
            return (times >= lo) & (times <= hi)
        starts = np.array([a for a, _ in self.intervals], np.int64)
        ends = np.array([b for _, b in self.intervals], np.int64)
        return point_in(times, starts, ends) >= 0

    def duration_ns(self, trace_span: tuple[int, int]) -> int:
        """Total length of the window; the whole capture uses ``trace_span``."""
        if self.intervals is None:
            return max(0, trace_span[1] - trace_span[0])
        return int(sum(b - a for a, b in self.intervals))

    def to_json(self) -> dict[str, object]:
        """How the window is reported in the JSON envelope (an open end is null)."""
        out: dict[str, object] = {"source": self.source, "kind": self.kind or None, "start_ns": _bound(self.start),
                                  "end_ns": _bound(self.end), "steps": len(self.steps), "step_range": self.step_name}
        model = self.model
        gpu_span = model.gpu_span if model is not None and self.kind not in ("", "filter") else None
        if model is not None and gpu_span is not None:  # a model with steps
            out["gpu_start_ns"], out["gpu_end_ns"] = gpu_span
            out["warmup_steps"] = model.warmup
            if model.regimes:
                out["regimes"] = [r.to_json() for r in model.regimes]
        return out


FULL = Window(None, "whole capture")

#: Bounds this far out are "open" (a filter without a start or an end): JSON shows null.
_OPEN = 2**62


def _bound(value: int | None) -> int | None:
    return None if value is None or abs(value) >= _OPEN else int(value)


# -- user filters --------------------------------------------------------------------------
_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000, "m": 60_000_000_000, "h": 3_600_000_000_000}
# ASCII digits only: \d would also take other scripts' digits ('١٢s'), which float() then reads.
_PART = re.compile(r"(\d+(?:\.\d+)?)(ns|us|ms|s|m|h)?", re.ASCII)


def parse_time(text: str) -> int:
    """nsys time syntax: ``5s``, ``1s2ms``, ``1500`` (ns), ``2.5ms``."""
    text = text.strip()
    pos, total = 0, 0.0
    if not text:
        raise UsageError("empty time value")
    while pos < len(text):
        m = _PART.match(text, pos)
        if not m or m.end() == pos:
            raise UsageError(f"bad time {text!r}: use a number with ns, us, ms, s, m or h (e.g. 5s, 1s2ms)")
        total += float(m.group(1)) * _UNITS[m.group(2) or "ns"]
        pos = m.end()
    if not total <= MAX_TIME_NS:  # inf too: '9' * 400 digits
        raise UsageError(f"bad time {clip_value(text, 40)!r}: beyond the end of any trace (a trace's times stop at "
                         f"2^53 ns, {MAX_TIME_NS / 86_400e9:.0f} days)")
    return int(round(total))


def filter_time_window(spec: str, origin: int) -> Window:
    """``--filter-time START/END``: times relative to the capture start ``origin``; either side may be empty."""
    if "/" not in spec:
        raise UsageError(f"bad --filter-time {spec!r}: use START/END, e.g. 5s/7s or 1s2ms/")
    a, b = spec.split("/", 1)
    start = origin + parse_time(a) if a.strip() else -(2**62)
    end = origin + parse_time(b) if b.strip() else 2**62
    if end < start:
        raise UsageError(f"bad --filter-time {spec!r}: END before START")
    return Window(((start, end),), f"--filter-time {spec}")


def parse_nvtx_filter(spec: str) -> tuple[str, str | None, int | None]:
    """``RANGE[@DOMAIN][/INDEX]`` -> (range, domain, index)."""
    index: int | None = None
    body = spec
    if "/" in spec:
        body, _, tail = spec.rpartition("/")
        if not (tail.isascii() and tail.isdigit()):  # isdigit() alone takes '²' (int() then fails) and '١'
            raise UsageError(f"bad --filter-nvtx {spec!r}: INDEX after '/' must be a whole number")
        index = int(tail)
    name, _, domain = body.partition("@")
    if not name:
        raise UsageError(f"bad --filter-nvtx {spec!r}: give a range name")
    return name, (domain or None), index


def nvtx_filter_window(trace: Trace, spec: str) -> Window:
    """``--filter-nvtx``: the time of that range's instances (all of them without an index), all threads."""
    name, domain, index = parse_nvtx_filter(spec)
    if not trace.has("nvtx"):
        raise UsageError(f"--filter-nvtx {spec}: the trace has no NVTX events (capture with --trace=nvtx)")
    nvtx = trace.frame("nvtx", ["start", "end", "name", "domain_id", "event_type", "pid"])
    rows = nvtx[(nvtx["name"] == name) & (nvtx["end"] > nvtx["start"])]
    if domain is not None:
        # A number is the domain id; a name is the domain's nvtxDomainCreate event (eventType 75)
        # in the same process, the only place the export records it.
        if domain.isascii() and domain.isdigit():
            rows = rows[rows["domain_id"] == int(domain)]
        else:
            created = nvtx[(nvtx["event_type"] == 75) & (nvtx["name"] == domain)]
            keys = set(zip(created["pid"].tolist(), created["domain_id"].tolist(), strict=True))
            pairs = zip(rows["pid"].tolist(), rows["domain_id"].tolist(), strict=True)
            rows = rows[np.array([k in keys for k in pairs], dtype=bool)]
    rows = rows.sort_values("start", kind="stable")
    if rows.empty:
        where = f" in domain {domain!r}" if domain is not None else ""
        raise UsageError(f"--filter-nvtx {spec}: no NVTX range named {name!r}{where} in the trace; "
                         + _range_names_hint(nvtx, name))
    if index is not None:
        if index >= len(rows):
            raise UsageError(f"--filter-nvtx {spec}: the range has {len(rows)} instance(s), index {index} is out of range")
        rows = rows.iloc[[index]]
    starts, ends = merge_intervals(rows["start"].to_numpy(), rows["end"].to_numpy())
    return Window(tuple(zip(starts.tolist(), ends.tolist(), strict=True)), f"--filter-nvtx {spec}")


def _range_names_hint(nvtx: pd.DataFrame, name: str, shown: int = 5) -> str:
    """The range names the trace has that come closest to ``name``, else its most frequent ones.

    Names come from the file: each is shown as a quoted, escaped and bounded literal.
    """
    ranges = nvtx.loc[(nvtx["end"] > nvtx["start"]) & nvtx["name"].notna(), "name"].astype(str)
    counts = ranges.value_counts()
    if counts.empty:
        return "the trace has no named NVTX ranges"
    close = difflib.get_close_matches(name, [str(n) for n in counts.index[:10_000]], n=3, cutoff=0.6)
    if close:
        return "closest: " + ", ".join(_quoted(n) for n in close)
    common = ", ".join(_quoted(n) for n in counts.index[:shown])
    return f"the trace has {len(counts)} range name(s), most frequent: {common}"


def _quoted(name: str, limit: int = 80) -> str:
    return repr(name if len(name) <= limit else name[: limit - 1] + "…")


def require_activity(trace: Trace, window: Window, what: str) -> None:
    """Raise :class:`UsageError` when a user's window holds no activity at all, naming the trace's span.

    Activity is what the rules judge: CUDA API calls and NVTX ranges by their start, GPU work by
    the start of its launching call (the windows' rule). A filter past the end of a short trace
    would otherwise report "no findings" as if the program had been judged and found clean.
    """
    from nsys_rules.model.activity import gpu_ops

    starts = [gpu_ops(trace).launch]
    for table in ("api", "nvtx"):
        if trace.has(table):
            starts.append(trace.frame(table, ["start"])["start"].to_numpy())
    starts = [np.asarray(t, np.int64) for t in starts if len(t)]
    if any(window.mask(t).any() for t in starts):
        return
    if not starts:
        raise UsageError(f"{what} selects nothing: the trace holds no CUDA API call, GPU work or NVTX range")
    lo = min(int(t.min()) for t in starts) - SESSION_ORIGIN_NS
    hi = max(int(t.max()) for t in starts) - SESSION_ORIGIN_NS
    # Activity can start a hair before the session's origin; the filter syntax has no negative times.
    first = f"{lo // 1_000_000}ms" if lo >= 0 else ""
    raise UsageError(f"{what} selects nothing: the trace's activity runs from {max(lo, 0) / 1e9:.3f} s to "
                     f"{max(hi, 0) / 1e9:.3f} s after the session start (the origin of --filter-time); --filter-time "
                     f"{first}/{max(-(-hi // 1_000_000), 1)}ms covers all of it")


def covers_activity(trace: Trace, window: Window) -> bool:
    """Whether ``window`` holds every CUDA API call, GPU launch and NVTX range start of the trace (it cuts
    nothing: the window :func:`require_activity` suggests as covering all of it)."""
    from nsys_rules.model.activity import gpu_ops

    ops = gpu_ops(trace)
    starts = [np.where(ops.launch >= 0, ops.launch, ops.start)]  # work without its launch call: by its start
    for table in ("api", "nvtx"):
        if trace.has(table):
            starts.append(np.asarray(trace.frame(table, ["start"])["start"].to_numpy(), np.int64))
    return all(bool(window.mask(t).all()) for t in starts if len(t))


#: nsys exports store times relative to the session start, so ``--filter-time 5s/7s`` starts at 5e9.
SESSION_ORIGIN_NS = 0


def intersect(a: Window, b: Window) -> Window:
    """The instants inside both windows (each a sorted list of disjoint intervals).

    One sweep over both lists, so 20k NVTX ranges against a time filter cost 20k steps, not
    the product of the two lists.
    """
    left, right = sorted(a.intervals or ()), sorted(b.intervals or ())
    out = []
    i = j = 0
    while i < len(left) and j < len(right):
        (s1, e1), (s2, e2) = left[i], right[j]
        lo, hi = max(s1, s2), min(e1, e2)
        if lo <= hi:
            out.append((lo, hi))
        if e1 < e2:
            i += 1
        else:
            j += 1
    return Window(tuple(out) or ((0, -1),), f"{a.source} and {b.source}")


def user_window(trace: Trace, filter_time: str | None, filter_nvtx: str | None) -> Window | None:
    """The window ``--filter-time`` and ``--filter-nvtx`` select together, or None without filters."""
    window: Window | None = None
    if filter_time:
        window = filter_time_window(filter_time, SESSION_ORIGIN_NS)
    if filter_nvtx:
        nvtx = nvtx_filter_window(trace, filter_nvtx)
        window = nvtx if window is None else intersect(window, nvtx)
    return window


# -- steady state --------------------------------------------------------------------------
def steady_state_window(trace: Trace, options: SteadyOptions = DEFAULT_STEADY) -> Window:
    """The steady-state window of ``trace``: the steps of its step model, else the best window without steps.

    With steps (see :mod:`nsys_rules.model.steps`), the window runs from the first steady
    step's host start to the last one's end. Without, it is the profiler-API capture range, or
    the capture after its one-off initialization kernels, or the whole capture; its source then
    says that no step model fits and why, and rules that need steps skip with that reason.
    Computed once per trace and options.
    """
    return trace.memo(("windows.steady_state_window", options), lambda: _steady_state_window(trace, options))


def _steady_state_window(trace: Trace, options: SteadyOptions) -> Window:
    model = step_model(trace, options)
    if model.host_span is not None:  # a model with steps
        return Window((model.host_span,), model.description, tuple(map(tuple, model.host.tolist())), model.name,
                      kind=model.source, model=model)
    if model.profiler_range is not None:
        return Window((model.profiler_range,), f"profiler API capture range; {model.reason}", kind="none",
                      model=model)
    kernel_start = _kernel_pattern_start(trace)
    if kernel_start is not None:
        return Window(((kernel_start, capture_end(trace)),),
                      f"after one-off initialization kernels; {model.reason}", kind="none", model=model)
    return Window(None, f"whole capture; {model.reason}", kind="none", model=model)


def _kernel_pattern_start(trace: Trace) -> int | None:
    """Launch time of the first kernel after the last one whose name never recurs in the later half."""
    if not trace.has("kernels"):
        return None
    kernels = trace.frame("kernels", ["start", "name", "correlation_id", "pid"])
    if len(kernels) < 20:
        return None
    launch = launch_times(trace, kernels)
    order = np.argsort(launch, kind="stable")
    codes = kernels["name"].cat.codes.to_numpy()[order]
    half = len(codes) // 2
    recurring = np.zeros(int(codes.max()) + 2, bool)
    recurring[codes[half:] + 1] = True
    one_off = np.flatnonzero(~recurring[codes[:half] + 1])
    if not len(one_off):
        return None
    last = int(one_off[-1]) + 1
    return int(launch[order][last]) if last < len(order) else None
