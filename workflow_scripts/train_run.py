"""Train one run of a study as its run.json says (rule train_study_run).

A command-line script rather than a Snakemake `script:` so that the rule can start it under
`accelerate launch` for multi-GPU runs; every process runs this same file.
"""

import argparse

from condensation.stages import logged
from condensation.stages.training import train_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--plan", required=True, help="the run's run.json; the run directory is its folder")
parser.add_argument("--handle", required=True, help="models/<model>/handle.json")
parser.add_argument("--blocks", required=True, help="packed token blocks (.npz with train, validation)")
parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
args = parser.parse_args()

with logged(None):  # the rule redirects this process's output into its log
    train_run(plan_path=args.plan, handle_path=args.handle, blocks_path=args.blocks, threads=args.threads)
