# Stage 3: per-layer cosine geometry of every (model, dataset), and its trend with depth.


rule extract:
    input:
        handle="models/{model}/handle.json",
        samples="data/samples/{dataset}.jsonl",
    output:
        "results/geometry/{model}/{dataset}.npz",
    log:
        "logs/extract/{model}/{dataset}.log",
    benchmark:
        "logs/benchmarks/extract/{model}/{dataset}.tsv"
    params:
        sampling=SAMPLING,
        extraction=EXTRACTION,
    threads: 4
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/extract.py"


rule trend_table:
    input:
        geometry=get_family_geometry,
        handles=get_family_handles,
    output:
        csv="results/tables/trend/{family}_{dataset}.csv",
        markdown="results/tables/trend/{family}_{dataset}.md",
    log:
        "logs/trend_table/{family}_{dataset}.log",
    benchmark:
        "logs/benchmarks/trend_table/{family}_{dataset}.tsv"
    params:
        models=get_family_models,
        labels=model_labels(),
        trend=TREND,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/trend_table.py"


rule trend_metrics:
    input:
        tables=family_tables(),
        geometry=all_geometry(),
    output:
        metrics="results/metrics/trend.json",
        layer_means="results/metrics/layer_means.csv",
    log:
        "logs/trend_metrics.log",
    benchmark:
        "logs/benchmarks/trend_metrics.tsv"
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/trend_metrics.py"
