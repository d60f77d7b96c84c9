"""No function in the packages is longer than 60 lines (docs/architecture.md, Invariants): a longer
one does several things, each of which wants its own name. Counted from the `def` line to the last
line of its body (docstring included, decorators not)."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("costmodel", "measure", "simulate", "reports", "pipeline")
MAX_LINES = 60


def long_functions(max_lines: int = MAX_LINES) -> list[str]:
    """'path:line name (n lines)' of every function or method longer than `max_lines`."""
    out = []
    for pkg in PACKAGES:
        for path in sorted((ROOT / pkg).rglob("*.py")):
            tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    n = node.end_lineno - node.lineno + 1
                    if n > max_lines:
                        out.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name} ({n} lines)")
    return out


def test_no_function_exceeds_60_lines():
    assert long_functions() == [], "split these into functions named for what each part does"


def test_the_count_sees_a_long_function(tmp_path):
    """The check itself: a 61-line function is found (so an empty list above means something)."""
    body = "\n".join(f"    x{i} = {i}" for i in range(60))
    tree = ast.parse(f"def long():\n{body}\n")
    node = tree.body[0]
    assert node.end_lineno - node.lineno + 1 == 61
