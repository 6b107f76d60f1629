"""No regular expression in nsys_rules/ or rules/ can backtrack over a hostile name.

Kernel, API and NVTX names come from the trace, so a 4 KB name made of one word repeated is
fair input. Python's engine searches a pattern like ``gemm.*simt`` from every "gemm" of such a
name and scans to its end each time: quadratic in the name (fp32-gemm once took 72 s on
3,200 such names; ``benchmarks/attacks.py`` measures it). A wildcard run (``.*``, ``.+``)
followed by more pattern is allowed only where the pattern is anchored at the start (``^``,
one alternative), so the search has one starting point. The check reads the source of every
literal passed to ``re.compile`` / ``re.search`` / ``re.match`` / ``re.fullmatch``.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = (ROOT / "nsys_rules", ROOT / "rules")
CALLS = {"compile", "search", "match", "fullmatch", "findall", "finditer", "sub", "split"}


def backtracks(pattern: str) -> bool:
    """Whether ``pattern`` has a wildcard run followed by more pattern without a single anchored start."""
    plain = re.sub(r"\\.", "x", pattern)  # escaped characters are literals here
    runs = [m.end() for m in re.finditer(r"\.[*+]\??", plain)]
    if not runs:
        return False
    if any(plain[end:].strip(")$") for end in runs):  # something must match after the run
        return not (plain.startswith("^") and "|" not in _top_level(plain))
    return False


def _top_level(pattern: str) -> str:
    """The characters of ``pattern`` outside any group (where a ``|`` splits the whole pattern)."""
    depth, out = 0, []
    for ch in pattern:
        depth += ch == "("
        if depth == 0:
            out.append(ch)
        depth -= ch == ")"
    return "".join(out)


def _literal_patterns() -> list[tuple[str, int, str]]:
    found = []
    for folder in FOLDERS:
        for path in sorted(folder.rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in CALLS
                        and isinstance(node.func.value, ast.Name) and node.func.value.id == "re" and node.args
                        and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                    found.append((str(path.relative_to(ROOT)), node.lineno, node.args[0].value))
    return found


PATTERNS = _literal_patterns()


def test_patterns_were_found():
    assert len(PATTERNS) > 20  # the scan sees the code it is meant to guard


@pytest.mark.parametrize("where,line,pattern", PATTERNS, ids=[f"{w}:{n}" for w, n, _ in PATTERNS])
def test_no_pattern_backtracks_over_long_names(where, line, pattern):
    assert not backtracks(pattern), f"{where}:{line}: {pattern!r} searches from every position and backtracks"


@pytest.mark.parametrize("pattern,bad", [
    (r"sgemm|gemm_f32f32_f32f32_f32|simt.*gemm|gemm.*simt", True),  # the fp32-gemm pattern that took 72 s
    (r"gemm.+simt", True), (r"^a.*b|c.*d", True),
    (r"^cu(?:da)?Memcpy.*Async", False), (r",\s*(seq|op_id)\s*=.*$", False), (r"nccl[A-Z_]", False),
    (r"a\.*b", False), (r"(foo.*)$", False)])
def test_the_check_itself(pattern, bad):
    assert backtracks(pattern) is bad
