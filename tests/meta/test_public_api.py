"""The public API stays readable: every name documented, every name of ``nsys_rules.api`` used, moved names forwarded.

``nsys_rules.api`` holds what a rule author needs; the plumbing lives behind ``nsys_rules.api.analysis``
and ``nsys_rules.api.loaders`` (docs/api.md). A name nothing uses does not belong in the rule API; a
name that moved still answers from ``nsys_rules.api`` for one release, with a warning naming its place.
"""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import warnings
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NAMESPACES = ("nsys_rules.api", "nsys_rules.api.analysis", "nsys_rules.api.loaders")
API_DOC = ROOT / "docs" / "api.md"
EXAMPLE_PLUGIN = ROOT / "plugins" / "nsys-rules-nvtx-coverage" / "src"


def _public(module: str) -> list[tuple[str, str]]:
    return [(module, name) for name in importlib.import_module(module).__all__]


ALL_NAMES = [pair for module in NAMESPACES for pair in _public(module)]


def _listed() -> dict[str, str]:
    """docs/api.md: name -> its description, from the tables' rows."""
    rows = re.findall(r"^\| `([A-Za-z_][A-Za-z0-9_]*)` \| (.*?) \|$", API_DOC.read_text(), re.M)
    return dict(rows)


LISTED = _listed()


@pytest.mark.parametrize(("module", "name"), ALL_NAMES)
def test_every_public_name_is_documented(module, name):
    value = getattr(importlib.import_module(module), name)
    if inspect.isclass(value) or inspect.isfunction(value):
        assert (value.__doc__ or "").strip(), f"{module}.{name} has no docstring"
    assert LISTED.get(name, "").strip(), f"{module}.{name} is not listed, with what it is, in docs/api.md"


def test_the_namespaces_do_not_overlap_and_the_doc_lists_nothing_else():
    names = [name for _, name in ALL_NAMES]
    assert len(names) == len(set(names))
    assert sorted(set(LISTED) - set(names)) == [], "docs/api.md lists a name no __all__ has"


def _words(paths: list[Path]) -> set[str]:
    return {w for p in paths for w in re.findall(r"[A-Za-z_][A-Za-z0-9_]*", p.read_text())}


def _defining_module(value: object) -> str | None:
    return getattr(value, "__module__", None) if (inspect.isclass(value) or inspect.isfunction(value)) else None


def test_every_rule_api_name_is_used():
    """By a built-in rule, the example plugin, or a core module other than the one defining it (and the API)."""
    import nsys_rules.api as api

    rules_and_plugin = _words(sorted((ROOT / "rules").rglob("*.py")) + sorted(EXAMPLE_PLUGIN.rglob("*.py")))
    core = {p: _words([p]) for p in sorted((ROOT / "nsys_rules").rglob("*.py")) if "api" not in p.parts}
    unused = []
    for name in api.__all__:
        if name in rules_and_plugin:
            continue
        home = _defining_module(getattr(api, name))
        users = [p for p, words in core.items() if name in words
                 and ".".join(p.relative_to(ROOT).with_suffix("").parts) != home]
        if not users:
            unused.append(name)
    assert unused == [], f"nsys_rules.api names nothing uses: {unused} (move them behind a namespace)"


def _api_imports(path: Path) -> list[tuple[str, str]]:
    """(module, name) of every ``from nsys_rules.api... import name`` in ``path``."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("nsys_rules.api"):
            out.extend((node.module or "", alias.name) for alias in node.names)
    return out


@pytest.mark.parametrize("path", sorted((ROOT / "rules").rglob("*.py")) + sorted(EXAMPLE_PLUGIN.rglob("*.py")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_built_in_rules_and_the_example_plugin_import_no_moved_name(path):
    for module, name in _api_imports(path):
        assert module in NAMESPACES and name in importlib.import_module(module).__all__, \
            f"{path.relative_to(ROOT)} imports {name} from {module}: not a public name there"


@pytest.mark.parametrize("name", ["key_int", "packed_lexsort", "merge_intervals", "Trace", "Export", "ColumnarExport"])
def test_a_moved_name_still_answers_with_one_warning_naming_its_place(name):
    import nsys_rules.api as api

    place = "nsys_rules.api.loaders" if name in ("Trace", "Export", "ColumnarExport") else "nsys_rules.api.analysis"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        value = getattr(api, name)
    assert value is getattr(importlib.import_module(place), name)
    assert [w.category for w in caught] == [DeprecationWarning]
    assert f"{place}.{name}" in str(caught[0].message)
    assert name not in api.__all__


def test_an_unknown_name_is_still_an_attribute_error():
    import nsys_rules.api as api

    with pytest.raises(AttributeError, match="no_such_name"):
        api.no_such_name  # noqa: B018 - the attribute access is the test


def test_the_rule_api_is_a_readable_size():
    """The rule author's names, not the plumbing: about half of the 143 it had grown to."""
    import nsys_rules.api as api

    assert len(api.__all__) <= 80
    for plumbing in ("packed_lexsort", "key_int", "Export", "ColumnarExport", "Trace"):
        assert plumbing not in api.__all__
