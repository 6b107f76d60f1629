"""Findings: what a rule reports, with numbers, a location and the next step."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping, Protocol

from nsys_rules.textsafe import NAME_CHARS, TEXT_CHARS, clip

UNITS = ("ns", "B", "B/s", "count", "ratio", "%")


class Severity(str, Enum):
    """How bad a finding is. Ordered: ``info < warning < error``."""

    INFO = "info"
    WARNING = "warning"
    ERROR = "error"

    @property
    def rank(self) -> int:
        """0 for info, 1 for warning, 2 for error."""
        return _RANK[self.value]

    @classmethod
    def parse(cls, text: str) -> "Severity":
        """Read a severity name, case-insensitively; ``ValueError`` on anything else."""
        try:
            return cls(str(text).strip().lower())
        except ValueError:
            raise ValueError(f"unknown severity {text!r}: use info, warning or error") from None


_RANK = {"info": 0, "warning": 1, "error": 2}


@dataclass(frozen=True)
class Metric:
    """One number of evidence with its unit (``ns``, ``B``, ``B/s``, ``count``, ``ratio``, ``%``)."""

    value: float | int
    unit: str

    def to_json(self) -> dict[str, Any]:
        """The ``{value, unit}`` object of the JSON output."""
        value = self.value
        if isinstance(value, float) and value.is_integer() and self.unit in ("ns", "B", "count"):
            value = int(value)
        return {"value": value, "unit": self.unit}


class NumpyScalar(Protocol):
    """A numpy scalar (``np.int64``, ``np.float32``, ...) as :func:`metric` takes it: told by its ``item()``."""

    def item(self) -> Any: ...


def metric(value: float | int | NumpyScalar, unit: str) -> Metric:
    """Shorthand for :class:`Metric` that turns numpy scalars into Python numbers (floats rounded to 6 decimals)."""
    # A numpy scalar, told by its ``item()`` rather than by importing numpy: the command line
    # imports this module before the read-ahead starts, and numpy is not needed for that.
    # Any: anything else (a plugin's mistake) is passed on as it is, for the run's check to report.
    number: Any = value
    if not isinstance(value, (int, float)) and hasattr(value, "item"):
        number = value.item()
    elif isinstance(value, float) and type(value) is not float:
        number = float(value)  # np.float64 is a float subclass: a plain float for JSON
    if isinstance(number, float):
        number = round(number, 6)
    return Metric(number, unit)


@dataclass(frozen=True)
class SourceLine:
    """A line of the program's own source code: where the host work or the call a finding names is made."""

    file: str
    line: int
    function: str = ""

    def to_json(self) -> dict[str, Any]:
        """``{file, line, function}`` (function only when known)."""
        out: dict[str, Any] = {"file": self.file, "line": int(self.line)}
        if self.function:
            out["function"] = self.function
        return out


@dataclass(frozen=True)
class Location:
    """Where a finding points; every field is optional."""

    trace: str | None = None
    pid: int | None = None
    tid: int | None = None
    device: int | None = None
    stream: int | None = None
    kernel: str | None = None
    api: str | None = None
    nvtx: tuple[str, ...] | None = None
    start_ns: int | None = None
    end_ns: int | None = None
    rank: int | None = None  # the rank of a multi-rank job (job rules), since schema 1.1
    #: The program's source line behind the finding (Python samples or backtraces), since schema 1.2;
    #: not part of the fingerprint, since a line moves with every edit above it.
    source: SourceLine | None = None
    #: The steady steps the finding names, numbered from 1 as the message and the HTML timeline number them
    #: (since schema 1.3); not part of the fingerprint, since the same problem lands in other steps next run.
    steps: tuple[int, ...] | None = None

    def to_json(self) -> dict[str, Any]:
        """Only the fields that are set."""
        out: dict[str, Any] = {}
        for key in ("trace", "pid", "tid", "device", "stream", "kernel", "api", "nvtx", "start_ns", "end_ns", "rank"):
            value = getattr(self, key)
            if value is None:
                continue
            out[key] = list(value) if key == "nvtx" else (int(value) if key not in ("trace", "kernel", "api") else value)
        if self.source is not None:
            out["source"] = self.source.to_json()
        if self.steps is not None:
            out["steps"] = [int(s) for s in self.steps]
        return out


