"""Mid-train one model with one method and seed (rule midtrain).

A command-line script rather than a Snakemake `script:` so that the rule can start it under
`accelerate launch` for multi-GPU runs; every process runs this same file.
"""

import argparse
import json

from condensation.stages import logged, midtrain_model

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--handle", required=True, help="models/<model>/handle.json")
parser.add_argument("--blocks", required=True, help="packed token blocks (.npz with train, validation)")
parser.add_argument("--run-dir", required=True, help="checkpoints, state, log.csv and final/ go here")
parser.add_argument("--seed", type=int, required=True)
parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
parser.add_argument("--method", type=json.loads, required=True, help='JSON, e.g. {"objective": "dispersion", "weight": 0.1}')
parser.add_argument("--settings", type=json.loads, required=True, help="JSON of the training loop's settings")
args = parser.parse_args()

with logged(None):  # the rule redirects this process's output into its log
    midtrain_model(args.handle, args.blocks, args.method, args.settings, args.seed, args.run_dir, threads=args.threads)
