"""One function per workflow stage: paths and config in, artifacts out.

``workflow_scripts/*.py`` call exactly one of these with what Snakemake hands them. Nothing here
knows about Snakemake, so every stage also runs from plain Python.
"""

from __future__ import annotations

import contextlib
import json
import logging
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator, Mapping, Sequence

import numpy as np
import pandas as pd

from . import corpus, data, geometry, models
from .config import ExtractionConfig, SamplingConfig, TrendConfig, train_config
from .io import atomic_path, read_json, verify_manifest, write_json, write_manifest, write_text

log = logging.getLogger("condensation")


@contextlib.contextmanager
def logged(log_path: str | Path | None) -> Iterator[None]:
    """Send this stage's logging, stdout and stderr to ``log_path`` (Snakemake's ``log:``)."""
    if log_path is None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        yield
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            try:
                yield
            except BaseException:
                log.exception("stage failed")
                raise
            finally:
                root.removeHandler(handler)


# ---------------------------------------------------------------------------------------------
# Data
# ---------------------------------------------------------------------------------------------

CORPUS_READERS = {"austen": corpus.austen_novels, "python_docs": corpus.python_docs}


def build_corpus(source: str, deb_path: str | Path, out_dir: str | Path) -> None:
    """Unpack a Debian package into a scratch directory and export its texts, one file each."""
    with tempfile.TemporaryDirectory() as scratch:
        corpus.unpack_deb(deb_path, scratch)
        documents = CORPUS_READERS[source](scratch)
    corpus.export_documents(documents, out_dir)
    log.info("exported %d documents (%d characters) to %s", len(documents), sum(map(len, documents.values())), out_dir)


def sample_dataset(
    name: str, spec: Mapping[str, Any], sampling: SamplingConfig, out_path: str | Path, corpus_dir: str | Path | None
) -> None:
    rows = data.load_rows(name, spec, corpus_dir)
    samples = data.sample_sequences(rows, sampling)
    data.write_samples(
        out_path,
        samples,
        dataset=name,
        source=dict(spec),
        num_rows=len(rows),
        seq_len=sampling.seq_len,
        min_words=sampling.min_words,
        seed=sampling.seed,
    )
    log.info("%s: %d sequences from %d rows", name, len(samples), len(rows))


# ---------------------------------------------------------------------------------------------
# Models
# ---------------------------------------------------------------------------------------------


def prepare_tokenizer(
    dataset: str, spec: Mapping[str, Any], corpus_dir: str | Path | None,
    existing: str | None, vocab_size: int, out_dir: str | Path,
) -> None:
    """The pre-training tokenizer: an existing one copied in, or a BPE trained on the dataset."""
    if existing:
        from transformers import AutoTokenizer

        location = existing if not existing.startswith(models.PACKAGE_SCHEME) else str(models.resolve_path(existing))
        tokenizer = AutoTokenizer.from_pretrained(location)
        with atomic_path(out_dir) as tmp:
            tokenizer.save_pretrained(tmp)
            write_manifest(tmp, kind="tokenizer")
        return
    models.train_bpe_tokenizer(data.load_rows(dataset, spec, corpus_dir), vocab_size, out_dir)


def pack_training_data(
    dataset: str, spec: Mapping[str, Any], corpus_dir: str | Path | None, tokenizer_source: str | Path,
    block_size: int, validation_fraction: float, out_path: str | Path,
) -> None:
    """Tokenise the dataset row by row, pack blocks, hold out the last blocks for validation.

    ``tokenizer_source`` is a tokenizer directory or a model's ``handle.json`` (mid-training packs
    with each model's own tokenizer).
    """
    source = Path(tokenizer_source)
    if source.suffix == ".json":
        tokenizer = models.load_tokenizer(models.ModelHandle.load(source))
    else:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(source))
    ids = tokenizer(data.load_rows(dataset, spec, corpus_dir))["input_ids"]
    blocks = data.pack_blocks(ids, block_size, tokenizer.eos_token_id)
    num_val = max(1, int(round(len(blocks) * validation_fraction)))
    if num_val >= len(blocks):
        raise data.DatasetError(f"only {len(blocks)} blocks of {block_size} tokens: too few to hold out validation")
    with atomic_path(out_path) as tmp:
        with open(tmp, "wb") as handle:
            np.savez(handle, train=blocks[:-num_val], validation=blocks[-num_val:])
    write_manifest(out_path, kind="token_blocks", block_size=block_size)
    log.info("packed %d train + %d validation blocks of %d tokens", len(blocks) - num_val, num_val, block_size)


