"""The CUDA path, on a real GPU: every test here is marked ``gpu`` and skipped without CUDA
(tests/conftest.py). ``pytest -m gpu`` runs them; ``python -m tools.gpu_check`` (docs/gpu.md) runs
them on a lent GPU machine and records the outcome with the device, driver, torch and commit.

What each checks, against what:

* a bf16 training step (two optimizer steps, through the same ``train_run`` as the workflow's
  jobs) with each objective of the registry, CE, the four auxiliary losses and the two baselines;
* the compiled dispersion tile body (Triton on CUDA: the ``kernel: auto`` default there) against
  the eager one, in value and gradient, in float32 and with bf16 hidden states, and both against
  the float64 dense formula on the CPU;
* extraction in bf16 (what ``dtype: auto`` picks on a GPU) against float32, within stated
  tolerances, and float32 on the GPU against float32 on the CPU;
* scoring with lm-eval through ``score_checkpoint`` on CUDA (bf16), item by item against float32
  on the CPU;
* GPU claiming with two concurrent jobs (``condensation.runtime.gpus``), on the machine's own GPUs;
* with two GPUs or more only: a model spread over them (``device_map``) gives the statistics of
  one GPU.
"""

from __future__ import annotations

import glob
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
import torch

from condensation import models
from condensation.config.objectives import OBJECTIVES, AuxLossConfig
from condensation.config.runs import plan_run
from condensation.cosine_extraction import extract_cosine_statistics, histogram_counts
from condensation.data.packing import pack_token_blocks
from condensation.runtime.run_dir import RunDir
from condensation.training import kernels
from condensation.training.kernels import dispersion_tiled
from condensation.training.losses import _dispersion_dense

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
CUDA = torch.device("cuda")
ARCH = {"n_layer": 4, "n_embd": 128, "n_head": 4, "n_inner": 256, "n_positions": 128}

# Extraction in bf16 against float32, on the scale of the mean cosine (0..1; the findings'
# differences between methods are 0.04 and more). On this random 4-layer GPT2, bf16 on the CPU
# moved a layer mean by 4e-5, a sequence's by 2.2e-4 and the pooled histogram by a total
# variation of 0.005: the bounds leave room for CUDA's bf16 kernels (attention among them).
BF16_LAYER_MEAN_ATOL = 0.01
BF16_SEQUENCE_MEAN_ATOL = 0.02
BF16_HISTOGRAM_TV = 0.05  # total variation between the pooled cosine histograms (0..1)


def cuda_synchronised(value):
    torch.cuda.synchronize()
    return value


# ----------------------------------------------------------------------------------------------
# a bf16 training step with each objective


@pytest.fixture(scope="module")
def packed_blocks(tmp_path_factory, tiny_tokenizer_dir):
    from transformers import AutoTokenizer

    from tests.helpers.text import SAMPLE_TEXT

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    path = tmp_path_factory.mktemp("blocks") / "blocks.npy"
    pack_token_blocks([[SAMPLE_TEXT] * 4], tokenizer, block_size=64, validation_fraction=0.2, out_path=path)
    return path


METHODS = {name: {"objective": name} for name in OBJECTIVES} | {
    "active_forgetting": {"objective": "active_forgetting", "every": 1},  # a reset after each step
    "distillation": {"objective": "distillation", "teacher": "teacher"},  # a random GPT2 of ARCH, saved below
}


