"""Config validation: every mistake is a clear error naming its place; shipped configs are valid."""

import pytest
import yaml

from condensation.config import ConfigError, load_config, validate_config

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
    with pytest.raises(ConfigError, match=r"config: Additional properties are not allowed \('sampels' was unexpected\)"):
        validate_config(with_changes(sampels={}))


def test_misspelled_nested_key_is_named_with_its_path():
    with pytest.raises(ConfigError, match=r"config\.sampling: .*'num_sequence' was unexpected"):
        validate_config(with_changes(sampling={"num_sequence": 10}))


def test_wrong_type_is_named_with_its_path():
    with pytest.raises(ConfigError, match=r"config\.sampling\.seq_len: '512' is not of type 'integer'"):
        validate_config(with_changes(sampling={"seq_len": "512"}))


def test_unknown_dataset_source():
    with pytest.raises(ConfigError, match=r"config\.datasets\.web\.source: 'web' is not one of"):
        validate_config(with_changes(datasets={"web": {"source": "web"}}))


def test_hub_dataset_needs_a_path():
    with pytest.raises(ConfigError, match=r"config\.datasets\.wiki: 'path' is a required property"):
        validate_config(with_changes(datasets={"wiki": {"source": "hub"}}))


def test_family_naming_an_unknown_dataset():
    config = with_changes(families={"f": {"models": ["m"], "datasets": ["wikitext"]}})
    with pytest.raises(ConfigError, match=r"config\.families\.f\.datasets: unknown dataset 'wikitext' \(known: austen\)"):
        validate_config(config)


def test_family_naming_an_unknown_model():
    config = with_changes(families={"f": {"models": ["gpt3"], "datasets": ["austen"]}})
    with pytest.raises(ConfigError, match=r"unknown model 'gpt3'"):
        validate_config(config)


def test_pairs_must_match_one_to_one():
    config = with_changes(pairs={"p": {"first": ["m"], "second": ["m", "m"], "dataset": "austen"}})
    with pytest.raises(ConfigError, match=r"config\.pairs\.p: 'first' has 1 models but 'second' has 2"):
        validate_config(config)


def test_init_model_must_point_at_a_pretrain_model():
    config = with_changes(models={"m": {"source": "hub", "id": "gpt2"}, "i": {"source": "init", "of": "m"}})
    with pytest.raises(ConfigError, match=r"config\.models\.i\.of: 'm' is not a pretrain model"):
        validate_config(config)


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


@pytest.mark.parametrize("name", ["config.yaml", "configs/paper.yaml"])
def test_shipped_configs_are_valid(repo, name):
    config = load_config(repo / name)
    assert config["families"], f"{name} defines no family"
