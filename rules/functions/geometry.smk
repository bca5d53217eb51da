# The input functions and helpers that rules/geometry.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

from condensation.config.plan import similarity_dataset, similarity_rows

# Each similarity comparison's rows (plan.similarity_rows): a group, the compared model (a model of
# the config, or a study run) and its reference.
SIMILARITY_ROWS = {name: similarity_rows(config, name) for name in config["similarity"]}


def all_geometry():
    """Every (model, dataset) measured for a family, a pair or a dataset comparison."""
    families, pairs = config["families"], config["pairs"].values()
    measured = {(m, d) for spec in families.values() for m in spec["models"] for d in spec["datasets"]}
    measured |= {
        (m, spec["dataset"]) for spec in pairs for m in spec["first"] + spec["second"] + spec.get("reference", [])
    }
    for family, datasets in config["dataset_robustness"].items():
        measured |= {(m, d) for m in families[family]["models"] for d in datasets}
    return sorted(path_with(path.geometry, model=m, dataset=d) for m, d in measured)


def similarity_inputs(wildcards):
    """Per row, the compared model (its handle, or a study run's final weights) and the reference's
    handle; and the dataset's samples."""
    rows = SIMILARITY_ROWS[wildcards.comparison]
    compared = [
        (
            path_with(
                path.study_run.final, study=row["run"][0], model=row["run"][1], method=row["run"][2], seed=row["run"][3]
            )
            if row["run"]
            else path_with(path.handle, model=row["model"])
        )
        for row in rows
    ]
    return {
        "compared": compared,
        "references": [path_with(path.handle, model=row["reference"]) for row in rows],
        "samples": path_with(path.samples, dataset=similarity_dataset(config, wildcards.comparison)),
    }