@pytest.mark.parametrize("name", list(METHODS))
def test_bf16_training_step_with_each_objective(name, tmp_path, packed_blocks, tiny_tokenizer_dir):
    """Two steps of the workflow's own ``train_run`` on CUDA: bf16 autocast chosen by ``auto``,
    finite losses (a non-zero auxiliary one where there is one), weights that moved."""
    from condensation.stages.training import train_run

    train = {"train_tokens": 2 * 4 * 64, "block_size": 64, "micro_batch_size": 4, "grad_accum_steps": 1, "lr": 1e-3,
             "num_checkpoints": 1, "val_batches": 1, "probe_every": 1, "probe_sequences": 4, "tracker": "none"}
    plan = plan_run("pretrain", "tiny", train, seed=0, method=METHODS[name], arch=ARCH)
    run = RunDir(tmp_path / "run")
    plan.save(run.plan)
    teacher_handle = None
    if name == "distillation":
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
        teacher_dir = tmp_path / "teacher"
        models.build_gpt2(ARCH, tokenizer, seed=1).save_pretrained(teacher_dir)
        tokenizer.save_pretrained(teacher_dir)
        teacher_handle = tmp_path / "teacher.json"
        models.ModelHandle("teacher", str(teacher_dir), num_layers=ARCH["n_layer"]).save(teacher_handle)
    torch.cuda.reset_peak_memory_stats()
    train_run(plan_path=run.plan, blocks_path=packed_blocks, tokenizer_dir=tiny_tokenizer_dir,
              teacher_handle_path=teacher_handle)
    assert torch.cuda.max_memory_allocated() > 0, "nothing was allocated on the GPU"

    summary = json.loads((run.final / "train_summary.json").read_text())
    assert summary["mixed_precision"] == "bf16" and summary["steps"] == 2
    assert np.isfinite(summary["final_train_loss"]) and np.isfinite(summary["final_val_loss"])
    import pandas as pd

    log = pd.read_csv(run.log)
    stepped = log[log["step"] > 0]
    assert len(stepped) == 2 and np.isfinite(stepped["ce_loss"]).all()
    if OBJECTIVES[name].kind in ("auxiliary", "representation"):
        assert np.isfinite(stepped["aux_loss"]).all() and (stepped["aux_loss"] != 0).all()
    from transformers import AutoModelForCausalLM, AutoTokenizer

    start = models.build_gpt2(ARCH, AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir)), seed=0)
    trained = AutoModelForCausalLM.from_pretrained(str(run.final))
    moved = [not torch.equal(a, b) for a, b in zip(start.state_dict().values(), trained.state_dict().values())]
    assert sum(moved) > len(moved) // 2


# ----------------------------------------------------------------------------------------------
# the compiled tile body against the eager one


def condensed(batch: int, tokens: int, features: int, seed: int) -> torch.Tensor:
    """Hidden states around a shared direction, as in a condensed layer (mean cosine ~0.5)."""
    gen = torch.Generator().manual_seed(seed)
    shared = torch.randn(features, generator=gen, dtype=torch.float64)
    return shared + torch.randn(batch, tokens, features, generator=gen, dtype=torch.float64)


def value_and_grad(z: torch.Tensor, kernel: str, tau: float, clamp: float, tile: int):
    z = z.detach().clone().requires_grad_(True)
    value = dispersion_tiled(z, tau, clamp, tile=tile, kernel=kernel)
    (grad,) = torch.autograd.grad(value, z)
    return cuda_synchronised(value.detach()), grad


@pytest.fixture
def full_float32_matmuls():
    """Float32 matmuls in full precision (no TF32), so the comparison with float64 holds to 1e-4."""
    before = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("highest")
    yield
    torch.set_float32_matmul_precision(before)


def test_auto_is_the_compiled_tile_body_on_cuda():
    assert kernels.tile_step("auto", CUDA) is kernels.tile_step("compiled", CUDA) is not kernels._tile_step


