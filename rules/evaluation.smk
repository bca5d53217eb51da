# Stages 5-6: lm-eval scores of each mid-trained model before mid-training and of every run's
# selected checkpoint (lowest validation loss), then the paper's Tables 2 and 3 (mid-training)
# and Table 4 (pre-training from scratch).

from condensation.config.datasets import task_text_datasets
from condensation.config.plan import ablation_grid, evaluation_tasks, study_checkpoints
from condensation.evaluation.score_files import SCORE_FILES

# lm-eval tasks whose data lives on the Hub (every task that is not built here)
HUB_TASKS = [task for task in config["evaluation"]["tasks"] if task not in config["evaluation"]["local_tasks"]]
# The text of each local task's corpus (a dataset, or a built-in corpus read whole): its entry as
# plain data for the job, and what reading it needs.
TASK_TEXTS = task_text_datasets(config)
# The local tasks as their build reads them: a permission to overlap training text changes no item.
LOCAL_TASK_SPECS = {
    name: {key: value for key, value in spec.items() if key not in ("allow_overlap", "overlap_reason")}
    for name, spec in config["evaluation"]["local_tasks"].items()
}
TASK_TEXT_INPUTS = {name: text_inputs(DatasetSpec.from_config(name, entry)) for name, entry in TASK_TEXTS.items()}
# What scoring depends on, apart from the tasks: a change elsewhere in `evaluation` re-scores nothing.
EVAL_SETTINGS = {key: config["evaluation"][key] for key in ("batch_size", "limit", "seed", "metric")}
# What every score table reads of the evaluation section
SCORED = {"tasks": list(config["evaluation"]["tasks"]), "metric": config["evaluation"]["metric"]}


def task_texts(wildcards):
    """Every file or folder of text the local tasks are built from."""
    files = (files for inputs in TASK_TEXT_INPUTS.values() for files in inputs.values())
    return sorted({file for entry in files for file in ([entry] if isinstance(entry, str) else entry)})


def eval_task_inputs(wildcards):
    """The built offline tasks, and the fetched data of hub tasks, when the config has any."""
    inputs = {"tasks": path.eval_tasks} if config["evaluation"]["local_tasks"] else {}
    return inputs | ({"hub_tasks": path.hub_tasks} if HUB_TASKS else {})


def get_eval_tasks(wildcards):
    return evaluation_tasks(config, wildcards.model)


def score_files(study, checkpoints=("selected",), suffix=SCORE_FILES["record"]):
    """The score records (or, by ``suffix``, another of a score's files) of the given checkpoints
    of every run of a study; for mid-training, also of each model before it."""
    files = []
    if study == "midtrain":
        files += expand(f"{path.pretrained_score}{suffix}", study=study, model=config[study]["models"])
    for model, method, seed in STUDY_RUNS[study]:
        files += expand(f"{path.score}{suffix}", study=study, model=model, method=method, seed=seed, checkpoint=checkpoints)
    return files


def score_table(table, title):
    """A score table's files: csv, markdown, latex, and the html the report shows."""
    stem = fill(path.table, table=table)
    html = in_report(f"{stem}.html", table, "Tables", table=title)
    return {"csv": f"{stem}.csv", "markdown": f"{stem}.md", "latex": f"{stem}.tex", "html": html}


rule build_eval_tasks:
    input:
        texts=task_texts,
    output:
        directory(path.eval_tasks),
    log:
        "logs/build_eval_tasks.log",
    benchmark:
        "logs/benchmarks/build_eval_tasks.tsv"
    params:
        specs=LOCAL_TASK_SPECS,
        texts=TASK_TEXTS,
        text_dirs={name: inputs.get("corpus") for name, inputs in TASK_TEXT_INPUTS.items()},
    script:
        "../workflow_scripts/build_eval_tasks.py"


rule fetch_eval_tasks:
    localrule: True
    output:
        path.hub_tasks,
    log:
        "logs/fetch_eval_tasks.log",
    benchmark:
        "logs/benchmarks/fetch_eval_tasks.tsv"
    params:
        tasks=HUB_TASKS,
    script:
        "../workflow_scripts/fetch_eval_tasks.py"


rule evaluate_pretrained:
    input:
        unpack(eval_task_inputs),
        handle=path.handle,
    output:
        multiext(path.pretrained_score, **SCORE_FILES),
    log:
        "logs/evaluate/{study}/{model}/pretrained.log",
    benchmark:
        "logs/benchmarks/evaluate/{study}/{model}/pretrained.tsv"
    priority: PRIORITY.after_training
    params:
        tasks=get_eval_tasks,
        settings=EVAL_SETTINGS,
    threads: 1
    resources:
        **gpu_job(120),
    script:
        "../workflow_scripts/evaluate.py"


