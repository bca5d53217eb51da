"""Training over several nodes and in FSDP2 shards, on the CPU: the per-node launcher and what it
reads from SLURM, two simulated nodes (gloo on 127.0.0.1) against one node of as many processes,
FSDP with the dispersion loss and its exact resume after a SIGKILL, and the config's checks."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from transformers import AutoModelForCausalLM

from condensation.config.plan import processes_per_run, study_checkpoints
from condensation.config.validate import ConfigError, validate_config
from condensation.runtime import nodes
from condensation.runtime.nodes import NodePlace, accelerate_command, srun_command
from condensation.training.batches import validation_batches
from tests.helpers.training import assert_same_log_except_time, read_log, read_series, state_step

REPO = Path(__file__).resolve().parents[2]
FAKE_SLURM = REPO / "tests" / "workflow" / "fake_slurm"
SLURM_TASK = {"SLURM_JOB_ID": "4242", "SLURM_NNODES": "2", "SLURM_JOB_NODELIST": "node[07-08]"}


# ----------------------------------------------------------------------------- the launcher


def test_srun_starts_one_launcher_per_node_with_its_gpus():
    line = srun_command(3, 8, "/venv/bin/python", "/wf/train_run.py")
    assert line.startswith("srun --nodes=3 --ntasks=3 --ntasks-per-node=1 --gres=gpu:8 --kill-on-bad-exit=1 ")
    assert line.endswith("-m condensation.runtime.nodes --nodes 3 --gpus-per-node 8 -- /wf/train_run.py")
    assert "--gres" not in srun_command(2, 0, "python", "t.py")  # CPU nodes ask for no GPU


def test_each_node_is_ranked_by_its_slurm_node_id_around_the_first_host():
    place = NodePlace.from_slurm(SLURM_TASK | {"SLURM_NODEID": "1"}, hostnames=["node07", "node08"])
    assert place == NodePlace(nodes=2, node_rank=1, main_host="node07", port=15000 + 4242)
    command = accelerate_command(place, 4, "python", ["train_run.py", "--plan", "run.json"])
    flags = dict(zip(command[4:-3:2], command[5:-3:2]))
    assert command[:4] == ["python", "-m", "accelerate.commands.launch", "--multi_gpu"]
    assert flags == {
        "--num_machines": "2", "--machine_rank": "1", "--num_processes": "8", "--main_process_ip": "node07",
        "--main_process_port": "19242", "--rdzv_backend": "static",
    }
    assert command[-3:] == ["train_run.py", "--plan", "run.json"]
    assert accelerate_command(place, 0, "python", ["t.py"])[command.index("--num_processes") + 1] == "2"  # one a node


def test_the_launcher_reads_the_first_host_from_scontrol():
    env = os.environ | SLURM_TASK | {"SLURM_NODEID": "0", "PATH": f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}"}
    assert NodePlace.from_slurm(env).main_host == "127.0.0.1"  # the fake scontrol's hosts


def test_the_launcher_stops_outside_slurm_and_on_a_step_of_another_size():
    with pytest.raises(SystemExit, match="SLURM_JOB_ID, SLURM_NNODES, SLURM_NODEID, SLURM_JOB_NODELIST not set"):
        nodes.main(["--nodes", "2", "--gpus-per-node", "1", "--", "t.py"], env={})
    path = f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}"
    three = SLURM_TASK | {"SLURM_NNODES": "3", "SLURM_NODEID": "0", "PATH": path}
    with pytest.raises(SystemExit, match=r"has 3 node\(s\) \(SLURM_NNODES\) but the run was planned for 2"):
        nodes.main(["--nodes", "2", "--gpus-per-node", "1", "--", "t.py"], env=three)


def test_a_run_over_several_nodes_outside_slurm_says_where_it_runs(tmp_path, monkeypatch):
    from condensation.runtime import gpus

    monkeypatch.setenv("PATH", str(tmp_path))  # no srun here
    with pytest.raises(SystemExit, match="srun: command not found .a run over several nodes runs under SLURM"):
        gpus.main(["0", "--", *srun_command(2, 1, sys.executable, "train_run.py").split()])


def test_the_launcher_module_imports_without_torch():
    code = "import sys, condensation.runtime.nodes; print(sorted({'torch', 'numpy', 'accelerate'} & set(sys.modules)))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- validation in lockstep


def test_validation_batches_split_blocks_over_ranks_and_keep_sharded_ranks_in_step():
    # 10 blocks over 4 ranks in batches of 2: ranks 0, 1 hold 3 blocks (2 batches), ranks 2, 3 hold 2 (1 batch)
    shares = [validation_batches(10, rank, 4, 2) for rank in range(4)]
    assert [[b.tolist() for b in share] for share in shares] == [[[0, 4], [8]], [[1, 5], [9]], [[2, 6]], [[3, 7]]]
    padded = [validation_batches(10, rank, 4, 2, lockstep=True) for rank in range(4)]
    assert [len(share) for share in padded] == [2, 2, 2, 2]
    assert padded[2][1].size == 0 and padded[2][0].tolist() == [2, 6]  # the pad is empty: nothing counted
    every = np.concatenate([b for share in padded for b in share])
    assert sorted(every.tolist()) == list(range(10))


# ----------------------------------------------------------------------------- the config


MINIMAL = {"datasets": {"austen": {"source": "austen"}}, "models": {"m": {"source": "hub", "id": "gpt2"}}}


def study(**section):
    return {**MINIMAL, "scratch": {"models": [], "dataset": "austen", "geometry_dataset": "austen"},
            "midtrain": {"models": ["m"], "dataset": "austen", "geometry_dataset": "austen",
                         "methods": {"ce": {"objective": "ce"}}, **section}}


def test_steps_and_checkpoints_divide_by_every_process_of_every_node():
    train = {"train_tokens": 64 * 2 * 8 * 64, "block_size": 64, "micro_batch_size": 2, "num_checkpoints": 1}
    config = validate_config(study(nodes_per_run=2, gpus_per_run=4, train=train))
    assert processes_per_run(config["midtrain"]) == 8
    # 64 steps of 2 blocks on each of 8 processes
    assert study_checkpoints(config, "midtrain") == ["step-0000000", "step-0000032", "step-0000064"]
    assert processes_per_run({"nodes_per_run": 3, "gpus_per_run": 0}) == 3  # CPU nodes: a process each


def test_fsdp_needs_two_processes_and_no_baseline_that_edits_the_embeddings():
    with pytest.raises(ConfigError, match=r"midtrain\.train\.sharding: fsdp shards over a run's processes, and this"):
        validate_config(study(train={"sharding": "fsdp"}))
    baselines = {"ce": {"objective": "ce"}, "noisy": {"objective": "noisy_embedding"}}
    with pytest.raises(ConfigError, match=r"methods \['noisy'\] edit them"):
        validate_config(study(gpus_per_run=2, methods=baselines, train={"sharding": "fsdp"}))
    two_nodes = validate_config(study(nodes_per_run=2, train={"sharding": "fsdp"}))
    assert two_nodes["midtrain"]["train"]["sharding"] == "fsdp"
    with pytest.raises(ConfigError, match="'zero' is not one of"):
        validate_config(study(train={"sharding": "zero"}))


def test_only_an_init_model_of_an_architecture_unties_its_embeddings():
    untied = {"tie_word_embeddings": False}
    models = {"m": {"source": "hub", "id": "gpt2"}, "m-init": {"source": "init", "of": "m", **untied}}
    assert validate_config({**MINIMAL, "models": models})["models"]["m-init"]["tie_word_embeddings"] is False
    with pytest.raises(ConfigError, match=r"models\.m.*tie_word_embeddings"):
        validate_config({**MINIMAL, "models": {"m": {"source": "hub", "id": "gpt2", "tie_word_embeddings": False}}})
    pretrained = {"toy": {"source": "pretrain", "arch": {}}, "toy-init": {"source": "init", "of": "toy", **untied}}
    with pytest.raises(ConfigError, match="the init of a pretrain model is that model's own initialisation"):
        validate_config({**MINIMAL, "models": pretrained})


def test_the_full_scale_overlay_is_table_4_as_published(repo):
    """configs/paper-fullscale.yaml over configs/paper.yaml, merged as Snakemake merges them: 156B
    tokens in steps of 128 x 4,096 tokens over 16 nodes of 8 GPUs in FSDP shards, the authors'
    dispersion settings, an untied Qwen3-0.6B, all of c4/en."""
    from snakemake.utils import update_config

    from condensation.config.runs import TrainConfig, tokens_per_step, total_steps

    merged: dict = {}
    for name in ("configs/paper.yaml", "configs/paper-fullscale.yaml"):
        update_config(merged, yaml.safe_load((repo / name).read_text()))
    config = validate_config(merged)
    scratch, train = config["scratch"], TrainConfig(**config["scratch"]["train"])
    processes = processes_per_run(scratch)
    assert (scratch["nodes_per_run"], scratch["gpus_per_run"], processes) == (16, 8, 128)
    assert tokens_per_step(train, processes) == 128 * 4096 and train.sharding == "fsdp"
    assert train.train_tokens == 156 * 10**9 and total_steps(train, processes) == 297_547
    assert scratch["methods"]["dispersion"] == {"objective": "dispersion", "weight": 0.1, "tau": 1.0, "clamp": 0.25,
                                                "max_tokens": 256}
    assert set(scratch["methods"]) == {"ce", "dispersion", "distillation"}  # paper.yaml's newer three dropped
    assert config["models"]["qwen3-0.6b-init"]["tie_word_embeddings"] is False
    assert config["datasets"]["c4"]["data_files"] == "en/c4-train.*-of-01024.json.gz"


# ----------------------------------------------------------------------------- runs of several processes


RUN = textwrap.dedent(
    """
    import dataclasses, json, sys, time
    from pathlib import Path
    sys.path.insert(0, {repo!r})
    import torch
    torch.set_num_threads(1)
    from accelerate import PartialState
    from condensation.config.objectives import AuxLossConfig
    from condensation.training.loop import train
    from condensation.training.losses import AuxiliaryLoss
    from tests.helpers.training import TRAIN_BLOCKS, VAL_BLOCKS, make_model, resume_config
    out, sharding, slow = Path(sys.argv[1]), sys.argv[2], sys.argv[3:] == ["slow"]
    aux = AuxiliaryLoss(AuxLossConfig("dispersion", weight=0.5))
    config = dataclasses.replace(resume_config(), sharding=sharding)
    model = make_model()
    if slow:  # so that the parent can kill mid-run; sleeping changes no number
        model.register_forward_pre_hook(lambda *args: time.sleep(0.1))
    result = train(model, TRAIN_BLOCKS, VAL_BLOCKS, config, out, method=aux)
    state = PartialState()
    report = {{"world": state.num_processes, "steps": result.steps}}
    (out / f"rank{{state.process_index}}.json").write_text(json.dumps(report))
    """
)
CPU_ENV = {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}


def write_run_script(tmp_path: Path) -> Path:
    script = tmp_path / "run.py"
    script.write_text(RUN.format(repo=str(REPO)))
    return script


def final_weights(out: Path) -> dict[str, torch.Tensor]:
    return dict(AutoModelForCausalLM.from_pretrained(out / "final").named_parameters())


def assert_run_written_once(out: Path, steps: int) -> None:
    assert [int(row["step"]) for row in read_log(out)] == list(range(steps + 1))  # one writer, every row once
    assert not list(out.rglob(".*.tmp"))
    assert json.loads((out / "checkpoints.json").read_text())["checkpoints"][-1]["step"] == steps


@pytest.mark.slow
def test_two_nodes_of_two_processes_train_as_one_node_of_four(tmp_path):
    """Two node launchers, as srun starts them (SLURM_NODEID 0 and 1, the fake scontrol's hosts
    on 127.0.0.1), against accelerate's launcher with four processes on one node: the same ranks
    see the same blocks and the collectives sum in the same order, so the weights are equal.
    FSDP2, whose shards cross the nodes; the nodes' ranks and rendezvous are the launcher's, the
    same under DDP, whose processes train as FSDP2's (the SIGKILL test below)."""
    sharding = "fsdp"
    script = write_run_script(tmp_path)
    one = [sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "4", str(script)]
    done = subprocess.run([*one, str(tmp_path / "one"), sharding], env=os.environ | CPU_ENV, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]

    path, job = f"{FAKE_SLURM}{os.pathsep}{os.environ['PATH']}", str(4000 + os.getpid() % 1000)  # job: the port
    launchers = [
        subprocess.Popen(
            [sys.executable, "-m", "condensation.runtime.nodes", "--nodes", "2", "--gpus-per-node", "2", "--",
             str(script), str(tmp_path / "two"), sharding],
            env=os.environ | CPU_ENV | SLURM_TASK | {"SLURM_JOB_ID": job, "SLURM_NODEID": str(node), "PATH": path,
                                                     "PYTHONPATH": str(REPO)},
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
        )
        for node in (0, 1)
    ]
    outputs = [launcher.communicate(timeout=600)[0] for launcher in launchers]
    assert [launcher.returncode for launcher in launchers] == [0, 0], outputs[0][-3000:] + outputs[1][-3000:]
    for flag in ("node 1 of 2:", "--machine_rank 1", "--main_process_ip 127.0.0.1"):
        assert flag in outputs[1], flag

    ranks = [json.loads((tmp_path / "two" / f"rank{rank}.json").read_text()) for rank in range(4)]
    assert ranks == [{"world": 4, "steps": 5}] * 4  # 20 steps of one process, divided by four
    one_weights, two_weights = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    assert all(torch.equal(one_weights[name], two_weights[name]) for name in one_weights)
    assert_same_log_except_time(read_log(tmp_path / "one"), read_log(tmp_path / "two"))
    assert_run_written_once(tmp_path / "two", 5)


