"""One training step of the default's toys (condensation.models.build_gpt2), ours against GPT2's
stock configuration, side by side in one run: where the default's CPU minutes go.

Pre-training and training from scratch are about 60 % of the default pipeline's job time, and a
toy's step is a few hundred small matrix products and as many elementwise operations. The toys
run GPT2's GELU (the tanh approximation) as PyTorch's one fused kernel; GPT2Config's default
``gelu_new`` computes the same formula in seven elementwise operations. The variants:

* ``stock``: GPT2Config's defaults as the paper's GPT2 has them (``gelu_new``, dropout 0.1);
* ``ours``: what ``build_gpt2`` builds (``gelu_pytorch_tanh``, dropout 0.1);
* ``ours, no dropout``: for the record, what dropout costs (not a change the default makes: the
  paper's GPT2 trains with it, and the toys mirror it);
* with ``--compiled``, also ``ours, compiled`` and ``ours, no dropout, compiled``: the same model
  through ``torch.compile`` (Inductor's C++ kernels on a CPU), with the first call's time, which
  holds the compilation, printed apart: what a training job would pay once.

Each variant is a fresh toy with the same initial weights and an AdamW step on the same batch
(B x T tokens, the default's 16 x 128), float32, one torch thread as each Snakemake job has; the
variants take turns. Also printed: the largest difference between the two GELUs' outputs and
gradients on the step's activations (the same function to float32 rounding).

    python benchmarks/toy_step.py [--n-inner 32 1024] [--reps 5] [--threads 1] [--compiled] [--json out.json]
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from _common import add_output_arguments, announce, device_parser, set_up_device, time_interleaved, write_report

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout without installing

from condensation.models import build_gpt2  # noqa: E402

TOY = {"n_layer": 8, "n_embd": 128, "n_head": 4, "n_positions": 256}
"""config.yaml's toy (``&toy``): 8 blocks, width 128; the family varies ``n_inner``."""
VOCAB = 4096
"""config.yaml's ``pretrain.tokenizer_vocab_size``."""


def toy(n_inner: int, activation: str | None, dropout: float | None) -> torch.nn.Module:
    tokenizer = type("Tokenizer", (), {"bos_token_id": 0, "eos_token_id": 0, "__len__": lambda self: VOCAB})()
    model = build_gpt2({**TOY, "n_inner": n_inner}, tokenizer, seed=0)
    if activation is None and dropout is None:
        return model
    config = model.config
    if activation is not None:
        config.activation_function = activation
    if dropout is not None:
        config.resid_pdrop = config.embd_pdrop = config.attn_pdrop = dropout
    rebuilt = type(model)(config)
    rebuilt.load_state_dict(model.state_dict())
    return rebuilt


def stepper(model: torch.nn.Module, batch: torch.Tensor, compiled: bool = False):
    model.train()
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    forward = torch.compile(model) if compiled else model

    def step() -> float:
        loss = forward(batch, labels=batch).loss
        loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        return float(loss.detach())

    return step


def gelu_agreement(n_inner: int, batch: torch.Tensor) -> dict[str, float]:
    """The two GELUs on the MLP's pre-activations of the first block: values and gradients."""
    from transformers.activations import ACT2FN

    model = toy(n_inner, None, 0.0).eval()
    captured = {}
    model.transformer.h[0].mlp.c_fc.register_forward_hook(lambda _m, _i, out: captured.setdefault("x", out.detach()))
    with torch.no_grad():
        model(batch)
    results = {}
    for name in ("gelu_new", "gelu_pytorch_tanh"):
        x = captured["x"].clone().requires_grad_(True)
        y = ACT2FN[name](x)
        y.sum().backward()
        results[name] = (y.detach(), x.grad)
    (y_new, g_new), (y_fused, g_fused) = results["gelu_new"], results["gelu_pytorch_tanh"]
    return {"max_abs_value_diff": float((y_new - y_fused).abs().max()),
            "max_abs_grad_diff": float((g_new - g_fused).abs().max())}


def argument_parser():
    """The flags; their defaults are the default's step (config.yaml's micro-batch and block size)."""
    parser = device_parser(__doc__.split("\n\n")[0], "float32 only (the toys train in float32 on a CPU)", ("float32",))
    parser.add_argument("--n-inner", type=int, nargs="+", default=[32, 1024], help="the MLP widths to time")
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--tokens", type=int, default=128)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--compiled", action="store_true", help="also time the toys through torch.compile")
    add_output_arguments(parser)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = argument_parser()
    args = parser.parse_args(argv)
    device, dtype = set_up_device(parser, args)
    started = time.perf_counter()
    report = announce(device, dtype, "{}", f"median of {args.reps} steps per variant, taking turns")
    batch = torch.randint(0, VOCAB, (args.batch, args.tokens), generator=torch.Generator().manual_seed(0))
    report["widths"] = {}
    for n_inner in args.n_inner:
        variants = {
            "stock": stepper(toy(n_inner, "gelu_new", None), batch),
            "ours": stepper(toy(n_inner, None, None), batch),
            "ours, no dropout": stepper(toy(n_inner, None, 0.0), batch),
        }
        if args.compiled:
            variants["ours, compiled"] = stepper(toy(n_inner, None, None), batch, compiled=True)
            variants["ours, no dropout, compiled"] = stepper(toy(n_inner, None, 0.0), batch, compiled=True)
        timed, _ = time_interleaved(variants, device, args.reps, args.warmup)
        ratios = {
            "stock / ours": timed["stock"]["time_s"] / timed["ours"]["time_s"],
            "ours / ours without dropout": timed["ours"]["time_s"] / timed["ours, no dropout"]["time_s"],
        }
        if args.compiled:
            ratios["ours / ours compiled"] = timed["ours"]["time_s"] / timed["ours, compiled"]["time_s"]
            ratios["ours / ours without dropout, compiled"] = (
                timed["ours"]["time_s"] / timed["ours, no dropout, compiled"]["time_s"])
        agreement = gelu_agreement(n_inner, batch)
        tokens = args.batch * args.tokens
        print(f"\nMLP {n_inner}: a step of {args.batch} x {args.tokens} tokens")
        for name, row in timed.items():
            first = row["first_s"] if row["first_s"] is not None else float("nan")
            print(f"  {name:28s} {row['time_s'] * 1e3:8.1f} ms (min {row['min_s'] * 1e3:.1f}, first {first:.1f} s)  "
                  f"{tokens / row['time_s']:8,.0f} tok/s")
        for name, ratio in ratios.items():
            print(f"  {name}: x{ratio:.2f}")
        print(f"  the GELUs differ by at most {agreement['max_abs_value_diff']:.1e} (values), "
              f"{agreement['max_abs_grad_diff']:.1e} (gradients)")
        steps = {name: {"time_s": row["time_s"], "min_s": row["min_s"], "first_s": row["first_s"]}
                 for name, row in timed.items()}
        report["widths"][n_inner] = {"steps": steps, "ratios": ratios, "gelu_agreement": agreement}
    report["wall_s"] = time.perf_counter() - started
    write_report(report, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
