"""Findings: what a rule reports, with numbers, a location and the next step."""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Mapping

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

    def to_json(self) -> dict[str, Any]:
        """Only the fields that are set."""
        out: dict[str, Any] = {}
        for key in ("trace", "pid", "tid", "device", "stream", "kernel", "api", "nvtx", "start_ns", "end_ns", "rank"):
            value = getattr(self, key)
            if value is None:
                continue
            out[key] = list(value) if key == "nvtx" else (int(value) if key not in ("trace", "kernel", "api") else value)
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

    @property
    def fingerprint(self) -> str:
        """A short stable hash of rule + kernel/api/nvtx/device + key."""
        loc = self.location
        parts = [self.rule, loc.kernel or "", loc.api or "", "/".join(loc.nvtx or ()),
                 "" if loc.device is None else str(loc.device), self.key]
        return hashlib.sha256("\x1f".join(parts).encode()).hexdigest()[:16]

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
        return out


def rank_key(finding: Finding) -> tuple[int, int, int, str, str]:
    """Sort key for the "what to optimize next" list.

    Errors come first: by our severity scheme an error means the trace itself misleads (debug
    build, hidden graph kernels), so every other number in it waits on a re-capture, whatever
    savings they promise. Then estimated savings, then severity, then a stable tie-break.
    """
    savings = finding.estimated_savings_ns or 0
    is_error = 1 if finding.severity is Severity.ERROR else 0
    return (-is_error, -savings, -finding.severity.rank, finding.rule,
            json.dumps(finding.location.to_json(), sort_keys=True))
