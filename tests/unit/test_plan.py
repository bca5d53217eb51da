"""What the config implies, before anything runs: GPUs per model, checkpoints per run."""

import pytest

from condensation.config.plan import gpus_needed, studies, study_checkpoints, study_runs
from condensation.config.validate import load_config


@pytest.mark.parametrize(
    "parameters, gpu_gb, expected",
    [
        (124_000_000, 80, 1),  # GPT2
        (32_800_000_000, 80, 1),  # Qwen2.5-32B: 65.6 GB of bf16 weights, under 85 % of 80 GB
        (34_000_000_000, 80, 1),  # 68 GB: exactly at the limit
        (34_100_000_000, 80, 2),
        (72_700_000_000, 80, 3),  # Qwen2.5-72B: 145 GB of weights
        (72_700_000_000, 40, 5),
        (7_600_000_000, 16, 2),  # a 7B model on 16 GB cards
    ],
)
def test_gpus_needed_holds_the_weights_with_room_for_activations(parameters, gpu_gb, expected):
    assert gpus_needed(parameters, gpu_gb) == expected


def test_gpus_needed_counts_bytes_per_parameter():
    assert gpus_needed(34_000_000_000, 80, bytes_per_parameter=4) == 2  # float32 doubles the weights
    with pytest.raises(ValueError, match="positive"):
        gpus_needed(0, 80)


def test_paper_plan_has_both_studies_and_their_checkpoints(repo):
    config = load_config(repo / "configs/paper.yaml")
    assert studies(config) == ["midtrain", "scratch"]
    # 200M tokens at 131,072 tokens a step: 1526 steps; checkpoints at 0, 5 inner steps and the end
    assert study_checkpoints(config, "midtrain") == [
        "step-0000000", "step-0000254", "step-0000508", "step-0000763", "step-0001017", "step-0001271", "step-0001526"
    ]
    assert study_runs(config, "scratch") == [("qwen3-0.6b-init", method, 0) for method in (
        "ce", "dispersion", "distillation", "jreg", "simreg", "ln_scaling")]  # the paper's three, then newer methods
    assert config["scratch"]["methods"]["distillation"]["teacher"] == "qwen3-1.7b"
    assert config["pairs"]["qwen3-distilled-here"]["reference"] == ["qwen3-1.7b"]
    assert config["models"]["olmo3-7b-pretraining.S1-0"]["revision"] == "stage1-step0"


# --------------------------------------------------------------------------- a family's size order


def test_a_family_that_compares_sizes_is_listed_smallest_first():
    from condensation.config.plan import FamilySizeError, check_size_order

    labels = {"a": "A", "a-s1": "A", "b": "B", "b-s1": "B", "c": "C"}
    # replicates (one label) stand together, sizes rise along the list
    check_size_order("fam", ["a", "a-s1", "b", "b-s1", "c"], labels, [10, 10, 20, 20, 30])
    with pytest.raises(FamilySizeError, match=r"config\.families\.fam\.models: listed as C \(30\), A \(10\), B \(20\); "
                                              r".* smallest first: \['A', 'B', 'C'\]"):
        check_size_order("fam", ["c", "a", "b"], labels, [30, 10, 20])
    with pytest.raises(FamilySizeError,
                       match=r"\['A', 'C'\] have one size \(10 parameters\).*set compares_size: false"):
        check_size_order("fam", ["a", "c"], labels, [10, 10])
    with pytest.raises(FamilySizeError,
                       match=r"'a-s1' shares the label 'A' \(replicates\) with a model of another size"):
        check_size_order("fam", ["a", "a-s1"], labels, [10, 20])
    with pytest.raises(FamilySizeError, match="the size of 'b' is unknown"):
        check_size_order("fam", ["a", "b"], labels, [10, None])