@pytest.mark.parametrize(
    "batch,tokens,features,tile",
    [(2, 300, 64, 128), (2, 1024, 768, 128), (3, 37, 16, 8)],  # a short last tile; GPT2-small's shape; many tiles
)
@pytest.mark.parametrize("tau", [1.0, 0.1])
def test_compiled_tile_body_matches_eager_on_cuda(batch, tokens, features, tile, tau, full_float32_matmuls):
    clamp = AuxLossConfig("dispersion").clamp
    z = condensed(batch, tokens, features, seed=tokens)
    eager = value_and_grad(z.float().to(CUDA), "eager", tau, clamp, tile)
    compiled = value_and_grad(z.float().to(CUDA), "compiled", tau, clamp, tile)
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    # elementwise, near-zero entries differ in relative terms
    difference = (compiled[1] - eager[1]).norm() / eager[1].norm()
    assert difference < 1e-5, f"relative gradient difference {difference:.2e}"
    # both against the float64 dense formula on the CPU
    reference = z.clone().requires_grad_(True)
    ref_value = _dispersion_dense(reference, AuxLossConfig("dispersion", tau=tau, clamp=clamp))
    (ref_grad,) = torch.autograd.grad(ref_value, reference)
    ref_value = ref_value.detach()
    for value, grad in (eager, compiled):
        assert abs(float(value) - float(ref_value)) <= 1e-4 * abs(float(ref_value)) + 1e-6
        error = (grad.double().cpu() - ref_grad).norm() / ref_grad.norm()
        assert error < 1e-3, f"relative gradient error {error:.2e}"


def test_compiled_tile_body_matches_eager_on_bf16_hidden_states():
    """What a bf16 training step hands the loss: bf16 hidden states (upcast inside), a bf16 gradient."""
    clamp = AuxLossConfig("dispersion").clamp
    z = condensed(4, 256, 768, seed=5).to(torch.bfloat16).to(CUDA)
    eager = value_and_grad(z, "eager", 1.0, clamp, 128)
    compiled = value_and_grad(z, "compiled", 1.0, clamp, 128)
    assert compiled[1].dtype == eager[1].dtype == torch.bfloat16
    torch.testing.assert_close(compiled[0], eager[0], rtol=1e-5, atol=1e-6)
    error = (compiled[1].float() - eager[1].float()).norm() / eager[1].float().norm()
    assert error < 1e-2, f"relative gradient difference {error:.2e} (bf16 rounding is ~4e-3)"


@pytest.mark.parametrize("kernel", ["eager", "compiled"])
def test_stacked_layers_and_bfloat16_products_on_cuda(kernel, full_float32_matmuls):
    """On CUDA the layers are stacked in one tile loop (``kernels.stacks_layers``), and bf16
    products run as bf16 products with float32 sums (``torch.bmm(..., out_dtype)``): the stacked
    call equals the per-layer calls, and bf16 products stay within the issue's bounds of the float64
    formula (loss 1e-6, gradient 2e-3 relative; the CPU's emulation measured 3e-7 and 4e-4)."""
    clamp = AuxLossConfig("dispersion").clamp
    layers = [condensed(4, 256, 768, seed=seed) for seed in (11, 12, 13)]
    on_cuda = [z.float().to(CUDA).requires_grad_(True) for z in layers]
    per_layer = torch.stack([dispersion_tiled(z, 1.0, clamp, kernel=kernel) for z in on_cuda]).mean()
    per_layer_grads = torch.autograd.grad(per_layer, on_cuda)
    for products in ("float32", "bfloat16"):
        value = kernels.dispersion_tiled_layers(on_cuda, 1.0, clamp, kernel=kernel, products=products)
        grads = torch.autograd.grad(value, on_cuda)
        if products == "float32":
            torch.testing.assert_close(cuda_synchronised(value), per_layer, rtol=1e-6, atol=1e-6)
            for grad, ref in zip(grads, per_layer_grads, strict=True):
                assert (grad - ref).norm() / ref.norm() < 1e-5
            continue
        references = []
        for z in layers:
            reference = z.clone().requires_grad_(True)
            ref_value = _dispersion_dense(reference, AuxLossConfig("dispersion", clamp=clamp))
            references.append((ref_value.detach(), torch.autograd.grad(ref_value, reference)[0] / len(layers)))
        ref_value = torch.stack([value for value, _ in references]).mean()
        assert abs(float(cuda_synchronised(value.detach())) - float(ref_value)) <= 1e-6
        for grad, (_, ref_grad) in zip(grads, references, strict=True):
            error = (grad.double().cpu() - ref_grad).norm() / ref_grad.norm()
            assert error < 2e-3, f"relative gradient error {error:.2e}"


