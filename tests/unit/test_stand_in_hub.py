"""The stand-in Hugging Face Hub: its catalog, its build, its server, and the real clients
(huggingface_hub, transformers, datasets, lm-eval) run against it in fresh processes."""

from __future__ import annotations

import hashlib
import json
import os
import struct
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

from stand_in_hub import OLMO3_REPO, CatalogError, Hub, load_catalog
from stand_in_hub.catalog import MMLU_SUBJECTS, PAPER_CONFIG, nominal_size
from stand_in_hub.repository import scan

ROOT = Path(__file__).resolve().parents[2]
PAPER = yaml.safe_load(PAPER_CONFIG.read_text())
PAPER_HUB_MODELS = {spec["id"] for spec in PAPER["models"].values() if spec["source"] == "hub"}
OLMO3_REVISIONS = tuple(point["revision"] for point in PAPER["series"]["olmo3-7b-pretraining"]["checkpoints"])

# What lm-eval's task YAMLs read: (dataset_path, dataset_name) -> (splits, columns).
TASK_DATA = {
    ("facebook/anli", None): ({f"{p}_r{r}" for r in (1, 2, 3) for p in ("train", "dev", "test")},
                              {"premise", "hypothesis", "label"}),
    ("EleutherAI/lambada_openai", "default"): ({"test"}, {"text"}),
    ("allenai/openbookqa", "main"): ({"train", "validation", "test"}, {"question_stem", "choices", "answerKey"}),
    ("baber/piqa", None): ({"train", "validation", "test"}, {"goal", "sol1", "sol2", "label"}),
    ("truthfulqa/truthful_qa", "multiple_choice"): ({"validation"}, {"question", "mc1_targets", "mc2_targets"}),
    ("allenai/winogrande", "winogrande_xl"): ({"train", "validation", "test"},
                                              {"sentence", "option1", "option2", "answer"}),
    ("allenai/ai2_arc", "ARC-Easy"): ({"train", "validation", "test"}, {"question", "choices", "answerKey"}),
    ("allenai/ai2_arc", "ARC-Challenge"): ({"train", "validation", "test"}, {"question", "choices", "answerKey"}),
    ("cais/mmlu", "anatomy"): ({"test", "validation", "dev"}, {"question", "choices", "answer"}),
    ("cais/mmlu", "world_religions"): ({"test", "validation", "dev"}, {"question", "choices", "answer"}),
    ("openlifescienceai/medmcqa", None): ({"train", "validation", "test"},
                                          {"question", "opa", "opb", "opc", "opd", "cop"}),
}
# One repository per architecture class (Qwen2 twice: Qwen2.5 and the R1 distill).
ARCHITECTURES = {
    "openai-community/gpt2": ("GPT2Config", "GPT2LMHeadModel"),
    "Qwen/Qwen-1_8B": ("QWenConfig", "QWenLMHeadModel"),
    "Qwen/Qwen2.5-0.5B": ("Qwen2Config", "Qwen2ForCausalLM"),
    "deepseek-ai/DeepSeek-R1-Distill-Qwen-1.5B": ("Qwen2Config", "Qwen2ForCausalLM"),
    "Qwen/Qwen3-0.6B": ("Qwen3Config", "Qwen3ForCausalLM"),
    "bigscience/bloom-560m": ("BloomConfig", "BloomForCausalLM"),
    OLMO3_REPO: ("Olmo3Config", "Olmo3ForCausalLM"),
}


def http(url: str, method: str = "GET", headers: dict | None = None, data: bytes | None = None):
    """(status, headers, body) of one request; HTTP errors are answers too."""
    request = urllib.request.Request(url, method=method, headers=headers or {}, data=data)
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.headers, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.headers, error.read()


def stored_parameters(weights: Path) -> int:
    """Parameters in a safetensors file, from its header (tied weights are stored once)."""
    with open(weights, "rb") as handle:
        header = json.loads(handle.read(struct.unpack("<Q", handle.read(8))[0]))
    total = 0
    for name, tensor in header.items():
        if name != "__metadata__":
            count = 1
            for dim in tensor["shape"]:
                count *= dim
            total += count
    return total


