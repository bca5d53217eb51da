"""What a training run costs in GPU-hours, from its FLOPs: an estimate before any GPU is booked.

    python tools/training_cost.py                      # Table 4 at the paper's scale (docs/cluster.md)
    python tools/training_cost.py --mfu 0.3            # another assumed utilisation
    python tools/training_cost.py --tokens-per-s 41000 # a measured rate (tokens/s per GPU) instead

FLOPs per trained token: 6 N for the weight matmuls (N: every matmul weight a token passes, the
output head included, the input embedding lookup not: forward 2 N, backward 4 N) plus 6 L T d
for causal attention (L layers, T tokens of context, d = heads x head dim: QK^T and AV, 2 d
FLOPs each per key, T/2 keys on average, times three for the backward). A frozen teacher adds
its forward, 2 N + 2 L T d. The dispersion loss on a 256-token subsample adds 6 x 256^2 x
hidden per layer and sequence, under 0.1 % here. GPU-hours = tokens x FLOPs per token / (peak x
MFU); the peak is the H100 SXM's dense bf16 989 TFLOP/s, the MFU an assumption until measured.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

H100_BF16_DENSE = 989e12
"""FLOP/s of one H100 SXM in dense bf16 (NVIDIA's datasheet; 1979 is with sparsity)."""


@dataclass(frozen=True)
class Decoder:
    """The shape of a Qwen3-style decoder (a model's config.json)."""

    layers: int
    hidden: int
    intermediate: int
    heads: int
    kv_heads: int
    head_dim: int
    vocab: int
    tied: bool

    def layer_matmul_weights(self) -> int:
        attention = self.hidden * self.head_dim * (2 * self.heads + 2 * self.kv_heads)  # q, o; k, v
        return attention + 3 * self.hidden * self.intermediate  # gate, up, down

    def matmul_weights(self) -> int:
        """N of 6 N: every block's matmuls and the output head (tied or not, it is a matmul)."""
        return self.layers * self.layer_matmul_weights() + self.vocab * self.hidden

    def parameters(self) -> int:
        """As the model counts them: norms too, a tied head once."""
        norms = self.layers * (2 * self.hidden + 2 * self.head_dim) + self.hidden
        embeddings = self.vocab * self.hidden * (1 if self.tied else 2)
        return self.layers * self.layer_matmul_weights() + norms + embeddings

    def attention_flops(self, context: int) -> int:
        """Causal attention's FLOPs per token, forward: 2 matmuls x 2 d FLOPs x context / 2 keys."""
        return 2 * self.layers * context * self.heads * self.head_dim


# Their config.json on the Hub (Qwen/Qwen3-0.6B, Qwen/Qwen3-1.7B); both tie their embeddings.
QWEN3_0_6B = Decoder(layers=28, hidden=1024, intermediate=3072, heads=16, kv_heads=8, head_dim=128, vocab=151936,
                     tied=True)
QWEN3_1_7B = Decoder(layers=28, hidden=2048, intermediate=6144, heads=16, kv_heads=8, head_dim=128, vocab=151936,
                     tied=True)


def training_flops_per_token(model: Decoder, context: int, dispersion_tokens: int | None = None) -> float:
    """Forward and backward of one trained token; ``dispersion_tokens``: the loss's subsample."""
    flops = 6 * model.matmul_weights() + 3 * model.attention_flops(context)
    if dispersion_tokens:
        flops += 6 * dispersion_tokens**2 * model.hidden * model.layers / context
    return flops


def teacher_flops_per_token(teacher: Decoder, context: int) -> float:
    """A frozen teacher's forward on every token (distillation)."""
    return 2 * teacher.matmul_weights() + teacher.attention_flops(context)


def gpu_hours(tokens: float, flops_per_token: float, mfu: float, peak: float = H100_BF16_DENSE) -> float:
    return tokens * flops_per_token / (peak * mfu) / 3600


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=float, default=156e9, help="training tokens of a run (Table 4: 156B)")
    parser.add_argument("--context", type=int, default=4096, help="tokens per training sequence")
    parser.add_argument("--mfu", type=float, default=0.4, help="assumed model FLOPs utilisation of the peak")
    parser.add_argument("--gpus", type=int, default=128, help="GPUs of one run, for its wall time")
    parser.add_argument("--tokens-per-s", type=float, help="measured training tokens/s per GPU: GPU-hours from it")
    args = parser.parse_args()
    student = Decoder(**{**QWEN3_0_6B.__dict__, "tied": False})  # Table 4's runs untied the head
    runs = {
        "ce": training_flops_per_token(student, args.context),
        "dispersion (256-token subsample)": training_flops_per_token(student, args.context, dispersion_tokens=256),
        "distillation (Qwen3-1.7B teacher)": training_flops_per_token(student, args.context)
        + teacher_flops_per_token(QWEN3_1_7B, args.context),
    }
    print(f"Qwen3-0.6B untied: {student.parameters():,} parameters, {student.matmul_weights():,} matmul weights; "
          f"{args.tokens:.3g} tokens of {args.context}, H100 bf16 peak {H100_BF16_DENSE / 1e12:.0f} TFLOP/s")
    print(f"| run | FLOPs/token | FLOPs | GPU-hours at MFU {args.mfu:.0%} | hours on {args.gpus} GPUs |")
    print("|---|---|---|---|---|")
    for name, flops in runs.items():
        hours = gpu_hours(args.tokens, flops, args.mfu)
        print(f"| {name} | {flops:.3e} | {args.tokens * flops:.3e} | {hours:,.0f} | {hours / args.gpus:.1f} |")
    if args.tokens_per_s:
        hours = args.tokens / args.tokens_per_s / 3600
        mfu = runs["ce"] * args.tokens_per_s / H100_BF16_DENSE
        print(f"measured {args.tokens_per_s:,.0f} tokens/s per GPU: {hours:,.0f} GPU-hours, {hours / args.gpus:.1f} h "
              f"on {args.gpus} GPUs (MFU {mfu:.0%} for a CE run)")


if __name__ == "__main__":
    main()
