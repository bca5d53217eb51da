"""Dispersion loss, dense formula vs tiled kernel (eager and compiled): time and memory, alone and in a training step.

Two measurements, each run side by side in one process (variants interleaved rep by rep, so a
load spike on a shared machine hits all of them alike):

(a) the loss alone, forward + backward over ``--loss-layers`` layers of hidden states
    ``[B, T, F]`` (default: a GPT2-small-like 12 x [4, 256, 768]), the mean over the layers:
    ``naive`` = the paper's Algorithm 1 (Appendix A) line by line: the cost baseline of the targets,
    ``dense`` = ``losses._dispersion_dense`` (builds the [B, T, T] matrices, autograd keeps them),
    ``tiled`` = ``kernels.dispersion_tiled_layers`` with the eager tile body (``kernel="eager"``):
    every layer in one call, as ``losses.auxiliary_loss`` runs it (on CUDA stacked on the batch
    axis in one tile loop, on a CPU one loop per layer: ``kernels.stacks_layers``),
    ``compiled`` = the same with the tile body through ``torch.compile`` (``kernel="compiled"``),
    ``tiled/layer``, ``compiled/layer`` = one call per layer (what ``auxiliary_loss`` did before;
    on CUDA only), ``tiled/stacked``, ``compiled/stacked`` = the layers stacked (on a CPU only),
    ``tiled+bf16``, ``compiled+bf16`` = stacked, with bf16 matrix products (``products="bfloat16"``;
    on a CPU emulated, so slower: there it measures the error, not the speed),
    with ``--sweep`` also ``compiled@TILE`` (other tile sizes), ``...+tf32`` (its float32 matrix
    products on a GPU's TF32 units, ``torch.backends.cuda.matmul.allow_tf32``: no effect on a CPU)
    and ``...+bf16``, the candidates for the all-blocks target, each timed and checked against ``dense``.
(b) one full training step of a small random-init GPT2 (``GPT2LMHeadModel`` from a config, AdamW,
    fused on CUDA as in the training loop), the model's forward and the cross-entropy compiled
    together (``torch.compile``; ``--no-compile-step``: eager), so that every ratio is against the
    compiled CE step:
    ``ce``          cross-entropy only (computed once from the logits, no HF ``labels``),
    ``ce+naive``    + weight * Algorithm 1 on every block output (``output_hidden_states``),
    ``ce+dense``    + weight * dense dispersion on every block output,
    ``ce+tiled``    + weight * tiled dispersion, via ``losses.auxiliary_loss`` (the production path:
                    the layers stacked in one call), eager,
    ``ce+compiled`` the same with ``kernel="compiled"``,
    ``ce+K/layer``  the last of those (compiled unless ``--no-compiled``) with one call per layer
                    (CUDA; ``ce+K/stacked`` on a CPU: the layers stacked in one tile loop),
    ``ce+K+bf16``   the same with bf16 products (``AuxLossConfig.products``),
    ``ce+dense@K``  + dense dispersion on K random positions (``max_tokens=K``), only when T > K.
    ``--placement`` moves the loss of every variant from every block output (``all``) to those
    that placement selects (``last``: the final one only; ``losses.select_layers``; no ``/layer``
    or ``/stacked`` variant then, it would be the same call).

How to read it:

* ``time`` is the median wall time per call over ``--reps`` reps after ``--warmup`` warm-up calls;
  ``min`` is the least disturbed rep, the better estimate on a machine shared with other jobs;
  ``cpu`` is the median process CPU time (threads that spin while waiting for a descheduled
  sibling count too, so it is not immune to contention). On CUDA the clock is read after
  ``torch.cuda.synchronize()``.
* ``memory``: on CUDA, ``torch.cuda.max_memory_allocated`` during one call, above what was
  allocated before it (peak, temporaries included). On CPU there is no allocator statistic, so
  it is the bytes autograd holds for backward (``saved_tensors_hooks``, distinct storages, not
  counting what exists anyway: the hidden states in (a), the parameters in (b)), i.e. the part
  that grows with the number of layers; the temporaries of one op or tile come on top of it.
* ratios: in (a) ``naive / tiled`` and ``dense / tiled`` (> 1: the tiled kernel is faster or
  leaner), ``tiled / compiled`` (> 1: the compiled tile body is faster), ``X/layer / X`` and
  ``X / X/stacked`` (> 1: stacking the layers is faster) and ``X / X+bf16`` (> 1: bf16 products
  are faster); in (b) each step's
  time relative to ``ce``, its overhead ``t - t_ce`` (also as the median of per-rep paired
  differences, the steadier figure), and ``naive overhead / tiled overhead`` (> 1: the tiled
  kernel makes the auxiliary loss that many times cheaper; the issue's CPU target is >= 2) and
  ``tiled overhead / compiled overhead``, each also for the loss alone. The small default
  vocabulary (2048) keeps the LM head from dominating a CPU step, so the loss's share of a step
  is larger here than with GPT2's 50257; the overhead in seconds does not depend on it.
* ``first``: the first (warm-up) call of each variant, which for ``compiled`` includes compiling
  its graphs (one each for the first, middle and last tile), and for (b)'s ``ce`` the compile of
  the model; it is not part of ``time``.

    python benchmarks/dispersion_loss.py [--device cpu|cuda] [--dtype float32|bfloat16]
        [--reps 15] [--threads 1] [--json results.json] [--only loss|train] [--no-compiled]
        [--no-compile-step] [--placement last] (--help: sizes)

On CPU it uses one thread by default (``--threads``): with two threads on two cores shared
with other jobs, medians of the same step varied by 5x. The default CPU run takes several minutes,
of which a minute or two compile the tile body for the compiled variants (``--no-compiled`` skips
them) and the model for (b) (``--no-compile-step``).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.nn.functional as F
from _common import (
    add_output_arguments,
    announce,
    autocast,
    device_parser,
    print_profile,
    profile_ops,
    set_up_device,
    synchronize,
    time_interleaved,
    write_report,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from condensation.config.objectives import PLACEMENTS, AuxLossConfig  # noqa: E402
from condensation.training.kernels import DEFAULT_TILE, dispersion_tiled_layers, stacks_layers  # noqa: E402
from condensation.training.losses import (  # noqa: E402
    _dispersion_dense,
    auxiliary_loss,
    layer_loss,
    select_layers,
    subsample_tokens,
)
from condensation.training.triton_dispersion import available as triton_available  # noqa: E402

TILED_NAMES = {"eager": "tiled", "compiled": "compiled"}
"""Variant name of the tiled kernel with each tile body (``AuxLossConfig.kernel``)."""

FUSED = "triton"
"""Variant name of the fused Triton kernels (``kernel: triton``), timed on CUDA only: a CPU runs
them only through Triton's interpreter."""

