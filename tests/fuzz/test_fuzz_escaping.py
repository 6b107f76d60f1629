"""Properties of the escaping helpers on any text (hypothesis, deterministic).

For every string: ``shell_word`` is exactly that string to bash and runs nothing;
``terminal_safe`` leaves no control, bidi or invisible character; ``markdown_safe`` renders
(with GitHub's cmark-gfm) to no link, image or HTML; ``csv_cell`` never starts a formula.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from nsys_rules.textsafe import csv_cell, markdown_safe, shell_word, terminal_safe
from tests.fuzz.hostile_text import PIECES, RAW_CONTROL, live_markup

SETTINGS = settings(max_examples=200, deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
#: Any text a trace can hold (SQLite text has no NUL a shell could pass; surrogates are not UTF-8).
ANY_TEXT = st.text(st.characters(blacklist_characters="\x00", blacklist_categories=("Cs",)), max_size=40)
#: Hostile pieces glued together, with arbitrary text between them.
HOSTILE = st.lists(st.one_of(st.sampled_from(PIECES), ANY_TEXT), min_size=1, max_size=8).map("".join)


@pytest.mark.skipif(shutil.which("bash") is None, reason="needs bash")
@SETTINGS
@given(text=st.one_of(HOSTILE, ANY_TEXT))
def test_shell_word_is_the_text_and_runs_nothing(tmp_path_factory, text):
    text = text.replace("\x00", "")
    work = tmp_path_factory.mktemp("sh")
    out = subprocess.run(["bash", "-c", f"printf %s {shell_word(text)}"], cwd=work, capture_output=True, timeout=30,
                         env={"PATH": "/usr/bin:/bin", "LC_ALL": "C.UTF-8"})
    assert out.stdout.decode("utf-8") == text
    assert list(work.iterdir()) == []
    assert shell_word(text).isprintable() and "`" not in shell_word(text)


@SETTINGS
@given(text=st.one_of(HOSTILE, ANY_TEXT))
def test_terminal_safe_leaves_no_control_character(text):
    line = terminal_safe(text, newlines=False)
    assert not RAW_CONTROL.search(line) and "\n" not in line and "\t" not in line
    assert not RAW_CONTROL.search(terminal_safe(text))


@SETTINGS
@given(text=HOSTILE)
def test_markdown_safe_renders_nothing_live(text):
    cmarkgfm = pytest.importorskip("cmarkgfm")
    from cmarkgfm.cmark import Options

    for markdown in (markdown_safe(text), f"| a | b |\n|---|---|\n| {markdown_safe(text).replace('|', chr(92) + '|')} | x |"):
        html = cmarkgfm.github_flavored_markdown_to_html(markdown, options=Options.CMARK_OPT_UNSAFE)
        assert not live_markup(html), (text, markdown, html)
        assert "\n" not in markdown_safe(text)


@SETTINGS
@given(text=st.one_of(HOSTILE, ANY_TEXT))
def test_csv_cell_never_starts_a_formula(text):
    cell = csv_cell(text)
    assert not cell.startswith(("=", "+", "-", "@", "\t", "\r")) and not RAW_CONTROL.search(cell)
