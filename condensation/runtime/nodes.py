"""A training run over several nodes, under SLURM: one launcher per node.

A run with ``nodes_per_run: N`` is one SLURM job of N nodes (resources:
``condensation.config.launch.training_resources``). Its job step is one ``srun`` that starts this
module once on every node (``srun_command``); each copy reads where it stands from SLURM's environment and starts
accelerate's launcher (torchrun underneath) for the G processes of its node::

    srun --nodes=N --ntasks=N --ntasks-per-node=1 --gres=gpu:G --kill-on-bad-exit=1 \\
        python -m condensation.runtime.nodes --nodes N --gpus-per-node G -- train_run.py ...
    # on node k (SLURM_NODEID=k), with the job's first host as the rendezvous:
    accelerate launch --multi_gpu --num_machines N --machine_rank k --num_processes N*G \\
        --main_process_ip <first host> --main_process_port <port> --rdzv_backend static train_run.py ...

The rendezvous is static: node k's processes are ranks k*G .. k*G+G-1 on every attempt, so a
retried job gives each rank the RNG state that rank saved. The port follows the job id, so two
jobs that share a first node do not collide. Torch-free: it only builds and starts commands.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import NoReturn

log = logging.getLogger("condensation")

SLURM_VARIABLES = ("SLURM_JOB_ID", "SLURM_NNODES", "SLURM_NODEID", "SLURM_JOB_NODELIST")
"""What srun sets for each task that a node's launcher reads."""

PORT_BASE, PORT_SPAN = 15000, 10000
"""Rendezvous ports: ``PORT_BASE + job id % PORT_SPAN``, below Linux's ephemeral range (32768+)."""


def srun_command(nodes: int, gpus_per_node: int, python: str, script: str) -> str:
    """The command that starts ``script`` (its arguments follow) on ``nodes`` nodes of the
    current SLURM job: one task per node, each this module. ``--kill-on-bad-exit`` ends every
    node's processes when one fails, instead of leaving the others waiting in a collective."""
    gres = f" --gres=gpu:{gpus_per_node}" if gpus_per_node > 0 else ""
    return (
        f"srun --nodes={nodes} --ntasks={nodes} --ntasks-per-node=1{gres} --kill-on-bad-exit=1 "
        f"{python} -m condensation.runtime.nodes --nodes {nodes} --gpus-per-node {gpus_per_node} -- {script}"
    )


@dataclass(frozen=True)
class NodePlace:
    """Where this node's launcher stands in the job, read from the environment srun gives a task."""

    nodes: int
    """Nodes of the job step (``SLURM_NNODES``)."""
    node_rank: int
    """This node's index among them (``SLURM_NODEID``), 0 on the first."""
    main_host: str
    """The first host of ``SLURM_JOB_NODELIST``: the rendezvous of every node."""
    port: int
    """The rendezvous port, from ``SLURM_JOB_ID``."""

    @classmethod
    def from_slurm(cls, env: Mapping[str, str], hostnames: Sequence[str] | None = None) -> NodePlace:
        """``hostnames``: the expanded node list (default: ``scontrol show hostnames``)."""
        missing = [name for name in SLURM_VARIABLES if name not in env]
        if missing:
            raise SystemExit(
                f"condensation.runtime.nodes: {', '.join(missing)} not set. A run over several nodes starts "
                "inside a SLURM job, one task per node (srun); use the SLURM profile (docs/cluster.md), "
                "or set nodes_per_run: 1 to train on this machine"
            )
        if hostnames is None:
            command = ["scontrol", "show", "hostnames", env["SLURM_JOB_NODELIST"]]
            listed = subprocess.run(command, capture_output=True, text=True, check=True, env=dict(env))
            hostnames = listed.stdout.split()
        return cls(
            nodes=int(env["SLURM_NNODES"]), node_rank=int(env["SLURM_NODEID"]), main_host=hostnames[0],
            port=PORT_BASE + int(env["SLURM_JOB_ID"]) % PORT_SPAN,
        )


def accelerate_command(place: NodePlace, gpus_per_node: int, python: str, script_args: Sequence[str]) -> list[str]:
    """accelerate's launcher for this node: a process per GPU (one without GPUs), ranked after
    the nodes before it. ``--multi_gpu`` is accelerate's name for its torchrun launcher; on
    nodes without GPUs the processes run on the CPU (``ACCELERATE_USE_CPU``, set by ``main``)."""
    per_node = max(1, gpus_per_node)
    return [
        python, "-m", "accelerate.commands.launch", "--multi_gpu",
        "--num_machines", str(place.nodes), "--machine_rank", str(place.node_rank),
        "--num_processes", str(place.nodes * per_node),
        "--main_process_ip", place.main_host, "--main_process_port", str(place.port),
        "--rdzv_backend", "static", *script_args,
    ]


def main(argv: Sequence[str], env: Mapping[str, str] = os.environ) -> NoReturn:
    parser = argparse.ArgumentParser(description="start this node's processes of a run over several nodes (in srun)")
    parser.add_argument("--nodes", type=int, required=True, help="nodes the run was planned for")
    parser.add_argument("--gpus-per-node", type=int, required=True, help="a process per GPU (0: one, on the CPU)")
    parser.add_argument("script", nargs=argparse.REMAINDER, help="-- the training script and its arguments")
    args = parser.parse_args(argv)
    script = args.script[1:] if args.script[:1] == ["--"] else args.script
    if not script:
        parser.error("give the training script after --")
    place = NodePlace.from_slurm(env)
    if place.nodes != args.nodes:
        raise SystemExit(
            f"condensation.runtime.nodes: the job step has {place.nodes} node(s) (SLURM_NNODES) but the run was "
            f"planned for {args.nodes} (nodes_per_run); its step count and its state depend on that number"
        )
    command = accelerate_command(place, args.gpus_per_node, sys.executable, script)
    child_env = dict(env) | ({"ACCELERATE_USE_CPU": "true"} if args.gpus_per_node == 0 else {})
    # one write() with its newline: the launchers of all nodes append to one job log (srun merges
    # their output), and print's separate writes of the text and the newline could interleave
    sys.stderr.flush()
    os.write(2, f"node {place.node_rank} of {place.nodes}: {shlex.join(command)}\n".encode())
    # exec, not a child: SLURM's SIGTERM reaches the launcher (which passes it to the ranks), and
    # no wrapper dies of it while the ranks save (condensation.runtime.gpus says why)
    os.execve(command[0], command, child_env)


if __name__ == "__main__":
    main(sys.argv[1:])
