"""The rule API: what a rule declares and what it gets when it runs."""

from __future__ import annotations

import dataclasses
import weakref
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Generic, Iterable, Mapping, TypeVar

import numpy as np
import pandas as pd

from nsys_rules.model.activity import frame_api_rows
from nsys_rules.model.budget import Budget
from nsys_rules.model.launch_rows import FrameView, frame_launch_times, frame_view, shared_api_rows
from nsys_rules.model.launches import launch_api_rows
from nsys_rules.model.steps import StepModel

if TYPE_CHECKING:
    from nsys_rules.model.replay_what_if import StepReplay
from nsys_rules.model.workload import looks_like_model
from nsys_rules.model.compat import missing_table
from nsys_rules.errors import MissingData
from nsys_rules.findings import Finding, Location, Metric, Severity, metric  # noqa: F401 - metric: rules' shorthand
from nsys_rules.loaders.tables import TABLES
from nsys_rules.model.trace import Trace
from nsys_rules.model.trace_facts import TraceFacts
from nsys_rules.model.trace_view import TraceView
from nsys_rules.model.windows import Window

#: Sections every rule docstring carries, in this order (checked by the meta tests).
DOC_SECTIONS = ("What it detects", "Why it hurts", "Evidence", "Next optimizations", "Options", "Requires",
                "False positives")

GPU_TABLES = ("kernels", "memcpy", "memset", "sync", "graph_trace")

#: What :meth:`Rule.check` gets: a :class:`RuleContext` for trace rules, a ``JobContext`` for job rules.
ContextT = TypeVar("ContextT")


@dataclass(frozen=True)
class NoOptions:
    """A rule without options."""


@dataclass(frozen=True)
class Renamed:
    """An option's former name, still accepted (with a one-line deprecation warning) for one release."""

    new: str
    #: Old values are multiplied by this: 100 where a fraction (0.05) became a percent (5).
    factor: float = 1.0


class Rule(Generic[ContextT]):
    """Base class of every rule, built-in or from a plugin.

    Subclasses set the class attributes and implement :meth:`check`. Thresholds live in
    the frozen ``Options`` dataclass (field defaults + ``metadata={"help": ...}``), never as
    literals in ``check``. ``requires`` lists canonical tables that must exist, ``optional``
    tables used when present, ``columns`` narrows what is read per table (speed), and
    ``window`` is ``"steady"`` or ``"full"`` (an ``Options.window`` field overrides it).
    ``scope`` is ``"trace"``: the engine runs the rule on each trace. Job rules
    (:class:`nsys_rules.job_rule.JobRule`, scope ``"job"``) run once over all ranks instead.
    ``renamed_options`` maps an option's former name to its :class:`Renamed` (shares and
    fractions are percents named ``*_pct``; the old names stay accepted for one release).
    ``needs_release_build`` is True for a rule whose advice tunes the program from its measured
    times (kernels, launches, host code): on a trace the debug-build error marks, those times are
    the debug build's, and the answer (:mod:`nsys_rules.answer`) replaces the advice with the re-capture.
    """

    name: ClassVar[str] = ""
    title: ClassVar[str] = ""
    default_severity: ClassVar[Severity] = Severity.WARNING
    requires: ClassVar[tuple[str, ...]] = ()
    optional: ClassVar[tuple[str, ...]] = ()
    columns: ClassVar[Mapping[str, tuple[str, ...]]] = {}
    window: ClassVar[str] = "steady"
    aliases: ClassVar[tuple[str, ...]] = ()
    Options: ClassVar[type] = NoOptions
    scope: ClassVar[str] = "trace"
    renamed_options: ClassVar[Mapping[str, Renamed]] = {}
    needs_release_build: ClassVar[bool] = False

    def check(self, ctx: ContextT) -> Iterable[Finding]:
        """Yield findings for ``ctx.trace`` (a :class:`RuleContext`); raise :class:`MissingData` to be skipped."""
        raise NotImplementedError

    @classmethod
    def needs(cls) -> dict[str, tuple[str, ...]]:
        """Tables and columns this rule reads (all columns of a table unless narrowed)."""
        out: dict[str, tuple[str, ...]] = {}
        for table in (*cls.requires, *cls.optional):
            out[table] = tuple(cls.columns.get(table, TABLES[table].column_names))
        return out

    @classmethod
    def option_fields(cls) -> tuple[dataclasses.Field[Any], ...]:
        """The fields of ``Options`` (name, default, ``metadata['help']``)."""
        return dataclasses.fields(cls.Options)


