"""The issue's performance targets (benchmarks/README.md, "The issue's targets") as data: each is
a headline number of one benchmark held to a bound, with its unit and where the bound comes from,
so that a target changes here, in one row, and the summary's table follows."""

from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any

COMPARISONS = {"<=": operator.le, ">=": operator.ge, ">": operator.gt}


@dataclass(frozen=True)
class Target:
    what: str
    """The row's name in summary.md and summary.json."""
    benchmark: str
    """The benchmark (``plan.Benchmark.name``) whose headline numbers hold the measurement."""
    number: str
    """Which of its headline numbers (``headlines.headline``)."""
    bound: str
    """The comparison and the value, as the summary shows them (``<= 1.05``)."""
    unit: str
    source: str
    """Where the bound comes from, and why it is that."""

    def met(self, measured: float) -> bool:
        comparison, value = self.bound.split()
        return bool(COMPARISONS[comparison](measured, float(value)))


README = "the issue's targets, benchmarks/README.md"
TARGETS = (
    Target(
        "dispersion step <= 1.05x the CE step (all layers, compiled tile body)",
        "dispersion-all",
        "ce+compiled step / ce step",
        "<= 1.05",
        "x the compiled CE step's time (GPT2-small, T = 1024, bf16)",
        f"{README}: the loss on all 12 block outputs may add at most 5 % to a training step",
    ),
    Target(
        "dispersion step <= 1.05x the CE step with bf16 products (all layers, compiled tile body)",
        "dispersion-all",
        "ce+compiled+bf16 step / ce step",
        "<= 1.05",
        "x the compiled CE step's time",
        f"{README}: the same 5 %, with the loss's products in bf16 (issue 42, part 3)",
    ),
    Target(
        "extra peak memory of the dispersion step <= 5 %",
        "dispersion-all",
        "ce+compiled extra memory / ce memory",
        "<= 0.05",
        "fraction of the CE step's peak memory",
        f"{README}: the loss on all 12 block outputs may add at most 5 % to the step's peak memory",
    ),
    Target(
        "dispersion step <= 1.01x the CE step with placement last",
        "dispersion-last",
        "ce+compiled step / ce step",
        "<= 1.01",
        "x the compiled CE step's time",
        f"{README}: the loss on the last block output only may add at most 1 % to a training step",
    ),
    Target(
        "kernel auto = compiled on CUDA is the faster tile body (tiled / compiled > 1)",
        "dispersion-all",
        "loss alone: tiled / compiled",
        "> 1",
        "the eager tile body's time over the compiled one's (the loss alone)",
        "kernel: auto picks the compiled tile body on CUDA; below 1 it maps to the eager one (docs/gpu.md)",
    ),
    Target(
        "CE step >= 40 % MFU (compiled)",
        "training",
        "ours+compile MFU",
        ">= 0.40",
        "fraction of the H100's 989 TFLOP/s bf16 peak",
        f"{README}; docs/cluster.md's estimate of the paper's GPU-hours assumes the same 40 %",
    ),
    Target(
        "CE step >= 2x a plain Hugging Face loop",
        "training",
        "ours / plain tokens/s",
        ">= 2",
        "x the plain loop's tokens/s",
        f"{README}: our training loop against a plain Hugging Face loop at GPT2-small",
    ),
    Target(
        "extraction >= 20x the one-sequence float32 loop",
        "extraction",
        "ours / reference (speed-up)",
        ">= 20",
        "x the reference's speed (the authors' one-sequence float32 loop)",
        f"{README}: batched extraction against the authors' method",
    ),
    Target(
        "extraction <= 1.1x a bare forward pass",
        "extraction",
        "ours time / bare time",
        "<= 1.1",
        "x a bare forward pass's time",
        f"{README}: measuring may add at most 10 % to the forward pass it reads",
    ),
    Target(
        "extraction per batch (finalize apart) <= 1.1x a bare forward pass",
        "extraction",
        "per batch / bare",
        "<= 1.1",
        "x a bare forward pass's time, finalize's fixed cost per call apart",
        f"{README}: the same 10 % on each batch (benchmarks/extraction.py's per-batch figure)",
    ),
)


def target_rows(steps: dict[str, dict], judged: bool = True) -> list[dict[str, Any]]:
    """Each target with what the summary holds for it: measured (met or not) or not yet measured;
    with ``judged`` false (the CPU rehearsal) the numbers are shown but not held to the GPU targets."""
    numbers = {name: values for step in steps.values() for name, values in step.get("numbers", {}).items()}
    rows = []
    for target in TARGETS:
        value = numbers.get(target.benchmark, {}).get(target.number)
        rows.append(
            {
                "target": target.what,
                "bound": target.bound,
                "measured": value,
                "met": None if value is None or not judged else target.met(value),
            }
        )
    return rows
