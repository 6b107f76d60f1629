"""Every subprocess a test starts has a hard time limit (issue 42, item 6: a suite that never hangs).

``subprocess.run``/``call``/``check_call``/``check_output`` need a ``timeout=``; a child a test drives itself
(``Popen``) is started with ``tests.bounded.popen`` and ended with ``tests.bounded.finish``, which kill it with
its process group and fail the test, saying so, when it outlives its limit.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
TESTS = [ROOT / "tests", ROOT / "plugins" / "nsys-rules-nvtx-coverage" / "tests"]
#: Files that are no tests: the helper itself, a fake tool that runs as a child (its parent bounds it), and the
#: capture scripts that ran on the GPU machine once.
EXEMPT = {"tests/bounded.py", "tests/cli/fake_nsys.py", "tests/cli/fake_tools.py"}
WAITING = {"run", "call", "check_call", "check_output"}


def _unbounded(path: Path) -> list[tuple[int, str]]:
    """(line, name) of each subprocess call in ``path`` that has no time limit of its own."""
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "subprocess"):
            continue
        name = node.func.attr
        if name == "Popen" or (name in WAITING and not any(k.arg == "timeout" for k in node.keywords)):
            found.append((node.lineno, f"subprocess.{name}"))
    return found


def test_every_subprocess_of_the_tests_is_bounded():
    files = [p for folder in TESTS for p in folder.rglob("*.py")
             if str(p.relative_to(ROOT)) not in EXEMPT and "data" not in p.relative_to(ROOT).parts]
    assert len(files) > 100
    offences = [f"{path.relative_to(ROOT)}:{line}: {name}" for path in files for line, name in _unbounded(path)]
    assert offences == [], ("use tests.bounded.run (or a timeout=) and tests.bounded.popen/finish:\n"
                            + "\n".join(offences))


def test_the_check_sees_an_unbounded_call(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text("import subprocess\nsubprocess.run(['true'])\nsubprocess.run(['true'], timeout=5)\n"
                      "p = subprocess.Popen(['true'])\n")
    assert _unbounded(sample) == [(2, "subprocess.run"), (4, "subprocess.Popen")]