PER_LAYER = "/layer"
"""Suffix of a tiled variant with one call per layer (what ``auxiliary_loss`` did before it took
all layers in one call), on a device where that call stacks them (``kernels.stacks_layers``: CUDA)."""

STACKED = "/stacked"
"""Suffix of a tiled variant whose call stacks the layers in one tile loop, on a device where it
does not by default (a CPU: there the default is one loop per layer, inside the one call)."""

BF16 = "+bf16"
"""Suffix of a tiled variant with bf16 matrix products (``AuxLossConfig.products``)."""

PROFILED_STEPS = 3
"""Steps of each (b) variant that ``--profile`` records, after the timed ones (compiles settled)."""

SWEEP_TILES = (128, 256, 512)
"""Tile sizes ``--sweep`` tries: on a GPU larger tiles mean fewer launches and larger products,
at the price of more of the mirrored triangle computed (``(1 + tile / T) / 2`` of a full product)."""


# ----------------------------------------------------------------------------------------------
# measuring


def memory_of(fn: Callable[[], object], device: torch.device, inputs: list[torch.Tensor]) -> tuple[str, int]:
    """``(kind, bytes)`` for one call of ``fn``: CUDA peak above the baseline, or on CPU the bytes
    autograd saves for backward, without the storages of ``inputs`` (the caller holds those anyway)."""
    if device.type == "cuda":
        synchronize(device)
        torch.cuda.empty_cache()
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        fn()
        synchronize(device)
        return "cuda_peak", torch.cuda.max_memory_allocated(device) - base
    held = {t.untyped_storage().data_ptr() for t in inputs}
    storages: dict[int, torch.UntypedStorage] = {}

    def pack(tensor: torch.Tensor) -> torch.Tensor:
        storage = tensor.untyped_storage()
        if storage.data_ptr() not in held:
            storages[storage.data_ptr()] = storage  # kept alive: no address reused within the call
        return tensor

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda tensor: tensor):
        fn()
    return "saved_for_backward", sum(storage.nbytes() for storage in storages.values())


