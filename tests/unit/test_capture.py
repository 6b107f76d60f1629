"""The capture pieces on their own: names, output globs, nsys lookup, `nsys status -e` and ldd parsing."""

from __future__ import annotations

import os
import sys

import pytest

from nsys_rules import capture, nsys_locate
from nsys_rules.commands.profile import program_lines
from nsys_rules.nsys_status import explain, explain_status, parse_status

# `nsys status -e` as nsys printed it up to about 2022 (verdicts on most lines).
OLD_STATUS = """Sampling Environment Check
Linux Kernel Paranoid Level = 3: Fail
Linux Distribution = Ubuntu
Linux Kernel Version = 4.15.0-109-generic: OK
Linux perf_event_open syscall available: OK
Sampling trigger event available: Fail
Intel(c) Last Branch Record support: Available
Sampling Environment: Fail
"""


@pytest.mark.parametrize("command,name", [
    (["cargo", "run", "-r", "--bin", "bench_serving", "--", "request"], "bench_serving"),
    (["cargo", "run", "--release", "--example=decode"], "decode"),
    (["cargo", "run", "-r", "--", "--bin", "x"], "cargo"),  # after `--`: the program's flags
    (["python3", "llm.py", "decode", "--steps", "24"], "llm"),
    (["env", "CUDA_VISIBLE_DEVICES=1", "torchrun", "--nproc-per-node", "2", "train/run.py"], "run"),
    (["python", "-m", "vllm.entrypoints.cli", "bench"], "cli"),
    (["./target/release/bench serving"], "bench_serving"),
    (["RANK=0", "/opt/app/engine"], "engine"),
    (["..."], "profile"),
])
def test_default_name(command, name):
    assert capture.default_name(command) == name


def test_output_names_and_globs():
    assert capture.normalize_output("runs/x.nsys-rep") == "runs/x"
    assert capture.normalize_output("runs/x.sqlite") == "runs/x"
    assert capture.normalize_output(".sqlite") == ".sqlite"
    assert capture.output_glob("runs/rank%q{RANK}_%h_%p") == "runs/rank*_*_*"
    # Each rank's own RANK: rank 1 must not pick up rank 10's report.
    assert capture.output_glob("runs/rank%q{RANK}_%q{UNSET}", {"RANK": "1"}) == "runs/rank1_*"
    assert capture.output_glob("runs/x", repeat=True) == "runs/x*"
    assert capture.output_glob("runs/[a]100%%") == "runs/[[]a]100%"  # glob characters in the name are literal


def test_written_files_only_those_of_this_run(tmp_path):
    old = tmp_path / "decode_old.sqlite"
    old.write_text("x")
    os.utime(old, (1_000_000, 1_000_000))
    new = tmp_path / "decode.sqlite"
    new.write_text("x")
    (tmp_path / "decode2.sqlite").write_text("x")  # another report of this run, not of this name
    assert capture.written_files(str(tmp_path / "decode"), ".sqlite", since=2_000_000) == [new]
    assert capture.written_files(str(tmp_path / "decode*"), ".sqlite", since=2_000_000) == [new, tmp_path / "decode2.sqlite"]


def test_command_file_refuses_flags_with_spaces():
    from nsys_rules.errors import UsageError

    with pytest.raises(UsageError):
        capture.command_file_text(capture.CaptureOptions(output="x", extra=("--env-var=A=b c",)))


def test_trace_without_cuda_is_a_warning():
    assert capture.trace_problem("cuda,nvtx") is None
    problem = capture.trace_problem("nvtx,osrt")
    assert problem is not None and problem.exit_code is None and problem.fix == "--trace=cuda,nvtx,osrt"


def test_debug_build_stop_uses_the_rule_reading_of_the_command():
    assert capture.debug_build_problem(["cargo", "run", "-qr"], {}) is None
    assert capture.debug_build_problem(["cargo", "run", "--bin", "x"], {"CARGO_PROFILE_DEV_OPT_LEVEL": "3"}) is None
    stop = capture.debug_build_problem(["compute-sanitizer", "./app", "-n", "3"], {})
    assert stop is not None and stop.exit_code == 2 and "nsys-rules profile -- ./app -n 3" in stop.fix
    stop = capture.debug_build_problem(["target/debug/bench_serving", "request"], {})
    assert stop is not None and "cargo build --release --bin bench_serving" in stop.fix


