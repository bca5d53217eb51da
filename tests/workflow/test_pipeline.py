"""The workflow itself: the tiny run's outputs, a forced and a changed run, the lint, the paper's plan
(DVC: test_dvc.py; the cluster profiles: test_slurm.py; every setting's reruns: test_setting_changes.py)."""

from __future__ import annotations

import json
import math
import subprocess
from pathlib import Path

import matplotlib.image
import numpy as np
import pandas as pd
import pytest

from condensation.geometry import CosineStatistics
from tests.helpers.workflow import BIN, copy_run, run

pytestmark = pytest.mark.slow


@pytest.fixture
def project(tiny_run) -> Path:
    """The tiny config's finished run (tests/workflow/conftest.py), for tests that only read it."""
    return tiny_run


@pytest.fixture
def own_project(tiny_run, tmp_path) -> Path:
    """A copy of the tiny config's finished run, for a test that runs something in it."""
    return copy_run(tiny_run, tmp_path / "project")


def expected_outputs() -> list[str]:
    return [
        "results/figures/family/toy_austen.png",
        "results/figures/family/toy_pydocs.png",
        "results/figures/family/packaged_austen.png",
        "results/figures/paired/init-vs-trained.png",
        "results/figures/datasets/toy.png",
        "results/tables/trend/toy_austen.csv",
        "results/tables/trend/toy_austen.md",
        "results/metrics/trend.json",
        "results/metrics/layer_means.csv",
        "results/figures/midtrain/toy-wide_condensation.png",
        "results/figures/midtrain/toy-wide_trajectory.png",
        "results/figures/midtrain/toy-wide_losses.png",
        "results/metrics/midtrain.json",
        "results/tables/table2.csv",
        "results/tables/table2.md",
        "results/tables/table2.tex",
        "results/tables/table3.csv",
        "results/metrics/scores.json",
        "results/metrics/scores.csv",
        "results/figures/series/toy-narrow-pretraining.png",
        "results/tables/series/toy-narrow-pretraining.csv",
        "results/tables/paired/init-vs-trained.csv",
        "results/figures/paired/distillation.png",
        "results/tables/paired/distillation.csv",
        "results/tables/similarity/distillation.csv",
        "results/tables/similarity/midtrain-vs-wide.csv",
        "results/figures/scratch/toy-narrow-init_condensation.png",
        "results/tables/table4.csv",
        "results/tables/table4.md",
        "results/midtrain/toy-wide/condensation_effects.md",
        "results/findings.md",
        "results/metrics/findings.json",
    ]


def test_pipeline_writes_every_figure_table_and_metric(project):
    for name in expected_outputs():
        assert (project / name).stat().st_size > 0, name
    for png in (project / "results" / "figures").rglob("*.png"):
        image = matplotlib.image.imread(png)
        assert image.shape[0] > 200 and image.shape[1] > 200
        assert image[..., :3].std() > 0.05, f"{png} looks blank"


def test_geometry_has_every_layer_and_the_configured_shape(project):
    stats = CosineStatistics.load(project / "results/geometry/toy-wide/austen.npz")
    assert stats.num_layers == 3  # embedding output + 2 blocks
    assert stats.mean_cosine.shape == (3, 32, 32)
    assert stats.num_sequences == 4
    assert np.allclose(np.diagonal(stats.mean_cosine, axis1=1, axis2=2), 1.0, atol=1e-5)
    minilm = CosineStatistics.load(project / "results/geometry/minilm-l6/austen.npz")
    assert minilm.num_layers == 7


def test_trend_table_holds_valid_statistics(project):
    table = pd.read_csv(project / "results/tables/trend/toy_austen.csv")
    assert table["model"].tolist() == ["toy-narrow", "toy-wide"]
    assert table["spearman_rho"].between(-1, 1).all() and table["kendall_tau"].between(-1, 1).all()
    assert {"last_1", "last_half", "num_parameters"} <= set(table.columns)
    assert table.loc[1, "num_parameters"] > table.loc[0, "num_parameters"]
    metrics = json.loads((project / "results/metrics/trend.json").read_text())
    assert set(metrics["toy/austen/toy-wide"]) == {"spearman_rho", "kendall_tau"}