def no_autocast(device: torch.device) -> contextlib.AbstractContextManager:
    if torch.amp.is_autocast_available(device.type):
        return torch.autocast(device.type, enabled=False)
    return contextlib.nullcontext()


@contextlib.contextmanager
def tf32_matmuls(enabled: bool):
    """Float32 matrix products on TF32 units (CUDA only) for the block, restored after. The legacy
    flag on purpose: with torch 2.9-2.12 a write to the newer ``fp32_precision`` makes inductor fail
    to compile a ``bmm`` (pytorch/pytorch#166387), and the tile body is compiled."""
    matmul = torch.backends.cuda.matmul
    before = matmul.allow_tf32
    matmul.allow_tf32 = enabled
    try:
        yield
    finally:
        matmul.allow_tf32 = before


def human(nbytes: int) -> str:
    for unit, size in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if nbytes >= size:
            return f"{nbytes / size:.1f} {unit}"
    return f"{nbytes} B"


# ----------------------------------------------------------------------------------------------
# (a) the loss alone


def dense_layer_loss(z: torch.Tensor, config: AuxLossConfig, generator: torch.Generator | None = None) -> torch.Tensor:
    """``losses.layer_loss`` as it was before the tiled kernel: subsample, upcast, dense formula."""
    z = subsample_tokens(z, config.max_tokens, generator)
    with no_autocast(z.device):
        return _dispersion_dense(z.to(torch.promote_types(z.dtype, torch.float32)), config)


def naive_layer_loss(z: torch.Tensor, tau: float, eps: float = 1e-6) -> torch.Tensor:
    """The paper's Algorithm 1 (Appendix A) line by line, as a user would paste it: the full
    ``[B, T, T]`` matrix in the hidden states' dtype, a boolean-mask gather of the off-diagonal
    (a copy, and a scatter in backward), and log-sum-exp. The cost baseline of the issue's targets.
    Only change: ``z`` is upcast to float32 first, since in bf16 ``1 - eps`` rounds to 1 and the
    arccos slope at the diagonal turns the gradient into NaN."""
    z = z.float()
    _, num_tokens, _ = z.shape
    z_norm = z / (torch.linalg.norm(z, dim=2, keepdim=True) + eps)
    cossim = z_norm @ z_norm.transpose(1, 2)
    cossim = torch.clamp(cossim, -1 + eps, 1 - eps)
    distance = torch.arccos(cossim) / math.pi
    mask = torch.eye(num_tokens, dtype=torch.bool, device=z.device)
    distance = distance[:, ~mask]
    logit = -distance / tau
    loss = torch.logsumexp(logit + eps, dim=1) - math.log(num_tokens * (num_tokens - 1))
    return loss.mean()


def per_layer(layer_fn: Callable[[torch.Tensor], torch.Tensor]) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """A loss of all layers from one of a layer: the mean of one call per layer."""
    return lambda layers: torch.stack([layer_fn(z) for z in layers]).mean()


def tiled_loss(config: AuxLossConfig, tile: int, kernel: str, products: str = "float32", tf32: bool = False,
               stacked: bool | None = None) -> Callable[[list[torch.Tensor]], torch.Tensor]:
    """The tiled kernel on all layers in one call (TF32 products for the call if ``tf32``;
    ``stacked`` as ``dispersion_tiled_layers`` takes it)."""
    def loss(layers):
        with tf32_matmuls(tf32):
            return dispersion_tiled_layers(layers, config.tau, config.clamp, tile=tile, kernel=kernel,
                                           products=products, stacked=stacked)
    return loss


def tiled_variants(args, config: AuxLossConfig, device: torch.device) -> dict[str, Callable]:
    """(a)'s tiled variants: for each tile body, all layers in one call as training runs it, the
    other way of running the layers (one call per layer where the call stacks them, stacked where
    it does not), and with bf16 products."""
    variants = {}
    for kernel in args.kernels:
        name = TILED_NAMES[kernel]
        variants[name] = tiled_loss(config, args.tile, kernel)
        if stacks_layers(device):
            variants[name + PER_LAYER] = per_layer(lambda z, whole=variants[name]: whole([z]))
        else:
            variants[name + STACKED] = tiled_loss(config, args.tile, kernel, stacked=True)
        variants[name + BF16] = tiled_loss(config, args.tile, kernel, "bfloat16")
    if fused_kernels(device):
        variants[FUSED] = tiled_loss(config, args.tile, FUSED)
        variants[FUSED + BF16] = tiled_loss(config, args.tile, FUSED, "bfloat16")
    return variants


