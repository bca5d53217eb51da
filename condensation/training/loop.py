"""The one training loop: pre-train a tiny GPT-2-like model from scratch, or mid-train a pretrained
Hugging Face causal LM, on cross-entropy plus what its method adds (one ``training.terms.
TrainingTerm``): an auxiliary loss on the hidden states (``training.losses``), one of the paper's
baselines hooked into the loop (noisy embeddings, active forgetting: ``training.baselines``), or
the KL to a frozen teacher run on the same tokens (``training.distillation``).

Read it top to bottom, nanoGPT style:

    TrainConfig          every knob, with the reason for its default (in ``config.runs``, torch-free)
    lr_at, ...           pure functions: step count, LR schedule, checkpoint steps (``config.runs``);
                         the data order, the training forward with its next-token CE
                         (``training.batches``); the padded vocabulary (``training.vocabulary``)
    train()              skip a finished run, else build a ``Trainer`` and run it
    Trainer              _prepare: checks, precision, accelerator, _prepare_model (padded vocabulary,
                                   optimizer, compiled forward), resume
                         run: tracker, progress, step 0's evaluation and probe (unless resumed)
                         then per step
                           _train_step: forward+CE/backward over grad_accum micro-batches -> (CUDA:
                             the next batch prefetched) -> NaN guard -> clip -> AdamW step, returning
                             its ``StepMetrics``
                           _end_of_step: (the term's hook) -> (_validate_and_checkpoint) -> _log_step: log row,
                             (_probe_if_due), tracker, progress line -> (state)
                         _finish: last state, checkpoint index, final/ with train_summary.json

A step's numbers (losses, non-finite flags, grad norm) come to the host in one sync. With fused
AdamW (CUDA) a step whose end only reports it (``_numbers_may_wait``) leaves them on the device:
the next step reads them once its own forward and backward are queued, so the host never waits
for the device there, and AdamW skips a non-finite step's update on the device (``found_inf``),
so the NaN guard still stops before it with nothing written for that step.

Where a run keeps what outlives the process (checkpoints, ``final/``, the resumable state with its
RNG states, the checkpoint index), and how it is written atomically: ``training.checkpointing``. How a
run reports while it trains (progress lines in the job's log, the DVCLive series in
``<run>/dvclive/``): ``runtime.progress``; the condensation probe (``geometry``) feeds both.

Distributed: written for ``accelerate launch`` (on one node, or one per node: ``runtime.nodes``)
as well as a single process. Every rank runs the same control flow (step counts are global), every
loss and flag that decides what happens next is all-reduced first, and only the main process
writes files, followed by ``wait_for_everyone``. How the processes hold the model, whole (DDP) or
in FSDP2 shards (``TrainConfig.sharding``), is ``training.parallel``'s: the loop calls its layout
to prepare the model, around each micro-batch's backward, to clip, and to save and load.

The model goes by three names: ``model`` is what the layout prepared (DDP-wrapped when
distributed: backward, ``no_sync``, gradient clipping), ``module`` the unwrapped model (the term's
hooks, validation, checkpoints, state; under FSDP the sharded model itself), ``forward`` what the
training step calls: ``batches.forward_and_ce`` (``model``'s forward and the next-token CE), or its
``torch.compile`` wrapper when ``TrainConfig.compile``, so that the loss compiles with the model
(the same parameters either way).

The model trains with its vocabulary padded to a multiple of 64 rows (``TrainConfig.
pad_vocab_to_multiple_of``, ``training.vocabulary``): the logits are cut to the true vocabulary
before any loss, and validation, checkpoints and ``final/`` see the model at its true vocabulary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import logging
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from accelerate import Accelerator
from accelerate.utils import set_seed
from torch.profiler import record_function

from condensation import ln_scaling as lns
from condensation.config.runs import (
    TrainConfig,
    checkpoint_steps,
    lr_at,
    tokens_per_step,
    total_steps,
)
from condensation.cosine_extraction import condensation_probe
from condensation.runtime.io import read_json
from condensation.runtime.progress import (
    TRACKER_DIR,
    CsvLog,
    NoTracker,
    ProgressLog,
    check_tracker,
    library_bars_off_in_files,
    open_tracker,
)
from condensation.runtime.provenance import code_version
from condensation.runtime.run_dir import RunDir
from condensation.training.batches import (
    block_indices,
    check_blocks,
    forward_and_ce,
    validation_loss,
)
from condensation.training.checkpointing import CheckpointManager, TrainState
from condensation.training.parallel import model_layout
from condensation.training.precision import resolve_mixed_precision
from condensation.training.preemption import StopSignal, TrainingStopped
from condensation.training.terms import TrainingTerm
from condensation.training.vocabulary import cut_to_vocabulary, pad_vocabulary, true_vocabulary

STEP_REGION = "condensation.train_step"
"""The profiler's name for one optimizer step (a ``record_function`` range): what a benchmark's
profile counts per step, without the evaluations and saves around the steps."""

RESUMABLE_CHANGES = ("compile", "log_every_steps", "log_every_seconds", "tracker", "probe_every", "probe_sequences")
"""Settings a run may resume with changed: they change how steps run or how the run is watched,
not what it computes, so they are left out of the identity a resumed run must match."""

log = logging.getLogger("condensation")


# ----------------------------------------------------------------------------- results


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


@dataclass
class StepMetrics:
    """What one optimizer step measured, reduced over micro-batches and ranks."""

    lr: float
    loss: float
    """``ce_loss + aux_weight * aux_loss``, or ``ce_loss`` without an auxiliary loss or a teacher."""
    ce_loss: float
    aux_loss: float | None
    """The auxiliary loss, or the distillation term with a teacher; None without either (or with weight 0)."""
    grad_norm: float
    """Before clipping."""
    seconds: float
    """Wall time of the step (forward, backward, update): the tracker's tokens/s."""
    stop_requested: bool = False
    """Some rank had received SIGTERM when the step's numbers were reduced (``preemption``)."""

    def log_row(self, step: int, tokens: int) -> dict[str, Any]:
        return {
            "step": step, "tokens": tokens, "lr": self.lr, "loss": self.loss,
            "ce_loss": self.ce_loss, "aux_loss": self.aux_loss, "grad_norm": self.grad_norm,
        }

    def tracker_values(self, step_tokens: int) -> dict[str, float | None]:
        return {
            "train/loss": self.loss, "train/ce": self.ce_loss, "train/aux": self.aux_loss, "train/lr": self.lr,
            "train/grad_norm": self.grad_norm,
            "train/tokens_per_s": step_tokens / self.seconds if self.seconds > 0 else None,
        }


