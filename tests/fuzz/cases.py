"""One fuzz case = one damaged input, run through the CLI in process and judged.

Shared by the hypothesis suite (``test_fuzz_inputs.py``) and the counting script
(``python3 -m tests.fuzz.report``). A case is fully determined by ``(family, seed)``, so a
failure is replayed with the same two values.

Families:

* ``bytes``: the example export with byte-level damage (truncation, bit flips, zeroed or
  shuffled pages, header bytes, splices), then ``check`` with a cheap rule selection and a
  sweep that reads every canonical table through the loader;
* ``sql``: the example export with 1-3 SQL-level damages (dropped tables or columns, NULLs,
  wrong types, duplicate rows, dangling ids, big strings, planted views/triggers), same run;
* ``built``: a small random but well-formed trace from ``TraceBuilder`` (zero to a few dozen
  kernels, copies, syncs, NVTX steps, graphs, GPUs with missing specs), sometimes with SQL
  damage, run through **every** rule: this is where rule code meets odd data.
* ``names``: a trace whose command line, environment, kernel, range and file names are hostile
  text (:mod:`tests.fuzz.hostile_text`): outputs escaped, pasted suggestions inert.

Some cases also render the other formats (table, markdown, html, sarif) and an ``nsys stats``
report, under the same contract.
"""

from __future__ import annotations

import random
import sqlite3
import tempfile
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

from nsys_rules.testing import GpuSpec, TraceBuilder
from tests.conftest import EXAMPLE
from tests.fuzz.harness import check_run, digest, folder_listing, run_cli_inprocess, strict_json
from tests.fuzz.mutations import byte_damage, sql_damage, tables_of

FAMILIES = ("bytes", "sql", "built", "names")
#: Rules the ``bytes``/``sql`` families run: cheap ones that still read api, kernels and nvtx
#: (full runs cost ~0.3 s each in pandas overhead; the ``built`` family runs them all).
CHEAP_SELECT = "graph-trace-hidden"


@dataclass
class CaseResult:
    """What one case did."""

    family: str
    seed: int
    damage: str
    code: int
    damage_notes: int = 0
    rule_errors: list[str] = field(default_factory=list)


#: The seed: the example export cut to its first 400 kernels (and the API calls up to them),
#: still a real nsys file but 370 KB, so byte damage lands on structure more often and a case
#: reads less.
_TRIM = (
    'DELETE FROM "CUPTI_ACTIVITY_KIND_KERNEL" WHERE "start" > '
    '(SELECT "start" FROM "CUPTI_ACTIVITY_KIND_KERNEL" ORDER BY "start" LIMIT 1 OFFSET 400)',
    'DELETE FROM "CUPTI_ACTIVITY_KIND_RUNTIME" WHERE "start" > (SELECT max("start") FROM "CUPTI_ACTIVITY_KIND_KERNEL")',
    'DELETE FROM "OSRT_CALLCHAINS"',
    'DELETE FROM "OSRT_API" WHERE rowid > 100',
)


def _example_bytes() -> bytes:
    with tempfile.TemporaryDirectory(prefix="nsys-rules-seed-") as tmp:
        path = Path(tmp) / "seed.sqlite"
        path.write_bytes(EXAMPLE.read_bytes())
        db = sqlite3.connect(path)
        try:
            for sql in _TRIM:
                db.execute(sql)
            db.commit()
            db.execute("VACUUM")
        finally:
            db.close()
        return path.read_bytes()


_EXAMPLE_CACHE: dict[str, object] = {}


def _example() -> tuple[bytes, dict[str, list[str]]]:
    if "bytes" not in _EXAMPLE_CACHE:
        _EXAMPLE_CACHE["bytes"] = _example_bytes()
        _EXAMPLE_CACHE["tables"] = tables_of(EXAMPLE)  # the trimmed seed has the same tables
    return _EXAMPLE_CACHE["bytes"], _EXAMPLE_CACHE["tables"]  # type: ignore[return-value]