def fused_kernels(device: torch.device) -> bool:
    """Whether the fused Triton kernels are timed: on CUDA, with Triton there."""
    return device.type == "cuda" and triton_available()


def bench_loss(args, device: torch.device, dtype: torch.dtype) -> dict:
    config = AuxLossConfig("dispersion", tau=args.tau)
    gen = torch.Generator().manual_seed(0)
    shape = (args.loss_batch, args.loss_tokens, args.loss_features)
    # condensed-looking states: a shared direction plus noise, so the pair weights are not uniform
    layers = [(torch.randn(shape[-1], generator=gen) + torch.randn(shape, generator=gen))
              .to(device, dtype).requires_grad_(True)
              for _ in range(args.loss_layers)]
    fns = {
        "naive": per_layer(lambda z: naive_layer_loss(z, config.tau)),
        "dense": per_layer(lambda z: dense_layer_loss(z, config)),
        **tiled_variants(args, config, device),
        **(sweep_variants(args, config) if args.sweep else {}),
    }

    def step(fn):
        loss = fn(layers)
        return loss.detach(), torch.autograd.grad(loss, layers)

    # timed first: its warm-up call is each variant's first, and the compiled one compiles there
    results, _ = time_interleaved({name: (lambda fn=fn: step(fn)) for name, fn in fns.items()}, device, args.reps,
                                  args.warmup)
    dense_value, dense_grads = step(fns["dense"])
    agreement = {}
    for name in [name for name in fns if name not in ("naive", "dense")]:
        value, grads = step(fns[name])
        agreement[name] = {"loss_abs_diff": abs(dense_value.item() - value.item()), "grad_max_rel_diff": max(
            ((d.float() - t.float()).abs().max() / d.float().abs().max()).item() for d, t in zip(dense_grads, grads))}
    del dense_grads, grads
    for name, fn in fns.items():
        results[name]["memory_kind"], results[name]["memory_bytes"] = memory_of(lambda fn=fn: step(fn), device, layers)
    return {"shape": list(shape), "layers": args.loss_layers, "tile": args.tile, "variants": results,
            "agreement": agreement}


def sweep_variants(args, config: AuxLossConfig) -> dict[str, Callable]:
    """``--sweep``: the compiled tile body, all layers stacked, at each of ``SWEEP_TILES`` with
    float32, TF32 and bf16 products (``compiled`` and ``compiled+bf16`` themselves are ``--tile``)."""
    precisions = {"": ("float32", False), "+tf32": ("float32", True), BF16: ("bfloat16", False)}
    return {f"compiled@{tile}{suffix}": tiled_loss(config, tile, "compiled", products, tf32)
            for tile in SWEEP_TILES for suffix, (products, tf32) in precisions.items()
            if tile != args.tile or suffix == "+tf32"}


def comparisons(variants: dict, prefix: str = "") -> list[tuple[str, str]]:
    """The (slower, faster) pairs of variants whose ratios are printed, those both present: the
    naive and dense losses against the tiled kernel, the eager tile body against the compiled one,
    one call per layer against the stacked call, float32 products against bf16 ones."""
    pairs = [("naive", "tiled"), ("dense", "tiled"), ("tiled", "compiled"), ("compiled", FUSED),
             ("compiled" + BF16, FUSED + BF16)]
    for name in (*TILED_NAMES.values(), FUSED):
        pairs += [(name + PER_LAYER, name), (name, name + STACKED), (name, name + BF16)]
    return [(prefix + slow, prefix + fast) for slow, fast in pairs
            if prefix + slow in variants and prefix + fast in variants]


def speedup(slow: dict, fast: dict) -> str:
    """``slow / fast`` in median, least-disturbed and CPU time (> 1: ``fast`` is faster)."""
    return (f"time x{slow['time_s'] / fast['time_s']:.2f} (min x{slow['min_s'] / fast['min_s']:.2f}, "
            f"cpu x{slow['cpu_s'] / fast['cpu_s']:.2f})")


