# Stage 3: per-layer cosine geometry of every (model, dataset), and its trend with depth.

from condensation.config.plan import similarity_dataset, similarity_rows

# Each similarity comparison's rows (plan.similarity_rows): a group, the compared model (a model of
# the config, or a study run) and its reference.
SIMILARITY_ROWS = {name: similarity_rows(config, name) for name in config["similarity"]}


def all_geometry():
    """Every (model, dataset) measured for a family, a pair or a dataset comparison."""
    families, pairs = config["families"], config["pairs"].values()
    measured = {(m, d) for spec in families.values() for m in spec["models"] for d in spec["datasets"]}
    measured |= {(m, spec["dataset"]) for spec in pairs for m in spec["first"] + spec["second"] + spec.get("reference", [])}
    for family, datasets in config["dataset_robustness"].items():
        measured |= {(m, d) for m in families[family]["models"] for d in datasets}
    return sorted(fill(path.geometry, model=m, dataset=d) for m, d in measured)


def similarity_inputs(wildcards):
    """Per row, the compared model (its handle, or a study run's final weights) and the reference's
    handle; and the dataset's samples."""
    rows = SIMILARITY_ROWS[wildcards.comparison]
    compared = [
        fill(path.study_run.final, study=row["run"][0], model=row["run"][1], method=row["run"][2], seed=row["run"][3])
        if row["run"] else fill(path.handle, model=row["model"])
        for row in rows
    ]
    return {
        "compared": compared,
        "references": [fill(path.handle, model=row["reference"]) for row in rows],
        "samples": fill(path.samples, dataset=similarity_dataset(config, wildcards.comparison)),
    }


rule extract:
    input:
        handle=path.handle,
        samples=path.samples,
    output:
        path.geometry,
    log:
        "logs/extract/{model}/{dataset}.log",
    benchmark:
        "logs/benchmarks/extract/{model}/{dataset}.tsv"
    params:
        sampling=SAMPLING,
        extraction=EXTRACTION,
    threads: 1
    resources:
        **gpu_job(60),
    script:
        "../workflow_scripts/extract.py"


rule trend_table:
    localrule: True
    input:
        unpack(family_geometry),
    output:
        multiext(path.trend_table, csv=".csv", markdown=".md", profiles=".profiles.npz"),
    log:
        "logs/trend_table/{family}_{dataset}.log",
    benchmark:
        "logs/benchmarks/trend_table/{family}_{dataset}.tsv"
    params:
        **FAMILY_PARAMS,
    script:
        "../workflow_scripts/trend_table.py"


rule trend_metrics:
    localrule: True
    input:
        tables=trend_tables(),
        geometry=all_geometry(),
    output:
        metrics=fill(path.metrics, name="trend.json"),
        layer_means=fill(path.metrics, name="layer_means.csv"),
    log:
        "logs/trend_metrics.log",
    benchmark:
        "logs/benchmarks/trend_metrics.tsv"
    script:
        "../workflow_scripts/trend_metrics.py"


rule similarity_table:
    input:
        unpack(similarity_inputs),
    output:
        path.similarity_table,
    log:
        "logs/similarity_table/{comparison}.log",
    benchmark:
        "logs/benchmarks/similarity_table/{comparison}.tsv"
    params:
        rows=lambda wildcards: SIMILARITY_ROWS[wildcards.comparison],
        dataset=lambda wildcards: similarity_dataset(config, wildcards.comparison),
        sampling=SAMPLING,
        extraction=EXTRACTION,
    threads: 1
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=60,
    script:
        "../workflow_scripts/similarity_table.py"
