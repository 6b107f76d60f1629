"""Speed and memory of ``nsys-rules stats`` against a bare read of the columns each report needs.

Usage:
    python benchmarks/stats_speed.py TRACE.sqlite [--repeat 3] [--reports cuda_gpu_kern_sum,...]

Each figure is a whole process (interpreter start and imports included), run ``--repeat`` times
interleaved with its floor so machine load hits both alike; the table shows medians and the
ratio. The floor reads, with the same Arrow reader (adbc-driver-sqlite), only the columns the
report needs and computes nothing: "about as fast as reading the columns" means a ratio near 1.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

#: The SQL columns each report reads (the floor's query).
FLOOR_SQL = {
    "cuda_gpu_kern_sum": ["select start, end, demangledName from CUPTI_ACTIVITY_KIND_KERNEL"],
    "cuda_api_sum": ["select start, end, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"],
    "cuda_kern_exec_sum": ["select start, end, deviceId, correlationId, globalPid, demangledName "
                           "from CUPTI_ACTIVITY_KIND_KERNEL",
                           "select start, end, correlationId, globalTid, nameId from CUPTI_ACTIVITY_KIND_RUNTIME"],
}

_FLOOR = """
import sys
import adbc_driver_sqlite.dbapi as adbc
conn = adbc.connect(sys.argv[1])
for sql in sys.argv[2:]:
    cur = conn.cursor(); cur.execute(sql); cur.fetch_arrow_table()
"""


def _run(cmd: list[str]) -> tuple[float, float]:
    """Wall seconds and peak RSS (MB) of one process."""
    start = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - start
    if status != 0:
        raise SystemExit(f"failed ({status}): {' '.join(cmd)}")
    return elapsed, usage.ru_maxrss / 1024


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--reports", default=",".join(FLOOR_SQL))
    args = ap.parse_args()
    trace = str(Path(args.trace).resolve())
    print(f"{'report':24} {'stats s':>8} {'floor s':>8} {'ratio':>6} {'stats MB':>9} {'floor MB':>9}")
    for report in args.reports.split(","):
        ours, floor = [], []
        for _ in range(args.repeat):
            ours.append(_run([sys.executable, "-m", "nsys_rules", "stats", "--report", report, "--format", "json", trace]))
            floor.append(_run([sys.executable, "-c", _FLOOR, trace, *FLOOR_SQL[report]]))
        t_ours, t_floor = statistics.median(t for t, _ in ours), statistics.median(t for t, _ in floor)
        m_ours, m_floor = statistics.median(m for _, m in ours), statistics.median(m for _, m in floor)
        print(f"{report:24} {t_ours:8.2f} {t_floor:8.2f} {t_ours / t_floor:6.2f} {m_ours:9.0f} {m_floor:9.0f}")


if __name__ == "__main__":
    main()
