"""No per-trace state hung on from outside the trace: every fact built from a trace lives in ``Trace.memo``.

A module-level cache keyed by the trace (a ``WeakKeyDictionary``, a dict annotated with ``Trace``
keys), a write into ``trace.__dict__`` or an attribute set on a trace from another module is state
with no lock and a lifetime nobody owns; the rules of a trace run in threads
(:mod:`nsys_rules.rule_threads`). This test reads the source (AST) of ``nsys_rules/`` and ``rules/``
and fails on each, naming the file and line.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from tests.conftest import ROOT

#: Weak mappings: at module level they can only be caches keyed by (or of) objects such as a trace.
WEAK_MAPPINGS = {"WeakKeyDictionary", "WeakValueDictionary"}

#: The one module that may set attributes on a trace: the trace itself.
TRACE_MODULE = "nsys_rules/model/trace.py"

#: Attributes other modules still set on a trace, each with why it stays for now.
ALLOWED_SETS: dict[tuple[str, str], str] = {}


def _sources() -> list[Path]:
    folders = [ROOT / "nsys_rules", ROOT / "rules"]
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "build" not in p.parts)


def _rule_sources() -> list[Path]:
    """The rule pack and the example plugins: code that sees a trace only as ``ctx.trace``."""
    folders = [ROOT / "rules", *sorted((ROOT / "plugins").glob("*/src"))]
    return sorted(p for folder in folders for p in folder.rglob("*.py") if "build" not in p.parts)


def _names(node: ast.AST, annotation: bool = False) -> set[str]:
    """Every identifier and attribute name in ``node`` (in an ``annotation``, those of its strings too)."""
    out: set[str] = set()
    for sub in ast.walk(node):
        if isinstance(sub, ast.Name):
            out.add(sub.id)
        elif isinstance(sub, ast.Attribute):
            out.add(sub.attr)
        elif annotation and isinstance(sub, ast.Constant) and isinstance(sub.value, str):
            try:
                out |= _names(ast.parse(sub.value, mode="eval"), annotation)
            except SyntaxError:
                pass
    return out


def _is_trace(node: ast.AST) -> bool:
    """``trace``, ``self.trace``, ``ctx.trace``: an expression that names a trace."""
    return (isinstance(node, ast.Name) and node.id == "trace") or (
        isinstance(node, ast.Attribute) and node.attr == "trace")


def module_caches(tree: ast.Module) -> list[tuple[int, str]]:
    """Module-level assignments that are per-trace caches: weak mappings, or mappings annotated with ``Trace``."""
    found = []
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            if _names(node.value) & WEAK_MAPPINGS:
                found.append((node.lineno, "a module-level weak mapping"))
            elif isinstance(node, ast.AnnAssign) and "Trace" in _names(node.annotation, annotation=True):
                found.append((node.lineno, "a module-level mapping typed with Trace"))
    return found


def trace_writes(tree: ast.Module) -> list[tuple[int, str]]:
    """Writes into a trace from outside: ``trace.__dict__`` (read or written: it is only read to stash),
    ``trace.attr = ...``, ``setattr(trace, ...)``."""
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr == "__dict__" and _is_trace(node.value):
            found.append((node.lineno, "trace.__dict__"))
        elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                if isinstance(target, ast.Attribute) and _is_trace(target.value):
                    found.append((node.lineno, f"sets trace.{target.attr}"))
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "setattr" and \
                node.args and _is_trace(node.args[0]):
            found.append((node.lineno, "setattr(trace, ...)"))
    return found


def trace_handed_on(tree: ast.Module) -> list[tuple[int, str]]:
    """Calls that take the context's trace as an argument (``f(ctx.trace)``, or a name bound to ``ctx.trace``)."""
    found = []
    for scope in ast.walk(tree):
        if not isinstance(scope, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        aliases: set[str] = set()
        for node in ast.walk(scope):
            if isinstance(node, ast.Assign):
                pairs = [(t, node.value) for t in node.targets]
                if isinstance(node.value, ast.Tuple):
                    pairs = [(t, v) for target in node.targets if isinstance(target, ast.Tuple)
                             for t, v in zip(target.elts, node.value.elts, strict=False)]
                aliases |= {t.id for t, v in pairs if isinstance(t, ast.Name) and ast.unparse(v) == "ctx.trace"}
        for node in ast.walk(scope):
            if isinstance(node, ast.Call):
                for arg in (*node.args, *(k.value for k in node.keywords)):
                    if ast.unparse(arg) == "ctx.trace" or (isinstance(arg, ast.Name) and arg.id in aliases):
                        found.append((node.lineno, f"{ast.unparse(node.func)}({ast.unparse(arg)})"))
    return sorted(set(found))


def test_rules_hand_the_trace_to_no_function() -> None:
    """A rule reads ``ctx.trace`` (a read-only view); the facts built from the trace are the context's
    (``ctx.framework``, ``ctx.gpu_ops``, ``ctx.python_stacks``, ``ctx.recapture_command(...)``, ...)."""
    bad = []
    for path in _rule_sources():
        rel = path.relative_to(ROOT).as_posix()
        for line, call in trace_handed_on(ast.parse(path.read_text(), rel)):
            bad.append(f"{rel}:{line}: {call}; ask the context (nsys_rules/model/trace_facts.py) instead")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("source, expected", [
    ("def check(ctx):\n    return framework(ctx.trace)\n", [(2, "framework(ctx.trace)")]),
    ("def check(ctx):\n    trace, b = ctx.trace, ctx.budget\n    return f(x=trace)\n", [(3, "f(trace)")]),
    ("def check(ctx):\n    trace = ctx.trace\n    return trace.frame('api'), ctx.framework\n", []),
])
def test_the_scan_finds_the_trace_handed_on(source: str, expected: list[tuple[int, str]]) -> None:
    assert trace_handed_on(ast.parse(source)) == expected


def test_no_module_level_per_trace_cache() -> None:
    bad = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        for line, what in module_caches(ast.parse(path.read_text(), rel)):
            bad.append(f"{rel}:{line}: {what}; keep per-trace facts in Trace.memo")
    assert not bad, "\n".join(bad)


def test_no_state_set_on_a_trace_from_outside() -> None:
    bad = []
    for path in _sources():
        rel = path.relative_to(ROOT).as_posix()
        if rel == TRACE_MODULE:
            continue
        for line, what in trace_writes(ast.parse(path.read_text(), rel)):
            attr = what.removeprefix("sets trace.")
            if (rel, attr) not in ALLOWED_SETS:
                bad.append(f"{rel}:{line}: {what}; keep per-trace facts in Trace.memo")
    assert not bad, "\n".join(bad)


def test_allowed_sets_are_still_there() -> None:
    """An allow-list entry whose write is gone goes too (the list only shrinks)."""
    for rel, attr in ALLOWED_SETS:
        path = ROOT / rel
        writes = trace_writes(ast.parse(path.read_text(), rel)) if path.exists() else []
        assert any(what == f"sets trace.{attr}" for _, what in writes), f"{rel} no longer sets trace.{attr}"


@pytest.mark.parametrize("source, expected", [
    ("import weakref\n_C = weakref.WeakKeyDictionary()\n", "a module-level weak mapping"),
    ("from weakref import WeakValueDictionary\n_C: dict = WeakValueDictionary()\n", "a module-level weak mapping"),
    ('_C: "dict[Trace, int]" = {}\n', "a module-level mapping typed with Trace"),
    ("_C: dict[int, Trace] = {}\n", "a module-level mapping typed with Trace"),
])
def test_the_scan_finds_module_caches(source: str, expected: str) -> None:
    assert module_caches(ast.parse(source)) == [(2 if source.startswith(("import", "from")) else 1, expected)]


@pytest.mark.parametrize("source, expected", [
    ("def f(trace):\n    trace.__dict__.setdefault('x', {})\n", "trace.__dict__"),
    ("def f(self):\n    self.trace.__dict__['x'] = 1\n", "trace.__dict__"),
    ("def f(trace):\n    trace.read_guard = 1\n", "sets trace.read_guard"),
    ("def f(ctx):\n    setattr(ctx.trace, 'x', 1)\n", "setattr(trace, ...)"),
])
def test_the_scan_finds_trace_writes(source: str, expected: str) -> None:
    assert trace_writes(ast.parse(source)) == [(2, expected)]


def test_the_scan_passes_memo_and_local_dicts() -> None:
    source = ("def f(trace):\n    cache = {}\n    return trace.memo(('m.f',), lambda: cache)\n"
              "_TABLE: dict[str, int] = {}\n")
    assert module_caches(ast.parse(source)) == [] and trace_writes(ast.parse(source)) == []
