"""The import graph of nsys_rules/ and rules/: no cycles, rules apart from each other, plugins on the public API.

Every import counts, also the ones inside functions (a lazy import is still a dependency);
only imports under ``if TYPE_CHECKING:`` are left out, since they never run.
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


def _runtime_imports(tree: ast.AST) -> list[ast.Import | ast.ImportFrom]:
    """Import statements that run: those under ``if TYPE_CHECKING:`` are skipped."""
    found: list[ast.Import | ast.ImportFrom] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for other in child.orelse:
                    visit(other)
                continue
            if isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            visit(child)

    visit(tree)
    return found


def imported_names(path: Path, module: str, is_package: bool) -> set[str]:
    """The full names of the modules (or of their attributes) ``path`` imports, relative imports resolved."""
    package = module if is_package else module.rpartition(".")[0]
    out: set[str] = set()
    for node in _runtime_imports(ast.parse(path.read_text())):
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


def _graph() -> dict[str, set[str]]:
    edges: dict[str, set[str]] = {}
    for module, (path, is_package) in MODULES.items():
        targets = {_resolve(n) for n in imported_names(path, module, is_package)}
        edges[module] = {t for t in targets if t and t != module}
    return edges


GRAPH = _graph()


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


def test_the_graph_sees_the_project():
    assert "nsys_rules.engine" in GRAPH and "nsys_rules.rules.kernel_tail" in GRAPH
    assert "nsys_rules.analysis.launches" in GRAPH["nsys_rules.rules.kernel_tail"]
    assert "nsys_rules.engine" in GRAPH["nsys_rules.commands.check"]


def test_the_cycle_finder_finds_a_cycle():
    assert _cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_no_import_cycles():
    assert _cycles(GRAPH) == []


RULE_MODULES = sorted(m for m in GRAPH if m.startswith("nsys_rules.rules."))


@pytest.mark.parametrize("module", RULE_MODULES)
def test_a_rule_imports_no_other_rule_and_not_the_engine(module):
    bad = sorted(t for t in GRAPH[module] if t == "nsys_rules.rules" or t.startswith("nsys_rules.rules.")
                 or t == "nsys_rules.engine")
    assert not bad, f"{module} imports {bad}: shared pieces belong in nsys_rules.analysis"


def test_rules_folder_holds_rules_only():
    """Helpers shared by rules live in nsys_rules.analysis (or nsys_rules.job), not beside the rules."""
    helpers = [m for m in RULE_MODULES if not any(isinstance(node, ast.Assign) and any(
        isinstance(t, ast.Name) and t.id == "RULE" for t in node.targets) for node in ast.parse(MODULES[m][0].read_text()).body)]
    assert helpers == []


def test_only_the_plugin_manager_imports_the_rule_pack():
    users = sorted(m for m, targets in GRAPH.items() if not m.startswith("nsys_rules.rules")
                   and any(t == "nsys_rules.rules" or t.startswith("nsys_rules.rules.") for t in targets))
    assert users == ["nsys_rules.plugins"]


@pytest.mark.parametrize("module", sorted(m for m in GRAPH if m.startswith("nsys_rules.analysis.")))
def test_the_analysis_layer_sits_below_rules_engine_and_output(module):
    above = ("nsys_rules.engine", "nsys_rules.rule", "nsys_rules.plugins", "nsys_rules.report", "nsys_rules.formatters",
             "nsys_rules.commands", "nsys_rules.cli", "nsys_rules.rules", "nsys_rules.api")
    bad = sorted(t for t in GRAPH[module] if any(t == a or t.startswith(a + ".") for a in above))
    assert not bad, f"{module} imports {bad}"


def test_the_example_plugin_imports_only_the_public_api():
    files = sorted(EXAMPLE_PLUGIN.rglob("*.py"))
    assert files
    for path in files:
        names = imported_names(path, "plugin", False)
        ours = sorted(n for n in names if n.split(".")[0] == "nsys_rules")
        private = [n for n in ours if n != "nsys_rules.api" and not n.startswith("nsys_rules.api.")]
        assert not private, f"{path.relative_to(ROOT)} imports {private}: plugins import from nsys_rules.api only"


def test_the_public_api_names_exist_and_are_documented():
    import nsys_rules.api as api

    assert api.__all__ and len(set(api.__all__)) == len(api.__all__)
    for name in api.__all__:
        value = getattr(api, name)
        if callable(value):
            assert (value.__doc__ or "").strip(), f"nsys_rules.api.{name} has no docstring"
