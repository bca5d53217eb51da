"""Train one run as its run.json says (rules pretrain, train_study_run).

A command-line script rather than a Snakemake `script:` so that the rules can start it under
`accelerate launch` for multi-GPU runs; every process runs this same file.
"""

import argparse

from condensation.stages import logged
from condensation.stages.training import train_run

parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
parser.add_argument("--plan", required=True, help="the run's run.json; the run directory is its folder")
parser.add_argument("--blocks", required=True, help="packed token blocks (.npz with train, validation)")
start = parser.add_mutually_exclusive_group(required=True)
start.add_argument("--handle", help="models/<model>/handle.json: the model a study's run starts from")
start.add_argument("--tokenizer",
                   help="the pre-training tokenizer: a run pre-trains the plan's GPT2 shape from scratch")
parser.add_argument("--teacher", help="models/<model>/handle.json of the teacher, for a run with a distillation method")
parser.add_argument("--threads", type=int, default=1, help="CPU threads for torch")
args = parser.parse_args()

with logged(None):  # the rule redirects this process's output into its log
    train_run(
        plan_path=args.plan, blocks_path=args.blocks, handle_path=args.handle, tokenizer_dir=args.tokenizer,
        teacher_handle_path=args.teacher, threads=args.threads,
    )
