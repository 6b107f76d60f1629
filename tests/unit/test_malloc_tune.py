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
    out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True).stdout
    assert out.strip() == "True"
