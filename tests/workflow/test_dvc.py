"""What DVC versions is a state a collaborator works from (README, "I have the DVC remote").

The author: the session's tiny run, committed, reproduced by `dvc repro` and pushed to a local
remote. The collaborator: a fresh `git clone` elsewhere, `dvc pull`, `python -m condensation
adopt`; then nothing is left to do, a figure's setting remakes that figure and what reads it, a
training setting that training and what follows it, `dvc exp run --temp` trains nothing, and a
damaged pulled file is found and never adopted.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.plan_overlays import job_counts
from tests.helpers.workflow import BIN, copy_run, run

pytestmark = pytest.mark.slow

GIT = ["git", "-c", "user.name=Author", "-c", "user.email=author@example.org"]
FIGURE_SETTING = "pairs: {distillation: {labels: [CE, distilled, wide teacher]}}\n"
TRAINING_SETTING = "scratch: {train: {lr: 0.002}}\n"


def dvc(project: Path, *args: str) -> str:
    return run([str(BIN / "dvc"), *args], project).stdout


def planned(project: Path, overlay: str | None = None) -> tuple[dict[str, int], str]:
    """Jobs per rule of `snakemake -n` (with ``overlay`` after config.yaml), and its text."""
    command = [str(BIN / "snakemake"), "-n"]
    if overlay:
        (project / "overlay.yaml").write_text(overlay)
        command += ["--configfile", "config.yaml", "overlay.yaml"]
    done = run(command, project)
    text = done.stdout + done.stderr
    return job_counts(done.stdout), text


@pytest.fixture(scope="module")
def published(tiny_run, tmp_path_factory) -> Path:
    """The author's repository: the tiny run committed with the dvc.lock of `dvc repro`, pushed."""
    base = tmp_path_factory.mktemp("dvc")
    origin = copy_run(tiny_run, base / "origin")
    dvc(origin, "remote", "add", "-f", "-d", "shared", str(base / "remote"))  # in .dvc/config, committed
    dvc(origin, "repro")
    run([*GIT, "add", "-A"], origin)
    run([*GIT, "commit", "-q", "-m", "the tiny run"], origin)
    dvc(origin, "push")
    return origin


@pytest.fixture(scope="module")
def pulled(published, tmp_path_factory, repo) -> Path:
    """The collaborator's clone, pulled and adopted as the README says."""
    clone = tmp_path_factory.mktemp("collaborator") / "clone"
    run(["git", "clone", "-q", str(published), str(clone)], clone.parent)
    (clone / "resources").mkdir()
    (clone / "resources/debs").symlink_to(repo / "resources/debs")  # what tools/install.sh fetches
    dvc(clone, "pull")
    adopted = run([sys.executable, "-m", "condensation", "adopt"], clone).stdout
    assert "every job's outputs are recorded as made by the settings in dvc.lock" in adopted
    return clone


def test_the_author_reproduces_and_publishes_the_results(published):
    assert "changed" not in dvc(published, "status")
    # the metrics are the findings' main numbers, a few per claim, not every model's rho
    metrics = json.loads(dvc(published, "metrics", "show", "--json"))[""]["data"]  # "": the workspace
    assert list(metrics) == ["results/metrics/summary.json"]
    summary = metrics["results/metrics/summary.json"]["data"]
    assert set(summary) == {"size", "distillation", "initialisation", "pretraining", "dispersion", "scores",
                            "prediction", "tokens"}
    assert {"estimate", "ci_low", "ci_high"} <= set(summary["dispersion"]["deep_cos"])
    # with --split, each plot's rows are under its anchor definitions instead of inside the spec
    plots = json.loads(dvc(published, "plots", "show", "--json", "--split"))["data"]
    series = {name: {row.get("series") for entry in entries for row in entry["anchor_definitions"]["<DVC_METRIC_DATA>"]}
              for name, entries in plots.items()}
    assert series["layer_means"] >= {"toy-wide / austen", "toy-narrow / pydocs", "minilm-l6 / austen"}
    assert series["midtrain_validation_loss"] == {"toy-wide / ce", "toy-wide / dispersion", "toy-wide / noisy",
                                                  "toy-wide / forget", "toy-wide / dispersion-lam1-tau0.5"}
    assert "toy-wide / dispersion / seed1" in series["midtrain_training_loss"]
    assert series["scratch_condensation"] == {"toy-narrow-init / ce", "toy-narrow-init / dispersion",
                                              "toy-narrow-init / distill"}
    assert (published / "results/report.html").stat().st_size > 100_000  # the stage ends with the HTML report


