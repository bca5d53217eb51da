"""The workflow tests' shared run: the tiny config run to the end once a session.

Every test that reads a finished run reads this one; a test that runs anything in it (Snakemake,
DVC) works on its own copy (``workflow_helpers.copy_run``). Under pytest-xdist the workers share
it: the first to need it builds it under a file lock, the others wait for it and read it.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from filelock import FileLock

from tests.helpers.workflow import BIN, copy_workflow, run

TINY_CONFIG = Path(__file__).parent / "configs" / "tiny.yaml"


@pytest.fixture(scope="session")
def tiny_run(shared_tmp, repo) -> Path:
    """The tiny config (tests/workflow/configs/tiny.yaml, as config.yaml) run by `snakemake --cores 2`
    in a copy of the workflow that is a git repository: read it, never change it."""
    shared = shared_tmp
    root, finished = shared / "tiny-run", shared / "tiny-run.finished"
    with FileLock(shared / "tiny-run.lock"):
        if not finished.exists():
            shutil.rmtree(root, ignore_errors=True)  # a build that failed before
            copy_workflow(repo, root, TINY_CONFIG.read_text())
            run(["git", "init", "-q"], root)
            # minutes on a quiet machine; a slow or busy one must not fail every test that reads it
            run([str(BIN / "snakemake"), "--cores", "2"], root, timeout=3600)
            finished.touch()
    return root
