"""Extraction's peak memory and time against the context length T: ours (memory linear in T) vs
the T^2 accumulator it replaced, side by side in one run.

``ours``       ``cosine_extraction.extract_cosine_statistics`` as ``condensation.measure`` calls it: the
               cosines in chunks of rows (``cosine_extraction.CHUNK_VALUES``), the position-wise mean
               matrix whole up to T = 256 and block-averaged to 256 x 256 above it, the lenses.
``quadratic``  the accumulator before this change, copied below as it was: each layer's whole
               ``[B, T, T]`` cosine matrices, their float64 sum per layer (``[L+1, T, T]``) kept
               across batches, the same lenses and the same forward pass.

Each (variant, T) runs in a fresh process so that its peak is its own: on CPU the peak resident
memory (``VmHWM``) above the resident memory after the model and the token ids were made; on CUDA
``torch.cuda.max_memory_allocated`` above the allocation before the call. ``time`` is the wall
time of the extraction (forward passes included), one call after one warm-up call at T = 64.
The agreement columns compare the two variants' layer means (all pairs, and i != j): they must
agree to 1e-8 at every T (the script fails otherwise).

    python benchmarks/long_context.py [--tokens 256 1024 4096 8192] [--quadratic-max 8192]
        [--layers 4] [--width 128] [--sequences 2] [--batch-size 1] [--device cpu|cuda] [--json FILE]

Default model: a GPT2 with random weights, 4 layers of width 128, ``n_positions`` = the largest T.
At T = 8192 the quadratic accumulator holds about 6 GB on a CPU; ``--quadratic-max`` stops it
earlier on a smaller machine.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch
from _common import processor

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from condensation import cosine_extraction, geometry, lens_extraction  # noqa: E402

AGREEMENT_TOLERANCE = 1e-8


class QuadraticAccumulator:
    """``cosine_extraction.CosineAccumulator`` before linear memory (commit 4b60cb7), unchanged."""

    def __init__(self, bins: int = geometry.NUM_BINS) -> None:
        self.bins = bins
        self.count = 0
        self._sum: torch.Tensor | None = None
        self._pooled: torch.Tensor | None = None
        self._sequence_sums: list[torch.Tensor] = []

    def update(self, hidden_states: Sequence[torch.Tensor]) -> None:
        per_layer_sum, per_layer_counts, per_sequence = [], [], []
        device = hidden_states[0].device
        for hidden in hidden_states:
            cos = cosine_extraction.cosine_matrices(hidden)
            per_layer_sum.append(cos.sum(dim=0, dtype=torch.float64).to(device))
            per_layer_counts.append(cosine_extraction.histogram_counts(cos, self.bins).to(device))
            diagonal = torch.diagonal(cos, dim1=-2, dim2=-1)
            per_sequence.append(torch.stack([cos.sum(dim=(-2, -1), dtype=torch.float64),
                                             diagonal.sum(dim=-1, dtype=torch.float64)]).to(device))
        batch_sum = torch.stack(per_layer_sum)
        batch_counts = torch.stack(per_layer_counts)
        if self._sum is None:
            self._sum, self._pooled = batch_sum, batch_counts
        else:
            self._sum += batch_sum
            self._pooled += batch_counts
        self._sequence_sums.append(torch.stack(per_sequence, dim=1))
        self.count += int(hidden_states[0].shape[0])

    def finalize(self) -> dict[str, np.ndarray]:
        mean = (self._sum / self.count).cpu()
        seq_len = mean.shape[-1]
        diag = torch.diagonal(mean, dim1=-2, dim2=-1).sum(-1)
        total = mean.sum(dim=(-2, -1))
        # the histogram of the mean, as it did
        np.stack([cosine_extraction.density_histogram(m, self.bins) for m in mean])
        return {"layer_mean": (total / seq_len**2).numpy(),
                "layer_mean_offdiag": ((total - diag) / max(seq_len * (seq_len - 1), 1)).numpy()}


@torch.inference_mode()
def quadratic_extraction(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int) -> dict[str, np.ndarray]:
    accumulator = QuadraticAccumulator()
    lens_sums = lens_extraction.LensAccumulator(*input_ids.shape)
    for start in range(0, input_ids.shape[0], batch_size):
        batch = input_ids[start : start + batch_size]
        hidden = model(input_ids=batch, output_hidden_states=True, use_cache=False).hidden_states
        accumulator.update(hidden)
        lens_sums.update(hidden)
    lens_sums.finalize()
    return accumulator.finalize()


HEATMAP_CELLS = 256
"""The mean matrix's side above which it is block-averaged, as the table of docs/measuring.md was
measured (measure's default, ``ExtractionConfig.heatmap_size``, is 512: 1.5 MB more a layer)."""


def our_extraction(model: torch.nn.Module, input_ids: torch.Tensor, batch_size: int) -> dict[str, np.ndarray]:
    stats = cosine_extraction.extract_cosine_statistics(model, input_ids, batch_size=batch_size,
                                                        heatmap_size=HEATMAP_CELLS)
    return {"layer_mean": stats.layer_mean, "layer_mean_offdiag": stats.layer_mean_offdiag}


VARIANTS = {"ours": our_extraction, "quadratic": quadratic_extraction}


def resident_mb(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    return float("nan")


def build_model(args, device: torch.device) -> torch.nn.Module:
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    config = GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=max(args.width // 32, 1), vocab_size=1000,
                        n_positions=max(args.tokens))
    return GPT2Model(config).to(device).eval()


def child(args) -> None:
    """One (variant, T) in this process; prints a JSON line."""
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    model = build_model(args, device)
    extraction = VARIANTS[args.child]
    warm = torch.randint(0, 1000, (2, 64), generator=torch.Generator().manual_seed(1)).to(device)
    extraction(model, warm, args.batch_size)
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 1000, (args.sequences, args.child_tokens), generator=generator).to(device)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        torch.cuda.reset_peak_memory_stats(device)
        before = torch.cuda.memory_allocated(device)
    else:
        Path("/proc/self/clear_refs").write_text("5")  # resets the peak (VmHWM) to the current resident memory
        before = resident_mb("VmRSS")
    started = time.perf_counter()
    result = extraction(model, ids, args.batch_size)
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        peak = (torch.cuda.max_memory_allocated(device) - before) / 2**20
    else:
        peak = resident_mb("VmHWM") - before
    seconds = time.perf_counter() - started
    print(json.dumps({"seconds": seconds, "peak_mb": peak, **{k: v.tolist() for k, v in result.items()}}))


def measure_in_child(args, variant: str, tokens: int) -> dict[str, Any]:
    command = [sys.executable, __file__, "--child", variant, "--child-tokens", str(tokens), "--device", args.device,
               "--layers", str(args.layers), "--width", str(args.width), "--sequences", str(args.sequences),
               "--batch-size", str(args.batch_size), "--threads", str(args.threads), "--tokens", *map(str, args.tokens)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit {done.returncode}"}
    return json.loads(done.stdout.strip().splitlines()[-1])


def device_name(device: str, threads: int) -> str:
    if device == "cuda":
        return torch.cuda.get_device_name(0)
    return f"{processor()}, {os.cpu_count()} cores, {threads} thread(s)"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[256, 1024, 2048, 4096, 8192])
    parser.add_argument("--quadratic-max", type=int, default=8192, help="largest T the quadratic accumulator runs at")
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--sequences", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=1)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--child", choices=sorted(VARIANTS), help=argparse.SUPPRESS)
    parser.add_argument("--child-tokens", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        return child(args)
    print(f"device: {device_name(args.device, args.threads)}; torch {torch.__version__}; "
          f"GPT2 {args.layers} layers x {args.width}, "
          f"{args.sequences} sequences, batch {args.batch_size}")
    print(f"{'T':>6} {'ours MB':>9} {'quad MB':>9} {'mem ratio':>9} {'ours s':>8} {'quad s':>8} {'time ratio':>10} "
          f"{'max |dmu|':>10}")
    rows, failed = [], False
    for tokens in args.tokens:
        ours = measure_in_child(args, "ours", tokens)
        quad = measure_in_child(args, "quadratic", tokens) if tokens <= args.quadratic_max else {"error": "not run"}
        row = {"tokens": tokens, "ours": ours, "quadratic": quad}
        if "error" in ours:
            print(f"{tokens:>6} ours failed: {ours['error']}")
            failed = True
        elif "error" in quad:
            print(f"{tokens:>6} {ours['peak_mb']:>9.1f} {'-':>9} {'-':>9} {ours['seconds']:>8.2f} {'-':>8} {'-':>10} "
                  f"{'-':>10}  (quadratic: {quad['error']})")
        else:
            difference = max(np.abs(np.subtract(ours[k], quad[k])).max() for k in ("layer_mean", "layer_mean_offdiag"))
            row |= {"memory_ratio": quad["peak_mb"] / max(ours["peak_mb"], 1e-9),
                    "time_ratio": quad["seconds"] / ours["seconds"],
                    "max_layer_mean_difference": float(difference)}
            failed |= difference > AGREEMENT_TOLERANCE
            print(f"{tokens:>6} {ours['peak_mb']:>9.1f} {quad['peak_mb']:>9.1f} {row['memory_ratio']:>8.1f}x "
                  f"{ours['seconds']:>8.2f} {quad['seconds']:>8.2f} {row['time_ratio']:>9.2f}x {difference:>10.1e}")
        rows.append(row)
    print("mem ratio = quadratic peak / ours (higher: ours holds less); time ratio = quadratic time / ours "
          "(above 1: ours is faster); peaks are above the memory held before the call")
    if args.json:
        summary = {"device": device_name(args.device, args.threads), "rows": rows}
        Path(args.json).write_text(json.dumps(summary, indent=1))
    if failed:
        sys.exit(f"FAILED: a layer mean differs by more than {AGREEMENT_TOLERANCE} or ours did not run")


if __name__ == "__main__":
    main()
