"""The HTML report's step timeline (issue 36): the median step above and replayed with the shown fixes below,
rendered in a real headless Chromium for a decode, a training and a CUDA-graph trace."""

from __future__ import annotations

import lzma
import re
import shutil
from pathlib import Path

import pytest

from tests.cli.test_html_report import pixel_spread, render
from tests.conftest import H200, ROOT, run_cli

TRAIN = ROOT / "tests" / "data" / "heldout2" / "ho_train.sqlite.xz"


def _trace(name: str, tmp_path: Path) -> Path:
    if name == "train":
        if not TRAIN.is_file():
            pytest.skip(f"{TRAIN} is absent")
        out = tmp_path / "ho_train.sqlite"
        with lzma.open(TRAIN) as src, out.open("wb") as dst:
            shutil.copyfileobj(src, dst)
        return out
    path = H200 / f"{name}.sqlite"
    if not path.exists():
        pytest.skip(f"{path} is absent (no shared traces)")
    return path


def _section(page: Path) -> str:
    text = page.read_text(encoding="utf-8")
    start = text.index("<h2>The median step, replayed</h2>")
    return text[start:text.index("</section>", start)]


@pytest.mark.parametrize(("name", "fixed"), [("decode_eager", True), ("train", False), ("decode_graph_node", False)])
def test_the_step_timeline_is_drawn(name: str, fixed: bool, tmp_path: Path) -> None:
    page = tmp_path / f"{name}.html"
    done = run_cli("check", str(_trace(name, tmp_path)), "--html", str(page), "--fail-on", "never")
    assert done.returncode == 0, done.stderr
    section = _section(page)
    labels = re.findall(r"<text[^>]*>([^<]*)</text>", section)
    assert labels[0] == "launching thread" and any(x.startswith("stream ") for x in labels) and "GPU idle" in labels
    # With shown fixes, a second picture: the step replayed with them, shorter, on the same scale.
    assert section.count("<svg") == (2 if fixed else 1)
    assert ("With the shown fixes" in section) == fixed
    if name == "decode_eager":
        assert "idle owned by launch-bound" in section
        assert "With the shown fixes (launch-bound): 1.429 ms per step, 3.107 ms less." in section


@pytest.mark.parametrize("name", ["decode_eager", "train", "decode_graph_node"])
def test_the_step_timeline_renders_in_chromium(name: str, tmp_path: Path) -> None:
    page = tmp_path / f"{name}.html"
    done = run_cli("check", str(_trace(name, tmp_path)), "--html", str(page), "--fail-on", "never")
    assert done.returncode == 0, done.stderr
    console, shot = render(page, tmp_path, size="1280,1400")
    assert console == []
    grey, colours = pixel_spread(shot)
    assert grey > 5 and colours > 20  # not blank: bars, text and the timeline drawn