def launch_two(script: Path, out: Path, *args: str) -> subprocess.Popen:
    """torchrun with two CPU processes, in a session of its own (a kill takes every process)."""
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
               str(out), *args]
    return subprocess.Popen(command, env=os.environ | CPU_ENV, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def finish(process: subprocess.Popen) -> None:
    _, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr[-3000:]


def kill_once_the_log_ran_past_a_state(process: subprocess.Popen, out: Path) -> int:
    """SIGKILL every process of the run once a state exists and the log has rows after it (as
    SLURM ends a job's whole step); the state's step."""
    progress = out / "state" / "progress.json"
    deadline = time.monotonic() + 300
    while True:
        try:
            if len(read_log(out)) > 1 + state_step(progress):
                break
        except FileNotFoundError:  # nothing yet, or the state is being replaced
            pass
        assert process.poll() is None, "training exited before it could be killed"
        assert time.monotonic() < deadline, "no state within 300 s"
        time.sleep(0.01)
    os.killpg(process.pid, signal.SIGKILL)
    process.wait()
    return state_step(progress)


@pytest.mark.slow
def test_fsdp_trains_with_dispersion_and_resumes_bit_identically_after_a_sigkill(tmp_path):
    script = write_run_script(tmp_path)
    for sharding in ("fsdp", "ddp"):
        finish(launch_two(script, tmp_path / sharding, sharding))
    killed = launch_two(script, tmp_path / "killed", "fsdp", "slow")
    killed_at = kill_once_the_log_ran_past_a_state(killed, tmp_path / "killed")
    assert 0 < killed_at < 10 and not (tmp_path / "killed" / "final").exists()
    assert len(list((tmp_path / "killed" / "state" / "shards").glob("*.distcp"))) == 2  # a shard file per rank
    finish(launch_two(script, tmp_path / "killed", "fsdp"))

    reference, resumed = final_weights(tmp_path / "fsdp"), final_weights(tmp_path / "killed")
    assert all(torch.equal(reference[name], resumed[name]) for name in reference)
    assert_same_log_except_time(read_log(tmp_path / "fsdp"), read_log(tmp_path / "killed"))
    assert_run_written_once(tmp_path / "killed", 10)
    assert read_series(tmp_path / "killed").keys() == read_series(tmp_path / "fsdp").keys()
    # final/ is the plain Hugging Face directory DDP writes: same tensors (tied head stored once),
    # same class, and weights equal to DDP's up to the order the shards' gradients are summed in
    replicated = final_weights(tmp_path / "ddp")
    assert reference.keys() == replicated.keys()
    assert all(torch.allclose(reference[name], replicated[name], atol=1e-5) for name in reference)
    config = json.loads((tmp_path / "fsdp" / "final" / "config.json").read_text())
    assert config["architectures"] == ["GPT2LMHeadModel"] and config["tie_word_embeddings"] is True
    assert json.loads((tmp_path / "fsdp" / "final" / "train_summary.json").read_text())["config"]["sharding"] == "fsdp"


@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_fsdp_on_two_gpus_trains_as_ddp(tmp_path):
    """NCCL on two GPUs, bf16 autocast (mixed_precision auto): FSDP reaches DDP's validation loss."""
    script = write_run_script(tmp_path)
    for sharding in ("fsdp", "ddp"):
        command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2", str(script),
                   str(tmp_path / sharding), sharding]
        done = subprocess.run(command, env=os.environ | {"OMP_NUM_THREADS": "1"}, capture_output=True, text=True,
                              timeout=600)
        assert done.returncode == 0, done.stderr[-3000:]
    summaries = [json.loads((tmp_path / name / "final" / "train_summary.json").read_text()) for name in ("fsdp", "ddp")]
    assert summaries[0]["mixed_precision"] == "bf16" and summaries[0]["world_size"] == 2
    assert summaries[0]["final_val_loss"] == pytest.approx(summaries[1]["final_val_loss"], abs=1e-2)
