"""Suggested commands built from hostile traces run nothing when pasted.

Each trace records a command line (``PROCESS_0:COMMAND`` / ``ARGUMENT_n``), kernel and NVTX
names and even a file name that carry shell payloads (``$(...)``, backticks, ``;``, quotes,
newlines, bidi overrides). Every text inside backticks of every recommendation, the way a user copies
a suggestion, is run with ``bash -c`` in an empty folder, with the tools it names (nsys, cargo,
cmake, ...) replaced by no-ops: nothing may appear in the folder.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from nsys_rules.testing import TraceBuilder
from tests.fuzz.harness import check_run, run_cli_inprocess

PAYLOAD = "$(touch${IFS}PWNED)"
S = 1_000_000_000

#: Recorded command lines that reach each command-building path of debug-build, capture-scope,
#: graph-trace-hidden and launch-blocking.
COMMANDS = {
    "cargo-binary": [f"target/debug/x{PAYLOAD}", "--a;touch PWNED", "`touch PWNED`", "it's \"q\"\nnewline"],
    "cargo-triple": [f"target/x86_64-unknown-linux-gnu/debug/examples/ex{PAYLOAD}", "$(touch PWNED)"],
    "cargo-run": ["cargo", "run", "--bin", f"x{PAYLOAD}", "--", "a;touch PWNED", "`touch PWNED`"],
    "cargo-in-shell": ["bash", "-c", f"cargo run --bin x{PAYLOAD} -- `touch PWNED` 'a;touch PWNED'"],
    "cmake-program": [f"cmake-build-debug/app{PAYLOAD}", "x;touch PWNED"],
    "cmake-folder": [f"x{PAYLOAD}/build-debug/app"],
    "multi-config": [f"build{PAYLOAD}/Debug/app"],
    "sanitizer": ["compute-sanitizer", "--tool", "memcheck", f"./app{PAYLOAD}", "`touch PWNED`"],
    "python-dbg": ["python3-dbg", f"x{PAYLOAD}.py", "\u202e`touch PWNED`"],
    "plain": [f"./app{PAYLOAD}", "a\rb\x1b[2J`touch PWNED`"],
}

STUBS = ("nsys", "nsys-rules", "cargo", "cmake", "python", "python3", "python3-dbg", "compute-sanitizer")
_SPAN = re.compile(r"`([^`]+)`")


def hostile_trace(path: Path, command: list[str]) -> Path:
    """Loading before the steps (capture-scope), graph-mode replays (graph-trace-hidden),
    CUDA_LAUNCH_BLOCKING=1 (launch-blocking), the command (debug-build); names with payloads."""
    b = TraceBuilder(command=command, graph_trace_mode="Graph", environment={"CUDA_LAUNCH_BLOCKING": "1"})
    b.api("cudaFree_v3020", S // 10, 100_000_000)
    for i in range(12):
        s = 3 * S + i * 10_000_000
        b.nvtx(f"decode_step{PAYLOAD}`touch PWNED`", s, s + 9_900_000)
        b.kernel(f"gemv{PAYLOAD};touch PWNED`touch PWNED`", start=s + 100_000, duration=5_000_000)
        b.graph_launch(s + 6_000_000, 1_000_000)
    return b.write(path)


def suggestions(finding: dict) -> list[str]:
    """Every backtick span of a finding's recommendation: what a user copies and pastes."""
    return _SPAN.findall(finding["recommendation"])


@pytest.fixture
def sandbox(tmp_path):
    """(empty work folder, environment whose PATH finds no-op stubs before the real tools)."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    for name in STUBS:
        stub = stubs / name
        stub.write_text("#!/bin/sh\nexit 0\n")
        stub.chmod(0o755)
    work = tmp_path / "work"
    work.mkdir()
    env = {"PATH": f"{stubs}:/usr/bin:/bin", "HOME": str(work), "LC_ALL": "C.UTF-8"}
    return work, env


def run_pasted(span: str, work: Path, env: dict[str, str]) -> None:
    subprocess.run(["bash", "-c", span], cwd=work, env=env, capture_output=True, timeout=30, stdin=subprocess.DEVNULL)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash to paste the suggestions into")
@pytest.mark.parametrize("case", sorted(COMMANDS))
def test_pasting_any_suggestion_runs_nothing(tmp_path, sandbox, case):
    work, env = sandbox
    folder = tmp_path / f"traces{PAYLOAD}"
    folder.mkdir()
    path = hostile_trace(folder / f"run{PAYLOAD}.sqlite", COMMANDS[case])
    data = check_run(run_cli_inprocess("check", "--format", "json", "--fail-on", "never", "--no-plugins", str(path)))
    assert data is not None
    rules = {f["rule"] for f in data["findings"]}
    assert {"graph-trace-hidden", "launch-blocking", "capture-scope"} <= rules, rules
    if case != "plain":
        assert "debug-build" in rules, (case, rules)
    spans = [s for f in data["findings"] for s in suggestions(f)]
    assert any(s.startswith("nsys profile") for s in spans)
    for span in spans:
        run_pasted(span, work, env)
        assert os.listdir(work) == [], (case, span, os.listdir(work))


def test_release_suggestions_keep_the_program_and_its_arguments(tmp_path, sandbox):
    """Quoting changes how a word is written, not what it is: bash reads back the recorded arguments."""
    work, env = sandbox
    command = COMMANDS["cargo-binary"]
    data = check_run(run_cli_inprocess("check", "--format", "json", "--fail-on", "never", "--no-plugins",
                                       "--select", "debug-build", str(hostile_trace(tmp_path / "t.sqlite", command))))
    (finding,) = data["findings"]
    spans = suggestions(finding)
    build = next(s for s in spans if s.startswith("cargo build"))
    assert build == f"cargo build --release --bin 'x{PAYLOAD}'"
    recapture = next(s for s in spans if s.startswith("nsys profile") and "cargo run" not in s)
    echo = work.parent / "stubs" / "nsys"
    echo.write_text('#!/bin/sh\nfor a in "$@"; do printf "%s\\0" "$a"; done\n')
    words = subprocess.run(["bash", "-c", recapture], cwd=work, env=env, capture_output=True, timeout=30).stdout
    args = words.decode().split("\0")[:-1]
    assert args[-4:] == [f"target/release/x{PAYLOAD}", *command[1:]]


def test_an_argument_holding_a_shell_command_stays_one_word(tmp_path):
    from nsys_rules.model.commands import command_evidence

    evidence = command_evidence(("bash", "-c", "cargo run --bin app -- 'two words'", "two  spaces"))
    assert evidence is not None
    # The changed shell command is re-joined inside one word; an untouched argument is quoted as recorded.
    assert evidence.release_command == "bash -c 'cargo run -r --bin app -- '\"'\"'two words'\"'\"'' 'two  spaces'"