# --------------------------------------------------------------------------------------------
# Catalog
# --------------------------------------------------------------------------------------------


def test_catalog_holds_every_hub_model_and_dataset_of_the_paper_config():
    catalog = load_catalog()
    assert PAPER_HUB_MODELS == {m.repo_id for m in catalog.models} and OLMO3_REPO in PAPER_HUB_MODELS
    revisions = catalog.model(OLMO3_REPO).revisions
    series = PAPER["series"]["olmo3-7b-pretraining"]["checkpoints"]
    assert revisions == tuple(point["revision"] for point in series)
    assert revisions[0] == "stage1-step0" and revisions[-1] == "main" and len(revisions) == 13
    hub_datasets = {(s["path"], s.get("name")) for s in PAPER["datasets"].values() if s["source"] == "hub"}
    assert set(catalog.text_datasets) == hub_datasets | {("allenai/c4", "en")}
    assert set(catalog.tasks) == set(PAPER["evaluation"]["tasks"])
    assert {m.family for m in catalog.models} == {"gpt2", "qwen1", "qwen2.5", "qwen3", "bloom", "r1-distill", "olmo3"}


@pytest.mark.parametrize(
    "repo_id, size",
    [("Qwen/Qwen-1_8B", 1.8), ("Qwen/Qwen2.5-0.5B", 0.5), ("Qwen/Qwen2.5-Math-7B", 7.0),
     ("bigscience/bloom-560m", 0.56), ("bigscience/bloom-7b1", 7.1), ("openai-community/gpt2-medium", 0.355),
     (OLMO3_REPO, 7.0), ("deepseek-ai/DeepSeek-R1-Distill-Qwen-32B", 32.0)],
)
def test_nominal_size_is_read_from_the_real_name(repo_id, size):
    assert nominal_size(repo_id) == pytest.approx(size)


def test_a_model_or_task_the_stand_in_cannot_build_is_refused_by_name(tmp_path):
    config = tmp_path / "config.yaml"
    config.write_text(yaml.safe_dump({"models": {"x": {"source": "hub", "id": "someone/mystery-7B"}}}))
    with pytest.raises(CatalogError, match="someone/mystery-7B"):
        load_catalog(config)
    config.write_text(yaml.safe_dump({"evaluation": {"tasks": {"hellaswag": "zero"}}}))
    with pytest.raises(CatalogError, match="hellaswag"):
        load_catalog(config)


# --------------------------------------------------------------------------------------------
# The built tree
# --------------------------------------------------------------------------------------------


def test_tree_is_small_and_holds_every_repository(stand_in_hub):
    repos = scan(stand_in_hub.root)
    models = {repo for kind, repo in repos if kind == "models"}
    assert models == PAPER_HUB_MODELS | {OLMO3_REPO}
    assert tuple(sorted(repos["models", OLMO3_REPO])) == tuple(sorted(OLMO3_REVISIONS))
    datasets = {repo for kind, repo in repos if kind == "datasets"}
    assert ({path for path, _ in TASK_DATA} | {"Salesforce/wikitext", "allenai/c4", "codelion/fineweb-edu-1B"}
            <= datasets)
    assert stand_in_hub.summary.bytes < 15e6, str(stand_in_hub.summary)
    mmlu = repos["datasets", "cais/mmlu"]["main"].files
    assert ({path.split("/")[0] for path in mmlu if path != "README.md"} == set(MMLU_SUBJECTS)
            and len(MMLU_SUBJECTS) == 57)


