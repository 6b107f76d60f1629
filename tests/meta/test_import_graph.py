"""The import graph of nsys_rules/ and rules/: layers, no cycles, rules on the public API, plugins too.

The package is built in floors, each importing only its own floor and those below (docs/developing.md):

    face      the commands, output formats, nsys stats reports, the test kit
    engine    plugin manager, rule selection, isolation, the run of one trace or job
    rules     the rule API (api, Rule, RuleContext, findings, the report) and the rule pack
    model     what a trace is, built once per trace (nsys_rules/model/)
    analysis  pure functions over arrays (nsys_rules/analysis/)
    loaders   reading exports (nsys_rules/loaders/)
    base      errors, escaping, units, file and memory helpers every floor uses

Every import counts, also the ones inside functions (a lazy import is still a dependency) and the
ones under ``if TYPE_CHECKING:`` (they never run, but a type-only arrow up or round is still a
dependency of the code's meaning): each type-only import is declared in :data:`TYPE_ONLY`, with
why it is type-only, and only the ones marked there as a known circle are left out of the checks.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ((ROOT / "nsys_rules", "nsys_rules"), (ROOT / "rules", "nsys_rules.rules"))
EXAMPLE_PLUGIN = ROOT / "plugins" / "nsys-rules-nvtx-coverage"


def _modules() -> dict[str, tuple[Path, bool]]:
    """Module name -> (file, is a package), with rules/ installed as nsys_rules.rules."""
    out = {}
    for folder, package in PACKAGES:
        for path in folder.rglob("*.py"):
            parts = list(path.relative_to(folder).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts = parts[:-1]
            out[".".join([package, *parts])] = (path, is_package)
    return out


MODULES = _modules()


def _imports(tree: ast.AST, type_only: bool) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run (``type_only`` False), or those under ``if TYPE_CHECKING:`` (True)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST, guarded: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for inner in child.body:
                    visit_one(inner, True)
                for other in child.orelse:
                    visit_one(other, guarded)
                continue
            visit_one(child, guarded)

    def visit_one(child: ast.AST, guarded: bool) -> None:
        if isinstance(child, (ast.Import, ast.ImportFrom)):
            if guarded == type_only:
                found.append(child)
            return
        visit(child, guarded)

    visit(tree, False)
    return found


def imported_names(path: Path, module: str, is_package: bool, type_only: bool = False) -> set[str]:
    """The full names of the modules (or of their attributes) ``path`` imports, relative imports resolved
    (``type_only``: those imported under ``if TYPE_CHECKING:`` instead)."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _imports(ast.parse(path.read_text()), type_only):
        if isinstance(node, ast.Import):
            out.update(alias.name for alias in node.names)
            continue
        if node.level:
            base = package.split(".")
            base = base[: len(base) - (node.level - 1)]
            source = ".".join([*base, *([node.module] if node.module else [])])
        else:
            source = node.module or ""
        out.add(source)
        out.update(f"{source}.{alias.name}" for alias in node.names)
    return out


