# Stage 2: models. Every source ends as models/{model}/handle.json; GPT2-shaped models of the
# controlled MLP-width family are pre-trained here from scratch first.


include: "functions/models.smk"


rule prepare_tokenizer:
    input:
        unpack(pretrain_tokenizer_inputs),
    output:
        directory(path.tokenizer),
    log:
        "logs/prepare_tokenizer.log",
    benchmark:
        "logs/benchmarks/prepare_tokenizer.tsv"
    priority: PRIORITY.training_input
    params:
        dataset=config["pretrain"]["dataset"],
        spec=lookup(dpath=f"datasets/{config['pretrain']['dataset']}", within=config, default=None),
        vocab_size=lookup(dpath="pretrain/tokenizer_vocab_size", within=config),
    script:
        "../workflow_scripts/prepare_tokenizer.py"


rule pack_pretraining_data:
    input:
        unpack(lambda wildcards: dataset_inputs(config["pretrain"]["dataset"])),
        tokenizer=path.tokenizer,
    output:
        path.pretrain_blocks,
    log:
        "logs/pack_pretraining_data.log",
    benchmark:
        "logs/benchmarks/pack_pretraining_data.tsv"
    priority: PRIORITY.training_input
    params:
        dataset=config["pretrain"]["dataset"],
        spec=lookup(dpath=f"datasets/{config['pretrain']['dataset']}", within=config, default=None),
        block_size=lookup(dpath="pretrain/train/block_size", within=config),
        validation_fraction=lookup(dpath="pretrain/validation_fraction", within=config),
    script:
        "../workflow_scripts/pack_training_data.py"


rule plan_pretrain:
    localrule: True
    output:
        path.pretrain_run.plan,
    log:
        "logs/plan_pretrain/{model}.log",
    benchmark:
        "logs/benchmarks/plan_pretrain/{model}.tsv"
    priority: PRIORITY.training_input
    params:
        arch=get_model_arch,
        train=lookup(dpath="pretrain/train", within=config),
        seed=model_seed,
    script:
        "../workflow_scripts/plan_run.py"


rule pretrain:
    input:
        plan=path.pretrain_run.plan,
        tokenizer=path.tokenizer,
        blocks=path.pretrain_blocks,
    output:
        final=directory(path.pretrain_run.final),
        index=path.pretrain_run.index,
        log=path.pretrain_run.log,
    log:
        "logs/pretrain/{model}.log",
    benchmark:
        "logs/benchmarks/pretrain/{model}.tsv"
    priority: pretrain_priority
    params:
        python=PYTHON,
        launcher=launcher("pretrain"),
        spread=spread(config["pretrain"]),
    threads: 1
    resources:
        **training_resources(config, lambda wildcards: "pretrain"),
        mem_mb=8000,
        runtime=240,
    shell:
        # as rule train_study_run: exec, GPUs of its own (condensation/runtime/gpus.py), then the run
        "exec {params.python} -m condensation.runtime.gpus {resources.gpu} -- {params.launcher} --plan {input.plan}"
        " --tokenizer {input.tokenizer} --blocks {input.blocks} --threads {threads} > {log} 2>&1"


rule measure_pretraining:
    input:
        index=path.pretrain_run.index,
        samples=path.samples,
    output:
        directory(path.pretrain_geometry),
    log:
        "logs/measure_pretraining/{model}/{dataset}.log",
    benchmark:
        "logs/benchmarks/measure_pretraining/{model}/{dataset}.tsv"
    priority: PRIORITY.after_training
    params:
        **MEASURING,
    threads: 1
    resources:
        **gpu_job(60, gpu=1),
    script:
        "../workflow_scripts/measure_checkpoints.py"


rule fetch_model:
    localrule: True
    input:
        hub_checked_in_a_dry_run,
    output:
        handle=path.handle,
    log:
        "logs/fetch_model/{model}.log",
    benchmark:
        "logs/benchmarks/fetch_model/{model}.tsv"
    priority: prepare_model_priority
    wildcard_constraints:
        model=_alternatives(HUB_MODELS),
    params:
        spec=lookup(dpath="models/{model}", within=config),
    script:
        "../workflow_scripts/prepare_model.py"


rule prepare_model:
    input:
        unpack(get_model_inputs),
    output:
        handle=path.handle,
    log:
        "logs/prepare_model/{model}.log",
    benchmark:
        "logs/benchmarks/prepare_model/{model}.tsv"
    priority: prepare_model_priority
    wildcard_constraints:
        model=_others(HUB_MODELS),
    params:
        spec=lookup(dpath="models/{model}", within=config),
        arch=get_model_arch,
        weights_dir=path.model_weights,
        seed=model_seed,
    resources:
        mem_mb=4000,
    script:
        "../workflow_scripts/prepare_model.py"
