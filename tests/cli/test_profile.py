"""``nsys-rules profile`` end to end against a fake nsys on PATH (tests/cli/fake_nsys.py): no GPU needed."""

from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import pytest

from nsys_rules import nsys_locate
from nsys_rules.capture import default_name
from nsys_rules.cli import main
from tests.cli.fake_tools import FakeTools, tools
from tests.conftest import validate_report

FOUR_FLAGS = ["--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite", "-o"]
PY = sys.executable
PY_NAME = default_name([PY, "-c", "pass"])


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeTools:
    return tools(tmp_path, monkeypatch)


@pytest.fixture
def no_nsys(tmp_path, monkeypatch) -> FakeTools:
    return tools(tmp_path, monkeypatch, with_nsys=False)


def profile_calls(fake: FakeTools) -> list[list[str]]:
    return [c for c in fake.calls() if c[:1] == ["profile"]]


# -- preflight and --dry-run ----------------------------------------------------------------------
def test_dry_run_stops_on_cargo_run_without_release(no_nsys, capsys):
    rc = main(["profile", "--dry-run", "--", "cargo", "run", "--bin", "bench_serving", "--", "request"])
    out, err = capsys.readouterr()
    assert rc == 2
    assert "nsys-rules profile -- cargo run -r --bin bench_serving -- request" in err
    assert "--allow-debug" in err and "preflight: stops (exit 2)" in err
    assert "Traceback" not in err