@dataclass
class PendingStep:
    """An optimizer step whose numbers (``[ce sum, aux sum, ce non-finite, aux non-finite, ranks
    asked to stop, grad norm]``, see ``Trainer._train_step``) may still be on the device."""

    step: int
    """The step these numbers belong to (``state.step + 1`` when it was queued)."""
    lr: float
    started: float
    numbers: torch.Tensor
    ended: float | None = None
    """When the next step started (or the numbers were read): the step's wall time ends there."""
    copied: Any = None
    """A CUDA event recorded after the copy of ``numbers`` to pinned host memory, or None."""

    def copy_to_host(self) -> None:
        """Start copying ``numbers`` to the host without waiting (on CUDA; elsewhere they are there)."""
        if self.numbers.device.type == "cuda":
            self.numbers = self.numbers.to("cpu", non_blocking=True)  # pinned by the copy itself
            self.copied = torch.cuda.Event()
            self.copied.record()

    def host_numbers(self) -> list[float]:
        if self.copied is not None:
            self.copied.synchronize()
        return self.numbers.tolist()


# ----------------------------------------------------------------------------- pure functions


def fused_adamw(device: torch.device) -> bool:
    """Fused AdamW on CUDA (one kernel for every parameter's update); elsewhere the default
    implementation, whose float32 rounding earlier runs have."""
    return device.type == "cuda"


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
    method: TrainingTerm | None = None,
    tokenizer: Any = None,
    stop_after_steps: int | None = None,
) -> TrainResult:
    """Train ``model`` (in place) on int64 ``[num_blocks, block_size]`` token blocks; it trains
    with its vocabulary padded (``TrainConfig.pad_vocab_to_multiple_of``) and is cut back to its
    true vocabulary when ``train`` returns or raises.

    Resumes from ``out_dir/state`` when present and ends bit-identical to an uninterrupted run;
    returns at once when ``out_dir/final`` is complete. ``stop_after_steps`` stops (saving a state)
    once the global step reaches that value: a graceful stand-in for a kill, or a time limit.
    SIGTERM (a scheduler's preemption or time limit) stops after the step under way, saves its
    state and raises ``preemption.TrainingStopped``: a rerun resumes there (``preemption``).
    ``method`` is what the run's method adds to cross-entropy (``training.terms.TrainingTerm``, as
    ``TrainingMethod.build()`` makes it; None: CE alone): total = ce + method.weight x its term, in
    the logs as ``aux_loss`` (weight 0: the term is not computed, nor are the hidden states), and
    its hooks (a baseline's) run in the loop.
    """
    run_dir = RunDir(out_dir)
    if run_dir.is_finished():
        return _result_from_summary(run_dir)
    with library_bars_off_in_files():  # the job log gets our progress lines, not carriage returns
        trainer = Trainer(model, train_blocks, val_blocks, config, run_dir, method, tokenizer)
        try:
            with trainer.stop_signal:
                result = trainer.run(stop_after_steps)
            if trainer.stop_requested:
                raise TrainingStopped(
                    f"training {run_dir.root} stopped on SIGTERM after step {result.steps} of {trainer.steps}; "
                    f"its state is saved: run it again to resume at step {result.steps}")
            return result
        finally:
            if not trainer.layout.sharded:  # a sharded model is the layout's (and never padded)
                cut_to_vocabulary(model, trainer.vocab_size)


