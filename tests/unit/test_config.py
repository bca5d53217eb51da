"""Config validation: every mistake is a clear error naming its place; shipped configs are valid."""

import pytest
import yaml

from condensation.config.plan import ablation_grid, evaluation_tasks, study_runs
from condensation.config.validate import ConfigError, load_config, validate_config

MINIMAL = {"datasets": {"austen": {"source": "austen"}}, "models": {"m": {"source": "hub", "id": "gpt2"}}}


def with_changes(**changes):
    config = yaml.safe_load(yaml.safe_dump(MINIMAL))
    config.update(changes)
    return config


def test_defaults_are_filled_in():
    config = validate_config(MINIMAL)
    assert config["sampling"] == {"num_sequences": 100, "seq_len": 512, "min_words": 1024, "seed": 0}
    assert config["extraction"]["dtype"] == "auto"
    assert config["families"] == {}
    assert "sampling" not in MINIMAL  # the caller's dict is not modified


def test_unknown_top_level_key_is_named():
    with pytest.raises(ConfigError,
                       match=r"config: Additional properties are not allowed \('sampels' was unexpected\)"):
        validate_config(with_changes(sampels={}))


def test_misspelled_nested_key_is_named_with_its_path():
    with pytest.raises(ConfigError, match=r"config\.sampling: .*'num_sequence' was unexpected"):
        validate_config(with_changes(sampling={"num_sequence": 10}))


def test_wrong_type_is_named_with_its_path():
    with pytest.raises(ConfigError, match=r"config\.sampling\.seq_len: '512' is not of type 'integer'"):
        validate_config(with_changes(sampling={"seq_len": "512"}))


def test_an_arch_s_dropout_is_a_rate_below_one_and_absent_unless_given():
    """Absent, the build keeps GPT2's 0.1 and a config's params stay as they were (no rerun of a
    finished pipeline); given, it is a rate in [0, 1)."""
    toy = {"source": "pretrain", "arch": {"n_layer": 2, "n_embd": 32, "n_head": 2, "n_inner": 64, "n_positions": 1024}}
    assert "dropout" not in validate_config(with_changes(models={"t": toy}))["models"]["t"]["arch"]
    given = {**toy, "arch": {**toy["arch"], "dropout": 0.0}}
    assert validate_config(with_changes(models={"t": given}))["models"]["t"]["arch"]["dropout"] == 0.0
    with pytest.raises(ConfigError, match=r"config\.models\.t\.arch\.dropout: 1 is greater than or equal to"):
        validate_config(with_changes(models={"t": {**toy, "arch": {**toy["arch"], "dropout": 1}}}))


def test_unknown_dataset_source():
    with pytest.raises(ConfigError, match=r"config\.datasets\.web\.source: 'web' is not one of"):
        validate_config(with_changes(datasets={"web": {"source": "web"}}))


def test_hub_dataset_needs_a_path():
    with pytest.raises(ConfigError, match=r"config\.datasets\.wiki: 'path' is a required property"):
        validate_config(with_changes(datasets={"wiki": {"source": "hub"}}))


def test_family_naming_an_unknown_dataset():
    config = with_changes(families={"f": {"models": ["m"], "datasets": ["wikitext"]}})
    with pytest.raises(ConfigError,
                       match=r"config\.families\.f\.datasets: unknown dataset 'wikitext' \(known: austen\)"):
        validate_config(config)


def test_family_naming_an_unknown_model():
    config = with_changes(families={"f": {"models": ["gpt3"], "datasets": ["austen"]}})
    with pytest.raises(ConfigError, match=r"unknown model 'gpt3'"):
        validate_config(config)


def test_pairs_must_match_one_to_one():
    config = with_changes(pairs={"p": {"first": ["m"], "second": ["m", "m"], "dataset": "austen"}})
    with pytest.raises(ConfigError, match=r"config\.pairs\.p: 'first' has 1 models but 'second' has 2"):
        validate_config(config)


