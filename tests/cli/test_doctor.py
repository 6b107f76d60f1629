"""``nsys-rules doctor`` against fake nsys, nvidia-smi and ldd on a private PATH."""

from __future__ import annotations

import pytest

from nsys_rules import nsys_locate
from nsys_rules.cli import main
from nsys_rules.commands import doctor
from nsys_rules.nsys_locate import NsysLocation
from tests.cli.fake_tools import FakeTools, tools

FAILING_STATUS = """Timestamp counter supported: Yes

CPU Profiling Environment Check
Root privilege: disabled
Linux Kernel Paranoid Level = 4
Linux Distribution = Ubuntu
Linux Kernel Version = 6.8.0-45-generic: OK
Linux perf_event_open syscall available: Fail
Sampling trigger event available: Fail
Intel(c) Last Branch Record support: Not Available
CPU Profiling Environment (process-tree): Fail
CPU Profiling Environment (system-wide): Fail

See the product documentation at https://docs.nvidia.com/nsight-systems for more information,
including information on how to set the Linux Kernel Paranoid Level.
"""

REAL_PLACES = nsys_locate.STANDARD_PLACES
H200_SMI = "import sys\nprint('0, NVIDIA H200, 580.159.03, 143771')\n"


def flat(text: str) -> str:
    """The output with its wrapping undone (single spaces), for phrases that may cross a line end."""
    return " ".join(text.split())


@pytest.fixture
def fake(tmp_path, monkeypatch) -> FakeTools:
    return tools(tmp_path, monkeypatch)


def test_without_nsys_one_screen_with_where_it_looked_and_the_fix(tmp_path, monkeypatch, capsys):
    tools(tmp_path, monkeypatch, with_nsys=False)
    # The real list of places, moved under tmp_path (so an nsys installed here cannot be found), all shown.
    monkeypatch.setattr(nsys_locate, "STANDARD_PLACES", tuple(str(tmp_path / p.lstrip("/")) for p in REAL_PLACES))
    rc = main(["doctor"])
    out, err = capsys.readouterr()
    assert rc == 3 and err == ""
    lines = out.splitlines()
    assert len(lines) <= 20
    assert lines[0].startswith("FAIL  nsys        not found on PATH nor in")
    assert f"{tmp_path}/opt/nvidia/nsight-compute/*/host/target-linux-*" in out
    assert "export PATH=/opt/nvidia/nsight-systems/<version>/bin:$PATH" in [x.strip() for x in lines]  # whole
    assert flat("warn  GPU         nvidia-smi not found") in flat(out)
    assert lines[-1] == "verdict: profiling cannot work here (nsys): exit 3"
    # With the real places (not under tmp_path): one screen, 100 columns.
    text = doctor.render(doctor.nsys_items(NsysLocation(None, "", ("PATH", *REAL_PLACES))))
    assert len(text.splitlines()) <= 12 and max(len(line) for line in text.splitlines()) <= 100


def test_failed_status_checks_are_explained_with_their_fix(fake, capsys, monkeypatch, tmp_path):
    status = tmp_path / "status.txt"
    status.write_text(FAILING_STATUS)
    monkeypatch.setenv("FAKE_NSYS_STATUS", str(status))
    fake.add_script("nvidia-smi", H200_SMI)
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 0, out  # CPU sampling is off, but CUDA and NVTX tracing work: profiling can work
    assert flat(f"ok    nsys        {fake.nsys} (on PATH)") in flat(out)  # a long tmp path wraps
    assert flat("ok    version     2025.3.2.474-253236389321v0") in flat(out)
    assert flat("warn  status -e   Linux Kernel Paranoid Level = 4: perf_event_paranoid is 4") in flat(out)
    assert flat("fix: sudo sysctl -w kernel.perf_event_paranoid=2") in flat(out)
    assert "Linux perf_event_open syscall available: Fail: the kernel refuses perf_event_open" in flat(out)
    assert "--cap-add=SYS_ADMIN" in out and "--sample=none" in out
    assert flat("info  status -e   Intel(c) Last Branch Record support: Not Available") in flat(out)
    assert flat("info  status -e   10 checks read: CPU sampling is limited; CUDA and NVTX tracing work") in flat(out)
    assert flat("ok    GPU 0       NVIDIA H200, driver 580.159.03, 143771 MiB") in flat(out)
    assert out.rstrip().endswith("verdict: profiling can work here")


