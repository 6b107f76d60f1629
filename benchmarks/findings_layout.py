"""How the human outputs scale with the number of findings (target: linear, a ratio near 4 for 4x the findings).

Usage: python benchmarks/findings_layout.py [--counts 5000,20000] [--formats table,compact,markdown,json]

A plugin rule (registered in process, no install) returns N findings on a small trace built with
:class:`nsys_rules.testing.TraceBuilder` in a temporary folder; the engine runs with
``--max-findings`` lifted to N, then each format lays out the report. Prints seconds per format and
count, and the ratio of the largest count's time to the smallest's against the ratio of the counts.
Before the fix (``shown.sort(key=ranked.index)`` in ``formatters/layout.py``) the table took 2.8 s
for 5,000 findings and 81 s for 20,000 (ratio 29 for 4x the findings) on 2 cores.
"""

from __future__ import annotations

import argparse
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from nsys_rules.engine import run_check
from nsys_rules.findings import Severity
from nsys_rules.hooks import hookimpl
from nsys_rules.inputs import open_trace
from nsys_rules.malloc_tune import collector_paused
from nsys_rules.plugin_manager import build_registry
from nsys_rules.rule import Rule
from nsys_rules.settings import Settings
from nsys_rules.testing import TraceBuilder


@dataclass(frozen=True)
class _Options:
    """No options."""


def flood_rule(count: int) -> type[Rule]:
    """A rule that returns ``count`` findings, warnings and infos with distinct savings."""
    def check(self: Rule, ctx: Any) -> Any:
        for i in range(count):
            yield ctx.finding(f"finding {i}: a message long enough to wrap in the table's text column", "do this",
                              key=f"k{i}", severity=Severity.WARNING if i % 2 else Severity.INFO,
                              estimated_savings_ns=1000 * i)
    return type("Flood", (Rule,), {"name": "flood", "title": "flood", "requires": ("kernels",), "Options": _Options,
                                   "__doc__": "Many findings.", "check": check})


def measure(count: int, formats: list[str], folder: Path) -> dict[str, float]:
    class Plugin:
        @staticmethod
        @hookimpl
        def register_rules() -> list[type[Rule]]:
            return [flood_rule(count)]

    builder = TraceBuilder()
    for i in range(50):
        builder.kernel("k", i * 1_000_000, 500_000)
    path = builder.write(folder / f"t{count}.sqlite")
    registry = build_registry(autoload=False, extra=(("flood", Plugin()),))
    settings = Settings(select=["flood"], max_findings=count)
    started = time.perf_counter()
    report = run_check([path], registry, settings, lambda p: open_trace(p, registry.loaders, "sqlite"))
    out = {"engine": time.perf_counter() - started}
    for name in formats:
        started = time.perf_counter()
        registry.formatters[name](report)
        out[name] = time.perf_counter() - started
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--counts", default="5000,20000")
    parser.add_argument("--formats", default="table,compact,markdown,json,sarif,html")
    args = parser.parse_args()
    counts = [int(c) for c in args.counts.split(",")]
    formats = args.formats.split(",")
    # As the CLI runs a command: without the cyclic collector (nsys_rules.malloc_tune), whose passes over every
    # live object would add their own growth to the layout's.
    with tempfile.TemporaryDirectory() as tmp, collector_paused():
        times = {count: measure(count, formats, Path(tmp)) for count in counts}
    names = ["engine", *formats]
    print(f"{'findings':>9} " + " ".join(f"{n:>9}" for n in names))
    for count in counts:
        print(f"{count:>9} " + " ".join(f"{times[count][n]:>8.2f}s" for n in names))
    low, high = counts[0], counts[-1]
    print(f"{'ratio':>9} " + " ".join(f"{times[high][n] / max(times[low][n], 1e-6):>9.1f}" for n in names)
          + f"   (findings x{high / low:g}: linear is about that)")


if __name__ == "__main__":
    main()
