"""The one training loop: pre-train a tiny GPT-2-like model from scratch, or mid-train a pretrained
Hugging Face causal LM, with an optional auxiliary loss on the hidden states, or with one of the
paper's baselines (noisy embeddings, active forgetting: ``baselines.py``) hooked into the loop.

Read it top to bottom, nanoGPT style:

    TrainConfig          every knob, with the reason for its default (in ``settings``, torch-free)
    lr_at, ...           pure functions: step count, LR schedule, checkpoint steps (``settings``), data order
    train()              the loop: resume or start, then per step
                           forward/backward over grad_accum micro-batches -> NaN guard -> clip ->
                           AdamW step -> (baseline hook) -> (eval + checkpoint) -> log row ->
                           (resumable state)

Distributed: written for ``accelerate launch`` (DDP) as well as a single process. Every rank runs
the same control flow (step counts are global), every loss and flag that decides what happens next
is all-reduced first, and only the main process writes files, followed by ``wait_for_everyone``.

Output layout of ``out_dir``::

    log.csv                      one row per step (step 0 = the untrained model, val loss only)
    checkpoints/step-0000000/    evaluation checkpoints: save_pretrained (+ tokenizer), checkpoint.json
    state/                       latest resumable state: model.safetensors, optimizer.pt, rng.pt,
                                 progress.json, log.csv (the log up to that step)
    final/                       save_pretrained (+ tokenizer) and train_summary.json (= done marker)

Every directory is written to a temporary name and renamed into place (``io.atomic_path``), so a
killed job never leaves a half-written checkpoint or state under its final name.
"""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import functools
import json
import math
import random
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np
import safetensors.torch
import torch
import torch.nn.functional as F
from accelerate import Accelerator
from accelerate.utils import gather_object, set_seed

from .baselines import TrainingBaseline
from .io import atomic_path, read_json, verify_manifest, write_json, write_manifest
from .settings import TrainConfig, checkpoint_steps, lr_at, tokens_per_step, total_steps, warmup_steps

AuxLoss = Callable[[tuple[torch.Tensor, ...]], torch.Tensor]
"""Auxiliary loss: receives the model's hidden states (embedding output first, then one per layer)
and returns a scalar tensor."""

LOG_COLUMNS = ("step", "tokens", "lr", "loss", "ce_loss", "aux_loss", "grad_norm", "val_loss", "elapsed_s")
SUMMARY_NAME = "train_summary.json"  # written last inside final/: its presence marks a finished run
PROGRESS_NAME = "progress.json"  # written last inside state/


# ----------------------------------------------------------------------------- configuration


@dataclass
class TrainResult:
    steps: int
    """Optimizer steps done so far (less than the total when stopped by ``stop_after_steps``)."""
    tokens: int
    """Training tokens consumed (all ranks)."""
    final_train_loss: float | None
    """Total loss of the last step (None if no step ran)."""
    final_val_loss: float | None
    """Validation loss at the last evaluation checkpoint reached."""
    checkpoint_dirs: list[Path] = field(default_factory=list)
    """Evaluation checkpoints written so far, in step order."""
    final_dir: Path | None = None
    """``out_dir/final`` once training is complete, else None."""


# ----------------------------------------------------------------------------- pure functions


@functools.lru_cache(maxsize=4)
def epoch_permutation(num_blocks: int, seed: int, epoch: int) -> np.ndarray:
    """Order of the blocks in ``epoch``: its own generator, so the order depends on nothing else."""
    generator = torch.Generator().manual_seed(seed + epoch)
    return torch.randperm(num_blocks, generator=generator).numpy()


def block_indices(num_blocks: int, seed: int, start: int, count: int) -> np.ndarray:
    """Blocks ``start .. start + count - 1`` of the endless stream formed by concatenating the
    per-epoch permutations; a batch may straddle two epochs."""
    parts = []
    while count > 0:
        epoch, position = divmod(start, num_blocks)
        take = min(count, num_blocks - position)
        parts.append(epoch_permutation(num_blocks, seed, epoch)[position : position + take])
        start, count = start + take, count - take
    return np.concatenate(parts)


