"""``nsys-rules stats [-r NAME[,NAME...]] TRACE``: NVIDIA's ``nsys stats`` summaries, without nsys.

Same column names, rows, rounding and ordering as nsys 2025.3, and nsys's habits: ``-r`` repeated
or comma-separated, nsys's default reports when none is named, ``--timeunit``, ``-f/--format``
(``column`` is nsys's name for the table), ``-o/--output`` (one file per report,
``<base>_<report>.<ext>``; ``.`` takes the trace's name as the base). ``--format json`` of one
report on stdout is the bare array nsys prints; several reports on stdout are each preceded by
nsys's `` ** <title> (<name>):`` line. A report with no data prints nothing (``[]`` for json),
says why on stderr and exits 0, as nsys does. ``--percentiles`` adds p95/p99 columns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from nsys_rules.config import parse_max_memory
from nsys_rules.errors import UsageError
from nsys_rules.inputs import EXPORT_FORMATS, open_trace
from nsys_rules.loaders.folders import folder_kind
from nsys_rules.loaders.memory_limit import STATS_BYTES_PER_NAME
from nsys_rules.outpaths import guard_outputs, write_atomic
from nsys_rules.stats import REPORTS, TITLES, parse_reports
from nsys_rules.stats.filters import stats_window
from nsys_rules.stats.output import EXTENSIONS, FORMATS, TIME_UNITS, in_time_unit, render
from nsys_rules.textsafe import output_safe, terminal_safe
from nsys_rules.commands.common import add_filter_flags, filter_value
from nsys_rules.containment import report_stream
from nsys_rules.formatters.layout import fit, output_width


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    names = ", ".join(n + (f"[:{'|:'.join(m.VARIANTS)}]" if m.VARIANTS else "") for n, m in REPORTS.items())
    p = sub.add_parser("stats", help="nsys stats summary reports (same numbers as `nsys stats`)",
                       description="Print NVIDIA's `nsys stats` summary reports, computed without nsys. "
                                   f"Reports: {names}.")
    p.add_argument("trace", metavar="TRACE", help="nsys .sqlite export, parquetdir/arrowdir export folder, "
                   "or .nsys-rep with nsys on PATH")
    p.add_argument("-r", "--report", action="append", metavar="NAME[:VARIANT][,...]",
                   help="report(s) to run, repeated or comma-separated (default: nsys's default set that "
                        "nsys-rules has: nvtx_sum, cuda_api_sum, cuda_gpu_kern_sum, cuda_gpu_mem_time_sum, "
                        "cuda_gpu_mem_size_sum)")
    p.add_argument("-f", "--format", default="table", choices=(*FORMATS, "column"),
                   help="table (default; nsys calls it column), csv, or json (nsys's array)")
    p.add_argument("--timeunit", default="nsec", choices=tuple(TIME_UNITS),
                   help="unit of the time columns (default nsec)")
    p.add_argument("-o", "--output", default="-", metavar="BASE",
                   help="'-' for stdout (default), or write each report to BASE_<report>.<txt|csv|json>; "
                        "'.' uses the trace's name as BASE")
    p.add_argument("--force-overwrite", default="false", choices=("true", "false"),
                   help="true: replace existing -o files (default false, as nsys)")
    p.add_argument("--percentiles", action="store_true", help="add p95 and p99 columns (beyond nsys)")
    p.add_argument("--max-memory", metavar="SIZE",
                   help="stop with exit 3 before a read that would need more (e.g. 2G; default 80 %% of the free memory)")
    p.add_argument("--export-format", choices=EXPORT_FORMATS, default="sqlite",
                   help="what a .nsys-rep is exported to first with nsys (default sqlite)")
    add_filter_flags(p)
    p.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Print (or write) the reports; 0 also when one is empty (the reason goes to stderr)."""
    reports = parse_reports(args.report)
    fmt = "table" if args.format == "column" else args.format
    path = Path(args.trace)
    if path.is_dir() and folder_kind(path) is None:
        raise UsageError(f"{path}: stats takes one trace (a file or a parquetdir/arrowdir export folder), not a "
                         "folder of them")
    limit = parse_max_memory(args.max_memory) if args.max_memory else None  # stats reads no config file
    files = _output_files(args, path, [spec for spec, _, _ in reports], EXTENSIONS[fmt])
    # Every table read is priced first, as check's are; a report's output grows with the names it prints.
    trace = open_trace(path, export_format=args.export_format, max_memory=limit, per_text_value=STATS_BYTES_PER_NAME)
    try:
        window = stats_window(trace, filter_value(args, "filter_time", "START/END, e.g. 5s/7s"),
                              filter_value(args, "filter_nvtx", "an NVTX range name"))
        results = [(spec, in_time_unit(module.build(trace, window, variant, args.percentiles), args.timeunit))
                   for spec, module, variant in reports]
        damage = list(dict.fromkeys(trace.damage))
    finally:
        trace.close()
    # Rows the loader left out (negative durations, times past 2^53, NULL names) change the numbers: said, as
    # check says them, on stderr so the report itself stays what nsys prints.
    for line in damage:
        sys.stderr.write(terminal_safe(f"nsys-rules: note: {line}", newlines=False) + "\n")
    texts = []
    for spec, result in results:
        if not result.rows:
            line = f"nsys-rules: {spec}: no data: {result.reason or 'the report is empty'}"
            sys.stderr.write(terminal_safe(line, newlines=False) + "\n")  # the reason names the trace's path
        # A file (-o) keeps nsys's layout; stdout is laid out for the terminal or pipe (80 columns unless COLUMNS).
        text = render(result, fmt, None if files is not None else output_width())
        if files is not None:
            write_atomic(files[spec], text, f"the {spec} report")
        elif len(results) == 1:
            texts.append(text)
        elif result.rows:
            name = spec.split(":", 1)[0]
            heading = fit([f" ** {TITLES.get(name, name)} ({spec}):"], output_width(), indent="   ")
            texts.append("\n" + "\n".join(heading) + f"\n\n{text}")
    if files is not None:
        sys.stderr.write("".join(terminal_safe(f"nsys-rules: wrote {files[spec]}", newlines=False) + "\n"
                                 for spec, _ in results))
        return 0
    text = "".join(texts)
    # The table is for a terminal: names from the file must not drive it (csv/json stay exact).
    report_stream().write(output_safe(text, fmt))
    report_stream().flush()
    return 0


def _output_files(args: argparse.Namespace, trace: Path, specs: list[str], ext: str) -> dict[str, Path] | None:
    """``-o BASE``: the file of each report (None for stdout), checked before anything is read.

    No report may replace an input (the trace, or a file inside an export folder) or an nsys export;
    an existing report file is replaced only with ``--force-overwrite``, as nsys does.
    """
    if args.output == "-":
        return None
    base = Path(args.output)
    if args.output == ".":
        name = trace.name
        for suffix in (".sqlite", ".nsys-rep", ".parquetdir", ".arrowdir"):
            name = name[: -len(suffix)] if name.lower().endswith(suffix) else name
        base = trace.parent / name
    files = {spec: base.parent / f"{base.name}_{spec.replace(':', '_')}.{ext}" for spec in specs}
    inputs = [trace, *(trace.iterdir() if trace.is_dir() else ())]
    guard_outputs({f"-o ({spec})": f for spec, f in files.items()}, inputs)
    if args.force_overwrite != "true":
        taken = [str(f) for f in files.values() if f.exists()]
        if taken:
            raise UsageError(f"-o: {taken[0]} exists; use --force-overwrite true to replace it")
    return files
