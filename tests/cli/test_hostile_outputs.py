"""Names from a hostile trace are escaped for where each output is read.

Kernel and NVTX names carry terminal escapes (ESC, BEL, CR), a newline followed by a fake
report line, a bidi override (U+202E), Markdown/HTML payloads (images, links, ``<img>``,
mentions) and a spreadsheet formula. Every human output of ``check``, ``diff`` and ``stats``
must show them inert: no control character reaches a terminal, GitHub's own renderer
(cmark-gfm) turns none of them into a link, an image or HTML, and no CSV cell starts a formula.
"""

from __future__ import annotations

import csv
import io
import json
import re

import pytest

from nsys_rules.testing import TraceBuilder
from tests.fuzz.harness import check_run, run_cli_inprocess

FAKE_LINE = "3 error(s), 0 warning(s), 0 info FAKE"
NAMES = ["esc\x1b]0;pwned\x07\x1b[2J\rk", f"lf\n{FAKE_LINE}", "bidi\u202eexe.txt",
         "![img](http://evil.example/x.png)", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))",
         "@octocat www.evil.example", '=HYPERLINK("http://evil.example","x")', "`code` | pipe", "+cmd", "-2+3"]
STEP = f"step![i](http://evil.example/s.png) @octocat\n{FAKE_LINE}"
#: What no terminal output may hold: C0 controls but tab and newline, DEL, C1 controls, bidi/invisible marks.
RAW_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069]")


def names_trace(path, slow: int = 90_000):
    """12 steps; every hostile name is a kernel with a tail (kernel-tail points at each by name)."""
    b = TraceBuilder()
    t = 0
    for step in range(12):
        b.nvtx(STEP, t, t + 2_000_000)
        for j, name in enumerate(NAMES):
            b.kernel(name, t + j * 100_000, slow if step in (5, 9) else 20_000)
        t += 2_000_000
    return b.write(path)


@pytest.fixture(scope="module")
def traces(tmp_path_factory):
    folder = tmp_path_factory.mktemp("names")
    return names_trace(folder / "base.sqlite"), names_trace(folder / "new.sqlite", slow=95_000)


def _out(*args: str) -> str:
    run = run_cli_inprocess(*args)
    check_run(run, json_output=False)
    assert run.code in (0, 1), (run.code, run.stderr)
    return run.stdout


def _no_fake_line(text: str) -> None:
    """A newline inside a name must not start a line of its own."""
    assert not any(line.strip(" │|") .startswith(FAKE_LINE) for line in text.splitlines()), text[:3000]


def _check(fmt: str, path) -> str:
    return _out("check", "--format", fmt, "--fail-on", "never", "--no-plugins", str(path))


def test_check_table_shows_every_control_character_escaped(traces):
    text = _check("table", traces[0])
    assert "kernel-tail" in text
    assert not RAW_CONTROL.search(text), RAW_CONTROL.search(text)
    assert "lf\\x0a3 error" in text and "bidi\\u202eexe.txt" in text
    _no_fake_line(text)


def test_diff_table_shows_every_control_character_escaped(traces):
    text = _out("diff", str(traces[0]), str(traces[1]))
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))
    assert "bidi\\u202eexe.txt" in text
    _no_fake_line(text)


@pytest.mark.parametrize("report", ["cuda_gpu_kern_sum", "nvtx_sum"])
def test_stats_table_shows_every_control_character_escaped(traces, report):
    text = _out("stats", "--report", report, str(traces[0]))
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))
    assert ("esc\\x1b]0;pwned\\x07" if report == "cuda_gpu_kern_sum" else "\\x0a3 error") in text
    _no_fake_line(text)


def test_stats_csv_cells_are_inert(traces):
    text = _out("stats", "--report", "cuda_gpu_kern_sum", "--format", "csv", str(traces[0]))
    assert not RAW_CONTROL.search(text), repr(RAW_CONTROL.search(text))
    rows = list(csv.DictReader(io.StringIO(text)))
    names = [r["Name"] for r in rows]
    assert len(rows) == len(NAMES)
    assert all(not n.startswith(("=", "+", "-", "@", "\t", "\r")) for n in names), names
    assert "'=HYPERLINK(\"http://evil.example\",\"x\")" in names and "'-2+3" in names
    assert all(r["Time (%)"].replace(".", "").isdigit() for r in rows)  # numbers stay numbers


def _rendered(markdown: str) -> str:
    """HTML as GitHub's renderer makes it (raw HTML kept, so anything that would pass shows up)."""
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    return cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)


def _no_live_markup(html: str) -> None:
    assert "<img" not in html and "<a " not in html and "<script" not in html, html[:4000]
    assert "evil.example" in html  # the names are shown, as text


def test_check_markdown_renders_no_link_image_or_html(traces):
    text = _check("markdown", traces[0])
    assert not RAW_CONTROL.search(text)
    html = _rendered(text)
    _no_live_markup(html)
    assert "<code>@octocat</code>" in html  # a mention shown as code: GitHub pings nobody
    assert "<table>" in html and html.count("<tr>") >= 2  # a pipe in a name did not break the table


def test_diff_markdown_renders_no_link_image_or_html(traces):
    text = _out("diff", "--format", "markdown", str(traces[0]), str(traces[1]))
    _no_live_markup(_rendered(text))


def test_sarif_texts_form_no_link(traces):
    doc = json.loads(_check("sarif", traces[0]))
    results = doc["runs"][0]["results"]
    assert results
    for result in results:
        # SARIF reads [text](target) in message text as a link: every bracket is escaped.
        assert not re.search(r"(?<!\\)[\[\]]", result["message"]["text"].replace("\\\\", "")), result["message"]["text"]
        _no_live_markup(_rendered(result["message"]["markdown"]) + "evil.example")


def test_html_report_escapes_names_and_shows_invisible_characters(traces):
    text = _check("html", traces[0])
    assert "<img src=x" not in text and "&lt;img src=x onerror=alert(1)&gt;" in text
    assert "\u202e" not in text and "bidi\\u202eexe.txt" in text
    assert "\x1b" not in text and "\x07" not in text


def test_markdown_safe_keeps_code_spans_and_escapes_prose():
    from nsys_rules.textsafe import markdown_code, markdown_safe

    assert markdown_safe("run `nsys profile -o x` now") == "run `nsys profile -o x` now"
    assert markdown_safe("a ![i](u) <b>") == "a \\!\\[i\\](u) \\<b\\>"
    assert markdown_safe("see https://x.example/a now") == "see `https://x.example/a` now"
    assert markdown_safe("odd ` tick") == "odd \\` tick"
    assert markdown_code("a``b") == "```a``b```" and markdown_code("`x") == "`` `x ``"


def test_terminal_safe_escapes_bidi_and_optionally_newlines():
    from nsys_rules.textsafe import terminal_safe

    assert terminal_safe("a\u202eb\u2066c") == "a\\u202eb\\u2066c"
    assert terminal_safe("a\nb\tc") == "a\nb\tc"
    assert terminal_safe("a\nb\tc", newlines=False) == "a\\x0ab\\x09c"