def test_a_pulled_and_adopted_clone_has_nothing_to_do(pulled):
    jobs, text = planned(pulled)
    assert "Nothing to be done" in text, jobs
    for kept in ("runs/pretrain/toy-wide/final/model.safetensors", "models/toy-wide/handle.json",
                 "results/findings.md", "results/report.html", "results/metrics/findings.json"):
        assert (pulled / kept).is_file(), kept
    for left_out in ("runs/eval_cache", "runs/pretrain/toy-wide/set_aside"):  # .dvcignore
        assert not (pulled / left_out).exists(), left_out
    # a handle names its model's directory in this clone, not in the author's
    handle = json.loads((pulled / "models/toy-wide/handle.json").read_text())
    assert handle["location"] == "../../runs/pretrain/toy-wide/final"


def test_a_figure_setting_remakes_that_figure_and_what_reads_it(pulled):
    jobs, _ = planned(pulled, FIGURE_SETTING)
    # the pair's labels: its figure, the similarity table that names its groups by them, the findings
    assert set(jobs) - {"all", "total"} == {"paired_figure", "similarity_table", "findings"}, jobs


def test_a_training_setting_remakes_that_training_and_what_follows_it(pulled):
    jobs, text = planned(pulled, TRAINING_SETTING)
    assert jobs["train_study_run"] == 3 and "runs/scratch/toy-narrow-init/ce/seed0/final" in text
    assert not {"pretrain", "prepare_tokenizer", "pack_study_data", "sample_dataset", "build_corpus"} & set(jobs)
    assert "runs/midtrain/" not in "".join(line for line in text.splitlines() if "output:" in line)


def test_an_experiment_in_a_temporary_copy_trains_nothing(pulled):
    labels = 'config.yaml:pairs.distillation.labels=["CE", "distilled", "wide teacher"]'
    # the copy holds what git and DVC version; the offline texts' packages are copied in (-C), as
    # the stage's plan reads them (tools/install.sh fetches them into every clone)
    done = run([str(BIN / "dvc"), "exp", "run", "--temp", "-C", "resources/debs", "-n", "labels", "-S", labels], pulled)
    log = done.stdout + done.stderr
    started = set(re.findall(r"^(?:local)?rule (\w+):$", log, re.M))
    assert started == {"paired_figure", "similarity_table", "findings", "all"}, log[-3000:]
    # the settings that differ and the findings' main numbers, as docs/workflow.md shows them
    shown = dvc(pulled, "exp", "show", "--no-pager", "--md", "--only-changed", "--keep", ".*(verdict|estimate|share)$")
    header = shown.splitlines()[0]
    assert "pairs.distillation.labels" in header and "size.verdict" in header and "scores.accuracy.estimate" in header
    assert "sampling.num_sequences" not in header and "ci_low" not in header
    assert "pairs.distillation.labels" in dvc(pulled, "params", "diff", "HEAD", "labels")
    assert "summary.json" not in dvc(pulled, "metrics", "diff", "HEAD", "labels")  # labels move no number


def test_a_damaged_pull_is_found_and_never_adopted(pulled, tmp_path):
    clone = copy_run(pulled, tmp_path / "clone")
    damaged = clone / "results/geometry/toy-wide/austen.npz"
    damaged.write_bytes(damaged.read_bytes()[:-100])
    verify = subprocess.run([sys.executable, "-m", "condensation", "verify"], cwd=clone, capture_output=True,
                            text=True)
    assert verify.returncode == 1 and "CORRUPT results/geometry/toy-wide/austen.npz" in verify.stdout
    adopt = subprocess.run([sys.executable, "-m", "condensation", "adopt"], cwd=clone, capture_output=True, text=True)
    assert adopt.returncode == 1 and "do not match their manifests; nothing was recorded" in adopt.stderr
