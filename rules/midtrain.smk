# Stages 4-5 (intervention): mid-training with cross-entropy, the dispersion loss, its
# alternatives and the baselines, over models x methods x seeds; condensation re-measured on
# every checkpoint; Fig. 6, the trajectory over training and the loss curves.


rule pack_midtrain_data:
    input:
        unpack(get_midtrain_corpus_input),
        handle="models/{model}/handle.json",
    output:
        "runs/midtrain/{model}/blocks.npz",
    log:
        "logs/pack_midtrain_data/{model}.log",
    benchmark:
        "logs/benchmarks/pack_midtrain_data/{model}.tsv"
    params:
        dataset=MIDTRAIN["dataset"],
        spec=DATASETS.get(MIDTRAIN["dataset"]),
        block_size=MIDTRAIN["train"]["block_size"],
        validation_fraction=MIDTRAIN["validation_fraction"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/pack_training_data.py"


rule midtrain:
    input:
        handle="models/{model}/handle.json",
        blocks="runs/midtrain/{model}/blocks.npz",
    output:
        directory("runs/midtrain/{model}/{method}/seed{seed}/final"),
    log:
        "logs/midtrain/{model}/{method}/seed{seed}.log",
    benchmark:
        "logs/benchmarks/midtrain/{model}/{method}/seed{seed}.tsv"
    params:
        launcher=TRAINING_LAUNCHER,
        run_dir=get_midtrain_run_dir,
        method=get_method_json,
        settings=json.dumps(MIDTRAIN["train"], sort_keys=True),
    threads: 4
    resources:
        gpu=MIDTRAIN["gpus_per_run"],
        mem_mb=32000,
        runtime=480,
    conda:
        "../envs/condensation.yaml"
    shell:
        "{params.launcher} --handle {input.handle} --blocks {input.blocks}"
        " --run-dir {params.run_dir} --seed {wildcards.seed} --threads {threads}"
        " --method {params.method:q} --settings {params.settings:q} > {log} 2>&1"


rule measure_checkpoints:
    input:
        final="runs/midtrain/{model}/{method}/seed{seed}/final",
        samples=f"data/samples/{MIDTRAIN['geometry_dataset']}.jsonl",
    output:
        directory("results/midtrain/geometry/{model}/{method}/seed{seed}"),
    log:
        "logs/measure_checkpoints/{model}/{method}/seed{seed}.log",
    benchmark:
        "logs/benchmarks/measure_checkpoints/{model}/{method}/seed{seed}.tsv"
    params:
        run_dir=get_midtrain_run_dir,
        sampling=SAMPLING,
        extraction=EXTRACTION,
        trend=TREND,
    threads: 4
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=60,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/measure_checkpoints.py"


rule midtrain_tables:
    input:
        runs=get_model_run_finals,
        geometry=get_model_run_geometry,
    output:
        trajectory="results/midtrain/{model}/trajectory.csv",
        losses="results/midtrain/{model}/losses.csv",
    log:
        "logs/midtrain_tables/{model}.log",
    benchmark:
        "logs/benchmarks/midtrain_tables/{model}.tsv"
    params:
        methods=get_model_run_methods,
        seeds=get_model_run_seeds,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/midtrain_tables.py"


rule midtrain_figures:
    input:
        trajectory="results/midtrain/{model}/trajectory.csv",
        losses="results/midtrain/{model}/losses.csv",
        grid=get_figure_row_geometry,
    output:
        grid=report(
            "results/figures/midtrain/{model}_condensation.png",
            caption="../report/midtrain_grid.rst",
            category="Mid-training",
            labels={"model": "{model}", "figure": "condensation by checkpoint"},
        ),
        trajectory=report(
            "results/figures/midtrain/{model}_trajectory.png",
            caption="../report/midtrain_trajectory.rst",
            category="Mid-training",
            labels={"model": "{model}", "figure": "depth trend over training"},
        ),
        losses=report(
            "results/figures/midtrain/{model}_losses.png",
            caption="../report/midtrain_losses.rst",
            category="Mid-training",
            labels={"model": "{model}", "figure": "losses"},
        ),
    log:
        "logs/midtrain_figures/{model}.log",
    benchmark:
        "logs/benchmarks/midtrain_figures/{model}.tsv"
    params:
        label=get_model_label,
        methods=list(MIDTRAIN["methods"]),
        grid_methods=MIDTRAIN["figure_rows"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/midtrain_figures.py"


rule midtrain_metrics:
    input:
        expand("results/midtrain/{model}/trajectory.csv", model=MIDTRAIN["models"]),
    output:
        "results/metrics/midtrain.json",
    log:
        "logs/midtrain_metrics.log",
    benchmark:
        "logs/benchmarks/midtrain_metrics.tsv"
    params:
        models=MIDTRAIN["models"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/midtrain_metrics.py"
