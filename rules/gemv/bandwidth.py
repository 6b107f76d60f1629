"""Bandwidth of matrix-vector kernels (GEMVs): the bytes a decode step reads over the time it takes.

At batch 1 each decode step multiplies one activation vector by every weight matrix, so each
weight byte crosses the memory bus once per step and the GEMV time per step is the weight bytes
over the bandwidth reached. The bytes come from an option, a Hugging Face ``config.json``, or
the host-to-device model load captured before the steady state; the peak from the export's
``TARGET_INFO_GPU``. Shared by gemv-dominance and debug-build; no judgement here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterable

import numpy as np
import pandas as pd

from nsys_rules.api import plain_number
from nsys_rules.api import parse_size, read_small_text, RuleContext, UsageError
from nsys_rules.api.analysis import (category_classes, category_codes, CLASSES, classify, duration_sum, point_in,
                                     rows_with_codes)

HTOD = 1  # CUPTI copyKind of a host-to-device memcpy


def weight_bytes_value(value: object) -> int:
    """Bytes from a number or a size string (``14e9``, ``7G``: K/M/G/T are powers of 1024); 0 = unknown."""
    if value is None or value == "":
        return 0
    if isinstance(value, bool):
        raise ValueError(f"weight_bytes must be a number of bytes, not {value!r}")
    if isinstance(value, (int, float)):
        if value < 0:
            raise ValueError(f"weight_bytes must be >= 0, not {value!r}")
        return int(value)
    text = str(value).strip()
    try:
        return int(float(text))
    except ValueError:
        try:
            return parse_size(text)
        except UsageError as exc:
            raise ValueError(str(exc)) from None


_DTYPE_BYTES = {"float32": 4, "float": 4, "float16": 2, "half": 2, "bfloat16": 2, "float8_e4m3fn": 1, "int8": 1}


def weights_read_per_step(config: dict[str, Any], dtype_bytes: float = 0.0) -> tuple[int, str]:
    """Bytes of weights a batch-1 decode step reads, from a Hugging Face ``config.json`` dict, and how.

    Every linear layer is read once per token: attention q/k/v/o (grouped-query heads counted
    by ``num_key_value_heads``), the MLP (gate, up, down for gated activations such as SiLU;
    up and down otherwise), only the ``num_experts_per_tok`` active experts of an MoE layer
    (plus shared experts), and the lm_head. The embedding table is not: a step reads one row.
    """
    nested = config.get("text_config")
    text: dict[str, Any] = nested if isinstance(nested, dict) else config
    try:
        hidden = int(text["hidden_size"])
        layers = int(text["num_hidden_layers"])
        vocab = int(text["vocab_size"])
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"model config lacks {exc}: need hidden_size, num_hidden_layers and vocab_size") from None
    heads = int(text.get("num_attention_heads") or 1)
    kv_heads = int(text.get("num_key_value_heads") or heads)
    head_dim = int(text.get("head_dim") or hidden // heads)
    attention = hidden * heads * head_dim * 2 + hidden * kv_heads * head_dim * 2  # q, o + k, v
    act = str(text.get("hidden_act") or text.get("hidden_activation") or "silu").lower()
    matrices = 3 if ("silu" in act or "swish" in act or "glu" in act or "gelu_pytorch_tanh" in act) else 2
    experts = int(text.get("num_experts_per_tok") or 0)
    if experts and (text.get("num_local_experts") or text.get("num_experts") or text.get("n_routed_experts")):
        moe_size = text.get("moe_intermediate_size") or text.get("intermediate_size")
        if moe_size is None:
            raise ValueError("model config lacks moe_intermediate_size and intermediate_size: need its experts' size")
        moe_inter = int(moe_size)
        shared = int(text.get("n_shared_experts") or 0)
        shared_inter = int(text.get("shared_expert_intermediate_size") or shared * moe_inter)
        mlp = matrices * hidden * (experts * moe_inter + shared_inter)
        how = f"{experts} active experts of {moe_inter}"
    else:
        mlp = matrices * hidden * int(text.get("intermediate_size") or 4 * hidden)
        how = "dense MLP"
    params = layers * (attention + mlp) + vocab * hidden  # lm_head: read every step, tied or not
    size = dtype_bytes or _DTYPE_BYTES.get(str(config.get("torch_dtype") or text.get("torch_dtype") or "bfloat16"), 2)
    return int(params * size), (f"{params / 1e9:.2f} B weights read per step ({layers} layers, {how}, lm_head) x "
                                 f"{plain_number(size, 6)} B")


def config_weight_bytes(path: str, dtype_bytes: float = 0.0) -> tuple[int, str]:
    """:func:`weights_read_per_step` of the config.json at ``path``; ``ValueError`` with the reason otherwise."""
    import json

    try:
        config = json.loads(read_small_text(path))  # refuses a FIFO or /dev/zero before reading
    except (OSError, ValueError) as exc:
        raise ValueError(f"model_config {path!r} is not a readable JSON file: {exc}") from None
    except RecursionError:  # json recurses per level of nesting
        raise ValueError(f"model_config {path!r} is not a readable JSON file: nested too deeply") from None
    if not isinstance(config, dict):
        raise ValueError(f"model_config {path!r} is not a JSON object")
    return weights_read_per_step(config, dtype_bytes)


@dataclass(frozen=True)
class Bandwidth:
    """Achieved GEMV bandwidth on one device, and where the bytes came from."""

    weight_bytes: int
    source: str  # "option", "model config" or "model load"
    gemv_ns_per_step: float
    steps: int
    achieved: float  # B/s
    peak: float | None  # B/s, None when unknown
    steps_source: str = ""  # where the step count came from, for the message

    @property
    def fraction(self) -> float | None:
        """Achieved over peak, None without a peak."""
        return self.achieved / self.peak if self.peak else None


def gemv_mask(names: pd.Series, extra_patterns: Iterable[str] = ()) -> np.ndarray:
    """True for kernels of the GEMV class."""
    extra = {"gemv": list(extra_patterns)} if extra_patterns else None
    if isinstance(names.dtype, pd.CategoricalDtype):
        # Classes judged per category, rows compared on the narrow codes: no label per row.
        flags = category_classes(names.cat.categories, extra) == CLASSES.index("gemv")
        return rows_with_codes(category_codes(names), np.flatnonzero(flags[:-1]), flags)
    return (classify(names, extra) == "gemv").to_numpy()


def device_shares(kernels: pd.DataFrame, is_gemv: np.ndarray) -> pd.DataFrame:
    """Per device: total kernel time, GEMV time (ns) and GEMV share, busiest device first."""
    device = kernels["device_id"].to_numpy()
    start, end = kernels["start"].to_numpy(), kernels["end"].to_numpy()
    if len(device) and device.dtype.kind in "iu" and device.min() == device.max():
        # One device (the usual trace): three sums, not a frame of every kernel and a group-by; whole
        # ns summed in chunks (no row-length durations).
        whole = start.dtype.kind in "iu" and end.dtype.kind in "iu"
        dur = None if whole else np.subtract(end, start)
        total = duration_sum(start, end) if dur is None else int(dur.sum())
        gemv = duration_sum(start, end, is_gemv) if dur is None else int(np.sum(dur, where=is_gemv))
        out = pd.DataFrame({"total": [total], "gemv": [gemv], "gemv_count": [int(np.count_nonzero(is_gemv))]},
                           index=pd.Index(device[:1], name="device"))
    else:
        dur = np.subtract(end, start)
        frame = pd.DataFrame({"device": device, "total": dur, "gemv": np.where(is_gemv, dur, 0),
                              "gemv_count": is_gemv.astype(np.int64)})
        out = frame.groupby("device").sum()
        del frame
    del dur
    out["share"] = out["gemv"] / out["total"].where(out["total"] > 0)
    return out.sort_values("total", ascending=False, kind="stable")


def per_step_time(launch: np.ndarray, durations: np.ndarray, steps: tuple[tuple[int, int], ...]) -> tuple[float, int]:
    """Mean GPU time per step of the rows launched inside a step, and how many steps launched any."""
    if not steps or not len(launch):
        return 0.0, 0
    starts = np.array([a for a, _ in steps], np.int64)
    ends = np.array([b for _, b in steps], np.int64)
    pos = point_in(launch, starts, ends)
    inside = pos >= 0
    if not inside.any():
        return 0.0, 0
    per_step = np.bincount(pos[inside], weights=durations[inside], minlength=len(steps))
    used = int((per_step > 0).sum())
    if not used:  # zero-length kernels (damaged or synthetic exports): nothing to average
        return 0.0, 0
    return float(per_step.sum() / used), used


def model_load_bytes(memcpy: pd.DataFrame, launch: np.ndarray, before: int, device: int) -> int:
    """Host-to-device bytes to ``device`` launched before ``before`` (the model load, when the trace holds it).

    Frameworks load weights as many host-to-device copies (PyTorch's ``model.to("cuda")``: one
    ``cudaMemcpyAsync`` per tensor, from pageable or pinned memory). The copy's own device is where
    it ran; ``dst_device_id`` is the target when the export has it and it is set.
    """
    if memcpy.empty:
        return 0
    own = memcpy["device_id"].to_numpy(dtype=np.float64, na_value=-1)
    target = memcpy["dst_device_id"].to_numpy(dtype=np.float64, na_value=-1) if "dst_device_id" in memcpy else own
    target = np.where(target < 0, own, target)  # unrecorded (NULL, read as -1): the copy's own device
    mask = (memcpy["copy_kind"].to_numpy() == HTOD) & (launch < before) & (target == device)
    return int(memcpy["bytes"].to_numpy()[mask].sum())


def achieved_bandwidth(weight_bytes: int, gemv_ns_per_step: float) -> float:
    """Bytes per second when every weight byte is read once per step.

    At batch 1 each decode step multiplies one activation vector by every weight matrix, so
    each weight byte crosses the memory bus once per step (the activations are a rounding
    error): bandwidth = weight bytes / GEMV time per step = weight bytes x steps / GEMV time.
    """
    return weight_bytes / (gemv_ns_per_step / 1e9) if gemv_ns_per_step > 0 else 0.0


def peak_bandwidth(ctx: RuleContext, device: int, override: float) -> tuple[float | None, str]:
    """Peak memory bandwidth (B/s) of ``device`` and, when unknown, why."""
    if override > 0:
        return float(override), ""
    gpu = ctx.trace.gpu(device)
    if gpu is None:
        return None, f"the export lists no GPU with id {device} in TARGET_INFO_GPU"
    if not gpu.memory_bandwidth:
        return None, f"TARGET_INFO_GPU has no memoryBandwidth for {gpu.name} (id {device}; older export)"
    return float(gpu.memory_bandwidth), ""


def measure_bandwidth(ctx: RuleContext, kernels: pd.DataFrame, is_gemv: np.ndarray, device: int, *, weight_bytes: int,
                      steps_option: int, peak_option: float, min_load_bytes: int,
                      rule: str = "gemv-dominance") -> tuple[Bandwidth | None, str]:
    """Achieved GEMV bandwidth on ``device``, or None and the reason it cannot be computed.

    A result above the peak is refused: the bytes or the step count must be wrong (a model
    load that also copied other data; steps inferred from a kernel that runs once per layer).
    """
    on_device = (kernels["device_id"].to_numpy() == device) & is_gemv
    launch = kernels["launch_start"].to_numpy()[on_device]
    dur = kernels["end"].to_numpy()[on_device]
    dur -= kernels["start"].to_numpy()[on_device]
    steps = ctx.window.steps
    if steps_option > 0:
        per_step, used = float(dur.sum()) / steps_option, steps_option
        steps_from = f"{steps_option} steps given"
    else:
        per_step, used = per_step_time(launch, dur, steps)
        steps_from = f"{used} steps of {_step_source(ctx)}"
    source = "option"
    model_config = getattr(ctx.options, "model_config", "")
    if weight_bytes <= 0 and model_config:
        weight_bytes, _ = config_weight_bytes(model_config, getattr(ctx.options, "weight_dtype_bytes", 0.0))
        source = "model config"
    if weight_bytes <= 0:
        weight_bytes, source = _load_bytes(ctx, device, min_load_bytes), "model load"
    if weight_bytes <= 0:
        return None, ("weight bytes are unknown: the trace holds no host-to-device model load before the steady "
                      f"state (weights created on the GPU, or loading not captured); give `--set {rule}.weight_bytes=...`")
    if used <= 0:
        why = ctx.window.model.reason if ctx.window.model is not None and ctx.window.model.reason else \
            "the window has no steps"
        return None, (f"steps are unknown ({why}); give the number of steps with `--set {rule}.steps=N`")
    peak, why = peak_bandwidth(ctx, device, peak_option)
    bw = Bandwidth(weight_bytes, source, per_step, used, achieved_bandwidth(weight_bytes, per_step), peak, steps_from)
    if peak is None:
        return bw, why
    if bw.achieved > 1.05 * peak:
        what = ("copied host-to-device before the steady state" if source == "model load" else "given")
        return None, (f"{weight_bytes / 1e9:.2f} GB per step ({what}) over {per_step / 1e3:.0f} us of GEMV per step "
                      f"({steps_from}) would mean {bw.achieved / 1e12:.2f} TB/s, above the {peak / 1e12:.2f} TB/s "
                      f"peak: the bytes are not the per-step weight read or the step count is wrong (check "
                      f"`--set {rule}.weight_bytes=...` and `--set {rule}.steps=N`)")
    return bw, ""


def _step_source(ctx: RuleContext) -> str:
    model = ctx.window.model
    if model is not None and model.count:
        return {"nvtx": f"NVTX range '{model.name}'", "graph": "graph replays", "marker": f"the per-step {model.name}",
                "call": f"the per-step {model.name} call",
                "kernels": f"the kernel sequence repeating {model.name}"}.get(model.source, model.source)
    return "the window"


def _load_bytes(ctx: RuleContext, device: int, min_load_bytes: int) -> int:
    start = ctx.window.start
    if start is None or not ctx.trace.has("memcpy"):
        return 0
    cols = ["start", "bytes", "copy_kind", "device_id", "dst_device_id", "correlation_id", "pid"]
    memcpy = ctx.trace.frame("memcpy", cols)
    total = model_load_bytes(memcpy, ctx.launch_times(memcpy), start, device)
    return total if total >= min_load_bytes else 0
