"""How a job's process allocates memory: the glibc malloc settings the workflow gives every job."""

from __future__ import annotations

import os

JOB_MALLOC_SETTINGS = {"MALLOC_MMAP_THRESHOLD_": str(2**30), "MALLOC_TRIM_THRESHOLD_": str(2**30)}
"""Keep the memory a process frees for its next allocations, below 1 GiB a block. By default
glibc hands every block over 128 KiB (a batch's activations, logits, gradients) back to the
kernel when it is freed and maps it afresh, faulted in page by page, on the next training step or
scoring batch: 8 % of a training job's CPU time and 5 % of a scoring job's on a CPU, for no number changed
(``benchmarks/job_settings.py --setting malloc``). Both settings are needed: the trim threshold alone fixes
the mapping threshold at its 128 KiB default. glibc reads them when a process starts; other C
libraries ignore them."""


def use_job_malloc_settings() -> None:
    """Give the processes started from here on :data:`JOB_MALLOC_SETTINGS`, where the
    environment does not set them already."""
    for variable, value in JOB_MALLOC_SETTINGS.items():
        os.environ.setdefault(variable, value)