def test_init_model_starts_from_any_architecture_but_another_init():
    hub = with_changes(models={"m": {"source": "hub", "id": "gpt2"}, "i": {"source": "init", "of": "m"}})
    assert validate_config(hub)["models"]["i"]["of"] == "m"
    local = with_changes(models={"m": {"source": "local", "path": "/x"}, "i": {"source": "init", "of": "m"}})
    assert validate_config(local)["models"]["i"]["seed"] is None
    nested = with_changes(models={"m": {"source": "hub", "id": "gpt2"}, "i": {"source": "init", "of": "m"},
                                  "j": {"source": "init", "of": "i"}})
    with pytest.raises(ConfigError, match=r"config\.models\.j\.of: 'i' is itself an init model"):
        validate_config(nested)


def test_scratch_study_trains_init_models_only():
    study = {"models": ["m"], "dataset": "austen", "geometry_dataset": "austen", "methods": {"ce": {"objective": "ce"}}}
    with pytest.raises(ConfigError, match=r"config\.scratch\.models: 'm' is not an `init` model"):
        validate_config(with_changes(scratch=study))
    models = {"m": {"source": "hub", "id": "gpt2"}, "i": {"source": "init", "of": "m"}}
    config = validate_config(with_changes(models=models, scratch={**study, "models": ["i"]}))
    assert study_runs(config, "scratch") == [("i", "ce", 0)]


def test_a_distillation_pair_names_a_teacher_and_runs_the_study_trains():
    models = {"m": {"source": "hub", "id": "gpt2"}, "big": {"source": "hub", "id": "gpt2-medium"},
              "i": {"source": "init", "of": "m"},
              "ce-s0": {"source": "run", "study": "scratch", "of": "i", "method": "ce", "seed": 0},
              "kd-s0": {"source": "run", "study": "scratch", "of": "i", "method": "kd", "seed": 0}}
    study = {"models": ["i"], "dataset": "austen", "geometry_dataset": "austen",
             "methods": {"ce": {"objective": "ce"}, "kd": {"objective": "distillation", "teacher": "big"}}}
    pair = {"first": ["ce-s0"], "second": ["kd-s0"], "reference": ["big"], "labels": ["CE", "distilled", "teacher"],
            "dataset": "austen"}
    config = validate_config(with_changes(models=models, scratch=study, pairs={"p": pair}))
    assert ("i", "kd", 0) in study_runs(config, "scratch")
    wrong = [
        ({"models": {**models, "kd-s0": {**models["kd-s0"], "seed": 3}}},
         r"config\.models\.kd-s0: config\.scratch trains no run of model 'i' with method 'kd' and seed 3"),
        ({"scratch": {**study,
                      "methods": {**study["methods"], "kd": {"objective": "distillation", "teacher": "huge"}}}},
         r"config\.scratch\.methods\.kd\.teacher: unknown model 'huge'"),
        ({"scratch": {**study, "methods": {**study["methods"], "kd": {"objective": "distillation"}}}},
         r"config\.scratch\.methods\.kd: objective 'distillation' needs a teacher"),
        ({"pairs": {"p": {**pair, "labels": ["CE", "distilled"]}}}, r"config\.pairs\.p\.labels: 2 labels for 3 rows"),
        ({"pairs": {"p": {**pair, "reference": ["big", "big"]}}}, r"config\.pairs\.p\.reference: 2 models for 1 pairs"),
        ({"models": {**models, "r": {"source": "run", "study": "scratch", "of": "i"}}},
         r"'method' is a required property"),
    ]
    for change, message in wrong:
        with pytest.raises(ConfigError, match=message):
            validate_config(with_changes(**{"models": models, "scratch": study, "pairs": {"p": pair}, **change}))


