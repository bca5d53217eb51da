"""Distillation: the KL term against a plain softmax formula (value and gradient), the teacher
frozen and run on the same tokens in the same step, the tokenizer check, and a run of the loop."""

from __future__ import annotations

import math

import pytest
import torch

from condensation.config.objectives import DistillationConfig, resolve_method
from condensation.config.runs import TrainConfig
from condensation.training.distillation import Teacher, distillation_loss
from condensation.training.loop import train
from tests.helpers.float_bounds import LOGGED_REL
from tests.helpers.training import (
    BLOCK,
    TRAIN_BLOCKS,
    VAL_BLOCKS,
    VOCAB,
    make_model,
    read_log,
    tiny_tokenizer,
)


def plain_distillation(student: torch.Tensor, teacher: torch.Tensor, temperature: float) -> torch.Tensor:
    """T^2 * sum_v p_v (log p_v - log q_v), p the teacher's and q the student's softened softmax,
    written out with exp and sums, in float64, averaged over every position but the last."""
    batch, tokens, _ = student.shape
    total = torch.zeros((), dtype=torch.float64)
    for b in range(batch):
        for t in range(tokens - 1):
            s, u = student[b, t].double() / temperature, teacher[b, t].double() / temperature
            q = torch.exp(s) / torch.exp(s).sum()
            p = torch.exp(u) / torch.exp(u).sum()
            total = total + (p * (torch.log(p) - torch.log(q))).sum()
    return temperature**2 * total / (batch * (tokens - 1))


def logits(seed: int, shape=(2, 5, 11), scale=3.0) -> torch.Tensor:
    return scale * torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


@pytest.mark.parametrize("temperature", [1.0, 2.0, 0.5])
def test_value_and_gradient_match_the_plain_formula(temperature):
    student, teacher = logits(0).requires_grad_(True), logits(1)
    value = distillation_loss(student, teacher, temperature)
    (grad,) = torch.autograd.grad(value, student)
    reference_student = student.detach().clone().requires_grad_(True)
    expected = plain_distillation(reference_student, teacher, temperature)
    (expected_grad,) = torch.autograd.grad(expected, reference_student)
    assert value.item() == pytest.approx(expected.item(), rel=1e-10)
    torch.testing.assert_close(grad, expected_grad, rtol=1e-9, atol=1e-12)
    # the last position of each block is not scored, as in the cross-entropy
    assert grad[:, -1].abs().max() == 0
    assert grad[:, :-1].abs().max() > 0


def test_gradient_in_closed_form_and_gradcheck():
    """d/ds of T^2 KL(p || softmax(s/T)) is T (q - p) at each scored position, over their count."""
    temperature = 2.0
    student, teacher = logits(2).requires_grad_(True), logits(3)
    (grad,) = torch.autograd.grad(distillation_loss(student, teacher, temperature), student)
    p = torch.softmax(teacher / temperature, -1)
    q = torch.softmax(student.detach() / temperature, -1)
    expected = temperature * (q - p) / (student.shape[0] * (student.shape[1] - 1))
    expected[:, -1] = 0
    torch.testing.assert_close(grad, expected, rtol=1e-9, atol=1e-12)
    assert torch.autograd.gradcheck(lambda s: distillation_loss(s, teacher, 1.5), (student,))


def test_zero_for_the_teacher_itself_and_positive_otherwise():
    teacher = logits(4)
    assert distillation_loss(teacher, teacher, 2.0).item() == pytest.approx(0.0, abs=1e-12)
    assert distillation_loss(logits(5), teacher, 2.0).item() > 0.01
    # a shift of every logit of a position changes no distribution
    assert distillation_loss(teacher + 7.0, teacher, 2.0).item() == pytest.approx(0.0, abs=1e-9)


def test_low_precision_logits_are_upcast():
    student, teacher = logits(6, scale=1.0), logits(7, scale=1.0)
    exact = distillation_loss(student, teacher, 2.0)
    low = distillation_loss(student.bfloat16(), teacher.bfloat16(), 2.0)
    assert low.dtype == torch.float32
    assert low.item() == pytest.approx(exact.item(), rel=0.05)


