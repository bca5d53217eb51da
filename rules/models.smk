# Stage 2: models. Every source ends as models/{model}/handle.json; GPT2-shaped models of the
# controlled MLP-width family are pre-trained here from scratch first.


rule prepare_tokenizer:
    input:
        unpack(get_pretrain_corpus_input),
    output:
        directory("runs/pretrain/tokenizer"),
    log:
        "logs/prepare_tokenizer.log",
    benchmark:
        "logs/benchmarks/prepare_tokenizer.tsv"
    params:
        dataset=PRETRAIN["dataset"],
        spec=DATASETS.get(PRETRAIN["dataset"]),
        existing=PRETRAIN["tokenizer"],
        vocab_size=PRETRAIN["tokenizer_vocab_size"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/prepare_tokenizer.py"


rule pack_pretraining_data:
    input:
        unpack(get_pretrain_corpus_input),
        tokenizer="runs/pretrain/tokenizer",
    output:
        "runs/pretrain/blocks.npz",
    log:
        "logs/pack_pretraining_data.log",
    benchmark:
        "logs/benchmarks/pack_pretraining_data.tsv"
    params:
        dataset=PRETRAIN["dataset"],
        spec=DATASETS.get(PRETRAIN["dataset"]),
        block_size=PRETRAIN["train"]["block_size"],
        validation_fraction=PRETRAIN["validation_fraction"],
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/pack_training_data.py"


rule pretrain:
    input:
        tokenizer="runs/pretrain/tokenizer",
        blocks="runs/pretrain/blocks.npz",
    output:
        directory("runs/pretrain/{model}/final"),
    log:
        "logs/pretrain/{model}.log",
    benchmark:
        "logs/benchmarks/pretrain/{model}.tsv"
    params:
        arch=get_model_arch,
        settings=PRETRAIN,
        run_dir=get_run_dir,
    threads: 4
    resources:
        gpu=1,
        mem_mb=8000,
        runtime=240,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/pretrain.py"


rule prepare_model:
    input:
        unpack(get_model_inputs),
    output:
        handle="models/{model}/handle.json",
    log:
        "logs/prepare_model/{model}.log",
    benchmark:
        "logs/benchmarks/prepare_model/{model}.tsv"
    params:
        spec=get_model_spec,
        arch=get_model_arch,
        weights_dir=get_weights_dir,
        seed=PRETRAIN["seed"],
    resources:
        mem_mb=4000,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/prepare_model.py"
