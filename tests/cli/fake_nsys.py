"""A stand-in for ``nsys`` so that ``profile`` and ``doctor`` run end to end without a GPU.

Installed by the tests as ``nsys`` (this file behind a ``#!`` line of the test's Python). It
appends its arguments as one JSON line to ``$FAKE_NSYS_LOG``, and:

- ``--version``: prints an nsys version line;
- ``status -e``: prints ``$FAKE_NSYS_STATUS`` (a file) or a passing check list;
- ``profile [flags] CMD...``: runs CMD (its exit code becomes nsys's, as with the real one), then
  writes a small export made with TraceBuilder at the ``-o`` name (nsys's %h %p %n %q{VAR}
  expanded): the command line and graph trace mode (``--cuda-graph-trace``) are recorded as
  nsys records them. ``FAKE_NSYS_NO_EXPORT=qdstrm`` leaves only a ``.qdstrm`` and an importer
  error, as nsys does when its importer cannot load libdw; ``FAKE_NSYS_NO_EXPORT=nothing`` writes
  nothing at all;
- ``export --type=sqlite -o OUT IN``: writes the same small export to OUT (``FAKE_NSYS_EXPORT_FAIL``: fails);
- ``profile --gpu-metrics-devices=help``: prints ``$FAKE_NSYS_GPU_METRICS`` (a file) or an H200 it can sample;
  a capture with ``--gpu-metrics-devices`` writes GPU metrics samples (10 kHz, or ``--gpu-metrics-frequency``)
  into the export: the GEMVs read DRAM at 80 % of peak, the norms at 20 %.
"""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys

from nsys_rules.testing import TraceBuilder

PASSING_STATUS = """Timestamp counter supported: Yes

CPU Profiling Environment Check
Root privilege: disabled
Linux Kernel Paranoid Level = 1
Linux Distribution = Ubuntu
Linux Kernel Version = 6.8.0-45-generic: OK
Linux perf_event_open syscall available: OK
Sampling trigger event available: OK
Intel(c) Last Branch Record support: Available
CPU Profiling Environment (process-tree): OK
CPU Profiling Environment (system-wide): Fail
"""

METRICS_DEVICES = """Possible --gpu-metrics-devices values are:
	0: Hopper GH100 | NVIDIA H200 PCI[0000:00:06.0]
	all: Select all supported GPUs
	cuda-visible: Select GPUs that match CUDA_VISIBLE_DEVICES
	none: Disable GPU Metrics [Default]
See the user guide: https://docs.nvidia.com/nsight-systems/UserGuide/index.html#gpu-metrics
"""

#: nsys profile options written as two tokens (`-o NAME`); all others are `--flag=value`.
TWO_TOKEN = {"-o", "-c", "-t", "-s", "-d", "-y", "-x", "-b", "-n", "-p", "-e", "-w", "-f"}


def expand(name: str) -> str:
    name = name.replace("%%", "\0").replace("%h", socket.gethostname()).replace("%p", str(os.getpid()))
    name = name.replace("%n", "1")
    name = re.sub(r"%q\{([^}]*)\}", lambda m: os.environ.get(m.group(1), ""), name)
    return name.replace("\0", "%")


def write_export(path: str, command: list[str], graph_mode: str, metrics_hz: int | None = None) -> None:
    """Eight decode steps of three kernels under NVTX, one graph replay each, as the capture records them."""
    b = TraceBuilder(command=command, environment={k: os.environ[k] for k in ("CUDA_LAUNCH_BLOCKING",)
                                                   if k in os.environ}, graph_trace_mode=graph_mode,
                     gpu_metrics_frequency=metrics_hz or 10_000)
    step = 2_000_000
    for i in range(8):
        start = 10_000_000 + i * step
        b.nvtx("decode_step", start, start + step - 50_000)
        b.kernel("rmsnorm_kernel", start + 20_000, 30_000)
        b.kernel("gemv_bf16_kernel", start + 60_000, 900_000, grid=(132, 1, 1))
        # A graph replay: node mode records its kernel, graph mode only the replay as a whole.
        replay = b.graph_launch(start + 1_000_000, 40_000, launch_at=start + 5_000,
                                traced_as_graph=graph_mode == "Graph")
        if graph_mode == "Node":  # the node's kernel carries its graph launch's correlationId, as nsys writes it
            b.kernel("silu_kernel", start + 1_000_000, 40_000, correlation_id=replay, graph_node_id=1)
    if metrics_hz:
        b.sample_gpu_metrics({"gemv_bf16_kernel": {"dram_read": 80, "sm_issue": 10, "tensor_active": 1},
                              "rmsnorm_kernel": {"dram_read": 20, "sm_issue": 30}},
                             9_000_000, 10_000_000 + 8 * step, period=1_000_000_000 // metrics_hz,
                             idle={"pcie_rx": 1, "pcie_tx": 1})
    b.write(path)


def profile(args: list[str]) -> int:
    flags: dict[str, str] = {}
    i = 0
    while i < len(args) and args[i].startswith("-"):
        if args[i] in TWO_TOKEN:
            flags[args[i]] = args[i + 1]
            i += 2
        else:
            key, _, value = args[i].partition("=")
            flags[key] = value
            i += 1
    command = args[i:]
    print("Collecting data...", flush=True)
    returncode = subprocess.call(command)
    if returncode:
        print(f"The target application returned non-zero exit code {returncode}", flush=True)
    out = expand(flags.get("-o", "report1"))
    print("Generating '/tmp/nsys-report-fake.qdstrm'", flush=True)
    no_export = os.environ.get("FAKE_NSYS_NO_EXPORT")
    if no_export == "qdstrm":
        open(out + ".qdstrm", "wb").close()
        print("Importer error status: Importation failed.", file=sys.stderr, flush=True)
    if no_export:
        return returncode
    mode = "Node" if flags.get("--cuda-graph-trace") == "node" else "Graph"
    with open(out + ".nsys-rep", "wb") as fh:
        fh.write(b"fake report")
    if flags.get("--export") == "sqlite":
        metrics = int(flags.get("--gpu-metrics-frequency", "10000")) if "--gpu-metrics-devices" in flags else None
        write_export(out + ".sqlite", command, mode, metrics)
    print(f"[1/2] [========================100%] {os.path.basename(out)}.nsys-rep", flush=True)
    print(f"Generated:\n    {os.path.abspath(out)}.nsys-rep", flush=True)
    return returncode


def main(args: list[str]) -> int:
    log = os.environ.get("FAKE_NSYS_LOG")
    if log:
        with open(log, "a", encoding="utf-8") as fh:
            fh.write(json.dumps(args) + "\n")
    if args == ["--version"]:
        print("NVIDIA Nsight Systems version 2025.3.2.474-253236389321v0")
        return 0
    if args[:1] == ["status"]:
        status = os.environ.get("FAKE_NSYS_STATUS")
        sys.stdout.write(open(status, encoding="utf-8").read() if status else PASSING_STATUS)
        return 0
    if args[:1] == ["profile"] and "--gpu-metrics-devices=help" in args:
        listing = os.environ.get("FAKE_NSYS_GPU_METRICS")
        sys.stdout.write(open(listing, encoding="utf-8").read() if listing else METRICS_DEVICES)
        return 0
    if args[:1] == ["profile"]:
        return profile(args[1:])
    if args[:1] == ["export"]:
        if os.environ.get("FAKE_NSYS_EXPORT_FAIL"):
            print("fake nsys: export failed", file=sys.stderr)
            return 1
        write_export(args[args.index("-o") + 1], ["./app"], "Node")
        return 0
    print(f"fake nsys: unknown command {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
