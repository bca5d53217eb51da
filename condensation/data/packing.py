"""Training text as packed token blocks: tokenised batch by batch into a memory-mapped uint32
array, so a corpus of billions of tokens packs and trains on an ordinary node."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from condensation.data.text import DatasetError
from condensation.runtime.io import atomic_path, verify_manifest, write_manifest

if TYPE_CHECKING:  # torch is imported where tokens become tensors, not when the workflow plans
    import torch


def tokenize_exactly(tokenizer, texts: list[str], seq_len: int, where: str = "") -> torch.Tensor:
    """Token ids ``[N, seq_len]``: each text cut to exactly ``seq_len`` tokens (special tokens included)."""
    # deferred: torch is heavy; packing token blocks needs none
    import torch  # noqa: PLC0415

    rows = []
    for index, text in enumerate(texts):
        ids = tokenizer(text, truncation=True, max_length=seq_len)["input_ids"]
        if len(ids) < seq_len:
            raise DatasetError(
                f"{where}sequence {index} has {len(ids)} tokens, fewer than seq_len={seq_len}: "
                "raise sampling.min_words or lower sampling.seq_len"
            )
        rows.append(ids)
    return torch.tensor(rows, dtype=torch.long)


BLOCK_DTYPE = np.uint32
"""Token ids on disk: every vocabulary fits, at half the size of int64."""


def pack_token_blocks(
    batches: Iterable[Sequence[str]], tokenizer, block_size: int, validation_fraction: float, out_path: str | Path
) -> tuple[int, int]:
    """Tokenise rows batch by batch into one stream (``eos`` after each row), cut it into
    ``block_size`` blocks (the incomplete tail is dropped) and save them as a
    ``[num_blocks, block_size]`` uint32 ``.npy`` that training memory-maps; the last
    ``validation_fraction`` of the blocks (at least one) are held out for validation. Memory stays
    at one batch of text: tokens go to disk as they come, so a corpus of billions of tokens packs
    on an ordinary node. Atomic, with a manifest; returns the (train, validation) block counts."""
    out_path = Path(out_path)
    with atomic_path(out_path) as tmp:
        stream = tmp.with_name("stream.bin")
        total = _write_token_stream(batches, tokenizer, stream)
        num_blocks = total // block_size
        num_val = max(1, int(round(num_blocks * validation_fraction)))
        if num_val >= num_blocks:
            raise DatasetError(f"only {num_blocks} blocks of {block_size} tokens: too few to hold out validation")
        blocks = np.lib.format.open_memmap(tmp, mode="w+", dtype=BLOCK_DTYPE, shape=(num_blocks, block_size))
        blocks.reshape(-1)[:] = np.memmap(stream, dtype=BLOCK_DTYPE, mode="r", shape=(num_blocks * block_size,))
        blocks.flush()
        del blocks
    write_manifest(out_path, kind="token_blocks", block_size=block_size, num_validation=num_val)
    return num_blocks - num_val, num_val


def _write_token_stream(batches: Iterable[Sequence[str]], tokenizer, path: Path) -> int:
    """Append each batch's token ids (and an ``eos`` after every row) to ``path``; the count."""
    separator = [tokenizer.eos_token_id] if tokenizer.eos_token_id is not None else []
    total = 0
    with open(path, "wb") as handle:
        for rows in batches:
            ids = [token for row in tokenizer(list(rows))["input_ids"] for token in (*row, *separator)]
            np.asarray(ids, dtype=BLOCK_DTYPE).tofile(handle)
            total += len(ids)
    return total


def read_blocks(path: str | Path) -> tuple[np.ndarray, np.ndarray]:
    """Train and validation blocks of a packed ``.npy``, memory-mapped (never read whole), after
    checking the file against its manifest."""
    manifest = verify_manifest(path)
    blocks = np.load(path, mmap_mode="r")
    num_val = manifest["num_validation"]
    return blocks[:-num_val], blocks[-num_val:]