def _resolve(name: str) -> str | None:
    """The module of ours that an imported name lives in (the name itself, or its closest parent)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def _graph(type_only: bool = False) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, (path, is_package) in MODULES.items():
        targets = {_resolve(n) for n in imported_names(path, module, is_package, type_only)}
        edges[module] = {t for t in targets if t and t != module}
    return edges


#: Every import of ours under ``if TYPE_CHECKING:``, declared: (module, imported module) -> why it is type-only.
#: A new one must be added here; those marked CIRCLE close a loop and are left out of the checks below.
CIRCLE = "a known circle, left out of the checks"
TYPE_ONLY = {
    ("nsys_rules.model.job.extract", "nsys_rules.model.steps"): "a job without steps does not import the step model",
    ("nsys_rules.model.job.extract", "nsys_rules.model.windows"): "a job without steps does not import the step model",
    ("nsys_rules.stats.common", "nsys_rules.model.trace"): "annotations only",
    ("nsys_rules.config", "nsys_rules.rule"): "commands parse their flags without importing pandas",
    ("nsys_rules.settings", "nsys_rules.rule"): "commands parse their flags without importing pandas",
    ("nsys_rules.loop", "nsys_rules.rule"): "annotations only",
    ("nsys_rules.commands.common", "nsys_rules.registry"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.check", "nsys_rules.records"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.check", "nsys_rules.registry"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.check", "nsys_rules.report"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.check", "nsys_rules.settings"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.outputs", "nsys_rules.registry"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.outputs", "nsys_rules.report"): "commands parse their flags without importing pandas",
    ("nsys_rules.commands.outputs", "nsys_rules.settings"): "commands parse their flags without importing pandas",
    ("nsys_rules.rule", "nsys_rules.model.replay_what_if"): "the replay is imported only for the rules that ask for it",
    ("nsys_rules.mcp_server.work", "nsys_rules.diff"): "the MCP server starts and lists its tools without pandas",
    ("nsys_rules.mcp_server.work", "nsys_rules.registry"): "the MCP server starts and lists its tools without pandas",
}
TYPE_ONLY_GRAPH = _graph(type_only=True)
RUNTIME_GRAPH = _graph()
#: What the checks judge: the imports that run and the declared type-only ones, the known circles left out.
GRAPH = {m: RUNTIME_GRAPH[m] | {t for t in TYPE_ONLY_GRAPH[m] if not TYPE_ONLY.get((m, t), "").startswith(CIRCLE)}
         for m in RUNTIME_GRAPH}


def test_every_type_only_import_is_declared():
    found = {(m, t) for m, targets in TYPE_ONLY_GRAPH.items() for t in targets}
    assert sorted(found - set(TYPE_ONLY)) == [], "a new `if TYPE_CHECKING:` import: declare it in TYPE_ONLY (why)"
    assert sorted(set(TYPE_ONLY) - found) == [], "a declared type-only import is gone: remove it from TYPE_ONLY"


def test_type_only_imports_are_seen():
    assert "nsys_rules.rule" in TYPE_ONLY_GRAPH["nsys_rules.loop"]
    assert "nsys_rules.rule" not in RUNTIME_GRAPH["nsys_rules.loop"]
    assert "nsys_rules.rule" in GRAPH["nsys_rules.loop"]  # a type-only import counts like any other


def test_no_circle_is_declared():
    """Issue 40: the last type-only circle (budget <-> gpu_metrics) is gone; a new one is a design change."""
    assert [pair for pair, why in TYPE_ONLY.items() if why.startswith(CIRCLE)] == []


def _cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


LAYERS = ("face", "engine", "rules", "model", "analysis", "loaders", "base")

#: Each module's floor, by the longest matching prefix (a folder names its whole subtree).
FLOORS = {
    "nsys_rules.cli": "face", "nsys_rules.__main__": "face", "nsys_rules.commands": "face",
    "nsys_rules.formatters": "face", "nsys_rules.stats": "face", "nsys_rules.testing": "face",
    "nsys_rules.docs": "face", "nsys_rules.baseline": "face", "nsys_rules.outpaths": "face",
    "nsys_rules.capture": "face", "nsys_rules.nsys_status": "face", "nsys_rules.diff": "face",
    "nsys_rules.config": "face", "nsys_rules.mcp_server": "face",
    "nsys_rules.notebook": "face", "nsys_rules.notebook_types": "face",
    "nsys_rules.engine": "engine", "nsys_rules.plugin_manager": "engine", "nsys_rules.isolation": "engine",
    "nsys_rules.containment": "engine", "nsys_rules.deadline": "engine",
    "nsys_rules.parallel": "engine", "nsys_rules.rule_threads": "engine", "nsys_rules.options": "engine",
    "nsys_rules.settings": "engine", "nsys_rules.answer": "engine", "nsys_rules.inputs": "engine",
    "nsys_rules.job_run": "engine", "nsys_rules.nsys_locate": "engine", "nsys_rules.builtin_loaders": "engine",
    "nsys_rules.nsys_run": "engine", "nsys_rules.replay_savings": "engine",
    "nsys_rules.dask_connect": "engine",
    "nsys_rules.rules": "rules", "nsys_rules.api": "rules", "nsys_rules.rule": "rules",
    "nsys_rules.job_rule": "rules", "nsys_rules.loop": "rules", "nsys_rules.findings": "rules",
    "nsys_rules.records": "rules", "nsys_rules.report": "rules", "nsys_rules.registry": "rules",
    "nsys_rules.hooks": "rules", "nsys_rules.advice": "rules",
    "nsys_rules.model": "model",
    "nsys_rules.analysis": "analysis",
    "nsys_rules.loaders": "loaders",
    "nsys_rules": "base", "nsys_rules.errors": "base", "nsys_rules.textsafe": "base", "nsys_rules.units": "base",
    "nsys_rules.malloc_tune": "base", "nsys_rules.userfiles": "base",
}


def floor_of(module: str) -> str | None:
    """The floor of ``module``: its own entry, else its closest package's (top-level modules need their own)."""
    if module in FLOORS:
        return FLOORS[module]
    name = module.rpartition(".")[0]
    while name and name != "nsys_rules":
        if name in FLOORS:
            return FLOORS[name]
        name = name.rpartition(".")[0]
    return None


