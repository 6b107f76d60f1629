"""Whether two traces are runs of the same program and step, so that a diff of them means something.

A diff of a prefill benchmark against a Rust decode server has a "change per step", and it is
nonsense. :func:`mismatches` names what differs between a side's first run and every other run:

- the **program**: the profiled command's program, by name (a Python interpreter's script or
  module, else the executable's file name: ``target/release/x`` and ``target/debug/x`` are one
  program, built two ways); arguments may differ (that is what a diff compares);
- the **step**: both steps are NVTX ranges and their names differ (``decode_step`` vs
  ``prefill_step``);
- the **kernels**: on either side, less than :data:`KERNEL_OVERLAP_PCT` percent of its GPU time per
  step runs in kernels the other side runs too (only when both sides' kernels are visible: a
  graph-level capture hides them).

``diff --force`` compares anyway.
"""

from __future__ import annotations

from typing import Any, Sequence

from nsys_rules.units import plain_number

#: Least share of each side's GPU time (percent) in kernels both sides run, for one program.
KERNEL_OVERLAP_PCT = 25.0
#: Interpreters whose program is the script (or ``-m`` module) they run.
_INTERPRETERS = ("python", "pypy")


def program_name(command: Sequence[str]) -> str | None:
    """The program a command line runs: the script or module of an interpreter, else the executable's name."""
    if not command:
        return None
    exe = str(command[0]).replace("\\", "/").rsplit("/", 1)[-1]
    if not exe.lower().startswith(_INTERPRETERS):
        return exe or None
    args = list(command[1:])
    while args:
        arg = str(args.pop(0))
        if arg == "-m" and args:
            return f"-m {args[0]}"
        if arg.startswith("-m") and len(arg) > 2:
            return f"-m {arg[2:]}"
        if arg == "-c":
            return "-c"
        if arg in ("-X", "-W") and args:  # options with a value
            args.pop(0)
            continue
        if not arg.startswith("-"):
            return arg.replace("\\", "/").rsplit("/", 1)[-1]
    return exe


def kernel_overlap(base: dict[str, float], new: dict[str, float]) -> tuple[float, float]:
    """Percent of each side's GPU time (kernel name -> time per step) in kernels the other side runs."""
    common = base.keys() & new.keys()
    shares = []
    for side in (base, new):
        total = sum(side.values())
        shares.append(100.0 * sum(side[k] for k in common) / total if total else 100.0)
    return shares[0], shares[1]


def mismatches(first: dict[str, Any], other: dict[str, Any]) -> list[str]:
    """What makes ``other`` another program or step than ``first`` (the dicts of :func:`facts`), as phrases."""
    out = []
    a, b = first["program"], other["program"]
    if a and b and a != b:
        out.append(f"they run different programs ({a!r} vs {b!r})")
    if first["step_source"] == other["step_source"] == "nvtx" and first["step_range"] != other["step_range"]:
        out.append(f"their steps are different NVTX ranges ({first['step_range']!r} vs {other['step_range']!r})")
    if first["kernels"] and other["kernels"]:
        mine, theirs = kernel_overlap(first["kernels"], other["kernels"])
        if min(mine, theirs) < KERNEL_OVERLAP_PCT:
            out.append(f"their kernels differ (only {min(mine, theirs):.0f} % of one side's GPU time runs in kernels "
                       f"the other runs too; {plain_number(KERNEL_OVERLAP_PCT)} % is the least for one program)")
    return out


def facts(summary: dict[str, Any], profile: dict[str, Any], command: Sequence[str]) -> dict[str, Any]:
    """What :func:`mismatches` compares, of one run."""
    kernels = {str(k["name"]): float(k["per_step_ns"]) for k in profile.get("kernels", [])} \
        if summary.get("has_kernels") else {}
    return {"program": program_name(command), "step_source": summary.get("step_source"),
            "step_range": summary.get("step_range"), "kernels": kernels}
