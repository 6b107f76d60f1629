"""The HTML report: self-contained, and it renders in a real headless Chromium.

Chromium (Debian's ``chromium``) loads the file with networking features off, logs the
page's console to stderr (``--enable-logging=stderr``: lines tagged ``CONSOLE``) and takes a
screenshot; the test fails on any console message and on a blank screenshot. A control page
with a deliberate console error proves the console check can fail.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.conftest import run_cli
from tests.unit.test_overview import GEMV, stepped_trace

CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--hide-scrollbars",
                  "--enable-logging=stderr", "--v=0")
CONSOLE = re.compile(r":CONSOLE[:(]")


def chromium() -> str:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    pytest.skip("no chromium on PATH (Debian: apt-get install chromium); .ci/run installs it")


def render(page: Path, tmp_path: Path, size: str = "1280,2200") -> tuple[list[str], Path]:
    """Console lines and the screenshot of ``page``."""
    shot = tmp_path / (page.stem + ".png")
    proc = subprocess.run([chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={tmp_path / 'profile'}",
                           f"--window-size={size}", f"--screenshot={shot}", page.resolve().as_uri()],
                          capture_output=True, text=True, timeout=120)
    assert shot.exists(), proc.stderr[-2000:]
    return [line for line in proc.stderr.splitlines() if CONSOLE.search(line)], shot


def pixel_spread(png: Path) -> tuple[float, int]:
    """(standard deviation of the grey levels, number of distinct colours) of a screenshot."""
    from PIL import Image, ImageStat

    with Image.open(png) as im:
        rgb = im.convert("RGB")
        grey = ImageStat.Stat(rgb.convert("L")).stddev[0]
        colours = rgb.getcolors(maxcolors=1 << 20)
        return grey, len(colours) if colours else 1 << 20


@pytest.fixture
def report_html(tmp_path) -> Path:
    trace = stepped_trace(tmp_path / "steps.sqlite", steps=8, slow_step=5)
    out = tmp_path / "report.html"
    proc = run_cli("check", "--format", "table", "--html", str(out), "--fail-on", "never", str(trace))
    assert proc.returncode == 0, proc.stderr
    return out


def test_html_is_self_contained(report_html):
    text = report_html.read_text(encoding="utf-8")
    assert text.startswith("<!DOCTYPE html>")
    # No network: nothing loaded from elsewhere.
    assert not re.search(r"<script[^>]*\bsrc=|<link\b|@import|url\(|<img\b|<iframe\b", text, re.IGNORECASE)
    assert not re.search(r"(src|href)\s*=\s*['\"]?(https?:)?//", text, re.IGNORECASE)
    # The profile is drawn: class bar, per-step timeline, the kernel table.
    assert "GPU time by kernel class" in text and "busy vs idle per step" in text
    assert text.count("<svg") >= 2 and GEMV.split("(")[0] in text


def test_html_format_on_stdout_matches_the_file(report_html, tmp_path):
    trace = tmp_path / "steps.sqlite"
    proc = run_cli("check", "--format", "html", "--fail-on", "never", str(trace))
    assert proc.returncode == 0
    assert proc.stdout == report_html.read_text(encoding="utf-8")


def test_console_check_catches_errors(tmp_path):
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>console.error('boom'); missing();</script></body></html>")
    console, _ = render(bad, tmp_path, "400,300")
    assert any("boom" in line for line in console), "chromium did not report the console error: the check is blind"


def test_html_renders_in_chromium_without_console_errors(report_html, tmp_path):
    console, shot = render(report_html, tmp_path)
    assert console == []
    grey, colours = pixel_spread(shot)
    assert grey > 10, f"screenshot looks blank (grey stddev {grey:.1f})"
    assert colours > 50, f"screenshot has only {colours} colours"


def test_real_trace_report_renders(h200, tmp_path):
    out = tmp_path / "moe.html"
    proc = run_cli("check", "--html", str(out), "--fail-on", "never", str(h200 / "engine_moe_tail.sqlite"))
    assert proc.returncode == 0, proc.stderr
    text = out.read_text(encoding="utf-8")
    assert "Duration distributions of flagged kernels" in text  # kernel-tail points at the MoE GEMV
    console, shot = render(out, tmp_path, "1280,3000")
    assert console == []
    assert pixel_spread(shot)[0] > 10
