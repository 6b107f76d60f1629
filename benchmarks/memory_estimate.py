"""How close the --max-memory estimate is to what a run really takes.

    python3 benchmarks/memory_estimate.py TRACE [TRACE...]

For each trace: the estimate of nsys_rules.loaders.memory_limit for all built-in rules, and the peak
resident memory of a real ``nsys-rules check`` above the interpreter's own baseline (both
measured in child processes). The ratio measured/estimate should stay below 1: the estimate
is meant as an upper bound, so the guard stops a run before the machine does.
"""

from __future__ import annotations

import json
import subprocess
import sys

_BASELINE = """
import resource, nsys_rules.cli, nsys_rules.engine
from nsys_rules.plugin_manager import build_registry
build_registry(autoload=False)
try:  # the loader's lazy imports belong to the baseline, not to the trace
    import pyarrow, adbc_driver_sqlite.dbapi
except ImportError:
    pass
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

_RUN = """
import contextlib, io, resource, sys
from nsys_rules.cli import main
with contextlib.redirect_stdout(io.StringIO()):
    main(["check", "--no-plugins", "--fail-on", "never", "--format", "json", sys.argv[1]])
print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024)
"""

_ESTIMATE = """
import json, sys
from pathlib import Path
from nsys_rules.loaders import memory_limit
from nsys_rules.settings import Settings
from nsys_rules.options import select_rules
from nsys_rules.inputs import open_trace
from nsys_rules.plugin_manager import build_registry
trace = open_trace(Path(sys.argv[1]))
needs = {}
for rule in select_rules(build_registry(autoload=False), Settings()):
    if all(trace.has(t) for t in rule.requires):
        for table, cols in rule.needs().items():
            if trace.has(table):
                needs.setdefault(table, [])
                needs[table] += [c for c in cols if c not in needs[table]]
est = memory_limit.estimate(trace.export, needs)
print(json.dumps({"load": est.load, "total": est.total}))
"""


def _child(code: str, *args: str) -> str:
    return subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True).stdout


def main(paths: list[str]) -> int:
    """Print estimate, measured peak and their ratio per trace."""
    from nsys_rules.loaders.memory_limit import human

    baseline = int(_child(_BASELINE).strip())
    print(f"interpreter baseline: {human(baseline)}")
    print(f"{'trace':40} {'estimate':>10} {'measured':>10} {'measured/estimate':>18}")
    for path in paths:
        est = json.loads(_child(_ESTIMATE, path))
        peak = int(_child(_RUN, path).strip().splitlines()[-1]) - baseline
        ratio = peak / est["total"] if est["total"] else float("nan")
        print(f"{path.split('/')[-1][:40]:40} {human(est['total']):>10} {human(max(peak, 0)):>10} {ratio:>18.2f}")
    return 0


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit(__doc__)
    sys.exit(main(sys.argv[1:]))