def _executable(path):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(f"#!{sys.executable}\n")
    path.chmod(0o755)
    return path


def test_locate_prefers_path_then_the_newest_install(tmp_path):
    old = _executable(tmp_path / "opt/nvidia/nsight-systems/2024.10.1/bin/nsys")
    new = _executable(tmp_path / "opt/nvidia/nsight-systems/2025.3.1/bin/nsys")
    (tmp_path / "opt/nvidia/nsight-systems/2026.1.1/bin").mkdir(parents=True)  # an empty folder is no install
    places = [str(tmp_path / "usr/local/cuda/bin/nsys"), str(tmp_path / "opt/nvidia/nsight-systems*/*/bin/nsys")]
    found = nsys_locate.locate_nsys(environ={"PATH": str(tmp_path / "empty")}, places=places)
    assert found.path == new and found.source == "standard place" and not found.on_path
    assert found.path_fix() == f"export PATH={new.parent}:$PATH"
    on_path = nsys_locate.locate_nsys(environ={"PATH": str(old.parent)}, places=places)
    assert on_path.path == old and on_path.on_path and nsys_locate.off_path_note(on_path) is None
    by_env = nsys_locate.locate_nsys(environ={"PATH": "", nsys_locate.NSYS_ENV: str(old)}, places=places)
    assert by_env.path == old and by_env.source == "$NSYS_RULES_NSYS" and nsys_locate.off_path_note(by_env) is None
    assert f"using {new}" in (nsys_locate.off_path_note(found) or "")
    missing = nsys_locate.locate_nsys(environ={"PATH": ""}, places=places[:1])
    assert missing.path is None
    message = nsys_locate.missing_message(missing)
    assert message.startswith(f"nsys not found (looked on PATH and in {tmp_path}/usr/local/cuda/bin)")


def test_parse_status_old_layout():
    lines = parse_status(OLD_STATUS)
    assert [(line.key, line.verdict) for line in lines][:2] == [("Linux Kernel Paranoid Level", "Fail"),
                                                              ("Linux Distribution", "")]
    explained = {line.key: e for line in lines if (e := explain(line)) is not None}
    assert set(explained) == {"Linux Kernel Paranoid Level", "Sampling trigger event available", "Sampling Environment"}
    assert all(e.level == "warn" and e.topic == "status -e" for e in explained.values())
    assert explained["Linux Kernel Paranoid Level"].text.startswith("Linux Kernel Paranoid Level = 3: perf_event_paranoid is 3")
    items = explain_status(OLD_STATUS, 0)  # the explained checks, then the count of those read
    assert items[:-1] == list(explained.values())
    assert items[-1].text == f"{len(lines)} checks read: CPU sampling is limited; CUDA and NVTX tracing work"


def test_paranoid_level_without_a_verdict_is_judged_by_its_number():
    [ok] = parse_status("Linux Kernel Paranoid Level = 2")
    [bad] = parse_status("Linux Kernel Paranoid Level = 4")
    assert explain(ok) is None and explain(bad) is not None and explain(bad).level == "warn"


def test_unknown_failed_check_is_still_shown():
    [line] = parse_status("Frobnicator available: Fail")
    e = explain(line)
    assert e is not None and e.level == "warn" and "Installation Guide" in e.fix


def test_parse_ldd():
    text = "\tlinux-vdso.so.1 (0x00007ffd)\n\tlibdw.so.1 => not found\n\tlibelf.so.1 => not found\n" \
           "\tlibc.so.6 => /lib/x86_64-linux-gnu/libc.so.6 (0x00007f)\n"
    assert nsys_locate.parse_ldd(text) == ["libdw.so.1", "libelf.so.1"]


def test_program_lines_leave_out_nsys_progress():
    lines = ["loading", "CUDA error: out of memory", "Collecting data...",
             "Generating '/tmp/nsys-report-1f2e.qdstrm'", "[1/2] [========100%] x.nsys-rep",
             "Generated:", "    /work/target/profiling/x.nsys-rep"]
    assert program_lines(lines) == ["loading", "CUDA error: out of memory"]
