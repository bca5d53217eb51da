"""The selected checkpoint's scores, copied from its step's (rule pick_selected_score)."""

from condensation.stages import logged
from condensation.stages.evaluation import pick_selected_score

output = snakemake.output
with logged(snakemake.log[0]):
    pick_selected_score(
        index_path=snakemake.input.index,
        record_paths=[path for path in snakemake.input.scores
                      if path.endswith(".json") and not path.endswith(".lm_eval.json")],
        out_paths={role: getattr(output, role) for role in ("record", "item_rows", "lm_eval")},
    )