def test_teacher_is_frozen_and_run_on_the_same_ids():
    tokenizer = tiny_tokenizer()
    model = make_model(seed=3)
    model.train()
    teacher = Teacher.matched(DistillationConfig("teacher", temperature=2.0), model=model, tokenizer=tokenizer,
                              student_tokenizer=tokenizer)
    assert not model.training and not any(p.requires_grad for p in model.parameters())
    ids = torch.as_tensor(TRAIN_BLOCKS[:2])
    student = make_model(seed=4)
    out = student(input_ids=ids)
    # Student logits in float64: the KL is then computed in float64 from the same float32 logits on
    # both sides (the teacher's float32 forward runs the same kernels in both), as in the test above.
    # (In float32 the KL, ~0.01, sums p (log p - log q) over log-probabilities of size ~1: its
    # rounding, which varies with the vector width, is ~1e-5 of it.)
    value = teacher.loss(out.logits.double(), ids)
    with torch.no_grad():
        expected = plain_distillation(out.logits.detach(), model(input_ids=ids).logits, 2.0)
    assert value.dtype == torch.float64 and value.item() == pytest.approx(expected.item(), rel=1e-10)
    value.backward()
    assert all(p.grad is None for p in model.parameters())
    assert student.transformer.wte.weight.grad.abs().max() > 0


def test_a_teacher_of_another_tokenizer_is_refused():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from transformers import PreTrainedTokenizerFast

    other = PreTrainedTokenizerFast(
        tokenizer_object=Tokenizer(WordLevel({f"w{i}": i for i in range(VOCAB)}, unk_token="w0")))
    with pytest.raises(ValueError, match="teacher 'big' has another tokenizer.*other ids"):
        Teacher.matched(DistillationConfig("big"), model=make_model(), tokenizer=other,
                        student_tokenizer=tiny_tokenizer())


def test_padded_output_rows_are_left_out():
    """A teacher whose output layer has unused rows beyond the tokenizer is compared on the tokenizer's ids."""
    config = DistillationConfig("teacher")
    wide = make_model(seed=1)
    wide.resize_token_embeddings(VOCAB + 5)
    teacher = Teacher(wide, config, vocab_size=VOCAB)
    ids = torch.as_tensor(TRAIN_BLOCKS[:1])
    student_logits = make_model(seed=2)(input_ids=ids).logits
    with torch.no_grad():
        expected = distillation_loss(student_logits, wide(input_ids=ids).logits[..., :VOCAB], config.temperature)
    # the same float32 forward and loss, in the same order: bit-identical
    assert teacher.loss(student_logits, ids).item() == expected.item()


def test_method_needs_a_teacher_and_records_every_option():
    with pytest.raises(ValueError, match="needs a teacher"):
        resolve_method({"objective": "distillation"})
    with pytest.raises(ValueError, match="do not apply"):
        resolve_method({"objective": "distillation", "teacher": "big", "tau": 1.0})
    with pytest.raises(ValueError, match="temperature"):
        resolve_method({"objective": "distillation", "teacher": "big", "temperature": 0})
    method = resolve_method({"objective": "distillation", "teacher": "big", "weight": 0.5})
    assert method.weight == 0.5
    assert method.as_dict() == {"objective": "distillation", "teacher": "big", "weight": 0.5, "temperature": 2.0}


def test_a_distilled_run_logs_its_term_and_moves_towards_the_teacher(tmp_path):
    """Same tokens, same seed: the distilled student ends closer to its teacher than the CE one."""
    tokenizer = tiny_tokenizer()
    config = TrainConfig(train_tokens=12 * 4 * BLOCK, block_size=BLOCK, micro_batch_size=4, lr=3e-3,
                         probe_every=0, tracker="none")
    teacher_model = make_model(seed=7)
    teacher = Teacher.matched(DistillationConfig("teacher"), model=teacher_model, tokenizer=tokenizer,
                              student_tokenizer=tokenizer)
    distilled = make_model(seed=0)
    train(distilled, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "distilled", tokenizer=tokenizer, method=teacher)
    plain = make_model(seed=0)
    train(plain, TRAIN_BLOCKS, VAL_BLOCKS, config, tmp_path / "ce",
          tokenizer=tokenizer)

    rows = read_log(tmp_path / "distilled")[1:]
    for row in rows:
        assert float(row["aux_loss"]) > 0
        assert float(row["loss"]) == pytest.approx(float(row["ce_loss"]) + float(row["aux_loss"]),
                                                   rel=LOGGED_REL)  # log.csv's 8 digits
    assert all(row["aux_loss"] == "" for row in read_log(tmp_path / "ce")[1:])
    ids = torch.as_tensor(VAL_BLOCKS[:4])
    with torch.no_grad():
        target = teacher_model(input_ids=ids).logits
        gap = {name: distillation_loss(model.eval()(input_ids=ids).logits, target, 1.0).item()
               for name, model in (("distilled", distilled), ("ce", plain))}
    assert math.isfinite(gap["distilled"]) and gap["distilled"] < gap["ce"]
