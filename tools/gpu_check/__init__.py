"""The GPU check: the project's GPU path proven in about eight minutes on one H100, every number kept.

    bash tools/gpu_device.sh                    # on the lent machine: install the kit, then this (docs/gpu.md)
    python -m tools.gpu_check --cpu             # the rehearsal: every step at toy size on the CPU
    python -m tools.gpu_check --plan            # what each step runs, and its time box
    python -m tools.gpu_check dispersion        # named steps only, in the order named (smollm2 only when named)
    (from the repository root: the package is ``tools.gpu_check``)

The steps, in order of value; each is stopped at its time box (``--plan`` prints them):

``env``         imports of every module the steps need, their versions, CUDA, bf16, free GPU
                memory, disk, the kit's install report. A step whose modules are missing is not
                run (the summary names them); without CUDA (and without ``--cpu``) no other step runs.
``tests``       ``pytest -m gpu tests/unit/test_gpu.py tests/unit/test_train_forward.py`` (skipped
                without CUDA: the rehearsal checks that they are collected).
``dispersion``  ``benchmarks/dispersion_loss.py`` at GPT2-small, T = 1024, bf16: the loss on all
                12 block outputs (eager and compiled tile body, the layers stacked in one call and
                one call per layer, float32 and bf16 products; every ratio against the compiled CE
                step; the loss alone too, there also at other tile sizes and with TF32 and bf16
                products: ``--sweep``), then on the last only.
``training``    ``benchmarks/training_loop.py --preset gpt2-small --compile``: tokens/s and MFU
                against a plain Hugging Face loop, then a profile of one more compiled run.
``extraction``  ``benchmarks/extraction.py`` (random-weight GPT2-small): against the one-sequence
                float32 loop and a bare forward pass, per batch and per call; what the lenses
                cost, ``finalize`` as a fixed cost (the lenses' eigendecompositions on the GPU and
                on the host), and a profile of one call (``--profile``).
``workflow``    Snakemake on ``tests/workflow/configs/tiny.yaml`` + ``tiny-gpu.yaml`` in a fresh
                copy of the tree; then the device each measurement recorded and the precision each
                training run chose.
``smollm2``     (only when named) ``configs/smollm2-gpu.yaml``: SmolLM2-135M mid-trained with CE
                and the dispersion loss, 3 seeds, scored; its Table 2 and findings into the summary.
                With ``--cpu`` a dry run only (the DAG and the config).

After every step ``<out>/summary.json``, ``summary.md`` and ``logs.tar.gz`` (the logs and the
benchmarks' JSON) are written again, so a call stopped at its limit still returns what finished;
a workflow step also leaves ``workflow-<step>.tar.gz``: its copy's job logs, benchmark files,
tables, findings and run records (no weights), whatever it finished.
Logs, JSON and the workflow's copies live under ``--work`` (default ``gpu-check/``).
"""

# The package, by concern (this docstring is the command's --help): plan (the steps, their
# commands and time boxes), boxes (a command run in its box), the steps' modules environment
# (with probe), gpu_tests, benchmark_steps (with headlines) and workflow (with records), targets
# (the targets as data), header, summary and report (what a call writes), cli (the
# command line). Only the standard library is imported at the top of a module: the check runs
# before anything else is known to be installed.
