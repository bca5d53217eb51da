# Stage 3: per-layer cosine geometry of every (model, dataset), and its trend with depth.


include: "functions/geometry.smk"


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
        metrics=path_with(path.metrics, name="trend.json"),
        layer_means=path_with(path.metrics, name="layer_means.csv"),
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
        **gpu_job(60, gpu=1),  # runs the models it compares again (CKA needs their activations)
    script:
        "../workflow_scripts/similarity_table.py"