def test_the_graph_sees_the_project():
    assert "nsys_rules.engine" in GRAPH and "nsys_rules.rules.kernel_tail.kernel_tail" in GRAPH
    assert "nsys_rules.api" in GRAPH["nsys_rules.rules.kernel_tail.kernel_tail"]
    assert "nsys_rules.engine" in GRAPH["nsys_rules.commands.check"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


def test_every_module_has_a_floor():
    assert sorted(m for m in GRAPH if floor_of(m) is None) == []


def test_the_floor_check_sees_an_upward_import():
    assert floor_of("nsys_rules.model.steps") == "model" and floor_of("nsys_rules.rules.gemv.bandwidth") == "rules"
    assert LAYERS.index(floor_of("nsys_rules.engine")) < LAYERS.index(floor_of("nsys_rules.model.budget"))


@pytest.mark.parametrize("module", sorted(GRAPH))
def test_no_import_reaches_a_higher_floor(module):
    own = LAYERS.index(floor_of(module))
    up = sorted(t for t in GRAPH[module] if LAYERS.index(floor_of(t)) < own)
    assert not up, f"{module} ({LAYERS[own]}) imports {[(t, floor_of(t)) for t in up]}"


RULE_MODULES = sorted(m for m in GRAPH if m.startswith("nsys_rules.rules."))


def _family(module: str) -> str | None:
    """``nsys_rules.rules.copies`` for a module of that family; None for a rule module of its own."""
    parts = module.split(".")
    return ".".join(parts[:3]) if len(parts) > 3 or MODULES[module][1] else None


#: What a rule may import of the package: the rule API and its helpers over arrays (not the loaders' namespace).
RULE_API = ("nsys_rules.api", "nsys_rules.api.analysis")


@pytest.mark.parametrize("module", RULE_MODULES)
def test_a_rule_imports_only_the_api_and_its_family(module):
    family = _family(module)
    bad = sorted(t for t in GRAPH[module] if t not in RULE_API
                 and not (family and (t == family or t.startswith(family + "."))))
    assert not bad, f"{module} imports {bad}: rules import nsys_rules.api (and .analysis) and their own family only"


def test_the_family_check_sees_a_family():
    assert _family("nsys_rules.rules.copies.common") == "nsys_rules.rules.copies"
    assert _family("nsys_rules.rules.graph_trace_hidden") is None


def test_nothing_imports_the_rule_pack():
    """The plugin manager loads the built-in plugins by name (``BUILTIN_PLUGINS``); no module imports them."""
    users = sorted(m for m, targets in GRAPH.items() if not m.startswith("nsys_rules.rules")
                   and any(t == "nsys_rules.rules" or t.startswith("nsys_rules.rules.") for t in targets))
    assert users == []
    from nsys_rules.plugin_manager import BUILTIN_PLUGINS
    assert [m for m, _ in BUILTIN_PLUGINS] == ["nsys_rules.builtin_loaders", "nsys_rules.rules", "nsys_rules.formatters"]


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith("nsys_rules.analysis.")))
def test_analysis_takes_no_trace_and_no_rule_context(module):
    """Pure functions over arrays: not even an annotation names a Trace or a RuleContext."""
    text = MODULES[module][0].read_text()
    assert "RuleContext" not in text and not any(
        isinstance(node, ast.arg) and node.annotation is not None and "Trace" in ast.unparse(node.annotation)
        for node in ast.walk(ast.parse(text))), f"{module} takes a Trace or a RuleContext: it belongs in nsys_rules.model"


def test_the_example_plugin_imports_only_the_public_api():
    files = sorted(EXAMPLE_PLUGIN.rglob("*.py"))
    assert files
    for path in files:
        names = imported_names(path, "plugin", False)
        ours = sorted(n for n in names if n.split(".")[0] == "nsys_rules")
        # Its tests may use the test kit too; its code only the API.
        allowed = ("nsys_rules.api", "nsys_rules.testing") if "tests" in path.parts else ("nsys_rules.api",)
        private = [n for n in ours if not any(n == a or n.startswith(a + ".") for a in allowed)]
        assert not private, f"{path.relative_to(ROOT)} imports {private}: plugins import from nsys_rules.api only"


@pytest.mark.parametrize("module", ["nsys_rules.api", "nsys_rules.testing"])
def test_the_public_api_names_exist_and_are_documented(module):
    import importlib

    api = importlib.import_module(module)
    assert api.__all__ and len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"{module}.{name} has no docstring"
