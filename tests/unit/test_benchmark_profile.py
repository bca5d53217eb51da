"""benchmarks/_common.py's profile (issue 42, item 6): the GPU's busy share of the profiled time and
the counts of kernel launches and host synchronisations, read from torch.profiler's Chrome trace.
Known answers on a written trace; the real profiler on a CPU (nothing on a GPU) and, marked
``gpu``, on CUDA."""

import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("_common", ROOT / "benchmarks/_common.py")
common = importlib.util.module_from_spec(spec)
sys.modules.setdefault(spec.name, common)
spec.loader.exec_module(common)

from tools.gpu_check.headlines import headline, timeline_numbers  # noqa: E402


def span(name: str, cat: str, ts: float, dur: float) -> dict:
    return {"ph": "X", "name": name, "cat": cat, "ts": ts, "dur": dur, "pid": 0, "tid": 0}


TRACE = [
    span("train_step", "cpu_op", 0, 40),
    span("aten::mm", "cpu_op", 1, 3),
    span("ampere_sgemm", "kernel", 0, 10),  # stream 7
    span("triton_red_fused", "kernel", 5, 10),  # stream 8, overlapping the first: 0..15 busy once
    span("Memcpy DtoH (Device -> Pinned)", "gpu_memcpy", 20, 2),
    span("Memset (Device)", "gpu_memset", 30, 1),
    span("cudaLaunchKernel", "cuda_runtime", 1, 1),
    span("cudaLaunchKernel", "cuda_runtime", 2, 1),
    span("cudaLaunchKernelExC_v11060", "cuda_runtime", 3, 1),  # CUPTI's versioned name
    span("cuLaunchKernel", "cuda_driver", 4, 1),  # Triton launches through the driver
    span("cudaGraphLaunch", "cuda_runtime", 5, 1),  # one launch, however many kernels
    span("cudaStreamSynchronize", "cuda_runtime", 23, 1),
    span("cudaDeviceSynchronize", "cuda_runtime", 38, 2),
    span("cudaMemcpy", "cuda_runtime", 25, 1),  # synchronous
    span("cudaMemcpyAsync", "cuda_runtime", 19, 1),  # not a wait by itself
    span("cudaStreamWaitEvent", "cuda_runtime", 26, 1),  # the device waits, not the host
    {"ph": "s", "name": "ac2g", "cat": "ac2g", "ts": 1, "id": 1},  # a flow arrow: no span
    {"ph": "i", "name": "Iteration Start", "ts": 0, "s": "g"},
]


def test_busy_time_is_the_union_of_the_intervals():
    assert common.busy_time([]) == 0
    assert common.busy_time([(5, 15), (0, 10)]) == 15  # overlapping, unsorted
    assert common.busy_time([(0, 10), (2, 3), (10, 12)]) == 12  # nested and touching
    assert common.busy_time([(0, 1), (3, 4)]) == 2


def test_device_timeline_counts_a_written_trace():
    timeline = common.device_timeline(TRACE, units=5, unit="step")
    assert timeline["window_s"] == pytest.approx(40e-6)
    assert timeline["busy_s"] == pytest.approx(18e-6)  # 0..15, a copy of 2, a set of 1
    assert timeline["busy_share"] == pytest.approx(18 / 40)
    assert (timeline["kernels"], timeline["launches"], timeline["host_syncs"]) == (2, 5, 3)
    assert timeline["per_unit"] == {"kernels": 0.4, "launches": 1.0, "host_syncs": 0.6}
    assert "GPU busy 45.0% of 0.000 s profiled" in common.timeline_line(timeline)
    assert "5 launches (1.0 a step), 3 host synchronisations (0.6 a step)" in common.timeline_line(timeline)


def test_a_host_only_trace_has_no_busy_share():
    timeline = common.device_timeline([event for event in TRACE if event.get("cat") == "cpu_op"])
    assert timeline["busy_share"] is None and timeline["busy_s"] == 0
    assert (timeline["kernels"], timeline["launches"], timeline["host_syncs"]) == (0, 0, 0)
    assert "nothing ran on a GPU" in common.timeline_line(timeline)
    assert common.device_timeline([])["window_s"] == 0


