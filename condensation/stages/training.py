"""Stages of rules/training.smk: the runs of the training studies (mid-training, pre-training from
scratch), condensation on every checkpoint, and their summaries."""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from condensation import ln_scaling, models
from condensation.config.runs import RunPlan, plan_run
from condensation.config.specs import (
    ExtractionConfig,
    SamplingConfig,
    TrendConfig,
    as_settings,
)
from condensation.data import packing, text
from condensation.runtime.io import atomic_path, write_json, write_manifest
from condensation.runtime.run_dir import RunDir, step_name
from condensation.trend import depth_trend

# torch, pandas and the measuring modules are imported by the stages that use them: planning a
# run is a job of its own, and importing them would triple its time.

log = logging.getLogger("condensation")


def plan_study_run(
    *, study: str, model: str, method: Mapping[str, Any], train: Mapping[str, Any], seed: int, out_path: str | Path,
    reinitialise: bool = False,
) -> None:
    """``run.json`` of one run of a study: its method resolved with every default, and the loop's
    settings; ``reinitialise``: start from new random weights drawn with the run's seed."""
    plan_run(study, model, train, seed, method=method, reinitialise=reinitialise).save(out_path)


def train_run(
    *, plan_path: str | Path, blocks_path: str | Path, handle_path: str | Path | None = None,
    tokenizer_dir: str | Path | None = None, teacher_handle_path: str | Path | None = None, threads: int = 1,
) -> None:
    """Train one run as its plan says, in the plan's directory: pre-training from scratch (plan
    ``kind`` pretrain: a GPT2 of the plan's shape with the tokenizer in ``tokenizer_dir``) or a
    study's run (the model of ``handle_path``: trained before, or an ``init`` model's random
    weights) with CE, CE + an auxiliary loss, CE with a baseline, or distilled from the teacher
    of ``teacher_handle_path`` (the plan's distillation method names it)."""
    # deferred: torch and the training loop, see the imports
    import torch  # noqa: PLC0415

    from condensation.training.loop import train  # noqa: PLC0415

    torch.set_num_threads(threads)
    plan = RunPlan.load(plan_path)
    _check_ln_scaling(plan)
    model, tokenizer = _starting_model(plan, handle_path, tokenizer_dir)
    _check_ln_scaling(plan, model)
    method = plan.method
    context = _teacher(method.settings, teacher_handle_path, tokenizer) if method.kind == "distillation" else {}
    train_blocks, val_blocks = packing.read_blocks(blocks_path)
    result = train(model, train_blocks, val_blocks, plan.train, Path(plan_path).parent, method=method.build(**context),
                   tokenizer=tokenizer)
    log.info("trained %s (%s) with %s: %s", plan.model, plan.kind, method.as_dict(), result)


def _teacher(config: Any, handle_path: str | Path | None, student_tokenizer: Any) -> dict[str, Any]:
    """What a distillation run's term is built from: the frozen teacher model of ``handle_path``
    and its tokenizer, beside the student's (``Teacher.matched`` checks the two agree)."""
    if handle_path is None:
        raise ValueError(f"a distillation run needs its teacher's handle "
                         f"(--teacher models/{config.teacher}/handle.json)")
    handle = models.ModelHandle.load(handle_path)
    if handle.name != config.teacher:
        raise ValueError(f"the plan's teacher is '{config.teacher}' but the handle given is '{handle.name}'")
    # bfloat16 where the run will be on a GPU that supports it (a frozen model needs no float32
    # master weights, and a large teacher then fits beside the student), else float32; loaded on
    # the CPU, as the student is, and moved to the run's device by the loop.
    dtype = models.resolve_dtype("auto", models.resolve_device("auto"))
    model = models.load_model(handle, dtype=str(dtype).removeprefix("torch."), device="cpu", causal_lm=True)
    return {"model": model, "tokenizer": models.load_tokenizer(handle), "student_tokenizer": student_tokenizer,
            "where": f"method option teacher ('{config.teacher}')"}


