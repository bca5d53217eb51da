"""How the workflow starts a training run and what its job asks of the scheduler, from the
run's config section (``pretrain`` or a study). Torch-free: the Snakemake planner imports it
(rules/common.smk, the rules pretrain and train_study_run).

A run with ``nodes_per_run: N`` is one SLURM job of N nodes whose one step the job's srun starts
(``condensation.runtime.nodes``); a run on one machine starts the training script itself, under
``accelerate launch`` (a process per GPU) when it has more than one GPU.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from condensation.runtime.nodes import srun_command

RESOURCE_NAMES = ("gpu", "gpu_model", "nodes", "tasks", "tasks_per_gpu", "mpi", "gres")
"""The resources a training job names (``None``: not asked for)."""


class LocalText:
    """Part of a job's command that names files of this machine: the Python of its environment,
    the checkout's scripts. A rule passes it as a param, which its shell command shows as text;
    Snakemake compares only plain params (str, numbers, containers) with those of the run that
    made an output, so this one is not compared, and a run made in another clone, environment
    or machine (a `dvc pull`, a copied project) is not made again for its paths alone."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __str__(self) -> str:
        return self.text

    def __repr__(self) -> str:
        return f"LocalText({self.text!r})"


def spread(section: Mapping[str, Any]) -> dict[str, int]:
    """How a run of ``section`` is spread over GPUs and nodes: a plain param beside the
    launcher's LocalText, so that changing it reruns the runs."""
    return {"gpus_per_run": section["gpus_per_run"], "nodes_per_run": section["nodes_per_run"]}


def launch_command(section: Mapping[str, Any], python: str, script: str) -> str:
    """The command that starts ``script`` (its arguments follow) for a run of ``section``: the
    one training script, under `accelerate launch` when a run has more than one GPU, and through
    srun, a launcher per node, when it has more than one node."""
    gpus, nodes = section["gpus_per_run"], section["nodes_per_run"]
    if nodes > 1:
        return srun_command(nodes, gpus, python, script)
    start = f"{python} -m accelerate.commands.launch --multi_gpu --num_processes {gpus}" if gpus > 1 else python
    return f"{start} {script}"


def training_resources(config: Mapping[str, Any], section_of: Callable[[Any], str]) -> dict[str, Callable]:
    """The resources of a training job, for ``section_of(wildcards)`` (pretrain or a study): the
    GPUs of one machine, or, over several nodes, the executor plugin's own resources for a job
    of N nodes with G GPUs each (--nodes, --ntasks, --gres per node) whose one step the job's
    srun starts (``mpi``: the plugin runs the job's command as it is, without its own srun).
    Each value is a function of the job's wildcards, as Snakemake's ``resources:`` takes it."""
    gpu_model = config["gpu_model"]  # the site's GPU type for SLURM (None: any GPU)

    def resource(name: str) -> Callable[[Any], Any]:
        def value(wildcards: Any) -> Any:
            spec = config[section_of(wildcards)]
            gpus = spec["gpus_per_run"] if config["use_gpus"] else 0
            nodes = spec["nodes_per_run"]
            if nodes == 1:
                return {"gpu": gpus, "gpu_model": gpu_model if gpus else None}.get(name)
            typed = f"gpu:{gpu_model}:{gpus}" if gpu_model else f"gpu:{gpus}"
            # `gpu` stays 0: the plugin would turn it into --gpus, a count for the whole job.
            # tasks_per_gpu 0: else the plugin sets --ntasks-per-gpu to `tasks` for a GPU job.
            return {"gpu": 0, "nodes": nodes, "tasks": nodes, "tasks_per_gpu": 0, "mpi": "srun",
                    "gres": typed if gpus else None}.get(name)

        return value

    return {name: resource(name) for name in RESOURCE_NAMES}
