"""The package's public names, and the dispersion loss added to one's own training loop.

The two examples below are those of docs/loss.md (the fenced blocks that start with
``# example: <name>``), character for character: ``test_the_loss_page_examples_match`` compares
them. Each example is run as written, on a tiny random GPT2 on CPU; only its ``weight=0.1`` is
raised, to see the loss act within a few steps.
"""

from __future__ import annotations

import copy
import math
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

import condensation
from condensation.config.objectives import AuxLossConfig
from condensation.training.losses import auxiliary_loss

REPO = Path(__file__).resolve().parents[2]

HF_TRAINER_EXAMPLE = '''\
# example: hf-trainer
from transformers import Trainer

from condensation import AuxLossConfig, auxiliary_loss

aux = AuxLossConfig(name="dispersion", weight=0.1)  # the paper's loss and weight


class DispersionTrainer(Trainer):
    loss_is_scaled_for_ga = False  # both terms are means over the micro-batch

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs, output_hidden_states=True)
        loss = outputs.loss + aux.weight * auxiliary_loss(outputs.hidden_states, aux)
        return (loss, outputs) if return_outputs else loss


trainer = DispersionTrainer(model=model, args=args, train_dataset=train_dataset)
trainer.train()
'''

ACCELERATE_EXAMPLE = '''\
# example: accelerate-loop
from accelerate import Accelerator

from condensation import AuxLossConfig, auxiliary_loss

aux = AuxLossConfig(name="dispersion", weight=0.1)  # the paper's loss and weight
accelerator = Accelerator()
model, optimizer, loader = accelerator.prepare(model, optimizer, loader)
model.train()
for batch in loader:
    outputs = model(**batch, output_hidden_states=True)
    loss = outputs.loss + aux.weight * auxiliary_loss(outputs.hidden_states, aux)
    accelerator.backward(loss)
    optimizer.step()
    optimizer.zero_grad()
'''

EXAMPLES = {"hf-trainer": HF_TRAINER_EXAMPLE, "accelerate-loop": ACCELERATE_EXAMPLE}
PAPER_WEIGHT = "weight=0.1"
LARGE_WEIGHT = 10.0  # large enough for the dispersion term to win over cross-entropy in a few steps
STEPS = 6


# ----------------------------------------------------------------------------- the public names


def test_public_names_are_the_modules_objects():
    from condensation import AuxLossConfig as public_config
    from condensation import auxiliary_loss as public_loss

    assert public_config is AuxLossConfig
    assert public_loss is auxiliary_loss
    from condensation import measure
    from condensation.measurement import measure as measurement_measure

    assert measure is measurement_measure
    assert set(condensation.__all__) == {"AuxLossConfig", "auxiliary_loss", "measure"}
    assert set(condensation.__all__) <= set(dir(condensation))
    with pytest.raises(AttributeError, match="no attribute 'dispersion_loss'"):
        condensation.dispersion_loss  # noqa: B018 (the attribute access itself must raise)


def test_package_and_config_import_without_torch():
    """The Snakemake planner imports these; the public config class needs no torch either."""
    code = ("import sys, condensation, condensation.config.validate, condensation.config.runs, "
            "condensation.config.objectives; "
            "from condensation import AuxLossConfig; AuxLossConfig(name='dispersion'); "
            "print(sorted({'torch', 'transformers', 'accelerate'} & set(sys.modules)))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert done.stdout.strip() == "[]"


# ----------------------------------------------------------------------------- the examples of docs/loss.md

LOSS_PAGE = REPO / "docs" / "loss.md"


def named_examples(text: str) -> dict[str, str]:
    """``name -> block`` for every fenced python block whose first line is ``# example: <name>``."""
    blocks = re.findall(r"^```python\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    named = (re.match(r"# example: (\S+)\n", block) for block in blocks)
    return {match.group(1): match.string for match in named if match}


def test_the_loss_page_examples_match():
    found = named_examples(LOSS_PAGE.read_text())
    assert sorted(found) == sorted(EXAMPLES), "docs/loss.md must show exactly the tested examples"
    for name, block in found.items():
        assert block == EXAMPLES[name], f"docs/loss.md's `# example: {name}` block differs from the tested one"


@pytest.fixture
def model(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    # no dropout: the gradient the examples compute must be reproducible outside them; float64: they
    # sum it over micro-batches, in another order than check_training, which then differs by float64
    # rounding, not by float32 rounding through the whole network
    model = AutoModelForCausalLM.from_pretrained(str(tiny_model_dir), resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model.double()
    # A random GPT2's token states are already near orthogonal; an offset shared by every token
    # embedding condenses them, leaving the loss room to spread them (cross-entropy alone does
    # the opposite here: 6 steps raise the dispersion loss from -0.31 to -0.26).
    with torch.no_grad():
        model.transformer.wte.weight += 0.1
    return model


@pytest.fixture
def blocks(model) -> torch.Tensor:
    """Four 24-token blocks: every training step below sees all four, in some order."""
    generator = torch.Generator().manual_seed(0)
    return torch.randint(0, model.config.vocab_size, (4, 24), generator=generator)


def run_example(name: str, **names) -> dict:
    """Execute an example as written, with ``LARGE_WEIGHT`` for the paper's weight, on the given names."""
    source = EXAMPLES[name]
    assert source.count(PAPER_WEIGHT) == 1
    namespace = dict(names)
    exec(compile(source.replace(PAPER_WEIGHT, f"weight={LARGE_WEIGHT}"), f"<example: {name}>", "exec"), namespace)
    return namespace


def watch_gradients(model) -> list[torch.Tensor]:
    """The list that a hidden block's weight gradient of every backward pass is appended to."""
    seen: list[torch.Tensor] = []
    model.transformer.h[0].mlp.c_fc.weight.register_hook(lambda grad: seen.append(grad.detach().clone()))
    return seen


def gradient_parts(model, blocks: torch.Tensor, weight: torch.nn.Parameter) -> tuple[torch.Tensor, torch.Tensor]:
    """``weight``'s gradient of the cross-entropy and of the unweighted dispersion loss, on ``blocks``."""
    outputs = model(input_ids=blocks, labels=blocks, output_hidden_states=True)
    aux = auxiliary_loss(outputs.hidden_states, AuxLossConfig(name="dispersion"))
    ce_grad, aux_grad = (torch.autograd.grad(loss, weight, retain_graph=True)[0] for loss in (outputs.loss, aux))
    return ce_grad, aux_grad


def dispersion_of(model, blocks: torch.Tensor) -> float:
    with torch.no_grad():
        hidden_states = model(input_ids=blocks, output_hidden_states=True).hidden_states
        return auxiliary_loss(hidden_states, AuxLossConfig(name="dispersion")).item()


def check_training(model, initial, blocks, seen_grads, final_loss: float, accumulation: int = 1) -> None:
    """The first step's gradient (the sum of its ``accumulation`` backward passes) is CE's plus
    the weighted dispersion's, on all of ``blocks``; and after the last step the states spread."""
    assert math.isfinite(final_loss)
    assert len(seen_grads) == STEPS * accumulation and all(grad.isfinite().all() for grad in seen_grads)
    weight = initial.transformer.h[0].mlp.c_fc.weight
    ce_grad, aux_grad = gradient_parts(initial, blocks, weight)
    assert (LARGE_WEIGHT * aux_grad).norm() > 0.1 * ce_grad.norm()  # the check below can tell them apart
    expected = ce_grad + LARGE_WEIGHT * aux_grad
    # float64 rounding is ~1e-15 of the largest entry; a wrong loss scale or weight moves it by tens of percent
    torch.testing.assert_close(sum(seen_grads[:accumulation]), expected, rtol=1e-9,
                               atol=1e-9 * expected.abs().max().item())
    assert dispersion_of(model, blocks) < dispersion_of(initial, blocks) - 0.03  # -0.31 -> -0.36 or lower


def test_hf_trainer_example_trains_with_the_dispersion_loss(model, blocks, tmp_path):
    from transformers import TrainingArguments

    initial = copy.deepcopy(model)
    seen_grads = watch_gradients(model)
    # two micro-batches of two blocks per step: the loss must be scaled for gradient accumulation
    args = TrainingArguments(output_dir=str(tmp_path), max_steps=STEPS, per_device_train_batch_size=2,
                             gradient_accumulation_steps=2, learning_rate=3e-3, logging_steps=1, save_strategy="no",
                             report_to="none", use_cpu=True, disable_tqdm=True, seed=0)
    train_dataset = [{"input_ids": block, "labels": block} for block in blocks]
    namespace = run_example("hf-trainer", model=model, args=args, train_dataset=train_dataset)
    logged = [entry["loss"] for entry in namespace["trainer"].state.log_history if "loss" in entry]
    assert len(logged) == STEPS
    check_training(model, initial, blocks, seen_grads, logged[-1], accumulation=2)


def test_accelerate_example_trains_with_the_dispersion_loss(model, blocks):
    initial = copy.deepcopy(model)
    seen_grads = watch_gradients(model)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    batches = [{"input_ids": blocks, "labels": blocks}] * STEPS
    loader = torch.utils.data.DataLoader(batches, batch_size=None)  # each item is already a batch
    namespace = run_example("accelerate-loop", model=model, optimizer=optimizer, loader=loader)
    check_training(namespace["model"], initial, blocks, seen_grads, namespace["loss"].item())