# ----------------------------------------------------------------------------------------------
# extraction in bf16 against float32


@pytest.fixture(scope="module")
def gpt2_handle(tmp_path_factory, tiny_tokenizer_dir):
    """A random 4-layer GPT2 of width 128, saved and described as the workflow's jobs load it."""
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir))
    out = tmp_path_factory.mktemp("gpu-model") / "gpt2"
    models.save_model_dir(models.build_gpt2(ARCH, tokenizer, seed=3), tokenizer, out)
    return models.prepare_local("gpt2-4x128", str(out))


def sequences(count: int = 16, tokens: int = 64, vocab: int = 300) -> torch.Tensor:
    return torch.randint(3, vocab, (count, tokens), generator=torch.Generator().manual_seed(0))


def extract(handle, dtype: str, device: str):
    model = models.load_model(handle, dtype=dtype, device=device)
    return extract_cosine_statistics(model, sequences(), batch_size=8)


def test_extraction_in_bf16_matches_float32(gpt2_handle):
    cpu = extract(gpt2_handle, "float32", "cpu")
    fp32 = extract(gpt2_handle, "float32", "cuda")
    bf16 = extract(gpt2_handle, "auto", "cuda")  # what the workflow runs on a GPU
    assert models.resolve_dtype("auto", CUDA) == torch.bfloat16
    # float32 on the GPU is the CPU's up to summation order
    np.testing.assert_allclose(fp32.layer_mean, cpu.layer_mean, atol=1e-5)
    np.testing.assert_allclose(fp32.sequence_layer_mean, cpu.sequence_layer_mean, atol=1e-5)
    # bf16 within the stated tolerances of float32
    np.testing.assert_allclose(bf16.layer_mean, fp32.layer_mean, atol=BF16_LAYER_MEAN_ATOL)
    np.testing.assert_allclose(bf16.layer_mean_offdiag, fp32.layer_mean_offdiag, atol=BF16_LAYER_MEAN_ATOL)
    np.testing.assert_allclose(bf16.sequence_layer_mean, fp32.sequence_layer_mean, atol=BF16_SEQUENCE_MEAN_ATOL)
    total_variation = 0.5 * np.abs(bf16.hist_pooled - fp32.hist_pooled).sum(axis=1) * (2.0 / bf16.hist_pooled.shape[1])
    assert total_variation.max() <= BF16_HISTOGRAM_TV, total_variation
    assert bf16.layer_mean.std() > 1e-3  # the layers differ: not a comparison of constants
    # the pooled histogram (on the GPU spread over partial histograms) is the CPU's but for values
    # that rounding moves across a bin edge
    np.testing.assert_allclose(fp32.hist_pooled, cpu.hist_pooled, atol=1e-3)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_histogram_counts_on_cuda_are_the_cpus(dtype):
    """The same values give the same counts on the GPU (``torch.histc``'s shared-memory histograms
    of the float32 or float64 bin positions) as on the CPU."""
    values = torch.cat([0.05 + 0.01 * torch.randn(10**6, generator=torch.Generator().manual_seed(0)),
                        torch.linspace(-1.0, 1.0, 257)]).to(dtype)  # crowded, and every bin edge
    on_cuda = cuda_synchronised(histogram_counts(values.to(CUDA)))
    assert torch.equal(on_cuda.cpu(), histogram_counts(values))


# ----------------------------------------------------------------------------------------------
# lm-eval on CUDA


