# Stage 5-6: lm-eval scores of each mid-trained model before mid-training and of every run's
# selected checkpoint (lowest validation loss), then the paper's Tables 2 and 3.


rule build_eval_tasks:
    input:
        unpack(get_eval_corpora),
    output:
        "data/eval_tasks/tasks.json",
    log:
        "logs/build_eval_tasks.log",
    benchmark:
        "logs/benchmarks/build_eval_tasks.tsv"
    params:
        specs=EVALUATION["local_tasks"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/build_eval_tasks.py"


rule evaluate_pretrained:
    input:
        unpack(lambda wildcards: eval_task_inputs()),
        handle="models/{model}/handle.json",
    output:
        "results/scores/{model}/pretrained.json",
    log:
        "logs/evaluate/{model}/pretrained.log",
    benchmark:
        "logs/benchmarks/evaluate/{model}/pretrained.tsv"
    params:
        tasks=get_eval_tasks,
        settings=EVAL_SETTINGS,
    threads: 4
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=120,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/evaluate.py"


rule evaluate_checkpoint:
    input:
        unpack(lambda wildcards: eval_task_inputs()),
        final="runs/midtrain/{model}/{method}/seed{seed}/final",
    output:
        "results/scores/{model}/{method}/seed{seed}/{checkpoint}.json",
    log:
        "logs/evaluate/{model}/{method}/seed{seed}/{checkpoint}.log",
    benchmark:
        "logs/benchmarks/evaluate/{model}/{method}/seed{seed}/{checkpoint}.tsv"
    params:
        run_dir=get_midtrain_run_dir,
        tasks=get_eval_tasks,
        settings=EVAL_SETTINGS,
    threads: 4
    resources:
        gpu=1,
        mem_mb=16000,
        runtime=120,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/evaluate.py"


rule table2:
    input:
        scores=score_files(),
    output:
        multiext("results/tables/table2", ".csv", ".md", ".tex"),
        html=report(
            "results/tables/table2.html",
            caption="../report/table2.rst",
            category="Tables",
            labels={"table": "Table 2: downstream scores"},
        ),
        metrics="results/metrics/scores.json",
        plot="results/metrics/scores.csv",
    log:
        "logs/table2.log",
    benchmark:
        "logs/benchmarks/table2.tsv"
    params:
        tasks=list(EVALUATION["tasks"]),
        methods=list(MIDTRAIN["methods"]),
        reference=EVALUATION["reference"],
        metric=EVALUATION["metric"],
        labels={},  # method -> row label; the method names themselves
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/score_tables.py"


rule table3:
    input:
        scores=score_files(),
    output:
        multiext("results/tables/table3", ".csv", ".md", ".tex"),
        html=report(
            "results/tables/table3.html",
            caption="../report/table3.rst",
            category="Tables",
            labels={"table": "Table 3: dispersion ablation"},
        ),
    log:
        "logs/table3.log",
    benchmark:
        "logs/benchmarks/table3.tsv"
    params:
        tasks=list(EVALUATION["tasks"]),
        metric=EVALUATION["metric"],
        grid=ABLATION_GRID,
        models=ABLATION_MODELS,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/score_tables.py"


rule scores_by_step:
    input:
        scores=step_score_files(),
    output:
        "results/tables/scores_by_step.csv",
    log:
        "logs/scores_by_step.log",
    benchmark:
        "logs/benchmarks/scores_by_step.tsv"
    params:
        metric=EVALUATION["metric"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/scores_by_step.py"
