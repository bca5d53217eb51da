# The input functions and helpers that rules/evaluation.smk alone uses (Snakemake's lint keeps
# functions out of a file with rules); what several rule files share is in rules/common.smk.

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
        files += expand(
            f"{path.score}{suffix}", study=study, model=model, method=method, seed=seed, checkpoint=checkpoints
        )
    return files


def score_table(table, title):
    """A score table's files: csv, markdown, latex, and the html the report shows."""
    stem = path_with(path.table, table=table)
    html = in_report(f"{stem}.html", table, "Tables", table=title)
    return {"csv": f"{stem}.csv", "markdown": f"{stem}.md", "latex": f"{stem}.tex", "html": html}