def test_similarity_tables_compare_each_model_with_its_reference(project):
    """The distillation pair's students against their teacher, and each mid-training run (method x
    seed) against the wide toy: profile correlation, distance and CKA with intervals that hold
    them; the findings page's lines from them."""
    from condensation import similarity

    distillation = pd.read_csv(project / "results/tables/similarity/distillation.csv")
    assert list(distillation["group"]) == ["CE only", "distilled"]
    assert set(distillation["reference"]) == {"toy-wide"}
    runs = pd.read_csv(project / "results/tables/similarity/midtrain-vs-wide.csv")
    assert list(runs["model"]) == ["toy-wide/ce/seed0", "toy-wide/ce/seed1", "toy-wide/dispersion/seed0",
                                   "toy-wide/dispersion/seed1"]
    for table in (distillation, runs):
        for column in similarity.STATISTICS:
            assert (table[f"{column}_low"] <= table[column]).all() and (table[column] <= table[f"{column}_high"]).all()
        assert table["matched_cka"].between(0, 1).all() and (table["profile_distance"] >= 0).all()
    # a run mid-trained from the wide toy stays close to it: nearly the same profile and tokens
    assert (runs["matched_cka"] > 0.5).all() and (runs["profile_correlation"] > 0.5).all()
    lines = similarity.summarise(pd.concat([distillation, runs]))
    assert len(lines) == 2 and "dispersion minus ce" in lines[1] and "distilled minus CE only" in lines[0]


def test_init_model_is_the_pretraining_start(project):
    """The init model and the pre-training run's step-0 checkpoint hold the same weights."""
    from safetensors.torch import load_file

    init = load_file(project / "models/toy-narrow-init/hf/model.safetensors")
    step0 = next((project / "runs/pretrain/toy-narrow/checkpoints").glob("step-0000000"))
    start = load_file(step0 / "model.safetensors")
    assert init.keys() == start.keys()
    assert all(np.array_equal(init[k].numpy(), start[k].numpy()) for k in init)


def test_midtrain_grid_measures_every_checkpoint_of_every_run(project):
    trajectory = pd.read_csv(project / "results/midtrain/toy-wide/trajectory.csv")
    runs = {("ce", 0), ("ce", 1), ("dispersion", 0), ("dispersion", 1), ("noisy", 0), ("noisy", 1),
            ("forget", 0), ("forget", 1), ("dispersion-lam1-tau0.5", 0)}
    assert set(zip(trajectory["method"], trajectory["seed"])) == runs
    # 16 steps: step 0, num_checkpoints=2 evenly spaced checkpoints, and the final step
    assert sorted(trajectory.loc[trajectory["method"] == "ce", "step"].unique()) == [0, 5, 10, 16]
    assert trajectory["spearman_rho"].between(-1, 1).all()
    assert trajectory["val_loss"].notna().all()
    # every run starts from the same pre-trained model: identical geometry at step 0
    start = trajectory[trajectory["step"] == 0]
    assert np.allclose(start["spearman_rho"], start["spearman_rho"].iloc[0])


def test_midtrain_losses_record_the_auxiliary_term_only_where_used(project):
    losses = pd.read_csv(project / "results/midtrain/toy-wide/losses.csv")
    trained = losses[losses["step"] > 0]
    assert trained.loc[trained["method"] == "dispersion", "aux_loss"].notna().all()
    assert trained.loc[trained["method"] == "ce", "aux_loss"].isna().all()
    # seeds differ in data order, so their curves differ; the same seed of two methods starts alike
    ce0 = trained[(trained["method"] == "ce") & (trained["seed"] == 0)]["loss"].to_numpy()
    ce1 = trained[(trained["method"] == "ce") & (trained["seed"] == 1)]["loss"].to_numpy()
    assert len(ce0) == 16 and not np.allclose(ce0, ce1)


def test_scores_come_from_the_checkpoint_with_the_lowest_validation_loss(project):
    for seed in (0, 1):
        record = json.loads(
            (project / f"results/scores/midtrain/toy-wide/dispersion/seed{seed}/selected.json").read_text())
        run_dir = project / f"runs/midtrain/toy-wide/dispersion/seed{seed}/checkpoints"
        losses = {
            path.name: json.loads((path / "checkpoint.json").read_text())["val_loss"]
            for path in run_dir.glob("step-*") if not path.name.endswith("0000000")
        }
        assert record["checkpoint"] == min(losses, key=losses.get) and record["val_loss"] == min(losses.values())
        assert set(record["scores"]) == {"persuasion_cloze", "persuasion_next"}
        assert record["scores"]["persuasion_cloze"]["num_fewshot"] == 0
        assert record["scores"]["persuasion_next"]["num_fewshot"] == 1
        assert record["scores"]["persuasion_cloze"]["num_items"] == 12


