"""Running the real workflow from tests: a copy of the project's files, and Snakemake/DVC calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

BIN = Path(sys.executable).parent
PROJECT_FILES = ["Snakefile", "rules", "workflow_scripts", "condensation", "report", "dvc.yaml", ".dvc", ".dvcignore", ".gitignore"]


def run(args: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    # dvc starts `snakemake` by name: the environment running the tests must come first on PATH.
    env = {**os.environ, "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"}
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result


def copy_workflow(repo: Path, root: Path, config_text: str) -> Path:
    """The workflow's files under ``root`` with ``config_text`` as its config.yaml; the offline
    .deb files are linked, not copied."""
    root.mkdir(parents=True, exist_ok=True)
    for name in PROJECT_FILES:
        source = repo / name
        (shutil.copytree if source.is_dir() else shutil.copy)(source, root / name)
    (root / "config.yaml").write_text(config_text)
    (root / "resources").mkdir()
    (root / "resources" / "debs").symlink_to(repo / "resources" / "debs")
    return root