def test_a_region_counts_its_ranges_after_the_warm_up():
    region = "condensation.train_step"
    steps = [span(region, "user_annotation", start, 10) for start in (0, 10, 20)]
    trace = [*steps, span("other", "user_annotation", 35, 5),
             span("save", "cpu_op", 30, 50),  # after the steps: left out
             span("cudaLaunchKernel", "cuda_runtime", 2, 1),  # in the warm-up step: left out
             span("cudaLaunchKernel", "cuda_runtime", 12, 1), span("cudaStreamSynchronize", "cuda_runtime", 25, 1),
             span("k0", "kernel", 3, 9),  # the warm-up's kernel, running into step 2: not counted, its tail busy
             span("k1", "kernel", 14, 4), span("k2", "kernel", 28, 6)]  # clipped at the window's end
    timeline = common.device_timeline(trace, unit="step", region=region, skip=1)
    assert timeline["window_s"] == pytest.approx(20e-6) and timeline["units"] == 2
    assert timeline["busy_s"] == pytest.approx((12 - 10 + 4 + 2) * 1e-6)
    assert (timeline["kernels"], timeline["launches"], timeline["host_syncs"]) == (2, 1, 1)
    assert timeline["per_unit"] == {"kernels": 1.0, "launches": 0.5, "host_syncs": 0.5}
    assert timeline["region"] == region
    whole = common.device_timeline(trace, unit="step", region="absent")  # no such range: the whole trace
    assert whole["region"] is None and whole["window_s"] == pytest.approx(80e-6) and whole["launches"] == 2


def test_the_training_loop_marks_each_step_for_the_profiler(one_thread, tmp_path):
    from torch.profiler import profile

    from condensation.config.runs import TrainConfig
    from condensation.training.loop import STEP_REGION, train
    from tests.helpers.training import BLOCK, TRAIN_BLOCKS, VAL_BLOCKS, make_model

    config = TrainConfig(train_tokens=3 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=1e-3,
                         num_checkpoints=0, checkpoint_every=10, val_batches=1, tracker="none", probe_every=0)
    with profile() as recorded:
        train(make_model(), TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path)
    trace = tmp_path / "trace.json"
    recorded.export_chrome_trace(str(trace))
    timeline = common.device_timeline(json.loads(trace.read_text())["traceEvents"], region=STEP_REGION, skip=1)
    assert timeline["region"] == STEP_REGION and timeline["units"] == 2  # three steps, the first skipped


def test_the_real_profiler_on_a_cpu():
    x = torch.randn(64, 64)
    rows, timeline = common.profile_ops(lambda: [x @ x for _ in range(4)], torch.device("cpu"), top=3, units=4,
                                        unit="product")
    assert rows and rows[0]["op"] == "aten::mm" and rows[0]["calls"] == 4
    assert timeline["window_s"] > 0 and timeline["busy_share"] is None
    assert (timeline["launches"], timeline["host_syncs"], timeline["unit"]) == (0, 0, "product")


def test_the_gpu_check_keeps_a_cuda_timeline_and_not_a_cpu_one():
    cuda = common.device_timeline(TRACE, units=5, unit="step")
    assert timeline_numbers(cuda, "ce: ") == {"ce: GPU busy share": 18 / 40, "ce: kernel launches a step": 1.0,
                                              "ce: host syncs a step": 0.6}
    assert timeline_numbers(common.device_timeline(TRACE[:2])) == {}
    assert timeline_numbers(None) == {}
    training = headline("training", {"variants": {}, "profile_timeline": cuda})
    assert training["host syncs a step"] == 0.6
    dispersion = headline("dispersion-all", {"train": {"profiles": {"ce": {"ops": [], "timeline": cuda},
                                                                    "ce+compiled": {"ops": [], "timeline": None}}}})
    assert dispersion["ce: kernel launches a step"] == 1.0
    assert not any(key.startswith("ce+compiled: ") for key in dispersion)


@pytest.mark.gpu
def test_the_real_profiler_on_cuda_counts_launches_and_syncs():
    device = torch.device("cuda")
    x = torch.ones(1 << 20, device=device)

    def call():
        for _ in range(10):
            x.add_(1)
        return x.sum().item()  # one copy to the host and its wait

    call()
    _, timeline = common.profile_ops(call, device, top=3, units=1)
    assert timeline["kernels"] >= 11 and timeline["launches"] >= 11
    assert timeline["host_syncs"] >= 1
    assert 0 < timeline["busy_share"] <= 1


def test_the_toy_step_benchmark_times_the_default_s_toys():
    """benchmarks/toy_step.py's toy, vocabulary and step are config.yaml's (its report's numbers
    are the default's only while they agree)."""
    import yaml

    sys.path.insert(0, str(ROOT / "benchmarks"))
    toy_spec = importlib.util.spec_from_file_location("toy_step", ROOT / "benchmarks/toy_step.py")
    toy_step = importlib.util.module_from_spec(toy_spec)
    toy_spec.loader.exec_module(toy_step)
    config = yaml.safe_load((ROOT / "config.yaml").read_text())
    widths = set()
    for name in ("toy-mlp32", "toy-mlp256", "toy-mlp1024"):
        arch = dict(config["models"][name]["arch"])
        widths.add(arch.pop("n_inner"))
        assert arch == toy_step.TOY, name
    assert set(toy_step.argument_parser().parse_args([]).n_inner) <= widths
    assert toy_step.VOCAB == config["pretrain"]["tokenizer_vocab_size"]
    train = config["pretrain"]["train"]
    args = toy_step.argument_parser().parse_args([])
    assert (args.batch, args.tokens) == (train["micro_batch_size"], train["block_size"])
