"""run.json of one training run (rules plan_pretrain, plan_study_run)."""

from condensation.stages import logged
from condensation.stages.models import plan_pretrain
from condensation.stages.training import plan_study_run

params, wildcards = snakemake.params, snakemake.wildcards
with logged(snakemake.log[0]):
    if snakemake.rule == "plan_pretrain":
        plan_pretrain(model=wildcards.model, arch=params.arch, train=params.train, seed=params.seed,
                      out_path=snakemake.output[0])
    else:
        plan_study_run(
            study=wildcards.study, model=wildcards.model, method=params.method, train=params.train, seed=params.seed,
            reinitialise=params.reinitialise, out_path=snakemake.output[0],
        )