def _check_ln_scaling(plan: RunPlan, model: Any = None) -> None:
    """LayerNorm Scaling is an architecture trained from scratch (pre-training, the scratch study):
    a mid-training run is refused one, by its method (checked before the model is loaded) or by
    its model (the config's validation refuses both first, where it can tell)."""
    if plan.kind == "midtrain" and plan.method.ln_scaling:
        raise ValueError(f"method option ln_scaling: the midtrain study does not train LN-scaled models (run of "
                         f"'{plan.model}'); it is a method option of the scratch study")
    if plan.kind == "midtrain" and model is not None and ln_scaling.is_scaled(model):
        raise ValueError(f"model '{plan.model}' is LN-scaled (ln_scaling): the midtrain study does not train "
                         "LN-scaled models; train it from scratch (the scratch study) instead")


def _starting_model(plan: RunPlan, handle_path: str | Path | None, tokenizer_dir: str | Path | None) -> tuple[Any, Any]:
    """The model a run starts from, and its tokenizer."""
    if plan.kind == "pretrain":
        from transformers import AutoTokenizer  # noqa: PLC0415  (deferred: transformers, see the imports)

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        return models.build_gpt2(plan.arch, tokenizer, seed=plan.train.seed), tokenizer
    handle = models.ModelHandle.load(handle_path)
    if plan.reinitialise:  # the model's architecture with weights of the run's own seed
        # a method with ln_scaling: the same weights, scaled in the forward (else as the model's config says)
        scaled = True if plan.method.ln_scaling else None
        return models.build_from_config(handle, seed=plan.train.seed, ln_scaling=scaled), models.load_tokenizer(handle)
    if plan.method.ln_scaling:
        raise ValueError(f"method option ln_scaling: the run of '{plan.model}' continues given weights; LayerNorm "
                         "Scaling applies to a run that draws its initial weights (the scratch study's)")
    # float32 master weights on the CPU; the loop moves them to the device and runs bf16 autocast.
    return models.load_model(handle, dtype="float32", device="cpu", causal_lm=True), models.load_tokenizer(handle)


def measure_checkpoints(
    *, index_path: str | Path, samples_path: str | Path, out_dir: str | Path,
    sampling: SamplingConfig | Mapping[str, Any], extraction: ExtractionConfig | Mapping[str, Any],
    trend: TrendConfig | Mapping[str, Any], threads: int = 1,
) -> None:
    """Condensation of every evaluation checkpoint a run's index lists: one ``step-N.npz`` each
    and ``trajectory.csv`` (step, validation loss, rho, tau, last-n means)."""
    # deferred: pandas, torch and the measuring modules, see the imports
    import pandas as pd  # noqa: PLC0415
    import torch  # noqa: PLC0415

    from condensation.measurement import measure  # noqa: PLC0415

    sampling = as_settings(SamplingConfig, sampling)
    extraction = as_settings(ExtractionConfig, extraction)
    trend = as_settings(TrendConfig, trend)
    torch.set_num_threads(threads)
    texts = text.read_samples(samples_path)
    run = RunDir(Path(index_path).parent)
    rows = []
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for entry in run.read_index():
            step = entry["step"]
            handle = models.ModelHandle(name=f"{run.root.name}@{step}", location=str(run.checkpoint(step).resolve()))
            stats = measure(handle, texts, sampling=sampling, extraction=extraction,
                            meta={"dataset": Path(samples_path).stem, "step": step}).statistics
            stats.save(tmp / f"{step_name(step)}.npz")
            statistics = depth_trend(stats, trend)
            rows.append({"step": step, "val_loss": entry["val_loss"], **statistics.as_row()})
        pd.DataFrame(rows).to_csv(tmp / "trajectory.csv", index=False, float_format="%.5f")
        write_manifest(tmp, kind="checkpoint_geometry")