class Trainer:
    """One call of ``train``: what its steps share, built by ``_prepare``, driven by ``run``."""

    def __init__(
        self,
        model: torch.nn.Module,
        train_blocks: np.ndarray,
        val_blocks: np.ndarray,
        config: TrainConfig,
        run_dir: RunDir,
        method: TrainingTerm | None,
        tokenizer: Any,
    ) -> None:
        self.config, self.run_dir, self.tokenizer = config, run_dir, tokenizer
        self.method = method if method is not None else TrainingTerm()  # CE alone
        self.train_blocks = check_blocks(train_blocks, config.block_size, "train_blocks")
        self.val_blocks = check_blocks(val_blocks, config.block_size, "val_blocks")
        self.adds_loss = self.method.weight > 0  # weight 0: CE only, no term, no hidden states
        self._prepare(model)

    def _prepare(self, model: torch.nn.Module) -> None:
        """Accelerator, schedule, the model and its optimizer (``_prepare_model``); then resume from
        the state on disk."""
        config = self.config
        # Before anything is loaded or written: a missing tracker or an unwritable directory stops here.
        check_tracker(config.tracker, self.run_dir.root / TRACKER_DIR)
        # Mixed precision is ours, not accelerate's: bf16 needs only autocast (no loss scaler), and
        # accelerate fixes the precision once per process, which would forbid a second train() call
        # with another setting (e.g. pre-train in fp32, then mid-train in bf16). So accelerate gets
        # "no" (else it would add its own autocast), and resolve_mixed_precision reads what a user
        # chose with `accelerate config`.
        self.accelerator = accelerator = Accelerator(mixed_precision="no")
        self.precision, self.precision_source = resolve_mixed_precision(config.mixed_precision)
        self.autocast = functools.partial(
            torch.autocast, device_type=accelerator.device.type, dtype=torch.bfloat16, enabled=self.precision == "bf16"
        )
        _check_launch(accelerator)
        set_seed(config.seed)
        world = accelerator.num_processes
        self.steps = total_steps(config, world)
        self.step_tokens = tokens_per_step(config, world)
        self.step_blocks = config.micro_batch_size * config.grad_accum_steps * world
        self.eval_steps = sorted(set(checkpoint_steps(self.steps, config.num_checkpoints)))
        # np.array copies: the blocks are a read-only memmap, which torch warns about
        self.probe_ids = torch.as_tensor(np.array(self.val_blocks[: config.probe_sequences]),
                                         dtype=torch.long).to(accelerator.device)
        self.probe: dict[str, float] = {}  # the last probe's values, kept for the progress lines
        self.prefetched: tuple[int, torch.Tensor] | None = None  # (start, ids) of the next micro-batch, on CUDA
        self.waiting: PendingStep | None = None  # a step whose numbers the next step reads (see _train_step)
        self.stop_signal = StopSignal()
        self.stop_requested = False  # by any rank, as of the last step whose numbers were read
        self.stop_values = torch.tensor([[0.0], [1.0]], device=accelerator.device)  # a rank's flag: 0 go on, 1 stop
        self._prepare_model(model)

        self.checkpointer = CheckpointManager(self.run_dir, accelerator, self._identity(), self.layout)
        self.checkpointer.remove_stale_temporaries()
        self.set_aside_note = self.checkpointer.set_aside_unusable_state()
        self.resumed = self.checkpointer.has_state()
        self.state = self.checkpointer.load_state(self.module, self.optimizer) if self.resumed else TrainState()
        self.saved_step = self.state.step if self.resumed else None  # step of the state on disk
        self.started = time.perf_counter() - self.state.elapsed_s  # elapsed time carries over a resume

    def _prepare_model(self, model: torch.nn.Module) -> None:
        """Padded vocabulary, the term's preparation, the layout's model and optimizer, training forward."""
        config, accelerator = self.config, self.accelerator
        self.layout = model_layout(config.sharding)
        # Before the term and the optimizer see the parameters: they train the padded ones. Not
        # under fsdp, whose sharded weights true_vocabulary cannot cut.
        self.vocab_size = pad_vocabulary(model, 1 if self.layout.sharded else config.pad_vocab_to_multiple_of)
        if self.method.hooks_the_model and self.layout.sharded:
            raise ValueError(f"sharding: fsdp shards the embeddings, which {self.method!r} edits")
        self.method.prepare(model)  # may replace parameters (untie a head): before the optimizer sees them

        def adamw(model: torch.nn.Module) -> torch.optim.Optimizer:
            # fused: one kernel for every parameter's update on CUDA instead of a loop of small ones
            return torch.optim.AdamW(
                parameter_groups(model, config.weight_decay), lr=config.lr, betas=config.betas,
                fused=fused_adamw(accelerator.device),
            )

        self.model, self.optimizer = self.layout.prepare(accelerator, model, adamw)
        # Fused AdamW (not under fsdp, whose sharded parameters it updates without `found_inf`) can
        # skip a non-finite step's update on the device: the NaN guard then needs no sync per step.
        self.update_skips_nonfinite = bool(self.optimizer.defaults.get("fused")) and not self.layout.sharded
        self.method.to(accelerator.device)  # a teacher: not prepared, it is not trained (DDP has nothing to sync)
        self.model.train()
        self.module = accelerator.unwrap_model(self.model)
        # A compiled training forward (with its CE) only; it shares the parameters, so validation,
        # checkpoints and the state keep using `module` (no `_orig_mod.` keys, no recompile for no_grad).
        self.forward = torch.compile(forward_and_ce) if config.compile else forward_and_ce

    def _identity(self) -> dict[str, Any]:
        """What a resumed run must share with the run that saved the state."""
        return {
            "config": {k: v for k, v in dataclasses.asdict(self.config).items() if k not in RESUMABLE_CHANGES},
            "world_size": self.accelerator.num_processes,
            "train_blocks_shape": list(self.train_blocks.shape),
            # the state holds the raw norms either way: it must not continue a run of the other forward
            "ln_scaling": lns.is_scaled(self.module),
            **self.method.identity(),
            "code": {key: code_version()[key] for key in ("version", "source_sha256")},
        }

    def elapsed(self) -> float:
        return time.perf_counter() - self.started

    def run(self, stop_after_steps: int | None) -> TrainResult:
        stop_at = self.steps if stop_after_steps is None else min(self.steps, stop_after_steps)
        config, main = self.config, self.accelerator.is_main_process
        self.log = CsvLog(self.run_dir.log, append=self.resumed, enabled=main)
        # Only the main process reports; the tracker resumes after the step of the state on disk.
        self.tracker = (open_tracker(config.tracker, self.run_dir.root / TRACKER_DIR, self.saved_step) if main
                        else NoTracker())
        self.progress = ProgressLog(
            self.steps, "step", every=config.log_every_steps, every_seconds=config.log_every_seconds,
            work=(self.step_tokens, "tok"), done=self.state.step,
        )
        self.tracker.log_params({**dataclasses.asdict(config), "betas": list(config.betas),
                                 "aux_weight": self.method.weight, "precision": self.precision})
        with self.log, contextlib.closing(self.tracker):
            if main:
                self._announce()
            if not self.resumed:  # step 0: the untrained (or pretrained, not yet mid-trained) model
                row = {"step": 0, "tokens": 0}
                self._validate_and_checkpoint(row)
                self._log_step(row, {})
                if main:
                    self.progress.report()
            while self.state.step < stop_at and not self.stop_requested:
                with record_function(STEP_REGION):  # free unless a profiler records
                    metrics = self._train_step(stop_at)
                self.state.step += 1
                self.state.blocks_consumed += self.step_blocks
                if metrics is not None:  # else the next step reads its numbers and ends it (see _train_step)
                    self._end_of_step(metrics)
            if self.waiting is not None:  # stopped on a signal seen while the last step's numbers waited
                waiting, self.waiting = self.waiting, None
                self._end_of_step(self._read(waiting))
        return self._finish()

    def _train_step(self, stop_at: int) -> StepMetrics | None:
        """The update that turns the weights of ``state.step`` into those of ``state.step + 1``.
        Returns its ``StepMetrics``; or None when the step's numbers may wait on the device
        (``_numbers_may_wait``): the next step then reads them and ends this one (log row,
        tracker, progress, the NaN guard) once its own forward and backward are queued."""
        config, accelerator = self.config, self.accelerator
        started = time.perf_counter()
        lr = lr_at(self.state.step, self.steps, config)
        for group in self.optimizer.param_groups:
            group["lr"] = lr
        sums = torch.zeros(4, device=accelerator.device)  # see _micro_step
        for micro in range(config.grad_accum_steps):
            sums += self._micro_step(micro)
        # this rank's SIGTERM flag, reduced with the sums (indexing a device tensor: no host sync)
        sums = torch.cat([sums, self.stop_values[int(self.stop_signal.requested)]])
        if accelerator.device.type == "cuda":  # the next step's first batch, copied while this step's work runs
            start = self._micro_batch_start(self.state.blocks_consumed + self.step_blocks, 0)
            self.prefetched = (start, self._fetch(start))
        # Every rank sees the same reduced numbers, so all ranks stop (or go on) together.
        reduced = accelerator.reduce(sums, reduction="sum")
        max_norm = config.grad_clip if config.grad_clip > 0 else float("inf")
        norm = self.layout.clip_grad_norm(accelerator, self.model, max_norm)
        # Sums, non-finite flags and grad norm come back to the host together, in one sync.
        # Clipping NaN gradients is harmless: a non-finite value stops before the update.
        numbers = torch.cat([reduced, norm.reshape(1).to(reduced)])
        pending = PendingStep(self.state.step + 1, lr, started, numbers)
        if self.waiting is not None:  # the last step's numbers: long computed, read without a wait
            waiting, self.waiting = self.waiting, None
            waiting.ended = started
            self._end_of_step(self._read(waiting))
        if not self.update_skips_nonfinite:
            metrics = self._read(pending)  # the guard stops before the update
            self._update()
            metrics.seconds = time.perf_counter() - started
            return metrics
        # Fused AdamW skips the update on the device when `found_inf` is set, so the guard may
        # read the flags later and still stop before a non-finite step's update.
        self.optimizer.found_inf = ((numbers[2] + numbers[3] > 0) | ~numbers[5].isfinite()).float()
        self._update()
        pending.copy_to_host()
        if self._numbers_may_wait(pending.step, stop_at):
            self.waiting = pending
            return None
        return self._read(pending)

    def _update(self) -> None:
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    def _numbers_may_wait(self, step: int, stop_at: int) -> bool:
        """Whether ``step``'s numbers may be read during the next step: only when the end of
        ``step`` does nothing but report it (no hook of the term, evaluation, probe or state, and a
        next step to come), so that whatever the next step's forward draws or changes comes after
        all that ``step``'s end records, as when read at once."""
        probe_every = self.config.probe_every
        return (
            not self.method.hooks_the_model and step < stop_at and step not in self.eval_steps
            and step % self.config.checkpoint_every != 0 and not (probe_every > 0 and step % probe_every == 0)
        )

    def _read(self, pending: PendingStep) -> StepMetrics:
        """``pending``'s numbers on the host (a host sync unless they have arrived), checked by the
        NaN guard: a non-finite value stops the run, and nothing is written for that step."""
        ce_sum, aux_sum, ce_nonfinite, aux_nonfinite, stopping, grad_norm = pending.host_numbers()
        guard = {"ce loss": ce_nonfinite > 0, "aux loss": aux_nonfinite > 0, "grad norm": not math.isfinite(grad_norm)}
        for what, nonfinite in guard.items():  # the first one found names the error
            if nonfinite:
                raise RuntimeError(_nonfinite_message(pending.step, what, self.saved_step))
        micro_batches = self.config.grad_accum_steps * self.accelerator.num_processes
        ce_mean = ce_sum / micro_batches
        aux_mean = aux_sum / micro_batches if self.adds_loss else None
        loss = ce_mean if aux_mean is None else ce_mean + self.method.weight * aux_mean
        return StepMetrics(
            lr=pending.lr, loss=loss, ce_loss=ce_mean, aux_loss=aux_mean, grad_norm=grad_norm,
            seconds=(pending.ended or time.perf_counter()) - pending.started, stop_requested=stopping > 0,
        )

    def _micro_step(self, micro: int) -> torch.Tensor:
        """Forward and backward of micro-batch ``micro`` of this step. Returns, on the device (no
        host sync), ``[ce, aux, ce is non-finite, aux is non-finite]`` (flags as 0.0 or 1.0)."""
        config, accelerator = self.config, self.accelerator
        ids = self._micro_batch(self._micro_batch_start(self.state.blocks_consumed, micro))
        # Gradients are reduced on the last micro-batch only; the others accumulate.
        last = micro == config.grad_accum_steps - 1
        with self.layout.no_sync(accelerator, self.model, sync=last):
            # No labels: the HF model would compute a second, wasted CE. Under bf16 the hidden
            # states reach the term in bf16; an auxiliary loss upcasts where it needs precision.
            with self.autocast():
                # The labels stay `ids`; a baseline may only change what the model is fed.
                embeds = self.method.inputs_embeds(self.module, ids)
                inputs = {"input_ids": ids} if embeds is None else {"inputs_embeds": embeds}
                # The CE upcasts the logits itself: float32 under autocast too, as it was outside.
                ce, logits, hidden_states = self.forward(self.model, inputs, ids, self.vocab_size,
                                                         self.adds_loss and self.method.needs_hidden_states)
            if self.adds_loss:  # a teacher sees the ids, never a baseline's embeddings
                aux = self.method.added_loss(logits=logits, hidden_states=hidden_states, input_ids=ids,
                                             autocast=self.autocast)
                loss = ce + self.method.weight * aux
            else:
                aux, loss = torch.zeros((), device=ce.device), ce
            accelerator.backward(loss / config.grad_accum_steps)
        del logits, hidden_states, loss, embeds  # the logits can be GBs (large vocabulary): free them first
        ce, aux = ce.detach().float(), aux.detach().float()
        return torch.stack([ce, aux, (~ce.isfinite()).float(), (~aux.isfinite()).float()])

    def _micro_batch_start(self, blocks_consumed: int, micro: int) -> int:
        """Where this rank's share of global micro-batch ``micro`` of the step that starts at
        ``blocks_consumed`` begins in the stream of blocks. The data order depends on the position
        in the stream only, so a resumed run sees the same blocks."""
        accelerator = self.accelerator
        rank_offset = (micro * accelerator.num_processes + accelerator.process_index) * self.config.micro_batch_size
        return blocks_consumed + rank_offset

    def _micro_batch(self, start: int) -> torch.Tensor:
        """The token ids of the micro-batch at ``start``, on the device: the prefetched ones when
        the last step fetched them, else fetched now (see ``_fetch``)."""
        prefetched, self.prefetched = self.prefetched, None
        if prefetched is not None and prefetched[0] == start:
            return prefetched[1]
        return self._fetch(start)

    def _fetch(self, start: int) -> torch.Tensor:
        """The micro-batch at ``start`` on the device. On CUDA through pinned memory and an
        asynchronous copy, so the host goes on queueing work instead of waiting for the copy."""
        idx = block_indices(len(self.train_blocks), self.config.seed, start, self.config.micro_batch_size)
        ids = torch.as_tensor(self.train_blocks[idx], dtype=torch.long)
        if self.accelerator.device.type == "cuda":
            return ids.pin_memory().to(self.accelerator.device, non_blocking=True)
        return ids.to(self.accelerator.device)

    def _end_of_step(self, metrics: StepMetrics) -> None:
        """After the update to ``state.step``: the term's hook, evaluation checkpoint, what the step
        records (log row, probe, tracker, progress), state."""
        step = self.state.step
        self.state.train_loss = metrics.loss
        self.stop_requested |= metrics.stop_requested
        # before the checkpoint and state of this step record the weights
        self.method.after_step(step, self.module, self.optimizer, seed=self.config.seed, final=step == self.steps)
        row = metrics.log_row(step, tokens=step * self.step_tokens)
        if step in self.eval_steps:
            self._validate_and_checkpoint(row)
        self._log_step(row, metrics.tracker_values(self.step_tokens))
        if step % self.config.checkpoint_every == 0:
            self._save_state()

    def _log_step(self, row: dict[str, Any], values: dict[str, float | None]) -> None:
        """``row``'s step in ``log.csv``, then (main process) the probe when one is due, the
        tracker's row and the progress line. The tracker's rows of a step are on disk before the
        state of that step, so a resume never misses one."""
        step = row["step"]
        self.log.append(row | {"elapsed_s": self.elapsed()})
        probe = self._probe_if_due(step)  # on every rank: a sharded model's forward is a collective
        if not self.accelerator.is_main_process:
            return
        values = values | {"val/loss": row.get("val_loss")} | probe
        self.tracker.log(step, values)
        ce, aux = row.get("ce_loss"), row.get("aux_loss")
        if self.progress.update(1 if step > 0 else 0, ce=ce, aux=aux, val=self.state.val_loss, **self.probe):
            self.tracker.write_summary()

    def _probe_if_due(self, step: int) -> dict[str, float]:
        """The condensation probe's tracker values at ``step`` when one is due (it also updates
        ``self.probe``, which the progress lines show), else nothing."""
        probe_every = self.config.probe_every
        if probe_every <= 0 or (step % probe_every != 0 and step != self.steps):
            return {}
        started = time.perf_counter()
        self.probe = condensation_probe(self.module, self.probe_ids, self.config.micro_batch_size, self.autocast)
        return ({f"probe/{name}": value for name, value in self.probe.items()}
                | {"probe/seconds": time.perf_counter() - started})

    def _announce(self) -> None:
        """The job log's first line about this run (main process): what it trains and how it reports."""
        config = self.config
        where = f"resuming at step {self.state.step}" if self.resumed else "starting"
        if self.set_aside_note is not None:
            where += f" over: {self.set_aside_note}"
        probe = (f"every {config.probe_every} steps on {len(self.probe_ids)} validation blocks"
                 if config.probe_every else "off")
        log.info(
            "training %s (%s): %d steps of %s tokens, mixed precision %s (%s), tracker %s, condensation probe %s",
            self.run_dir.root, where, self.steps, f"{self.step_tokens:,}", self.precision, self.precision_source,
            config.tracker if config.tracker == "none" else f"{config.tracker} in {self.run_dir.root / TRACKER_DIR}",
            probe,
        )

    def _validate_and_checkpoint(self, row: dict[str, Any]) -> None:
        """At an evaluation step: validation loss into ``row`` and the state, then the evaluation
        checkpoint of ``row``'s step."""
        with true_vocabulary(self.module, self.vocab_size):  # the logits and the architecture of an unpadded run
            row["val_loss"] = self.state.val_loss = validation_loss(
                self.accelerator, self.module, self.val_blocks, self.config, self.autocast, lockstep=self.layout.sharded
            )
            self.checkpointer.save_checkpoint(row["step"], self.module, self.tokenizer, row)

    def _save_state(self) -> None:
        self.state.elapsed_s = self.elapsed()
        self.log.flush()
        self.checkpointer.save_state(self.module, self.optimizer, self.state)
        self.saved_step = self.state.step

    def _finish(self) -> TrainResult:
        """The end, or a requested stop: always resumable; at the end also the index and final/."""
        if self.saved_step != self.state.step:
            self._save_state()
        state = self.state
        result = TrainResult(
            steps=state.step,
            tokens=state.step * self.step_tokens,
            final_train_loss=state.train_loss,
            final_val_loss=state.val_loss,
            checkpoint_dirs=[self.run_dir.checkpoint(step) for step in self.eval_steps if step <= state.step],
        )
        if state.step < self.steps:
            return result  # stopped on request; the state just saved resumes it
        wall = self.elapsed()
        summary = {
            "steps": self.steps,
            "tokens": result.tokens,
            "final_train_loss": result.final_train_loss,
            "final_val_loss": result.final_val_loss,
            "wall_time_s": wall,
            "tokens_per_s": result.tokens / wall if wall > 0 else None,
            "checkpoint_steps": self.eval_steps,
            "world_size": self.accelerator.num_processes,
            "mixed_precision": self.precision,
            "config": dataclasses.asdict(self.config),
            "aux_weight": self.method.weight,
            "baseline": self.checkpointer.identity["baseline"],
            "teacher": self.checkpointer.identity.get("teacher"),
        }
        with true_vocabulary(self.module, self.vocab_size):
            self.checkpointer.save_final(self.module, self.tokenizer, summary, self.eval_steps)
        self.checkpointer.set_aside_finished_state()
        result.final_dir = self.run_dir.final
        return result