def print_loss(result: dict) -> None:
    batch, tokens, features = result["shape"]
    print(f"\n(a) dispersion loss alone, forward + backward, {result['layers']} layers of "
          f"[B={batch}, T={tokens}, F={features}], tile {result['tile']}")
    variants = result["variants"]
    kind = variants["dense"]["memory_kind"]
    width = max(9, *map(len, variants))
    print(f"  {'variant':<{width}} {'time':>9} {'min':>9} {'cpu':>9} {'first':>9}   {kind}")
    for name, row in variants.items():
        print(f"  {name:<{width}} {row['time_s']:8.3f}s {row['min_s']:8.3f}s {row['cpu_s']:8.3f}s "
              f"{row['first_s']:8.3f}s   {human(row['memory_bytes']):>10}")
    for slow, fast in comparisons(variants):
        row, fast_row = variants[slow], variants[fast]
        print(f"  {slow} / {fast}: {speedup(row, fast_row)}; memory {human(row['memory_bytes'])} vs "
              f"{human(fast_row['memory_bytes'])} (x{row['memory_bytes'] / max(fast_row['memory_bytes'], 1):.3g})")
    swept = [name for name in variants if "@" in name]
    if swept and "compiled" in variants:
        print("  compiled / each swept variant (> 1: the variant is faster): " + ", ".join(
            f"{name} x{variants['compiled']['time_s'] / variants[name]['time_s']:.2f}" for name in swept))
    for name, agree in result["agreement"].items():
        print(f"  agreement: |loss dense - {name}| = {agree['loss_abs_diff']:.1e}, "
              f"max relative gradient difference {agree['grad_max_rel_diff']:.1e}")


# ----------------------------------------------------------------------------------------------
# (b) a training step


def gpt2_step_inputs(args, device: torch.device) -> tuple[torch.nn.Module, torch.optim.Optimizer, torch.Tensor]:
    """A random-init GPT2 of the flags' shape in training mode, its AdamW (fused on CUDA, as the
    training loop makes it), and one batch of random ids."""
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    gpt_config = GPT2Config(vocab_size=args.vocab, n_positions=args.tokens, n_embd=args.n_embd,
                            n_layer=args.n_layer, n_head=args.n_head, bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(gpt_config).to(device).train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=device.type == "cuda")
    ids = torch.randint(args.vocab, (args.batch, args.tokens), generator=torch.Generator().manual_seed(1)).to(device)
    return model, optimizer, ids


def step_aux_losses(args, config: AuxLossConfig, device: torch.device) -> dict[str, Callable | None]:
    """Each (b) variant's auxiliary loss on a step's hidden states (``None``: CE only)."""
    subsampled = AuxLossConfig("dispersion", tau=args.tau, placement=args.placement, max_tokens=args.max_tokens)
    gen = torch.Generator().manual_seed(2)

    def mean_over_layers(layer_fn, hidden_states):
        return torch.stack([layer_fn(z) for z in select_layers(hidden_states, config.placement)]).mean()

    aux_losses: dict[str, Callable | None] = {
        "ce": None,
        "ce+naive": lambda hidden: mean_over_layers(lambda z: naive_layer_loss(z, config.tau), hidden),
        "ce+dense": lambda hidden: mean_over_layers(lambda z: dense_layer_loss(z, config, gen), hidden),
        # the kernel named, not "auto", so that each variant runs the same tile body on every device
        # (the default argument binds each kernel's config when the dict is built)
        **{
            f"ce+{TILED_NAMES[kernel]}": (
                lambda hidden, tiled=dataclasses.replace(config, kernel=kernel):  # noqa: B008
                auxiliary_loss(hidden, tiled)
            )
            for kernel in args.kernels
        },
    }
    # the last tile body (compiled unless --no-compiled) also with the layers the other way (one
    # call per layer where the call stacks them, stacked where it does not) and with bf16 products
    last = dataclasses.replace(config, kernel=args.kernels[-1])
    name = f"ce+{TILED_NAMES[last.kernel]}"
    several = len(select_layers([None] * (args.n_layer + 1), config.placement)) > 1  # else the same call
    if several and stacks_layers(device):
        aux_losses[name + PER_LAYER] = lambda hidden: mean_over_layers(lambda z: layer_loss(z, last), hidden)
    elif several:
        aux_losses[name + STACKED] = lambda hidden: dispersion_tiled_layers(
            select_layers(hidden, config.placement), last.tau, last.clamp, kernel=last.kernel, stacked=True)
    bf16 = dataclasses.replace(last, products="bfloat16")
    aux_losses[name + BF16] = lambda hidden: auxiliary_loss(hidden, bf16)
    if fused_kernels(device):
        fused = dataclasses.replace(config, kernel=FUSED)
        fused_bf16 = dataclasses.replace(fused, products="bfloat16")
        aux_losses["ce+" + FUSED] = lambda hidden: auxiliary_loss(hidden, fused)
        aux_losses["ce+" + FUSED + BF16] = lambda hidden: auxiliary_loss(hidden, fused_bf16)
    if args.tokens > args.max_tokens:
        aux_losses[f"ce+dense@{args.max_tokens}"] = lambda hidden: mean_over_layers(
            lambda z: dense_layer_loss(z, subsampled, gen), hidden)
    return aux_losses


