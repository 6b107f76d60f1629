"""Rule pages generated from metadata, and the checks the meta tests rely on."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from nsys_rules.docs import (REGENERATE, doc_sections, missing_sections, options_without_help, rule_markdown,
                             write_rule_docs)
from nsys_rules.plugin_manager import BUILTIN, build_registry
from nsys_rules.rule import DOC_SECTIONS, Rule
from tests.conftest import run_cli


@dataclass(frozen=True)
class _Options:
    documented: int = field(default=1, metadata={"help": "has help"})
    bare: float = 0.5


class _Sloppy(Rule):
    """Finds something.

    What it detects: a thing.
    Why it hurts: time.
    Options: `documented`, `bare`.
    """

    name = "sloppy-rule"
    title = "Sloppy"
    requires = ("kernels",)
    Options = _Options


class _Complete(Rule):
    """Finds everything.

    What it detects: all of it, over
    two lines.
    Why it hurts: time.
    Evidence: numbers.
    Next optimizations: fix it.
    Options: none.
    Requires: kernels.
    False positives: none known.
    """

    name = "complete-rule"
    title = "Complete"


def test_missing_sections_and_option_help_are_found():
    assert missing_sections(_Sloppy) == ["Evidence", "Next optimizations", "Requires", "False positives"]
    assert options_without_help(_Sloppy) == ["bare"]
    assert missing_sections(_Complete) == [] and options_without_help(_Complete) == []


def test_sections_are_split_and_rendered_in_order():
    sections = doc_sections(_Complete)
    assert sections["summary"] == "Finds everything."
    assert sections["What it detects"] == "all of it, over\ntwo lines."
    page = rule_markdown(_Complete, "my-plugin")
    headings = [line[3:] for line in page.splitlines() if line.startswith("## ")]
    assert headings == list(DOC_SECTIONS)
    assert "All of it, over" in page and "Plugin: my-plugin." in page
    assert "(not documented)" in rule_markdown(_Sloppy)


def test_write_rule_docs_writes_pages_and_index(tmp_path):
    paths = write_rule_docs({"complete-rule": _Complete}, {"complete-rule": "x"}, tmp_path / "out")
    assert [p.name for p in paths] == ["complete-rule.md", "index.md"]
    assert "[`complete-rule`](complete-rule.md)" in (tmp_path / "out" / "index.md").read_text()


def test_explain_all_output_writes_every_registered_rule(tmp_path):
    proc = run_cli("explain", "--all", "--output", str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    registry = build_registry(autoload=True)
    assert sorted(p.name for p in tmp_path.glob("*.md")) == sorted([f"{n}.md" for n in registry.rules] + ["index.md"])


def test_explain_needs_a_rule_or_all():
    assert run_cli("explain").returncode == 2
    assert run_cli("explain", "--all", "graph-trace-hidden").returncode == 2


def test_committed_rule_pages_are_what_explain_generates(tmp_path):
    """docs/rules/ is generated (REGENERATE): a rule whose docstring or options changed needs its page regenerated."""
    proc = run_cli(*REGENERATE.split()[1:-1], str(tmp_path))
    assert proc.returncode == 0, proc.stderr
    committed = Path(__file__).resolve().parents[2] / "docs" / "rules"
    generated = {p.name: p.read_text() for p in tmp_path.glob("*.md")}
    assert sorted(generated) == sorted(p.name for p in committed.glob("*.md"))
    registry = build_registry(autoload=False)
    assert sorted(generated) == sorted([f"{n}.md" for n, p in registry.rule_plugin.items() if p == BUILTIN] + ["index.md"])
    stale = [name for name, text in generated.items() if (committed / name).read_text() != text]
    assert not stale, f"regenerate with `{REGENERATE}`: {', '.join(stale)}"


def test_options_and_requires_are_shown_once():
    """The Options table is generated; the docstring's list of the same names is not repeated under it, and
    Requires is the docstring's text (the declared tables only stand in when it says nothing)."""

    class _Listed(_Complete):
        """Finds everything.

        What it detects: all of it.
        Why it hurts: time.
        Evidence: numbers.
        Next optimizations: fix it.
        Options: `documented` and `bare`.
        Requires: the kernel table (`--trace=cuda`).
        False positives: none known.
        """

        requires = ("kernels",)
        optional = ("nvtx",)
        Options = _Options

    page = rule_markdown(_Listed)
    assert page.count("`documented`") == 1 and "| `documented` | `1` | has help |" in page
    requires = page[page.index("## Requires"):page.index("## False positives")]
    assert requires.split("\n", 2)[2].strip() == "The kernel table (`--trace=cuda`)."
    explained = type("_Explained", (_Listed,), {"__doc__": _Listed.__doc__.replace(
        "Options: `documented` and `bare`.", "Options: `bare` is a fraction; `documented` wins over it.")})
    assert "`bare` is a fraction; `documented` wins over it." in rule_markdown(explained)
    silent = type("_Silent", (_Listed,), {"__doc__": "Finds everything.\n\nWhat it detects: all of it.\n"})
    assert "Tables: kernels (uses nvtx when present)." in rule_markdown(silent)


def test_explain_prints_each_section_once():
    proc = run_cli("explain", "--no-plugins", "sync-memset")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.count("`max_findings`") == 1
    assert proc.stdout.count("## Requires") == 1 and "Tables:" not in proc.stdout
