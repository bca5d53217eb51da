"""tools/training_cost.py: parameter counts of the published models, FLOPs per token, GPU-hours."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import pytest

TOOL = Path(__file__).resolve().parents[2] / "tools" / "training_cost.py"
spec = importlib.util.spec_from_file_location("training_cost", TOOL)
cost = importlib.util.module_from_spec(spec)
sys.modules["training_cost"] = cost  # dataclasses look their module up there
spec.loader.exec_module(cost)


def test_parameter_counts_are_the_published_models():
    # what transformers counts for Qwen/Qwen3-0.6B and Qwen/Qwen3-1.7B (tied heads counted once)
    assert cost.QWEN3_0_6B.parameters() == 596_049_920
    assert cost.QWEN3_1_7B.parameters() == 1_720_574_976
    untied = cost.Decoder(**{**cost.QWEN3_0_6B.__dict__, "tied": False})
    assert untied.parameters() - cost.QWEN3_0_6B.parameters() == 151936 * 1024  # a head of its own
    assert untied.matmul_weights() == cost.QWEN3_0_6B.matmul_weights()  # tied or not, the head is a matmul


def test_flops_per_token_by_hand():
    tiny = cost.Decoder(layers=2, hidden=4, intermediate=8, heads=2, kv_heads=1, head_dim=2, vocab=10, tied=True)
    matmuls = 2 * (4 * 2 * (2 * 2 + 2 * 1) + 3 * 4 * 8) + 10 * 4  # q, k, v, o and the MLP per layer; the head
    assert tiny.matmul_weights() == matmuls == 328
    # 6 N, plus causal attention: 6 L T d with d = heads x head_dim = 4
    assert cost.training_flops_per_token(tiny, context=8) == 6 * 328 + 6 * 2 * 8 * 4
    assert cost.teacher_flops_per_token(tiny, context=8) == 2 * 328 + 2 * 2 * 8 * 4
    with_dispersion = cost.training_flops_per_token(tiny, 8, dispersion_tokens=4)
    assert with_dispersion == pytest.approx(6 * 328 + 384 + 6 * 4**2 * 4 * 2 / 8)  # 6 x 4^2 x hidden x layers / T
    # 1e21 FLOP at half of a 1e15 FLOP/s peak: 2e6 s
    assert cost.gpu_hours(1e12, 1e9, mfu=0.5, peak=1e15) == pytest.approx(2e6 / 3600)


def test_the_tool_prints_table_4s_runs():
    done = subprocess.run([sys.executable, str(TOOL), "--tokens-per-s", "50000"], capture_output=True, text=True,
                          check=True)
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "FLOPs/token" not in line]
    names = [row.split(" | ")[0] for row in rows]
    assert names == ["| ce", "| dispersion (256-token subsample)", "| distillation (Qwen3-1.7B teacher)"]
    assert "| 4.985e+09 | 7.777e+20 | 546 | 4.3 |" in rows[0]
    assert "measured 50,000 tokens/s per GPU: 867 GPU-hours" in done.stdout