def test_a_similarity_comparison_names_a_pair_with_a_reference_or_a_study_and_references():
    from condensation.config.plan import similarity_dataset, similarity_rows

    models = {"m": {"source": "hub", "id": "gpt2"}, "big": {"source": "hub", "id": "gpt2-medium"},
              "i": {"source": "init", "of": "m"},
              "ce-s0": {"source": "run", "study": "scratch", "of": "i", "method": "ce", "seed": 0},
              "kd-s0": {"source": "run", "study": "scratch", "of": "i", "method": "kd", "seed": 0}}
    study = {"models": ["i"], "dataset": "austen", "geometry_dataset": "austen", "seeds": [0, 1],
             "methods": {"ce": {"objective": "ce"}, "kd": {"objective": "distillation", "teacher": "big"}}}
    pair = {"first": ["ce-s0"], "second": ["kd-s0"], "reference": ["big"], "labels": ["CE", "distilled", "teacher"],
            "dataset": "austen"}
    similarity = {"students": {"pair": "p"},
                  "runs": {"study": "scratch", "methods": ["kd"], "reference": ["big", "m"]}}
    config = validate_config(with_changes(models=models, scratch=study, pairs={"p": pair}, similarity=similarity))
    assert similarity_rows(config, "students") == [
        {"group": "CE", "model": "ce-s0", "run": None, "reference": "big"},
        {"group": "distilled", "model": "kd-s0", "run": None, "reference": "big"}]
    runs = similarity_rows(config, "runs")
    assert [(row["model"], row["reference"]) for row in runs] == [
        ("i/kd/seed0", "big"), ("i/kd/seed0", "m"), ("i/kd/seed1", "big"), ("i/kd/seed1", "m")]
    assert runs[0]["run"] == ["scratch", "i", "kd", 0] and similarity_dataset(config, "runs") == "austen"
    unreferenced = {**pair, "reference": [], "labels": ["CE", "distilled"]}
    wrong = [
        ({"similarity": {"s": {"pair": "q"}}}, r"config\.similarity\.s\.pair: unknown pair 'q'"),
        ({"pairs": {"p": pair, "q": {k: v for k, v in unreferenced.items() if k != "reference"}},
          "similarity": {"s": {"pair": "q"}}}, r"config\.similarity\.s\.pair: pair 'q' has no reference row"),
        ({"similarity": {"s": {"study": "scratch", "reference": ["huge"]}}},
         r"config\.similarity\.s\.reference: unknown model 'huge'"),
        ({"similarity": {"s": {"study": "scratch", "methods": ["nope"], "reference": ["big"]}}},
         r"config\.similarity\.s\.methods: 'nope' is not a method of scratch"),
        ({"similarity": {"s": {"study": "scratch"}}}, r"config\.similarity\.s"),  # a study needs references
        ({"similarity": {"s": {"pair": "p", "dataset": "nowhere"}}},
         r"config\.similarity\.s\.dataset: unknown dataset"),
    ]
    for change, message in wrong:
        with pytest.raises(ConfigError, match=message):
            validate_config(with_changes(**{"models": models, "scratch": study, "pairs": {"p": pair}, **change}))


def test_hub_series_becomes_one_model_per_revision():
    series = {"olmo": {"model": "m", "dataset": "austen", "checkpoints": [
        {"revision": "stage1-step0", "label": "S1-0", "tokens": 0}, {"revision": "main", "label": "Main"}]}}
    models = validate_config(with_changes(series=series))["models"]
    assert models["olmo.S1-0"] == {**models["m"], "revision": "stage1-step0", "label": "S1-0"}
    assert models["olmo.Main"]["revision"] == "main"
    one = {"olmo": {**series["olmo"], "checkpoints": series["olmo"]["checkpoints"][:1]}}
    with pytest.raises(ConfigError, match="minItems|should be non-empty|is too short"):
        validate_config(with_changes(series=one))
    with pytest.raises(ConfigError, match=r"config\.series\.x\.model: unknown model 'nope'"):
        validate_config(with_changes(series={"x": {"model": "nope", "dataset": "austen"}}))


def test_min_words_below_seq_len_is_rejected():
    with pytest.raises(ConfigError, match=r"min_words \(100\) is below seq_len \(512\)"):
        validate_config(with_changes(sampling={"min_words": 100}))


