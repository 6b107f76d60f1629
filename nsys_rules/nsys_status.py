"""``nsys status -e`` read line by line, each failed check explained with its fix.

Two layouts exist. Up to about 2022 nsys printed ``Sampling Environment Check`` with a verdict
on most lines (``Linux Kernel Paranoid Level = 1: OK``); later versions print ``CPU Profiling
Environment Check`` with the paranoid level as a bare number and separate process-tree and
system-wide verdicts. Every one of these checks concerns CPU sampling and context-switch
tracing: CUDA and NVTX tracing (what ``nsys-rules profile`` captures by default) work without
them, so a failure here is a warning, not a reason to give up.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

#: The highest perf_event_paranoid at which nsys can still sample the processes it launches.
MAX_PARANOID = 2

_PARANOID_FIX = (f"sudo sysctl -w kernel.perf_event_paranoid={MAX_PARANOID} (to keep it: echo "
                 f"kernel.perf_event_paranoid={MAX_PARANOID} | sudo tee /etc/sysctl.d/99-nsys.conf; "
                 "in a container, on the host)")
_SILENCE = "or add --nsys-arg=--sample=none --nsys-arg=--cpuctxsw=none to capture without CPU sampling"


@dataclass(frozen=True)
class StatusLine:
    """One ``key = value: verdict`` or ``key: verdict`` line of ``nsys status -e``."""

    key: str
    value: str
    verdict: str  # "OK", "Fail", "Available", "Not Available", "Yes", "No" or "" (none printed)


@dataclass(frozen=True)
class Item:
    """One line of ``nsys-rules doctor``'s diagnosis: ``level`` ok, info, warn or FAIL (FAIL: profiling cannot work)."""

    level: str
    topic: str
    text: str
    fix: str = ""


#: The topic of the lines :func:`explain_status` writes.
TOPIC = "status -e"


_VERDICTS = ("Not Available", "Available", "OK", "Fail", "Yes", "No", "enabled", "disabled")
_WITH_VALUE = re.compile(r"(?P<key>[^=:]+?)\s*=\s*(?P<value>.*?)(?::\s*(?P<verdict>" + "|".join(_VERDICTS) + r"))?")
_WITH_VERDICT = re.compile(r"(?P<key>[^=]+?):\s*(?P<verdict>.+)")


def parse_status(text: str) -> list[StatusLine]:
    """The check lines of ``nsys status -e`` output (headers and prose are left out)."""
    lines = []
    for raw in text.splitlines():
        line = raw.strip()
        match = _WITH_VALUE.fullmatch(line)
        if match:
            lines.append(StatusLine(match["key"], match["value"], match["verdict"] or ""))
            continue
        match = _WITH_VERDICT.fullmatch(line)
        if match and not line.startswith(("See ", "http")) and len(match["verdict"].split()) <= 3:
            lines.append(StatusLine(match["key"], "", match["verdict"].strip()))
    return lines


def explain_status(output: str, returncode: int) -> list[Item]:
    """The diagnosis from the output of ``nsys status -e``: the failed checks explained, the passed ones counted."""
    lines = parse_status(output)
    if not lines:
        last = output.strip().splitlines()[-1:] or ["no output"]
        return [Item("warn", TOPIC, f"printed no checks (exit code {returncode}): {last[0]}")]
    explained = [e for e in (explain(line) for line in lines) if e is not None]
    problems = sum(1 for e in explained if e.level == "warn")
    summary = "CPU sampling works" if not problems else "CPU sampling is limited; CUDA and NVTX tracing work"
    return explained + [Item("ok" if not problems else "info", TOPIC, f"{len(lines)} checks read: {summary}")]


def explain(line: StatusLine) -> Item | None:
    """What a failed or notable check means for profiling, and how to fix it; None when it is fine."""
    shown = f"{line.key} = {line.value}" if line.value else f"{line.key}: {line.verdict}"

    def item(level: str, meaning: str, fix: str = "") -> Item:
        return Item(level, TOPIC, f"{shown}: {meaning}", fix)

    key = line.key.lower()
    failed = line.verdict in ("Fail", "No")
    if key.startswith("linux kernel paranoid level"):
        level = _int(line.value)
        if line.verdict == "Fail" or (level is not None and level > MAX_PARANOID):
            return item("warn", f"perf_event_paranoid is {line.value}: nsys cannot sample CPU call stacks "
                        f"or trace context switches (it needs {MAX_PARANOID} or less); CUDA and NVTX tracing "
                        "still work", f"{_PARANOID_FIX}; {_SILENCE}")
        return None
    if key.startswith("linux perf_event_open") and failed:
        return item("warn", "the kernel refuses perf_event_open (the paranoid level, a container's seccomp "
                    "profile, or a sandbox such as gVisor): no CPU sampling", "lower perf_event_paranoid "
                    f"({_PARANOID_FIX}); in Docker add --cap-add=SYS_ADMIN; {_SILENCE}")
    if key.startswith("sampling trigger event") and failed:
        return item("warn", "no perf event can trigger CPU samples (common in virtual machines without "
                    "a virtual PMU)", f"profile on bare metal or a VM that exposes the PMU; {_SILENCE}")
    if "last branch record" in key and line.verdict == "Not Available":
        return item("info", "no Intel LBR: nsys takes CPU call stacks from frame pointers or DWARF "
                    "instead (--backtrace=fp or dwarf); nothing to fix")
    if key.startswith("cpu profiling environment (system-wide)") and failed:
        return item("info", "system-wide CPU sampling needs root; only --sample=system-wide uses it")
    if (key.startswith("cpu profiling environment") or key.startswith("sampling environment")) and failed:
        return item("warn", "CPU sampling of the profiled program is unavailable (see the checks above); "
                    "CUDA and NVTX tracing still work", f"fix the checks above, {_SILENCE}")
    if key.startswith("linux kernel version") and failed:
        return item("warn", f"kernel {line.value} is too old for nsys's CPU sampling",
                    f"a newer kernel (4.3 or later); {_SILENCE}")
    if key.startswith("timestamp counter") and failed:
        return item("info", "no usable CPU timestamp counter: nsys falls back to a slower clock source")
    if key.startswith("root privilege"):
        return None
    if failed:
        return item("warn", "nsys reports this check failed", "see the System Requirements of the "
                    "Nsight Systems Installation Guide (https://docs.nvidia.com/nsight-systems/)")
    return None