# ----------------------------------------------------------------------------- helpers of the loop


def _check_launch(accelerator: Accelerator) -> None:
    """A process started as one of several (``WORLD_SIZE``, set by torchrun) that accelerate
    runs alone would train a run of its own into the same directory as the others."""
    launched = int(os.environ.get("WORLD_SIZE", "1"))
    if launched != accelerator.num_processes:
        raise RuntimeError(
            f"started as one of {launched} processes, but accelerate sees {accelerator.num_processes}: no GPU "
            f"visible on {accelerator.device}? (set ACCELERATE_USE_CPU=true to train on the CPU)"
        )


def _nonfinite_message(step: int, what: str, saved_step: int | None) -> str:
    saved = "no resumable state yet" if saved_step is None else f"the resumable state is from step {saved_step}"
    return (
        f"non-finite {what} at step {step}: stopped before the optimizer update, nothing was written "
        f"for this step ({saved}); lower the LR or the aux weight, or inspect the data"
    )


def _result_from_summary(run_dir: RunDir) -> TrainResult:
    summary = read_json(run_dir.summary)
    return TrainResult(
        steps=summary["steps"],
        tokens=summary["tokens"],
        final_train_loss=summary["final_train_loss"],
        final_val_loss=summary["final_val_loss"],
        checkpoint_dirs=[run_dir.checkpoint(step) for step in summary["checkpoint_steps"]],
        final_dir=run_dir.final,
    )

