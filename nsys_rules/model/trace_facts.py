"""The model facts a rule reads about its trace, as properties and methods of its context.

A rule sees the trace read-only (:class:`~.trace_view.TraceView`, ``ctx.trace``); what is built
from it (the framework, the GPU operations, kernel symbols, the Python stacks, the command that
captures the program again, the kernels after a load, ...) it asks its context for, as it asks
for ``ctx.steps`` and ``ctx.budget``. Each is built once per trace (``Trace.memo``, through the model
function behind it) and shared by every rule, in whichever thread asks first.
:class:`nsys_rules.rule.RuleContext` inherits these; the engine gives it the trace.
"""

from __future__ import annotations

from functools import cached_property
from typing import Any, Iterable

import numpy as np
import pandas as pd

from nsys_rules.model import (activity, commands, gpu_metrics, host_evidence, launches, python_sites, regime_causes, windows,
                              workload)
from nsys_rules.model.budget import Budget
from nsys_rules.model.framework import Framework, framework as framework_of
from nsys_rules.model.trace import Trace


class TraceFacts:
    """Model facts of the context's trace (``_trace``); :meth:`measure_kernels` reads the context's ``budget``."""

    _trace: Trace
    budget: Budget | None

    @property
    def framework(self) -> Framework:
        """Which framework ran the program (PyTorch, JAX, vLLM, ..., or a CUDA program): advice names its knobs."""
        return framework_of(self._trace)

    @property
    def gpu_ops(self) -> activity.GpuOps:
        """The whole capture's GPU operations (kernels, copies, memsets, graph replays) as one read-only table."""
        return activity.gpu_ops(self._trace)

    @property
    def kernel_symbols(self) -> np.ndarray:
        """One code per distinct (name, grid, block) of each row of :attr:`gpu_ops` (-1 for other kinds)."""
        return activity.kernel_symbols(self._trace)

    @property
    def python_stacks(self) -> python_sites.PythonStacks:
        """The trace's Python stacks (empty, with the reason and the fix, when it holds none)."""
        return python_sites.python_stacks(self._trace)

    @property
    def steady_window(self) -> windows.Window:
        """The trace's steady-state window with the default step options (whatever window this rule judges)."""
        return windows.steady_state_window(self._trace)

    @cached_property
    def looks_like_training(self) -> bool:
        """Whether any kernel is a backward pass or an optimizer update."""
        return workload.looks_like_training(self._trace)

    @cached_property
    def debug_build(self) -> commands.CommandEvidence | None:
        """What marks the recorded program as a debug build; None for a release run or no recorded command."""
        return commands.debug_build(self._trace)

    @cached_property
    def program_command(self) -> str:
        """The recorded program and arguments (the release build's for a debug build); empty when unrecorded."""
        return commands.program_command(self._trace)

    def recapture_command(self, flags: str = "--cuda-graph-trace=node", command: str | None = None) -> str:
        """The ``nsys profile`` command that captures the program again with ``flags`` (``command``: another
        form of the program)."""
        return commands.recapture_command(self._trace, flags, command)

    def host_sites(self, intervals: Any, tid: int | Iterable[int] | None = None, top: int = 5, by: str = "line",
                   innermost: bool = False) -> list[python_sites.PythonSite]:
        """:func:`~nsys_rules.model.python_sites.host_sites`: the Python sites sampled inside ``intervals``."""
        return python_sites.host_sites(self._trace, intervals, tid, top, by, innermost)

    def call_site(self, api_rows: pd.DataFrame, top: int = 5, by: str = "line") -> list[python_sites.PythonSite]:
        """:func:`~nsys_rules.model.python_sites.call_site`: the Python sites that made the given CUDA calls."""
        return python_sites.call_site(self._trace, api_rows, top, by)

    def kernels_after(self, times: np.ndarray, limit: int = 5) -> list[str]:
        """:func:`~nsys_rules.model.regime_causes.kernels_after`: the kernels launched right after ``times``."""
        return regime_causes.kernels_after(self._trace, times, limit)

    def step_facts(self, host: np.ndarray, pid: int | None) -> regime_causes.StepFacts:
        """:func:`~nsys_rules.model.regime_causes.step_facts` of the steps ``host`` of process ``pid``."""
        return regime_causes.step_facts(self._trace, self.gpu_ops, host, pid)

    @property
    def native_samples(self) -> bool:
        """Whether the capture sampled native call stacks (``--sample=process-tree``: a SAMPLING_CALLCHAINS table)."""
        return "SAMPLING_CALLCHAINS" in self._trace.export.table_names

    def block_evidence(self, blocks: tuple[np.ndarray, np.ndarray], pid: int | None,
                       device: int | None) -> host_evidence.BlockEvidence:
        """:func:`~nsys_rules.model.host_evidence.block_evidence`: what the host threads did during ``blocks``."""
        return host_evidence.block_evidence(self._trace, blocks, pid, device)

    def readback_waits(self, lo: int, hi: int, known: int = 0) -> pd.DataFrame:
        """:func:`~nsys_rules.model.host_evidence.readback_waits`: host waits on readbacks that no CUDA sync shows."""
        return host_evidence.readback_waits(self._trace, lo, hi, known)

    def launch_times(self, gpu: pd.DataFrame) -> np.ndarray:
        """For each row of a GPU frame, the start of the API call that launched it (its own start without one)."""
        return launches.launch_times(self._trace, gpu)

    def launching_rows(self, pid: np.ndarray, corr: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Rows of ``trace.frame("api")`` that launched GPU rows of these (pid, correlationId), and where one did."""
        return launches.launching_rows(self._trace, pid, corr)

    def measure_kernels(self, names: Iterable[str], label: str = "kernels") -> gpu_metrics.PartActivity | None:
        """:func:`~nsys_rules.model.gpu_metrics.measure_kernels` over the context's budget: the GPU metrics while
        the kernels called ``names`` run; None without measured metrics."""
        return gpu_metrics.measure_kernels(self._trace, self.budget, names, label)
