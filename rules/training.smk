# Stages 4-5 (intervention): training studies (mid-training, and pre-training from scratch) with
# cross-entropy, the dispersion loss, its alternatives and the baselines, over models x methods x
# seeds; condensation re-measured on every checkpoint; their tables (figures: figures.smk).


include: "functions/training.smk"


rule pack_study_data:
    input:
        unpack(lambda wildcards: dataset_inputs(config[wildcards.study]["dataset"])),
        handle=path.handle,
    output:
        path.study_blocks,
    log:
        "logs/pack_study_data/{study}/{model}.log",
    benchmark:
        "logs/benchmarks/pack_study_data/{study}/{model}.tsv"
    priority: PRIORITY.training_input
    params:
        dataset=lookup(dpath="{study}/dataset", within=config),
        spec=lambda wildcards: config["datasets"][config[wildcards.study]["dataset"]],
        block_size=lookup(dpath="{study}/train/block_size", within=config),
        validation_fraction=lookup(dpath="{study}/validation_fraction", within=config),
    script:
        "../workflow_scripts/pack_training_data.py"


rule plan_study_run:
    localrule: True
    output:
        path.study_run.plan,
    log:
        "logs/plan_study_run/{study}/{model}/{method}/seed{seed}.log",
    benchmark:
        "logs/benchmarks/plan_study_run/{study}/{model}/{method}/seed{seed}.tsv"
    priority: PRIORITY.training_input
    params:
        method=run_method,
        train=lookup(dpath="{study}/train", within=config),
        seed=run_seed,
        # a run from an init model draws its own initial weights: a seed varies them too
        reinitialise=lambda wildcards: MODELS[wildcards.model].source == "init",
    script:
        "../workflow_scripts/plan_run.py"


rule train_study_run:
    input:
        unpack(teacher_inputs),
        plan=path.study_run.plan,
        handle=path.handle,
        blocks=path.study_blocks,
    output:
        final=directory(path.study_run.final),
        index=path.study_run.index,
        log=path.study_run.log,
    log:
        "logs/{study}/{model}/{method}/seed{seed}.log",
    benchmark:
        "logs/benchmarks/{study}/{model}/{method}/seed{seed}.tsv"
    priority: PRIORITY.training
    params:
        python=PYTHON,
        launcher=lambda wildcards: launcher(wildcards.study),
        spread=lambda wildcards: spread(config[wildcards.study]),
        teacher=teacher_argument,
    threads: 1
    resources:
        **training_resources(config, lambda wildcards: wildcards.study),
        mem_mb=32000,
        runtime=480,
    shell:
        # exec: a scheduler's SIGTERM reaches the run, no shell dies of it before the run has saved;
        # GPUs of its own on a machine that runs jobs itself (condensation/runtime/gpus.py), then the run
        "exec {params.python} -m condensation.runtime.gpus {resources.gpu} -- {params.launcher} --plan {input.plan}"
        " --handle {input.handle} --blocks {input.blocks} {params.teacher} --threads {threads} > {log} 2>&1"


rule measure_checkpoints:
    input:
        index=path.study_run.index,
        handle=path.handle,  # its size sets the GPUs
        samples=lambda wildcards: path_with(path.samples, dataset=config[wildcards.study]["geometry_dataset"]),
    output:
        directory(path.checkpoint_geometry),
    log:
        "logs/measure_checkpoints/{study}/{model}/{method}/seed{seed}.log",
    benchmark:
        "logs/benchmarks/measure_checkpoints/{study}/{model}/{method}/seed{seed}.tsv"
    priority: PRIORITY.after_training
    params:
        **MEASURING,
    threads: 1
    resources:
        **gpu_job(60),
    script:
        "../workflow_scripts/measure_checkpoints.py"


rule study_tables:
    localrule: True
    input:
        unpack(get_model_run_files),
    output:
        trajectory=path.trajectory,
        profiles=path.trajectory.replace(".csv", ".profiles.npz"),
        losses=path.losses,
        effects=multiext(path.effects, ".csv", ".md"),
    log:
        "logs/study_tables/{study}/{model}.log",
    benchmark:
        "logs/benchmarks/study_tables/{study}/{model}.tsv"
    params:
        runs=model_runs,
        trend=TREND,
    script:
        "../workflow_scripts/study_tables.py"


rule pooled_effects:
    localrule: True
    input:
        profiles=lambda wildcards: expand(
            path.trajectory.replace(".csv", ".profiles.npz"),
            study=wildcards.study,
            model=POOLED_BASES[wildcards.study][wildcards.bases],
        ),
    output:
        csv=f"{path.pooled_effects}.csv",
        markdown=f"{path.pooled_effects}.md",
    log:
        "logs/pooled_effects/{study}/{bases}.log",
    benchmark:
        "logs/benchmarks/pooled_effects/{study}/{bases}.tsv"
    params:
        bases=lambda wildcards: POOLED_BASES[wildcards.study][wildcards.bases],
    script:
        "../workflow_scripts/pooled_effects.py"


rule study_metrics:
    localrule: True
    input:
        trajectories=lambda wildcards: expand(
            path.trajectory, study=wildcards.study, model=config[wildcards.study]["models"]
        ),
        losses=lambda wildcards: expand(path.losses, study=wildcards.study, model=config[wildcards.study]["models"]),
    output:
        metrics=path_with(path.metrics, name="{study}.json"),
        training=path_with(path.metrics, name="{study}_training.csv"),
        checkpoints=path_with(path.metrics, name="{study}_checkpoints.csv"),
    log:
        "logs/study_metrics/{study}.log",
    benchmark:
        "logs/benchmarks/study_metrics/{study}.tsv"
    params:
        models=lookup(dpath="{study}/models", within=config),
    script:
        "../workflow_scripts/study_metrics.py"