@dataclass
class RuleContext(TraceFacts):
    """What :meth:`Rule.check` gets: the trace (read-only), the effective options and the window.

    ``frame`` returns a canonical frame cut to the window: host rows by their start, GPU
    rows by the start of the API call that launched them. The model facts built from the trace
    (``framework``, ``gpu_ops``, ``python_stacks``, ``recapture_command(...)``, ...) are properties and
    methods of the context (:class:`~nsys_rules.model.trace_facts.TraceFacts`), as ``steps`` and
    ``budget`` are: built once per trace, shared by every rule.
    """

    #: The trace itself, for the model functions the context calls; rules read :attr:`trace`.
    _trace: Trace
    rule: Rule
    options: Any
    window: Window
    #: The steady steps (None where no step model fits; then ``steps.reason`` is on the window's model).
    steps: StepModel | None = None
    #: Where the steady steps' time goes (None without steps).
    budget: Budget | None = None
    _cache: dict[str, pd.DataFrame] = field(default_factory=dict)
    #: Launch times of a GPU frame's window rows made for this rule (where they are no view), per table.
    _launch: dict[str, pd.Series] = field(default_factory=dict)
    _llm_like: bool | None = field(default=None, init=False, repr=False)

    @property
    def trace(self) -> TraceView:
        """The trace, read-only: its tables (whole capture), row counts, capture facts, GPUs and label."""
        return self._trace

    def frame(self, name: str, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """Canonical frame ``name`` restricted to the window (a ``launch_start`` column is added to GPU frames)."""
        if not self._trace.has(name):
            raise MissingData(*missing_table(self._trace, name))
        cols = list(columns) if columns is not None else list(self.rule.needs().get(name, TABLES[name].column_names))
        key = name + "|" + ",".join(cols)
        if key not in self._cache:
            full = self._trace.frame(name, cols)
            span, mask = self._selection(name, full)
            # No .copy(): pandas copy-on-write already keeps the trace's cached frame safe
            # from a rule that writes, and a copy per rule cost 100+ MB on a 1M-kernel trace.
            sub = full[cols] if span is None else (full[cols].iloc[span[0]:span[1]] if span[0] >= 0
                                                  else full.loc[_picked(mask), cols])
            if name in GPU_TABLES:
                view = frame_view(self._trace, name, len(full))
                rows = None if view is None else _view_rows(view, len(full), span)
                ops_launch = None if view is None or rows is None else _launch_series(self._trace, view.ops.launch)
                if ops_launch is not None and rows is not None:  # a view of the activity table's launch times:
                    sub["launch_start"] = ops_launch.iloc[rows].set_axis(sub.index)  # nothing kept per frame
                elif view is not None:  # this rule's own, shared by its frames of this table (other frames' rows
                    # lie among the window's: the whole capture, with a few copies among the kernels)
                    own = self._launch.get(name)
                    if own is None:
                        own = self._launch[name] = pd.Series(_window_copy(view, view.ops.launch, span, mask),
                                                             copy=False)
                    sub["launch_start"] = own.set_axis(sub.index)
                else:
                    launch = frame_launch_times(self._trace, full)
                    shared = _launch_series(self._trace, launch, full.index)
                    if shared is not None and span is not None and span[0] < 0:
                        sub["launch_start"] = launch[mask]
                    elif shared is not None:  # a view of the trace's launch times, not a copy per rule
                        sub["launch_start"] = shared if span is None else shared.iloc[span[0]:span[1]]
                    else:
                        sub["launch_start"] = launch.copy() if span is None else launch[mask]
            self._cache[key] = sub.reset_index(drop=True)
        return self._cache[key]

    def launch_calls(self, name: str, names: bool = True, columns: Iterable[str] | None = None) -> pd.DataFrame:
        """:func:`~nsys_rules.model.launches.launch_api_rows` of ``frame(name)``, from the trace's shared
        launch join (the GPU activity table) instead of a join per rule; ``columns`` narrows what is gathered."""
        gpu = self.frame(name, ["start", "pid", "correlation_id"])
        full = self._trace.frame(name, ["start", "pid", "correlation_id"])
        view = frame_view(self._trace, name, len(full))
        if view is not None:  # the activity table's API rows: a view where the window's rows are a block of it
            span, mask = self._selection(name, full)
            at = _view_rows(view, len(full), span)
            # The whole frame widened as the gathers use it (launch_api_rows would, once more).
            view_rows = view.ops.api_row[at] if at is not None else _window_copy(view, view.ops.api_row, span, mask,
                                                                                 np.intp)
            return launch_api_rows(self._trace, gpu, names, api_rows=view_rows, columns=columns)
        rows = shared_api_rows(self._trace, full)
        if rows is None:
            rows = frame_api_rows(self._trace, name)
        if rows is None or len(rows) != len(full):
            return launch_api_rows(self._trace, gpu, names, columns=columns)
        span, mask = self._selection(name, full)
        if span is not None:
            rows = rows[span[0]:span[1]] if span[0] >= 0 else rows[mask]
        return launch_api_rows(self._trace, gpu, names, api_rows=rows, columns=columns)

    def window_rows(self, name: str) -> slice | np.ndarray:
        """The rows of the trace's frame ``name`` that ``frame(name)`` holds, in order: a slice when they
        form one block (the usual window), else a boolean mask."""
        full = self._trace.frame(name, ["start"])
        span, mask = self._selection(name, full)
        if span is None:
            return slice(None)
        return slice(span[0], span[1]) if span[0] >= 0 else _picked(mask)

    def _selection(self, name: str, full: pd.DataFrame) -> tuple[tuple[int, int] | None, np.ndarray | None]:
        """The window's rows of the trace's frame ``name`` as :func:`_contiguous` says (and the mask when
        they are not one block): GPU rows by their launch time, host rows by their start.

        Computed once per table and window and shared by every rule (a million-row test each time).
        """
        def build() -> tuple[int, tuple[int, int] | None, np.ndarray | None]:
            span: tuple[int, int] | None = None
            picked = None
            if self.window.intervals is not None:  # else every row: no times needed
                mask = self.window.mask(self._times(name, full))
                span = _contiguous(mask)
                picked = mask if span is not None and span[0] < 0 else None
            return len(full), span, picked

        _, span, picked = self._trace.memo(("rule.window_rows", name, self.window), build,
                                          lambda hit: hit[0] == len(full))
        return span, picked

    def _times(self, name: str, full: pd.DataFrame) -> np.ndarray:
        """The times that place the rows of the trace's frame ``name`` in a window: launch times of GPU rows
        (from the activity table, not kept, where it holds the frame's rows in order), starts of host rows."""
        if name not in GPU_TABLES:
            return full["start"].to_numpy()
        view = frame_view(self._trace, name, len(full))
        return view.whole(view.ops.launch) if view is not None else frame_launch_times(self._trace, full)

    def api_base_names(self) -> pd.Series:
        """Base API names (``_v<digits>`` removed) aligned with ``frame("api")``."""
        names = self._trace.api_names()

        def build() -> tuple[pd.Series, pd.Series]:
            span, mask = self._selection("api", self._trace.frame("api", ["start"]))  # the rows frame("api") holds
            out = names if span is None else (names.iloc[span[0]:span[1]] if span[0] >= 0 else names[_picked(mask)])
            return names, out.reset_index(drop=True)

        # Every rule that reads the API asks; the answer depends only on the trace and the window.
        _, out = self._trace.memo(("rule.window_api_names", self.window), build, lambda hit: hit[0] is names)
        return out.copy(deep=False)  # a new object: a rule writing into it cannot touch the kept one

    def span(self) -> tuple[int, int]:
        """First and last timestamp of GPU and API activity in the whole trace."""
        frames = [self._trace.frame(name, ["start", "end"]) for name in ("kernels", "memcpy", "memset", "api")
                  if self._trace.has(name)]
        # Several rules ask, and each answer is four scans of million-row columns: kept per trace
        # (for as long as the trace holds these very frames).
        def build() -> tuple[list[weakref.ref[pd.DataFrame]], tuple[int, int]]:
            lo, hi = [], []
            for f in frames:
                if len(f):
                    lo.append(int(f["start"].min()))
                    hi.append(int(f["end"].max()))
            return [weakref.ref(f) for f in frames], (min(lo), max(hi)) if lo else (0, 0)  # never pins a frame

        def fresh(hit: tuple[list[weakref.ref[pd.DataFrame]], tuple[int, int]]) -> bool:
            return len(hit[0]) == len(frames) and all(a() is b for a, b in zip(hit[0], frames, strict=True))

        return self._trace.memo(("rule.activity_span",), build, fresh)[1]

    def window_bounds(self) -> tuple[int, int]:
        """The window clipped to the trace's activity span."""
        lo, hi = self.span()
        if self.window.intervals is None:
            return lo, hi
        return max(lo, self.window.start or lo), min(hi, self.window.end or hi)

    def finding(self, message: str, recommendation: str, *, severity: Severity | None = None, title: str | None = None,
                metrics: Mapping[str, Metric] | None = None, location: Location | None = None,
                estimated_savings_ns: int | float | None = None, key: str = "", budget_part: str | None = None,
                savings_range: tuple[float, float] | None = None, savings_note: str | None = None) -> Finding:
        """Build a finding of this rule, with the trace filled into its location.

        ``budget_part`` names the step-budget part the savings come from; the engine then caps
        the savings at that part (shared with other findings of the same part).
        """
        loc = location or Location()
        loc = dataclasses.replace(loc, trace=loc.trace or self._trace.label)
        savings = None if estimated_savings_ns is None or not np.isfinite(estimated_savings_ns) else int(
            max(0, estimated_savings_ns))
        bounds = None
        if savings_range is not None and all(np.isfinite(v) for v in savings_range):
            bounds = (int(max(0, min(savings_range))), int(max(0, max(savings_range))))
        return Finding(self.rule.name, severity or self.rule.default_severity, title or self.rule.title, message,
                       recommendation, dict(metrics or {}), loc, savings, key, budget_part, bounds, savings_note)

    @property
    def llm_like(self) -> bool:
        """Whether the steps look like a model's forward pass (LLM wording fits the advice)."""
        if self._llm_like is None:
            self._llm_like = bool(looks_like_model(self._trace, self.budget))
        return self._llm_like

    def replay(self) -> "StepReplay | None":
        """The median step's what-if replay (issue 36): ``.saving(rule)`` is what a rule's fix gives back per step.

        Built once per trace and step model (:func:`~nsys_rules.model.replay_what_if.step_replay`); None without steps.
        """
        from nsys_rules.model.replay_what_if import step_replay  # the replay is built only for the rules that ask

        return step_replay(self._trace, self.steps, self.budget)

    @property
    def steady_ns(self) -> int:
        """Length of the steady steps on the GPU clock (the budget's total), 0 without steps."""
        return self.budget.total_ns if self.budget is not None else 0


def _view_rows(view: FrameView, rows: int, span: tuple[int, int] | None) -> slice | None:
    """The activity table's rows holding the frame rows :meth:`RuleContext._selection` picked, when they are a block."""
    if span is None:
        return view.rows(0, rows)
    return view.rows(*span) if span[0] >= 0 else None


def _window_copy(view: FrameView, values: np.ndarray, span: tuple[int, int] | None, mask: np.ndarray | None,
                 whole_dtype: type | None = None) -> np.ndarray:
    """An activity field at the window's frame rows as a new array, where they are not one block of the table
    (:func:`_view_rows` gave None) or span the whole frame; ``whole_dtype``: the type for the whole frame."""
    if span is None:
        return view.whole(values, whole_dtype)
    values = view.whole(values)
    return values[span[0]:span[1]].copy() if span[0] >= 0 else values[mask]


def _launch_series(trace: Trace, launch: np.ndarray, index: pd.Index | None = None) -> pd.Series | None:
    """The trace's cached launch times (a frame's, or the activity table's) as one Series kept alive with the
    trace; None when not cached.

    Assigning slices of a Series that stays referenced shares its memory under copy-on-write (a
    rule that writes into the column gets its own copy); a bare numpy array would be copied on
    assignment, or written through if pandas thought it owned it (the cached array is read-only).
    """
    if launch.flags.writeable:  # launch_times caches (read-only) only the trace's own frames
        return None
    # By the array's identity, kept alongside so a recycled id never matches.
    return trace.memo(("rule.launch_series", id(launch)), lambda: (launch, pd.Series(launch, index=index, copy=False)),
                      lambda hit: hit[0] is launch)[1]


def _picked(mask: np.ndarray | None) -> np.ndarray:
    """The row mask :meth:`RuleContext._selection` gives with a span of (-1, -1): never None there."""
    if mask is None:
        raise AssertionError("a window's rows that are not one block come with their mask")
    return mask


def _contiguous(mask: np.ndarray) -> tuple[int, int] | None:
    """None when every row is in; (first, last + 1) when the rows in form one block; (-1, -1) otherwise.

    Rows are in time order in nsys exports, so a one-interval window is usually one block of
    rows: a row slice is a view (copy-on-write), where a boolean mask copies every column.
    """
    if not len(mask):
        return None
    first = int(np.argmax(mask))  # no row-number array (8 bytes a row): the ends, then one test
    if not mask[first]:
        return (0, 0)
    last = len(mask) - 1 - int(np.argmax(mask[::-1]))
    if first == 0 and last == len(mask) - 1 and mask.all():
        return None
    return (first, last + 1) if mask[first:last + 1].all() else (-1, -1)
