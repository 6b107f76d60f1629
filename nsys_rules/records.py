"""The typed records of a run besides findings: rules skipped, things that failed, and what each trace is.

Each record has ``to_json()``, the object the JSON envelope holds (``skipped[]``, ``errors[]``,
``traces[]``); fields that are unset are left out, so the envelope has the same keys it always had.
"""

from __future__ import annotations

import base64
import os
from dataclasses import dataclass, field
from typing import Any


def path_bytes(path: str) -> str | None:
    """The base64 of ``path``'s bytes when they are not UTF-8 (Python holds such a byte as a lone surrogate,
    which JSON text shows as ``\\xHH``: the exact file name is this field); None for a UTF-8 path."""
    if path.isascii():
        return None
    try:
        path.encode("utf-8")
    except UnicodeEncodeError:
        return base64.b64encode(os.fsencode(path)).decode("ascii")
    return None


@dataclass(frozen=True)
class Skipped:
    """A rule that did not run on a trace (``trace`` is ``"job"`` for a job rule): why, and what to do about it."""

    rule: str
    trace: str
    reason: str
    fix: str

    def to_json(self) -> dict[str, str]:
        """The ``skipped[]`` entry."""
        return {"rule": self.rule, "trace": self.trace, "reason": self.reason, "fix": self.fix}


@dataclass(frozen=True)
class RunError:
    """Something that failed and left the run incomplete (exit 4).

    One of: a rule on a trace (``rule`` and ``trace``; ``rule`` may also be ``profile`` or
    ``job``), a plugin while it loaded or registered (``plugin``), or a whole trace a worker
    could not analyze (``trace`` alone). ``traceback`` is for ``--debug`` and tests, never in
    the JSON.
    """

    error: str
    rule: str | None = None
    trace: str | None = None
    plugin: str | None = None
    traceback: str = field(default="", repr=False)

    @property
    def source(self) -> str:
        """What failed, as a line names it: the rule, else the plugin, else the trace."""
        return self.rule or self.plugin or self.trace or "?"

    def to_json(self) -> dict[str, str]:
        """The ``errors[]`` entry."""
        out = {"plugin": self.plugin, "rule": self.rule, "trace": self.trace}
        return {**{k: v for k, v in out.items() if v is not None}, "error": self.error}


@dataclass(frozen=True)
class Capped:
    """A rule that returned more findings on a trace than ``--max-findings``: the first ``kept`` are in the
    report; ``dropped`` more were not (None: the rule yields them one by one and the rest was never read, so at
    least one more)."""

    rule: str
    trace: str
    kept: int
    dropped: int | None

    def line(self) -> str:
        """``rule flood on t.sqlite: 1000 findings kept, 4000 more dropped (--max-findings)``."""
        more = f"{self.dropped} more dropped" if self.dropped is not None else "more not read (at least one)"
        return f"rule {self.rule} on {self.trace}: {self.kept} findings kept, {more} (--max-findings)"

    def to_json(self) -> dict[str, Any]:
        """The ``capped[]`` entry."""
        return {"rule": self.rule, "trace": self.trace, "kept": self.kept, "dropped": self.dropped}


@dataclass
class TraceInfo:
    """What a trace is (``traces[]`` of the JSON): its file, who wrote it, its GPUs and capture, what it holds,
    the windows the rules judged and the step budget.

    ``gpus``, ``capture``, ``tables``, ``window`` and ``budget`` are the JSON objects themselves
    (see the schema); ``budget_reason`` says why there is no budget.
    """

    path: str
    nsys_version: str | None
    export_schema_version: str | None
    gpus: list[dict[str, Any]]
    capture: dict[str, Any]
    tables: dict[str, int]
    #: For exports without export metadata (before nsys 2022.1): the versions the table shapes suggest.
    nsys_version_inferred: str | None = None
    window: dict[str, Any] = field(default_factory=dict)
    budget: dict[str, Any] | None = None
    budget_reason: str | None = None
    #: What the loader had to drop or patch, one line each.
    damage: list[str] = field(default_factory=list)
    #: ``--baseline``: the baseline file and how many findings it suppressed.
    baseline: dict[str, Any] | None = None
    #: Why the trace is a debug build, when the debug-build error fired: every number describes the debug build.
    debug_build: str | None = None
    #: Whether the trace can be trusted (``nsys_rules.model.validity``): verdict, reasons, checks (since 1.5).
    validity: dict[str, Any] | None = None

    def to_json(self) -> dict[str, Any]:
        """The ``traces[]`` entry."""
        out: dict[str, Any] = {"path": self.path, "nsys_version": self.nsys_version,
                               "export_schema_version": self.export_schema_version}
        raw = path_bytes(self.path)
        if raw is not None:
            out["path_bytes"] = raw  # the path is not UTF-8: its text shows each odd byte as \xHH
        if self.nsys_version_inferred:
            out["nsys_version_inferred"] = self.nsys_version_inferred
        out.update({"gpus": self.gpus, "capture": self.capture, "tables": self.tables, "window": self.window,
                    "budget": self.budget})
        if self.budget is None:
            out["budget_reason"] = self.budget_reason
        if self.damage:
            out["damage"] = self.damage
        if self.baseline is not None:
            out["baseline"] = self.baseline
        if self.debug_build is not None:
            out["debug_build"] = self.debug_build
        if self.validity is not None:
            out["validity"] = self.validity
        return out
