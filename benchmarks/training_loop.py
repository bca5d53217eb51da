"""Training throughput: our ``condensation.training.loop.train`` loop vs a plain Hugging Face tutorial loop.

Both loops train the same randomly initialised ``GPT2LMHeadModel`` (a fresh copy of one init per
run) on the same random token blocks, with the same micro-batch ``B`` and block size ``T``,
one optimizer step per micro-batch. Runs alternate ours / plain rep by rep, so a load spike on a
shared machine hits both alike.

``ours``   ``condensation.training.loop.train(model, blocks, ..., TrainConfig(...))``, the production loop,
           with checkpointing as good as off: ``num_checkpoints=0`` (evaluations at step 0 and at
           the last step only), ``checkpoint_every`` beyond the run (one resumable state, at the
           end), ``val_batches=1``, the dvclive tracker unless ``--tracker none``, and the
           condensation probe off (``probe_every=0``: every 10 steps it would fall inside the timed
           steps, and it is watching, not training). It runs bf16 autocast on CUDA
           (``mixed_precision="auto"``), float32 on CPU, the CE once from the logits (no HF
           ``labels``), the vocabulary padded to a multiple of 64 (``TrainConfig``'s default:
           GPT2-small's 50,257 rows train as 50,304), AdamW with parameter groups, gradient
           clipping, a NaN guard and one ``log.csv`` row per step.
``plain``  the transformers-tutorial loop: a shuffled ``DataLoader``, ``model(input_ids=x, labels=x)``
           (HF computes the loss), ``loss.backward()``, ``clip_grad_norm_``, ``AdamW.step()``,
           ``lr_scheduler.step()`` (cosine with warmup), ``zero_grad()``; no mixed precision, as in
           the tutorial, so float32 everywhere (what a straightforward reproduction would run).
``ours+compile``  (with ``--compile``) ours with ``TrainConfig(compile=True)``: the training
           forward and its CE go through ``torch.compile`` as one function; the compile happens in
           the first step, inside the warm-up, so it counts only in the end-to-end figure. This is
           the compiled CE step that every ratio is also given against (issue 42, item 6).
``plain+autocast``  (only when the autocast dtype is not float32, i.e. on CUDA by default) the
           same plain loop inside ``torch.autocast(bfloat16)``: separates what ours gains from
           precision from what it gains (or loses) as a loop.

How ours is timed: ``train()`` writes one ``log.csv`` row per optimizer step with the seconds
elapsed since the loop started (``elapsed_s``). Step 0's row comes after the step-0 evaluation
and checkpoint; the last step's row after the final evaluation and checkpoint. Per run we take
``(elapsed[S-1] - elapsed[w]) / (S-1-w)``: the mean time of steps ``w+1 .. S-1``, i.e. after
``w = --warmup-steps`` warm-up steps and before the last one, so the fixed costs (accelerate
setup, evaluations, ``save_pretrained``, the final state) are excluded, while everything the loop
does per step (data indexing, the host sync for the NaN guard and the grad norm, the CSV row) is
included. (On CUDA the rows of steps ``w`` and ``S-1`` are written during the step after each,
when their numbers are read: both ends shift alike.) The plain loop is timed over the same steps
(``w`` warm-up steps, then ``S-1-w`` timed ones, clock read after ``torch.cuda.synchronize()``).
Separately, the end-to-end figure of the whole ``train()`` call is printed
(``train_summary.json``'s ``tokens_per_s``, fixed costs included: it rises with the token budget).

How to read it:

* ``tok/s`` = B * T / (median over ``--reps`` runs of the mean step time); ``min`` is the least
  disturbed run. ``ours / plain`` > 1: our loop is faster. GPU targets: >= 2x over the plain
  float32 loop, and >= 40% MFU. With ``--compile``, each loop's step time is also printed as a
  multiple of the compiled CE step's (``ours+compile``; JSON ``step_time_over_compiled_ce``).
* MFU = model FLOPs per token * tok/s / peak FLOP/s, with the nanoGPT (PaLM appendix B) count
  ``6 * N + 12 * n_layer * n_embd * T``: ``N`` = parameters without the position embeddings (the
  tied token embedding counts once, as the LM head's matmul), the second term the attention
  score/value matmuls (full T x T, not halved for causality). The auxiliary loss's FLOPs are not
  counted. Printed only with a peak: ``--peak-tflops`` (default 989, H100 dense bf16, on CUDA;
  none on CPU). MFU is for the precision of the peak you pass: the float32 plain loop on a
  bf16 peak is "useful FLOPs relative to what bf16 could do".
* ``--aux dispersion`` adds ``weight * losses.auxiliary_loss(hidden_states)`` (every block
  output) to both loops: ours through ``train(..., method=AuxiliaryLoss(config))``, the
  plain loop by adding it to ``out.loss``.

    python benchmarks/training_loop.py [--device cpu|cuda] [--preset gpt2-small] [--aux dispersion]
        [--compile] [--steps 12] [--warmup-steps 2] [--reps 3] [--threads 1] [--peak-tflops X] [--json results.json]

Default shape: GPT2 n_layer=4, n_embd=256, n_head=4, vocabulary 2048, B=8, T=256, float32 on
CPU; the default CPU run takes about 1.5 minutes on one thread. ``--preset gpt2-small`` (12 layers,
768 wide, vocabulary 50257, B=16, T=1024, 30 steps of which 5 warm-up) is meant for a GPU.
"""

