"""The tests that plan the workflow "from the repository root" (marked ``plans``) give the same
answers in a checkout where a run has finished: they plan in a clean copy of it (the fixture
clean_clone), never in the checkout itself (tests/conftest.py refuses a ``plans`` test without it).

A user runs README command 1, then command 2 in the same clone: this is that order, with the tiny
run's outputs, Snakemake's records of them and its logs planted in the root of a copy of the
checkout, and the first planning test of each module run there by pytest.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from condensation.runtime.checkout import copy_checkout
from tests.helpers.collection import refuse_planning_outside_clean_clone
from tests.helpers.workflow import BIN, copy_workflow, run

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
    # The first planning test of each module that has some (every one of them plans in clean_clone,
    # which tests/conftest.py enforces; the others differ in what they plan, not where), in this
    # worker's process alone (-n 0): the other worker has tests of its own.
    plugins = str(clone / "tests/workflow")  # first_of_each_module.py
    env = os.environ | {"PYTHONPATH": os.pathsep.join([plugins, os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "pytest", "-m", "plans", "-n", "0", "-p", "no:cacheprovider",
                           "-p", "first_of_each_module", "-q", "-rA"],
                          cwd=clone, env=env, capture_output=True, text=True, timeout=1800)
    assert done.returncode == 0, done.stdout[-4000:]
    passed = {line.split()[1].split("::")[0] for line in done.stdout.splitlines() if line.startswith("PASSED ")}
    assert passed == PLANNING_MODULES, done.stdout[-4000:]


PLANNING_MODULES = {
    "tests/unit/test_default_pipeline.py", "tests/unit/test_gpu_check.py", "tests/workflow/test_adding_your_own.py",
    "tests/workflow/test_pipeline.py", "tests/workflow/test_readme.py", "tests/workflow/test_slurm.py",
}
"""The modules with tests marked ``plans``: a new one is named here, or this test fails."""


def test_a_planning_test_without_the_clean_copy_is_refused_at_collection():
    class Item:
        def __init__(self, nodeid, marked, fixturenames):
            self.nodeid, self.marked, self.fixturenames = nodeid, marked, fixturenames

        def get_closest_marker(self, name):
            return name if self.marked else None

    fine = [Item("a::plans", True, ["clean_clone", "tmp_path"]), Item("a::other", False, ["repo"])]
    refuse_planning_outside_clean_clone(fine)
    with pytest.raises(pytest.UsageError, match="clean_clone.*b::in_root$"):
        refuse_planning_outside_clean_clone([*fine, Item("b::in_root", True, ["repo"])])


def test_a_workflow_copied_for_a_test_leaves_what_git_ignores_behind(repo, tmp_path):
    """After `dvc repro` or `dvc pull` the root holds DVC's cache (3 GB for the default): a test's
    copy of the workflow takes what a clone holds, not that, nor bytecode."""
    clone = copy_checkout(repo, tmp_path / "clone")
    run(["git", "init", "-q"], clone)
    for ignored in (".dvc/cache/files/md5/00/0123", ".dvc/tmp/lock", "condensation/__pycache__/x.pyc"):
        (clone / ignored).parent.mkdir(parents=True, exist_ok=True)
        (clone / ignored).write_bytes(b"\0" * 1024)
    copied = copy_workflow(clone, tmp_path / "project", "{}\n")
    assert (copied / ".dvc/config").is_file() and (copied / "rules/common.smk").is_file()
    assert not (copied / ".dvc/cache").exists() and not (copied / ".dvc/tmp").exists()
    assert not (copied / "condensation/__pycache__").exists()