def test_each_scored_model_has_its_own_lm_eval_cache(project):
    # lm-eval's cache ignores the model: one cache per model content (9 mid-training runs, the
    # pretrained model, and the 3 runs trained from scratch)
    caches = sorted(path.parent.name for path in (project / "runs/eval_cache").glob("*/*_rank0.db"))
    assert len(caches) == len(set(caches)) == 13


def test_table2_has_every_method_against_the_reference(project):
    table = pd.read_csv(project / "results/tables/table2.csv")
    assert list(table["method"]) == ["pretrained", "ce", "dispersion", "noisy", "forget"]
    assert list(table["n_seeds"]) == [1, 2, 2, 2, 2]
    others = table[~table["method"].isin(["pretrained", "dispersion"])]
    assert others["p_vs_dispersion"].between(0, 1).all()
    # paired over items: 12 items per counted task, 2 seeds (the pretrained model's one run with
    # each); with evaluation.counted_tasks unset every task counts, at chance or not (the set is
    # fixed before any compared row is seen)
    flags = json.loads((project / "results/metrics/scores.json").read_text())["chance_flags"]
    counted = len(flags)
    assert (others["n_items_vs_dispersion"] == 12 * counted * 2).all()
    assert table["average_mean"].between(0, 100).all()
    text = (project / "results/tables/table2.md").read_text()
    assert "paired bootstrap over items" in text and "lowest validation loss" in text
    assert "\\begin{tabular}" in (project / "results/tables/table2.tex").read_text()
    grid = pd.read_csv(project / "results/tables/table3.csv")
    assert sorted(zip(grid["weight"], grid["tau"])) == [(0.5, 1.0), (1.0, 0.5)]
    assert list(grid["n_seeds"]) == [2, 1]


def test_series_measures_every_pretraining_checkpoint_from_initialisation(project):
    series = pd.read_csv(project / "results/tables/series/toy-narrow-pretraining.csv")
    index = json.loads((project / "runs/pretrain/toy-narrow/checkpoints.json").read_text())["checkpoints"]
    assert series["checkpoint"].tolist() == [f"step {entry['step']}" for entry in index]
    assert series["tokens"].iloc[0] == 0 and series["tokens"].is_monotonic_increasing
    assert {"spearman_rho", "last_half", "last_half_low", "last_half_high"} <= set(series.columns)


def test_table4_compares_training_from_scratch_with_and_without_dispersion(project):
    table = pd.read_csv(project / "results/tables/table4.csv")
    assert table["method"].tolist() == ["ce", "dispersion", "distill"]
    dispersion = table.set_index("method").loc["dispersion"]
    assert -100 < dispersion["diff_vs_ce"] < 100 and 0 <= dispersion["items_p_vs_ce"] <= 1
    # one seed each: the items are measured, the training noise is not, so no seed-aware interval
    assert math.isnan(dispersion["p_vs_ce"]) and math.isnan(dispersion["ci_low_vs_ce"])
    assert any(column.startswith("last_half") for column in table.columns)


def test_findings_page_states_a_verdict_for_every_claim(project):
    from condensation.reporting.statistics.decisions import VERDICTS

    findings = json.loads((project / "results/metrics/findings.json").read_text())["findings"]
    assert len(findings) == 8  # the paper's six claims and the prediction and tokens claims beyond them
    assert all(f["verdict"] in VERDICTS for f in findings)
    distillation = next(f for f in findings if "istillation" in f["claim"])
    # the tiny config's student distilled from the wide toy, one seed: measured, its training noise not
    assert distillation["verdict"] == "inconclusive" and "training noise is unmeasured" in distillation["reason"]
    piece = distillation["decisions"][0]["pieces"][0]
    assert piece["piece"] == "distillation: toy-narrow CE vs toy-narrow distilled"
    assert ("share of the gap closed" in piece["text"] and "one run of" in piece["reason"]
            and "teacher" in piece["reason"])
    page = (project / "results/findings.md").read_text()
    assert "Condensation is highest at initialisation" in page and "smallest effect the design would find" in page


