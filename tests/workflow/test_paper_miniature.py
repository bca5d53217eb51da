"""The paper's configuration, run end to end in miniature against the stand-in Hugging Face Hub.

A copy of the repository's tracked files (what a fresh clone holds) runs
`snakemake --configfile configs/paper.yaml configs/paper-miniature.yaml` on the CPU, with
`HF_ENDPOINT` at the stand-in: the Hub's real client code downloads every model (at its pinned
revision, Olmo-3 at each of Fig. 4's), every dataset and the data of the 10 lm-eval tasks; then
the rest runs with the stand-in out of reach, as on compute nodes without a network.
"""

from __future__ import annotations

import json
import re
import socket
import subprocess

import pandas as pd
import pytest

from condensation.runtime.checkout import copy_checkout
from tests.helpers.workflow import BIN

pytestmark = pytest.mark.slow

COMMAND = ["--configfile", "configs/paper.yaml", "configs/paper-miniature.yaml"]
FETCH_RULES = ("fetch_model", "fetch_dataset", "fetch_eval_tasks")
"""The rules that download: docs/cluster.md's command for a login node runs them alone."""


# Rules of the offline default only (text corpora from Debian packages, offline tasks, toy
# pre-training checkpoints measured as a series): tests/workflow/test_pipeline.py runs them.
OFFLINE_ONLY = {"build_corpus", "build_eval_tasks", "measure_pretraining"}
# Rules for several training runs of one configuration, which the paper's families (one checkpoint
# per size) never have: Fig. 4 over seeds and mid-training pooled over base models
# (tests/workflow/test_polypythia_miniature.py runs them).
SEEDS_ONLY = {"series_band", "pooled_effects"}


def rules_in(text: str) -> set[str]:
    return set(re.findall(r"^\s*(?:local)?rule (\w+):$", text, re.M))


@pytest.fixture(scope="module")
def miniature(tmp_path_factory, repo, stand_in_hub):
    root = copy_checkout(repo, tmp_path_factory.mktemp("paper-miniature"))
    env = stand_in_hub.env | {"PYTHONPATH": str(root)}
    planned = subprocess.run([str(BIN / "snakemake"), "-n", *COMMAND], cwd=root, env=env, capture_output=True,
                             text=True)
    assert planned.returncode == 0, planned.stderr[-4000:]
    # As on a cluster whose compute nodes have no network (docs/cluster.md): the downloads first,
    # where the Hub answers, then everything else with it gone (HF_ENDPOINT at a closed port)
    fetched = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *COMMAND, "--until", *FETCH_RULES], cwd=root,
                             env=env, capture_output=True, text=True, timeout=3000)
    assert fetched.returncode == 0, fetched.stdout[-3000:] + fetched.stderr[-6000:]
    done = subprocess.run([str(BIN / "snakemake"), "--cores", "2", *COMMAND], cwd=root,
                          env=env | {"HF_ENDPOINT": f"http://127.0.0.1:{closed_port()}"}, capture_output=True,
                          text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    assert not rules_in(done.stdout + done.stderr) & set(FETCH_RULES)  # nothing left to download
    return root, planned.stdout + planned.stderr, fetched.stdout + fetched.stderr + done.stdout + done.stderr


def closed_port() -> int:
    """A local port nothing listens on: a connection there is refused, as without a network."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def test_every_rule_of_the_paper_dag_ran(miniature, repo):
    root, planned, ran = miniature
    every_rule = rules_in((repo / "Snakefile").read_text()) | {
        rule for path in (repo / "rules").glob("*.smk") for rule in rules_in(path.read_text())
    }
    assert OFFLINE_ONLY < every_rule and SEEDS_ONLY < every_rule
    assert rules_in(planned) == every_rule - OFFLINE_ONLY - SEEDS_ONLY  # the paper's DAG uses every other rule
    assert rules_in(ran) == every_rule - OFFLINE_ONLY - SEEDS_ONLY


def test_every_figure_and_table_of_the_paper_is_written(miniature):
    root, _, _ = miniature
    figures = root / "results/figures"
    assert {p.stem for p in (figures / "family").glob("*.png")} == {
        f"{family}_wikitext-103" for family in ("gpt2", "qwen1", "qwen2.5", "qwen3", "bloom", "gpt2-mlp-width")
    }  # Fig. 2 and S1
    # Fig. 3, and Qwen3-0.6B distilled here from Qwen3-1.7B beside its CE twin
    assert {p.stem for p in (figures / "paired").glob("*.png")} == {"qwen2.5-distill", "gpt2-mlp-init-vs-trained",
                                                                     "qwen3-distilled-here"}
    assert (figures / "series/olmo3-7b-pretraining.png").exists()  # Fig. 4
    assert (figures / "midtrain/gpt2_condensation.png").exists()  # Fig. 6
    assert (figures / "scratch/qwen3-0.6b-init_condensation.png").exists()
    assert (figures / "datasets/gpt2.png").exists()  # Fig. S2
    for table in ("table2", "table3", "table4"):
        assert (root / f"results/tables/{table}.md").stat().st_size > 0, table
    assert (root / "results/findings.md").exists()


def test_scores_cover_the_ten_tasks_with_the_paper_s_shots(miniature):
    root, _, _ = miniature
    gpt2 = json.loads((root / "results/scores/midtrain/gpt2/pretrained.json").read_text())["scores"]
    qwen3 = json.loads((root / "results/scores/scratch/qwen3-0.6b-init/ce/seed0/selected.json").read_text())["scores"]
    tasks = {"anli_r2", "lambada_openai", "openbookqa", "piqa", "truthfulqa_mc2", "winogrande", "arc_easy",
             "arc_challenge", "mmlu", "medmcqa"}
    assert set(gpt2) == set(qwen3) == tasks
    assert gpt2["arc_easy"]["num_fewshot"] == 1 and qwen3["arc_easy"]["num_fewshot"] == 5
    assert gpt2["piqa"]["num_fewshot"] == 0
    # scoring jobs index only the task directories that fetch_eval_tasks recorded
    fetched = json.loads((root / "data/hub/lm_eval_tasks.json").read_text())
    assert {"mmlu/default", "arc", "anli"} <= set(fetched["task_directories"])
    table4 = pd.read_csv(root / "results/tables/table4.csv")
    # the paper's three, then the newer methods the miniature keeps (SimReg shares JREG's rules)
    assert table4["method"].tolist() == ["ce", "dispersion", "distillation", "jreg", "ln_scaling"]
    assert table4["model"].unique().tolist() == ["qwen3-0.6b-init"]
    # LayerNorm Scaling on Qwen3's RMSNorms: folded into the checkpoint that extraction and lm-eval load
    scaled = json.loads((root / "runs/scratch/qwen3-0.6b-init/ln_scaling/seed0/final/config.json").read_text())
    assert scaled["ln_scaling"] is True and scaled["model_type"] == "qwen3"


def test_series_measures_each_olmo_revision_and_handles_pin_them(miniature):
    root, _, _ = miniature
    series = pd.read_csv(root / "results/tables/series/olmo3-7b-pretraining.csv")
    assert series["checkpoint"].tolist() == ["S1-0", "S1-353k", "S2-1k", "Main"]
    handles = [json.loads((root / f"models/olmo3-7b-pretraining.{label}/handle.json").read_text())
               for label in series["checkpoint"]]
    assert len({handle["revision"] for handle in handles}) == 4  # four commits, one per branch
    assert all(re.fullmatch(r"[0-9a-f]{40}", handle["revision"]) for handle in handles)

