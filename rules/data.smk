# Stage 1: text. Offline corpora from Debian packages, then seeded samples per dataset.


rule build_corpus:
    input:
        deb=get_deb,
    output:
        directory("data/corpus/{corpus}"),
    log:
        "logs/build_corpus/{corpus}.log",
    benchmark:
        "logs/benchmarks/build_corpus/{corpus}.tsv"
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/build_corpus.py"


rule sample_dataset:
    input:
        unpack(get_corpus_input),
    output:
        samples="data/samples/{dataset}.jsonl",
        manifest="data/samples/{dataset}.jsonl.manifest.json",
    log:
        "logs/sample_dataset/{dataset}.log",
    benchmark:
        "logs/benchmarks/sample_dataset/{dataset}.tsv"
    params:
        spec=get_dataset_spec,
        sampling=SAMPLING,
    conda:
        "../envs/condensation.yaml"
    script:
        "../workflow_scripts/sample_dataset.py"
