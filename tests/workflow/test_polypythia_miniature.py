"""configs/polypythia.yaml in miniature, end to end against the stand-in Hugging Face Hub.

A copy of the repository's tracked files runs `snakemake --configfile
configs/polypythia-miniature.yaml` on the CPU with `HF_ENDPOINT` at a stand-in built from that
config: PolyPythia's repositories (GPTNeoX, ten-seed ids, checkpoints as branches holding the
older weight format) are fetched by the Hub's real client code, measured, compared over seeds,
mid-trained from two base runs and scored. tests/unit/test_config.py checks that the miniature is
the full config shortened.
"""

from __future__ import annotations

import json
import os
import subprocess

import numpy as np
import pandas as pd
import pytest

from condensation.runtime.checkout import copy_checkout
from tests.helpers.workflow import BIN

pytestmark = pytest.mark.slow

CONFIG = "configs/polypythia-miniature.yaml"


@pytest.fixture(scope="module")
def miniature(tmp_path_factory, repo):
    from stand_in_hub import build, client_env, serve

    hub = tmp_path_factory.mktemp("polypythia-hub") / "tree"
    build(hub, repo / CONFIG)
    root = copy_checkout(repo, tmp_path_factory.mktemp("polypythia-miniature"))
    caches = tmp_path_factory.mktemp("polypythia-hub-clients")
    with serve(hub) as url:
        env = os.environ | client_env(url, str(caches)) | {"PYTHONPATH": str(root)}
        done = subprocess.run([str(BIN / "snakemake"), "--cores", "2", "--configfile", CONFIG], cwd=root, env=env,
                              capture_output=True, text=True, timeout=2400)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-6000:]
    return root


def test_every_figure_and_table_of_the_config_is_written(miniature):
    figures = miniature / "results/figures"
    expected = [
        "family/pythia_wikitext-103.png",
        "family/pythia-160m-sources_wikitext-103.png",
        "paired/pythia-70m-init-vs-trained.png",
        "paired/pythia-160m-init-vs-trained.png",
        "series/pythia-70m-pretraining.png",
        "series/pythia-70m-seed1-pretraining.png",
        "series_bands/pythia-70m.png",
        "midtrain/pythia-160m_condensation.png",
        "midtrain/pythia-160m-seed1_condensation.png",
    ]
    assert [name for name in expected if not (figures / name).is_file()] == []
    assert (miniature / "results/tables/table2.md").is_file() and (miniature / "results/findings.md").is_file()


def test_fig_4_over_the_seeds_of_one_size_has_a_band_over_runs_and_sequences(miniature):
    """The two 70M seeds' series drawn together: at each of the three checkpoints both runs'
    values, their mean and its interval (finite: two runs measured on the same sequences)."""
    band = pd.read_csv(miniature / "results/tables/series_bands/pythia-70m.csv")
    deep = band[band["statistic"] == "last_half"]
    assert deep["checkpoint"].astype(str).tolist() == ["0", "1k", "143k"]
    assert set(deep["runs"]) == {2} and set(deep["covers"]) == {"seeds and sequences"}
    runs = deep[["run:pythia-70m-pretraining", "run:pythia-70m-seed1-pretraining"]].to_numpy()
    np.testing.assert_allclose(deep["mean"], runs.mean(axis=1), rtol=1e-4, atol=1e-5)  # the CSV's five decimals
    assert np.isfinite(deep[["low", "high"]]).all().all() and (deep["low"] <= deep["high"]).all()


def test_a_checkpoint_branch_and_the_final_weights_are_one_model_s_two_revisions(miniature):
    """step0 comes from `pytorch_model.bin`, main from safetensors: the same architecture, counted
    the same, pinned to different commits."""
    init, final = (json.loads((miniature / f"models/{name}/handle.json").read_text())
                   for name in ("pythia-70m-init", "pythia-70m"))
    assert init["location"] == final["location"] == "EleutherAI/pythia-70m"
    assert init["revision"] != final["revision"] and len(init["revision"]) == 40
    assert init["num_parameters"] == final["num_parameters"] > 0 and init["num_layers"] == final["num_layers"] == 3


def test_the_findings_read_the_published_seeds_as_training_runs(miniature):
    """Hub models with `seed:` sharing a label are draws of one training procedure: the size,
    initialisation and over-training claims get intervals over seeds, with each seed's value."""
    findings = (miniature / "results/findings.md").read_text()
    size = next(line for line in findings.splitlines() if line.startswith("- pythia on wikitext-103"))
    assert "runs per size 2/2" in size and "(95 %, over seeds and sequences)" in size
    pairs = [line for line in findings.splitlines() if line.startswith("- pythia-70m-init-vs-trained")]
    assert pairs and all("over seeds and sequences" in line and "per seed" in line for line in pairs)
    series = [line for line in findings.splitlines() if line.startswith("- Pythia-70M (2 runs)")]
    assert series and all("over seeds and sequences" in line for line in series), "both seeds' series pooled"
    assert "pythia-160m-sources: not counted" in findings
    # mid-training from two 160M seeds: the base model a replicate, pooled in place of each base alone
    pooled = pd.read_csv(miniature / "results/midtrain/pooled/pythia-160m/condensation_effects.csv")
    assert set(pooled["n_seeds"]) == {2} and set(pooled["method"]) == {"dispersion"}
    assert "midtrain, Pythia-160M (2 base runs pooled), step" in findings and "over 2 base models" in findings
    assert "(95 %, over base models and sequences); per base model" in findings
    assert "shown, not counted (one base model of midtrain, Pythia-160M (2 base runs pooled))" in findings
    # the 160M runs by noise source: the full seeds' spread, one run of each single source here
    sources = next(line for line in findings.splitlines() if "pythia-160m-sources: training noise by source" in line)
    assert "Pythia-160M (2 runs): run SD" in sources and "Pythia-160M data seed (1 run): no spread" in sources
