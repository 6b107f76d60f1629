"""Rule documentation generated from rule metadata (docstring sections + Options)."""

from __future__ import annotations

import dataclasses
import inspect
import re
from pathlib import Path
from typing import Mapping

from nsys_rules.rule import DOC_SECTIONS, Rule


def doc_sections(rule: type[Rule]) -> dict[str, str]:
    """The docstring split into its ``Section:`` blocks (keys as in :data:`DOC_SECTIONS`)."""
    doc = inspect.cleandoc(rule.__doc__ or "")
    sections: dict[str, str] = {}
    current = "summary"
    buf: list[str] = []
    pattern = re.compile(r"^(" + "|".join(re.escape(s) for s in DOC_SECTIONS) + r"):\s*(.*)$")
    for line in doc.splitlines():
        m = pattern.match(line.strip())
        if m:
            sections[current] = "\n".join(buf).strip()
            current, buf = m.group(1), [m.group(2)] if m.group(2) else []
        else:
            buf.append(line)
    sections[current] = "\n".join(buf).strip()
    return sections


def option_rows(rule: type[Rule]) -> list[tuple[str, str, str]]:
    """(name, default, help) for each field of ``rule.Options``."""
    rows = []
    for f in dataclasses.fields(rule.Options):
        default = f.default if f.default is not dataclasses.MISSING else (
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "")
        rows.append((f.name, repr(default), str(f.metadata.get("help", ""))))
    return rows


def rule_markdown(rule: type[Rule], plugin: str = "") -> str:
    """Full documentation of one rule as Markdown."""
    sec = doc_sections(rule)
    out = [f"# {rule.name}: {rule.title}", ""]
    meta = f"Default severity: **{rule.default_severity.value}**. Window: {rule.window}."
    if plugin:
        meta += f" Plugin: {plugin}."
    if rule.aliases:
        meta += f" Aliases: {', '.join(rule.aliases)}."
    out += [meta, ""]
    if sec.get("summary"):
        out += [sec["summary"], ""]
    for name in DOC_SECTIONS:
        if name == "Options":
            # The table, generated from Options, is the reference; the docstring's section only lists the
            # names, so its text is shown only when it says more than that.
            out += ["## Options", ""]
            rows = option_rows(rule)
            if rows:
                out += ["| option | default | meaning |", "|---|---|---|"]
                out += [f"| `{n}` | `{d}` | {h} |" for n, d, h in rows]
            else:
                out.append("None.")
            if _says_more(sec.get("Options", ""), [n for n, _, _ in rows]):
                out += ["", _capitalized(sec["Options"])]
            out.append("")
            continue
        if name == "Requires":
            # The docstring says what the rule needs and why (tables, capture metadata, a step model); the
            # tables it declares stand in only when it says nothing.
            out += ["## Requires", "", _capitalized(sec.get("Requires", "")) or _declared_tables(rule), ""]
            continue
        out += [f"## {name}", "", _capitalized(sec.get(name, "")) or "(not documented)", ""]
    return "\n".join(out).rstrip() + "\n"


def _says_more(text: str, names: list[str]) -> bool:
    """Whether a docstring section holds more than a list of these names (`a`, `b` and `c`.)."""
    rest = re.sub(r"`([^`]*)`", lambda m: "" if m.group(1) in names else m.group(0), text)
    return bool(re.sub(r"\band\b|none|[\s,.;]", "", rest, flags=re.IGNORECASE))


def _declared_tables(rule: type[Rule]) -> str:
    tables = ", ".join(rule.requires) or "nothing"
    optional = f" (uses {', '.join(rule.optional)} when present)" if rule.optional else ""
    return f"Tables: {tables}{optional}."


def _capitalized(text: str) -> str:
    # Docstrings read "What it detects: recurring calls ..."; as a page section the body starts a sentence.
    return text[:1].upper() + text[1:]


def missing_sections(rule: type[Rule]) -> list[str]:
    """Docstring sections of :data:`DOC_SECTIONS` that ``rule`` lacks or leaves empty."""
    sec = doc_sections(rule)
    return [name for name in DOC_SECTIONS if not sec.get(name, "").strip()]


def options_without_help(rule: type[Rule]) -> list[str]:
    """Fields of ``rule.Options`` whose ``metadata`` has no ``help`` text."""
    return [name for name, _default, help_text in option_rows(rule) if not help_text.strip()]


def doc_filename(rule_name: str) -> str:
    """The file a rule's page is written to (``<rule>.md``)."""
    return f"{rule_name}.md"


#: The command that regenerates ``docs/rules/`` (built-in rules only; plugins document their own).
REGENERATE = "nsys-rules explain --all --no-plugins --output docs/rules"


def write_rule_docs(rules: Mapping[str, type[Rule]], plugins: Mapping[str, str], out_dir: Path) -> list[Path]:
    """Write one Markdown page per rule plus an ``index.md`` into ``out_dir``; returns the paths.

    Pages are rewritten in full each time, so the folder can be regenerated at will; pages of
    rules that no longer exist are left alone (delete them by hand).
    """
    from nsys_rules.errors import UsageError
    from nsys_rules.outpaths import write_atomic

    try:
        out_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create the folder {out_dir}: {exc.strerror or exc}") from None
    written = []
    index = ["# Rules", "", f"Generated by `{REGENERATE}` from each rule's docstring and Options; do not edit.", "",
             "| rule | default severity | plugin | title |", "|---|---|---|---|"]
    for name, rule in rules.items():
        path = out_dir / doc_filename(name)
        write_atomic(path, rule_markdown(rule, plugins.get(name, "")), "rule page")
        written.append(path)
        index.append(f"| [`{name}`]({doc_filename(name)}) | {rule.default_severity.value} | {plugins.get(name, '')} "
                     f"| {rule.title} |")
    index_path = out_dir / "index.md"
    write_atomic(index_path, "\n".join(index) + "\n", "rule index")
    return [*written, index_path]
