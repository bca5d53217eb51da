#!/usr/bin/env bash
# The lent GPU machine's one command (docs/gpu.md): install the kit carried in gpu-kit/ into
# /tmp/site, put it and the repository on the path (Snakemake's jobs import condensation and
# stand_in_hub from there), then run the check, which writes its summary under $OUT.
#
#   bash tools/gpu_device.sh [--cpu] [STEP ...]       (from the repository root; python -m tools.gpu_check --help)
#
# PYTHON (default python3: the image's) and GPU_SITE (default /tmp/site) may be set; the CPU
# rehearsal in a Python 3.12 virtual environment runs exactly this with PYTHON and GPU_SITE set.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
python=${PYTHON:-python3}
site=${GPU_SITE:-/tmp/site}
export PYTHONUNBUFFERED=1
mkdir -p gpu-check
# A failed install is not the end: the check's first step then names what is missing.
"$python" tools/gpu_kit.py install --target "$site" > gpu-check/install.log 2>&1
echo "gpu_device: kit install exit $? ($(tail -c 600 gpu-check/install.log))"
export PYTHONPATH="$site:$PWD${PYTHONPATH:+:$PYTHONPATH}"
exec "$python" -m tools.gpu_check "$@"