def test_passing_status_and_environment_warnings(fake, capsys, monkeypatch):
    monkeypatch.setenv("PYTORCH_NO_CUDA_MEMORY_CACHING", "1")
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 0
    assert flat("ok    status -e   10 checks read: CPU sampling works") in flat(out)
    assert flat("info  status -e   CPU Profiling Environment (system-wide): Fail: system-wide CPU sampling needs "
                "root") in flat(out)
    assert flat("warn  environment PYTORCH_NO_CUDA_MEMORY_CACHING=1 is set") in flat(out)


def test_nvidia_smi_that_cannot_reach_the_driver_fails(fake, capsys):
    fake.add_script("nvidia-smi", "import sys\nprint('NVIDIA-SMI has failed because it couldn\\'t communicate with "
                                  "the NVIDIA driver.')\nsys.exit(9)\n")
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 3
    assert flat("FAIL  GPU         nvidia-smi cannot reach the driver: NVIDIA-SMI has failed") in flat(out)
    assert "verdict: profiling cannot work here (GPU): exit 3" in out


@pytest.mark.parametrize("host_folder", ["host-linux-x64", "linux-desktop-glibc_2_11_3-x64"])
def test_importer_missing_libdw_fails_and_profile_warns(fake, capsys, tmp_path, host_folder):
    # Installs laid out as nsys ships (target-linux-x64/nsys beside host-linux-x64/QdstrmImporter)
    # and as the copy inside Nsight Compute (host/target-linux-x64/nsys beside
    # host/linux-desktop-glibc_2_11_3-x64/QdstrmImporter), where a real H200 machine missed libdw.
    root = tmp_path / "nsight"
    nsys = fake.install_nsys(root / "target-linux-x64")
    fake.add_script("QdstrmImporter", "pass\n", root / host_folder)
    fake.add_script("ldd", "import sys\nprint('\\tlinux-vdso.so.1 (0x00007ffc)')\n"
                           "print('\\tlibdw.so.1 => not found')\nprint('\\tlibc.so.6 => /lib/libc.so.6 (0x7f)')\n")
    rc = main(["doctor", "--nsys", str(nsys)])
    out = capsys.readouterr().out
    assert rc == 3
    importer = root / host_folder / "QdstrmImporter"
    assert flat(f"FAIL importer nsys's importer {importer} cannot load libdw.so.1") in flat(out)
    assert "sudo apt-get install libdw1 libelf1" in flat(out) and "LD_LIBRARY_PATH" in out
    assert flat(f"ok    nsys        {nsys} (from --nsys)") in flat(out)
    rc = main(["profile", "--dry-run", "--nsys", str(nsys), "--", "python3", "x.py"])
    err = capsys.readouterr().err
    assert rc == 0 and "warning: nsys's importer" in err and "cannot load libdw.so.1" in err


def test_explicit_nsys_that_does_not_exist(fake, capsys, tmp_path):
    rc = main(["doctor", "--nsys", str(tmp_path / "nope" / "nsys")])
    out = capsys.readouterr().out
    assert rc == 3 and f"--nsys {tmp_path}/nope/nsys is not an executable file" in flat(out)


def test_nsys_that_does_not_run(fake, capsys):
    fake.add_script("nsys", "import sys\nprint('error while loading shared libraries: libQt6Core.so.6', "
                            "file=sys.stderr)\nsys.exit(127)\n")
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 3
    assert flat("FAIL  version     nsys does not run:") in flat(out) and "exit code 127" in out and "libQt6Core" in out


# -- GPU metrics ----------------------------------------------------------------------------------
def test_gpu_metrics_that_can_be_sampled(fake, capsys):
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 0
    assert flat("ok    GPU metrics GPU metrics can be sampled on 0: Hopper GH100 | NVIDIA H200 PCI[0000:00:06.0]") \
        in flat(out)
    assert "nsys-rules profile --metrics -- CMD" in flat(out)


