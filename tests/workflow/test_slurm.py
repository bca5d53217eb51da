"""The SLURM profile planning what one machine cannot hold: the paper, and Table 4's runs as jobs of
16 nodes x 8 GPUs. Jobs submitted to a real SLURM: test_real_slurm.py."""

from __future__ import annotations

import pytest

from tests.helpers.workflow import BIN, run

pytestmark = pytest.mark.slow


@pytest.mark.plans
def test_slurm_profile_plans_the_paper_with_site_resources(clean_clone):
    """The SLURM profile parses with the executor plugin installed and gives GPU rules their
    partition, GPU and attempt-scaled memory."""
    result = run([str(BIN / "snakemake"), "--workflow-profile", "profiles/slurm", "-n", "--configfile",
                  "configs/paper.yaml"], clean_clone)
    text = result.stdout + result.stderr
    midtrain = text[text.index("rule train_study_run:"):]
    midtrain = midtrain[: midtrain.index("\n\n")]
    for expected in ("slurm_partition=gpu", "gpu=1", "gpu_model=a100", "mem_mb=64000", "runtime=480"):
        assert expected in midtrain, expected


@pytest.mark.plans
def test_the_full_scale_overlay_plans_table_4_as_jobs_of_sixteen_nodes(clean_clone):
    """configs/paper-fullscale.yaml plans under the SLURM profile: the paper's jobs, Table 4's runs
    each one job of 16 nodes x 8 GPUs whose srun starts a launcher per node."""
    command = [str(BIN / "snakemake"), "--workflow-profile", "profiles/slurm", "-n", "-p", "--configfile",
               "configs/paper.yaml", "configs/paper-fullscale.yaml"]
    text = run(command, clean_clone).stdout
    counts = dict(line.split() for line in text.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit())
    assert counts["train_study_run"] == str(42 + 15 + 3) and counts["table4"] == "1"
    scratch = [block for block in text.split("\n\n") if "rule train_study_run:" in block and "study=scratch" in block]
    assert len(scratch) == 3  # CE, dispersion, distillation
    for block in scratch:
        assert "gpu=0, nodes=16, tasks=16, tasks_per_gpu=0, mpi=srun, gres=gpu:a100:8" in block
        assert "srun --nodes=16 --ntasks=16 --ntasks-per-node=1 --gres=gpu:8 --kill-on-bad-exit=1 " in block
        assert "-m condensation.runtime.nodes --nodes 16 --gpus-per-node 8 -- " in block