def test_names_must_be_wildcard_safe():
    with pytest.raises(ConfigError, match=r"config\.models"):
        validate_config(with_changes(models={"bad/name": {"source": "hub", "id": "gpt2"}}))


def test_all_problems_are_reported_at_once():
    config = with_changes(sampling={"seq_len": "x", "seed": "y"})
    with pytest.raises(ConfigError) as error:
        validate_config(config)
    assert "seq_len" in str(error.value) and "seed" in str(error.value)


def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="config file not found"):
        load_config(tmp_path / "nope.yaml")


@pytest.mark.parametrize(
    "names",
    [["config.yaml"], ["configs/paper.yaml"], ["configs/paper.yaml", "configs/paper-miniature.yaml"],
     ["configs/paper.yaml", "configs/paper-fullscale.yaml"],
     ["config.yaml", "configs/offline-full.yaml"], ["config.yaml", "configs/newer-methods.yaml"],
     ["configs/smollm2.yaml"],
     ["configs/smollm2.yaml", "configs/smollm2-cpu.yaml"], ["configs/polypythia.yaml"],
     ["configs/polypythia-miniature.yaml"]],
)
def test_shipped_configs_are_valid(repo, names):
    """Each shipped config, overlays merged over their base as Snakemake merges several --configfile."""
    from snakemake.utils import update_config

    merged: dict = {}
    for name in names:
        update_config(merged, yaml.safe_load((repo / name).read_text()))
    config = validate_config(merged)
    assert config["families"] or config["midtrain"]["models"], f"{names} measure nothing"


def test_an_overlay_drops_a_named_entry_with_null_and_what_still_names_it_is_refused(repo):
    """null in a mapping of named entries (a study's method, a model) takes the entry out, as
    Snakemake merges a second --configfile; a list that still names it fails validation."""
    from snakemake.utils import update_config

    config = yaml.safe_load((repo / "configs/paper.yaml").read_text())
    update_config(config, {"midtrain": {"methods": {"decorrelation": None, "l2_repel": None}}})
    methods = validate_config(config)["midtrain"]["methods"]
    assert "decorrelation" not in methods and "l2_repel" not in methods and "orthogonalization" in methods
    update_config(config, {"models": {"gpt2-medium": None}})
    with pytest.raises(ConfigError, match=r"config\.families\.gpt2.*gpt2-medium"):
        validate_config(config)


def test_the_polypythia_miniature_is_the_full_config_shortened(repo):
    """What the miniature runs (tests/workflow/test_polypythia_miniature.py) stands for the full
    config: each model, family, pair, series, method and task it names is polypythia.yaml's entry,
    its lists shortened; only the budgets (sampling, training, scoring) are the CPU's."""
    full = yaml.safe_load((repo / "configs/polypythia.yaml").read_text())
    mini = yaml.safe_load((repo / "configs/polypythia-miniature.yaml").read_text())

    def shortened(small, large, where):
        if isinstance(small, dict):
            assert isinstance(large, dict) and set(small) <= set(large), f"{where}: {set(small) - set(large)}"
            for key, value in small.items():
                shortened(value, large[key], f"{where}.{key}")
        elif isinstance(small, list):
            assert isinstance(large, list), where
            if all(isinstance(item, str) for item in small):
                assert [item for item in large if item in small] == small, f"{where}: not a sublist in order"
            else:
                for item in small:
                    assert item in large, f"{where}: {item}"
        else:
            assert small == large, f"{where}: {small!r} != {large!r}"

    for section in ("datasets", "models", "families", "pairs", "series"):
        shortened(mini[section], full[section], section)
    shortened(mini["midtrain"]["methods"], full["midtrain"]["methods"], "midtrain.methods")
    shortened(mini["midtrain"]["models"], full["midtrain"]["models"], "midtrain.models")
    shortened(list(mini["evaluation"]["tasks"]), list(full["evaluation"]["tasks"]), "evaluation.tasks")
    assert {mini["midtrain"]["dataset"], mini["midtrain"]["geometry_dataset"]} == {
        full["midtrain"]["dataset"], full["midtrain"]["geometry_dataset"]}
    seeds = {spec["seed"] for spec in mini["models"].values()}
    assert len(seeds) >= 2, "replicates: at least two seeds"