def test_dry_run_with_release_prints_the_standard_command(fake, capsys):
    rc = main(["profile", "--dry-run", "--", "cargo", "run", "-r", "--bin", "bench_serving", "--", "request"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [line] = out.splitlines()
    argv = shlex.split(line)
    assert argv == [str(fake.nsys), "profile", "--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite",
                    "--trace=cuda,nvtx", "-o", "target/profiling/bench_serving",
                    "cargo", "run", "-r", "--bin", "bench_serving", "--", "request"]
    assert "preflight: ok" in err
    assert profile_calls(fake) == []  # a dry run runs nothing


def test_dry_run_without_nsys_still_prints_the_command_and_exits_3(no_nsys, capsys, tmp_path):
    rc = main(["profile", "--dry-run", "--", PY, "bench.py"])
    out, err = capsys.readouterr()
    assert rc == 3
    assert shlex.split(out)[:2] == ["nsys", "profile"]
    assert f"nsys not found (looked on PATH and in {tmp_path}/usr/local/cuda/bin)" in err and "export PATH=" in err


def test_the_program_and_its_arguments_are_quoted_as_data(fake, capsys):
    hostile = "x'; rm -rf ~; echo '$(id)"
    rc = main(["profile", "--dry-run", "--", PY, "-c", "print(1)", hostile, "--debug"])
    out, _ = capsys.readouterr()
    assert rc == 0
    assert shlex.split(out)[-5:] == [PY, "-c", "print(1)", hostile, "--debug"]  # --debug after -- is the program's


def test_capture_range_delay_duration_and_extra_flags(fake, capsys):
    rc = main(["profile", "--dry-run", "--profiler-range", "repeat:3", "--delay", "5", "--duration", "10",
               "--trace", "cuda,nvtx,osrt", "--nsys-arg=--cuda-memory-usage=true", "-o", "runs/decode.nsys-rep",
               "--", PY, "llm.py"])
    out, _ = capsys.readouterr()
    assert rc == 0
    argv = shlex.split(out)
    assert argv[2:14] == ["--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite",
                          "--trace=cuda,nvtx,osrt", "-c", "cudaProfilerApi", "--capture-range-end=repeat:3",
                          "--delay=5", "--duration=10", "--cuda-memory-usage=true", "-o", "runs/decode"]
    assert main(["profile", "--dry-run", "--profiler-range", "--", PY, "x.py"]) == 0
    assert "--capture-range-end=stop" in shlex.split(capsys.readouterr().out)


@pytest.mark.parametrize("argv", [
    ["--profiler-range", "sometimes", "--", PY],
    ["--profiler-range", PY, "x.py"],      # the program taken for END: say how to write it
    ["--delay", "-1", "--", PY],
    ["--select", "no-such-rule", "--", PY, "-c", "pass"],  # check flags are checked before the capture
    ["--format", "nope", "--", PY, "-c", "pass"],
    [],
    ["--"],
])
def test_usage_errors_exit_2_before_anything_runs(fake, capsys, argv):
    assert main(["profile", *argv]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err
    assert profile_calls(fake) == []


def test_environment_that_spoils_the_trace_is_a_warning(fake, capsys, monkeypatch):
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "1")
    rc = main(["profile", "--dry-run", "--", "env", "PYTORCH_NO_CUDA_MEMORY_CACHING=1", PY, "serve.py"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "warning: CUDA_LAUNCH_BLOCKING=1 is set" in err and "unset CUDA_LAUNCH_BLOCKING" in err
    assert "warning: PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set" in err
    monkeypatch.setenv("CUDA_LAUNCH_BLOCKING", "0")
    main(["profile", "--dry-run", "--", PY, "serve.py"])
    assert "CUDA_LAUNCH_BLOCKING" not in capsys.readouterr().err


def test_command_file_holds_the_flags(fake, capsys):
    rc = main(["profile", "--dry-run", "--profiler-range", "--command-file", "decode.nsys", "--", PY, "x.py"])
    assert rc == 0
    assert (fake.work / "decode.nsys").read_text().splitlines() == [
        "--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite", "--trace=cuda,nvtx",
        "--capture-range=cudaProfilerApi", "--capture-range-end=stop"]
    assert "nsys profile --command-file=decode.nsys -o target/profiling/x CMD" in capsys.readouterr().err


def _profile_in_thread(argv: list[str], unblock: Path | None = None, seconds: float = 20) -> int:
    """``main(argv)`` in a thread: a write that blocks (a FIFO opened for writing) fails the test instead of
    hanging it; ``unblock`` (the FIFO) is opened for reading to set the thread free."""
    import os
    import threading

    box: dict[str, int] = {}
    worker = threading.Thread(target=lambda: box.setdefault("rc", main(argv)), daemon=True)
    worker.start()
    worker.join(seconds)
    if worker.is_alive():
        if unblock is not None:
            os.close(os.open(unblock, os.O_RDONLY | os.O_NONBLOCK))
        worker.join(5)
        pytest.fail(f"profile {argv} blocked for {seconds} s")
    return box["rc"]


@pytest.mark.parametrize("dry_run", [True, False])
def test_command_file_over_a_sqlite_export_is_refused(fake, capsys, tmp_path, dry_run):
    from nsys_rules.testing import TraceBuilder

    builder = TraceBuilder()
    builder.kernel("k", 0, 10)
    trace = builder.write(fake.work / "old.sqlite")
    before = trace.read_bytes()
    rc = main(["profile", *(["--dry-run"] if dry_run else []), "--command-file", str(trace), "--", PY, "x.py"])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("\n") == 1 and "--command-file" in err and "is a SQLite database" in err, err
    assert trace.read_bytes() == before
    assert profile_calls(fake) == []


@pytest.mark.parametrize("name", ["x.nsys-rep", "x.sqlite"])
def test_command_file_naming_the_report_this_capture_writes_is_refused(fake, capsys, name):
    rc = main(["profile", "-o", "x", "--command-file", name, "--", PY, "x.py"])
    err = capsys.readouterr().err
    assert rc == 2 and "is an input" in err, err
    assert not (fake.work / name).exists() and profile_calls(fake) == []


def test_command_file_inside_an_export_folder_or_being_a_folder_is_refused(fake, capsys):
    folder = fake.work / "run.parquetdir"
    folder.mkdir()
    (folder / "StringIds.parquet").write_bytes(b"PAR1")
    for target, needle in ((folder / "flags.txt", "inside an nsys export folder"), (folder, "is a folder")):
        assert main(["profile", "--dry-run", "--command-file", str(target), "--", PY, "x.py"]) == 2
        assert needle in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == ["StringIds.parquet"]


def test_command_file_on_a_fifo_is_refused_without_blocking(fake, capsys):
    import os

    fifo = fake.work / "flags.fifo"
    os.mkfifo(fifo)
    for dry in ([], ["--dry-run"]):
        rc = _profile_in_thread(["profile", *dry, "--command-file", str(fifo), "--", PY, "x.py"], unblock=fifo)
        err = capsys.readouterr().err
        assert rc == 2 and "not a regular file" in err, err
    assert profile_calls(fake) == []


def test_command_file_through_a_symlink_replaces_the_link_not_its_target(fake, capsys):
    target = fake.work / "notes.txt"
    target.write_text("keep me\n")
    link = fake.work / "flags.nsys"
    link.symlink_to(target)
    assert main(["profile", "--dry-run", "--command-file", str(link), "--", PY, "x.py"]) == 0
    assert target.read_text() == "keep me\n"
    assert not link.is_symlink() and link.read_text().startswith("--force-overwrite=true\n")
    # A link to an export is refused like the export itself.
    trace = fake.work / "t.sqlite"
    from nsys_rules.testing import TraceBuilder

    builder = TraceBuilder()
    builder.kernel("k", 0, 10)
    builder.write(trace)
    (fake.work / "to-trace.nsys").symlink_to(trace)
    assert main(["profile", "--dry-run", "--command-file", str(fake.work / "to-trace.nsys"), "--", PY, "x.py"]) == 2
    assert "is a SQLite database" in capsys.readouterr().err


def test_command_file_equal_to_another_output_or_the_config_is_refused(fake, capsys):
    (fake.work / "nsys-rules.toml").write_text('fail-on = "warning"\n')
    assert main(["profile", "--dry-run", "--command-file", "nsys-rules.toml", "--", PY, "x.py"]) == 2
    assert "is an input" in capsys.readouterr().err
    assert (fake.work / "nsys-rules.toml").read_text() == 'fail-on = "warning"\n'
    assert main(["profile", "--dry-run", "--html", "r.html", "--command-file", "r.html", "--", PY, "x.py"]) == 2
    err = capsys.readouterr().err
    assert "--html r.html is also the --command-file output" in err, err


def test_command_file_is_written_atomically_and_the_dry_run_line_says_so(fake, capsys, monkeypatch):
    from nsys_rules import outpaths

    (fake.work / "flags.nsys").write_text("old flags\n")

    def fail(*args):
        raise OSError(28, "No space left on device")

    with monkeypatch.context() as patch:
        patch.setattr(outpaths.os, "fsync", fail)
        assert main(["profile", "--dry-run", "--command-file", "flags.nsys", "--", PY, "x.py"]) == 2
    assert "No space left on device" in capsys.readouterr().err
    assert (fake.work / "flags.nsys").read_text() == "old flags\n"  # the old file whole, no temporary left
    assert sorted(p.name for p in fake.work.iterdir()) == ["flags.nsys"]
    assert main(["profile", "--dry-run", "--command-file", "flags.nsys", "--", PY, "x.py"]) == 0
    assert "--dry-run: nothing run; the one file written is the command file flags.nsys" in capsys.readouterr().err


# -- the capture and the check ------------------------------------------------------------------
def test_profile_captures_then_checks_the_export(fake, capsys):
    rc = main(["profile", "--format", "json", "--fail-on", "never", "--html", "report.html", "--",
               PY, "-c", "print('decoding 8 steps')"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [call] = profile_calls(fake)
    assert call[1:8] == ["--force-overwrite=true", "--cuda-graph-trace=node", "--export=sqlite",
                         "--trace=cuda,nvtx", "-o", f"target/profiling/{PY_NAME}", PY]
    assert "decoding 8 steps" in err  # the program's output goes to stderr, the report to stdout
    report = validate_report(out)
    [trace] = report["traces"]
    assert trace["path"] == f"target/profiling/{PY_NAME}.sqlite"
    assert trace["tables"]["kernels"] == 24
    # Node mode (the standard flag): the replays' kernels are in the trace, only the node-mode note remains.
    [graph] = [f for f in report["findings"] if f["rule"] == "graph-trace-hidden"]
    assert graph["severity"] == "info"
    assert "<html" in (fake.work / "report.html").read_text()
    # The capture just made is judged before its findings (issue 38): its verdict is said on stderr.
    assert trace["validity"]["verdict"] == "trusted"
    assert f"nsys-rules: capture target/profiling/{PY_NAME}.sqlite: trusted" in err


PYTHON_FLAGS = ["--sample=process-tree", "--python-sampling=true", "--python-backtrace=cuda",
                "--cudabacktrace=sync:0,memory:0"]


def test_dry_run_python_prints_the_capture_and_the_export_with_payloads(fake, capsys):
    rc = main(["profile", "--dry-run", "--python", "-o", "runs/train", "--", "python3", "train.py"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    capture_line, export_line = out.splitlines()
    assert shlex.split(capture_line) == [str(fake.nsys), "profile", "--force-overwrite=true", "--cuda-graph-trace=node",
                                         "--trace=cuda,nvtx", *PYTHON_FLAGS, "-o", "runs/train", "python3", "train.py"]
    # No --export=sqlite in the capture: nsys's own export would leave the Python frames out.
    assert shlex.split(export_line) == [str(fake.nsys), "export", "--type=sqlite", "--include-blobs=true",
                                        "--force-overwrite=true", "-o", "runs/train.sqlite", "runs/train.nsys-rep"]
    assert not [c for c in fake.calls() if c[:1] in (["profile"], ["export"])]  # a dry run runs nothing


def test_profile_python_exports_with_payloads_then_checks(fake, capsys):
    rc = main(["profile", "--python", "--format", "json", "--fail-on", "never", "--", PY, "-c", "print('training')"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [call] = profile_calls(fake)
    assert call[1:9] == ["--force-overwrite=true", "--cuda-graph-trace=node", "--trace=cuda,nvtx", *PYTHON_FLAGS,
                         "-o"]
    [export] = [c for c in fake.calls() if c[:1] == ["export"]]
    assert export == ["export", "--type=sqlite", "--include-blobs=true", "--force-overwrite=true", "-o",
                      f"target/profiling/{PY_NAME}.sqlite", f"target/profiling/{PY_NAME}.nsys-rep"]
    assert "training" in err and "exporting: " in err
    [trace] = validate_report(out)["traces"]
    assert trace["path"] == f"target/profiling/{PY_NAME}.sqlite"


def test_profile_python_export_failure_is_said(fake, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_EXPORT_FAIL", "1")
    rc = main(["profile", "--python", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert "`nsys export` exited with code 1; the report is checked without its Python frames" in err
    assert "fake nsys: export failed" in err
    assert rc == 3  # the report then goes through check's own export, which fails the same way


def test_allow_debug_profiles_the_debug_build_and_check_flags_it(fake, capsys):
    fake.add_script("app", "print('debug build running')\n", fake.work / "target" / "debug")
    assert main(["profile", "--", "target/debug/app"]) == 2
    assert profile_calls(fake) == []
    capsys.readouterr()
    rc = main(["profile", "--allow-debug", "--format", "json", "--fail-on", "error", "--", "target/debug/app"])
    out, err = capsys.readouterr()
    assert rc == 1, err  # the debug-build finding is an error
    assert "warning: the program `target/debug/app` is a cargo dev-profile (debug) binary" in err
    [finding] = [f for f in json.loads(out)["findings"] if f["rule"] == "debug-build"]
    assert finding["severity"] == "error" and "target/release/app" in finding["recommendation"]


def test_program_failure_shows_its_exit_code_and_last_lines_and_checks_the_partial_trace(fake, capsys):
    script = "import sys; print('loading weights'); print('CUDA error: out of memory', file=sys.stderr); sys.exit(7)"
    rc = main(["profile", "--", PY, "-c", script])
    out, err = capsys.readouterr()
    assert rc == 4
    assert "the profiled program failed: `nsys profile` exited with code 7" in err
    assert "  | CUDA error: out of memory" in err and "  | loading weights" in err
    assert "Traceback" not in err
    assert "Generated:" not in err.split("its last lines:")[1].split("partial trace")[0]  # nsys's own lines left out
    assert "nsys wrote a partial trace; checking it" in err
    assert f"target/profiling/{PY_NAME}.sqlite" in out  # the report of the partial trace


def test_program_failing_before_anything_was_recorded(fake, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_EXPORT", "nothing")
    rc = main(["profile", "--", PY, "-c", "raise SystemExit(3)"])
    err = capsys.readouterr().err
    assert rc == 4 and "exited with code 3" in err and "no trace was written" in err


def test_recording_that_never_became_a_report_exits_3_and_points_at_doctor(fake, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_EXPORT", "qdstrm")
    for name, program in ((PY_NAME, "pass"), (f"{PY_NAME}-2", "raise SystemExit(2)")):  # the importer's failure wins
        rc = main(["profile", "--", PY, "-c", program])  # the second run: the first's .qdstrm exists, a fresh name
        out, err = capsys.readouterr()
        assert rc == 3 and out == ""
        assert f"nsys recorded target/profiling/{name}.qdstrm but could not turn it into a report" in err
        assert "  | Importer error status: Importation failed." in err
        assert "run `nsys-rules doctor` to see what this nsys lacks" in err


def test_export_missing_without_any_recording_exits_3(fake, capsys, monkeypatch):
    monkeypatch.setenv("FAKE_NSYS_NO_EXPORT", "nothing")
    rc = main(["profile", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3
    assert f"nsys finished but wrote no export (looked for target/profiling/{PY_NAME}.sqlite)" in err
    assert "nsys-rules doctor" in err


def test_missing_nsys_exits_3_with_where_it_looked(no_nsys, capsys):
    rc = main(["profile", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3
    assert "stop: nsys not found (looked on PATH and in" in err and "export PATH=" in err


def test_name_patterns_for_one_report_per_rank(fake, capsys, monkeypatch):
    monkeypatch.setenv("RANK", "3")
    rc = main(["profile", "-o", "runs/rank%q{RANK}_%p", "--format", "json", "--fail-on", "never", "--",
               PY, "-c", "pass"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    [trace] = json.loads(out)["traces"]
    assert Path(trace["path"]).parent == Path("runs")
    name = Path(trace["path"]).name
    assert name.startswith("rank3_") and name.endswith(".sqlite") and name[6:-7].isdigit()


def test_nsys_off_path_is_used_and_the_path_fix_shown(fake, capsys, monkeypatch, tmp_path):
    install = tmp_path / "opt" / "nvidia" / "nsight-systems" / "2025.3.1" / "bin"
    fake.nsys.unlink()
    fake.install_nsys(install)
    monkeypatch.setattr(nsys_locate, "STANDARD_PLACES", (str(tmp_path / "opt/nvidia/nsight-systems*/*/bin/nsys"),))
    rc = main(["profile", "--format", "json", "--fail-on", "never", "--", PY, "-c", "pass"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert f"nsys is not on PATH; using {install / 'nsys'}" in err and f"export PATH={install}:$PATH" in err
    assert len(profile_calls(fake)) == 1


# -- check TRACE.nsys-rep finds nsys the same way ------------------------------------------------
def test_check_nsys_rep_exports_through_an_nsys_off_path(fake, capsys, monkeypatch, tmp_path):
    install = tmp_path / "usr" / "local" / "cuda" / "bin"
    fake.nsys.unlink()
    fake.install_nsys(install)  # the one standard place tools() set up
    (fake.work / "run.nsys-rep").write_bytes(b"report")
    rc = main(["check", "--format", "json", "--fail-on", "never", "run.nsys-rep"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert json.loads(out)["traces"][0]["tables"]["kernels"] == 24
    assert [c[:2] for c in fake.calls()] == [["export", "--type=sqlite"]]
    assert sorted(p.name for p in fake.work.iterdir()) == ["run.nsys-rep"]  # nothing written beside it


def test_check_nsys_rep_without_nsys_says_where_it_looked(no_nsys, capsys, tmp_path):
    (no_nsys.work / "run.nsys-rep").write_bytes(b"report")
    assert main(["check", "run.nsys-rep"]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert f"nsys not found (looked on PATH and in {tmp_path}/usr/local/cuda/bin); install Nsight Systems" in err
    assert "nsys export --type=sqlite run.nsys-rep" in err


# -- GPU metrics ----------------------------------------------------------------------------------
def test_metrics_adds_the_gpu_metrics_flags(fake, capsys):
    rc = main(["profile", "--dry-run", "--metrics", "--", "python3", "decode.py"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    argv = shlex.split(out.splitlines()[0])
    assert "--gpu-metrics-devices=all" in argv and not any(a.startswith("--gpu-metrics-frequency") for a in argv)
    assert argv.index("--gpu-metrics-devices=all") < argv.index("-o")
    rc = main(["profile", "--dry-run", "--metrics-frequency", "20000", "--", "python3", "decode.py"])
    argv = shlex.split(capsys.readouterr().out.splitlines()[0])
    assert rc == 0 and "--gpu-metrics-devices=all" in argv and "--gpu-metrics-frequency=20000" in argv


@pytest.mark.parametrize("value", ["5", "300000", "fast"])
def test_metrics_frequency_outside_what_nsys_takes_is_a_usage_error(fake, capsys, value):
    assert main(["profile", "--dry-run", "--metrics-frequency", value, "--", "python3", "x.py"]) == 2
    assert "--metrics-frequency takes a whole number of Hz from 10 to 200000" in capsys.readouterr().err


def test_metrics_without_access_to_the_counters_stops_before_the_capture(fake, capsys, monkeypatch, tmp_path):
    listing = tmp_path / "help.txt"
    listing.write_text("Insufficient privilege to collect GPU Metrics, see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n")
    monkeypatch.setenv("FAKE_NSYS_GPU_METRICS", str(listing))
    rc = main(["profile", "--metrics", "--", PY, "-c", "pass"])
    err = capsys.readouterr().err
    assert rc == 3 and "no access to the GPU's performance counters" in err
    assert "NVreg_RestrictProfilingToAdminUsers=0" in err and "or profile without --metrics" in err
    assert [c for c in profile_calls(fake) if "--gpu-metrics-devices=help" not in c] == []


def test_profile_with_metrics_checks_the_measured_budget(fake, capsys):
    rc = main(["profile", "--metrics", "--format", "json", "--fail-on", "never", "--", PY, "-c", "pass"])
    out, err = capsys.readouterr()
    assert rc == 0, err
    calls = profile_calls(fake)
    assert calls[0] == ["profile", "--gpu-metrics-devices=help"]  # the preflight's look, then the capture
    assert "--gpu-metrics-devices=all" in calls[1]
    budget = validate_report(out)["traces"][0]["budget"]
    gemv = {p["name"]: p for p in budget["metrics"]["parts"]}["gemv"]
    assert gemv["pct"]["dram_read"] == pytest.approx(80, abs=2) and gemv["bound"] == "memory"
    [finding] = [f for f in validate_report(out)["findings"] if f["rule"] == "gemv-dominance"]
    assert "GEMV kernels read DRAM at" in finding["message"]