def causal_lm_ce(logits: torch.Tensor, input_ids: torch.Tensor, reduction: str = "mean") -> torch.Tensor:
    """Next-token cross-entropy: position t predicts token t + 1. Computed in float32 even under
    bf16 autocast, since a bf16 log-softmax over a large vocabulary loses precision."""
    # Shift the targets, not the logits: slicing the logits copies the largest activation of the
    # step (B x T x vocab) and its backward allocates another; the ignored last position is free.
    targets = F.pad(input_ids[:, 1:], (0, 1), value=-100)
    return F.cross_entropy(logits.flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction=reduction)


def resolve_mixed_precision(setting: str) -> str:
    if setting == "auto":
        return "bf16" if torch.cuda.is_available() and torch.cuda.is_bf16_supported() else "no"
    return setting


def parameter_groups(model: torch.nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """AdamW groups: decay on tensors with >= 2 dims, none on biases and norm gains (see config)."""
    params = [p for p in model.parameters() if p.requires_grad]  # tied weights appear once
    groups = [
        {"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
        {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0},
    ]
    return [group for group in groups if group["params"]]


# ----------------------------------------------------------------------------- the loop


def train(
    model: torch.nn.Module,
    train_blocks: np.ndarray,
    val_blocks: np.ndarray,
    config: TrainConfig,
    out_dir: Path,
    aux_loss: AuxLoss | None = None,
    tokenizer: Any = None,
    stop_after_steps: int | None = None,
    baseline: TrainingBaseline | None = None,
) -> TrainResult:
    """Train ``model`` (in place) on int64 ``[num_blocks, block_size]`` token blocks.

    Resumes from ``out_dir/state`` when present and ends bit-identical to an uninterrupted run;
    returns at once when ``out_dir/final`` is complete. ``stop_after_steps`` stops (saving a state)
    once the global step reaches that value: a graceful stand-in for a kill, or a time limit.
    ``baseline`` hooks a training baseline into the loop (see ``baselines.TrainingBaseline``).
    """
    out_dir = Path(out_dir)
    if (out_dir / "final" / SUMMARY_NAME).exists():
        return _result_from_summary(out_dir)
    train_blocks = _check_blocks(train_blocks, config.block_size, "train_blocks")
    val_blocks = _check_blocks(val_blocks, config.block_size, "val_blocks")

    # Mixed precision is ours, not accelerate's: bf16 needs only autocast (no loss scaler), and
    # accelerate fixes the precision once per process, which would forbid a second train() call
    # with another setting (e.g. pre-train in fp32, then mid-train in bf16).
    accelerator = Accelerator(mixed_precision="no")
    precision = resolve_mixed_precision(config.mixed_precision)
    autocast = functools.partial(
        torch.autocast, device_type=accelerator.device.type, dtype=torch.bfloat16, enabled=precision == "bf16"
    )
    set_seed(config.seed)
    world = accelerator.num_processes
    steps = total_steps(config, world)
    step_tokens = tokens_per_step(config, world)
    step_blocks = config.micro_batch_size * config.grad_accum_steps * world
    eval_steps = set(checkpoint_steps(steps, config.num_checkpoints))
    use_aux = aux_loss is not None and config.aux_weight > 0
    identity = {  # what a resumed run must share with the run that saved the state
        # compile changes how a step runs, not what it computes: a run may resume with it switched
        "config": {key: value for key, value in dataclasses.asdict(config).items() if key != "compile"},
        "world_size": world,
        "train_blocks_shape": list(train_blocks.shape),
        "baseline": baseline.describe() if baseline is not None else None,
    }

    if baseline is not None:
        baseline.prepare(model)  # may replace parameters (untie a head): before the optimizer sees them
    # fused: one kernel for every parameter's update on CUDA instead of a loop of small ones
    optimizer = torch.optim.AdamW(
        parameter_groups(model, config.weight_decay), lr=config.lr, betas=config.betas,
        fused=accelerator.device.type == "cuda",
    )
    model, optimizer = accelerator.prepare(model, optimizer)
    model.train()
    net = accelerator.unwrap_model(model)  # what the baseline hooks see: no DDP wrapper
    # A compiled wrapper for the training forward only; it shares the parameters, so validation,
    # checkpoints and the state keep using `model` (no `_orig_mod.` keys, no recompile for no_grad).
    forward_model = torch.compile(model) if config.compile else model

    state_dir, log_path = out_dir / "state", out_dir / "log.csv"
    if accelerator.is_main_process:
        _remove_stale_temporaries(out_dir)
    accelerator.wait_for_everyone()
    resumed = (state_dir / PROGRESS_NAME).exists()
    if resumed:
        progress = _load_state(accelerator, model, optimizer, state_dir, log_path, identity)
    else:
        progress = {"step": 0, "blocks_consumed": 0, "elapsed_s": 0.0, "train_loss": None, "val_loss": None}
    saved_step = progress["step"] if resumed else None  # step of the state on disk
    started = time.perf_counter() - progress["elapsed_s"]  # elapsed time carries over a resume

    def elapsed() -> float:
        return time.perf_counter() - started

    def evaluation_checkpoint(step: int, row: dict[str, Any]) -> None:
        row["val_loss"] = progress["val_loss"] = _validation_loss(accelerator, model, val_blocks, config, autocast)
        _save_pretrained(accelerator, model, tokenizer, out_dir / "checkpoints" / f"step-{step:07d}", row)

    def save_state() -> None:
        progress["elapsed_s"] = elapsed()
        _save_state(accelerator, model, optimizer, state_dir, progress, identity, log)

    stop_at = steps if stop_after_steps is None else min(steps, stop_after_steps)
    with _CsvLog(log_path, append=resumed, enabled=accelerator.is_main_process) as log:
        if not resumed:  # step 0: the untrained (or pretrained, not yet mid-trained) model
            row = {"step": 0, "tokens": 0}
            evaluation_checkpoint(0, row)
            log.append(row | {"elapsed_s": elapsed()})

        while progress["step"] < stop_at:
            step = progress["step"]  # this update produces the weights of step + 1
            lr = lr_at(step, steps, config)
            for group in optimizer.param_groups:
                group["lr"] = lr

            # Sums over micro-batches: ce, aux, and counts of non-finite ce / aux values.
            sums = torch.zeros(4, device=accelerator.device)
            for micro in range(config.grad_accum_steps):
                # Global micro-batch `micro` of this step, sliced by rank: the data order depends
                # on the position in the stream only, so a resumed run sees the same blocks.
                rank_offset = (micro * world + accelerator.process_index) * config.micro_batch_size
                idx = block_indices(
                    len(train_blocks), config.seed, progress["blocks_consumed"] + rank_offset, config.micro_batch_size
                )
                ids = torch.as_tensor(train_blocks[idx], dtype=torch.long).to(accelerator.device)
                # DDP all-reduces gradients on the last micro-batch only; the others accumulate.
                last = micro == config.grad_accum_steps - 1
                with contextlib.nullcontext() if last else accelerator.no_sync(model):
                    # No labels: the HF model would compute a second, wasted CE. Under bf16 the
                    # hidden states reach aux_loss in bf16; it upcasts where it needs precision.
                    with autocast():
                        # The labels stay `ids`; a baseline may only change what the model is fed.
                        embeds = baseline.inputs_embeds(net, ids) if baseline is not None else None
                        inputs = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
                        out = forward_model(**inputs, output_hidden_states=use_aux, use_cache=False)
                    ce = causal_lm_ce(out.logits, ids)
                    aux = aux_loss(out.hidden_states) if use_aux else torch.zeros((), device=ce.device)
                    loss = (ce + config.aux_weight * aux) if use_aux else ce
                    accelerator.backward(loss / config.grad_accum_steps)
                del out, loss, embeds  # the logits can be GBs (large vocabulary): free them before the next one
                ce, aux = ce.detach().float(), aux.detach().float()
                sums += torch.stack([ce, aux, (~ce.isfinite()).float(), (~aux.isfinite()).float()])

            # Every rank sees the same reduced numbers, so all ranks stop (or go on) together.
            reduced = accelerator.reduce(sums, reduction="sum")
            max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
            norm = accelerator.clip_grad_norm_(model.parameters(), max_norm)
            # One host sync per step: sums, non-finite flags and grad norm come back together.
            # Clipping NaN gradients is harmless: a non-finite value stops before the update.
            *sums, grad_norm = torch.cat([reduced, norm.reshape(1).to(reduced)]).tolist()
            for term, bad in (("ce", sums[2]), ("aux", sums[3])):
                if bad > 0:
                    raise RuntimeError(_nonfinite_message(step + 1, f"{term} loss", saved_step))
            if not math.isfinite(grad_norm):
                raise RuntimeError(_nonfinite_message(step + 1, "grad norm", saved_step))
            optimizer.step()
            optimizer.zero_grad(set_to_none=True)

            step += 1
            if baseline is not None:  # before the checkpoint and state of this step record the weights
                baseline.after_step(step, net, optimizer, seed=config.seed, final=step == steps)
            micro_batches = config.grad_accum_steps * world
            ce_loss, aux_value = sums[0] / micro_batches, sums[1] / micro_batches
            progress["step"] = step
            progress["blocks_consumed"] += step_blocks
            progress["train_loss"] = (ce_loss + config.aux_weight * aux_value) if use_aux else ce_loss
            row = {
                "step": step,
                "tokens": step * step_tokens,
                "lr": lr,
                "loss": progress["train_loss"],
                "ce_loss": ce_loss,
                "aux_loss": aux_value if use_aux else None,
                "grad_norm": grad_norm,
            }
            if step in eval_steps:
                evaluation_checkpoint(step, row)
            log.append(row | {"elapsed_s": elapsed()})
            if step % config.checkpoint_every == 0:
                save_state()
                saved_step = step

        if saved_step != progress["step"]:  # the end, or a requested stop: always resumable
            save_state()

    result = TrainResult(
        steps=progress["step"],
        tokens=progress["step"] * step_tokens,
        final_train_loss=progress["train_loss"],
        final_val_loss=progress["val_loss"],
        checkpoint_dirs=[out_dir / "checkpoints" / f"step-{s:07d}" for s in sorted(eval_steps) if s <= progress["step"]],
    )
    if progress["step"] < steps:
        return result  # stopped on request; the state just saved resumes it

    wall = elapsed()
    summary = {
        "steps": steps,
        "tokens": result.tokens,
        "final_train_loss": result.final_train_loss,
        "final_val_loss": result.final_val_loss,
        "wall_time_s": wall,
        "tokens_per_s": result.tokens / wall if wall > 0 else None,
        "checkpoint_steps": sorted(eval_steps),
        "world_size": world,
        "mixed_precision": precision,
        "config": dataclasses.asdict(config),
        "baseline": identity["baseline"],
    }
    _save_pretrained(accelerator, model, tokenizer, out_dir / "final", summary, json_name=SUMMARY_NAME)
    result.final_dir = out_dir / "final"
    return result


# ----------------------------------------------------------------------------- helpers of the loop


def _check_blocks(blocks: np.ndarray, block_size: int, name: str) -> np.ndarray:
    blocks = np.asarray(blocks)
    if blocks.ndim != 2 or blocks.shape[1] != block_size or len(blocks) == 0:
        raise ValueError(f"{name} must be a non-empty [num_blocks, {block_size}] array, got shape {blocks.shape}")
    if not np.issubdtype(blocks.dtype, np.integer):
        raise ValueError(f"{name} must hold integer token ids, got {blocks.dtype}")
    return blocks


def _remove_stale_temporaries(out_dir: Path) -> None:
    """Temporary directories of ``atomic_path`` (``.<name>.<random>.tmp``) that a kill left behind
    mid-write: never valid, possibly model-sized."""
    for parent in (out_dir, out_dir / "checkpoints"):
        for path in parent.glob(".*.tmp"):
            shutil.rmtree(path, ignore_errors=True)


def _nonfinite_message(step: int, what: str, saved_step: int | None) -> str:
    saved = "no resumable state yet" if saved_step is None else f"the resumable state is from step {saved_step}"
    return (
        f"non-finite {what} at step {step}: stopped before the optimizer update, nothing was written "
        f"for this step ({saved}); lower the LR or the aux weight, or inspect the data"
    )


@torch.no_grad()
def _validation_loss(
    accelerator: Accelerator,
    model: torch.nn.Module,
    val_blocks: np.ndarray,
    config: TrainConfig,
    autocast: Callable[[], contextlib.AbstractContextManager],
) -> float:
    """Mean next-token CE over the fixed validation blocks, in eval mode (no dropout, so it draws
    nothing from the RNG and does not perturb training). Ranks take interleaved shares and the
    (sum, count) pairs are gathered, so the value does not depend on how blocks split over ranks."""
    count = min(len(val_blocks), config.val_batches * config.micro_batch_size)
    mine = np.arange(accelerator.process_index, count, accelerator.num_processes)
    # The unwrapped module: a DDP forward may broadcast buffers, a collective that would hang
    # when ranks run different numbers of validation batches.
    net = accelerator.unwrap_model(model)
    net.eval()
    totals = torch.zeros(1, 2, dtype=torch.float64, device=accelerator.device)
    for first in range(0, len(mine), config.micro_batch_size):
        ids = torch.as_tensor(val_blocks[mine[first : first + config.micro_batch_size]], dtype=torch.long)
        ids = ids.to(accelerator.device)
        with autocast():
            logits = net(input_ids=ids, use_cache=False).logits
        totals[0, 0] += causal_lm_ce(logits, ids, reduction="sum").double()
        totals[0, 1] += ids.shape[0] * (ids.shape[1] - 1)
    net.train()
    ce_sum, predicted = accelerator.gather(totals).sum(dim=0).tolist()
    return ce_sum / predicted


def _save_pretrained(
    accelerator: Accelerator,
    model: torch.nn.Module,
    tokenizer: Any,
    path: Path,
    info: dict[str, Any],
    json_name: str = "checkpoint.json",
) -> None:
    """``save_pretrained`` (+ tokenizer, + ``info`` as JSON, written last) into ``path`` atomically."""
    if accelerator.is_main_process:
        with atomic_path(path) as tmp:
            accelerator.unwrap_model(model).save_pretrained(tmp)
            if tokenizer is not None:
                tokenizer.save_pretrained(tmp)
            write_json(tmp / json_name, info)
            write_manifest(tmp, kind="checkpoint")
    accelerator.wait_for_everyone()


def _rng_state(device: torch.device) -> dict[str, Any]:
    """This process's RNG states, in types ``torch.load(weights_only=True)`` accepts."""
    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def _set_rng_state(state: dict[str, Any], device: torch.device) -> None:
    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def _save_state(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state_dir: Path,
    progress: dict[str, Any],
    identity: dict[str, Any],
    log: _CsvLog,
) -> None:
    """Everything needed to continue bit-identically. Our own format rather than
    ``accelerator.save_state``: its loader silently ignores RNG states it cannot restore, which
    would break exact resume without a word. Only the main process writes (one atomic rename);
    the other ranks contribute their RNG states through a gather."""
    rng_states = gather_object([_rng_state(accelerator.device)])  # one entry per rank
    if accelerator.is_main_process:
        log.flush()
        num_blocks = identity["train_blocks_shape"][0]
        epoch, position = divmod(progress["blocks_consumed"], num_blocks)
        with atomic_path(state_dir) as tmp:
            tmp.mkdir()
            # safetensors' save_model/load_model handle tied weights (GPT-2's wte = lm_head).
            safetensors.torch.save_model(accelerator.unwrap_model(model), str(tmp / "model.safetensors"))
            torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
            torch.save(rng_states, tmp / "rng.pt")
            shutil.copyfile(log.path, tmp / "log.csv")
            write_json(tmp / PROGRESS_NAME, progress | identity | {"epoch": epoch, "position": position})
            write_manifest(tmp, kind="training_state")
    accelerator.wait_for_everyone()


def _load_state(
    accelerator: Accelerator,
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    state_dir: Path,
    log_path: Path,
    identity: dict[str, Any],
) -> dict[str, Any]:
    verify_manifest(state_dir)
    saved = read_json(state_dir / PROGRESS_NAME)
    now = _identity_fields(identity)
    before = _identity_fields({key: saved[key] for key in identity if key in saved})
    differing = sorted(key for key in now if before.get(key) != now[key])
    if differing:
        details = "; ".join(f"{key}: saved {before.get(key)!r}, now {now[key]!r}" for key in differing)
        raise ValueError(
            f"{state_dir} was written by a different run ({details}); an exact resume needs the same "
            "config, world size and data. Use a new out_dir or the original settings."
        )
    safetensors.torch.load_model(accelerator.unwrap_model(model), str(state_dir / "model.safetensors"))
    optimizer.load_state_dict(torch.load(state_dir / "optimizer.pt", map_location="cpu", weights_only=True))
    rng_states = torch.load(state_dir / "rng.pt", weights_only=True)
    _set_rng_state(rng_states[accelerator.process_index], accelerator.device)
    if accelerator.is_main_process:
        # The log as it was at the saved step: rows written after it (before a kill) are dropped,
        # and will be written again, identically, as training repeats those steps.
        with atomic_path(log_path) as tmp:
            shutil.copyfile(state_dir / "log.csv", tmp)
    accelerator.wait_for_everyone()
    return {key: saved[key] for key in ("step", "blocks_consumed", "elapsed_s", "train_loss", "val_loss")}


def _identity_fields(identity: dict[str, Any]) -> dict[str, Any]:
    """``identity`` as it reads back from JSON (tuples become lists), flattened so that a mismatch
    names the field: ``config.lr``, ``world_size``."""
    identity = json.loads(json.dumps(identity))
    return {f"config.{key}": value for key, value in identity.pop("config", {}).items()} | identity


def _result_from_summary(out_dir: Path) -> TrainResult:
    summary = read_json(out_dir / "final" / SUMMARY_NAME)
    return TrainResult(
        steps=summary["steps"],
        tokens=summary["tokens"],
        final_train_loss=summary["final_train_loss"],
        final_val_loss=summary["final_val_loss"],
        checkpoint_dirs=[out_dir / "checkpoints" / f"step-{s:07d}" for s in summary["checkpoint_steps"]],
        final_dir=out_dir / "final",
    )


class _CsvLog:
    """``log.csv``, one row per step, flushed as written; a no-op on non-main processes."""

    def __init__(self, path: Path, *, append: bool, enabled: bool) -> None:
        self.path = path
        self._handle = None
        if enabled:
            path.parent.mkdir(parents=True, exist_ok=True)
            self._handle = open(path, "a" if append else "w", newline="", encoding="utf-8")
            self._writer = csv.writer(self._handle)
            if not append:
                self._writer.writerow(LOG_COLUMNS)

    def append(self, row: dict[str, Any]) -> None:
        if self._handle is not None:
            self._writer.writerow([_format(row.get(column)) for column in LOG_COLUMNS])
            self._handle.flush()

    def flush(self) -> None:
        if self._handle is not None:
            self._handle.flush()

    def __enter__(self) -> _CsvLog:
        return self

    def __exit__(self, *exc_info: object) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None


def _format(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.8g}"
    return str(value)


__all__: Sequence[str] = (
    "AuxLoss",
    "TrainConfig",
    "TrainResult",
    "block_indices",
    "causal_lm_ce",
    "checkpoint_steps",
    "epoch_permutation",
    "lr_at",
    "parameter_groups",
    "resolve_mixed_precision",
    "tokens_per_step",
    "total_steps",
    "train",
    "warmup_steps",
)