def time_loss_on_step_hidden(args, model: torch.nn.Module, ids: torch.Tensor, aux_losses: dict[str, Callable | None],
                             placement: str, device: torch.device, dtype: torch.dtype) -> tuple[dict, int]:
    """The loss alone on this step's own hidden states (forward + backward, as in (a)): the same
    work its variant adds to a step, but timed in ~0.1 s reps instead of ~1 s steps, so many more
    reps fit and the machine's noise, which drowns a 0.1 s overhead in a 1 s step, averages out.
    Returns the timings and the number of hidden states that get the loss."""
    with torch.no_grad(), autocast(device, dtype):
        hidden = [z.detach().requires_grad_(True) for z in model(ids, output_hidden_states=True).hidden_states]
    with_loss = select_layers(hidden, placement)

    def loss_only(aux):
        torch.autograd.grad(aux(hidden), with_loss)

    results, _ = time_interleaved({name: (lambda aux=aux: loss_only(aux))
                                   for name, aux in aux_losses.items() if aux is not None},
                                  device, args.loss_reps, args.warmup)
    return results, len(with_loss)


def ce_forward(model: torch.nn.Module, ids: torch.Tensor, with_hidden: bool) -> tuple[torch.Tensor, tuple | None]:
    """The CE step's forward: next-token CE, once, in float32 (HF ``labels`` would compute a second
    loss), and the hidden states when the auxiliary loss needs them."""
    out = model(ids, output_hidden_states=with_hidden)
    loss = F.cross_entropy(out.logits[:, :-1].flatten(0, 1).float(), ids[:, 1:].flatten())
    return loss, out.hidden_states


SETTLE_ROUNDS = 5
"""Rounds of every step variant at most before timing a compiled step (``settle_compiled``)."""


def settle_compiled(round_of_steps: Callable[[], object]) -> int:
    """Run ``round_of_steps`` until a whole round compiles no new graph (at most ``SETTLE_ROUNDS``),
    so that no timed rep compiles: a compiled Hugging Face model breaks its graph where the hidden
    states are captured, and some of its frames compiled anew on the first timed rep after one
    warm-up call each (when the variant before had asked for the hidden states and this one not:
    a CE step timed at 7 s instead of 0.016 s). Returns the rounds run."""
    from torch._dynamo.utils import counters

    for rounds in range(1, SETTLE_ROUNDS + 1):
        before = counters["stats"]["unique_graphs"]
        round_of_steps()
        if counters["stats"]["unique_graphs"] == before:
            return rounds
    return SETTLE_ROUNDS


def bench_train(args, device: torch.device, dtype: torch.dtype) -> dict:
    model, optimizer, ids = gpt2_step_inputs(args, device)
    config = AuxLossConfig("dispersion", tau=args.tau, placement=args.placement)
    aux_losses = step_aux_losses(args, config, device)
    # the model and the CE in one compiled region (two graphs: with and without the hidden states);
    # the auxiliary loss runs after it, as in training
    step_forward = torch.compile(ce_forward) if args.compile_step else ce_forward

    def forward(aux):
        with autocast(device, dtype):
            loss, hidden_states = step_forward(model, ids, aux is not None)
            if aux is not None:
                loss = loss + config.weight * aux(hidden_states)
        return loss

    def step(aux):
        optimizer.zero_grad(set_to_none=True)
        forward(aux).backward()
        optimizer.step()

    def memory_step(aux):  # the same as step() but without the update, so memory probes change nothing
        forward(aux).backward()
        model.zero_grad(set_to_none=True)

    settle_rounds = settle_compiled(lambda: [step(aux) for aux in aux_losses.values()]) if args.compile_step else 0
    results, _ = time_interleaved({name: (lambda aux=aux: step(aux)) for name, aux in aux_losses.items()},
                                  device, args.reps, args.warmup)
    params = list(model.parameters())
    for name, aux in aux_losses.items():
        results[name]["memory_kind"], results[name]["memory_bytes"] = memory_of(
            lambda aux=aux: memory_step(aux), device, params)
    profiles = {}
    if args.profile:  # the compiled CE step and the production loss's step, a few steps each
        for name in ("ce", f"ce+{TILED_NAMES[args.kernels[-1]]}"):
            rows, timeline = profile_ops(lambda aux=aux_losses[name]: [step(aux) for _ in range(PROFILED_STEPS)],
                                         device, args.profile, units=PROFILED_STEPS, unit="step")
            profiles[name] = {"ops": rows, "timeline": timeline}
    loss_results, layers_with_loss = time_loss_on_step_hidden(args, model, ids, aux_losses, config.placement, device,
                                                              dtype)
    return {"loss_on_step_hidden": loss_results, "batch": args.batch, "tokens": args.tokens, "n_layer": args.n_layer,
            "n_embd": args.n_embd, "n_head": args.n_head, "vocab": args.vocab, "max_tokens": args.max_tokens,
            "placement": args.placement, "layers_with_loss": layers_with_loss,
            "step": "compiled" if args.compile_step else "eager", "settle_rounds": settle_rounds, "variants": results,
            "profiles": profiles}


