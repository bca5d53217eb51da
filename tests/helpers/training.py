"""The training tests' tiny setup: a 2-layer GPT-2 over a 97-token vocabulary, random token blocks,
the 20-step config every exact-resume test runs, and readers of a run's log.csv, DVCLive series and
saved state (tests/unit/test_train.py, test_train_forward.py, test_distillation.py, test_multinode.py,
and the scripts they start in subprocesses)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
import torch
from transformers import GPT2Config, GPT2LMHeadModel

from condensation.config.runs import TrainConfig

VOCAB, BLOCK = 97, 16


def make_model(seed: int = 0) -> GPT2LMHeadModel:
    """Tiny GPT-2 with its default dropout (0.1), so exact resume needs the RNG states restored."""
    torch.manual_seed(seed)
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, n_positions=64, vocab_size=VOCAB, n_inner=64,
        bos_token_id=0, eos_token_id=0,  # GPT-2's 50256 lies outside the tiny vocabulary
    )
    return GPT2LMHeadModel(config)


def make_blocks(num_blocks: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, VOCAB, size=(num_blocks, BLOCK), dtype=np.int64)


def resume_config() -> TrainConfig:
    """20 steps of 2 x 4 blocks over 22 blocks: several epochs, batches straddling epoch ends,
    gradient accumulation, states every 4 steps, evaluation checkpoints at 0, 5, 10, 15, 20; the
    DVCLive tracker (the default) and the condensation probe at 0, 3, ..., 18, 20, so that every
    resume test also checks that watching a run does not change it."""
    return TrainConfig(
        train_tokens=20 * 2 * 4 * BLOCK,
        block_size=BLOCK,
        micro_batch_size=4,
        grad_accum_steps=2,
        lr=1e-3,
        checkpoint_every=4,
        num_checkpoints=3,
        val_batches=2,
        probe_every=3,
        probe_sequences=6,
    )


TIMINGS = ("train/tokens_per_s", "probe/seconds")
"""Tracker series that measure time: they differ between runs, unlike every other series."""


TRAIN_BLOCKS, VAL_BLOCKS = make_blocks(22, seed=1), make_blocks(10, seed=2)


def read_log(out_dir: Path) -> list[dict[str, str]]:
    with open(out_dir / "log.csv", newline="") as handle:
        return list(csv.DictReader(handle))


def read_series(out_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every DVCLive series of a run: name (``train/ce``) -> [(step, value)] in file order."""
    root = out_dir / "dvclive" / "plots" / "metrics"
    series = {}
    for path in sorted(root.rglob("*.tsv")):
        with open(path, newline="") as handle:
            rows = list(csv.DictReader(handle, delimiter="\t"))
        name = path.relative_to(root).with_suffix("").as_posix()
        series[name] = [(int(row["step"]), float(row[path.stem])) for row in rows]
    return series


def assert_same_series_except_timings(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for name in a:
        if name in TIMINGS:
            assert [step for step, _ in a[name]] == [step for step, _ in b[name]], name
        else:
            assert a[name] == b[name], name


def assert_same_weights(a: torch.nn.Module, b: torch.nn.Module) -> None:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    assert pa.keys() == pb.keys()
    for name in pa:
        assert torch.equal(pa[name], pb[name]), f"{name} differs"


def assert_same_log_except_time(a: list[dict[str, str]], b: list[dict[str, str]]) -> None:
    strip = lambda rows: [{k: v for k, v in row.items() if k != "elapsed_s"} for row in rows]  # noqa: E731
    assert strip(a) == strip(b)


def state_step(progress: Path) -> int:
    return json.loads(progress.read_text())["step"]


def tiny_tokenizer():
    from tokenizers import Tokenizer
    from tokenizers.models import WordLevel
    from tokenizers.pre_tokenizers import WhitespaceSplit
    from transformers import PreTrainedTokenizerFast

    backend = Tokenizer(WordLevel({f"t{i}": i for i in range(VOCAB)}, unk_token="t0"))
    backend.pre_tokenizer = WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=backend)
