"""Tiny random-weight models and family tokenizers for the stand-in hub.

One byte-level BPE (a few hundred merges learnt from Austen) is trained once per build; each
family wraps it with its own special tokens, bos/eos/pad/unk choice, ``tokenizer_class`` and
``model_max_length``, as the real repositories declare them (GPT-2 has no pad token; Qwen-1
declares no special token at all). Weights are drawn with a seed derived from the repository
id and revision, so each Olmo-3 branch holds different weights, and saved in the dtype the
real checkpoints use.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
import shutil
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from stand_in_hub.catalog import ModelRepo, Shape
from stand_in_hub.prose import Prose
from stand_in_hub.repository import revision_dir, write_bytes

CORE_VOCAB_SIZE = 448
QWEN1_CODE = Path(__file__).resolve().parent / "qwen1"
QWEN1_AUTO_MAP = {"AutoConfig": "configuration_qwen.QWenConfig",
                  "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"}
"""As in the real Qwen-1 repositories: no ``AutoModel`` entry, only the causal-LM class."""


@dataclass(frozen=True)
class FamilyStyle:
    """How a family's real repositories declare their tokenizer and store their weights."""

    tokenizer_class: str
    special_tokens: tuple[str, ...]
    model_max_length: int
    roles: dict[str, str] = field(default_factory=dict)
    """bos_token / eos_token / pad_token / unk_token -> one of ``special_tokens``."""
    prepend_bos: bool = False
    dtype: str = "bfloat16"
    vocab_multiple: int = 64
    """The real embedding matrices are padded past the tokenizer's size to a round number."""
    max_positions: int | None = None
    extra: dict[str, Any] = field(default_factory=dict)


_QWEN_SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
_R1_BOS, _R1_EOS = "<｜begin▁of▁sentence｜>", "<｜end▁of▁sentence｜>"

STYLES = {
    "gpt2": FamilyStyle(
        "GPT2Tokenizer", ("<|endoftext|>",), 1024,
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
        dtype="float32", vocab_multiple=1, max_positions=1024, extra={"add_prefix_space": False},
    ),
    "qwen1": FamilyStyle("PreTrainedTokenizerFast", _QWEN_SPECIALS, 8192, max_positions=8192),
    "qwen2.5": FamilyStyle(
        "Qwen2Tokenizer", _QWEN_SPECIALS, 131072,
        {"eos_token": "<|endoftext|>", "pad_token": "<|endoftext|>"}, max_positions=32768, extra={"errors": "replace"},
    ),
    "qwen3": FamilyStyle(
        "Qwen2Tokenizer", (*_QWEN_SPECIALS, "<think>", "</think>"), 131072,
        {"eos_token": "<|im_end|>", "pad_token": "<|endoftext|>"}, max_positions=40960, extra={"errors": "replace"},
    ),
    "r1-distill": FamilyStyle(
        "LlamaTokenizerFast", (_R1_BOS, _R1_EOS, "<think>", "</think>"), 16384,
        {"bos_token": _R1_BOS, "eos_token": _R1_EOS, "pad_token": _R1_EOS}, prepend_bos=True, max_positions=131072,
        extra={"add_bos_token": True, "add_eos_token": False},
    ),
    "bloom": FamilyStyle(
        "BloomTokenizerFast", ("<unk>", "<s>", "</s>", "<pad>"), 2048,
        {"bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>", "pad_token": "<pad>"},
        dtype="float16", extra={"padding_side": "left"},
    ),
    "olmo3": FamilyStyle(
        "GPT2Tokenizer", ("<|endoftext|>", "<|pad|>"), 65536,
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>",
         "pad_token": "<|pad|>"},
        max_positions=65536,
    ),
    # Pythia: GPT-NeoX-20B's tokenizer, no pad token declared (lm-eval sets one), float16
    # checkpoints, the embedding padded to 50,304 rows (a multiple of 128)
    "pythia": FamilyStyle(
        "GPTNeoXTokenizerFast", ("<|endoftext|>", "<|padding|>"), 2048,
        {"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>", "unk_token": "<|endoftext|>"},
        dtype="float16", vocab_multiple=128, max_positions=2048,
    ),
}
LEGACY_WEIGHTS_ONLY = re.compile(r"^step\d+$")
"""Revisions whose real repositories hold ``pytorch_model.bin`` alone: Pythia's training
checkpoints (branches ``step0`` ... ``step143000``); its ``main`` holds both formats."""
# Qwen2.5-Math was trained with a 4k context; the other Qwen2.5 bases with 32k.
MATH_MAX_POSITIONS = 4096