def print_train(result: dict) -> None:
    print(f"\n(b) training step, GPT2 n_layer={result['n_layer']} n_embd={result['n_embd']} vocab={result['vocab']}, "
          f"B={result['batch']} T={result['tokens']}, AdamW; dispersion on {result['layers_with_loss']} of "
          f"{result['n_layer']} block outputs "
          f"(placement {result['placement']}); model and CE {result['step']}, every ratio against that CE step"
          + (f" (compiles settled after {result['settle_rounds']} round(s) of every variant)"
             if result["settle_rounds"] else ""))
    variants = result["variants"]
    base = variants["ce"]
    kind = base["memory_kind"]
    width = max(14, *map(len, variants))
    print(f"  {'variant':<{width}} {'time':>9} {'min':>9} {'cpu':>9} {'/ ce':>7} {'overhead':>10}   {kind}")
    for name, row in variants.items():
        overhead = row["time_s"] - base["time_s"]
        row["ratio_to_ce"], row["overhead_s"] = row["time_s"] / base["time_s"], overhead
        print(f"  {name:<{width}} {row['time_s']:8.3f}s {row['min_s']:8.3f}s {row['cpu_s']:8.3f}s "
              f"{row['ratio_to_ce']:6.2f}x {overhead:+9.3f}s   {human(row['memory_bytes']):>10}")
    # Overheads as paired differences: within one rep every variant runs once, back to back, so
    # t - t_ce per rep cancels slow drifts of a shared machine; the median of those differences
    # is far steadier than a difference of two medians.
    for row in variants.values():
        row["paired_overhead_s"] = statistics.median(t - t_ce for t, t_ce in zip(row["reps_s"], base["reps_s"]))
    print("  paired overhead (median over reps of t - t_ce): "
          + ", ".join(f"{name} {row['paired_overhead_s']:+.3f}s" for name, row in variants.items() if name != "ce"))
    for slow, fast in comparisons(variants, "ce+"):
        over, fast_over = variants[slow]["paired_overhead_s"], variants[fast]["paired_overhead_s"]
        # an overhead <= 0 means the noise of the CE-only step is larger than the loss: no ratio
        factor = over / fast_over if over > 0 and fast_over > 0 else None
        result[f"{slow.removeprefix('ce+')}_over_{fast.removeprefix('ce+')}_overhead"] = factor
        shown = f"x{factor:.2f}" if factor is not None else "n/a (an overhead <= 0: noise)"
        print(f"  {slow.removeprefix('ce+')} overhead / {fast.removeprefix('ce+')} overhead: {shown}")
    alone = result["loss_on_step_hidden"]
    print(f"  the loss alone on this step's hidden states, forward + backward "
          f"(median of {len(alone['ce+tiled']['reps_s'])} reps;"
          f" what each variant adds to a step):")
    for name, row in alone.items():
        row["implied_ratio_to_ce"] = 1 + row["time_s"] / base["time_s"]
        print(f"    {name.removeprefix('ce+'):<{width}} {row['time_s']:8.3f}s  "
              f"(min {row['min_s']:.3f}s, first {row['first_s']:.3f}s)"
              f"  -> step / ce ~ {row['implied_ratio_to_ce']:.3f}")
    for slow, fast in comparisons(variants, "ce+"):
        factor = alone[slow]["time_s"] / alone[fast]["time_s"]
        result[f"{slow.removeprefix('ce+')}_over_{fast.removeprefix('ce+')}_loss_alone"] = factor
        print(f"    {slow.removeprefix('ce+')} / {fast.removeprefix('ce+')}: x{factor:.2f} "
              f"(min x{alone[slow]['min_s'] / alone[fast]['min_s']:.2f})")
    extra = {name.removeprefix("ce+"): human(row["memory_bytes"] - base["memory_bytes"])
             for name, row in variants.items() if name not in ("ce", "ce+naive")}
    print("  extra memory over ce: " + ", ".join(f"{name} {shown}" for name, shown in extra.items()))
    for name, profiled in result["profiles"].items():
        print_profile(profiled["ops"], f"{PROFILED_STEPS} steps of {name}", profiled["timeline"])