def test_scoring_on_cuda_matches_float32_on_the_cpu(gpt2_handle, tmp_path):
    """``score_checkpoint`` (the scoring jobs' function) loads the model on CUDA in bf16; its
    per-item log-likelihoods follow float32 on the CPU."""
    from condensation.evaluation.harness import (
        EvalSettings,
        score_checkpoint,
        score_model,
    )
    from condensation.evaluation.score_files import item_rows_path, read_item_rows
    from tests.helpers.tasks import synthetic_novel, write_tiny_tasks

    tasks = write_tiny_tasks(tmp_path / "tasks", synthetic_novel())
    record = {"model": "gpt2-4x128", "method": "pretrained", "seed": None, "checkpoint": "pretrained", "step": None,
              "val_loss": None}
    out = tmp_path / "scores" / "pretrained.json"
    settings = EvalSettings(batch_size=8)
    score_checkpoint(gpt2_handle, tasks={"tiny_cloze": 0, "tiny_next": 1}, settings=settings, include_path=tasks,
                     record=record, out_path=out, job="cuda", cache_dir=tmp_path / "cache")
    on_gpu = read_item_rows(item_rows_path(out))
    model = models.load_model(gpt2_handle, dtype="float32", device="cpu", causal_lm=True)
    reference = score_model(model, models.load_tokenizer(gpt2_handle), {"tiny_cloze": 0, "tiny_next": 1}, settings,
                            tasks, tmp_path / "cache" / "cpu")
    keys = ["task", "doc_id"]
    on_cpu = pd_frame(reference.samples).set_index(keys).sort_index()
    on_gpu = on_gpu.set_index(keys).sort_index()
    assert on_gpu.index.equals(on_cpu.index) and len(on_gpu) == 24
    gpu_ll, cpu_ll = np.array(on_gpu["loglikelihoods"].tolist()), np.array(on_cpu["loglikelihoods"].tolist())
    np.testing.assert_allclose(gpu_ll, cpu_ll, rtol=0.02, atol=0.1)  # bf16 logits, log-softmax in float32
    # the chosen answer agrees wherever float32's margin is above bf16's error
    ranked = np.sort(cpu_ll, axis=1)
    clear = ranked[:, -1] - ranked[:, -2] > 0.2
    assert (on_gpu["acc"].to_numpy()[clear] == on_cpu["acc"].to_numpy()[clear]).all()


def pd_frame(rows):
    import pandas as pd

    return pd.DataFrame(rows)


# ----------------------------------------------------------------------------------------------
# GPU claiming


CLAIMING_JOB = textwrap.dedent("""
    import json, os, sys, time
    from pathlib import Path
    from condensation.runtime.gpus import claim_gpus
    claimed = claim_gpus(1, locks=Path(sys.argv[1]))
    started = time.time()
    import torch
    x = torch.ones(1 << 20, device="cuda")  # 4 MB on the one GPU this job sees
    torch.cuda.synchronize()
    time.sleep(3)
    print(json.dumps({"claimed": claimed, "visible": os.environ.get("CUDA_VISIBLE_DEVICES"),
                      "count": torch.cuda.device_count(), "sum": float(x.sum()), "started": started,
                      "ended": time.time()}))
""")


