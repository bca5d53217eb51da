# Stages 5-6: lm-eval scores of each mid-trained model before mid-training and of every run's
# selected checkpoint (lowest validation loss), then the paper's Tables 2 and 3 (mid-training)
# and Table 4 (pre-training from scratch).


include: "functions/evaluation.smk"


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
    log:
        "logs/evaluate/{study}/{model}/{method}/seed{seed}/{checkpoint}.log",
    benchmark:
        "logs/benchmarks/evaluate/{study}/{model}/{method}/seed{seed}/{checkpoint}.tsv"
    priority: PRIORITY.after_training
    wildcard_constraints:
        # with every checkpoint scored, the selected one is picked from those (pick_selected_score)
        checkpoint=STEP_PATTERN if config["evaluation"]["checkpoints"] == "all" else f"selected|{STEP_PATTERN}",
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
                f"{path.score}{{suffix}}",
                **wildcards,
                checkpoint=study_checkpoints(config, wildcards.study)[1:],
                suffix=list(SCORE_FILES.values()),
            ),
        output:
            multiext(path_with(path.score, checkpoint="selected"), **SCORE_FILES),
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
        losses=expand(path.losses, study="midtrain", model=config["midtrain"]["models"]),  # tokens to CE's loss
    output:
        **score_table("table2", "Table 2: downstream scores"),
        metrics=path_with(path.metrics, name="scores.json"),
        plot=path_with(path.metrics, name="scores.csv"),
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
        losses=expand(path.losses, study="scratch", model=config["scratch"]["models"]),  # tokens to CE's loss
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
        path_with(path.table, table="{study}_scores_by_step") + ".csv",
    log:
        "logs/scores_by_step/{study}.log",
    benchmark:
        "logs/benchmarks/scores_by_step/{study}.tsv"
    params:
        metric=config["evaluation"]["metric"],
    script:
        "../workflow_scripts/scores_by_step.py"