rule evaluate_checkpoint:
    input:
        unpack(eval_task_inputs),
        index=path.study_run.index,
        handle=path.handle,  # its size sets the GPUs
    output:
        multiext(path.score, **SCORE_FILES),
    wildcard_constraints:
        # with every checkpoint scored, the selected one is picked from those (pick_selected_score)
        checkpoint=STEP_PATTERN if config["evaluation"]["checkpoints"] == "all" else f"selected|{STEP_PATTERN}",
    log:
        "logs/evaluate/{study}/{model}/{method}/seed{seed}/{checkpoint}.log",
    benchmark:
        "logs/benchmarks/evaluate/{study}/{model}/{method}/seed{seed}/{checkpoint}.tsv"
    priority: PRIORITY.after_training
    params:
        tasks=get_eval_tasks,
        settings=EVAL_SETTINGS,
    threads: 1
    resources:
        **gpu_job(120),
    script:
        "../workflow_scripts/evaluate.py"


# With every checkpoint scored, a run's selected checkpoint is not scored again: its scores are
# copied from its step's.
if config["evaluation"]["checkpoints"] == "all":

    rule pick_selected_score:
        input:
            index=path.study_run.index,
            scores=lambda wildcards: expand(
                f"{path.score}{{suffix}}", **wildcards, checkpoint=study_checkpoints(config, wildcards.study)[1:],
                suffix=list(SCORE_FILES.values()),
            ),
        output:
            multiext(fill(path.score, checkpoint="selected"), **SCORE_FILES),
        log:
            "logs/pick_selected_score/{study}/{model}/{method}/seed{seed}.log",
        benchmark:
            "logs/benchmarks/pick_selected_score/{study}/{model}/{method}/seed{seed}.tsv"
        script:
            "../workflow_scripts/pick_selected_score.py"


rule table2:
    localrule: True
    input:
        scores=score_files("midtrain"),
        item_rows=score_files("midtrain", suffix=SCORE_FILES["item_rows"]),
    output:
        **score_table("table2", "Table 2: downstream scores"),
        metrics=fill(path.metrics, name="scores.json"),
        plot=fill(path.metrics, name="scores.csv"),
    log:
        "logs/table2.log",
    benchmark:
        "logs/benchmarks/table2.tsv"
    params:
        **SCORED,
        methods=list(config["midtrain"]["methods"]),
        reference=config["evaluation"]["reference"],
        counted_tasks=config["evaluation"]["counted_tasks"],
    script:
        "../workflow_scripts/score_tables.py"


rule table3:
    localrule: True
    input:
        scores=score_files("midtrain"),
    output:
        **score_table("table3", "Table 3: dispersion ablation"),
    log:
        "logs/table3.log",
    benchmark:
        "logs/benchmarks/table3.tsv"
    params:
        **SCORED,
        grid=ablation_grid(config, "midtrain"),
        models=config["midtrain"]["ablation"]["models"] or config["midtrain"]["models"],
    script:
        "../workflow_scripts/score_tables.py"


rule table4:
    localrule: True
    input:
        scores=score_files("scratch"),
        item_rows=score_files("scratch", suffix=SCORE_FILES["item_rows"]),
        trajectories=expand(path.trajectory, study="scratch", model=config["scratch"]["models"]),
    output:
        **score_table("table4", "Table 4: pre-training with dispersion"),
    log:
        "logs/table4.log",
    benchmark:
        "logs/benchmarks/table4.tsv"
    params:
        **SCORED,
        models=config["scratch"]["models"],
        methods=list(config["scratch"]["methods"]),
        counted_tasks=config["evaluation"]["counted_tasks"],
    script:
        "../workflow_scripts/score_tables.py"


rule scores_by_step:
    localrule: True
    input:
        scores=lambda wildcards: score_files(wildcards.study, study_checkpoints(config, wildcards.study)[1:]),
    output:
        fill(path.table, table="{study}_scores_by_step") + ".csv",
    log:
        "logs/scores_by_step/{study}.log",
    benchmark:
        "logs/benchmarks/scores_by_step/{study}.tsv"
    params:
        metric=config["evaluation"]["metric"],
    script:
        "../workflow_scripts/scores_by_step.py"
