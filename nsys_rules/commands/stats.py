"""``nsys-rules stats --report NAME TRACE``: NVIDIA's ``nsys stats`` summaries, without nsys.

Same column names, rows, rounding and ordering as nsys 2025.3; ``--format json`` prints the bare
array nsys prints (not the ``check`` envelope). A report with no data prints ``[]`` (json) or
nothing, says why on stderr and exits 0, as nsys does. ``--percentiles`` adds p95/p99 columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..config import parse_size
from ..errors import UsageError
from ..inputs import EXPORT_FORMATS, open_trace
from ..loaders.arrowdir import folder_kind
from ..memory_limit import STATS_BYTES_PER_NAME, install_read_guard
from ..stats import REPORTS, parse_report
from ..stats.filters import stats_window
from ..stats.output import FORMATS, render
from ..textsafe import terminal_safe
from .common import add_filter_flags, filter_value


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    names = ", ".join(n + (f"[:{'|:'.join(m.VARIANTS)}]" if m.VARIANTS else "") for n, m in REPORTS.items())
    p = sub.add_parser("stats", help="nsys stats summary reports (same numbers as `nsys stats`)",
                       description="Print one of NVIDIA's `nsys stats` summary reports, computed without nsys. "
                                   f"Reports: {names}.")
    p.add_argument("trace", metavar="TRACE", help="nsys .sqlite export, parquetdir/arrowdir export folder, "
                   "or .nsys-rep with nsys on PATH")
    p.add_argument("--report", required=True, metavar="NAME[:VARIANT]", help=f"the report: {names}")
    p.add_argument("--format", default="table", choices=FORMATS, help="table (default), csv, or json (nsys's array)")
    p.add_argument("--percentiles", action="store_true", help="add p95 and p99 columns (beyond nsys)")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="stop with exit 3 before a read that would need more (e.g. 2G; default 80 %% of the free memory)")
    p.add_argument("--export-format", choices=EXPORT_FORMATS, default="sqlite",
                   help="what a .nsys-rep is exported to first with nsys (default sqlite)")
    add_filter_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print one report; 0 also when it is empty (the reason goes to stderr)."""
    module, variant = parse_report(args.report)
    path = Path(args.trace)
    if path.is_dir() and folder_kind(path) is None:
        raise UsageError(f"{path}: stats takes one trace (a file or a parquetdir/arrowdir export folder), not a "
                         "folder of them")
    limit = parse_size(args.max_memory) if args.max_memory else None
    trace = open_trace(path, export_format=args.export_format)
    try:
        install_read_guard(trace, limit, STATS_BYTES_PER_NAME)  # every table read is priced first, as check does
        window = stats_window(trace, filter_value(args, "filter_time", "START/END, e.g. 5s/7s"),
                              filter_value(args, "filter_nvtx", "an NVTX range name"))
        result = module.build(trace, window, variant, args.percentiles)
    finally:
        trace.close()
    if not result.rows:
        sys.stderr.write(f"nsys-rules: {args.report}: no data: {result.reason or 'the report is empty'}\n")
    text = render(result, args.format)
    # The table is for a terminal: names from the file must not drive it (csv/json stay exact).
    sys.stdout.write(terminal_safe(text) if args.format == "table" else text)
    sys.stdout.flush()
    return 0