MIDTRAIN = {"models": ["m"], "dataset": "austen", "geometry_dataset": "austen",
            "methods": {"ce": {"objective": "ce"}, "dispersion": {"objective": "dispersion"}}}


def test_local_task_must_be_scored():
    evaluation = {"tasks": {},
                  "local_tasks": {"cloze": {"kind": "cloze", "corpus": "austen", "documents": ["persuasion"]}}}
    with pytest.raises(ConfigError, match=r"evaluation.local_tasks.cloze: built but never scored"):
        validate_config(with_changes(midtrain=MIDTRAIN, evaluation=evaluation))


def test_reference_method_must_exist():
    with pytest.raises(ConfigError, match=r"evaluation.reference: unknown method 'disp'"):
        validate_config(with_changes(midtrain=MIDTRAIN, evaluation={"tasks": {"piqa": "zero"}, "reference": "disp"}))


def test_fewshot_counts_per_model():
    config = validate_config(
        with_changes(midtrain=MIDTRAIN,
                     evaluation={"tasks": {"piqa": "zero", "arc_easy": "few"}, "fewshot": {"default": 1, "m": 5}})
    )
    assert evaluation_tasks(config, "m") == {"piqa": 0, "arc_easy": 5}
    assert evaluation_tasks(config, "other") == {"piqa": 0, "arc_easy": 1}
    with pytest.raises(ConfigError, match=r"evaluation.fewshot: 'x' is neither 'default' nor a model name"):
        validate_config(with_changes(evaluation={"tasks": {}, "fewshot": {"x": 5}}))
    with pytest.raises(ConfigError, match=r"evaluation.tasks.piqa"):
        validate_config(with_changes(evaluation={"tasks": {"piqa": "five"}}))


def test_ablation_does_not_retrain_the_default_dispersion_point():
    midtrain = {**MIDTRAIN, "ablation": {"weights": [0.1, 1.0], "taus": [1.0]}}
    config = validate_config(with_changes(midtrain=midtrain))
    assert ablation_grid(config) == {"dispersion": (0.1, 1.0), "dispersion-lam1-tau1": (1.0, 1.0)}
    assert [method for _, method, _ in study_runs(config, "midtrain")] == ["ce", "dispersion", "dispersion-lam1-tau1"]
    # the grid varies weight and tau of the study's own dispersion method, its clamp included
    clamped = {**midtrain,
               "methods": {"ce": {"objective": "ce"},
                           "dispersion": {"objective": "dispersion", "weight": 0.1, "tau": 1.0, "clamp": 0.1}}}
    config = validate_config(with_changes(midtrain=clamped))
    assert ablation_grid(config) == {"dispersion": (0.1, 1.0), "dispersion-lam1-tau1": (1.0, 1.0)}
    from condensation.config.plan import study_methods
    assert study_methods(config, "midtrain")["dispersion-lam1-tau1"]["clamp"] == 0.1


def test_mapping_order_is_kept():
    methods = {"zeta": {"objective": "ce"}, "alpha": {"objective": "ce"}, "mid": {"objective": "ce"}}
    config = validate_config(with_changes(midtrain={**MIDTRAIN, "methods": methods}))
    assert list(config["midtrain"]["methods"]) == ["zeta", "alpha", "mid"]  # rows of tables and figures


# --------------------------------------------------------------------------- text known at plan time


def files_dataset(tmp_path, texts, **entry):
    """A `files` dataset of the given {document: text} under tmp_path."""
    for name, text in texts.items():
        (tmp_path / f"{name}.txt").write_text(text)
    return {"source": "files", "files": [str(tmp_path / "*.txt")], **entry}


