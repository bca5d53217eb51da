"""The house rules the code keeps (issue 32): short functions, one home for each setting."""

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LONGEST = 60
"""Lines a function may take, its signature and docstring included (decorators not)."""


def test_no_function_is_longer_than_sixty_lines():
    too_long = []
    for folder in ("condensation", "workflow_scripts", "tools", "benchmarks", "stand_in_hub"):
        for path in sorted((REPO / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    lines = node.end_lineno - node.lineno + 1
                    if lines > LONGEST:
                        too_long.append(f"{path.relative_to(REPO)}:{node.lineno} {node.name}: {lines} lines")
    assert not too_long, "functions over 60 lines (split them):\n" + "\n".join(too_long)
