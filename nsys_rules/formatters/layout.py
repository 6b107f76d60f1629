"""What the human formats show, and in which order: one answer per report.

Table, compact, markdown and HTML all open with each trace's step budget (where the median
step's time goes), then the findings ranked as :func:`nsys_rules.findings.rank_key` orders them
(errors first, then warnings by savings, then infos). A symptom that a root-cause finding
explains (``folded_into``) is shown as one "also explains" line under that finding, and the
findings under the noise floor (``minor``) as one line at the end. JSON keeps every finding as
it is; this module only selects and orders what the engine computed, it measures nothing.
"""

from __future__ import annotations

import os
import re
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Iterable, TypeVar

from nsys_rules.findings import Finding
from nsys_rules.formatters.wrapping import is_command_line, wrap_text
from nsys_rules.records import TraceInfo
from nsys_rules.report import Report, TraceResult
from nsys_rules.textsafe import terminal_safe
from nsys_rules.units import human_ns

FormatT = TypeVar("FormatT", bound=Callable[..., str])

#: Below this many columns the table does not fit: the compact layout is used instead.
COMPACT_BELOW = 120
#: The width when the output is not a terminal (a file, a pipe: ``check T | less``) and COLUMNS is unset: 80
#: columns, as ruff, git and pytest lay out theirs (shells do not export COLUMNS), so the compact layout.
FILE_WIDTH = 80
#: The compact layout's width when the output is not a terminal and COLUMNS is unset.
COMPACT_FILE_WIDTH = FILE_WIDTH
#: Narrowest layout this module makes; a smaller COLUMNS is taken as this.
MIN_WIDTH = 40

NO_CUDA = ("no CUDA activity: the trace holds no CUDA API call, kernel, copy or memset, so there is nothing to "
           "judge; capture with `nsys profile --trace=cuda` (and check that the program uses the GPU)")


def debug_build_line(info: TraceInfo) -> str | None:
    """The line every human format shows under a trace the debug-build error marks, or None."""
    if info.debug_build is None:
        return None
    return (f"judged on a debug build ({info.debug_build}): every time below is the debug build's, and advice that "
            "tunes them waits for the release build; re-capture it first (see debug-build)")


def validity_line(info: TraceInfo) -> str | None:
    """The one line every human format shows above a trace's findings when the trace is not trusted
    (``traces[].validity``, nsys_rules.model.validity), or None."""
    validity = info.validity
    if not validity or validity.get("verdict", "trusted") == "trusted":
        return None
    reasons = validity.get("reasons") or []
    first = reasons[0]["message"] if reasons else ""
    more = f" (+{len(reasons) - 1} more)" if len(reasons) > 1 else ""
    changed = [f"{len(validity[k])} finding(s) {word}" for k, word in (("abstained", "abstained"),
                                                                          ("doubtful", "rest on it"))
               if validity.get(k)]
    tail = f"; {', '.join(changed)}" if changed else ""
    return f"trace {validity['verdict']}: {first}{more}{tail} (JSON traces[].validity)"


def terminal_width() -> int | None:
    """Columns to lay out for: ``COLUMNS`` when set, else the terminal's, else None (not a terminal)."""
    env = os.environ.get("COLUMNS", "").strip()
    if env.isdigit() and int(env) > 0:
        return max(MIN_WIDTH, int(env))
    from nsys_rules.containment import report_stream

    stream = report_stream()  # the report's own stdout: fd 1 is stderr while plugin code may run
    try:
        if stream is not None and stream.isatty():
            return max(MIN_WIDTH, os.get_terminal_size(stream.fileno()).columns)
    except (OSError, ValueError, AttributeError):
        pass
    return None


def output_width() -> int:
    """Columns to lay out for: :func:`terminal_width`, else :data:`FILE_WIDTH` (a file or a pipe)."""
    return terminal_width() or FILE_WIDTH


def one_line(text: object) -> str:
    """A value from the trace as one visible line: control characters and newlines shown escaped."""
    return terminal_safe(str(text), newlines=False)


def wrap(text: str, width: int, first: str = "", rest: str | None = None) -> list[str]:
    """``text`` wrapped to ``width`` columns; words longer than a line are broken (the width is a promise),
    a command in backticks gets its own line, whole (:mod:`.wrapping`: the one exception to the width)."""
    return wrap_text(text, width, first, rest)


def fit(lines: Iterable[str], width: int | None, indent: str = "  ") -> list[str]:
    """Every line that is wider than ``width`` wrapped, continuation lines indented; a line of several
    (a table) is taken line by line, and a command on its own line is left whole."""
    out: list[str] = []
    for line in (part for text in lines for part in text.split("\n")):
        if width is None or len(line) <= width or is_command_line(line):
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out.extend(wrap(line.strip(), width, lead, lead + indent))
    return out