def study_tables(
    *, runs: Sequence[tuple[str, int]], log_paths: Sequence[str | Path], geometry_dirs: Sequence[str | Path],
    trajectory_path: str | Path, loss_path: str | Path, effects_csv: str | Path, effects_markdown: str | Path,
    trend: TrendConfig | Mapping[str, Any],
) -> None:
    """Collect every (method, seed) run of one model: condensation per checkpoint (and beside it
    each checkpoint's per-sequence profiles), the loss logs, and each method's condensation against
    CE's over seeds and sequences."""
    # deferred: pandas and the reporting modules, see the imports
    import pandas as pd  # noqa: PLC0415

    from condensation.reporting.tables import profiles  # noqa: PLC0415
    from condensation.reporting.tables.condensation_effects import write_condensation_effects  # noqa: PLC0415

    trend = as_settings(TrendConfig, trend)
    trajectories, losses, keys_of_checkpoints, checkpoint_files = [], [], [], []
    for (method, seed), log_path, geometry_dir in zip(runs, log_paths, geometry_dirs, strict=True):
        keys = {"method": method, "seed": seed}
        trajectory = pd.read_csv(Path(geometry_dir) / "trajectory.csv")
        trajectories.append(trajectory.assign(**keys))
        for step in trajectory["step"]:
            keys_of_checkpoints.append({**keys, "step": int(step)})
            checkpoint_files.append(Path(geometry_dir) / f"{step_name(int(step))}.npz")
        log_csv = pd.read_csv(log_path)
        losses.append(log_csv[["step", "tokens", "loss", "ce_loss", "aux_loss", "val_loss"]].assign(**keys))
    for frames, path in ((trajectories, trajectory_path), (losses, loss_path)):
        table = pd.concat(frames, ignore_index=True)
        with atomic_path(path) as tmp:
            table[["method", "seed", *[c for c in table.columns if c not in ("method", "seed")]]].to_csv(
                tmp, index=False, float_format="%.5f"
            )
    profiles_path = profiles.profile_path(trajectory_path)
    profiles.write_profiles_of(profiles_path, keys_of_checkpoints, checkpoint_files, trend)
    write_condensation_effects(profiles=profiles.read_profiles(profiles_path), csv_path=effects_csv,
                               markdown_path=effects_markdown)



def pooled_effects(
    *, bases: Sequence[str], profile_paths: Sequence[str | Path], csv_path: str | Path, markdown_path: str | Path,
) -> None:
    """The condensation effects of several base models' runs (one label: a suite's seeds) with
    the base as a replicate: each base's seeds averaged, the interval over the bases
    (:func:`condensation.reporting.tables.condensation_effects.pool_bases`)."""
    # deferred: the reporting modules, see the imports
    from condensation.reporting.tables import condensation_effects, profiles  # noqa: PLC0415

    by_base = {base: profiles.read_profiles(path) for base, path in zip(bases, profile_paths, strict=True)}
    condensation_effects.write_condensation_effects(profiles=condensation_effects.pool_bases(by_base),
                                                    csv_path=csv_path, markdown_path=markdown_path, pooled=True)

def study_metrics(
    *, models: Sequence[str], trajectory_paths: Sequence[str | Path], loss_paths: Sequence[str | Path],
    metrics_path: str | Path, training_plot: str | Path, checkpoints_plot: str | Path,
) -> None:
    """DVC metrics of a study (per model and method, the last checkpoint's validation loss, depth
    trend and deeper layers' mean cosine, averaged over seeds) and its DVC plot data: training
    cross-entropy per step of every run, and validation loss and condensation per checkpoint of
    every method (mean over seeds); the ``series`` column names the line each row belongs to."""
    import pandas as pd  # noqa: PLC0415  (deferred: pandas, see the imports)

    metrics: dict[str, Any] = {}
    training, checkpoints = [], []
    for model, trajectory_path, loss_path in zip(models, trajectory_paths, loss_paths, strict=True):
        table = pd.read_csv(trajectory_path)
        last = table.loc[table.groupby(["method", "seed"])["step"].idxmax()]
        for method, rows in last.groupby("method", sort=False):
            metrics[f"{model}/{method}"] = {
                "final_val_loss": float(rows["val_loss"].mean()),
                "final_spearman_rho": float(rows["spearman_rho"].mean()),
                "final_kendall_tau": float(rows["kendall_tau"].mean()),
                "final_last_half": float(rows["last_half"].mean()),
                "seeds": int(len(rows)),
            }
        columns = ["val_loss", "spearman_rho", "kendall_tau", "last_half"]
        means = table.groupby(["method", "step"], sort=False)[columns].mean().reset_index()
        checkpoints.append(means.assign(series=model + " / " + means["method"]))
        losses = pd.read_csv(loss_path)
        losses = losses[losses["step"] > 0]
        series = model + " / " + losses["method"] + " / seed" + losses["seed"].astype(str)
        training.append(losses[["step", "ce_loss"]].assign(series=series))
    write_json(metrics_path, metrics)
    for frames, path in ((training, training_plot), (checkpoints, checkpoints_plot)):
        with atomic_path(path) as tmp:
            pd.concat(frames, ignore_index=True).to_csv(tmp, index=False, float_format="%.5f")
