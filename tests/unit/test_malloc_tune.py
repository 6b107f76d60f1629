"""glibc tuning: applied on Linux, through the process's own C library symbols (no library search)."""

from __future__ import annotations

import platform
import subprocess
import sys

import pytest


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="the mmap threshold is glibc's")
def test_tuned_and_released_without_a_library_search() -> None:
    """``ctypes.util.find_library`` runs ``ldconfig`` in a subprocess before the read-ahead starts: not used."""
    code = ("import sys; from nsys_rules.malloc_tune import tune_malloc, release_free_memory; "
            "ok = tune_malloc(); release_free_memory(); release_free_memory(); "
            "assert 'subprocess' not in sys.modules and 'ctypes.util' not in sys.modules, 'library search'; "
            "print(ok)")
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True,
                         timeout=120).stdout
    assert out.strip() == "True"


@pytest.mark.parametrize("enabled", [True, False])
def test_collector_paused_inside_and_back_as_it_was(enabled: bool) -> None:
    import gc

    from nsys_rules.malloc_tune import collector_paused

    was = gc.isenabled()
    try:
        (gc.enable if enabled else gc.disable)()
        with pytest.raises(KeyError), collector_paused():
            assert not gc.isenabled()
            raise KeyError("an error inside still puts the collector back")
        assert gc.isenabled() is enabled
    finally:
        (gc.enable if was else gc.disable)()


def test_a_check_runs_with_the_collector_paused_and_collects_after_each_trace(monkeypatch, capsys) -> None:
    """The CLI's analysis runs without the collector; after each trace of a several-trace run it collects; after
    the run the collector is on again (tests and API users call main in their own process)."""
    import gc
    import json
    from pathlib import Path

    from nsys_rules import engine, parallel
    from nsys_rules.cli import main

    seen: list[bool] = []
    collects: list[int] = []
    analyze = engine.analyze_trace
    monkeypatch.setattr(parallel, "analyze_trace", lambda *a, **k: (seen.append(gc.isenabled()), analyze(*a, **k))[1])
    monkeypatch.setattr(parallel.gc, "collect", lambda *a: collects.append(len(seen)) or 0)
    example = Path(__file__).resolve().parents[2] / "examples" / "rust_release_build.sqlite"
    assert gc.isenabled()
    code = main(["check", str(example), str(example), "--jobs", "1", "--no-plugins", "--fail-on", "never",
                 "--format", "json"])
    assert code == 0 and seen == [False, False] and collects == [1, 2] and gc.isenabled()
    assert len(json.loads(capsys.readouterr().out)["traces"]) == 2
