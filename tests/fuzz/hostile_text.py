"""Hostile text for names and command lines, and the checks every output must pass with it.

Shared by the ``names`` fuzz family (:mod:`tests.fuzz.cases`) and the escaping property tests.
A piece is drawn from shell payloads, terminal controls, bidi marks, Markdown/HTML markup,
spreadsheet formulas and plain words, so one name can hold several attacks at once.
"""

from __future__ import annotations

import os
import random
import re
import subprocess
from pathlib import Path

PIECES = (
    "$(touch${IFS}PWNED)", "`touch PWNED`", ";touch PWNED;", "&& touch PWNED", "| tee PWNED", "> PWNED", "'", '"',
    "\\", "\n", "\r", "\t", "\x1b[2J", "\x1b]0;t\x07", "\x00", "\x7f", "\x9b", "\u202e", "\u2066", "\u200b", "\ufeff",
    "![i](http://evil.example/i.png)", "[l](javascript:alert(1))", "<img src=x onerror=alert(1)>", "<script>", "@octocat",
    "#12", "www.evil.example", "https://evil.example/", "|", "*", "_", "~", "$x$", "=SUM(A1)", "+1", "-1", "@x", "é", "漢",
    "🙂", "gemv", "decode_step", "target/debug/app", "cargo", "run", "--bin", " ", "/", ".", "%s", "{}", "${HOME}",
)

#: What no terminal-bound output may hold: C0 controls but tab and newline, DEL, C1, bidi/invisible marks.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")
SPAN = re.compile(r"`([^`]+)`")


def hostile_text(rng: random.Random, pieces: int = 4) -> str:
    """A random name of ``pieces`` hostile pieces (never empty)."""
    return "".join(rng.choice(PIECES) for _ in range(max(1, pieces))) or "x"


def stub_path(folder: Path) -> dict[str, str]:
    """An environment whose PATH finds no-op nsys/cargo/cmake/python first (made in ``folder``)."""
    stubs = folder / "stubs"
    stubs.mkdir(exist_ok=True)
    for name in ("nsys", "nsys-rules", "cargo", "cmake", "python", "python3", "python3-dbg", "compute-sanitizer"):
        stub = stubs / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    return {"PATH": f"{stubs}:/usr/bin:/bin", "LC_ALL": "C.UTF-8"}


def paste(span: str, work: Path, env: dict[str, str]) -> list[str]:
    """Run ``span`` with bash in the empty folder ``work``; the names that appeared there."""
    subprocess.run(["bash", "-c", span], cwd=work, env={**env, "HOME": str(work)}, capture_output=True,
                   timeout=30, stdin=subprocess.DEVNULL)
    return sorted(os.listdir(work))


def live_markup(html: str) -> list[str]:
    """Tags in rendered Markdown that a trace name could have made live."""
    return re.findall(r"<(?:a|img|script|iframe|svg|style)\b", html)


def names_trace(rng: random.Random, path: Path) -> Path:
    """A small trace that fires command-building rules, with hostile text in every name it records."""
    from nsys_rules.testing import TraceBuilder

    program = rng.choice(["target/debug/", "cmake-build-debug/", "build/Debug/", "./", ""]) + hostile_text(rng, 2)
    command = [program] + [hostile_text(rng, rng.randint(1, 3)) for _ in range(rng.randint(0, 3))]
    if rng.random() < 0.3:
        command = ["cargo", "run", "--bin", hostile_text(rng, 2), "--", *command[1:]]
    b = TraceBuilder(command=command, graph_trace_mode=rng.choice(["Graph", "Node", None]),
                     environment=rng.choice([{}, {"CUDA_LAUNCH_BLOCKING": "1"}, {hostile_text(rng, 1): hostile_text(rng)}]))
    b.api("cudaFree_v3020", 100_000_000, 50_000_000)
    names = [hostile_text(rng, rng.randint(1, 5)) for _ in range(rng.randint(1, 4))]
    step = hostile_text(rng, rng.randint(1, 3))
    for i in range(rng.choice([4, 12])):
        s = 2_000_000_000 + i * 10_000_000
        b.nvtx(step, s, s + 9_000_000, registered=rng.random() < 0.5)
        for j, name in enumerate(names):
            b.kernel(name, s + 100_000 + j * 1_000_000, rng.choice([20_000, 900_000]) if i % 5 == 0 else 20_000)
        if rng.random() < 0.5:
            b.graph_launch(s + 8_000_000, 500_000)
    return b.write(path)


def run_names_case(seed: int, folder: Path) -> int:
    """One ``names`` fuzz case: check in table, markdown and json on a trace of hostile names.

    Asserts: no raw control character in the table or Markdown, no live markup when GitHub's
    renderer (cmark-gfm, if installed) renders the Markdown, and every backtick span of every
    recommendation, pasted into bash in an empty folder, creates nothing. Returns the exit code.
    """
    from tests.fuzz.harness import check_run, run_cli_inprocess

    rng = random.Random(f"names:{seed}")
    path = names_trace(rng, folder / f"t{hostile_text(rng, 1).replace('/', '_').replace(chr(0), '')[:40]}.sqlite")
    base = ("check", "--no-plugins", "--fail-on", "never")
    run = run_cli_inprocess(*base, "--format", "json", str(path))
    data = check_run(run)
    for fmt in ("table", "markdown"):
        text = run_cli_inprocess(*base, "--format", fmt, str(path)).stdout
        found = RAW_CONTROL.search(text)
        assert found is None, (fmt, repr(found.group()), seed)
        if fmt == "markdown":
            try:
                import cmarkgfm
                from cmarkgfm.cmark import Options
            except ImportError:
                continue
            html = cmarkgfm.github_flavored_markdown_to_html(text, options=Options.CMARK_OPT_UNSAFE)
            assert not live_markup(html), (live_markup(html), seed)
    work = folder / "work"
    work.mkdir()
    env = stub_path(folder)
    for finding in (data or {}).get("findings", []):
        for span in SPAN.findall(finding["recommendation"]):
            assert paste(span, work, env) == [], (span, seed)
    return run.code