def _read_blocks(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    verify_manifest(path)
    with np.load(path) as blocks:
        return blocks["train"], blocks["validation"]


def pretrain_model(
    arch: Mapping[str, int], settings: Mapping[str, Any], tokenizer_dir: str | Path, blocks_path: str | Path,
    run_dir: str | Path, threads: int = 1,
) -> None:
    """Pre-train a GPT2-shaped model from scratch with plain cross-entropy."""
    import torch
    from transformers import AutoTokenizer

    from .train import train

    torch.set_num_threads(threads)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
    model = models.build_gpt2(arch, tokenizer, seed=settings["seed"])
    train_blocks, val_blocks = _read_blocks(blocks_path)
    config = train_config(settings["train"], seed=settings["seed"])
    result = train(model, train_blocks, val_blocks, config, Path(run_dir), tokenizer=tokenizer)
    log.info("pre-trained: %s", result)


def midtrain_model(
    handle_path: str | Path, blocks_path: str | Path, method: Mapping[str, Any], settings: Mapping[str, Any],
    seed: int, run_dir: str | Path, threads: int = 1,
) -> None:
    """Continue training a model with CE, CE + an auxiliary loss, or CE with a baseline."""
    import functools

    import torch

    from .baselines import make_baseline
    from .losses import AuxLossConfig, auxiliary_loss
    from .train import train

    torch.set_num_threads(threads)
    handle = models.ModelHandle.load(handle_path)
    tokenizer = models.load_tokenizer(handle)
    # float32 master weights on the CPU; the loop moves them to the device and runs bf16 autocast.
    model = models.load_model(handle, dtype="float32", device="cpu", causal_lm=True)
    options = {key: value for key, value in method.items() if key != "objective"}
    objective = method["objective"]
    aux_loss, baseline, aux_weight = None, None, 0.0
    if objective in ("noisy_embedding", "active_forgetting"):
        baseline = make_baseline(objective, **options)
    elif objective != "ce":
        loss_config = AuxLossConfig(name=objective, **options)
        aux_loss, aux_weight = functools.partial(auxiliary_loss, config=loss_config), loss_config.weight
    train_blocks, val_blocks = _read_blocks(blocks_path)
    config = train_config(settings, seed=seed, aux_weight=aux_weight)
    result = train(
        model, train_blocks, val_blocks, config, Path(run_dir), aux_loss=aux_loss, tokenizer=tokenizer, baseline=baseline
    )
    log.info("mid-trained %s with %s: %s", handle.name, dict(method), result)


def prepare_model(
    name: str, spec: Mapping[str, Any], handle_path: str | Path, weights_dir: str | Path,
    pretrained_dir: str | Path | None = None, tokenizer_dir: str | Path | None = None,
    arch: Mapping[str, int] | None = None, seed: int = 0,
) -> None:
    """Resolve a model of any source to a handle; GGUF and init models get their own weights dir."""
    source = spec["source"]
    if source == "hub":
        handle = models.prepare_hub(name, spec["id"], spec.get("revision"), spec.get("trust_remote_code", False))
    elif source == "local":
        handle = models.prepare_local(name, spec["path"], spec.get("trust_remote_code", False))
    elif source == "gguf":
        handle = models.convert_gguf(name, spec["path"], weights_dir)
    elif source == "pretrain":
        handle = models.prepare_local(name, str(pretrained_dir))
    elif source == "init":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_dir))
        models.save_model_dir(models.build_gpt2(arch, tokenizer, seed), tokenizer, weights_dir)
        handle = models.prepare_local(name, str(weights_dir))
    else:  # the schema admits no other source
        raise ValueError(f"unknown model source {source!r}")
    handle.save(handle_path)
    log.info("prepared %s", handle)


# ---------------------------------------------------------------------------------------------
# Geometry
# ---------------------------------------------------------------------------------------------