def test_logs_show_progress_and_runs_keep_live_series_and_samples(project):
    training_logs = sorted(project.glob("logs/midtrain/toy-wide/*/seed0.log"))
    assert len(training_logs) == 5  # four methods and the ablation point
    for log in [project / "logs/pretrain/toy-wide.log", *training_logs, project / "logs/extract/toy-wide/austen.log"]:
        text = log.read_bytes().decode()  # read_text() would turn a bar's "\r" into "\n"
        assert "\r" not in text, log
        assert any(" ETA " in line for line in text.splitlines()), log
    scoring_logs = list(project.glob("logs/evaluate/**/*.log"))
    assert scoring_logs and not any(b"\r" in log.read_bytes() for log in scoring_logs)  # lm-eval's bars stay out
    live = project / "runs/midtrain/toy-wide/dispersion/seed0/dvclive/plots/metrics"
    ce = pd.read_csv(live / "train/ce.tsv", sep="\t")
    assert ce["step"].tolist() == list(range(1, 17)) and ce["ce"].notna().all()
    assert (live / "probe/deep_cos.tsv").exists()
    for record in (project / "results/scores/midtrain/toy-wide").rglob("selected.json"):
        assert record.with_name("selected.samples.jsonl.gz").stat().st_size > 0
        assert record.with_name("selected.lm_eval.json").stat().st_size > 0


def test_built_tasks_run_with_the_plain_lm_eval_command_line(project):
    """The offline tasks work with lm_eval as they lie in data/eval_tasks."""
    checkpoint = next((project / "runs/midtrain/toy-wide/ce/seed0/checkpoints").glob("step-*"))
    result = run(
        [str(BIN / "lm_eval"), "--model", "hf", "--model_args", f"pretrained={checkpoint},dtype=float32",
         "--include_path", "data/eval_tasks", "--tasks", "persuasion_cloze", "--device", "cpu",
         "--batch_size", "8", "--limit", "5"],
        project,
    )
    assert "persuasion_cloze" in result.stdout


def test_rerun_has_nothing_to_do(project):
    result = run([str(BIN / "snakemake"), "--cores", "2", "-n"], project)
    assert "Nothing to be done" in result.stdout + result.stderr


def test_forcerun_trains_a_finished_run_again(own_project):
    """`--force` on a finished run's final/ retrains it: its state was set aside when it finished,
    so nothing is resumed; on one machine the weights come out the same."""
    run_dir = own_project / "runs/scratch/toy-narrow-init/ce/seed0"
    before = (run_dir / "final/model.safetensors").read_bytes()
    assert (run_dir / "set_aside/finished-state/progress.json").is_file() and not (run_dir / "state").exists()
    run([str(BIN / "snakemake"), "--cores", "2", "--force", "runs/scratch/toy-narrow-init/ce/seed0/final"], own_project)
    log = (own_project / "logs/scratch/toy-narrow-init/ce/seed0.log").read_text()
    assert "(starting)" in log and "resuming" not in log
    assert (run_dir / "final/model.safetensors").read_bytes() == before


def test_a_changed_training_budget_reruns_the_runs_to_the_end(own_project, tmp_path):
    """The next step of docs/configs.md in one directory (a config that changes train_tokens after a
    finished run, as offline-full does after the default): a run trains again to its new end, what
    reads its checkpoints (their names follow the budget) measures and scores the new ones, and a
    second plan finds nothing to do. One run of the three the change reruns, and what reads it:
    the rest of the workflow is the same for each."""
    overlay = tmp_path / "longer.yaml"
    overlay.write_text("scratch: {train: {train_tokens: 6144}}\n")
    run_files = "scratch/toy-narrow-init/dispersion/seed0"
    targets = [f"runs/{run_files}/final", "results/scratch/geometry/toy-narrow-init/dispersion/seed0",
               f"results/scores/{run_files}/selected.json"]
    # the targets first: --configfile takes every name that follows it
    run([str(BIN / "snakemake"), *targets, "--cores", "2", "--configfile", "config.yaml", str(overlay)], own_project)
    summary = json.loads((own_project / f"runs/{run_files}/final/train_summary.json").read_text())
    assert summary["tokens"] == 6144 and summary["config"]["train_tokens"] == 6144
    checkpoints = json.loads((own_project / f"runs/{run_files}/checkpoints.json").read_text())["checkpoints"]
    scored = json.loads((own_project / f"results/scores/{run_files}/selected.json").read_text())
    assert checkpoints[-1]["step"] == summary["steps"] == 24  # 6144 tokens / (8 x 32)
    assert scored["checkpoint"] in {checkpoint["name"] for checkpoint in checkpoints}, scored
    check = run([str(BIN / "snakemake"), *targets, "-n", "--configfile", "config.yaml", str(overlay)], own_project)
    assert "Nothing to be done" in check.stdout + check.stderr


