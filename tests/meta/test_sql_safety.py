"""Every SQL string in the package is fixed text, quoted allow-listed names, or bound values.

Values from a trace or the command line (names, NVTX filters) must be bound as ``?``
parameters; table and column names may only come from the allow-list in
``nsys_rules/loaders/tables.py`` (or other constants), quoted. This test reads the source
(AST) of ``nsys_rules/``, ``rules/`` and the example plugins and fails on SQL built with ``%`` or ``.format``, and on
f-strings or ``+`` concatenations that interpolate anything but ``_quote(...)`` or an
expression audited below (with the reason it is safe).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from tests.conftest import ROOT

SQL = re.compile(r"\b(SELECT|PRAGMA|INSERT|UPDATE|DELETE|CREATE|DROP|ALTER|ATTACH|VACUUM)\b")

#: file -> interpolated expressions reviewed by hand, and why each cannot carry input.
AUDITED: dict[str, dict[str, str]] = {
    "nsys_rules/loaders/stored_bytes.py": {
        "marks": "a run of '?' placeholders (the sampled rowids are bound)",
        "test": "typeof() tests of _quote()d source columns picked from the allow-list (stored_bytes.source_columns)",
        "' + '.join(typed)": "the same typeof() tests, one per allow-listed column",
        "' + '.join(sizes)": "length() of each _quote()d allow-listed column, in CASE on its typeof()",
        "' + '.join(chars)": "the same, without the CAST",
        "largest": "max() of the sizes above",
    },
    "nsys_rules/testing/builder.py": {
        "table": "TraceBuilder writes tests' files; table names are keys of the constant EXPORT_DDL",
        "EXPORT_DDL['StringIds']": "constant DDL",
        "EXPORT_DDL[table]": "constant DDL, keyed by the table names above",
        "marks": "a run of '?' placeholders",
    },
    "nsys_rules/loaders/gpu_metrics.py": {
        "', '.join((_quote(c) for c in SAMPLE_COLUMNS))": "the constant sample columns, each quoted",
        "' AND '.join(where)": "rowid bounds, metric ids and times, each through int(); column names _quote()d constants",
    },
    "nsys_rules/loaders/sqlite.py": {
        "', '.join((_quote(c) for c in src_cols))": "columns picked from the allow-list (tables.py), each quoted",
        "select": "rows(): each column quoted with _quote when PRAGMA table_info lists it, else the constant NULL; "
                  "callers pass constant metadata column names",
    },
}


def _sources() -> list[Path]:
    folders = [ROOT / "nsys_rules", ROOT / "rules", *sorted((ROOT / "plugins").glob("*/src"))]
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "build" not in p.parts)


def _is_sql(node: ast.AST) -> bool:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return bool(SQL.search(node.value))
    if isinstance(node, ast.JoinedStr):
        return any(_is_sql(v) for v in node.values)
    return False


def _quoted(expr: ast.AST) -> bool:
    return isinstance(expr, ast.Call) and isinstance(expr.func, ast.Name) and expr.func.id == "_quote"


def _concat_operands(node: ast.AST) -> list[ast.AST]:
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _concat_operands(node.left) + _concat_operands(node.right)
    return [node]


def problems_in(path: Path, rel: str | None = None) -> list[str]:
    """The unsafe SQL constructions in one source file, as ``file:line: what``."""
    rel = rel or path.relative_to(ROOT).as_posix()
    audited = AUDITED.get(rel, {})
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out: list[str] = []

    def judge(expr: ast.AST, line: int) -> None:
        if _quoted(expr) or isinstance(expr, ast.Constant):
            return
        text = ast.unparse(expr)
        if text not in audited:
            out.append(f"{rel}:{line}: SQL built from `{text}` (use _quote() on allow-listed names, "
                       "or bind values as ? parameters)")

    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr) and _is_sql(node):
            for part in node.values:
                if isinstance(part, ast.FormattedValue):
                    judge(part.value, node.lineno)
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and _is_sql(node.left):
            out.append(f"{rel}:{node.lineno}: SQL built with % formatting")
        elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "format"
              and _is_sql(node.func.value)):
            out.append(f"{rel}:{node.lineno}: SQL built with str.format")
        elif isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
            operands = _concat_operands(node)
            if any(_is_sql(o) for o in operands):
                for operand in operands:
                    if not isinstance(operand, (ast.Constant, ast.JoinedStr)):
                        judge(operand, node.lineno)
    return out


def test_sql_is_never_built_from_input():
    problems = [p for path in _sources() for p in problems_in(path)]
    assert not problems, "\n".join(problems)


def test_the_checker_catches_unsafe_sql(tmp_path):
    """The meta test itself can fail: each unsafe form below is reported."""
    bad = tmp_path / "probe.py"
    bad_src = (
        "def f(db, name, table):\n"
        "    db.execute(f\"SELECT * FROM StringIds WHERE value = '{name}'\")\n"
        "    db.execute(\"SELECT * FROM %s\" % table)\n"
        "    db.execute(\"SELECT * FROM {}\".format(table))\n"
        "    db.execute(\"SELECT * FROM \" + table)\n"
        "    db.execute(f\"SELECT * FROM {_quote(table)} WHERE id = ?\", (name,))\n"
    )
    bad.write_text(bad_src, encoding="utf-8")
    found = problems_in(bad, "nsys_rules/probe.py")
    assert len(found) == 4, found
    assert "`name`" in found[0] and "% formatting" in found[1] and "str.format" in found[2] and "`table`" in found[3]


def test_audited_expressions_still_exist():
    """An audited entry whose code is gone must be removed, so the list stays a real review."""
    for rel, entries in AUDITED.items():
        text = (ROOT / rel).read_text(encoding="utf-8")
        tree = ast.parse(text)
        seen = {ast.unparse(n) for n in ast.walk(tree) if isinstance(n, ast.expr)}
        for expr in entries:
            assert expr in seen, f"{rel}: audited expression `{expr}` no longer appears; drop it from AUDITED"