def shorten(text: str, limit: int) -> str:
    """``text`` cut to ``limit`` characters at a word boundary (never inside a number), ending in "…"."""
    text = " ".join(str(text).split())
    if len(text) <= limit:
        return text
    cut = text[: max(1, limit - 1)]
    if text[len(cut)] != " " and " " in cut:
        # Back up to the word's start: a number is never cut in two; another word only when that
        # keeps two thirds of the room (a long kernel name shows more when cut inside).
        head, word = cut.rsplit(" ", 1)
        word += text[len(cut):].split(" ", 1)[0]
        if _NUMBER.fullmatch(word.strip("()[]{},;:'\"")) or len(head) >= 2 * limit // 3:
            cut = head
    return cut.rstrip(" ,;:") + "…"


#: A number as messages write it: ``123.456``, ``1,234``, ``65%``, ``4.5ms``, ``2x``.
_NUMBER = re.compile(r"[-+]?\d[\d.,]*[%a-zA-Z]{0,3}")


def ms(ns: float | int) -> str:
    """A budget figure in milliseconds, three decimals: the parts line up in one column."""
    return f"{ns / 1e6:.3f} ms"


def gpu_names(info: TraceInfo) -> str:
    """The trace's GPUs, each model once with its count (``8 x NVIDIA H200``)."""
    names = Counter(str(g.get("name") or "GPU") for g in info.gpus)
    return ", ".join(f"{n} x {one_line(name)}" if n > 1 else one_line(name) for name, n in names.items()) \
        or "GPU unknown"


# -- the step budget --------------------------------------------------------------------------
@dataclass(frozen=True)
class BudgetRow:
    """One line of the budget: a part of the median step (or a share of one, ``depth`` 1)."""

    name: str  # the budget part (``gemv``, ``launch_wait``...), or the split's detail key
    label: str
    kind: str  # busy, idle, or "" for a part's split
    median_ns: int
    share: float  # of the median step
    mean_ns: float
    depth: int = 0


@dataclass(frozen=True)
class BudgetView:
    """A trace's steady steps as the human formats show them."""

    steps: int
    total_ns: int
    p50_ns: int
    p90_ns: int
    max_ns: int
    median_step_ns: int
    rows: tuple[BudgetRow, ...]

    def headline(self) -> str:
        """``24 steps: p50 4.54 ms, p90 4.77 ms, max 5.26 ms (108 ms in all)``.

        p50 is the median step's own length (the step the parts below describe; for an even count,
        the lower of the two middle steps), so the headline and the breakdown agree.
        """
        return (f"{self.steps} steps: p50 {human_ns(self.median_step_ns)}, p90 {human_ns(self.p90_ns)}, "
                f"max {human_ns(self.max_ns)} ({human_ns(self.total_ns)} in all)")


#: How the launch wait of the median step splits (budget detail keys) and what each is called.
LAUNCH_SPLIT = (("median_step_launch_api_ns", "in CUDA launch calls (launch API)"),
                ("median_step_host_ns", "in host code outside CUDA calls"))


def budget_view(info: TraceInfo) -> BudgetView | None:
    """The trace's budget (its JSON form) as rows of the median step; None without one."""
    budget = info.budget
    if not budget or not budget.get("steps"):
        return None
    parts = [p for p in budget["parts"] if p["ns"] > 0]
    # The parts of one step add up to that step exactly, so their sum is the median step's length.
    median = sum(int(p["median_step_ns"]) for p in budget["parts"]) or 1
    rows = []
    for p in parts:
        rows.append(BudgetRow(p["name"], p["label"], p["kind"], int(p["median_step_ns"]), p["median_step_ns"] / median,
                              float(p["per_step_ns"])))
        detail = p.get("detail") or {}
        if p["name"] == "launch_wait" and all(k in detail for k, _ in LAUNCH_SPLIT):
            steps = budget["steps"]
            totals = {"median_step_launch_api_ns": detail.get("launch_api_ns", 0),
                      "median_step_host_ns": detail.get("host_ns", 0)}
            rows += [BudgetRow(key, label, "", int(detail[key]), detail[key] / median, totals[key] / steps, depth=1)
                     for key, label in LAUNCH_SPLIT]
    step = budget["step_ns"]
    return BudgetView(int(budget["steps"]), int(budget["total_ns"]), int(step["p50"]), int(step["p90"]),
                      int(step["max"]), median, tuple(rows))