def test_two_concurrent_jobs_claim_gpus_of_their_own(tmp_path):
    """Two jobs started together, as Snakemake starts them on a workstation: each claims one of
    the machine's GPUs (counted from /dev/nvidia*) and sees that one only; with one GPU the
    second waits until the first is done."""
    gpus = len(glob.glob("/dev/nvidia[0-9]*"))
    assert gpus >= 1, "torch sees CUDA but /dev has no nvidia<N> device files, which claim_gpus counts"
    env = {key: value for key, value in __import__("os").environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = ":".join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # a --target install stays on it
    jobs = [subprocess.Popen([sys.executable, "-c", CLAIMING_JOB, str(tmp_path)], stdout=subprocess.PIPE, text=True,
                             env=env)
            for _ in range(2)]
    reports = []
    for job in jobs:
        out, _ = job.communicate(timeout=300)
        assert job.returncode == 0
        reports.append(json.loads(out.strip().splitlines()[-1]))
    for report in reports:
        assert len(report["claimed"]) == 1 and report["visible"] == str(report["claimed"][0])
        assert report["count"] == 1 and report["sum"] == float(1 << 20)
    first, second = sorted(reports, key=lambda report: report["started"])
    if gpus >= 2:
        assert first["visible"] != second["visible"]
        assert second["started"] < first["ended"], "with two GPUs both jobs run at once"
    else:
        assert first["visible"] == second["visible"] == "0"
        assert second["started"] >= first["ended"] - 0.5, "with one GPU the second job waits for the first"


def test_the_rules_launcher_runs_a_command_on_a_gpu_of_its_own(tmp_path):
    """``python -m condensation.runtime.gpus 1 -- ...``, as rules train_study_run and pretrain start a run."""
    env = {key: value for key, value in __import__("os").environ.items() if key != "CUDA_VISIBLE_DEVICES"}
    env["PYTHONPATH"] = ":".join(filter(None, [str(REPO), env.get("PYTHONPATH")]))  # a --target install stays on it
    child = "import os, torch; print(os.environ['CUDA_VISIBLE_DEVICES'], torch.cuda.device_count())"
    done = subprocess.run([sys.executable, "-m", "condensation.runtime.gpus", "1", "--", sys.executable, "-c", child],
                          capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    visible, count = done.stdout.split()
    assert visible.isdigit() and count == "1"


# ----------------------------------------------------------------------------------------------
# two GPUs or more


@pytest.mark.skipif(not torch.cuda.is_available() or torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_model_spread_over_two_gpus_gives_the_statistics_of_one(gpt2_handle, monkeypatch):
    one = extract(gpt2_handle, "float32", "cuda")
    monkeypatch.setattr(models, "_needs_several_gpus", lambda *args: True)  # as for a model too large for one GPU
    model = models.load_model(gpt2_handle, dtype="float32", device="cuda")
    assert len({parameter.device for parameter in model.parameters()}) >= 2, \
        "device_map='auto' left the model on one GPU"
    spread = extract_cosine_statistics(model, sequences(), batch_size=8)
    np.testing.assert_allclose(spread.layer_mean, one.layer_mean, atol=1e-5)


@pytest.mark.parametrize("products", ["float32", "bfloat16"])
def test_fused_triton_kernels_match_the_float64_formula_on_cuda(products):
    """``kernel: triton`` compiled by Triton (the CPU tests run the same kernels interpreted): three
    GPT2-small-sized layers stacked, against the float64 dense formula on the CPU, within the issue's
    bounds for bf16 products (loss 1e-6, gradient 2e-3 relative) and float32's closer ones."""
    clamp = AuxLossConfig("dispersion").clamp
    layers = [condensed(4, 256, 768, seed=seed) for seed in (21, 22, 23)]
    on_cuda = [z.float().to(CUDA).requires_grad_(True) for z in layers]
    value = kernels.dispersion_tiled_layers(on_cuda, 1.0, clamp, kernel="triton", products=products)
    grads = torch.autograd.grad(value, on_cuda)
    grad_bound, value_bound = (2e-3, 1e-6) if products == "bfloat16" else (1e-4, 1e-6)
    references = [z.clone().requires_grad_(True) for z in layers]
    ref_value = torch.stack([_dispersion_dense(z, AuxLossConfig("dispersion", clamp=clamp)) for z in references]).mean()
    ref_grads = torch.autograd.grad(ref_value, references)
    assert abs(float(cuda_synchronised(value.detach())) - float(ref_value)) <= value_bound
    for grad, ref_grad in zip(grads, ref_grads, strict=True):
        error = (grad.double().cpu() - ref_grad).norm() / ref_grad.norm()
        assert error < grad_bound, f"relative gradient error {error:.2e}"
