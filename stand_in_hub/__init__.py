"""A miniature stand-in for the Hugging Face Hub, built offline and served over local HTTP.

The paper's configuration (``configs/paper.yaml``) names hub models and datasets that cannot be
downloaded here. This package builds, under the same repository ids, tiny look-alikes and
serves them through the endpoints the real clients call, so that
``huggingface_hub.snapshot_download(repo, revision=...)``, ``transformers.Auto*.from_pretrained``,
``datasets.load_dataset(path, name, split=...)`` and lm-eval's own dataset loading all run for
real once ``HF_ENDPOINT`` points at the server::

    python -m stand_in_hub build /tmp/hub        # a few seconds, ~10 MB
    python -m stand_in_hub serve /tmp/hub --port 0
    # prints http://127.0.0.1:PORT ; then, in the clients' environment (see client_env):
    HF_ENDPOINT=http://127.0.0.1:PORT HF_HUB_OFFLINE=0 HF_DATASETS_OFFLINE=0 HF_HOME=<fresh dir> ...

From Python: ``build(out_dir)`` and ``with serve(out_dir) as url: ...`` (a server thread).

What is built (:mod:`.catalog`)
-------------------------------
* **Models**: every ``source: hub`` model of the config (and its ``pretrain.tokenizer``), plus
  ``allenai/Olmo-3-1025-7B`` with the branches the paper's Fig. 4 measures (the config's ``series``),
  each with different weights. Random weights of the real config class (GPT2, Qwen2 for
  Qwen2.5 and the DeepSeek-R1 distills, Qwen3, Bloom, Olmo3), 2-4 layers, hidden 32 or 40, the MLP
  widening with the size in the real name so that a family's parameter counts keep their
  order; dtype, tied embeddings, padded vocabulary and context length as the real configs.
  PolyPythia (``EleutherAI/pythia-{size}``, ``-seed{k}``, ``-data-seed{k}``, ``-weight-seed{k}``;
  ``configs/polypythia.yaml``) as GPTNeoX at half the real depth, each revision a model pins
  (``step0``) or a series lists a branch of its own weights; as on the Hub, a ``step`` branch
  holds ``pytorch_model.bin`` alone and ``main`` both formats.
  Tokenizers are one byte-level BPE (448 tokens: the 256 bytes and 192 merges learnt from
  *Emma* in a fraction of a second) dressed per family: special tokens, bos/eos/pad/unk, ``tokenizer_class`` and
  ``model_max_length`` of the real repository (GPT-2 has no pad token, like the real one).
* **Qwen-1** (``Qwen/Qwen-1_8B`` ... ``Qwen-72B``, ``trust_remote_code: true``): the real
  repositories ship their own modelling code, so these do too: :mod:`.qwen1` holds our own
  ``configuration_qwen.py`` and ``modeling_qwen.py`` (same config keys and parameter names as
  the real Qwen-1: RMSNorm, rotary embeddings, SwiGLU, ``transformer.h.N``), copied into each
  repository and named in ``config.json``'s ``auto_map`` exactly as the real one does:
  ``AutoConfig`` and ``AutoModelForCausalLM`` only. Transformers' real ``trust_remote_code``
  path therefore runs (download, import check, dynamic module), and, as with the real
  repositories, ``AutoModel`` cannot load them: a client must go through
  ``AutoModelForCausalLM``. The one simplification is the tokenizer: the real one is a
  tiktoken-based remote class (``tokenization_qwen.py`` + ``qwen.tiktoken``); the stand-in ships
  a standard ``tokenizer.json`` with the same quirk that matters downstream: no bos/eos/pad
  token is declared (``<|endoftext|>`` exists as a special token; lm-eval sets it as pad for
  ``model_type: qwen``).
* **Text datasets**: every ``source: hub`` dataset of the config (Salesforce/wikitext,
  qiaojin/PubMedQA ``pqa_labeled``, stanfordnlp/imdb, rajpurkar/squad,
  codelion/fineweb-edu-1B) plus allenai/c4 ``en`` (gzipped JSON lines matched by a glob, as the
  real repository), with the real configs, splits and columns and prose from Jane Austen's
  novels (:mod:`.prose`, from the offline corpus).
* **lm-eval datasets** of ``evaluation.tasks`` (:data:`~.catalog.TASK_DATASETS`): the
  ``dataset_path``/``dataset_name`` of lm-eval's task YAMLs, every split they name, the
  columns their templates read, :data:`~.task_datasets.ROWS` rows per split; MMLU has one
  config per subject (57) with test/validation/dev.

Datasets are parquet files (with their ``datasets.Features``, so class labels keep their
names) under ``<config>/<split>-00000-of-00001.parquet`` and a README whose YAML header lists
the configs, as on the Hub.

The tree and the server
-----------------------
``<root>/<models|datasets>/<org>/<name>/<branch>/<files>``: every branch directory is a full
snapshot; its commit sha hashes the id, branch and file contents, so it is stable across builds
and servers (:mod:`.repository`). The server (:mod:`.server`) answers info, tree, paths-info,
refs and resolve requests for branch names and commit shas, and answers an unknown repository,
revision or file with 404 and the Hub's ``X-Error-Code`` (RepoNotFound, RevisionNotFound,
EntryNotFound), which ``huggingface_hub`` raises as ``RepositoryNotFoundError``,
``RevisionNotFoundError`` and ``EntryNotFoundError``.
"""

from stand_in_hub.build import BuildSummary, build
from stand_in_hub.catalog import (
    OLMO3_REPO,
    Catalog,
    CatalogError,
    ModelRepo,
    load_catalog,
)
from stand_in_hub.server import Fault, Hub, HubServer, inject, requests_received, serve

__all__ = [
    "OLMO3_REPO",
    "BuildSummary",
    "Catalog",
    "CatalogError",
    "Fault",
    "Hub",
    "HubServer",
    "ModelRepo",
    "build",
    "client_env",
    "inject",
    "load_catalog",
    "requests_received",
    "serve",
]


def client_env(url: str, cache_dir: str) -> dict[str, str]:
    """Environment variables that point the Hub clients at a stand-in server at ``url``, with
    their caches in ``cache_dir``. ``huggingface_hub`` and ``datasets`` read ``HF_ENDPOINT``
    when imported, so these belong in the environment of a new process."""
    return {
        "HF_ENDPOINT": url,
        "HF_HOME": f"{cache_dir}/home",
        "HF_HUB_CACHE": f"{cache_dir}/hub",
        "HF_DATASETS_CACHE": f"{cache_dir}/datasets",
        "HF_HUB_OFFLINE": "0",
        "HF_DATASETS_OFFLINE": "0",
        "TRANSFORMERS_OFFLINE": "0",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_DISABLE_PROGRESS_BARS": "1",
        "HF_DATASETS_DISABLE_PROGRESS_BARS": "1",
    }