def measure(
    handle: models.ModelHandle, texts: list[str], sampling: SamplingConfig, extraction: ExtractionConfig,
    meta: Mapping[str, Any],
) -> geometry.CosineStatistics:
    """Cosine statistics of every hidden layer of one model on the sampled texts."""
    tokenizer = models.load_tokenizer(handle)
    model = models.load_model(handle, extraction.dtype, extraction.device)
    limit = models.max_positions(model.config)
    if limit is not None and sampling.seq_len > limit:
        raise ValueError(
            f"model '{handle.name}' accepts at most {limit} positions, fewer than sampling.seq_len={sampling.seq_len}"
        )
    input_ids = data.tokenize_exactly(tokenizer, texts, sampling.seq_len, where=f"{meta.get('dataset')}: ")
    started = time.perf_counter()
    stats = geometry.extract_cosine_statistics(
        model,
        input_ids,
        batch_size=extraction.batch_size,
        meta={
            **meta,
            "model": handle.name,
            "num_parameters": handle.num_parameters,
            "dtype": str(next(model.parameters()).dtype),
            "device": str(next(model.parameters()).device),
        },
    )
    stats.meta["seconds"] = time.perf_counter() - started
    log.info("%s: %d sequences x %d tokens, %d layers, %.1f s", handle.name, *input_ids.shape, stats.num_layers, stats.meta["seconds"])
    return stats


def extract(
    handle_path: str | Path, samples_path: str | Path, out_path: str | Path,
    sampling: SamplingConfig, extraction: ExtractionConfig, threads: int = 1,
) -> None:
    """Cosine statistics of one prepared model on one dataset's samples."""
    import torch

    torch.set_num_threads(threads)
    texts = data.read_samples(samples_path)
    stats = measure(models.ModelHandle.load(handle_path), texts, sampling, extraction, {"dataset": Path(samples_path).stem})
    stats.save(out_path)


def measure_checkpoints(
    run_dir: str | Path, samples_path: str | Path, out_dir: str | Path,
    sampling: SamplingConfig, extraction: ExtractionConfig, trend: TrendConfig, threads: int = 1,
) -> None:
    """Condensation of every evaluation checkpoint of a training run: one ``.npz`` per step and
    ``trajectory.csv`` (step, validation loss, rho, tau, last-n means)."""
    import torch

    torch.set_num_threads(threads)
    texts = data.read_samples(samples_path)
    checkpoints = sorted((Path(run_dir) / "checkpoints").glob("step-*"))
    if not checkpoints:
        raise FileNotFoundError(f"{run_dir} has no checkpoints/step-* directories")
    rows = []
    with atomic_path(out_dir) as tmp:
        tmp.mkdir()
        for checkpoint in checkpoints:
            step = int(checkpoint.name.removeprefix("step-"))
            handle = models.ModelHandle(name=f"{Path(run_dir).name}@{step}", location=str(checkpoint.resolve()))
            stats = measure(handle, texts, sampling, extraction, {"dataset": Path(samples_path).stem, "step": step})
            stats.save(tmp / f"{checkpoint.name}.npz")
            info = read_json(checkpoint / "checkpoint.json") if (checkpoint / "checkpoint.json").exists() else {}
            statistics = geometry.trend_statistics(layer_means_for_trend(stats, trend))
            rows.append({"step": step, "val_loss": info.get("val_loss"), **statistics.as_row()})
        pd.DataFrame(rows).to_csv(tmp / "trajectory.csv", index=False, float_format="%.5f")
        write_manifest(tmp, kind="checkpoint_geometry")


def layer_means_for_trend(stats: geometry.CosineStatistics, trend: TrendConfig) -> np.ndarray:
    means = stats.layer_mean if trend.include_diagonal else stats.layer_mean_offdiag
    return means if trend.include_embedding_layer else means[1:]


def trend_rows(
    model_names: Sequence[str], geometry_paths: Sequence[str | Path], handle_paths: Sequence[str | Path],
    labels: Mapping[str, str], trend: TrendConfig,
) -> pd.DataFrame:
    rows = []
    for name, geometry_path, handle_path in zip(model_names, geometry_paths, handle_paths, strict=True):
        stats = geometry.CosineStatistics.load(geometry_path)
        handle = models.ModelHandle.load(handle_path)
        statistics = geometry.trend_statistics(layer_means_for_trend(stats, trend))
        rows.append(
            {
                "model": name,
                "label": labels.get(name, name),
                "num_parameters": handle.num_parameters,
                "num_layers": handle.num_layers,
                **statistics.as_row(),
            }
        )
    return pd.DataFrame(rows)


