"""The house rules the code keeps: short functions, one home for each setting."""

import ast
import subprocess
import sys
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


def package_imports() -> dict[str, set[str]]:
    """Each module of ``condensation`` -> the package's modules it imports, at the top or deferred."""
    paths = {".".join(path.relative_to(REPO).with_suffix("").parts).removesuffix(".__init__"): path
             for path in (REPO / "condensation").rglob("*.py")}

    def module_of(name: str) -> str:
        while name not in paths and "." in name:
            name = name.rsplit(".", 1)[0]
        return name if name in paths else ""

    imports: dict[str, set[str]] = {}
    for module, path in paths.items():
        found = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found |= {alias.name for alias in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found |= {node.module} | {f"{node.module}.{alias.name}" for alias in node.names}
        imports[module] = {module_of(name) for name in found if name.startswith("condensation")} - {module, ""}
    return imports


def test_imports_form_no_circle():
    imports, state = package_imports(), {}

    def visit(module: str, path: tuple[str, ...]) -> None:
        state[module] = "open"
        for other in sorted(imports[module]):
            assert state.get(other) != "open", "import circle: " + " -> ".join((*path, module, other))
            if other not in state:
                visit(other, (*path, module))
        state[module] = "done"

    for module in sorted(imports):
        if module not in state:
            visit(module, ())


def test_imports_point_down_the_pipeline():
    """config/ and runtime/ (the planner's, torch-free) import no later stage; stages/ is imported
    by nothing but itself; reporting/ by stages/ and measurement's figures alone."""
    def folder(module: str) -> str:
        return module.split(".")[1] if module.count(".") else ""

    wrong = []
    for module, imported in package_imports().items():
        for other in imported:
            if folder(module) == "runtime" and folder(other) != "runtime":
                wrong.append(f"{module} -> {other}")
            if folder(module) == "config" and folder(other) not in ("config", "runtime"):
                wrong.append(f"{module} -> {other}")
            if folder(other) == "stages" and folder(module) != "stages":
                wrong.append(f"{module} -> {other}")
            if (folder(other) == "reporting" and folder(module) not in ("reporting", "stages")
                    and (module, other) != ("condensation.measurement", "condensation.reporting.figures.trends")):
                wrong.append(f"{module} -> {other}")
    assert not wrong, "imports against the pipeline's direction:\n" + "\n".join(sorted(wrong))


REPORTING_SCRIPTS = ("dataset_figure", "family_figure", "findings", "paired_figure", "pick_selected_score",
                     "score_tables", "scores_by_step", "series_band", "series_figure", "study_figures", "study_metrics",
                     "study_tables", "trend_metrics", "trend_table")
"""The workflow scripts that read stored results and write tables, figures and findings: a job
each per family, pair, series, study and table, some hundred in the test suite's runs."""


def test_the_reporting_jobs_start_without_torch():
    """Their modules (every reporting/ module, and the stage modules their scripts import) load
    without torch or transformers: about a second of each such job's start (docs/tests.md). A
    stage that needs torch imports it in the function that does (``# deferred:``)."""
    modules = {"condensation.reporting." + ".".join(path.relative_to(REPO / "condensation/reporting")
                                                    .with_suffix("").parts).removesuffix(".__init__")
               for path in (REPO / "condensation/reporting").rglob("*.py")}
    for script in REPORTING_SCRIPTS:
        for node in ast.parse((REPO / f"workflow_scripts/{script}.py").read_text(encoding="utf-8")).body:
            if isinstance(node, ast.ImportFrom) and node.module.startswith("condensation"):
                modules.add(node.module)
    assert "condensation.stages.figures" in modules and "condensation.reporting.findings.page" in modules
    code = ("import sys\n" + "".join(f"import {module}\n" for module in sorted(modules))
            + "print(sorted(name for name in ('torch', 'transformers', 'lm_eval') if name in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr
