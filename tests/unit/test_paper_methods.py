"""Every training method of configs/paper.yaml, with its options as written there, trains one step
through the workflow's stages on a tiny model: the run's plan records them and its log the step.
The paper miniature (tests/workflow/test_paper_miniature.py) runs the rules of mid-training with
four of these methods; what the rest share with them is the rules, what differs is this."""

from __future__ import annotations

import pytest
import yaml

from condensation.config.objectives import OBJECTIVES, resolve_method
from condensation.runtime.io import read_json
from condensation.training.checkpointing import RunDir
from tests.helpers.repo import REPO

PAPER = yaml.safe_load((REPO / "configs/paper.yaml").read_text())
METHODS = {f"{study}.{name}": spec
           for study in ("midtrain", "scratch") for name, spec in PAPER[study]["methods"].items()}


def test_the_paper_s_methods_cover_every_objective():
    assert {spec["objective"] for spec in METHODS.values()} == set(OBJECTIVES)


ARCHITECTURE = {name for name, spec in METHODS.items() if spec.get("ln_scaling")}
"""Methods that change the architecture: the one-step fixture mid-trains a given model, which they
cannot; tests/unit/test_ln_scaling.py trains the scratch method through the stages."""


def test_the_paper_s_scratch_study_has_a_layernorm_scaling_arm():
    assert ARCHITECTURE == {"scratch.ln_scaling"}


@pytest.mark.parametrize("name", sorted(set(METHODS) - ARCHITECTURE))
def test_each_method_of_the_paper_trains_one_step_through_the_stages(name, one_step_study):
    spec = dict(METHODS[name])
    if "teacher" in spec:
        spec["teacher"] = "tiny"  # the paper's teacher is a hub model; here the tiny model teaches itself
    run = one_step_study(spec)
    assert read_json(run / "run.json")["method"] == resolve_method(spec).as_dict()
    log = RunDir(run).log.read_text().splitlines()
    header, last = log[0].split(","), log[-1].split(",")
    assert len(log) == 3 and last[header.index("step")] == "1", log  # the header, step 0 and the one step
    aux = last[header.index("aux_loss")]
    assert (aux not in ("", "nan", "0.0")) == (OBJECTIVES[spec["objective"]].kind in ("auxiliary", "representation",
                                                                                  "distillation")), log
