"""The tests that plan the workflow "from the repository root" (marked ``plans``) give the same
answers in a checkout where a run has finished: they plan in a clean copy of it (the fixture
clean_clone), never in the checkout itself.

A user runs README command 1, then command 2 in the same clone: this is that order, with the tiny
run's outputs, Snakemake's records of them and its logs planted in the root of a copy of the
checkout, and the planning tests run there by pytest.
"""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest
from workflow_helpers import BIN, run

from condensation.runtime.checkout import copy_checkout

pytestmark = pytest.mark.slow

OUTPUTS = ("data", "models", "runs", "results", "logs", ".snakemake")
"""What a finished run leaves in the root (all git-ignored)."""


def test_the_planning_tests_pass_beside_a_finished_run(repo, tiny_run, tmp_path):
    clone = copy_checkout(repo, tmp_path / "clone")
    run(["git", "init", "-q"], clone)
    run(["git", "add", "-A"], clone)  # the planning tests copy what git lists
    for name in OUTPUTS:
        shutil.copytree(tiny_run / name, clone / name, symlinks=True, dirs_exist_ok=True)  # results/README.md
    # planted where it counts: in this root, the tiny config's plan finds its run finished
    planned = run([str(BIN / "snakemake"), "-n", "--configfile", "tests/workflow/configs/tiny.yaml"], clone)
    assert "Nothing to be done" in planned.stdout + planned.stderr
    # in this worker's process alone (-n 0): the other worker has tests of its own
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "plans", "-n", "0", "-p", "no:cacheprovider", "-q"],
                          cwd=clone, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:]
    assert " passed" in done.stdout.splitlines()[-1] and "deselected" in done.stdout.splitlines()[-1]
