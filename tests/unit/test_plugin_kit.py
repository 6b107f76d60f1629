"""The plugin author kit: a rule written from docs/plugins.md alone, tested the way its author would."""

from __future__ import annotations

import importlib.util
import itertools
import re
import sys
import types
from pathlib import Path

import pytest

from nsys_rules.api import Severity
from nsys_rules.testing import TraceBuilder, metric_values, only_finding, run_rule, run_rules
from nsys_rules.loaders.tables import TABLES
from nsys_rules.plugin_manager import build_registry
from tests.conftest import ROOT

DOC = ROOT / "docs" / "plugins.md"


def doc_example() -> str:
    """The first Python block of docs/plugins.md's "Writing a rule" section, as a reader copies it."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Writing a rule"):]
    return re.search(r"```python\n(.*?)```", section, re.S).group(1)


_LOADED = itertools.count()


def load_plugin(source: str, folder: Path) -> types.ModuleType:
    """The source saved as the author's module and imported, as an installed plugin's module is."""
    name = f"authors_plugin_{next(_LOADED)}"
    path = folder / f"{name}.py"
    path.write_text(source, encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look the module up while the class is built
    spec.loader.exec_module(module)
    return module


def dominated_trace(path):
    b = TraceBuilder()
    for i in range(4):  # one GEMM of 900 us and a 100 us norm, four times: the GEMM is 90 % of GPU time
        b.kernel("gemm_kernel", start=i * 2_000_000, duration=900_000)
        b.kernel("norm_kernel", start=i * 2_000_000 + 1_000_000, duration=100_000)
    return b.write(path)


def test_the_documented_rule_works_as_written(tmp_path):
    plugin = load_plugin(doc_example(), tmp_path)
    finding = only_finding(run_rule(plugin.BigKernels, dominated_trace(tmp_path / "t.sqlite")))
    assert finding.rule == "big-kernels" and finding.severity is Severity.WARNING
    assert metric_values(finding) == {"share": 90.0, "kernel_time": 3_600_000}
    assert finding.metrics["share"].unit == "%"
    assert finding.estimated_savings_ns == 1_800_000
    # The same class registered through the documented hook, as an installed plugin would be.
    registry = build_registry(autoload=False, extra=(("authors-plugin", plugin),))
    assert registry.errors == [] and registry.rules["big-kernels"] is plugin.BigKernels


@pytest.mark.parametrize("mistake, expected", [
    (('requires = ("kernels",)', 'requires = ("kernel",)'),
     "rule big-kernels: unknown tables ['kernel'] (did you mean 'kernels'?)"),
    (('"start", "end", "name")', '"start", "end", "nmae")'),
     "rule big-kernels: unknown columns of kernels: ['nmae'] (did you mean 'name'?)"),
    (('@dataclass(frozen=True)', '@dataclass'), "rule big-kernels: Options must be a frozen dataclass"),
    (('name = "big-kernels"', 'name = "BigKernels"'), "rule BigKernels: name 'BigKernels' is not kebab-case"),
])
def test_a_mistake_fails_the_authors_test_with_the_users_message(tmp_path, mistake, expected):
    old, new = mistake
    source = doc_example()
    assert old in source
    plugin = load_plugin(source.replace(old, new, 1), tmp_path)
    # What users get when the plugin is installed: the rule refused, the plugin named, exit 4.
    registry = build_registry(autoload=False, extra=(("authors-plugin", plugin),))
    (error,) = registry.errors
    assert error.plugin == "authors-plugin" and error.error.startswith(expected)
    # What the author's own test gets: the same line, before any trace is read.
    with pytest.raises(AssertionError) as failed:
        run_rule(plugin.BigKernels, dominated_trace(tmp_path / "t.sqlite"))
    assert str(failed.value) == f"the engine refuses this rule: {error.error}"


def test_an_unregistered_name_says_why(tmp_path):
    with pytest.raises(AssertionError, match="no rule 'big-kernel' is registered"):
        run_rule("big-kernel", dominated_trace(tmp_path / "t.sqlite"))


def test_window_full_judges_what_the_steady_window_leaves_out(tmp_path):
    # Four model-init kernels, then three kernels of a loop without step markers: the steady state is the
    # loop (the init kernels never recur), so a steady rule sees 3 kernels, a full one all 7.
    b = TraceBuilder()
    for i in range(4):
        b.kernel(f"init_kernel_{i}", start=i * 1_000_000, duration=500_000)
    for i in range(24):
        b.kernel("loop_kernel", start=10_000_000 + i * 1_000_000, duration=100_000)
    path = b.write(tmp_path / "t.sqlite")
    plugin = load_plugin(doc_example().replace('window = "full"', 'window = "steady"'), tmp_path)
    steady = run_rules([plugin.BigKernels], path, options={"big-kernels": {"min_share_pct": 0.0}})
    full = run_rules([plugin.BigKernels], path, options={"big-kernels": {"min_share_pct": 0.0}}, window="full")
    (s,), (f,) = steady.findings, full.findings
    assert metric_values(s)["share"] == 100.0  # only the loop
    assert metric_values(f)["kernel_time"] == 2_400_000 and metric_values(f)["share"] == pytest.approx(100 * 2.4 / 4.4)


def test_the_documented_columns_are_the_loaders_columns():
    text = DOC.read_text(encoding="utf-8")
    rows = dict(re.findall(r"^\| `(\w+)` \| (`[a-z_]+`(?:, `[a-z_]+`)*) \|$", text, re.M))
    assert {t: tuple(re.findall(r"`(\w+)`", cols)) for t, cols in rows.items()} == \
        {name: table.column_names for name, table in TABLES.items()}


def test_trace_builder_rows_take_name_start_duration(tmp_path):
    b = TraceBuilder()
    b.overhead("CUDA profiling data flush", 1_000, 500)
    b.nvtx("step", 0, duration=2_000)
    with pytest.raises(TypeError, match="the name comes first"):
        b.overhead(1_000, 1_500, "dlopen")  # type: ignore[arg-type]  # the old (start, end, name) order
    with pytest.raises(TypeError, match="end or duration"):
        b.nvtx("step", 0, 10, duration=10)
    import sqlite3

    db = sqlite3.connect(b.write(tmp_path / "t.sqlite"))
    assert db.execute("SELECT start, end FROM PROFILER_OVERHEAD").fetchall() == [(1_000, 1_500)]
    assert db.execute("SELECT start, end FROM NVTX_EVENTS").fetchall() == [(0, 2_000)]


def test_the_test_kit_is_still_found_in_the_api_for_one_release():
    import nsys_rules.api as api
    import nsys_rules.testing as kit

    with pytest.warns(DeprecationWarning, match="moved to nsys_rules.testing.TraceBuilder"):
        assert api.TraceBuilder is kit.TraceBuilder
    with pytest.raises(AttributeError):
        api.no_such_name  # noqa: B018 - the attribute access is the test


def doc_block(heading: str) -> str:
    """The first Python block under ``heading`` in docs/plugins.md."""
    text = DOC.read_text(encoding="utf-8")
    return re.search(r"```python\n(.*?)```", text[text.index(heading):], re.S).group(1)


def test_the_documented_option_check_refuses_in_one_line(tmp_path):
    from nsys_rules.api import UsageError

    rule = load_plugin(doc_example(), tmp_path).BigKernels
    checked = type("BigKernels", (rule,), {"__doc__": rule.__doc__,  # the documented rule with the documented Options
                                           "Options": load_plugin(doc_block("### Checking option values"), tmp_path).Options})
    path = dominated_trace(tmp_path / "t.sqlite")
    assert len(run_rule(checked, path, options={"kernel_pattern": "gemm"})) == 1
    with pytest.raises(UsageError) as refused:
        run_rule(checked, path, options={"kernel_pattern": "("})
    assert str(refused.value) == ("options: big-kernels.kernel_pattern '(' is not a regular expression: missing ), "
                                  "unterminated subpattern at position 0")
    with pytest.raises(UsageError, match=r"^options: big-kernels\.min_share_pct must be a percent \(0-100\), not 120$"):
        run_rule(checked, path, options={"min_share_pct": 120})


def test_the_conventions_check_passes_the_documented_rule(tmp_path):
    from nsys_rules.testing import assert_rule_conventions, rule_convention_problems

    plugin = load_plugin(doc_example(), tmp_path)
    assert rule_convention_problems(plugin.BigKernels) == []
    assert_rule_conventions(plugin.BigKernels)


@pytest.mark.parametrize("mistake, expected", [
    (('    Evidence: the kernel\'s share and its total time.\n', ''),
     "big-kernels: the docstring lacks the sections ['Evidence']"),
    (('    """One kernel name takes a large share of the GPU time.\n\n', '    """\n'),
     "big-kernels: the docstring has no summary line"),
    (('Options: `min_share_pct`.', 'Options: `min_share_pct`, `max_share_pct`.'),
     "big-kernels: the docstring's Options section names options it does not have: ['max_share_pct']"),
    (('metadata={"help": "report from this percent of GPU time"}', 'metadata={}'),
     "big-kernels: Options fields without metadata help: ['min_share_pct']"),
    (('"report from this percent of GPU time"', '"report from this fraction (0-1) of GPU time"'),
     "big-kernels.min_share_pct: a *_pct option's help says 'percent'"),
    (('min_share_pct: float = field(default=20.0', 'min_share: float = field(default=0.2'),
     "big-kernels.min_share: a share or fraction is a percent named *_pct"),
    (('title = "One kernel dominates GPU time"', 'title = ""'), "big-kernels: no title"),
    (('requires = ("kernels",)', 'requires = ("kernel",)'),
     "the engine refuses it: rule big-kernels: unknown tables ['kernel'] (did you mean 'kernels'?)"),
])
def test_the_conventions_check_names_each_mistake(tmp_path, mistake, expected):
    from nsys_rules.testing import assert_rule_conventions, rule_convention_problems

    old, new = mistake
    source = doc_example()
    assert old in source
    if "min_share:" in new:
        source = source.replace("ctx.options.min_share_pct", "100 * ctx.options.min_share")
    rule = load_plugin(source.replace(old, new, 1), tmp_path).BigKernels
    problems = rule_convention_problems(rule)
    assert any(p.startswith(expected) for p in problems), problems
    with pytest.raises(AssertionError, match="breaks the rule conventions"):
        assert_rule_conventions(rule)


# -- the walk-through of "Writing a rule", followed as written ------------------------------
def walk_through() -> dict[str, str]:
    """The walk-through's fenced blocks: ``tree``, ``rule``, ``pyproject``, ``tests``, ``commands``, ``rules``, ``check``."""
    text = DOC.read_text(encoding="utf-8")
    section = text[text.index("## Writing a rule"):text.index("### What a rule declares")]
    blocks = re.findall(r"```(\w*)\n(.*?)```", section, re.S)
    assert [lang for lang, _ in blocks] == ["", "python", "toml", "python", "bash", "", ""], \
        "the walk-through's blocks changed: update this test's map of them"
    return dict(zip(("tree", "rule", "pyproject", "tests", "commands", "rules", "check"), (b for _, b in blocks), strict=True))


