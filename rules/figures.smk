# Stage 6: the paper's figures, from the geometry of stage 3 and the mid-training runs, and the
# findings page.

from condensation.config.plan import score_tables, series_model_name

# The figures of each study model (path.study_figure's {kind}) that the default job draws: rule
# study_figures' three; a rule that adds one adds its kind (docs/workflow.md, "Adding a figure").
STUDY_FIGURE_KINDS = ["condensation", "trajectory", "losses"]

# Models whose weights this workflow draws (pre-trained, initialised or trained in a study here):
# one run of them leaves the training noise unmeasured; any other model is one given checkpoint.
DRAWN_MODELS = [name for name, spec in MODELS.items() if spec.source in ("pretrain", "init", "run")]


def series_group(spec):
    """Which runs the findings page reads together for the Fig. 4 claim: the pre-training runs of
    one family done here (every width and seed: draws of one procedure), else the series' model."""
    if spec["model"] in DRAWN_MODELS:
        for family, members in config["families"].items():
            if spec["model"] in members["models"]:
                return f"{family}, pre-trained here"
    return LABELS[spec["model"]]


SERIES_GROUPS = {name: series_group(spec) for name, spec in config["series"].items()}


def pair_geometry(wildcards):
    """The first members, then the second members, then the reference row's (where it has one)."""
    spec = config["pairs"][wildcards.pair]
    models = spec["first"] + spec["second"] + spec.get("reference", [])
    return {
        "geometry": expand(path.geometry, model=models, dataset=spec["dataset"]),
        "handles": expand(path.handle, model=models),
    }


def robustness_geometry(wildcards):
    """Dataset-major: every model of the first dataset, then of the next."""
    models = config["families"][wildcards.family]["models"]
    datasets = config["dataset_robustness"][wildcards.family]
    return expand(path.geometry, dataset=datasets, model=models)


def series_inputs(wildcards):
    """A hub series: the geometry of each revision's model; a pretrain series: its run's
    checkpoint geometry and checkpoint index."""
    spec = config["series"][wildcards.series]
    if MODELS[spec["model"]].source == "pretrain":
        return {
            "run_geometry": fill(path.pretrain_geometry, model=spec["model"], dataset=spec["dataset"]),
            "index": fill(path.pretrain_run.index, model=spec["model"]),
        }
    models = [series_model_name(wildcards.series, point["label"]) for point in spec["checkpoints"]]
    return {"geometry": expand(path.geometry, model=models, dataset=spec["dataset"])}


def get_figure_row_geometry(wildcards):
    """Fig. 6 rows: each row's method in the first seed it was run with."""
    seeds = {}
    for method, seed in model_runs(wildcards):
        seeds.setdefault(method, seed)
    rows = config[wildcards.study]["figure_rows"]
    return expand_runs(path.checkpoint_geometry, wildcards.study, wildcards.model, [(m, seeds[m]) for m in rows])


def study_figure(kind, caption, figure):
    """One of a study model's figures (``kind``), in the report under its study."""
    file = fill(path.study_figure, kind=kind)
    return in_report(file, caption, "Training studies", "{study}", model="{model}", figure=figure)


def every_study_model(template):
    """``template`` filled for every model of every study that trains."""
    return [template.format(study=study, model=model) for study in studies(config) for model in config[study]["models"]]


def findings_score_inputs(wildcards):
    """Tables 2 and 4, where the config scores."""
    if not config["evaluation"]["tasks"]:
        return {"score_tables": []}
    tables = [table for table in score_tables(config) if table in ("table2", "table4")]
    return {"score_tables": expand(f"{path.table}.csv", table=tables)}


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
        trajectories=every_study_model(path.trajectory),
        similarity=expand(path.similarity_table, comparison=config["similarity"]),
    output:
        markdown=in_report(path.findings, "findings", "Findings", page="the paper's claims, checked"),
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
