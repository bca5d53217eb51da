# Stage 1: text. Offline corpora from Debian packages or hub datasets fetched into the cache,
# then seeded samples per dataset.


include: "functions/data.smk"


rule build_corpus:
    input:
        deb=get_deb,
    output:
        directory(path.corpus),
    log:
        "logs/build_corpus/{corpus}.log",
    benchmark:
        "logs/benchmarks/build_corpus/{corpus}.tsv"
    priority: PRIORITY.training_input
    script:
        "../workflow_scripts/build_corpus.py"


rule fetch_dataset:
    localrule: True
    output:
        directory(path.hub_dataset),
    log:
        "logs/fetch_dataset/{dataset}.log",
    benchmark:
        "logs/benchmarks/fetch_dataset/{dataset}.tsv"
    wildcard_constraints:
        dataset=_alternatives(HUB_DATASETS),
    params:
        spec=lookup(dpath="datasets/{dataset}", within=config),
    script:
        "../workflow_scripts/fetch_dataset.py"


rule sample_dataset:
    input:
        unpack(lambda wildcards: dataset_inputs(wildcards.dataset)),
    output:
        samples=path.samples,
        manifest=f"{path.samples}.manifest.json",
    log:
        "logs/sample_dataset/{dataset}.log",
    benchmark:
        "logs/benchmarks/sample_dataset/{dataset}.tsv"
    params:
        spec=lookup(dpath="datasets/{dataset}", within=config),
        sampling=SAMPLING,
    script:
        "../workflow_scripts/sample_dataset.py"