@pytest.mark.parametrize("listing,params,expected", [
    ("Insufficient privilege\nSee https://developer.nvidia.com/ERR_NVGPUCTRPERM\n", None, "nsys reports insufficient privilege"),
    (None, "Mobile: 4294967295\nRmProfilingAdminOnly: 1\n", "RmProfilingAdminOnly: 1"),
])
def test_gpu_metrics_without_access_to_the_counters_say_how_to_open_them(fake, capsys, monkeypatch, tmp_path, listing,
                                                                        params, expected):
    from nsys_rules import nsys_status

    if listing is not None:
        (tmp_path / "help.txt").write_text(listing)
        monkeypatch.setenv("FAKE_NSYS_GPU_METRICS", str(tmp_path / "help.txt"))
    if params is not None:
        (tmp_path / "params").write_text(params)
        monkeypatch.setattr(nsys_status, "NVIDIA_PARAMS", tmp_path / "params")
        monkeypatch.setattr(doctor.os, "geteuid", lambda: 1000)
    rc = main(["doctor"])
    out = capsys.readouterr().out
    assert rc == 0  # tracing still works: a warning, not a failure
    assert flat("warn  GPU metrics GPU metrics cannot be sampled: no access to the GPU's performance counters") in flat(out)
    assert expected in flat(out) and "NVreg_RestrictProfilingToAdminUsers=0" in out


def test_gpu_metrics_on_unsupported_gpus_and_old_nsys(fake, capsys, monkeypatch, tmp_path):
    (tmp_path / "help.txt").write_text("Possible --gpu-metrics-devices values are:\n\tall: Select all supported GPUs\n"
                                       "\tnone: Disable GPU Metrics [Default]\nSome GPUs are not supported:\n"
                                       "\t0: Volta GV100 | Quadro GV100 PCI[0000:17:00.0]\n")
    monkeypatch.setenv("FAKE_NSYS_GPU_METRICS", str(tmp_path / "help.txt"))
    main(["doctor"])
    out = flat(capsys.readouterr().out)
    assert flat("info  GPU metrics no GPU here supports GPU metrics sampling (unsupported: 0: Volta GV100") in out
    (tmp_path / "help.txt").write_text("unrecognised option '--gpu-metrics-devices=help'\n")
    main(["doctor"])
    out = flat(capsys.readouterr().out)
    assert flat("warn  GPU metrics nsys lists no GPU metrics devices") in out and "nsys 2023.1 or newer" in out


def test_relative_path_entries_are_never_searched(tmp_path, monkeypatch, capsys):
    """PATH=.:bin once made doctor run ./nsys (and ./nvidia-smi) of whatever folder it ran in."""
    fake = tools(tmp_path, monkeypatch, with_nsys=False)
    ran = tmp_path / "ran.log"
    planted = f"import sys\nopen({str(ran)!r}, 'a').write(sys.argv[0] + '\\n')\nprint('NVIDIA Nsight Systems version 1')\n"
    for name in ("nsys", "nvidia-smi", "ldd"):
        fake.add_script(name, planted, fake.work)
        fake.add_script(name, planted, fake.work / "bin")
    monkeypatch.setenv("PATH", f".:bin::{fake.bin}")
    rc = main(["doctor"])
    out, _ = capsys.readouterr()
    assert not ran.exists(), ran.read_text()
    assert rc == 3 and out.startswith("FAIL  nsys        not found on PATH")
    assert flat("warn  PATH        PATH holds relative folder(s) '.', 'bin', '': not searched") in flat(out)
    # An nsys in an absolute entry after the relative ones is the one found, and the note stays.
    fake.install_nsys()
    location = nsys_locate.locate_nsys()
    assert location.path == fake.nsys and location.source == "PATH" and location.ignored == (".", "bin", "")
    assert nsys_locate.which_absolute("nvidia-smi") is None


def test_a_path_of_absolute_folders_has_no_note(fake, capsys):
    location = nsys_locate.locate_nsys()
    assert location.path == fake.nsys and location.ignored == () and nsys_locate.ignored_note(location) is None
    main(["doctor"])
    assert "warn  PATH" not in capsys.readouterr().out
