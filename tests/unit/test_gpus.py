"""GPUs shared by jobs that Snakemake runs on the machine itself."""

import os
import subprocess
import sys


def test_local_jobs_claim_gpus_of_their_own(tmp_path, monkeypatch):
    """Two processes on one machine get different GPUs; a scheduler's choice is left alone."""
    script = (
        "import os, sys, time; from pathlib import Path; from condensation.runtime.gpus import claim_gpus; "
        f"claim_gpus(int(sys.argv[1]), total=3, locks=Path({str(tmp_path)!r})); "
        "print(os.environ['CUDA_VISIBLE_DEVICES'], flush=True); time.sleep(3)"
    )
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    first = subprocess.Popen([sys.executable, "-c", script, "2"], stdout=subprocess.PIPE, text=True, env=env)
    assert first.stdout.readline().strip() == "0,1"
    second = subprocess.run([sys.executable, "-c", script, "1"], capture_output=True, text=True, env=env, timeout=60)
    assert second.stdout.strip() == "2"  # 0 and 1 are held by the first process
    first.wait()
    from condensation.runtime.gpus import claim_gpus

    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "5")
    assert claim_gpus(1, total=3, locks=tmp_path) == [] and os.environ["CUDA_VISIBLE_DEVICES"] == "5"


def test_the_gpu_wrapper_becomes_the_command_so_a_schedulers_signal_reaches_it():
    """Exec, not a child: the pid SLURM signals is the command's own, and no wrapper is left to
    die of the signal and end the job step while the command saves its state."""
    command = [sys.executable, "-m", "condensation.runtime.gpus", "0", "--", sys.executable, "-c",
               "import os; print(os.getpid())"]
    wrapped = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert int(wrapped.communicate(timeout=60)[0]) == wrapped.pid