def test_parameter_counts_follow_the_real_sizes_within_each_family(stand_in_hub):
    pairs = [{"models": pair[side]} for pair in PAPER["pairs"].values() for side in ("first", "second")]
    for family in [*PAPER["families"].values(), *pairs]:
        ids = [PAPER["models"][name]["id"] for name in family["models"] if PAPER["models"][name]["source"] == "hub"]
        counts = [stored_parameters(stand_in_hub.root / "models" / repo_id / "main" / "model.safetensors")
                  for repo_id in ids]
        assert all(a < b for a, b in zip(counts, counts[1:])), dict(zip(ids, counts))


def test_olmo_revisions_hold_different_weights_and_the_same_config(stand_in_hub):
    revisions = stand_in_hub.root / "models" / OLMO3_REPO
    weights = {hashlib.sha256((revisions / r / "model.safetensors").read_bytes()).hexdigest() for r in OLMO3_REVISIONS}
    configs = {(revisions / r / "config.json").read_text() for r in OLMO3_REVISIONS}
    assert len(weights) == len(OLMO3_REVISIONS) and len(configs) == 1


def test_qwen1_repositories_ship_their_own_code_like_the_real_ones(stand_in_hub):
    directory = stand_in_hub.root / "models" / "Qwen" / "Qwen-7B" / "main"
    config = json.loads((directory / "config.json").read_text())
    assert config["model_type"] == "qwen" and config["architectures"] == ["QWenLMHeadModel"]
    assert config["auto_map"] == {"AutoConfig": "configuration_qwen.QWenConfig",
                                  "AutoModelForCausalLM": "modeling_qwen.QWenLMHeadModel"}
    assert {"configuration_qwen.py", "modeling_qwen.py"} <= {p.name for p in directory.iterdir()}