def _int(text: str) -> int | None:
    try:
        return int(text.strip())
    except ValueError:
        return None


# -- GPU metrics (nsys profile --gpu-metrics-devices) ----------------------------------------------
#: The NVIDIA driver's parameters on Linux: ``RmProfilingAdminOnly: 1`` keeps the GPU's performance
#: counters, which GPU metrics sampling reads, for admin users (root).
NVIDIA_PARAMS = Path("/proc/driver/nvidia/params")
COUNTERS_DOC = "https://developer.nvidia.com/ERR_NVGPUCTRPERM"
COUNTERS_FIX = ("run the capture as root (sudo), or open the counters to every user: echo 'options nvidia "
                "NVreg_RestrictProfilingToAdminUsers=0' | sudo tee /etc/modprobe.d/nvidia-profiling.conf, then reload "
                "the driver (reboot); in a container the host's driver decides (" + COUNTERS_DOC + ")")
METRICS_HELP = ("profile", "--gpu-metrics-devices=help")


@dataclass(frozen=True)
class GpuMetricsDevices:
    """What ``nsys profile --gpu-metrics-devices=help`` lists: the GPUs it can sample and those it cannot."""

    supported: tuple[str, ...]  # "0: Hopper GH100 | NVIDIA H200 PCI[0000:00:06.0]"
    unsupported: tuple[str, ...]
    privilege: bool  # nsys said the counters need more privilege


@dataclass(frozen=True)
class GpuMetricsVerdict:
    """Whether GPU metrics can be sampled here: ``level`` ok, warn or info; ``blocked`` when a capture asking for them
    would fail (no access to the counters)."""

    level: str
    message: str
    fix: str = ""
    blocked: bool = False


_PRIVILEGE = ("insufficient privilege", "err_nvgpuctrperm", "permission")
_NONE_SUPPORTED = "none of the installed gpus"


def parse_gpu_metrics_devices(text: str) -> GpuMetricsDevices | None:
    """The device lists of ``nsys profile --gpu-metrics-devices=help``; None when the output lists none (an nsys
    without GPU metrics, or an error)."""
    low = text.lower()
    privilege = any(p in low for p in _PRIVILEGE)
    supported: list[str] = []
    unsupported: list[str] = []
    section = None
    for raw in text.splitlines():
        line = raw.strip()
        lower = line.lower()
        if "--gpu-metrics-devices values are" in lower:
            section = supported
            continue
        if lower.startswith("some gpus are not supported"):
            section = unsupported
            continue
        if not line or lower.startswith("see ") or section is None:
            continue
        key = line.split(":", 1)[0].strip()
        if section is supported and not key.isdigit():
            continue  # all, cuda-visible, none
        section.append(line)
    if section is None and not privilege and _NONE_SUPPORTED not in low:
        return None
    return GpuMetricsDevices(tuple(supported), tuple(unsupported), privilege)


def admin_only_counters(params_text: str | None) -> bool | None:
    """``RmProfilingAdminOnly`` of the driver's parameters: True when the counters are for admins; None if unknown."""
    if not params_text:
        return None
    for line in params_text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "RmProfilingAdminOnly":
            return value.strip() == "1"
    return None


def gpu_metrics_verdict(devices: GpuMetricsDevices | None, admin_only: bool | None, root: bool,
                        last_line: str = "") -> GpuMetricsVerdict:
    """Can ``nsys profile --gpu-metrics-devices=all`` sample here, and if not, what to do."""
    if (devices is not None and devices.privilege) or (admin_only and not root):
        why = ("nsys reports insufficient privilege" if devices is not None and devices.privilege else
               "the driver keeps them for admin users (RmProfilingAdminOnly: 1) and this is not root")
        return GpuMetricsVerdict("warn", f"GPU metrics cannot be sampled: no access to the GPU's performance counters "
                                 f"({why}); CUDA and NVTX tracing still work", COUNTERS_FIX, blocked=True)
    if devices is None:
        shown = f": {last_line}" if last_line else ""
        return GpuMetricsVerdict("warn", f"nsys lists no GPU metrics devices (`nsys profile --gpu-metrics-devices=help`"
                                 f"{shown})", "GPU metrics sampling needs nsys 2023.1 or newer: update Nsight Systems")
    if not devices.supported:
        listed = f" (unsupported: {'; '.join(devices.unsupported)})" if devices.unsupported else ""
        return GpuMetricsVerdict("info", f"no GPU here supports GPU metrics sampling{listed}",
                                 "GPU metrics need a Turing or newer GPU the driver exposes to profiling "
                                 "(not a vGPU without profiling enabled)")
    return GpuMetricsVerdict("ok", f"GPU metrics can be sampled on {'; '.join(devices.supported)}: capture with "
                             "`nsys-rules profile --metrics -- CMD` to measure DRAM, SM and tensor activity per part")