def train_core_tokenizer(prose: Prose):
    """A byte-level BPE learnt from one novel; no special tokens (each family adds its own)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=CORE_VOCAB_SIZE, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False
    )
    core.train_from_iterator(prose.paragraphs("emma"), trainer=trainer)
    return core


def family_tokenizer(core, style: FamilyStyle):
    from tokenizers import AddedToken, Tokenizer, processors

    tokenizer = Tokenizer.from_str(core.to_str())
    tokenizer.add_special_tokens([AddedToken(token, special=True, normalized=False) for token in style.special_tokens])
    if style.prepend_bos:
        bos = style.roles["bos_token"]
        tokenizer.post_processor = processors.TemplateProcessing(
            single=f"{bos} $A", pair=f"{bos} $A {bos} $B", special_tokens=[(bos, tokenizer.token_to_id(bos))]
        )
    return tokenizer


def write_tokenizer(tokenizer, style: FamilyStyle, directory: Path) -> None:
    """``tokenizer.json`` and ``tokenizer_config.json``; byte-level BPE families also get the
    ``vocab.json`` and ``merges.txt`` their real repositories carry."""
    write_bytes(directory / "tokenizer.json", tokenizer.to_str().encode())
    config = {"tokenizer_class": style.tokenizer_class, "model_max_length": style.model_max_length,
              "clean_up_tokenization_spaces": False, **style.roles, **style.extra}
    write_bytes(directory / "tokenizer_config.json", json.dumps(config, indent=2, ensure_ascii=False).encode())
    if style.tokenizer_class in ("GPT2Tokenizer", "Qwen2Tokenizer"):
        model = json.loads(tokenizer.to_str())["model"]
        write_bytes(directory / "vocab.json", json.dumps(model["vocab"], ensure_ascii=False).encode())
        merges = [" ".join(pair) if isinstance(pair, list) else pair for pair in model["merges"]]
        write_bytes(directory / "merges.txt", ("#version: 0.2\n" + "\n".join(merges) + "\n").encode())


# --------------------------------------------------------------------------------------------
# Configs
# --------------------------------------------------------------------------------------------


def _ids(tokenizer, style: FamilyStyle) -> dict[str, int]:
    """``bos_token_id`` / ``eos_token_id`` / ``pad_token_id`` of the family's declared tokens."""
    return {f"{role[:-6]}_token_id": tokenizer.token_to_id(token)
            for role, token in style.roles.items() if role != "unk_token"}


