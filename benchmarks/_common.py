"""What the benchmark scripts share: taking turns, timing a call or a whole process, medians, the
device (its flags, its setting up, its description) and the JSON report.

The scripts run as ``python benchmarks/NAME.py``, so Python puts this folder first on ``sys.path``
and they import it as ``_common``. torch is imported inside the functions that need it: the
scripts that time whole processes (scoring, malloc, Snakemake) do not load it.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import os
import platform
import re
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    import torch

REPO = Path(__file__).resolve().parents[1]
DTYPE_NAMES = ("float32", "bfloat16", "float16")
THREADS_HELP = "CPU only, torch.set_num_threads; one thread is much steadier on a shared machine (0: torch's default)"
T = TypeVar("T")


# ----------------------------------------------------------------------------------------------
# taking turns and timing


def rotated(names: Sequence[T], rep: int) -> Sequence[T]:
    """``names`` starting at the ``rep``-th: variants take turns in a rotating order, so that the
    slow phases of a shared machine are spread over all of them."""
    return names[rep % len(names):] + names[: rep % len(names)]


def medians(rows: Sequence[Sequence[float]]) -> list[float]:
    """The median of each column of ``rows`` (one row per rep)."""
    return [statistics.median(column) for column in zip(*rows)]


def timed_process(command: list[str], env: dict[str, str] | None = None) -> tuple[float, float, int]:
    """CPU seconds (user + system), wall seconds and minor page faults of one process (and of what
    it waits for), its output discarded; exits naming the command if it fails."""
    started = time.perf_counter()
    process = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _, status, usage = os.wait4(process.pid, 0)
    if status != 0:
        raise SystemExit(f"{' '.join(command)} failed ({status})")
    return usage.ru_utime + usage.ru_stime, time.perf_counter() - started, usage.ru_minflt


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def time_interleaved(variants: dict[str, Callable[[], object]], device: torch.device, reps: int, warmup: int,
                     keep_returned: bool = False) -> tuple[dict[str, dict], dict[str, object]]:
    """Median/min wall and median CPU seconds per call, and the first warm-up call's wall time
    (``time_s``, ``min_s``, ``cpu_s``, ``first_s``; ``reps_s`` the wall time of each rep).
    ``warmup`` calls of each variant, then ``reps`` reps in which the variants take turns in a
    rotating order. With ``keep_returned``, also what each variant's last warm-up call returned
    (its first timed call's without a warm-up); otherwise nothing is kept past its call."""
    names = list(variants)
    first: dict[str, float] = {}
    returned: dict[str, object] = {}
    for _ in range(warmup):
        for name in names:
            synchronize(device)
            start = time.perf_counter()
            value = variants[name]()
            synchronize(device)
            first.setdefault(name, time.perf_counter() - start)  # a compiled variant compiles here
            if keep_returned:
                returned[name] = value
    wall: dict[str, list[float]] = {name: [] for name in names}
    cpu: dict[str, list[float]] = {name: [] for name in names}
    for rep in range(reps):
        for name in rotated(names, rep):
            synchronize(device)
            wall_start, cpu_start = time.perf_counter(), time.process_time()
            value = variants[name]()
            synchronize(device)
            wall[name].append(time.perf_counter() - wall_start)
            cpu[name].append(time.process_time() - cpu_start)
            if keep_returned:
                returned.setdefault(name, value)
    return {name: {"time_s": statistics.median(wall[name]), "min_s": min(wall[name]),
                   "cpu_s": statistics.median(cpu[name]), "reps_s": wall[name], "first_s": first.get(name)}
            for name in names}, returned


DEVICE_WORK = ("kernel", "gpu_memcpy", "gpu_memset")
"""The trace categories of work on the GPU itself: what its busy share counts."""
LAUNCH_CALLS = ("cudaLaunchKernel", "cudaLaunchKernelExC", "cudaLaunchCooperativeKernel", "cudaGraphLaunch",
                "cuLaunchKernel", "cuLaunchKernelEx", "cuLaunchCooperativeKernel", "cuGraphLaunch")
"""Host calls that start work on the GPU (the runtime's, and the driver's that Triton calls; a CUDA
graph's launch counts once, however many kernels it holds)."""
HOST_SYNC_CALLS = ("cudaDeviceSynchronize", "cudaStreamSynchronize", "cudaEventSynchronize", "cudaMemcpy",
                   "cuCtxSynchronize", "cuStreamSynchronize", "cuEventSynchronize", "cuMemcpyDtoH")
"""Host calls that wait for the GPU: the synchronisations, and a synchronous copy (``.item()``,
``.cpu()`` and a non-finite check read on the host each end in one of them)."""


def call_name(name: str) -> str:
    """A CUDA API call's name without the version suffix CUPTI may add (``cudaLaunchKernelExC_v11060``)."""
    return re.sub(r"_v\d+$", "", name)


def busy_time(intervals: Sequence[tuple[float, float]]) -> float:
    """The length of the union of ``(start, end)`` intervals: kernels on several streams that
    overlap count once."""
    total, reach = 0.0, -math.inf
    for start, end in sorted(intervals):
        if end > reach:
            total += end - max(start, reach)
            reach = end
    return total


def device_timeline(trace_events: Sequence[dict], units: int = 1, unit: str = "call", region: str | None = None,
                    skip: int = 0) -> dict:
    """What a profile's timeline says of the GPU (issue 42, item 6), from its Chrome-trace events
    (``torch.profiler``'s ``export_chrome_trace``; times in microseconds):

    * ``window_s``: the span counted: with ``region`` (a ``record_function`` name, e.g. the training
      loop's ``STEP_REGION``) from the start of its ``skip + 1``-th range to the end of its last,
      ``units`` then the ranges counted; else the first event's start to the last one's end (host
      and device). The profiler's own overhead lengthens it, so the busy share is a lower bound;
    * ``busy_s`` and ``busy_share``: the union of the kernels, copies and sets on the device, cut
      to the window, and that over the window (None when nothing ran on a GPU in it: a CPU run);
    * ``kernels``: the kernels the device started within it; ``launches``: the host calls that
      started work (:data:`LAUNCH_CALLS`); ``host_syncs``: the host calls that waited for the
      device (:data:`HOST_SYNC_CALLS`);
    * the same counts per ``unit`` (``units`` of them).
    """
    spans = [event for event in trace_events if event.get("ph") == "X" and "dur" in event and "ts" in event]
    ranges = sorted((float(event["ts"]), float(event["ts"]) + float(event["dur"])) for event in spans
                    if region is not None and event.get("cat") == "user_annotation" and event.get("name") == region)
    if ranges[skip:]:
        low, high = ranges[skip][0], ranges[-1][1]
        units = len(ranges) - skip
    elif spans:
        low = min(float(event["ts"]) for event in spans)
        high = max(float(event["ts"]) + float(event["dur"]) for event in spans)
    else:
        low = high = 0.0
    inside = [event for event in spans if low <= float(event["ts"]) < high]
    device = [(max(float(event["ts"]), low), min(float(event["ts"]) + float(event["dur"]), high))
              for event in spans if event.get("cat") in DEVICE_WORK]  # clipped to the window: the busy part of it
    device = [(start, end) for start, end in device if end > start]
    calls = [call_name(event.get("name", "")) for event in inside
             if event.get("cat") in ("cuda_runtime", "cuda_driver")]
    window, busy = high - low, busy_time(device)
    counts = {"kernels": sum(event.get("cat") == "kernel" for event in inside),
              "launches": sum(name in LAUNCH_CALLS for name in calls),
              "host_syncs": sum(name in HOST_SYNC_CALLS for name in calls)}
    return {"window_s": window / 1e6, "busy_s": busy / 1e6,
            "busy_share": busy / window if device and window > 0 else None, **counts,
            "unit": unit, "units": units, "region": region if ranges[skip:] else None,
            "per_unit": {name: count / max(units, 1) for name, count in counts.items()}}


def profile_ops(call: Callable[[], object], device: torch.device, top: int, units: int = 1,
                unit: str = "call", region: str | None = None, skip: int = 0) -> tuple[list[dict], dict | None]:
    """Where one ``call`` spends its time, by operator: the ``top`` operators by self time on the
    device (CUDA kernels' time on a GPU, CPU time on a CPU), each with its calls, milliseconds and
    share of the total: what a ratio alone does not say (which op to remove next). Beside them,
    the call's :func:`device_timeline` (``units`` of ``unit`` in it, or its ``region``'s ranges
    after ``skip``), or None if the profiler could not run."""
    from torch.profiler import ProfilerActivity, profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    synchronize(device)
    try:  # a profile is extra: where the profiler cannot run, the timings above still stand
        with profile(activities=activities) as recorded:
            call()
            synchronize(device)
        with tempfile.TemporaryDirectory(prefix="bench-trace-") as folder:
            trace = Path(folder) / "trace.json"
            recorded.export_chrome_trace(str(trace))
            timeline = device_timeline(json.loads(trace.read_text())["traceEvents"], units, unit, region, skip)
    except Exception as error:  # noqa: BLE001
        print(f"  profile failed: {type(error).__name__}: {error}")
        return [], None
    field = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    events = [event for event in recorded.key_averages()  # ops, not the ranges a caller named
              if getattr(event, field, 0) > 0 and not getattr(event, "is_user_annotation", False)]
    total = sum(getattr(event, field) for event in events) or 1.0
    events.sort(key=lambda event: getattr(event, field), reverse=True)
    return [{"op": event.key, "calls": event.count, "self_ms": getattr(event, field) / 1e3,
             "share": getattr(event, field) / total} for event in events[:top]], timeline


def print_profile(rows: list[dict], what: str, timeline: dict | None = None) -> None:
    if timeline is not None:
        print(f"\n  {what}: {timeline_line(timeline)}")
    if not rows:
        return
    print(f"\n  where {what} spends its time (self time by operator, top {len(rows)}):")
    for row in rows:
        print(f"    {row['share']:6.1%} {row['self_ms']:9.2f} ms {row['calls']:6d} calls  {row['op'][:70]}")


def timeline_line(timeline: dict) -> str:
    """:func:`device_timeline` in one line."""
    if timeline["busy_share"] is None:
        return (f"{timeline['window_s']:.3f} s profiled, nothing ran on a GPU (the busy share, launches and "
                "synchronisations are a CUDA profile's)")
    per, unit = timeline["per_unit"], timeline["unit"]
    return (f"GPU busy {timeline['busy_share']:.1%} of {timeline['window_s']:.3f} s profiled; "
            f"{timeline['kernels']:,} kernels, {timeline['launches']:,} launches ({per['launches']:,.1f} a {unit}), "
            f"{timeline['host_syncs']:,} host synchronisations ({per['host_syncs']:,.1f} a {unit})")


# ----------------------------------------------------------------------------------------------
# the device


def device_parser(description: str, dtype_help: str, dtypes: Sequence[str] = DTYPE_NAMES) -> argparse.ArgumentParser:
    """A parser (defaults shown in ``--help``) with ``--device cpu|cuda`` and ``--dtype`` (default
    float32 on CPU, bfloat16 on CUDA)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    parser.add_argument("--dtype", choices=tuple(dtypes), default=None, help=dtype_help)
    return parser


def add_output_arguments(parser: argparse.ArgumentParser) -> None:
    """``--threads`` and ``--json``."""
    parser.add_argument("--threads", type=int, default=1, help=THREADS_HELP)
    parser.add_argument("--json", type=Path, help="also write the results here")


def set_up_device(parser: argparse.ArgumentParser, args: argparse.Namespace) -> tuple[torch.device, torch.dtype]:
    """The device and the dtype the flags name; on CPU ``--threads`` torch threads."""
    import torch

    device = torch.device(args.device)
    if device.type == "cpu" and args.threads > 0:
        torch.set_num_threads(args.threads)
    if device.type == "cuda" and not torch.cuda.is_available():
        parser.error("--device cuda but no CUDA device is available")
    return device, getattr(torch, args.dtype or ("bfloat16" if device.type == "cuda" else "float32"))


def autocast(device: torch.device, dtype: torch.dtype) -> contextlib.AbstractContextManager:
    """Mixed precision as in training: autocast to ``dtype``; float32 means none."""
    import torch

    if dtype == torch.float32:
        return contextlib.nullcontext()
    return torch.autocast(device.type, dtype=dtype)


def processor() -> str:
    """The CPU's model name with its family and model numbers (``AMD EPYC, family 26, model 2``:
    two CPUs of one name can be generations apart), from /proc/cpuinfo where there is one."""
    from condensation.runtime.mkl_on_amd import cpu_fields

    fields = cpu_fields()
    if "model name" not in fields:
        return platform.processor() or platform.machine()
    return f"{fields['model name']}, family {fields.get('cpu family', '?')}, model {fields.get('model', '?')}"


def cpu_cores() -> str:
    """``N cores visible, <processor>``."""
    return f"{os.cpu_count()} cores visible, {processor()}"


def job_cpu() -> str:
    """The CPU of the scripts that time whole jobs (one torch thread each, as the jobs run), with the
    load average once they are done."""
    return (f"CPU, {os.cpu_count()} cores visible, one torch thread, {processor()}, "
            f"load average {os.getloadavg()[0]:.1f} at the end")


def describe_device(device: torch.device, threads: str = "") -> str:
    """The GPU's name, or the CPU's torch threads (then ``threads``, e.g. numpy's) and cores."""
    import torch

    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return f"CPU, {torch.get_num_threads()} torch threads, {threads}{cpu_cores()}{mkl_kernels()}"


def mkl_kernels() -> str:
    """On an AMD CPU, whether this process has the library that lets MKL pick its kernels by the
    CPU's features (the Snakefile gives every job it; a benchmark run by hand has it only with
    ``LD_PRELOAD=$(python -m condensation.runtime.mkl_on_amd)``), as ``; MKL ...``."""
    from condensation.runtime import mkl_on_amd

    if mkl_on_amd.cpu_vendor() != "AuthenticAMD":
        return ""
    preloaded = str(mkl_on_amd.shim_path()) in mkl_on_amd.preloaded_libraries()
    return "; MKL's kernels by the CPU's features" if preloaded else "; MKL's path for other vendors (no LD_PRELOAD)"


def announce(device: torch.device, dtype: torch.dtype, precision: str, timing: str, threads: str = "") -> dict:
    """Print a run's first line: the device (``describe_device``), ``precision`` with ``{}`` the
    dtype's name, torch's version and ``timing`` (how it times); return the report's first keys:
    device, dtype, torch."""
    import torch

    where = describe_device(device, threads)
    print(f"device: {where}; {precision.format(str(dtype).removeprefix('torch.'))}; torch {torch.__version__}; "
          f"{timing}")
    return {"device": where, "dtype": str(dtype), "torch": torch.__version__}


# ----------------------------------------------------------------------------------------------
# the report


def write_report(report: dict, path: Path | None) -> None:
    """Print the run's total wall time (``report["wall_s"]``) and, with ``path``, write ``report`` there as JSON."""
    print(f"\ntotal {report['wall_s']:.0f} s")
    if path:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(report, indent=2) + "\n")
        print(f"wrote {path}")
