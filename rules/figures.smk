# Stage 6: the paper's figures, from the geometry of stage 3 and the mid-training runs, and the
# findings page.


include: "functions/figures.smk"


# The figures of each study model (path.study_figure's {kind}) that the default job draws: rule
# study_figures' three; a rule that adds one adds its kind (docs/workflow.md, "Adding a figure").
STUDY_FIGURE_KINDS = ["condensation", "trajectory", "losses"]


rule family_figure:
    localrule: True
    input:
        unpack(family_geometry),
    output:
        in_report(path.family_figure, "family", "Condensation", "Families", family="{family}", dataset="{dataset}"),
    log:
        "logs/family_figure/{family}_{dataset}.log",
    benchmark:
        "logs/benchmarks/family_figure/{family}_{dataset}.tsv"
    params:
        **FAMILY_PARAMS,
    script:
        "../workflow_scripts/family_figure.py"


rule paired_figure:
    localrule: True
    input:
        unpack(pair_geometry),
    output:
        figure=in_report(path.paired_figure, "paired", "Condensation", "Pairs", pair="{pair}"),
        csv=f"{path.pair_table}.csv",
        markdown=f"{path.pair_table}.md",
        profiles=f"{path.pair_table}.profiles.npz",
    log:
        "logs/paired_figure/{pair}.log",
    benchmark:
        "logs/benchmarks/paired_figure/{pair}.tsv"
    params:
        spec=lookup(dpath="pairs/{pair}", within=config),
        labels=LABELS,
        trend=TREND,
    script:
        "../workflow_scripts/paired_figure.py"


rule dataset_figure:
    localrule: True
    input:
        geometry=robustness_geometry,
    output:
        in_report(path.dataset_figure, "datasets", "Condensation", "Datasets", family="{family}"),
    log:
        "logs/dataset_figure/{family}.log",
    benchmark:
        "logs/benchmarks/dataset_figure/{family}.tsv"
    params:
        models=lookup(dpath="families/{family}/models", within=config),
        datasets=lookup(dpath="dataset_robustness/{family}", within=config),
        labels=LABELS,
        trend=TREND,
    script:
        "../workflow_scripts/dataset_figure.py"


rule series_figure:
    localrule: True
    input:
        unpack(series_inputs),
    output:
        figure=in_report(path.series_figure, "series", "Condensation", "Over training", series="{series}"),
        csv=f"{path.series_table}.csv",
        markdown=f"{path.series_table}.md",
        profiles=f"{path.series_table}.profiles.npz",
    log:
        "logs/series_figure/{series}.log",
    benchmark:
        "logs/benchmarks/series_figure/{series}.tsv"
    params:
        spec=lookup(dpath="series/{series}", within=config),
        model=lookup(dpath="series/{series}/model", within=config),
        label=lambda wildcards: LABELS[config["series"][wildcards.series]["model"]],
        trend=TREND,
    script:
        "../workflow_scripts/series_figure.py"


wildcard_constraints:
    band=_alternatives(SERIES_BANDS),


rule series_band:
    localrule: True
    input:
        profiles=lambda wildcards: expand(f"{path.series_table}.profiles.npz", series=SERIES_BANDS[wildcards.band]),
    output:
        figure=in_report(path.series_band_figure, "series_band", "Condensation", "Over training", band="{band}"),
        csv=path.series_band_table,
    log:
        "logs/series_band/{band}.log",
    benchmark:
        "logs/benchmarks/series_band/{band}.tsv"
    params:
        series=lambda wildcards: SERIES_BANDS[wildcards.band],
        label=lambda wildcards: LABELS[config["series"][SERIES_BANDS[wildcards.band][0]]["model"]],
        dataset=lambda wildcards: config["series"][SERIES_BANDS[wildcards.band][0]]["dataset"],
    script:
        "../workflow_scripts/series_band.py"


rule study_figures:
    localrule: True
    input:
        trajectory=path.trajectory,
        losses=path.losses,
        grid=get_figure_row_geometry,
    output:
        grid=study_figure("condensation", "study_grid", "condensation by checkpoint (Fig. 6)"),
        trajectory=study_figure("trajectory", "study_trajectory", "depth trend over training"),
        losses=study_figure("losses", "study_losses", "losses"),
    log:
        "logs/study_figures/{study}/{model}.log",
    benchmark:
        "logs/benchmarks/study_figures/{study}/{model}.tsv"
    params:
        label=lambda wildcards: LABELS[wildcards.model],
        methods=lambda wildcards: list(config[wildcards.study]["methods"]),
        grid_methods=lookup(dpath="{study}/figure_rows", within=config),
        trend=TREND,
    script:
        "../workflow_scripts/study_figures.py"


rule findings:
    localrule: True
    input:
        unpack(findings_score_inputs),
        trend_profiles=[table.replace(".csv", ".profiles.npz") for table in trend_tables()],
        pair_profiles=expand(f"{path.pair_table}.profiles.npz", pair=config["pairs"]),
        series_profiles=expand(f"{path.series_table}.profiles.npz", series=config["series"]),
        effects=every_study_model(f"{path.effects}.csv"),
        pooled_effects=POOLED_EFFECTS["paths"],
        trajectories=every_study_model(path.trajectory),
        losses=every_study_model(path.losses),  # the tokens claim: each run's validation loss by tokens
        similarity=expand(path.similarity_table, comparison=config["similarity"]),
    output:
        markdown=in_report(path.findings, "findings", "Findings", page="the paper's claims, checked"),
        json=path_with(path.metrics, name="findings.json"),
        summary=path_with(path.metrics, name="summary.json"),  # the main numbers: dvc metrics, dvc exp show
    log:
        "logs/findings.log",
    benchmark:
        "logs/benchmarks/findings.tsv"
    params:
        design=FINDINGS_DESIGN,
    script:
        "../workflow_scripts/findings.py"