def trend_table(
    family: str, dataset: str, model_names: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], trend: TrendConfig,
    csv_path: str | Path, markdown_path: str | Path,
) -> None:
    table = trend_rows(model_names, geometry_paths, handle_paths, labels, trend)
    table.insert(0, "dataset", dataset)
    table.insert(0, "family", family)
    with atomic_path(csv_path) as tmp:
        table.to_csv(tmp, index=False, float_format="%.4f")
    write_text(markdown_path, f"# {family} on {dataset}\n\n" + _markdown(table) + "\n")


def _markdown(table: pd.DataFrame) -> str:
    """A GitHub Markdown table (pandas' to_markdown needs the optional `tabulate`)."""
    def cell(value: Any) -> str:
        return f"{value:.4f}" if isinstance(value, float) else str(value)

    header = "| " + " | ".join(table.columns) + " |"
    rule = "|" + "|".join("---" for _ in table.columns) + "|"
    body = ["| " + " | ".join(cell(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([header, rule, *body])


def trend_metrics(csv_paths: Sequence[str | Path], metrics_path: str | Path, plot_path: str | Path,
                  geometry_paths: Sequence[str | Path]) -> None:
    """DVC metrics (rho, tau per family, dataset and model) and a per-layer plot table."""
    metrics: dict[str, Any] = {}
    for csv_path in csv_paths:
        for row in pd.read_csv(csv_path).to_dict("records"):
            key = f"{row['family']}/{row['dataset']}/{row['model']}"
            metrics[key] = {"spearman_rho": row["spearman_rho"], "kendall_tau": row["kendall_tau"]}
    write_json(metrics_path, metrics)
    curves = []
    for path in geometry_paths:
        stats = geometry.CosineStatistics.load(path)
        depth = np.arange(stats.num_layers)
        curves.append(
            pd.DataFrame(
                {
                    "model": stats.meta["model"],
                    "dataset": stats.meta["dataset"],
                    "layer": depth,
                    "layer_fraction": depth / max(stats.num_layers - 1, 1),
                    "mean_cosine": stats.layer_mean,
                }
            )
        )
    with atomic_path(plot_path) as tmp:
        pd.concat(curves).to_csv(tmp, index=False, float_format="%.5f")



# ---------------------------------------------------------------------------------------------
# Figures
# ---------------------------------------------------------------------------------------------


def _entry(name: str, geometry_path: str | Path, handle_path: str | Path, labels: Mapping[str, str]):
    from .figures import FamilyEntry

    handle = models.ModelHandle.load(handle_path)
    return FamilyEntry(
        label=labels.get(name, name), stats=geometry.CosineStatistics.load(geometry_path), size=handle.num_parameters
    )


def family_figure(
    family: str, dataset: str, model_names: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], out_path: str | Path,
) -> None:
    from .figures import plot_family_trend

    entries = [_entry(*args, labels) for args in zip(model_names, geometry_paths, handle_paths, strict=True)]
    plot_family_trend(entries, out_path, title=f"{family} on {dataset}")


def paired_figure(
    pair: str, first: Sequence[str], second: Sequence[str], geometry_paths: Sequence[str | Path],
    handle_paths: Sequence[str | Path], labels: Mapping[str, str], row_labels: Sequence[str], out_path: str | Path,
) -> None:
    """``geometry_paths`` and ``handle_paths`` list the first members, then the second members."""
    from .figures import plot_paired_trend

    names = list(first) + list(second)
    entries = [_entry(*args, labels) for args in zip(names, geometry_paths, handle_paths, strict=True)]
    pairs = list(zip(entries[: len(first)], entries[len(first) :]))
    plot_paired_trend(pairs, out_path, title=pair, row_labels=tuple(row_labels))


def dataset_figure(
    family: str, model_names: Sequence[str], datasets: Sequence[str], geometry_paths: Sequence[str | Path],
    labels: Mapping[str, str], out_path: str | Path,
) -> None:
    """``geometry_paths`` is dataset-major: every model of the first dataset, then the next."""
    from .figures import plot_dataset_robustness

    paths = iter(geometry_paths)
    grid = {d: {labels.get(m, m): geometry.CosineStatistics.load(next(paths)) for m in model_names} for d in datasets}
    plot_dataset_robustness(
        grid, out_path, title=f"{family} across datasets",
        model_order=[labels.get(m, m) for m in model_names], dataset_order=list(datasets),
    )


# ---------------------------------------------------------------------------------------------
# Mid-training summaries and figures
# ---------------------------------------------------------------------------------------------


def midtrain_tables(
    methods: Sequence[str], seeds: Sequence[int], run_dirs: Sequence[str | Path], geometry_dirs: Sequence[str | Path],
    trajectory_path: str | Path, loss_path: str | Path,
) -> None:
    """Collect every run of one model: condensation per checkpoint, and the loss logs."""
    trajectories, losses = [], []
    for method, seed, run_dir, geometry_dir in zip(methods, seeds, run_dirs, geometry_dirs, strict=True):
        keys = {"method": method, "seed": seed}
        trajectories.append(pd.read_csv(Path(geometry_dir) / "trajectory.csv").assign(**keys))
        log_csv = pd.read_csv(Path(run_dir).parent / "log.csv")
        losses.append(log_csv[["step", "tokens", "loss", "ce_loss", "aux_loss", "val_loss"]].assign(**keys))
    for frames, path in ((trajectories, trajectory_path), (losses, loss_path)):
        table = pd.concat(frames, ignore_index=True)
        with atomic_path(path) as tmp:
            table[["method", "seed", *[c for c in table.columns if c not in ("method", "seed")]]].to_csv(
                tmp, index=False, float_format="%.5f"
            )


def midtrain_figures(
    model: str, label: str, trajectory_path: str | Path, loss_path: str | Path, methods: Sequence[str],
    grid_methods: Sequence[str], grid_dirs: Sequence[str | Path],
    grid_figure: str | Path, trajectory_figure: str | Path, loss_figure: str | Path,
) -> None:
    """The paper's Fig. 6 (heatmaps per method and checkpoint), the depth trend over training and
    the losses of ``methods`` (the ablation runs are Table 3's, not these figures')."""
    from .figures import plot_condensation_grid, plot_loss_curves, plot_trajectory

    rows = {
        method: [
            (int(path.stem.removeprefix("step-")), geometry.CosineStatistics.load(path))
            for path in sorted(Path(directory).glob("step-*.npz"))
        ]
        for method, directory in zip(grid_methods, grid_dirs, strict=True)
    }
    colour_order = list(methods) + [m for m in grid_methods if m not in methods]  # same colours in every figure
    plot_condensation_grid(rows, grid_figure, title=f"{label}: condensation during mid-training", methods=colour_order)
    trajectory = pd.read_csv(trajectory_path)
    plot_trajectory(
        trajectory[trajectory["method"].isin(methods)], trajectory_figure,
        title=f"{label}: condensation during mid-training",
        # with few layers rho and tau saturate; the deeper layers' mean cosine shows the size of the effect
        metrics=("spearman_rho", "kendall_tau", "last_half"), methods=list(methods),
    )
    # Cross-entropy, not the total: auxiliary terms differ in scale and sign between methods.
    losses = pd.read_csv(loss_path)
    losses = losses[losses["method"].isin(methods)].assign(loss=lambda frame: frame["ce_loss"])
    plot_loss_curves(
        losses, loss_figure, title=f"{label}: mid-training losses", methods=list(methods),
        train_label="training cross-entropy",
    )


def midtrain_metrics(trajectory_paths: Sequence[str | Path], models: Sequence[str], metrics_path: str | Path) -> None:
    """DVC metrics: per model and method, the last checkpoint's validation loss and depth trend,
    averaged over seeds."""
    metrics: dict[str, Any] = {}
    for model, path in zip(models, trajectory_paths, strict=True):
        table = pd.read_csv(path)
        last = table.loc[table.groupby(["method", "seed"])["step"].idxmax()]
        for method, rows in last.groupby("method"):
            metrics[f"{model}/{method}"] = {
                "final_val_loss": float(rows["val_loss"].mean()),
                "final_spearman_rho": float(rows["spearman_rho"].mean()),
                "final_kendall_tau": float(rows["kendall_tau"].mean()),
                "seeds": int(len(rows)),
            }
    write_json(metrics_path, metrics)


# ---------------------------------------------------------------------------------------------
# Downstream scores (lm-eval) and the paper's Tables 2 and 3
# ---------------------------------------------------------------------------------------------

EVAL_CACHE_DIR = Path("runs/eval_cache")
"""lm-eval response caches, one per model content (see ``_cache_prefix``)."""


def build_eval_tasks(corpus_dirs: Mapping[str, str | Path], specs: Mapping[str, Mapping[str, Any]], out_dir: str | Path) -> None:
    """The offline multiple-choice tasks, from held-out documents of the built corpora."""
    from . import evaluation

    # each corpus read once, through the same (manifest-checked) reader as the datasets
    documents = {corpus: data.read_local_documents({"source": corpus}, path) for corpus, path in corpus_dirs.items()}
    with atomic_path(out_dir) as tmp:
        for name, spec in specs.items():
            task_spec = {key: value for key, value in spec.items() if key != "corpus"}
            evaluation.build_local_tasks(documents[spec["corpus"]], {name: task_spec}, tmp / name)
        write_json(tmp / "tasks.json", {"tasks": list(specs)})
        write_manifest(tmp, kind="eval_tasks")


def select_checkpoint(run_dir: str | Path) -> Path:
    """The checkpoint of a run with the lowest validation loss, step 0 excluded (it is the model
    before mid-training, scored once as the `pretrained` row). Never chosen on test scores."""
    candidates = []
    for checkpoint in sorted((Path(run_dir) / "checkpoints").glob("step-*")):
        info = read_json(checkpoint / "checkpoint.json")
        if info["step"] > 0 and info.get("val_loss") is not None:
            candidates.append((info["val_loss"], info["step"], checkpoint))
    if not candidates:
        raise FileNotFoundError(f"{run_dir}: no checkpoint after step 0 with a validation loss")
    return min(candidates)[2]


def _cache_prefix(handle: models.ModelHandle, job: str) -> Path:
    """lm-eval's cache keys requests but not the model, so each model content gets its own:
    named by the checksum of the model directory's manifest (written by this pipeline), else of
    the handle (hub id pinned to a commit, or a path outside the pipeline). A retrained
    checkpoint under the same name therefore never meets the old one's answers. ``job`` keeps
    two jobs that score the same checkpoint (``selected`` and its ``step-N``) off one SQLite file."""
    import hashlib

    location = Path(handle.location)
    manifest = location / "manifest.json"
    identity = manifest.read_bytes() if manifest.is_file() else json.dumps(handle.__dict__, sort_keys=True).encode()
    return EVAL_CACHE_DIR / hashlib.sha256(identity).hexdigest()[:16] / job


def _score(
    handle: models.ModelHandle, tasks: Mapping[str, int], settings: Mapping[str, Any], task_dirs: Sequence[str | Path],
    record: dict[str, Any], out_path: str | Path, threads: int, job: str,
) -> None:
    import torch

    from . import evaluation

    torch.set_num_threads(threads)
    tokenizer = models.load_tokenizer(handle)
    model = models.load_model(handle, dtype="auto", device="auto", causal_lm=True)
    eval_settings = evaluation.EvalSettings(
        batch_size=settings["batch_size"], limit=settings["limit"], seed=settings["seed"], metric=settings["metric"]
    )
    cache = _cache_prefix(handle, job)
    cache.parent.mkdir(parents=True, exist_ok=True)
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="lm-eval-tasks-") as include:
        for task_dir in task_dirs:  # fresh YAMLs pointing at the data where it is now
            evaluation.write_task_yamls(task_dir, include)
        scores = evaluation.score_model(model, tokenizer, tasks, eval_settings, include_path=include, cache_prefix=str(cache))
    import lm_eval

    record |= {
        "scores": scores, "metric": settings["metric"], "limit": settings["limit"],
        "lm_eval_version": lm_eval.__version__, "seconds": time.perf_counter() - started,
    }
    write_json(out_path, record)
    log.info("%s: %s", record["checkpoint"], {task: entry[settings["metric"]] for task, entry in scores.items()})


def _local_task_dirs(tasks_index: str | Path | None) -> list[Path]:
    if tasks_index is None:
        return []
    root = Path(tasks_index).parent
    return [root / name for name in read_json(tasks_index)["tasks"]]


def evaluate_pretrained(
    handle_path: str | Path, tasks_index: str | Path | None, tasks: Mapping[str, int], settings: Mapping[str, Any],
    out_path: str | Path, threads: int = 1,
) -> None:
    """Scores of a model before mid-training: Table 2's `pretrained` row."""
    handle = models.ModelHandle.load(handle_path)
    record = {"model": handle.name, "method": "pretrained", "seed": None, "checkpoint": "pretrained", "step": None, "val_loss": None}
    _score(handle, tasks, settings, _local_task_dirs(tasks_index), record, out_path, threads, job="pretrained")


def evaluate_checkpoint(
    run_dir: str | Path, checkpoint: str, tasks_index: str | Path | None, tasks: Mapping[str, int],
    settings: Mapping[str, Any], out_path: str | Path, model: str, method: str, seed: int, threads: int = 1,
) -> None:
    """Scores of one checkpoint of a run: ``selected`` (lowest validation loss) or ``step-N``."""
    path = select_checkpoint(run_dir) if checkpoint == "selected" else Path(run_dir) / "checkpoints" / checkpoint
    info = read_json(path / "checkpoint.json")
    handle = models.ModelHandle(name=f"{model}/{method}/seed{seed}/{path.name}", location=str(path.resolve()))
    record = {
        "model": model, "method": method, "seed": seed, "checkpoint": path.name, "step": info["step"],
        "val_loss": info.get("val_loss"), "selected_by": "lowest validation loss" if checkpoint == "selected" else None,
    }
    _score(handle, tasks, settings, _local_task_dirs(tasks_index), record, out_path, threads, job=checkpoint)


def table2(
    score_paths: Sequence[str | Path], tasks: Sequence[str], methods: Sequence[str], reference: str, metric: str,
    labels: Mapping[str, str], stem: str | Path, metrics_path: str | Path, plot_path: str | Path,
) -> None:
    """Table 2 (every method on every mid-trained model, against ``reference``) as CSV, Markdown,
    LaTeX and HTML, and the same scores as DVC metrics and a DVC plot of the averages."""
    from . import tables

    scores = tables.load_scores(score_paths, metric=metric)
    table = tables.table2(scores, tasks, methods, reference=reference, labels=labels)
    display = tables.format_table2(table, tasks)
    caption = tables.table2_caption(reference, metric)
    tables.write_table(display, table, stem, caption)
    write_text(Path(stem).with_suffix(".html"), _html(display, caption))
    write_json(metrics_path, tables.score_metrics(scores, tasks, methods))
    averages = table.assign(row=table["model"] + " / " + table["method"])[["row", "model", "method", "average_mean", "average_std"]]
    with atomic_path(plot_path) as tmp:
        averages.to_csv(tmp, index=False, float_format="%.4f")


def table3(
    score_paths: Sequence[str | Path], tasks: Sequence[str], metric: str, grid: Mapping[str, Sequence[float]],
    models: Sequence[str], stem: str | Path,
) -> None:
    """Table 3: the average score of the dispersion loss over its weight x temperature grid."""
    from . import tables

    scores = tables.load_scores(score_paths, metric=metric)
    table = tables.table3(scores, tasks, {name: tuple(pair) for name, pair in grid.items()}, models=models)
    grids = [tables.table3_grid(table, model=model) for model in models]
    display = pd.concat([g.assign(model=m) for g, m in zip(grids, models)], ignore_index=True)
    display = display[["model", *[c for c in display.columns if c != "model"]]]
    caption = tables.table3_caption(metric)
    tables.write_table(display, table, stem, caption)
    write_text(Path(stem).with_suffix(".html"), _html(display, caption))


def _html(display: pd.DataFrame, caption: str) -> str:
    """A table for the Snakemake report (Markdown bold becomes <b>)."""
    import html
    import re

    body = display.to_html(index=False, escape=True, na_rep="—")
    body = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", body)
    return f"<p>{html.escape(caption)}</p>\n{body}\n"


def scores_by_step(score_paths: Sequence[str | Path], metric: str, out_path: str | Path) -> None:
    """Every scored checkpoint: the task scores (percent) over mid-training, mean and std over seeds.
    The model before mid-training appears as method `pretrained` at step 0."""
    from . import tables

    scores = tables.load_scores(score_paths, metric=metric)
    scores["step"] = scores["step"].fillna(0)
    summary = (
        scores.assign(score=scores["score"] * 100)
        .groupby(["model", "method", "step", "task"])["score"]
        .agg(["mean", "std", "count"])
        .reset_index()
    )
    with atomic_path(out_path) as tmp:
        summary.to_csv(tmp, index=False, float_format="%.4f")