def test_files_that_read_nothing_stop_validation_with_the_key_and_the_fix(tmp_path):
    (tmp_path / "folder").mkdir()
    datasets = {
        "empty_glob": {"source": "files", "files": [str(tmp_path / "mytext/*.txt")]},
        "missing": {"source": "files", "files": [str(tmp_path / "gone.txt")]},
        "folder": {"source": "files", "files": [str(tmp_path / "folder")]},
    }
    with pytest.raises(ConfigError) as error:
        validate_config(with_changes(datasets=datasets))
    message = str(error.value)
    assert "config.datasets.empty_glob.files[0]: " in message and "matches no file" in message
    assert "config.datasets.missing.files[0]: file " in message and "does not exist" in message
    assert "config.datasets.folder.files[0]: " in message and "is a directory; name its files with a glob" in message


def test_a_sampled_files_dataset_too_short_for_its_sequences_stops_validation(tmp_path):
    mine = files_dataset(tmp_path, {"a": "word " * 225})
    family = {"f": {"models": ["m"], "datasets": ["mine"]}}
    sampling = {"num_sequences": 4, "seq_len": 32, "min_words": 60}  # 240 words needed
    with pytest.raises(ConfigError, match=r"config\.datasets\.mine: holds 225 words, "
                                          r"fewer than config\.sampling\.num_sequences x min_words = 4 x 60 = 240"):
        validate_config(with_changes(datasets={"mine": mine}, families=family, sampling=sampling))
    validate_config(with_changes(datasets={"mine": mine}, families=family, sampling={**sampling, "num_sequences": 3}))
    # a dataset nothing samples is not held to it
    validate_config(with_changes(datasets={"austen": {"source": "austen"}, "mine": mine}))


def test_exclude_naming_no_file_is_a_plan_time_error(tmp_path):
    mine = files_dataset(tmp_path, {"a": "word " * 10}, exclude=["b"])
    with pytest.raises(ConfigError, match=r"config\.datasets\.mine\.exclude: \['b'\] name no file of the dataset"):
        validate_config(with_changes(datasets={"mine": mine}))


def test_a_config_without_models_hints_that_an_overlay_goes_after_config_yaml():
    with pytest.raises(ConfigError, match=r"(?s)'models' is a required property.*give it after config\.yaml"):
        validate_config({"sampling": {"num_sequences": 8}})
    with pytest.raises(ConfigError) as error:
        validate_config(with_changes(sampels={}))
    assert "config.yaml" not in str(error.value)  # only where an overlay alone is likely


# --------------------------------------------------------------------------- local tasks' text


def trained_on(dataset, **datasets):
    """A config that mid-trains a model on ``dataset`` and scores one cloze task."""
    return with_changes(
        datasets={"austen": {"source": "austen"}, "austen-train": {"source": "austen", "exclude": ["persuasion"]},
                  **datasets},
        midtrain={"models": ["m"], "dataset": dataset, "geometry_dataset": "austen",
                  "methods": {"ce": {"objective": "ce"}}},
    )


def with_task(config, **task):
    config["evaluation"] = {"tasks": {"cloze": "zero"}, "reference": "ce",
                            "local_tasks": {"cloze": {"kind": "cloze", **task}}}
    return config


def test_a_local_task_reads_any_dataset_or_built_in_corpus(tmp_path):
    mine = files_dataset(tmp_path, {"licence_a": "Some text.", "licence_b": "More text."})
    config = validate_config(with_task(trained_on("austen-train", licenses=mine), corpus="licenses"))
    assert config["evaluation"]["local_tasks"]["cloze"]["documents"] is None  # all of its files
    validate_config(with_task(trained_on("austen-train", licenses=mine), corpus="licenses", documents=["licence_b"]))
    # a built-in corpus that no dataset names is read whole
    validate_config(with_task(trained_on("austen-train"), corpus="python_docs", documents=["glossary"]))
    with pytest.raises(ConfigError, match=r"local_tasks\.cloze\.corpus: 'licences' is neither a dataset of "
                                          r"config\.datasets .* nor a built-in corpus"):
        validate_config(with_task(trained_on("austen-train", licenses=mine), corpus="licences"))
    with pytest.raises(ConfigError,
                       match=r"local_tasks\.cloze\.documents: \['licence_c'\] are no document of dataset 'licenses'"):
        validate_config(with_task(trained_on("austen-train", licenses=mine), corpus="licenses",
                                  documents=["licence_c"]))


