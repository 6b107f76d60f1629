"""Rule documentation generated from rule metadata (docstring sections + Options)."""

from __future__ import annotations

import dataclasses
import inspect
import re

from .rule import DOC_SECTIONS, Rule


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
            f.default_factory() if f.default_factory is not dataclasses.MISSING else "")  # type: ignore[misc]
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
            out += ["## Options", ""]
            rows = option_rows(rule)
            if rows:
                out += ["| option | default | meaning |", "|---|---|---|"]
                out += [f"| `{n}` | `{d}` | {h} |" for n, d, h in rows]
            else:
                out.append("None.")
            if sec.get("Options"):
                out += ["", sec["Options"]]
            out.append("")
            continue
        if name == "Requires":
            tables = ", ".join(rule.requires) or "nothing"
            opt = f" (uses {', '.join(rule.optional)} when present)" if rule.optional else ""
            out += ["## Requires", "", f"Tables: {tables}{opt}." + (f" {sec['Requires']}" if sec.get("Requires") else ""), ""]
            continue
        out += [f"## {name}", "", sec.get(name) or "(not documented)", ""]
    return "\n".join(out).rstrip() + "\n"