from __future__ import annotations

import argparse
import copy
import csv
import json
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from _common import (
    add_output_arguments,
    announce,
    autocast,
    device_parser,
    print_profile,
    profile_ops,
    rotated,
    set_up_device,
    synchronize,
    timeline_line,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from condensation.config.objectives import AuxLossConfig  # noqa: E402
from condensation.config.runs import TrainConfig  # noqa: E402
from condensation.runtime.run_dir import SUMMARY_NAME  # noqa: E402
from condensation.training.loop import STEP_REGION, train  # noqa: E402
from condensation.training.losses import AuxiliaryLoss, auxiliary_loss  # noqa: E402

PRESETS = {
    "default": dict(n_layer=4, n_embd=256, n_head=4, vocab=2048, tokens=256, batch=8, steps=12, warmup_steps=2),
    "gpt2-small": dict(n_layer=12, n_embd=768, n_head=12, vocab=50257, tokens=1024, batch=16, steps=30, warmup_steps=5),
}
H100_BF16_DENSE_TFLOPS = 989.0
LR = 1e-3  # pre-training a small model from scratch; the value does not change the step time


def random_blocks(args, count: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, args.vocab, size=(count, args.tokens), dtype=np.int64)


# ----------------------------------------------------------------------------------------------
# the two loops; each returns the mean seconds per step over steps warmup+1 .. steps-1


def run_ours(template: torch.nn.Module, args, device: torch.device, dtype: torch.dtype,
             blocks: np.ndarray, val_blocks: np.ndarray, aux_config: AuxLossConfig | None,
             compile_forward: bool = False) -> dict:
    config = TrainConfig(
        train_tokens=args.steps * args.batch * args.tokens,
        block_size=args.tokens,
        micro_batch_size=args.batch,
        lr=LR,
        num_checkpoints=0,
        checkpoint_every=args.steps + 1,
        val_batches=1,
        mixed_precision="no" if dtype == torch.float32 else "bf16",
        compile=compile_forward,
        tracker=args.tracker,
        probe_every=0,  # the probe watches a run: kept out of the timed steps
    )
    method = AuxiliaryLoss(aux_config) if aux_config is not None else None
    # train() places the model with accelerate; it gets float32 weights on the CPU, as in stages.py
    model = copy.deepcopy(template)
    with tempfile.TemporaryDirectory(prefix="bench-train-") as out_dir:
        started = time.perf_counter()
        result = train(model, blocks, val_blocks, config, Path(out_dir), method=method)
        call_s = time.perf_counter() - started
        if result.steps != args.steps:
            raise RuntimeError(f"train() ran {result.steps} steps, expected {args.steps}")
        with open(Path(out_dir) / "log.csv", newline="", encoding="utf-8") as handle:
            elapsed = {int(row["step"]): float(row["elapsed_s"]) for row in csv.DictReader(handle)}
        summary = json.loads((Path(out_dir) / "final" / SUMMARY_NAME).read_text())
    first, last = args.warmup_steps, args.steps - 1
    return {"step_s": (elapsed[last] - elapsed[first]) / (last - first), "call_s": call_s,
            "summary_tokens_per_s": summary["tokens_per_s"], "summary_wall_time_s": summary["wall_time_s"],
            "final_train_loss": result.final_train_loss}


def run_plain(template: torch.nn.Module, args, device: torch.device, autocast_dtype: torch.dtype,
              blocks: np.ndarray, aux_config: AuxLossConfig | None) -> dict:
    from transformers import get_cosine_schedule_with_warmup

    model = copy.deepcopy(template).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    scheduler = get_cosine_schedule_with_warmup(optimizer, num_warmup_steps=math.ceil(0.2 * args.steps),
                                                num_training_steps=args.steps)
    dataset = torch.utils.data.TensorDataset(torch.from_numpy(blocks))
    loader = torch.utils.data.DataLoader(dataset, batch_size=args.batch, shuffle=True, drop_last=True,
                                         generator=torch.Generator().manual_seed(0))
    batches = iter(loader)
    timed_steps = args.steps - 1 - args.warmup_steps  # as many as ours is timed over
    for step in range(args.warmup_steps + timed_steps):
        if step == args.warmup_steps:
            synchronize(device)
            started = time.perf_counter()
        (x,) = next(batches)
        x = x.to(device)
        with autocast(device, autocast_dtype):
            out = model(input_ids=x, labels=x, output_hidden_states=aux_config is not None)
            loss = out.loss
            if aux_config is not None:
                loss = loss + aux_config.weight * auxiliary_loss(out.hidden_states, aux_config)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        scheduler.step()
        optimizer.zero_grad()
    synchronize(device)
    return {"step_s": (time.perf_counter() - started) / timed_steps, "final_train_loss": loss.item()}


# ----------------------------------------------------------------------------------------------


def flops_per_token(model: torch.nn.Module, args) -> tuple[float, int]:
    """nanoGPT's estimate: ``6 N + 12 L d T``, N without the position embeddings."""
    params = sum(p.numel() for p in model.parameters()) - model.transformer.wpe.weight.numel()
    return 6 * params + 12 * args.n_layer * args.n_embd * args.tokens, params


def bench(args, device: torch.device, dtype: torch.dtype) -> dict:
    from transformers import GPT2Config, GPT2LMHeadModel
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()  # save_pretrained's "Writing model shards" bars, three per train() call

    torch.manual_seed(args.seed)
    gpt_config = GPT2Config(vocab_size=args.vocab, n_positions=args.tokens, n_embd=args.n_embd, n_layer=args.n_layer,
                            n_head=args.n_head, bos_token_id=0, eos_token_id=0)
    template = GPT2LMHeadModel(gpt_config)  # float32 on the CPU; every run starts from a copy of it
    blocks = random_blocks(args, args.steps * args.batch, args.seed + 1)  # one epoch: each block seen once
    val_blocks = random_blocks(args, args.batch, args.seed + 2)
    aux_config = AuxLossConfig(args.aux) if args.aux else None

    variants = {
        "ours": lambda: run_ours(template, args, device, dtype, blocks, val_blocks, aux_config),
        "plain": lambda: run_plain(template, args, device, torch.float32, blocks, aux_config),
    }
    if args.compile:
        variants["ours+compile"] = lambda: run_ours(template, args, device, dtype, blocks, val_blocks, aux_config,
                                                    compile_forward=True)
    if dtype != torch.float32:
        variants["plain+autocast"] = lambda: run_plain(template, args, device, dtype, blocks, aux_config)
    names = list(variants)
    runs: dict[str, list[dict]] = {name: [] for name in names}
    for rep in range(args.reps):
        for name in rotated(names, rep):
            runs[name].append(variants[name]())

    step_tokens = args.batch * args.tokens
    flops, params = flops_per_token(template, args)
    results = {}
    for name, rows in runs.items():
        step_times = [row["step_s"] for row in rows]
        median, best = statistics.median(step_times), min(step_times)
        results[name] = {"step_s": median, "min_step_s": best, "tokens_per_s": step_tokens / median,
                         "tokens_per_s_best": step_tokens / best, "runs": rows}
        if args.peak_tflops:
            results[name]["mfu"] = flops * step_tokens / median / (args.peak_tflops * 1e12)
    if "ours+compile" in results:  # issue 42, item 6: every ratio against the compiled CE step
        compiled_step_s = results["ours+compile"]["step_s"]
        step_time_over_compiled_ce = {name: row["step_s"] / compiled_step_s for name, row in results.items()}
    else:
        step_time_over_compiled_ce = None
    result = {"n_layer": args.n_layer, "n_embd": args.n_embd, "n_head": args.n_head, "vocab": args.vocab,
              "batch": args.batch, "tokens": args.tokens, "steps": args.steps, "warmup_steps": args.warmup_steps,
              "timed_steps": args.steps - 1 - args.warmup_steps, "aux": args.aux, "params_counted": params,
              "flops_per_token": flops, "peak_tflops": args.peak_tflops, "variants": results,
              "step_time_over_compiled_ce": step_time_over_compiled_ce}
    if args.profile:  # one more run of our fastest loop: by far most of its kernels are its steps'
        mine = "ours+compile" if "ours+compile" in variants else "ours"
        result["profile_of"] = mine
        result["profile"], result["profile_timeline"] = profile_ops(
            variants[mine], device, args.profile, units=args.steps, unit="step", region=STEP_REGION,
            skip=args.warmup_steps)
    return result


def print_results(result: dict, device: torch.device, dtype: torch.dtype) -> None:
    aux = f", + {result['aux']} loss on every block output" if result["aux"] else ""
    print(f"\nGPT2 n_layer={result['n_layer']} n_embd={result['n_embd']} n_head={result['n_head']} "
          f"vocab={result['vocab']}, "
          f"B={result['batch']} T={result['tokens']}{aux}; {result['steps']} steps per run, timed over steps "
          f"{result['warmup_steps'] + 1}..{result['steps'] - 1} ({result['timed_steps']} steps)")
    ours_precision = "bf16 autocast" if dtype != torch.float32 else "float32"
    precision = {"ours": ours_precision, "ours+compile": ours_precision, "plain": "float32",
                 "plain+autocast": {torch.bfloat16: "bf16", torch.float16: "fp16"}.get(dtype, "") + " autocast"}
    mfu_header = f" {'MFU':>7}" if result["peak_tflops"] else ""
    print(f"  {'loop':<15} {'precision':<14} {'step':>9} {'min':>9} {'tok/s':>10} {'tok/s best':>11}{mfu_header}")
    variants = result["variants"]
    for name, row in variants.items():
        mfu = f" {100 * row['mfu']:6.1f}%" if result["peak_tflops"] else ""
        print(f"  {name:<15} {precision[name]:<14} {row['step_s']:8.3f}s {row['min_step_s']:8.3f}s "
              f"{row['tokens_per_s']:10.0f} {row['tokens_per_s_best']:11.0f}{mfu}")
    on_gpu = device.type == "cuda"
    for mine in ("ours", "ours+compile"):
        for name in ("plain", "plain+autocast"):
            if mine in variants and name in variants:
                ratio = variants[mine]["tokens_per_s"] / variants[name]["tokens_per_s"]
                best = variants[mine]["tokens_per_s_best"] / variants[name]["tokens_per_s_best"]
                target = ((f"; target >= 2x: {'met' if ratio >= 2 else 'NOT met'}" if on_gpu else "")
                          if name == "plain" else "")
                print(f"  {mine} / {name}: x{ratio:.2f} (best x{best:.2f}){target}")
    if result["step_time_over_compiled_ce"] is not None:
        ratios = ", ".join(f"{name} x{ratio:.2f}" for name, ratio in result["step_time_over_compiled_ce"].items()
                           if name != "ours+compile")
        print(f"  step time against the compiled CE step (ours+compile): {ratios}")
    ours = variants["ours+compile"] if "ours+compile" in variants else variants["ours"]
    if result["peak_tflops"]:
        target = f"; target >= 40%: {'met' if ours['mfu'] >= 0.4 else 'NOT met'}" if on_gpu else ""
        print(f"  MFU: {result['flops_per_token'] / 1e6:.1f} MFLOP/token "
              f"(6 x {result['params_counted'] / 1e6:.2f}M params "
              f"+ 12 x n_layer x n_embd x T attention), peak {result['peak_tflops']:g} TFLOP/s{target}")
    else:
        print(f"  MFU: not printed (no --peak-tflops); {result['flops_per_token'] / 1e6:.1f} MFLOP/token "
              f"(6 x {result['params_counted'] / 1e6:.2f}M params + attention)")
    for mine in ("ours", "ours+compile"):
        if mine in variants:
            calls = [run["call_s"] for run in variants[mine]["runs"]]
            end_to_end = [run["summary_tokens_per_s"] for run in variants[mine]["runs"]]
            print(f"  {mine} end to end: train() call {statistics.median(calls):.2f}s for {result['steps']} steps; "
                  f"train_summary.json tokens_per_s {statistics.median(end_to_end):.0f} (fixed costs included)")
    if "profile" in result:
        timeline = result.get("profile_timeline")
        if timeline:  # the steps after the warm-up, without the evaluations and saves around them
            counted = (f"steps {result['warmup_steps'] + 1}..{result['steps']}" if timeline["region"]
                       else f"all {result['steps']} steps, evaluations and saves included")
            print(f"\n  {result['profile_of']}, {counted}: {timeline_line(timeline)}")
        print_profile(result["profile"], f"a whole run of {result['profile_of']}")


def parse_args() -> tuple[argparse.Namespace, torch.device, torch.dtype]:
    parser = device_parser(__doc__.splitlines()[0], "autocast dtype of ours (and of plain+autocast); default float32 "
                                                    "on CPU, bfloat16 on CUDA", dtypes=("float32", "bfloat16"))
    parser.add_argument("--preset", choices=tuple(PRESETS), default="default",
                        help="shape and step counts; the flags below override single values")
    for name in ("n_layer", "n_embd", "n_head", "vocab", "tokens", "batch", "steps", "warmup_steps"):
        parser.add_argument("--" + name.replace("_", "-"), type=int, default=None,
                            help=f"default: {PRESETS['default'][name]} "
                                 f"({PRESETS['gpt2-small'][name]} with --preset gpt2-small)")
    parser.add_argument("--aux", choices=("dispersion",), default=None, help="add this auxiliary loss to both loops")
    parser.add_argument("--compile", action="store_true",
                        help="also run ours with TrainConfig(compile=True) (ours+compile); "
                             "the compile falls in the warm-up steps")
    parser.add_argument("--tracker", choices=("dvclive", "none"), default="dvclive",
                        help="ours' per-step metric tracker (TrainConfig.tracker); none where dvclive is not installed")
    parser.add_argument("--reps", type=int, default=3, help="runs of each loop (a fresh model and optimizer each)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="then profile one more run of ours (ours+compile with --compile) and print its TOP "
                             "operators by self time (0: no): where the step's time goes, against the MFU target")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help=f"peak FLOP/s for MFU, in TFLOP/s; "
                             f"default {H100_BF16_DENSE_TFLOPS:g} (H100 bf16 dense) on CUDA, none on CPU")
    add_output_arguments(parser)
    args = parser.parse_args()
    for name, value in PRESETS[args.preset].items():
        if getattr(args, name) is None:
            setattr(args, name, value)
    if args.steps - 1 - args.warmup_steps < 1:
        parser.error("--steps must exceed --warmup-steps by at least 2 (the last step holds the final evaluation)")
    device, dtype = set_up_device(parser, args)
    if device.type == "cuda" and args.peak_tflops is None:
        args.peak_tflops = H100_BF16_DENSE_TFLOPS
    elif device.type == "cpu" and torch.cuda.is_available():
        # train() places the model with accelerate, which would pick the GPU
        os.environ["ACCELERATE_USE_CPU"] = "true"
    return args, device, dtype


def main() -> None:
    args, device, dtype = parse_args()
    report = announce(device, dtype, "ours {}", f"{args.reps} runs of each loop, median of per-run mean step times")

    started = time.perf_counter()
    result = bench(args, device, dtype)
    print_results(result, device, dtype)
    report |= {"reps": args.reps, "threads": torch.get_num_threads(), "wall_s": time.perf_counter() - started,
               **result}
    write_report(report, args.json)


if __name__ == "__main__":
    main()
