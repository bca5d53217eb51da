# The input functions and helpers that rules/figures.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

from condensation.config.plan import score_tables, series_bands, series_model_name
from condensation.evaluation.score_files import SCORE_FILES

# Models that are one draw of a training procedure: those whose weights this workflow draws
# (pre-trained, initialised or trained in a study here) and published runs of a suite of seeds (a
# hub model with `seed:`, PolyPythia's). One run of them leaves the training noise unmeasured;
# any other model is one given checkpoint.
SEEDED_MODELS = [
    name
    for name, spec in MODELS.items()
    if spec.source in ("pretrain", "init", "run") or (spec.source == "hub" and spec.seed is not None)
]


def series_group(spec):
    """Which runs the findings page reads together for the Fig. 4 claim: the pre-training runs of
    one family done here (every width and seed: draws of one procedure), else the series' model's
    label (a published suite's seeds of one size share it)."""
    if MODELS[spec["model"]].source == "pretrain":
        for family, members in config["families"].items():
            if spec["model"] in members["models"]:
                return f"{family}, pre-trained here"
    return LABELS[spec["model"]]


SERIES_GROUPS = {name: series_group(spec) for name, spec in config["series"].items()}
# Fig. 4 with its seeds' band: band -> the series of one configuration's seeds (models sharing a label)
SERIES_BANDS = series_bands(config["series"], LABELS)


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
            "run_geometry": path_with(path.pretrain_geometry, model=spec["model"], dataset=spec["dataset"]),
            "index": path_with(path.pretrain_run.index, model=spec["model"]),
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
    file = path_with(path.study_figure, kind=kind)
    return in_report(file, caption, "Training studies", "{study}", model="{model}", figure=figure)


def pooled_effect_files():
    """Each study's pooled effects (POOLED_BASES), and what the findings call them and the
    per-model effects each replaces: {"paths": [...], "names": {name: [member names]}}."""
    paths, names = [], {}
    for study, bands in POOLED_BASES.items():
        for band, models in bands.items():
            paths.append(f"{path_with(path.pooled_effects, study=study, bases=band)}.csv")
            names[f"{study}, {LABELS[models[0]]} ({len(models)} base runs pooled)"] = [
                f"{study}, {model}" for model in models
            ]
    return {"paths": paths, "names": names}


POOLED_EFFECTS = pooled_effect_files()


def every_study_model(template):
    """``template`` filled for every model of every study that trains."""
    return [template.format(study=study, model=model) for study in studies(config) for model in config[study]["models"]]


def findings_score_inputs(wildcards):
    """Tables 2 and 4, and the score record of every trained run at its scored checkpoint, where
    the config scores."""
    if not config["evaluation"]["tasks"]:
        return {"score_tables": [], "run_scores": []}
    tables = [table for table in score_tables(config) if table in ("table2", "table4")]
    scored = [study for study, table in (("midtrain", "table2"), ("scratch", "table4")) if table in tables]
    runs = [
        path_with(path.score, study=study, model=model, method=method, seed=seed, checkpoint="selected")
        + SCORE_FILES["record"]
        for study in scored
        for model, method, seed in STUDY_RUNS[study]
    ]
    return {"score_tables": expand(f"{path.table}.csv", table=tables), "run_scores": runs}


# What the findings page is told of the config, as one parameter of its rule (claims.Design reads it).
FINDINGS_DESIGN = {
    "pair_labels": {name: spec["labels"] for name, spec in config["pairs"].items()},
    "families": {name: spec["datasets"] for name, spec in config["families"].items()},
    "uncounted_families": [name for name, spec in config["families"].items() if not spec["compares_size"]],
    "seeded_models": SEEDED_MODELS,
    "series_groups": SERIES_GROUPS,
    "seeded_series": [name for name, spec in config["series"].items() if spec["model"] in SEEDED_MODELS],
    "pooled": POOLED_EFFECTS["names"],
    "tasks": list(config["evaluation"]["tasks"]),
    "counted_tasks": config["evaluation"]["counted_tasks"],
    # a comparison of a pair (distilled students and their teacher) or of a study's runs with wider models
    "similarity_kinds": {name: "pair" if "pair" in spec else "study" for name, spec in config["similarity"].items()},
    # the training settings every arm of a study shares (the page says what compared arms match)
    "matched": {study: dict(config[study]["train"]) for study in studies(config)},
}
