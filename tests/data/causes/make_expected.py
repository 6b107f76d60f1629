#!/usr/bin/env python3
"""Writes expected.json for issue 37's cases from causes_facts.py's SQL facts and the programs' RESULT lines.

    python3 make_expected.py [FOLDER]      # FOLDER: this folder (NAME.sqlite.xz) by default

Cases whose trace is kept under ../fixpairs (the JAX readback loop, empty_cache every step) are read there.
"""

from __future__ import annotations

import json
import sqlite3
import sys
import tempfile
from pathlib import Path

import numpy as np

import causes_facts as cf

HERE = Path(__file__).resolve().parent
PAIRS = HERE.parent / "fixpairs"

#: trace -> (folder, program warm-up iterations before the measured ones, the issue-37 case it is)
CASES = {
    "cx_serve": (HERE, 3, "steps of two kinds: prefill every 8th step, decode otherwise"),
    "cx_compile_rotate": (HERE, 0, "recompiles inside the measured loop (four rotating lengths, dynamic=False)"),
    "cx_graph_item_nonvtx": (HERE, 5, "graph-replay decode, one replay and one .item() per token, no NVTX"),
    "cx_jax_tokens": (HERE, 4, "JAX token loop: several jitted calls per token, non-donated cache copies (D2D)"),
    "cx_jax_readback_sampled": (HERE, 5, "flax/optax training, float(loss) per step, no input pipeline, sampled"),
    "fx_jax_readback": (PAIRS, 5, "flax/optax training, float(loss) per step, no input pipeline"),
    "fx_llama_empty_cache": (PAIRS, 0, "torch.cuda.empty_cache() every step"),
    "fx_llama_base": (PAIRS, 0, "the same Llama training loop without empty_cache (reference for the alloc facts)"),
}


def ms(x: float | None) -> float | None:
    return None if x is None else round(x, 4)


def block(name: str, f: dict, warmup: int) -> dict:
    """The facts of one case, with the warm-up marks dropped."""
    steps = f["steps"]
    if name == "cx_compile_rotate":
        steps = [s for s in steps if s["name"].startswith("step=")]
    else:
        steps = steps[warmup:] if f["marks"].startswith("NVTX") else steps[max(warmup - 1, 0):]
    out = {"marks": f["marks"], "marks_in_trace": f["count"], "measured": cf.summary(steps)}
    if "readbacks" in f:
        out["readbacks_in_trace"] = f["readbacks"]
    if name == "cx_serve":
        k = np.array([s["kernels"] for s in steps])
        cut = (k.min() + k.max()) / 2
        kinds = {}
        for kind, sel in (("prefill", k > cut), ("decode", k <= cut)):
            mine = [s for s, y in zip(steps, sel, strict=False) if y]
            kinds[kind] = {**cf.summary(mine), "measured_indices": [i for i, y in enumerate(sel) if y][:12]}
            names = set().union(*(s["kernel_names"] for s in mine)) if mine else set()
            kinds[kind]["kernel_names_only_in_this_kind"] = sorted(
                names - set().union(*(s["kernel_names"] for s, y in zip(steps, sel, strict=False) if not y)))[:8]
        out["kinds"] = kinds
        out["kind_split"] = f"kernels per step above {cut:.0f} = prefill"
    if name == "cx_compile_rotate":
        host = np.array([s["host_ns"] for s in steps])
        slow = [i for i, h in enumerate(host) if h > 10 * np.median(host)]
        out["recompile_steps"] = {f"step={i}": {
            "host_ms": ms(host[i] / 1e6), "calls": {c: n for c, n in steps[i]["calls"].items() if "Module" in c
                                                   or "Library" in c or "Malloc" in c},
            "kernels": steps[i]["kernels"]} for i in slow}
        out["other_steps_host_ms_median"] = ms(float(np.median(np.delete(host, slow))) / 1e6)
        out["recompile_ms_total"] = ms(float(host[slow].sum()) / 1e6)
        out["loop_host_ms_total"] = ms(float(host.sum()) / 1e6)
    return out


def main(argv: list[str]) -> int:
    folder = Path(argv[1]) if len(argv) > 1 else None
    doc: dict = {"about": "Issue 37's cases: facts from our own SQL (causes_facts.py) before any nsys-rules output was "
                          "read; per case the program's own marks, warm-up dropped.", "traces": {}}
    with tempfile.TemporaryDirectory() as scratch:
        for name, (where, warmup, case) in CASES.items():
            path = cf.unpack(folder or where, name, Path(scratch))
            if path is None:
                print(f"missing: {name}")
                continue
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
                f = cf.facts(name, db)
            doc["traces"][f"{name}.sqlite"] = {"case": case, "kept_in": where.name, "warmup": warmup,
                                               **block(name, f, warmup)}
            print(name, json.dumps(doc["traces"][f"{name}.sqlite"]["measured"])[:400])
    (HERE / "expected.json").write_text(json.dumps(doc, indent=1, default=str) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
