"""``nsys-rules doctor``: can nsys profile here, and if not, what to do.

Where nsys is (and the PATH line when it is off PATH), its version, ``nsys status -e`` with each
failed check explained and its fix, whether nsys's importer can load its libraries (without it a
capture never becomes a report), the environment variables that spoil a capture, and the GPUs and
driver that ``nvidia-smi`` sees. Exit 0 when profiling can work, 3 when it cannot. Everything
fits one screen, also when nsys is missing.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import textwrap
from pathlib import Path

from nsys_rules.capture import environment_problems
from nsys_rules.errors import ExitCode
from nsys_rules.nsys_locate import (INSTALL_HINT, NsysLocation, ignored_note, importer_problem, locate_nsys, nsys_version,
                                    which_absolute)
from nsys_rules import nsys_status
from nsys_rules.nsys_status import (METRICS_HELP, TOPIC, GpuMetricsVerdict, Item, admin_only_counters, explain_status,
                                    gpu_metrics_verdict, parse_gpu_metrics_devices)
from nsys_rules.textsafe import output_safe
from nsys_rules.containment import report_stream

#: Where nvidia-smi lives when it is not on PATH (driver installs, container runtimes).
NVIDIA_SMI_PLACES = ("/usr/bin/nvidia-smi", "/usr/local/nvidia/bin/nvidia-smi")
_WIDTH = 100


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("doctor", help="can nsys profile here? where it is, its version, `nsys status -e` explained, "
                       "the GPU", description="Find nsys, run `nsys status -e` and explain each failed check with its "
                       "fix, check nsys's importer and the GPU. Exit 0 when profiling can work, 3 otherwise.")
    p.add_argument("--nsys", metavar="PATH", help="the nsys binary to check (default: $NSYS_RULES_NSYS, PATH, then "
                   "the standard install places)")
    p.add_argument("--trace", metavar="FILE", help="also check a capture made here: nsys's own diagnostics in it "
                   "and the trace checked against itself, each reason with its fix (exit 3 when untrustworthy)")
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    items = diagnose(locate_nsys(args.nsys))
    if getattr(args, "trace", None):
        items += capture_items(Path(args.trace))
    report_stream().write(output_safe(render(items), "table"))
    report_stream().flush()
    return int(ExitCode.BAD_INPUT if any(i.level == "FAIL" for i in items) else ExitCode.OK)


def diagnose(location: NsysLocation) -> list[Item]:
    """Every check, in the order shown."""
    items = nsys_items(location)
    note = ignored_note(location)
    if note:
        items.append(Item("warn", "PATH", note))
    items += [Item("warn", "environment", p.message, p.fix) for p in environment_problems(os.environ)]
    items += gpu_items()
    return items


def nsys_items(location: NsysLocation) -> list[Item]:
    """Where nsys is, its version, its importer and ``nsys status -e``."""
    if location.path is None:
        if location.searched and not location.searched[0].startswith("PATH"):
            return [Item("FAIL", "nsys", f"{location.searched[0]} is not an executable file",
                         "give the nsys binary, e.g. --nsys /opt/nvidia/nsight-systems/<version>/bin/nsys")]
        places = ", ".join(p.rsplit("/", 1)[0] for p in location.searched[1:])
        return [Item("FAIL", "nsys", f"not found on PATH nor in {places}", f"{INSTALL_HINT}:\n{location.path_fix()}")]
    nsys = location.path
    if location.on_path:
        items = [Item("ok", "nsys", f"{nsys} (on PATH)")]
    elif location.source == "standard place":
        items = [Item("warn", "nsys", f"{nsys} (not on PATH: a plain `nsys` will not run it)", location.path_fix())]
    else:
        items = [Item("ok", "nsys", f"{nsys} (from {location.source})")]
    try:
        items.append(Item("ok", "version", nsys_version(nsys)))
    except OSError as exc:
        return items + [Item("FAIL", "version", f"nsys does not run: {exc}",
                             "reinstall Nsight Systems, or pick another nsys with --nsys")]
    broken = importer_problem(nsys)
    if broken:
        items.append(Item("FAIL", "importer", broken[0], broken[1]))
    verdict = gpu_metrics_check(nsys)
    return items + status_items(nsys) + [Item(verdict.level, "GPU metrics", verdict.message, verdict.fix)]


def gpu_metrics_check(nsys: Path) -> GpuMetricsVerdict:
    """Whether this nsys can sample GPU metrics here: its ``--gpu-metrics-devices=help`` listing, the driver's
    ``RmProfilingAdminOnly`` and whether we are root (the counters' access)."""
    try:
        proc = subprocess.run([str(nsys), *METRICS_HELP], capture_output=True, text=True, errors="replace", timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return GpuMetricsVerdict("warn", f"could not run `nsys profile --gpu-metrics-devices=help`: {exc}")
    text = proc.stdout + "\n" + proc.stderr
    try:
        params: str | None = nsys_status.NVIDIA_PARAMS.read_text(errors="replace")
    except OSError:
        params = None
    root = hasattr(os, "geteuid") and os.geteuid() == 0
    last = (text.strip().splitlines() or [""])[-1][:200]
    return gpu_metrics_verdict(parse_gpu_metrics_devices(text), admin_only_counters(params), root, last)


def status_items(nsys: Path) -> list[Item]:
    """``nsys status -e``: the failed checks explained, the passed ones counted."""
    try:
        proc = subprocess.run([str(nsys), "status", "-e"], capture_output=True, text=True, errors="replace",
                              timeout=120)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Item("warn", TOPIC, f"could not run `nsys status -e`: {exc}")]
    return explain_status(proc.stdout + "\n" + proc.stderr, proc.returncode)


def gpu_items() -> list[Item]:
    """The GPUs and driver ``nvidia-smi`` reports."""
    smi = which_absolute("nvidia-smi") or next((p for p in NVIDIA_SMI_PLACES if os.access(p, os.X_OK)), None)
    if smi is None:
        return [Item("warn", "GPU", "nvidia-smi not found: cannot tell whether a GPU and its driver are visible here")]
    try:
        proc = subprocess.run([smi, "--query-gpu=index,name,driver_version,memory.total",
                               "--format=csv,noheader,nounits"], capture_output=True, text=True, errors="replace",
                              timeout=60)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return [Item("FAIL", "GPU", f"nvidia-smi did not answer: {exc}")]
    if proc.returncode != 0:
        last = (proc.stdout + proc.stderr).strip().splitlines()[-1:] or ["no output"]
        return [Item("FAIL", "GPU", f"nvidia-smi cannot reach the driver: {last[0]}",
                     "check that the NVIDIA driver is loaded and the GPU is passed to this container")]
    items = []
    for row in proc.stdout.strip().splitlines():
        fields = [f.strip() for f in row.split(",")]
        if len(fields) == 4:
            index, name, driver, memory = fields
            items.append(Item("ok", f"GPU {index}", f"{name}, driver {driver}, {memory} MiB"))
    return items or [Item("FAIL", "GPU", "nvidia-smi lists no GPU")]


def capture_items(path: Path) -> list[Item]:
    """A capture's validity (nsys_rules.model.validity) as doctor lines: the verdict, each reason with its fix
    (an untrustworthy one FAILs), the notes as info."""
    from nsys_rules.inputs import open_trace
    from nsys_rules.model.validity import judge
    from nsys_rules.model.windows import SteadyOptions, steady_state_window

    trace = open_trace(path)
    try:
        validity = judge(trace, steady_state_window(trace, SteadyOptions(())))
    finally:
        trace.close()
    level = {"trusted": "ok", "caveats": "warn", "untrustworthy": "FAIL"}[validity.verdict]
    items = [Item(level, "capture", f"{path}: {validity.verdict}")]
    items += [Item("FAIL" if r.level == "untrustworthy" else "warn", "capture", r.message, r.fix)
              for r in validity.reasons]
    return items + [Item("info", "capture", r.message, r.fix) for r in validity.notes]


def render(items: list[Item]) -> str:
    """The diagnosis as text: one line an item (wrapped), its fix below, the verdict last."""
    out = []
    indent = " " * 18
    for item in items:
        head = f"{item.level:<5} {item.topic:<11} "
        out.append(_fill(item.text, head, indent))
        if item.fix:
            out.append(_fill(item.fix, indent + "fix: ", indent + "     "))
    failed = [i.topic for i in items if i.level == "FAIL"]
    if failed:
        out.append(f"verdict: profiling cannot work here ({', '.join(failed)}): exit 3")
    else:
        out.append("verdict: profiling can work here")
    return "\n".join(out) + "\n"


def _fill(text: str, first: str, rest: str) -> str:
    # Commands and paths stay whole (a fix is meant to be copied); a newline in ``text`` starts a new line.
    return "\n".join(textwrap.fill(part, _WIDTH, initial_indent=first if i == 0 else rest, subsequent_indent=rest,
                                   break_long_words=False, break_on_hyphens=False)
                     for i, part in enumerate(text.split("\n")))