def budget_lines(info: TraceInfo, label_width: int = 40) -> list[str]:
    """The budget as plain-text lines (table and compact layouts): the headline, then one line per part."""
    view = budget_view(info)
    if view is None:
        reason = info.budget_reason
        if reason and reason in str(info.window.get("steady", {}).get("source", "")):
            return ["step budget: none (no steps: why is in the steady state's line above)"]
        return [f"step budget: none ({one_line(reason)})"] if reason else []
    out = [f"step time: {view.headline()}",
           f"{'the median step by part:':<{label_width + 2}}{'median step':>12}{'share':>9}{'mean/step':>12}"]
    for row in view.rows:
        label = ("  " * row.depth) + shorten(row.label, label_width - 2 * row.depth)
        out.append(f"  {label:<{label_width}}{ms(row.median_ns):>12}{100 * row.share:>7.1f} %{ms(row.mean_ns):>12}")
    return out + what_if_lines(info, label_width)


def what_if_lines(info: TraceInfo, label_width: int = 40) -> list[str]:
    """``--what-if``: the median step replayed as measured and with the chosen fixes, part by part."""
    replay = (info.budget or {}).get("replay") or {}
    what = replay.get("what_if")
    if not what:
        return []
    step, new = int(what["step_ns"]), int(what["replayed_step_ns"])
    out = [f"what if {', '.join(what['rules'])} were fixed: the median step replayed {ms(step)} -> {ms(new)} "
           f"(saves {ms(step - new)}, {100 * (step - new) / max(step, 1):.0f} %; replay of the unchanged step "
           f"{replay.get('error_pct', 0):+.2f} % off the measured one)",
           f"{'the replayed median step by part:':<{label_width + 2}}{'before':>12}{'after':>12}"]
    for part in what["parts"]:
        label = shorten(str(part["label"]), label_width)
        out.append(f"  {label:<{label_width}}{ms(int(part['before_ns'])):>12}{ms(int(part['after_ns'])):>12}")
    return out


# -- findings ---------------------------------------------------------------------------------
@dataclass(frozen=True)
class Entry:
    """One ranked finding as shown, with the symptoms it explains."""

    number: int
    finding: Finding
    explains: tuple[Finding, ...]
    #: The steady steps' time of the finding's trace (0 when unknown): savings are shown as a share of it.
    steady_ns: int


@dataclass(frozen=True)
class Answer:
    """The findings of a report as the human formats list them."""

    entries: tuple[Entry, ...]
    minor: tuple[Finding, ...]

    def minor_line(self) -> str | None:
        """``minor: 3 findings under the noise floor (kernel-tail x2, sync-memset)``, None without any."""
        if not self.minor:
            return None
        counts = Counter(f.rule for f in self.minor)
        rules = ", ".join(f"{rule} x{n}" if n > 1 else rule for rule, n in counts.items())
        noun = "finding" if len(self.minor) == 1 else "findings"
        return f"minor: {len(self.minor)} {noun} under the noise floor ({rules})"

    def shown_counts(self) -> dict[str, int]:
        """The findings shown as entries, by severity (``error``, ``warning``, ``info``)."""
        counts = {"error": 0, "warning": 0, "info": 0}
        for e in self.entries:
            counts[e.finding.severity.value] += 1
        return counts

    @property
    def folded(self) -> int:
        """How many findings are shown as an "also explains" line under another."""
        return sum(len(e.explains) for e in self.entries)

    def counts_line(self) -> str:
        """``0 errors, 1 warning, 2 info shown; 3 folded, 1 minor``: what the findings list shows.

        Folded findings are never more severe than their owner and minor ones never above info
        (:mod:`nsys_rules.answer`), so the shown severities are the ones ``--fail-on`` decides on.
        """
        c = self.shown_counts()
        line = (f"{c['error']} error{'' if c['error'] == 1 else 's'}, "
                f"{c['warning']} warning{'' if c['warning'] == 1 else 's'}, {c['info']} info shown")
        rest = [f"{n} {what}" for n, what in ((self.folded, "folded"), (len(self.minor), "minor")) if n]
        return line + ("; " + ", ".join(rest) if rest else "")

    def only(self, findings: Iterable[Finding]) -> "Answer":
        """The part of the answer about ``findings`` (one trace's), numbered from 1 again."""
        mine = {id(f) for f in findings}
        kept = [e for e in self.entries if id(e.finding) in mine]
        return Answer(tuple(Entry(i, e.finding, e.explains, e.steady_ns) for i, e in enumerate(kept, 1)),
                      tuple(f for f in self.minor if id(f) in mine))