def test_the_walk_through_works_as_written(tmp_path):
    """Every file of the walk-through from its blocks, installed as pip installs it (the package and its entry
    point in a dist-info), its tests run, and the commands of step 5 print what the page shows."""
    import os
    import shutil
    import subprocess

    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib

    from tests.conftest import EXAMPLE

    doc = walk_through()
    files = dict(re.findall(r"^\s+(\S+\.\w+)\s+(.*)$", doc["tree"], re.M))
    assert set(files) == {"pyproject.toml", "src/big_kernels/__init__.py", "src/big_kernels/plugin.py",
                          "tests/test_big_kernels.py"}, files
    project = tmp_path / "nsys-rules-big-kernels"
    contents = {"pyproject.toml": doc["pyproject"], "src/big_kernels/__init__.py": "",
                "src/big_kernels/plugin.py": doc["rule"], "tests/test_big_kernels.py": doc["tests"]}
    for name, text in contents.items():
        (project / name).parent.mkdir(parents=True, exist_ok=True)
        (project / name).write_text(text, encoding="utf-8")

    # What `pip install .` makes of pyproject.toml: the packages from package-dir, the entry points in a dist-info.
    meta = tomllib.loads(doc["pyproject"])
    site = tmp_path / "site"
    source = project / meta["tool"]["setuptools"]["package-dir"][""]
    for package in meta["tool"]["setuptools"]["packages"]:
        shutil.copytree(source / package, site / package)
    dist = site / f"{meta['project']['name'].replace('-', '_')}-{meta['project']['version']}.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {meta['project']['name']}\n"
                                   f"Version: {meta['project']['version']}\n")
    points = meta["project"]["entry-points"]
    assert list(points) == ["nsys_rules"], "the entry-point group is nsys_rules"
    (dist / "entry_points.txt").write_text("".join(f"[{group}]\n" + "".join(f"{k} = {v}\n" for k, v in entries.items())
                                                   for group, entries in points.items()))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")])}
    env.pop("NSYS_RULES_DISABLE_PLUGIN_AUTOLOAD", None)

    def run(*args: str) -> str:
        proc = subprocess.run([sys.executable, *args], cwd=project, env=env, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        return proc.stdout

    # Step 5: the tests pass (as many as the page says), then the rule is listed and reported.
    passed = re.search(r"# (\d+) passed", doc["commands"]).group(1)
    assert f"{passed} passed" in run("-m", "pytest", "-q", "-p", "no:cacheprovider", "tests")
    assert " ".join(doc["rules"].split()) in [" ".join(line.split()) for line in run("-m", "nsys_rules", "rules").splitlines()]
    commands = [line for line in doc["commands"].splitlines() if line.startswith("nsys-rules check")]
    (command,) = commands
    args = command.replace("path/to/nsys-rules/examples/rust_release_build.sqlite", str(EXAMPLE)).split()[1:]
    assert doc["check"] in run("-m", "nsys_rules", *args)
