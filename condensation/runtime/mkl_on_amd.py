"""Which matrix-product kernels torch's MKL runs on an AMD CPU, and the workflow's setting for its jobs.

torch's x86 wheels link Intel's MKL for float32 matrix products (``mm``, ``addmm``, ``bmm``). MKL
picks its kernels by asking ``mkl_serv_intel_cpu_true()`` whether the CPU is Intel's; on any other
vendor it skips its AVX-512 kernels, even where the CPU has the instructions (AMD Zen 4 and Zen 5).
A one-function library that answers yes, preloaded into a job's process, lets MKL choose by the
CPU's own feature flags instead: on a 2-core AMD EPYC Zen 5 a toy's training step ran x1.4 faster
and the default pipeline took 14.1 minutes instead of 20.0; limited to AVX2 (all a Zen 3 has),
the output head's products gained about 10 % (``benchmarks/job_settings.py --setting mkl``,
``benchmarks/results/mkl-on-amd-zen5-2026-12-07.md``). Random draws are unchanged; products can differ in
their last bits, as they do between any two CPUs. On an Intel CPU the function answers yes anyway,
so the library changes nothing there.

The Snakefile calls :func:`use_job_mkl_settings`, so every job it starts (and every SLURM job,
which inherits the submitting environment) has it. ``CONDENSATION_MKL_SHIM=0`` turns it off;
``python -m condensation.runtime.mkl_on_amd`` prints the library's path for a process of your own:
``LD_PRELOAD=$(python -m condensation.runtime.mkl_on_amd) condensation measure ...``.
"""

from __future__ import annotations

import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from condensation.runtime.io import cache_dir

SHIM_SOURCE = "int mkl_serv_intel_cpu_true(void) { return 1; }\n"
"""MKL's vendor check, answered yes; MKL then picks its kernels by the CPU's feature flags alone."""
OPT_OUT_VARIABLE = "CONDENSATION_MKL_SHIM"
"""Set to ``0`` to leave MKL's own choice of kernels."""


def cpu_fields(cpuinfo: Path = Path("/proc/cpuinfo")) -> dict[str, str]:
    """The first processor's fields in ``cpuinfo`` (``vendor_id``, ``model name``, ``cpu family``,
    ...); empty where there is no such file."""
    fields: dict[str, str] = {}
    try:
        with cpuinfo.open() as lines:
            for line in lines:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the blank line after the first processor's block
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    return fields


def cpu_vendor(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """The CPU's ``vendor_id`` (``AuthenticAMD``, ``GenuineIntel``), or None."""
    return cpu_fields(cpuinfo).get("vendor_id")


def preloaded_libraries() -> list[str]:
    """What ``LD_PRELOAD`` holds (the dynamic loader splits it at spaces and colons)."""
    return os.environ.get("LD_PRELOAD", "").replace(":", " ").split()


def shim_path(cache: Path | None = None) -> Path:
    """Where the library is built: one file per source text, so a changed source builds anew."""
    cache = cache or cache_dir()
    return cache / "mkl-on-amd" / f"vendor-check-{hashlib.sha256(SHIM_SOURCE.encode()).hexdigest()[:12]}.so"


def build_shim(cache: Path | None = None) -> Path:
    """The library's path, compiled with the system's C compiler on first use (atomically: two jobs
    building at once each rename a whole file into place). Raises ``RuntimeError`` saying why
    it cannot be built."""
    target = shim_path(cache)
    if target.is_file():
        return target
    compiler = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if compiler is None:
        raise RuntimeError("no C compiler (cc, gcc or $CC) to build it with")
    target.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=target.parent) as scratch:
        source, built = Path(scratch) / "vendor_check.c", Path(scratch) / target.name
        source.write_text(SHIM_SOURCE)
        result = subprocess.run([compiler, "-shared", "-fPIC", "-O2", "-o", str(built), str(source)],
                                capture_output=True, text=True, timeout=120)
        if result.returncode != 0:
            raise RuntimeError(f"{compiler} failed: {result.stderr.strip()[-500:]}")
        os.replace(built, target)
    return target


def wanted(cpuinfo: Path = Path("/proc/cpuinfo")) -> str | None:
    """Why the library is not wanted here (None where it is): off by the opt-out, not Linux on
    x86-64, or not an AMD CPU."""
    if os.environ.get(OPT_OUT_VARIABLE, "1") == "0":
        return f"{OPT_OUT_VARIABLE}=0"
    if not sys.platform.startswith("linux") or platform.machine() not in ("x86_64", "AMD64"):
        return f"not Linux on x86-64 ({sys.platform}, {platform.machine()})"
    vendor = cpu_vendor(cpuinfo)
    if vendor != "AuthenticAMD":
        return f"the CPU is not AMD's ({vendor})"
    return None


def use_job_mkl_settings(cpuinfo: Path = Path("/proc/cpuinfo"), cache: Path | None = None) -> str:
    """On an AMD x86-64 CPU, preload the library into the processes started from here on
    (``LD_PRELOAD``, after what it holds already). Returns what it did, in words; never raises, as a
    job runs as well (slower) without it."""
    reason = wanted(cpuinfo)
    if reason is not None:
        return f"MKL's kernels left as MKL chooses them: {reason}"
    try:
        path = build_shim(cache)
    except (OSError, RuntimeError, subprocess.SubprocessError) as error:
        return f"MKL's kernels left as MKL chooses them: the vendor-check library could not be built ({error})"
    preloaded = preloaded_libraries()
    if str(path) not in preloaded:
        os.environ["LD_PRELOAD"] = " ".join([*preloaded, str(path)])
    return f"MKL picks its kernels by the CPU's features: {path} preloaded"


if __name__ == "__main__":
    print(build_shim())