@dataclass(frozen=True)
class Finding:
    """One thing a rule found, with its evidence and the recommended next optimization.

    ``fingerprint`` is derived from the rule and the stable parts of the location
    (kernel, api, nvtx, device, and the ``key`` a rule may add), never from timestamps,
    so a baseline made today still matches tomorrow's run of the same program.
    """

    rule: str
    severity: Severity
    title: str
    message: str
    recommendation: str
    metrics: Mapping[str, Metric] = field(default_factory=dict)
    location: Location = field(default_factory=Location)
    estimated_savings_ns: int | None = None
    key: str = ""
    #: The step-budget part this finding's savings come from (``launch_wait``, ``after_sync``, ``gemv``...).
    budget_part: str | None = None
    #: (low, high) bounds of the savings where the estimate is uncertain.
    savings_range: tuple[int, int] | None = None
    #: Why there is no savings figure (withheld on a misleading trace, outside the steady state...).
    savings_note: str | None = None
    #: Below the noise floor: one "minor" line in human formats; kept in JSON.
    minor: bool = False
    #: Fingerprint of the root-cause finding that explains this symptom's time.
    folded_into: str | None = None
    #: ``--baseline``: the saving the baseline recorded for this known finding, which grew past the gate since
    #: (the finding is shown as worse); None for a finding the baseline does not hold. Since schema 1.3.
    baseline_savings_ns: int | None = None
    #: The step replay behind the saving (issue 36): the median step before and after the fix, the range and its
    #: assumptions; None where the saving is not replayed. Since schema 1.4.
    savings_replay: Mapping[str, Any] | None = None

    def __post_init__(self) -> None:
        # Texts are bounded where they are made, so no output lays out a recorded multi-MB command
        # line or kernel name; the location keeps names whole (they are the finding's identity).
        for name, limit in (("title", NAME_CHARS), ("message", TEXT_CHARS), ("recommendation", TEXT_CHARS)):
            value = getattr(self, name)
            if isinstance(value, str) and len(value) > limit:
                object.__setattr__(self, name, clip(value, limit))

    @property
    def fingerprint(self) -> str:
        """A short stable hash of rule + kernel/api/nvtx/device + key."""
        loc = self.location
        parts = [self.rule, loc.kernel or "", loc.api or "", "/".join(loc.nvtx or ()),
                 "" if loc.device is None else str(loc.device), self.key]
        # surrogatepass: a name from a non-UTF-8 file name (lone surrogates) still hashes; UTF-8 text as before.
        return hashlib.sha256("\x1f".join(parts).encode("utf-8", "surrogatepass")).hexdigest()[:16]

    def to_json(self) -> dict[str, Any]:
        """The finding as it appears in the JSON envelope."""
        out: dict[str, Any] = {
            "rule": self.rule,
            "severity": self.severity.value,
            "title": self.title,
            "message": self.message,
            # A ratio over a zero denominator is not evidence: JSON has no Infinity/NaN, so such
            # a metric is left out rather than printed as invalid JSON or a made-up number.
            "metrics": {k: m.to_json() for k, m in self.metrics.items() if math.isfinite(m.value)},
            "location": self.location.to_json(),
            "recommendation": self.recommendation,
            "fingerprint": self.fingerprint,
        }
        if self.estimated_savings_ns is not None:
            out["estimated_savings_ns"] = int(self.estimated_savings_ns)
        if self.savings_range is not None:
            out["savings_range_ns"] = [int(self.savings_range[0]), int(self.savings_range[1])]
        if self.budget_part is not None:
            out["budget_part"] = self.budget_part
        if self.savings_note:
            out["savings_note"] = self.savings_note
        if self.minor:
            out["minor"] = True
        if self.folded_into:
            out["folded_into"] = self.folded_into
        if self.baseline_savings_ns is not None:
            out["baseline_savings_ns"] = int(self.baseline_savings_ns)
        if self.savings_replay is not None:
            out["savings_replay"] = dict(self.savings_replay)
        return out


def rank_key(finding: Finding) -> tuple[int, int, int, int, str, str]:
    """Sort key for the "what to optimize next" list.

    Errors first: an error means the trace itself misleads (debug build, hidden graph kernels,
    CUDA_LAUNCH_BLOCKING), so every other number in it waits on a re-capture. Then warnings by
    estimated savings, then infos by savings; folded symptoms and findings under the noise floor
    last. Ties break on the rule and location, so the order is deterministic.
    """
    savings = finding.estimated_savings_ns or 0
    hidden = 1 if (finding.minor or finding.folded_into) else 0
    return (hidden, -finding.severity.rank, -savings, 0, finding.rule,
            json.dumps(finding.location.to_json(), sort_keys=True))
