# Stage 6: the paper's figures, from the geometry of stage 3 and the mid-training runs.


rule family_figure:
    input:
        unpack(family_geometry),
    output:
        report(
            path.family_figure,
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
        models=lookup(dpath="families/{family}/models", within=config),
        compares_size=lookup(dpath="families/{family}/compares_size", within=config),
        labels=LABELS,
        trend=TREND,
    script:
        "../workflow_scripts/family_figure.py"


rule paired_figure:
    input:
        unpack(pair_geometry),
    output:
        figure=report(
            path.paired_figure,
            caption="../report/paired.rst",
            category="Condensation",
            subcategory="Pairs",
            labels={"pair": "{pair}"},
        ),
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
    input:
        geometry=robustness_geometry,
    output:
        report(
            path.dataset_figure,
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
        models=lookup(dpath="families/{family}/models", within=config),
        datasets=lookup(dpath="dataset_robustness/{family}", within=config),
        labels=LABELS,
        trend=TREND,
    script:
        "../workflow_scripts/dataset_figure.py"


rule series_figure:
    input:
        unpack(series_inputs),
    output:
        figure=report(
            path.series_figure,
            caption="../report/series.rst",
            category="Condensation",
            subcategory="Over training",
            labels={"series": "{series}"},
        ),
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


rule study_figures:
    input:
        trajectory=path.trajectory,
        losses=path.losses,
        grid=get_figure_row_geometry,
    output:
        grid=report(
            fill(path.study_figure, kind="condensation"),
            caption="../report/study_grid.rst",
            category="Training studies",
            subcategory="{study}",
            labels={"model": "{model}", "figure": "condensation by checkpoint (Fig. 6)"},
        ),
        trajectory=report(
            fill(path.study_figure, kind="trajectory"),
            caption="../report/study_trajectory.rst",
            category="Training studies",
            subcategory="{study}",
            labels={"model": "{model}", "figure": "depth trend over training"},
        ),
        losses=report(
            fill(path.study_figure, kind="losses"),
            caption="../report/study_losses.rst",
            category="Training studies",
            subcategory="{study}",
            labels={"model": "{model}", "figure": "losses"},
        ),
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
    input:
        unpack(findings_score_inputs),
        trend_profiles=[table.replace(".csv", ".profiles.npz") for table in trend_tables()],
        pair_profiles=expand(f"{path.pair_table}.profiles.npz", pair=config["pairs"]),
        series_profiles=expand(f"{path.series_table}.profiles.npz", series=config["series"]),
        effects=[f"{path.effects}.csv".format(study=s, model=m) for s in studies(config) for m in config[s]["models"]],
        trajectories=[path.trajectory.format(study=s, model=m) for s in studies(config) for m in config[s]["models"]],
        similarity=expand(path.similarity_table, comparison=config["similarity"]),
    output:
        markdown=report(
            path.findings,
            caption="../report/findings.rst",
            category="Findings",
            labels={"page": "the paper's claims, checked"},
        ),
        json=fill(path.metrics, name="findings.json"),
    log:
        "logs/findings.log",
    benchmark:
        "logs/benchmarks/findings.tsv"
    params:
        pair_labels={name: spec["labels"] for name, spec in config["pairs"].items()},
        families={name: spec["datasets"] for name, spec in config["families"].items()},
        uncounted_families=[name for name, spec in config["families"].items() if not spec["compares_size"]],
        drawn_models=DRAWN_MODELS,
        series_groups=SERIES_GROUPS,
        drawn_series=[name for name, spec in config["series"].items() if spec["model"] in DRAWN_MODELS],
        tasks=list(config["evaluation"]["tasks"]),
        counted_tasks=config["evaluation"]["counted_tasks"],
        # a comparison of a pair (distilled students and their teacher) or of a study's runs with wider models
        similarity_kinds={name: "pair" if "pair" in spec else "study" for name, spec in config["similarity"].items()},
    script:
        "../workflow_scripts/findings.py"