def answer(report: Report) -> Answer:
    """Rank, fold symptoms under their cause, gather the minor ones (see the module docstring)."""
    steady = {id(f): _steady_ns(r) for r in report.results for f in r.findings}
    ranked = report.findings
    shown = [f for f in ranked if not f.minor and not f.folded_into]
    minor = [f for f in ranked if f.minor and not f.folded_into]
    owners = {(f.location.trace, f.fingerprint): f for f in shown}
    minor_keys = {(f.location.trace, f.fingerprint) for f in minor}
    explained: dict[int, list[Finding]] = {}
    for f in ranked:
        if not f.folded_into:
            continue
        key = (f.location.trace, f.folded_into)
        if key in owners:
            explained.setdefault(id(owners[key]), []).append(f)
        elif key in minor_keys:
            minor.append(f)  # explained by a minor finding: as small as its cause
        else:
            shown.append(f)  # its cause is not in this report (a baseline, --select): shown on its own
    # Back in rank order by position: ``ranked.index`` compared findings field by field, once per finding
    # (quadratic: 20,000 findings took 80 s to lay out).
    position = {id(f): i for i, f in enumerate(ranked)}
    shown.sort(key=lambda f: position[id(f)])
    entries = tuple(Entry(i, f, tuple(explained.get(id(f), ())), steady.get(id(f), 0))
                    for i, f in enumerate(shown, 1))
    return Answer(entries, tuple(minor))


def _steady_ns(result: TraceResult) -> int:
    budget = result.info.budget or {}
    return int(budget.get("total_ns") or 0)


def savings_text(f: Finding) -> str:
    """``70.9 ms``, with the range when it differs (``70.9 ms (50.2-80.1 ms)``); empty without savings."""
    if f.estimated_savings_ns is None:
        return ""
    text = human_ns(f.estimated_savings_ns)
    if f.savings_range is not None and tuple(f.savings_range) != (f.estimated_savings_ns,) * 2:
        lo, hi = f.savings_range
        text += f" ({human_ns(lo)}-{human_ns(hi)})"
    return text


def savings_share(entry: Entry) -> str:
    """``65 % of steady time`` for a finding with savings in a trace with steps; empty otherwise.

    A saving outside the steady steps (an earlier regime: ``budget_part="outside"``) is no share of
    them, and says so; no share is ever shown above 100 %: a saving larger than the steady state is
    not one of its parts (the answer caps those that are).
    """
    saves = entry.finding.estimated_savings_ns
    if not saves or not entry.steady_ns:
        return ""
    if entry.finding.budget_part == "outside":
        return "outside the steady state"
    if saves > entry.steady_ns:
        return ""
    return f"{100.0 * saves / entry.steady_ns:.0f} % of steady time"


def savings_note(f: Finding) -> str | None:
    """Why there are no savings (withheld, outside the steady state), or how they were capped."""
    return one_line(f.savings_note) if f.savings_note and not f.folded_into else None


def explains_line(f: Finding, width: int | None = None) -> str:
    """``also explains: gpu-idle-gaps (GPU 0 idled 29 times ...)``, cut to one line of ``width``."""
    head = f"also explains: {f.rule}"
    room = (width or 160) - len(head) - 3
    return f"{head} ({shorten(one_line(f.message), max(20, room))})"


def trace_name(f: Finding) -> str:
    """The file name of the finding's trace (several traces in one report)."""
    return one_line(os.path.basename(f.location.trace or ""))


# -- what is not a finding --------------------------------------------------------------------
def skipped_lines(report: Report, verbose: bool) -> list[str]:
    """Skipped rules: every one with its reason under ``-v``, else one line naming them."""
    # A trace without CUDA says so in its own line; its rules' skips are listed only on request.
    skipped = [s for r in report.results if verbose or r.has_cuda for s in r.skipped]
    skipped += report.job.skipped if report.job is not None else []
    if not skipped:
        return []
    if verbose:
        return ["skipped:"] + [one_line(f"  {s.rule}: {s.reason}" + (f"; fix: {s.fix}" if s.fix else ""))
                               for s in skipped]
    names = ", ".join(dict.fromkeys(one_line(s.rule) for s in skipped))
    return [f"skipped: {len(skipped)} rule run(s) had nothing to judge ({names}); -v says why"]


def draws_profile(format_fn: FormatT) -> FormatT:
    """Mark a format that draws the steady-state profile: ``needs_profile = True`` (the hook's flag, read with
    ``getattr``) makes the engine attach it."""
    format_fn.__dict__["needs_profile"] = True  # a function attribute, which no function type declares
    return format_fn