def _gpt2(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import GPT2Config

    return GPT2Config(vocab_size=vocab, n_positions=1024, n_embd=shape.hidden, n_layer=shape.layers,
                      n_head=shape.heads, n_inner=shape.intermediate, architectures=["GPT2LMHeadModel"], **ids)


def _qwen2(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import Qwen2Config

    positions = MATH_MAX_POSITIONS if "Math" in model.repo_id else STYLES[model.family].max_positions
    return Qwen2Config(
        vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.heads // 2,
        max_position_embeddings=positions, tie_word_embeddings=model.family == "qwen2.5" and model.size < 5,
        use_sliding_window=False, architectures=["Qwen2ForCausalLM"], **ids,
    )


def _qwen3(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import Qwen3Config

    return Qwen3Config(
        vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads, num_key_value_heads=shape.heads // 2,
        head_dim=shape.hidden // shape.heads, max_position_embeddings=STYLES["qwen3"].max_positions,
        tie_word_embeddings=model.size < 5, architectures=["Qwen3ForCausalLM"], **ids,
    )


def _bloom(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import BloomConfig

    return BloomConfig(vocab_size=vocab, hidden_size=shape.hidden, n_layer=shape.layers, n_head=shape.heads,
                       architectures=["BloomForCausalLM"], **ids)


def _olmo3(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import Olmo3Config

    return Olmo3Config(
        vocab_size=vocab, hidden_size=shape.hidden, intermediate_size=shape.intermediate,
        num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        max_position_embeddings=STYLES["olmo3"].max_positions, sliding_window=4096,
        architectures=["Olmo3ForCausalLM"], **ids,
    )


def _qwen1(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from stand_in_hub.qwen1.configuration_qwen import QWenConfig

    return QWenConfig(
        vocab_size=vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        kv_channels=shape.hidden // shape.heads, intermediate_size=2 * shape.intermediate,
        max_position_embeddings=8192, seq_length=8192, architectures=["QWenLMHeadModel"], auto_map=QWEN1_AUTO_MAP,
    )


def _gptneox(model: ModelRepo, shape: Shape, vocab: int, ids: dict[str, int]):
    from transformers import GPTNeoXConfig

    return GPTNeoXConfig(
        vocab_size=vocab, hidden_size=shape.hidden, num_hidden_layers=shape.layers, num_attention_heads=shape.heads,
        intermediate_size=shape.intermediate, rotary_pct=0.25, use_parallel_residual=True,
        max_position_embeddings=STYLES["pythia"].max_positions, tie_word_embeddings=False,
        architectures=["GPTNeoXForCausalLM"], **ids,
    )


CONFIG_BUILDERS: dict[str, Callable] = {
    "gpt2": _gpt2, "qwen1": _qwen1, "qwen2.5": _qwen2, "r1-distill": _qwen2, "qwen3": _qwen3,
    "bloom": _bloom, "olmo3": _olmo3, "pythia": _gptneox,
}


def model_config(model: ModelRepo, tokenizer):
    style = STYLES[model.family]
    vocab = style.vocab_multiple * math.ceil(tokenizer.get_vocab_size() / style.vocab_multiple)
    return CONFIG_BUILDERS[model.family](model, model.shape, vocab, _ids(tokenizer, style))


def weight_seed(repo_id: str, revision: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{repo_id}@{revision}".encode()).digest()[:4], "big")


def random_model(config, seed: int):
    import torch
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    if config.model_type == "qwen":
        from stand_in_hub.qwen1.modeling_qwen import QWenLMHeadModel

        return QWenLMHeadModel(config)
    return AutoModelForCausalLM.from_config(config)


def write_legacy_weights(network, directory: Path, alone: bool) -> None:
    """``pytorch_model.bin`` (a pickled state dict) beside the safetensors, or instead of them
    (``alone``): the format of the Hub's older checkpoints, which a client must still load."""
    import torch

    torch.save({name: tensor.contiguous() for name, tensor in network.state_dict().items()},
               directory / "pytorch_model.bin")
    if alone:
        (directory / "model.safetensors").unlink()


def write_model_repo(root: str | Path, model: ModelRepo, core) -> list[Path]:
    """Every revision of a model repository: config, weights, tokenizer (and Qwen-1's code)."""
    import torch

    style = STYLES[model.family]
    tokenizer = family_tokenizer(core, style)
    config = model_config(model, tokenizer)
    directories = []
    for revision in model.revisions:
        directory = revision_dir(root, "models", model.repo_id, revision)
        network = random_model(config, weight_seed(model.repo_id, revision)).to(getattr(torch, style.dtype))
        network.save_pretrained(directory)
        if model.family == "pythia":
            write_legacy_weights(network, directory, alone=bool(LEGACY_WEIGHTS_ONLY.match(revision)))
        write_tokenizer(tokenizer, style, directory)
        if model.family == "qwen1":
            for name in ("configuration_qwen.py", "modeling_qwen.py"):
                shutil.copyfile(QWEN1_CODE / name, directory / name)
        card = (f"# {model.repo_id} (stand-in)\n\nA {config.model_type} model with random weights "
                f"({sum(p.numel() for p in network.parameters())} parameters), revision `{revision}`.\n")
        write_bytes(directory / "README.md", card.encode())
        directories.append(directory)
    return directories
