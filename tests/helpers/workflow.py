"""Running the real workflow from tests: a copy of the project's files, and Snakemake/DVC calls."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from condensation.runtime.checkout import copy_checkout
from condensation.stages import NO_BARS_VARIABLES

BIN = Path(sys.executable).parent
PROJECT_FILES = ["Snakefile", "rules", "workflow_scripts", "condensation", "report", "dvc.yaml", ".dvc", ".dvcignore",
                 ".gitignore"]


def run(args: list[str], cwd: Path, timeout: int = 900) -> subprocess.CompletedProcess:
    # dvc starts `snakemake` by name: the environment running the tests must come first on PATH.
    # The bar switches go: a stage run earlier in this process set them, and the jobs must show
    # that they switch the bars off themselves, as in a user's shell.
    env = {name: value for name, value in os.environ.items() if name not in NO_BARS_VARIABLES}
    env["PATH"] = f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}"
    result = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if result.returncode != 0:
        raise AssertionError(f"{' '.join(args)} failed ({result.returncode}):\n"
                             f"{result.stdout[-4000:]}\n{result.stderr[-6000:]}")
    return result


def copy_workflow(repo: Path, root: Path, config_text: str) -> Path:
    """The workflow's files under ``root`` with ``config_text`` as its config.yaml; the offline
    .deb files are linked, not copied. Only the files a clone holds: what git ignores there (DVC's
    cache after a `dvc repro` or `dvc pull`, gigabytes; bytecode) stays behind."""
    copy_checkout(repo, root, only=PROJECT_FILES)
    (root / "config.yaml").write_text(config_text)
    return root


def copy_run(finished: Path, target: Path) -> Path:
    """A finished project copied with its files' times and Snakemake's records, so that Snakemake
    finds it finished too: for a test that runs something in a shared run."""
    shutil.copytree(finished, target, symlinks=True)
    return target