def apply_sql(path: Path, rng: random.Random, rounds: int) -> list[str]:
    """Apply ``rounds`` random SQL damages to the file at ``path``; names of those that applied."""
    applied: list[str] = []
    db = sqlite3.connect(path)
    db.execute("PRAGMA synchronous = OFF")  # a scratch copy: no fsync per damage
    try:
        for _ in range(rounds):
            kind, statements = sql_damage(rng, tables_of(path))
            try:
                db.execute("SAVEPOINT damage")
                for sql in statements:
                    db.execute(sql)
                db.execute("RELEASE damage")
                applied.append(kind)
            except sqlite3.DatabaseError:
                db.execute("ROLLBACK TO damage")
                db.execute("RELEASE damage")
            db.commit()
    finally:
        db.close()
    return applied


def random_trace(rng: random.Random, path: Path) -> Path:
    """A small, well-formed but odd trace (any count may be zero)."""
    gpus = [GpuSpec(id=i, memory_bandwidth=rng.choice([None, 900_000_000_000, 4_800_000_000_000]),
                    sm_count=rng.choice([1, 108, 132])) for i in range(rng.choice([0, 1, 1, 2]))]
    b = TraceBuilder(gpus=gpus, graph_trace_mode=rng.choice([None, "Graph", "Node"]),
                     command=rng.choice([(), ("./app",), ("python", "train.py", "--debug")]),
                     environment=rng.choice([{}, {"CUDA_LAUNCH_BLOCKING": "1"}]))
    names = ["gemv_kernel", "ampere_sgemm_128x64_nn", "void at::native::elementwise_kernel<128, 4>",
             "ncclDevKernel_AllReduce", "flash_fwd_kernel", "k", ""]
    t = rng.randrange(0, 10_000)
    steps = rng.choice([0, 1, 3, 12])
    for _ in range(steps):
        step_start = t
        for _ in range(rng.randrange(0, 6)):
            t += rng.choice([0, 1, 500, 20_000])
            b.kernel(rng.choice(names), t, rng.choice([0, 1, 3_000, 400_000]), stream=rng.choice([7, 13]),
                     device=rng.choice([0, 1]), grid=(rng.choice([1, 132, 4096]), 1, 1))
        if rng.random() < 0.5:
            t += 1_000
            b.memcpy(t, rng.choice([0, 2_000]), rng.choice([0, 8, 1 << 20]), kind=rng.choice(["HtoD", "DtoH", "DtoD"]),
                     src=rng.choice(["pageable", "pinned", "device"]))
        if rng.random() < 0.3:
            b.memset(t, 500, 4096)
        if rng.random() < 0.5:
            t += 1_000
            b.sync(t, rng.choice([0, 10, 50_000]), kind=rng.choice(["stream", "event", "context"]))
        if rng.random() < 0.3:
            b.api(rng.choice(["cudaMalloc_v3020", "cudaFree_v3020", "cuMemAllocAsync", "cudaStreamSynchronize_v3020"]),
                  t, rng.choice([1, 100_000]))
        if rng.random() < 0.2:
            b.graph_launch(t, 30_000, traced_as_graph=rng.random() < 0.5)
        if rng.random() < 0.2:
            b.memory_event(t, 1 << 20, allocate=rng.random() < 0.5)
        t += rng.choice([10, 5_000, 1_000_000])
        b.nvtx(rng.choice(["step", "decode_step", "forward"]), step_start, max(t, step_start),
               registered=rng.random() < 0.5)
    if rng.random() < 0.2:
        b.profiler_start(rng.randrange(0, max(t, 1)))
    if rng.random() < 0.2:
        b.overhead("CUDA profiling data flush", 0, rng.choice([0, 100, t]))
    if rng.random() < 0.1:
        b.nvtx("mark", t, None)
    return b.write(path)


