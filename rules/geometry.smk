# Stage 3: per-layer cosine geometry of every (model, dataset), and its trend with depth.


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
        gpu=model_gpus,
        gpu_model=GPU_MODEL,
        mem_mb=16000,
        runtime=60,
    script:
        "../workflow_scripts/extract.py"


rule trend_table:
    input:
        unpack(family_geometry),
    output:
        multiext(path.trend_table, csv=".csv", markdown=".md", profiles=".profiles.npz"),
    log:
        "logs/trend_table/{family}_{dataset}.log",
    benchmark:
        "logs/benchmarks/trend_table/{family}_{dataset}.tsv"
    params:
        models=lookup(dpath="families/{family}/models", within=config),
        compares_size=lookup(dpath="families/{family}/compares_size", within=config),
        labels=LABELS,
        trend=TREND,
    script:
        "../workflow_scripts/trend_table.py"


rule trend_metrics:
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