def test_held_out_text_that_training_reads_is_an_error_naming_both():
    leak = with_task(trained_on("austen-train"), corpus="austen", documents=["northangerabbey"])
    with pytest.raises(ConfigError) as error:
        validate_config(leak)
    message = str(error.value)
    assert ("config.evaluation.local_tasks.cloze: its text (corpus 'austen') shares documents ['northangerabbey'] "
            "with dataset 'austen-train'" in message)
    assert "config.midtrain.dataset" in message and "allow_overlap: true" in message
    # Persuasion is held out of austen-train: no leak
    validate_config(with_task(trained_on("austen-train"), corpus="austen", documents=["persuasion"]))
    # a corpus training reads whole, asked for all of its documents
    with pytest.raises(ConfigError, match="shares whichever documents of austen neither excludes"):
        validate_config(with_task(trained_on("austen"), corpus="austen-train"))


def test_overlap_is_allowed_only_with_a_reason():
    leak = with_task(trained_on("austen-train"), corpus="austen", documents=["emma"], allow_overlap=True)
    with pytest.raises(ConfigError, match=r"local_tasks\.cloze: 'overlap_reason' is a required property"):
        validate_config(leak)
    leak["evaluation"]["local_tasks"]["cloze"]["overlap_reason"] = "measures memorisation on purpose"
    validate_config(leak)


def test_leak_check_compares_files_and_hub_datasets(tmp_path):
    mine = files_dataset(tmp_path, {"a": "Some text.", "b": "More text."})
    train_a = {"source": "files", "files": [str(tmp_path / "a.txt")]}
    with pytest.raises(ConfigError, match=r"shares files \['a'\] with dataset 'train_a'"):
        validate_config(with_task(trained_on("train_a", mine=mine, train_a=train_a), corpus="mine"))
    validate_config(with_task(trained_on("train_a", mine=mine, train_a=train_a), corpus="mine", documents=["b"]))
    wiki = {"source": "hub", "path": "Salesforce/wikitext", "name": "wikitext-2-raw-v1"}
    with pytest.raises(ConfigError, match="shares the train split of Salesforce/wikitext with dataset 'wiki'"):
        validate_config(with_task(trained_on("wiki", wiki=wiki, wiki_copy=dict(wiki)), corpus="wiki_copy"))
    held_out = {**wiki, "split": "test"}
    validate_config(with_task(trained_on("wiki", wiki=wiki, wiki_test=held_out), corpus="wiki_test"))


def test_pretraining_text_counts_as_training_text():
    config = with_task(
        with_changes(
            datasets={"austen": {"source": "austen"}, "austen-train": {"source": "austen", "exclude": ["persuasion"]}},
            models={"toy": {"source": "pretrain", "arch": {}}},
            pretrain={"dataset": "austen-train", "train": {"block_size": 128}},
        ),
        corpus="austen", documents=["emma"],
    )
    config["evaluation"].pop("reference")
    with pytest.raises(ConfigError, match=r"which training reads \(config\.pretrain\.dataset\)"):
        validate_config(config)


def test_counted_tasks_take_a_list_or_the_above_chance_rule():
    assert validate_config(MINIMAL)["evaluation"]["counted_tasks"] is None
    ruled = validate_config(with_changes(evaluation={"counted_tasks": "above_chance"}))
    assert ruled["evaluation"]["counted_tasks"] == "above_chance"
    with pytest.raises(ConfigError, match=r"config\.evaluation\.counted_tasks: 'above_half' is not valid"):
        validate_config(with_changes(evaluation={"counted_tasks": "above_half"}))