@pytest.mark.plans
def test_lint_finds_nothing_but_the_missing_conda_environments(clean_clone):
    """The rules carry no `conda:` directive on purpose (README, "Two commands"); any other lint fails."""
    linted = subprocess.run([str(BIN / "snakemake"), "--lint"], cwd=clean_clone, capture_output=True, text=True)
    titles = [line.strip() for line in (linted.stdout + linted.stderr).splitlines() if line.strip().startswith("* ")]
    assert titles and set(titles) == {"* Specify a conda environment or container for each rule.:"}, titles


@pytest.mark.plans
def test_polypythia_config_plans_every_seed_its_initialisation_and_checkpoints(clean_clone):
    """configs/polypythia.yaml: five sizes x ten seeds, each at its final weights and at step0;
    70M's and 160M's twenty runs over six more checkpoints (Fig. 4); the 160M runs of one noise
    source; mid-training from three 160M seeds."""
    result = run([str(BIN / "snakemake"), "-n", "--configfile", "configs/polypythia.yaml"], clean_clone)
    counts = dict(
        line.split() for line in result.stdout.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit()
    )
    models = 50 + 50 + 20 * 8 + 6  # finals, initialisations, series points (step0 and main again), sources
    assert counts["fetch_model"] == str(models)
    # each model on wikitext-103, the 50 finals on the Python docs too (Fig. S2)
    assert counts["extract"] == str(models + 50)
    assert counts["family_figure"] == "3"  # the sizes on each of two texts, the 160M runs on one
    assert counts["dataset_figure"] == "1" and counts["paired_figure"] == "5" and counts["series_figure"] == "20"
    assert counts["series_band"] == "2"  # each size's ten runs drawn together
    assert counts["train_study_run"] == str(3 * 2 * 2)  # bases x methods x seeds
    assert counts["evaluate_pretrained"] == "3"


@pytest.mark.plans
def test_paper_config_plans_every_observation_job(clean_clone):
    result = run([str(BIN / "snakemake"), "-n", "--configfile", "configs/paper.yaml"], clean_clone)
    counts = dict(
        line.split() for line in result.stdout.splitlines() if len(line.split()) == 2 and line.split()[1].isdigit()
    )
    assert counts["family_figure"] == "6"  # GPT2, Qwen1, Qwen2.5, Qwen3, Bloom, MLP width
    assert counts["paired_figure"] == "3"  # the R1 distills, init vs trained, and the pair distilled here
    assert counts["dataset_figure"] == "1"
    # observation models, the two students of the pair distilled here, and Fig. 4's 13 Olmo-3 revisions
    assert counts["extract"] == str(52 + 2 + 13)
    assert counts["series_figure"] == "1"
    assert counts["pretrain"] == "4"
    # GPT2 and Qwen3-0.6B x 7 methods x 3 seeds, the 4 x 4 ablation on GPT2 minus its
    # lambda=0.1, tau=1 point (the dispersion method itself), and Table 4's CE, dispersion and
    # distillation runs with the three newer methods' (JREG, SimReg, LayerNorm Scaling)
    runs = 42 + 15 + 3 + 3
    assert counts["train_study_run"] == counts["measure_checkpoints"] == str(runs)
    assert counts["evaluate_pretrained"] == "2"
    # every checkpoint after step 0 is scored; the selected one's score is picked from them
    assert counts["evaluate_checkpoint"] == str(runs * 6)
    assert counts["pick_selected_score"] == str(runs)
    assert counts["table2"] == counts["table3"] == counts["table4"] == "1"
    assert counts["scores_by_step"] == "2"  # mid-training and scratch studies
