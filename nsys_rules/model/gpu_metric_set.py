"""Which GPU metrics a trace samples, and reading their samples: the names resolved by kind, the frequency.

A capture with ``nsys profile --gpu-metrics-devices=all`` samples the GPU's counters (10 kHz by
default): DRAM read and write bandwidth, SMs active, SM issue, tensor pipes active, PCIe traffic,
each as a percent of its peak. This module resolves the metric names (:data:`KINDS`) and reads
only the metrics and the time range asked for (:mod:`nsys_rules.loaders.gpu_metrics`, priced by
the trace's memory guard first). :mod:`.gpu_metrics` measures the step budget's parts with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Iterable

import numpy as np

from nsys_rules.loaders import gpu_metrics as store
from nsys_rules.model.trace import Trace


@dataclass(frozen=True)
class MetricKind:
    """A metric this module reads: its key, how people read it, and the pattern of nsys's names for it."""

    key: str
    label: str
    pattern: str


#: The metrics read, by what their names start with (nsys names them alike on every GPU that has them;
#: only ``[Throughput %]`` ones: percents of the unit's peak).
KINDS: tuple[MetricKind, ...] = (
    MetricKind("dram_read", "DRAM read", r"dram read bandwidth"),
    MetricKind("dram_write", "DRAM write", r"dram write bandwidth"),
    MetricKind("sm_active", "SMs active", r"sms? active"),
    MetricKind("sm_issue", "SM issue", r"sm issue"),
    MetricKind("tensor_active", "tensor active", r"tensor active"),
    MetricKind("pcie_rx", "PCIe RX", r"pcie rx"),
    MetricKind("pcie_tx", "PCIe TX", r"pcie tx"),
    MetricKind("gr_active", "GR active", r"gr active"),
)
KIND_LABELS = {k.key: k.label for k in KINDS}
_PERCENT = "[throughput %]"

#: Samples read beyond the steady steps on each side, in sample periods: the period that holds the
#: first step's start begins before it.
MARGIN_PERIODS = 4



@dataclass(frozen=True)
class MetricSet:
    """What the trace samples: the metrics by GPU (the index in ``typeId``) and kind, and the frequency."""

    names: tuple[store.MetricName, ...]
    frequency_hz: int | None
    by_gpu: dict[int, dict[str, store.MetricName]] = field(default_factory=dict)

    @property
    def gpus(self) -> tuple[int, ...]:
        """The GPUs that were sampled."""
        return tuple(sorted(self.by_gpu))

    def for_device(self, device: int | None, one_gpu: bool = False) -> tuple[int, dict[str, store.MetricName]] | None:
        """The sampled metrics of the GPU the kernels call ``device``; on a host of one GPU (``one_gpu``) its only
        sampled GPU whatever its index (nsys numbers the GPUs it samples its own way)."""
        if device is not None and int(device) in self.by_gpu:
            return int(device), self.by_gpu[int(device)]
        if one_gpu and len(self.by_gpu) == 1:
            gpu = next(iter(self.by_gpu))
            return gpu, self.by_gpu[gpu]
        return None


def kind_of(name: str) -> str | None:
    """The :data:`KINDS` key of an nsys metric name; None for one this module does not read."""
    low = name.strip().lower()
    if _PERCENT not in low:
        return None
    for kind in KINDS:
        if re.match(kind.pattern, low):
            return kind.key
    return None


def metric_set(trace: Trace) -> MetricSet | None:
    """The trace's GPU metrics (cached per trace); None when it holds none."""
    return trace.memo(("gpu_metric_set.metric_set",), lambda: _metric_set(trace))


def _metric_set(trace: Trace) -> MetricSet | None:
    """:func:`metric_set`, read."""
    names = store.catalog(trace.export) if store.available(trace.export) else ()
    found: MetricSet | None = None
    if names:
        by_gpu: dict[int, dict[str, store.MetricName]] = {}
        for name in names:
            kind = kind_of(name.name)
            if kind is not None:
                by_gpu.setdefault(name.gpu, {}).setdefault(kind, name)
        frequency = _int(trace.capture.options.get(store.FREQUENCY_OPTION))
        found = MetricSet(names, frequency if frequency and frequency > 0 else None, by_gpu)
    return found


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip()) if value is not None else None
    except ValueError:
        return None


def read_kinds(trace: Trace, metrics: dict[str, store.MetricName], kinds: Iterable[str], lo: int | None,
               hi: int | None) -> dict[str, store.Samples]:
    """The samples of ``kinds`` in [lo, hi], admitted by the trace's memory guard first (:class:`InputError` when
    they do not fit, ``NotImplementedError`` for an export format without them)."""
    wanted = {k: metrics[k] for k in kinds if k in metrics}
    if not wanted:
        return {}
    if trace.meter is not None:
        rows, nbytes = _range_cost(trace, len(wanted), lo, hi)
        trace.meter.admit_bytes(f"the GPU metrics ({len(wanted)} metrics, {rows:,} samples)", nbytes)
    read = store.read_samples(trace.export, [m.key for m in wanted.values()], lo, hi)
    return {k: read.get(m.key, store.Samples(np.empty(0, np.int64), np.empty(0, np.int64))) for k, m in wanted.items()}


def _range_cost(trace: Trace, wanted: int, lo: int | None, hi: int | None) -> tuple[int, int]:
    """Samples and peak bytes a read of ``wanted`` metrics over [lo, hi] takes: the whole table's share of them,
    cut to the range's share of the sampled time when the frequency is known."""
    found = metric_set(trace)
    if lo is None or hi is None or found is None or not found.frequency_hz:
        return store.read_cost(trace.export, wanted)  # the whole table's share (counts its rows: 0.2 s for 9M)
    # The wanted metrics of each sampled GPU, at the recorded frequency, over the range: a read never takes more.
    per_metric = int((hi - lo) / 1e9 * found.frequency_hz) + 2 * MARGIN_PERIODS + 2
    ranged = per_metric * wanted * max(1, len(found.by_gpu))
    return ranged, ranged * store.READ_BYTES_PER_ROW

