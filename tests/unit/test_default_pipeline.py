"""benchmarks/default_pipeline.py: reading Snakemake's log, the critical path, list scheduling; and
the job order the rules' priorities give the default (a dry run of config.yaml)."""

import importlib.util
import random
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("default_pipeline", ROOT / "benchmarks/default_pipeline.py")
pipeline = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = pipeline  # its dataclass looks its module up
spec.loader.exec_module(pipeline)

LOG = """\
Select jobs to execute...
Execute 1 jobs...
[Thu Nov 26 06:40:08 2026]
localrule pretrain:
    input: runs/pretrain/toy/run.json, runs/pretrain/tokenizer
    output: runs/pretrain/toy/final, runs/pretrain/toy/checkpoints.json
    log: logs/pretrain/toy.log
    jobid: 4
    benchmark: logs/benchmarks/pretrain/toy.tsv
    reason: Missing output files: runs/pretrain/toy/final
    wildcards: model=toy
    priority: 30
    resources: tmpdir=/tmp, gpu=1
Select jobs to execute...
[Thu Nov 26 06:40:09 2026]
rule extract:
    input: models/toy/handle.json, data/samples/austen.jsonl
    output: results/geometry/toy/austen.npz
    jobid: 7
    benchmark: logs/benchmarks/extract/toy/austen.tsv
    wildcards: model=toy, dataset=austen
    resources: tmpdir=/tmp
[Thu Nov 26 06:40:20 2026]
Finished jobid: 7 (Rule: extract)
1 of 3 steps (33%) done
[Thu Nov 26 06:42:08 2026]
Finished jobid: 4 (Rule: pretrain)
[Thu Nov 26 06:42:09 2026]
rule measure_pretraining:
    input: runs/pretrain/toy/checkpoints.json, data/samples/austen.jsonl
    output: results/pretrain/geometry/toy/austen
    jobid: 9
    benchmark: logs/benchmarks/measure_pretraining/toy/austen.tsv
[Thu Nov 26 06:42:30 2026]
Finished jobid: 9 (Rule: measure_pretraining)
"""


def test_the_log_gives_each_job_its_rule_files_priority_and_times():
    jobs = pipeline.parse_jobs(LOG.splitlines())
    assert sorted(jobs) == [4, 7, 9]
    pretrain, extract, measure = jobs[4], jobs[7], jobs[9]
    assert (pretrain.rule, pretrain.priority, extract.priority) == ("pretrain", 30, 0)
    assert pretrain.outputs == ["runs/pretrain/toy/final", "runs/pretrain/toy/checkpoints.json"]
    assert extract.benchmark == "logs/benchmarks/extract/toy/austen.tsv"
    assert ((pretrain.start, pretrain.end, extract.start, extract.end, measure.start, measure.end)
            == (0, 120, 1, 12, 121, 142))
    assert pipeline.dependencies(jobs) == {4: set(), 7: set(), 9: {4}}


def test_a_directory_output_feeds_the_paths_inside_it():
    jobs = {
        1: pipeline.Job(1, "pretrain", outputs=["runs/pretrain/toy/final"]),
        2: pipeline.Job(2, "prepare_model", inputs=["runs/pretrain/toy/final/config.json"]),
        3: pipeline.Job(3, "other", inputs=["runs/pretrain/toy/finally.json"]),
    }
    assert pipeline.dependencies(jobs) == {1: set(), 2: {1}, 3: set()}


def chain_and_fillers(long_priority: int) -> dict:
    """Two cores; a 100 s job that a 100 s job waits on, and ten 20 s jobs that wait on nothing."""
    jobs = {1: pipeline.Job(1, "pretrain", outputs=["a"], seconds=100.0, priority=long_priority),
            2: pipeline.Job(2, "train", inputs=["a"], outputs=["b"], seconds=100.0, priority=long_priority)}
    for jobid in range(3, 13):
        jobs[jobid] = pipeline.Job(jobid, "extract", outputs=[f"x{jobid}"], seconds=20.0)
    return jobs


def test_list_scheduling_starts_the_long_chain_first_when_it_has_priority():
    first = chain_and_fillers(long_priority=10)
    needs = pipeline.dependencies(first)
    # the chain runs on one core (200 s) while the fillers share the other (200 s)
    assert pipeline.simulate(first, needs, cores=2, order=None) == 200.0
    assert [first[j].rule for j in pipeline.critical_path(first, needs)] == ["pretrain", "train"]
    # without priorities, ties in an order that starts every filler first: the chain waits
    last = chain_and_fillers(long_priority=0)
    for job in last.values():
        job.jobid = -job.jobid if job.rule == "extract" else job.jobid
    reordered = {job.jobid: job for job in last.values()}
    assert pipeline.simulate(reordered, pipeline.dependencies(reordered), cores=2, order=None) == 300.0
    spread = {pipeline.simulate(reordered, pipeline.dependencies(reordered), 2, random.Random(s)) for s in range(30)}
    assert min(spread) == 200.0 and max(spread) > 200.0


@pytest.mark.slow
@pytest.mark.plans
def test_the_default_starts_training_and_its_inputs_first(clean_clone):
    """Priorities in a dry run of config.yaml: the jobs that make the runs' inputs, the pre-training
    of the models studies start from or distil from, the other training runs, scoring and
    checkpoint measurement, then everything else."""
    planned = subprocess.run([str(Path(sys.executable).parent / "snakemake"), "-n"], cwd=clean_clone,
                             capture_output=True, text=True, check=True).stdout
    jobs = pipeline.parse_jobs(planned.splitlines()).values()
    priority = {}
    for job in jobs:
        name = Path(job.outputs[0]).parent.name if job.rule in ("pretrain", "prepare_model") else ""
        priority.setdefault((job.rule, name), set()).add(job.priority)
    # midtrain start, teacher
    assert priority[("pretrain", "toy-mlp256")] == priority[("pretrain", "toy-mlp1024")] == {30}
    assert priority[("pretrain", "toy-mlp32")] == priority[("train_study_run", "")] == {20}
    assert priority[("prepare_model", "toy-mlp32-init")] == priority[("pack_study_data", "")] == {40}
    assert priority[("prepare_model", "smollm2-135m")] == priority[("extract", "")] == {0}
    for rule in ("evaluate_checkpoint", "evaluate_pretrained", "measure_checkpoints", "measure_pretraining"):
        assert priority[(rule, "")] == {10}
    for rule in ("plan_pretrain", "plan_study_run", "prepare_tokenizer", "pack_pretraining_data", "build_corpus"):
        assert priority[(rule, "")] == {40}
