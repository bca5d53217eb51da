# Stage 6 (observations): the paper's figures, from the geometry of stage 3.


rule family_figure:
    input:
        geometry=get_family_geometry,
        handles=get_family_handles,
    output:
        report(
            "results/figures/family/{family}_{dataset}.png",
            caption="../report/family.rst",
            category="Condensation",
            subcategory="Families",
            labels={"family": "{family}", "dataset": "{dataset}"},
        ),
    log:
        "logs/family_figure/{family}_{dataset}.log",
    benchmark:
        "logs/benchmarks/family_figure/{family}_{dataset}.tsv"
    params:
        models=get_family_models,
        labels=model_labels(),
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/family_figure.py"


rule paired_figure:
    input:
        geometry=get_pair_geometry,
        handles=get_pair_handles,
    output:
        report(
            "results/figures/paired/{pair}.png",
            caption="../report/paired.rst",
            category="Condensation",
            subcategory="Pairs",
            labels={"pair": "{pair}"},
        ),
    log:
        "logs/paired_figure/{pair}.log",
    benchmark:
        "logs/benchmarks/paired_figure/{pair}.tsv"
    params:
        spec=get_pair_spec,
        labels=model_labels(),
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/paired_figure.py"


rule dataset_figure:
    input:
        geometry=get_robustness_geometry,
    output:
        report(
            "results/figures/datasets/{family}.png",
            caption="../report/datasets.rst",
            category="Condensation",
            subcategory="Datasets",
            labels={"family": "{family}"},
        ),
    log:
        "logs/dataset_figure/{family}.log",
    benchmark:
        "logs/benchmarks/dataset_figure/{family}.tsv"
    params:
        models=get_family_models,
        datasets=get_robustness_datasets,
        labels=model_labels(),
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/dataset_figure.py"
