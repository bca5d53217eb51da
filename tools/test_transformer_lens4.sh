#!/usr/bin/env bash
# measure() under TransformerLens 4: builds a virtual environment with transformer-lens 4.x in
# place of the [dev] pin (3.9.0) and runs tests/unit/test_hidden_states.py there. TransformerLens 4
# has no HookedTransformer, so its tests skip (the reason names TransformerLens 4) and the
# TransformerBridge test runs. A separate environment: the [dev] extra pins 3.9.0.
#
#   bash tools/test_transformer_lens4.sh [ENV_DIR]      (default: /tmp/condensation-tl4)
#
# TL_VERSION picks the release (default 4.3.0). STACK=pinned (default) keeps the rest of the
# stack at constraints.txt (torch 2.13.0 first, as tools/install.sh does), so that only
# TransformerLens differs from the main environment; STACK=latest lets pip pick the newest torch
# and transformers TransformerLens accepts (on Linux the newest CUDA torch: several GB).
# An existing ENV_DIR is reused. Needs the package registry (pip), not the Hugging Face Hub.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

env_dir="${1:-/tmp/condensation-tl4}"
version="${TL_VERSION:-4.3.0}"
stack="${STACK:-pinned}"
if [ "$stack" != pinned ] && [ "$stack" != latest ]; then
    echo "test_transformer_lens4: STACK is pinned or latest, not '$stack'" >&2
    exit 2
fi
started=$SECONDS

[ -x "$env_dir/bin/python" ] || python3 -m venv "$env_dir"
python="$env_dir/bin/python"
"$python" -m pip install --quiet --upgrade pip
case "$stack" in
    pinned)
        "$python" -m pip install --quiet "torch==2.13.0"
        grep -v '^transformer-lens==' constraints.txt > "$env_dir/constraints-tl4.txt"
        "$python" -m pip install --quiet -c "$env_dir/constraints-tl4.txt" -e . pytest pytest-xdist \
            "transformer-lens==$version"
        ;;
    latest)
        "$python" -m pip install --quiet -e . pytest pytest-xdist "transformer-lens==$version"
        ;;
esac
echo "test_transformer_lens4: installed in $((SECONDS - started)) s"

# the bridge must import: the test would skip, not fail, if it did not
"$python" - <<'PY'
from importlib.metadata import version

import torch
import transformer_lens.model_bridge  # noqa: F401
import transformers

print(f"test_transformer_lens4: transformer-lens {version('transformer-lens')}, torch {torch.__version__}, "
      f"transformers {transformers.__version__}")
PY

basetemp="$(mktemp -d "${TMPDIR:-/tmp}/tl4-tests.XXXXXX")"
status=0
"$python" -m pytest tests/unit/test_hidden_states.py -q -rs -n 0 -p no:cacheprovider --basetemp="$basetemp" || status=$?
rm -rf "$basetemp"
echo "test_transformer_lens4: done in $((SECONDS - started)) s"
exit "$status"