@pytest.mark.slow  # a client in a process of its own
def test_a_rebuild_gives_the_same_commits(stand_in_hub, tmp_path):
    """Deterministic build through the CLI: a partial tree has the full tree's commit shas."""
    repos = ["openai-community/gpt2", "allenai/ai2_arc"]
    cli = [sys.executable, "-m", "stand_in_hub", "build", str(tmp_path / "tree"), "--only", *repos]
    done = subprocess.run(cli, env=stand_in_hub.env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "1 model and 1 dataset repositories" in done.stdout
    again, first = scan(tmp_path / "tree"), scan(stand_in_hub.root)
    assert {key: {b: s.commit for b, s in v.items()} for key, v in again.items()} == {
        key: {b: s.commit for b, s in first[key].items()} for key in again
    }


# --------------------------------------------------------------------------------------------
# The server, over HTTP
# --------------------------------------------------------------------------------------------


def test_branch_and_commit_both_resolve_with_the_hub_headers(stand_in_hub):
    url = stand_in_hub.url
    status, _, body = http(f"{url}/api/models/{OLMO3_REPO}/revision/stage2-step13000")
    info = json.loads(body)
    assert status == 200 and info["id"] == OLMO3_REPO and len(info["sha"]) == 40
    assert {s["rfilename"] for s in info["siblings"]} >= {"config.json", "model.safetensors", "tokenizer.json"}
    local = (stand_in_hub.root / "models" / OLMO3_REPO / "stage2-step13000" / "config.json").read_bytes()
    for revision in ("stage2-step13000", info["sha"]):
        status, headers, body = http(f"{url}/{OLMO3_REPO}/resolve/{revision}/config.json")
        assert status == 200 and body == local
        assert (headers["X-Repo-Commit"] == info["sha"] and headers["Content-Length"] == str(len(local))
                and headers["ETag"])
    status, headers, body = http(f"{url}/{OLMO3_REPO}/resolve/main/config.json", "HEAD")
    assert status == 200 and body == b"" and headers["X-Repo-Commit"] != info["sha"]
    status, headers, body = http(f"{url}/{OLMO3_REPO}/resolve/main/config.json", headers={"Range": "bytes=2-9"})
    main = (stand_in_hub.root / "models" / OLMO3_REPO / "main" / "config.json").read_bytes()
    assert status == 206 and body == main[2:10] and headers["Content-Range"] == f"bytes 2-9/{len(main)}"


@pytest.mark.parametrize(
    "path, code",
    [("/api/models/nobody/nothing/revision/main", "RepoNotFound"),
     ("/nobody/nothing/resolve/main/config.json", "RepoNotFound"),
     ("/datasets/nobody/nothing/resolve/main/README.md", "RepoNotFound"),
     ("/api/models/openai-community/gpt2/revision/stage9-step1", "RevisionNotFound"),
     ("/openai-community/gpt2/resolve/v0.0.0/config.json", "RevisionNotFound"),
     ("/openai-community/gpt2/resolve/main/no_such_file.json", "EntryNotFound"),
     ("/api/models/openai-community/gpt2/tree/main/additional_chat_templates", "EntryNotFound"),
     ("/api/datasets/Salesforce/wikitext/tree/main/wikitext-9-v1", "EntryNotFound")],
)
def test_missing_repositories_revisions_and_files_answer_404_with_the_error_code(stand_in_hub, path, code):
    status, headers, _ = http(stand_in_hub.url + path)
    assert status == 404 and headers["X-Error-Code"] == code


def test_tree_paths_info_and_refs(stand_in_hub):
    url = stand_in_hub.url
    top = json.loads(http(f"{url}/api/datasets/Salesforce/wikitext/tree/main")[2])
    assert {(e["type"], e["path"]) for e in top} >= {("file", "README.md"), ("directory", "wikitext-103-raw-v1")}
    deep = json.loads(http(f"{url}/api/datasets/Salesforce/wikitext/tree/main/wikitext-103-v1")[2])
    assert {e["path"] for e in deep} == {f"wikitext-103-v1/{s}-00000-of-00001.parquet"
                                         for s in ("train", "validation", "test")}
    assert all(e["lfs"]["size"] == e["size"] for e in deep)
    every = json.loads(http(f"{url}/api/datasets/Salesforce/wikitext/tree/main?recursive=true")[2])
    assert len([e for e in every if e["type"] == "file"]) == 1 + 4 * 3
    body = json.dumps({"paths": ["README.md", "wikitext-103-v1", "missing.txt"]}).encode()
    found = json.loads(http(f"{url}/api/datasets/Salesforce/wikitext/paths-info/main", "POST",
                            {"Content-Type": "application/json"}, body)[2])
    assert [(e["type"], e["path"]) for e in found] == [("file", "README.md"), ("directory", "wikitext-103-v1")]
    refs = json.loads(http(f"{url}/api/models/{OLMO3_REPO}/refs")[2])
    hub = Hub(stand_in_hub.root)
    assert {b["name"]: b["targetCommit"] for b in refs["branches"]} == {
        r: hub.snapshot("models", OLMO3_REPO, r).commit for r in OLMO3_REVISIONS
    }


@pytest.mark.slow  # a client in a process of its own
def test_serve_command_prints_its_url_and_answers(stand_in_hub):
    cli = [sys.executable, "-m", "stand_in_hub", "serve", str(stand_in_hub.root), "--port", "0"]
    process = subprocess.Popen(cli, env=stand_in_hub.env, stdout=subprocess.PIPE, text=True)
    try:
        url = process.stdout.readline().strip()
        assert url.startswith("http://127.0.0.1:")
        status, _, body = http(f"{url}/api/datasets/cais/mmlu/revision/main")
        assert status == 200 and json.loads(body)["cardData"]["configs"][0]["config_name"] == MMLU_SUBJECTS[0]
    finally:
        process.terminate()
        process.wait(timeout=30)


# --------------------------------------------------------------------------------------------
# The real clients, in fresh processes
# --------------------------------------------------------------------------------------------

HUB_CLIENT = r"""
import hashlib, json, os
from huggingface_hub import hf_hub_download, snapshot_download
from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError, RevisionNotFoundError
repo = "allenai/Olmo-3-1025-7B"
result = {}
for revision in ("stage1-step0", "stage2-step13000", "main"):
    folder = snapshot_download(repo, revision=revision)
    weights = open(os.path.join(folder, "model.safetensors"), "rb").read()
    result[revision] = {"commit": os.path.basename(folder), "files": sorted(os.listdir(folder)),
                        "weights": hashlib.sha256(weights).hexdigest()}
result["by_commit"] = os.path.basename(snapshot_download(repo, revision=result["stage2-step13000"]["commit"]))
result["dataset"] = sorted(os.listdir(snapshot_download("allenai/ai2_arc", repo_type="dataset")))
failures = {
    "repo": (lambda: snapshot_download("nobody/nothing"), RepositoryNotFoundError),
    "dataset_repo": (lambda: snapshot_download("nobody/nothing", repo_type="dataset"), RepositoryNotFoundError),
    "revision": (lambda: snapshot_download(repo, revision="stage9-step1"), RevisionNotFoundError),
    "file": (lambda: hf_hub_download(repo, "no_such_file.json"), EntryNotFoundError),
}
for name, (call, expected) in failures.items():
    try:
        call()
        result[name] = "no error"
    except Exception as error:
        result[name] = "expected" if isinstance(error, expected) else repr(error)
print(json.dumps(result))
"""


@pytest.mark.slow  # a client in a process of its own
def test_snapshot_download_pins_revisions_and_raises_the_hub_errors(stand_in_hub):
    result = stand_in_hub.run_client(HUB_CLIENT)
    hub = Hub(stand_in_hub.root)
    for revision in ("stage1-step0", "stage2-step13000", "main"):
        snapshot = hub.snapshot("models", OLMO3_REPO, revision)
        assert result[revision]["commit"] == snapshot.commit
        assert result[revision]["files"] == sorted(snapshot.files)
        assert result[revision]["weights"] == snapshot.files["model.safetensors"].sha256
    assert len({result[r]["weights"] for r in ("stage1-step0", "stage2-step13000", "main")}) == 3
    assert result["by_commit"] == result["stage2-step13000"]["commit"]
    assert {"README.md", "ARC-Easy", "ARC-Challenge"} <= set(result["dataset"])
    assert {result[name] for name in ("repo", "dataset_repo", "revision", "file")} == {"expected"}


TRANSFORMERS_CLIENT = r"""
import json, sys, torch
from transformers import AutoModel, AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
result = {}
for repo in sys.argv[1:]:
    tokenizer = AutoTokenizer.from_pretrained(repo, trust_remote_code=True)
    model = AutoModelForCausalLM.from_pretrained(repo, trust_remote_code=True)
    inputs = tokenizer(["It is a truth universally acknowledged"], return_tensors="pt")
    with torch.no_grad():
        out = model(**inputs, output_hidden_states=True)
    result[repo] = {"config": type(model.config).__name__, "model": type(model).__name__,
                    "layers": model.config.num_hidden_layers, "hidden_states": len(out.hidden_states),
                    "finite": bool(torch.isfinite(out.logits).all()), "vocab": out.logits.shape[-1],
                    "eos": tokenizer.eos_token, "pad": tokenizer.pad_token, "max_length": tokenizer.model_max_length,
                    "round_trip": tokenizer.decode(inputs["input_ids"][0], skip_special_tokens=True)}
try:
    AutoModel.from_pretrained("Qwen/Qwen-1_8B", trust_remote_code=True)
    result["qwen1_auto_model"] = "loaded"
except ValueError as error:
    result["qwen1_auto_model"] = "refused"
first, last = (AutoModelForCausalLM.from_pretrained("allenai/Olmo-3-1025-7B", revision=r)
               for r in ("stage1-step0", "main"))
result["olmo_revisions_differ"] = not torch.equal(first.model.embed_tokens.weight, last.model.embed_tokens.weight)
print(json.dumps(result))
"""


@pytest.mark.slow  # a client in a process of its own
def test_from_pretrained_loads_every_architecture_class(stand_in_hub):
    result = stand_in_hub.run_client(TRANSFORMERS_CLIENT, *ARCHITECTURES)
    for repo, (config_class, model_class) in ARCHITECTURES.items():
        loaded = result[repo]
        assert (loaded["config"], loaded["model"]) == (config_class, model_class), repo
        assert loaded["hidden_states"] == loaded["layers"] + 1 and loaded["finite"], repo
        assert loaded["round_trip"] == "It is a truth universally acknowledged", repo
    gpt2 = result["openai-community/gpt2"]
    assert (gpt2["eos"], gpt2["pad"], gpt2["max_length"]) == ("<|endoftext|>", None, 1024)  # no pad, as the real GPT-2
    assert (result["Qwen/Qwen-1_8B"]["eos"], result["Qwen/Qwen-1_8B"]["pad"]) == (None, None)  # as the real Qwen-1
    assert result["Qwen/Qwen3-0.6B"]["eos"] == "<|im_end|>"
    # The real Qwen-1 auto_map has no AutoModel entry, so AutoModel refuses it; so does the stand-in.
    assert result["qwen1_auto_model"] == "refused"
    assert result["olmo_revisions_differ"] is True


DATASETS_CLIENT = r"""
import json, sys
import datasets
result = []
for spec in sys.argv[1:]:
    path, name = json.loads(spec)
    loaded = datasets.load_dataset(path, name)
    result.append({"path": path, "name": name, "splits": {s: d.num_rows for s, d in loaded.items()},
                   "features": {s: {k: repr(v) for k, v in d.features.items()} for s, d in loaded.items()},
                   "unk_rows": {s: sum("<unk>" in str(row) for row in d) for s, d in loaded.items()}})
print(json.dumps(result))
"""


@pytest.mark.slow  # a client in a process of its own
def test_load_dataset_gives_every_text_dataset_config(stand_in_hub):
    text = [(s["path"], s.get("name"), s.get("field", "text"))
            for s in PAPER["datasets"].values() if s["source"] == "hub"]
    text.append(("allenai/c4", "en", "text"))
    result = stand_in_hub.run_client(DATASETS_CLIENT, *(json.dumps([p, n]) for p, n, _ in text))
    for (path, name, field), loaded in zip(text, result):
        assert "train" in loaded["splits"], (path, name)
        for split, rows in loaded["splits"].items():
            assert rows > 0 and loaded["features"][split][field] == "Value('string')", (path, name, split)
    splits = {(r["path"], r["name"]): set(r["splits"]) for r in result}
    assert splits["Salesforce/wikitext", "wikitext-103-v1"] == {"train", "validation", "test"}
    assert splits["stanfordnlp/imdb", None] == {"train", "test", "unsupervised"}
    assert splits["allenai/c4", "en"] == {"train", "validation"}
    unk_rows = {r["name"]: r["unk_rows"]["train"] for r in result if r["path"] == "Salesforce/wikitext"}
    # rare words become <unk> in v1 only
    assert unk_rows["wikitext-103-v1"] > 0 and unk_rows["wikitext-103-raw-v1"] == 0
    imdb = next(r for r in result if r["path"] == "stanfordnlp/imdb")
    assert imdb["features"]["train"]["label"] == "ClassLabel(names=['neg', 'pos'])"


@pytest.mark.slow  # a client in a process of its own
def test_load_dataset_gives_the_lm_eval_task_datasets_with_their_columns(stand_in_hub):
    result = stand_in_hub.run_client(DATASETS_CLIENT, *(json.dumps(key) for key in TASK_DATA))
    for loaded in result:
        splits, columns = TASK_DATA[loaded["path"], loaded["name"]]
        assert set(loaded["splits"]) == splits, loaded["path"]
        assert all(rows >= 6 for rows in loaded["splits"].values()), loaded["path"]
        for features in loaded["features"].values():
            assert columns <= set(features), (loaded["path"], loaded["name"])
    features = {(r["path"], r["name"]): next(iter(r["features"].values())) for r in result}
    assert features["cais/mmlu", "anatomy"]["answer"] == "ClassLabel(names=['A', 'B', 'C', 'D'])"
    assert features["facebook/anli", None]["label"] == "ClassLabel(names=['entailment', 'neutral', 'contradiction'])"
    assert features["allenai/ai2_arc", "ARC-Easy"]["choices"] == (
        "{'text': List(Value('string')), 'label': List(Value('string'))}")


LM_EVAL_CLIENT = r"""
import json, sys
from lm_eval.api.task import Task
from lm_eval.tasks import TaskManager

def leaves(tree):
    for value in tree.values():
        if isinstance(value, Task):
            yield value
        elif isinstance(value, dict):
            yield from leaves(value)

result = {}
for task in leaves(TaskManager().load_task_or_group(sys.argv[1:])):
    docs = list(task.test_docs() if task.has_test_docs() else task.validation_docs())
    task.set_config("num_fewshot", 5)
    task.set_fewshot_seed(1234)
    context = task.fewshot_context(docs[0], num_fewshot=5)
    task.build_all_requests(limit=2, rank=0, world_size=1)
    result[task.config.task] = {"docs": len(docs), "fewshot_docs": len(list(task.fewshot_docs())),
                                "instances": len(task.instances),
                                "context": context if isinstance(context, str) else context[0]}
print(json.dumps(result))
"""


@pytest.mark.slow
def test_lm_eval_builds_every_paper_task_with_5_shot_contexts(stand_in_hub):
    tasks = list(PAPER["evaluation"]["tasks"])
    result = stand_in_hub.run_client(LM_EVAL_CLIENT, *tasks)
    assert {f"mmlu_{s}" for s in MMLU_SUBJECTS} | (set(tasks) - {"mmlu"}) == set(result)
    for name, built in result.items():
        assert built["docs"] >= 2 and built["fewshot_docs"] >= 6 and built["instances"] >= 2, name
        assert built["context"].count("\n\n") >= 5 or name == "winogrande", name  # 5 shots, blank-line separated


ALL_MODELS_CLIENT = r"""
import json, sys, torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer
torch.set_num_threads(1)
result = {}
for spec in sys.argv[1:]:
    repo, revision, remote = json.loads(spec)
    config = AutoConfig.from_pretrained(repo, revision=revision, trust_remote_code=remote)
    tokenizer = AutoTokenizer.from_pretrained(repo, revision=revision, trust_remote_code=remote)
    model = AutoModelForCausalLM.from_pretrained(repo, revision=revision, trust_remote_code=remote)
    result[f"{repo}@{revision}"] = sum(p.numel() for p in model.parameters())
print(json.dumps(result))
"""


@pytest.mark.slow
def test_every_model_and_revision_loads(stand_in_hub):
    remote = {spec["id"]: spec.get("trust_remote_code", False)
              for spec in PAPER["models"].values() if spec["source"] == "hub"}
    specs = [(m.repo_id, r, remote.get(m.repo_id, False)) for m in load_catalog().models for r in m.revisions]
    result = stand_in_hub.run_client(ALL_MODELS_CLIENT, *(json.dumps(s) for s in specs))
    assert len(result) == len(specs) == len(PAPER_HUB_MODELS) - 1 + len(OLMO3_REVISIONS)  # Olmo at every revision
    assert all(count > 0 for count in result.values())


# --------------------------------------------------------------------------------------------
# PolyPythia (configs/polypythia.yaml): GPTNeoX repositories, seeds, and checkpoints as branches
# in the older weight format
# --------------------------------------------------------------------------------------------

POLYPYTHIA_MINIATURE = PAPER_CONFIG.parent / "polypythia-miniature.yaml"


def test_the_polypythia_catalog_keeps_each_size_s_depth_order_and_every_revision_a_model_pins():
    catalog = load_catalog(POLYPYTHIA_MINIATURE)
    shapes = {model.repo_id: model.shape for model in catalog.models}
    assert shapes["EleutherAI/pythia-70m"] == shapes["EleutherAI/pythia-70m-seed1"]
    assert (shapes["EleutherAI/pythia-70m"].layers, shapes["EleutherAI/pythia-160m"].layers) == (3, 6)
    assert all(shape.intermediate == 4 * shape.hidden and shape.hidden % 32 == 0 for shape in shapes.values())
    revisions = {model.repo_id: model.revisions for model in catalog.models}
    # step0 pinned by the init models; step1000 by the series; main always
    assert revisions["EleutherAI/pythia-70m"] == ("step0", "step1000", "main")
    assert revisions["EleutherAI/pythia-160m"] == ("step0", "main")
    assert nominal_size("EleutherAI/pythia-160m-data-seed2") == 0.16


@pytest.fixture(scope="module")
def pythia_hub(tmp_path_factory):
    """Two PolyPythia repositories of the miniature, served; clients in fresh processes."""
    from stand_in_hub import build, client_env, serve

    root = tmp_path_factory.mktemp("pythia-hub") / "tree"
    build(root, POLYPYTHIA_MINIATURE, only=["EleutherAI/pythia-70m", "EleutherAI/pythia-160m-seed1"])
    caches = tmp_path_factory.mktemp("pythia-hub-clients")
    with serve(root) as url:
        yield root, os.environ | client_env(url, str(caches)) | {"PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}


PREPARE_CLIENT = r"""
import json, sys, torch
from pathlib import Path
from huggingface_hub import constants
from condensation.models import load_model, prepare_hub
torch.set_num_threads(1)
result = {}
for repo, revision in (("EleutherAI/pythia-70m", "step0"), ("EleutherAI/pythia-70m", "main"),
                       ("EleutherAI/pythia-160m-seed1", "step0")):
    handle = prepare_hub("m", repo, revision, False)
    folder = Path(constants.HF_HUB_CACHE) / f"models--{repo.replace('/', '--')}" / "snapshots" / handle.revision
    model = load_model(handle, dtype="float32", device="cpu")
    result[f"{repo}@{revision}"] = {
        "files": sorted(path.name for path in folder.iterdir()), "parameters": handle.num_parameters,
        "loaded": sum(p.numel() for p in model.parameters()), "layers": handle.num_layers,
        "model": type(model).__name__, "first": model.get_input_embeddings().weight[0, :4].tolist(),
        "head": model.config.hidden_size * model.config.vocab_size,
    }
print(json.dumps(result))
"""


@pytest.mark.slow  # a client in a process of its own
def test_a_checkpoint_branch_loads_from_pytorch_model_bin_and_main_from_safetensors_alone(pythia_hub):
    """Pythia's step branches hold only the older format; its main holds both, of which one is
    fetched. Every revision is its own weights, read the same either way."""
    root, env = pythia_hub
    files = {revision: sorted(path.name for path in (root / "models/EleutherAI/pythia-70m" / revision).iterdir())
             for revision in ("step0", "main")}
    assert "pytorch_model.bin" in files["step0"] and "model.safetensors" not in files["step0"]
    assert {"pytorch_model.bin", "model.safetensors"} <= set(files["main"])
    done = subprocess.run([sys.executable, "-c", PREPARE_CLIENT], env=env, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])
    step0, main = result["EleutherAI/pythia-70m@step0"], result["EleutherAI/pythia-70m@main"]
    assert "pytorch_model.bin" in step0["files"] and not any(name.endswith(".safetensors") for name in step0["files"])
    assert "model.safetensors" in main["files"] and "pytorch_model.bin" not in main["files"], "one copy of the weights"
    for loaded in result.values():  # measured as the base model; counted with the (untied) head either way
        assert loaded["model"] == "GPTNeoXModel" and loaded["parameters"] == loaded["loaded"] + loaded["head"]
    assert step0["layers"] == main["layers"] == 3 and result["EleutherAI/pythia-160m-seed1@step0"]["layers"] == 6
    assert step0["first"] != main["first"], "each revision holds its own weights"
    assert step0["parameters"] == main["parameters"], "the count does not depend on the format"
