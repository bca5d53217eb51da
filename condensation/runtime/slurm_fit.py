"""Before a SLURM run submits anything: does each job's request fit a node of its partition?

A job that asks for more CPUs, memory or GPUs than any node of its partition holds fails at
once (``BadConstraints``, or sbatch refuses it), and the profile's retries submit it again, each
attempt asking for more. This reads the nodes from ``sinfo`` and names every rule whose request
no node can hold, with the values to fit, before the first submission (the Snakefile's
``onstart``, under the SLURM executor). Torch-free.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

__all__ = ["Node", "Request", "check_before_submitting", "misfits", "read_sinfo", "request_of", "sinfo_partitions"]

SINFO_FORMAT = "%P|%N|%c|%m|%G"


def _cpus(count: int) -> str:
    return f"{count} CPU" if count == 1 else f"{count} CPUs"


@dataclass(frozen=True)
class Node:
    cpus: int
    memory_mb: int
    gpus: Mapping[str, int] = field(default_factory=dict)
    """GPUs by type ('' for untyped GRES)."""

    def gpu_count(self, model: str | None) -> int:
        return sum(count for kind, count in self.gpus.items() if model is None or kind == model)

    def describe(self) -> str:
        gpus = ", ".join(f"{count} GPU {kind}".rstrip() for kind, count in self.gpus.items()) or "no GPU"
        return f"{_cpus(self.cpus)}, {self.memory_mb} MB, {gpus}"


@dataclass(frozen=True)
class Request:
    """What one job asks of each of its nodes."""

    rule: str
    partition: str | None  # None: the cluster's default partition
    cpus: int
    memory_mb: int
    gpus: int
    gpu_model: str | None
    nodes: int = 1

    def describe(self) -> str:
        gpus = f", {self.gpus} GPU {self.gpu_model or ''}".rstrip() if self.gpus else ""
        per_node = f" per node, on {self.nodes} nodes" if self.nodes > 1 else ""
        return f"{_cpus(self.cpus)}, {self.memory_mb} MB{gpus}{per_node}"


def _gres(text: str) -> dict[str, int]:
    """``gpu:a100:4(S:0-1),gpu:2`` -> {'a100': 4, '': 2}; other GRES are left out."""
    gpus: dict[str, int] = {}
    for entry in re.sub(r"\([^)]*\)", "", text).split(","):
        parts = entry.strip().split(":")
        if parts[0] != "gpu" or len(parts) < 2 or not parts[-1].isdigit():
            continue
        kind = parts[1] if len(parts) == 3 else ""
        gpus[kind] = gpus.get(kind, 0) + int(parts[-1])
    return gpus


def read_sinfo(text: str) -> tuple[dict[str, list[Node]], str | None]:
    """Nodes by partition, and the default partition, from ``sinfo -h -N -o '%P|%N|%c|%m|%G'``."""
    partitions: dict[str, list[Node]] = {}
    default = None
    for line in text.splitlines():
        fields = line.strip().split("|")
        if len(fields) != 5:
            continue
        name, _, cpus, memory, gres = fields
        if name.endswith("*"):
            name = default = name[:-1]
        memory_mb = int(re.sub(r"\D.*", "", memory) or 0)
        partitions.setdefault(name, []).append(Node(int(cpus.rstrip("+")), memory_mb, _gres(gres)))
    return partitions, default


def sinfo_partitions() -> tuple[dict[str, list[Node]], str | None] | None:
    """The cluster's nodes by partition (read_sinfo), or None where sinfo is absent or fails."""
    if shutil.which("sinfo") is None:
        return None
    listed = subprocess.run(["sinfo", "-h", "-N", "-o", SINFO_FORMAT], capture_output=True, text=True, timeout=60)
    return read_sinfo(listed.stdout) if listed.returncode == 0 else None


def _number(value: object, unknown: int) -> int:
    """A resource's value, or ``unknown`` where Snakemake cannot know it yet (it depends on an input)."""
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else unknown


def request_of(rule: str, resources: Mapping[str, object], threads: int) -> Request:
    """A job's request per node, as snakemake-executor-plugin-slurm turns its resources into sbatch
    options: ``gpu`` (one node) or ``gres`` per node (several), ``cpus_per_task``, else
    ``cpus_per_gpu`` times the GPUs, else the threads; ``mem_mb`` per node."""
    nodes = _number(resources.get("nodes"), 1) or 1
    gres = resources.get("gres")
    if isinstance(gres, str) and gres:
        typed = _gres(gres)
        gpus, model = sum(typed.values()), next(iter(typed), "") or None
    else:
        gpu = resources.get("gpu")  # a number, or unknown until an input exists: then at least one
        gpus, model = (0 if gpu is None else _number(gpu, 1)), resources.get("gpu_model")
    if _number(resources.get("cpus_per_task"), 0) > 0:
        cpus = _number(resources.get("cpus_per_task"), 1)
    elif gpus and _number(resources.get("cpus_per_gpu"), 0) > 0:
        cpus = _number(resources.get("cpus_per_gpu"), 1) * gpus
    else:
        cpus = threads
    partition = resources.get("slurm_partition")
    return Request(rule, partition if isinstance(partition, str) and partition else None, cpus,
                   _number(resources.get("mem_mb"), 0), gpus, model if isinstance(model, str) else None, nodes)


def misfits(requests: Iterable[Request], partitions: Mapping[str, list[Node]], default: str | None) -> list[str]:
    """One line for each rule with a request that no ``nodes`` nodes of its partition can hold."""
    lines: dict[str, str] = {}
    for request in requests:
        if request.rule in lines:
            continue
        name = request.partition or default
        nodes = partitions.get(name or "", [])
        if not nodes:
            known = ", ".join(sorted(partitions)) or "none"
            lines[request.rule] = f"{request.rule}: partition {name!r} does not exist (partitions: {known})"
            continue
        fitting = [node for node in nodes if node.cpus >= request.cpus and node.memory_mb >= request.memory_mb
                   and node.gpu_count(request.gpu_model) >= request.gpus]
        if len(fitting) < request.nodes:
            largest = max(nodes, key=lambda node: (node.gpu_count(request.gpu_model), node.cpus, node.memory_mb))
            lines[request.rule] = (f"{request.rule}: asks {request.describe()} of partition {name}, whose largest "
                                   f"node holds {largest.describe()}")
    return list(lines.values())


def check_before_submitting(workflow) -> None:
    """Under the SLURM executor, stop before the first submission naming each rule whose jobs no
    node can hold (``misfits``); elsewhere, or where ``sinfo`` does not answer, nothing."""
    plugin = workflow.executor_plugin
    if plugin is None or plugin.cli_prefix != "slurm":
        return
    cluster = sinfo_partitions()
    if cluster is None:
        return
    requests = [request_of(job.rule.name, job.resources, job.threads)
                for job in workflow.dag.needrun_jobs() if not job.is_local]
    problems = misfits(requests, *cluster)
    if problems:
        raise SystemExit(
            "These jobs ask for more than any node of their partition holds (sinfo), and would fail on every "
            "retry:\n  " + "\n  ".join(problems) + "\nFit the values in the profile's file, not with --set-resources "
            "on the command line, which replaces a rule's whole block (docs/cluster.md, 'Fitting the profile').")