def run_case(family: str, seed: int, workdir: Path | None = None) -> CaseResult:
    """Build the input of ``(family, seed)``, run it, assert the contract, return what happened.

    Raises ``AssertionError`` on a broken contract: an exit code outside {0, 1, 3, 4}, a
    traceback or "internal error", a non-JSON or schema-invalid output, a changed input
    file or a file left beside it.
    """
    rng = random.Random(f"{family}:{seed}")
    if family == "names":
        from tests.fuzz.hostile_text import run_names_case

        with tempfile.TemporaryDirectory(prefix="nsys-rules-fuzz-", dir=workdir) as tmp:
            return CaseResult(family, seed, "names", run_names_case(seed, Path(tmp)))
    with tempfile.TemporaryDirectory(prefix="nsys-rules-fuzz-", dir=workdir) as tmp:
        folder = Path(tmp)
        path = folder / "case.sqlite"
        select = ["--select", CHEAP_SELECT]
        if family == "bytes":
            data, _ = _example()
            damage, mutated = byte_damage(rng, data)
            path.write_bytes(mutated)
        elif family == "sql":
            path.write_bytes(_example()[0])
            damage = "+".join(apply_sql(path, rng, rng.choice([1, 1, 2, 3]))) or "none"
        elif family == "built":
            random_trace(rng, path)
            damage = "+".join(apply_sql(path, rng, rng.choice([1, 2]))) if rng.random() < 0.5 else "none"
            select = []
        else:
            raise ValueError(f"unknown family {family!r}")
        before, listing = digest(path), folder_listing(folder)
        args = ["check", "--format", "json", "--no-plugins", "--fail-on", rng.choice(["never", "info", "error"])]
        if rng.random() < 0.15:
            args += ["--filter-time", rng.choice(["0s/1s", "1ms/", "/5ms", "0/0"])]
        if rng.random() < 0.05:
            args += ["--max-memory", rng.choice(["1K", "17M", "64M", "1G"])]
        run = run_cli_inprocess(*args, *select, str(path))
        data = check_run(run)
        if run.code in (0, 1, 4) and rng.random() < 0.2:
            # The human formats (markdown/html also build the steady-state profile) and SARIF.
            fmt = rng.choice(["table", "table", "markdown", "html", "sarif"])
            other = run_cli_inprocess("check", "--format", fmt, "--no-plugins", "--fail-on", "never", *select,
                                      str(path))
            check_run(other, json_output=False)
            assert other.code in (0, 4) and other.stdout, (fmt, other.code, other.stderr[-500:])
            if fmt == "sarif":
                strict_json(other.stdout)
        if run.code != 3 and rng.random() < 0.15:
            report = rng.choice(["cuda_gpu_kern_sum", "cuda_gpu_kern_sum:mangled", "cuda_api_sum", "cuda_kern_exec_sum",
                                 "cuda_gpu_mem_time_sum", "cuda_gpu_mem_size_sum", "nvtx_sum"])
            fmt = rng.choice(["table", "csv", "json"])
            stats = run_cli_inprocess("stats", "--report", report, "--format", fmt, str(path))
            check_run(stats, json_output=False)
            if stats.code == 0 and fmt == "json":
                strict_json(stats.stdout)
        if run.code != 3:
            _sweep_loader(path)
        assert digest(path) == before, "the input file changed"
        assert folder_listing(folder) == listing, f"files left beside the input: {folder_listing(folder)}"
    errors = [e.get("rule", e.get("plugin", "?")) + ": " + e.get("error", "") for e in (data or {}).get("errors", [])]
    notes = sum(len(t.get("damage", [])) for t in (data or {}).get("traces", []))
    return CaseResult(family, seed, damage, run.code, notes, errors)


def _sweep_loader(path: Path) -> None:
    """Read every canonical table with every column: a damaged file may raise InputError, nothing else."""
    from nsys_rules.errors import InputError
    from nsys_rules.loaders.sqlite import SqliteExport
    from nsys_rules.loaders.tables import TABLES
    from nsys_rules.model.trace import Trace

    try:
        trace = Trace(SqliteExport(path))
    except InputError:
        return
    try:
        for name, table in TABLES.items():
            frame = trace.frame(name)
            assert list(frame.columns) == list(table.column_names)
            if "start" in frame and "end" in frame and len(frame):
                assert (frame["end"] >= frame["start"]).all(), f"{name}: a row ends before it starts"
                assert (frame["start"] != -1).all(), f"{name}: an unknown start time was kept"
                assert int((frame["end"] - frame["start"]).sum()) >= 0, f"{name}: durations overflow"
    except InputError:
        pass
    finally:
        trace.close()


def tally(results: list[CaseResult]) -> dict[str, Counter]:
    """Exit codes overall and per family."""
    out: dict[str, Counter] = {"all": Counter(r.code for r in results)}
    for family in FAMILIES:
        out[family] = Counter(r.code for r in results if r.family == family)
    return out