# ----------------------------------------------------------------------------------------------


def parse_args() -> tuple[argparse.Namespace, torch.device, torch.dtype]:
    parser = device_parser(__doc__.splitlines()[0], "autocast dtype of the model and dtype of the (a) hidden states; "
                                                    "default float32 on CPU, bfloat16 on CUDA")
    parser.add_argument("--reps", type=int, default=15,
                        help="the loss is ~10%% of a default CPU step, "
                             "so its overhead needs many reps to rise above the noise")
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--tile", type=int, default=DEFAULT_TILE, help="rows per tile of the tiled kernel in (a)")
    parser.add_argument("--compiled", action=argparse.BooleanOptionalAction, default=True,
                        help="also run the tiled kernel with its tile body compiled "
                             "(torch.compile; needs a C++ compiler on CPU, Triton on CUDA)")
    parser.add_argument("--compile-step", action=argparse.BooleanOptionalAction, default=True,
                        help="(b): the model's forward and the cross-entropy through torch.compile, the CE step "
                             "every ratio is against (the issue's denominator); --no-compile-step: eager")
    parser.add_argument("--sweep", action="store_true",
                        help="(a) also: the compiled tile body at other tile sizes and with TF32 and bf16 products")
    parser.add_argument("--tau", type=float, default=1.0)
    parser.add_argument("--only", choices=("loss", "train"), help="run only (a) or (b)")
    parser.add_argument("--loss-reps", type=int, default=60,
                        help="reps of the loss alone on the step's hidden states in (b)")
    parser.add_argument("--loss-batch", type=int, default=4)
    parser.add_argument("--loss-tokens", type=int, default=256)
    parser.add_argument("--loss-features", type=int, default=768)
    parser.add_argument("--loss-layers", type=int, default=12)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=256)
    parser.add_argument("--n-layer", type=int, default=4)
    parser.add_argument("--n-embd", type=int, default=256)
    parser.add_argument("--n-head", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=2048,
                        help="small, so that on CPU the LM head does not drown the rest "
                             "(makes the loss's share of a step larger than with GPT2's 50257)")
    parser.add_argument("--placement", choices=PLACEMENTS, default="all",
                        help="which block outputs get the loss in (b) (AuxLossConfig.placement); "
                             "the issue's targets: all, and last")
    parser.add_argument("--profile", type=int, default=0, metavar="TOP",
                        help="(b): then profile a few steps of ce and of the last tiled variant: the GPU's busy "
                             "share, kernel launches and host synchronisations a step, and the TOP operators")
    parser.add_argument("--max-tokens", type=int, default=256,
                        help="positions kept by the subsampled dense variant (only run when --tokens is larger)")
    add_output_arguments(parser)
    args = parser.parse_args()
    args.kernels = ("eager", "compiled") if args.compiled else ("eager",)
    if args.sweep and not args.compiled:
        parser.error("--sweep varies the compiled tile body; drop --no-compiled")
    device, dtype = set_up_device(parser, args)
    return args, device, dtype


def main() -> None:
    args, device, dtype = parse_args()
    report = announce(device, dtype, "dtype {}", f"{args.reps} reps after {args.warmup} warm-up, median wall time")
    report |= {"reps": args.reps, "warmup": args.warmup}
    started = time.perf_counter()
    if args.only in (None, "loss"):
        report["loss"] = bench_loss(args, device, dtype)
        print_loss(report["loss"])
    if args.only in (None, "train"):
        report["train"] = bench_train(args, device, dtype)
        print_train(report["train"])
    report["wall_s"] = time.perf_counter() - started
    write_report(report, args.json)


if __name__ == "__main__":
    main()
