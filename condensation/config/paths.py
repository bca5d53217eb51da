"""Every path the workflow writes, in one place: Snakemake path templates whose ``{placeholders}``
are the rules' wildcards. The rules name them (``path.geometry``), input functions fill them.
``{study}`` is midtrain (Fig. 6, Tables 2-3) or scratch (Table 4). Torch-free: the Snakemake
planner imports it (rules/common.smk)."""

from __future__ import annotations

from types import SimpleNamespace

from condensation.runtime.run_dir import RunDir


def run_files(root: str) -> SimpleNamespace:
    """The files of a training run directory that rules name (layout: run_dir.RunDir)."""
    run = RunDir(root)
    return SimpleNamespace(**{part: str(getattr(run, part)) for part in ("plan", "final", "index", "log")})


path = SimpleNamespace(
    corpus="data/corpus/{corpus}",
    hub_dataset="data/hub/{dataset}",
    hub_tasks="data/hub/lm_eval_tasks.json",
    samples="data/samples/{dataset}.jsonl",
    eval_tasks="data/eval_tasks",
    handle="models/{model}/handle.json",
    model_weights="models/{model}/hf",
    tokenizer="runs/pretrain/tokenizer",
    pretrain_blocks="runs/pretrain/blocks.npy",
    pretrain_run=run_files("runs/pretrain/{model}"),
    pretrain_geometry="results/pretrain/geometry/{model}/{dataset}",
    study_blocks="runs/{study}/{model}/blocks.npy",
    study_run=run_files("runs/{study}/{model}/{method}/seed{seed}"),
    geometry="results/geometry/{model}/{dataset}.npz",
    trend_table="results/tables/trend/{family}_{dataset}",
    series_table="results/tables/series/{series}",
    series_band_table="results/tables/series_bands/{band}.csv",
    pair_table="results/tables/paired/{pair}",
    similarity_table="results/tables/similarity/{comparison}.csv",
    checkpoint_geometry="results/{study}/geometry/{model}/{method}/seed{seed}",
    trajectory="results/{study}/{model}/trajectory.csv",
    effects="results/{study}/{model}/condensation_effects",
    pooled_effects="results/{study}/pooled/{bases}/condensation_effects",
    losses="results/{study}/{model}/losses.csv",
    # lm-eval scores: one stem, a file per role of SCORE_FILES (record, per-item rows, lm-eval's own)
    score="results/scores/{study}/{model}/{method}/seed{seed}/{checkpoint}",
    pretrained_score="results/scores/{study}/{model}/pretrained",
    family_figure="results/figures/family/{family}_{dataset}.png",
    paired_figure="results/figures/paired/{pair}.png",
    dataset_figure="results/figures/datasets/{family}.png",
    series_figure="results/figures/series/{series}.png",
    series_band_figure="results/figures/series_bands/{band}.png",
    study_figure="results/figures/{study}/{model}_{kind}.png",
    table="results/tables/{table}",
    metrics="results/metrics/{name}",
    findings="results/findings.md",
)
"""The templates, by what they hold; a training run's files by part (``path.study_run.final``)."""
