"""Tables 2 and 3 from hand-made score files: every expected number is worked out by hand here.

The fixture world: one model, two tasks, a pretrained record and three mid-training methods with
three seeds each. Percent values are chosen so means, stds, ranks and the Wilcoxon p-value can be
computed on paper (see the comments next to each expectation).
"""

from __future__ import annotations

import json
import math
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from condensation import tables as T

MODEL = "toy-mlp128"
TASKS = ["persuasion_cloze", "next_sentence"]
METHODS = ["ce", "ortho", "dispersion"]

# Selected-checkpoint scores (fractions), per method -> seed -> (cloze, next_sentence).
DISPERSION = {0: (0.50, 0.40), 1: (0.52, 0.44), 2: (0.54, 0.42)}
# ce - dispersion differences: -1, -3 | -2, -4 | -5, -6 points: all negative, all distinct.
CE = {0: (0.49, 0.37), 1: (0.50, 0.40), 2: (0.49, 0.36)}
# cloze mean 52.0 exactly like dispersion's (a tie for rank); next_sentence 41.0.
ORTHO = {0: (0.52, 0.41), 1: (0.52, 0.41), 2: (0.52, 0.41)}
PRETRAINED = (0.30, 0.25)


def record(method: str, seed, checkpoint: str, step, val_loss, cloze: float, nxt: float,
           model: str = MODEL, metric: str = "acc") -> dict:
    return {
        "model": model, "method": method, "seed": seed, "checkpoint": checkpoint,
        "step": step, "val_loss": val_loss,
        "scores": {
            "persuasion_cloze": {metric: cloze, "acc_stderr": 0.03, "num_fewshot": 0, "num_items": 200},
            "next_sentence": {metric: nxt, "acc_stderr": 0.03, "num_fewshot": 0, "num_items": 200},
        },
    }


def write_records(directory: Path, records: list[dict]) -> list[Path]:
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, rec in enumerate(records):
        path = directory / f"score_{i:03d}.json"
        path.write_text(json.dumps(rec), encoding="utf-8")
        paths.append(path)
    return paths


def world_records() -> list[dict]:
    """The fixture world, with decoy checkpoints that selection must skip."""
    recs = [record("pretrained", None, "pretrained", None, None, *PRETRAINED)]
    for method, table in (("dispersion", DISPERSION), ("ce", CE), ("ortho", ORTHO)):
        for seed, (cloze, nxt) in table.items():
            recs.append(record(method, seed, "step-0000040", 40, 4.0, cloze, nxt))
            # Decoy: higher test scores but a worse validation loss; must never be chosen.
            recs.append(record(method, seed, "step-0000020", 20, 4.5, 0.95, 0.95))
    # Decoy without a validation loss: cannot be chosen either.
    recs.append(record("dispersion", 0, "step-0000060", 60, None, 0.99, 0.99))
    return recs


@pytest.fixture
def world(tmp_path) -> pd.DataFrame:
    return T.load_scores(write_records(tmp_path / "scores", world_records()))


@pytest.fixture
def tidy(world) -> pd.DataFrame:
    labels = {"ce": "Cross-entropy", "ortho": "Ortho_reg", "dispersion": "Dispersion"}
    return T.table2(world, TASKS, METHODS, reference="dispersion", labels=labels)


@pytest.fixture
def t2(tidy) -> pd.DataFrame:
    """Table 2 indexed by method, for reading single cells."""
    return tidy.set_index("method")


# ---------------------------------------------------------------------------------------------
# load_scores
# ---------------------------------------------------------------------------------------------


def test_load_scores_long_frame(world):
    assert list(world.columns) == list(T.SCORE_COLUMNS)
    # 1 pretrained + 3 methods x 3 seeds x 2 checkpoints + 1 decoy = 20 records, 2 tasks each.
    assert len(world) == 40
    row = world[(world.method == "ce") & (world.seed == 2) & (world.step == 40) & (world.task == "next_sentence")]
    assert row["score"].tolist() == [0.36]
    pre = world[world.method == "pretrained"]
    assert pre["seed"].isna().all() and pre["val_loss"].isna().all()


def test_load_scores_other_metric(tmp_path):
    paths = write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 0.5, 0.6, metric="acc_norm")])
    frame = T.load_scores(paths, metric="acc_norm")
    assert sorted(frame["score"]) == [0.5, 0.6]


def test_load_scores_missing_field_names_file(tmp_path):
    rec = record("ce", 0, "c", 1, 1.0, 0.5, 0.5)
    del rec["val_loss"]
    paths = write_records(tmp_path, [record("ce", 1, "c", 1, 1.0, 0.5, 0.5), rec])
    with pytest.raises(ValueError, match=r"score_001\.json.*val_loss"):
        T.load_scores(paths)


def test_load_scores_missing_metric_names_file_and_task(tmp_path):
    rec = record("ce", 0, "c", 1, 1.0, 0.5, 0.5)
    del rec["scores"]["next_sentence"]["acc"]
    paths = write_records(tmp_path, [rec])
    with pytest.raises(ValueError, match=r"score_000\.json.*next_sentence.*'acc'"):
        T.load_scores(paths)


def test_load_scores_rejects_seedless_run_and_duplicates(tmp_path):
    with pytest.raises(ValueError, match=r"score_000\.json.*needs a seed"):
        T.load_scores(write_records(tmp_path / "a", [record("ce", None, "c", 1, 1.0, 0.5, 0.5)]))
    twice = [record("ce", 0, "c", 1, 1.0, 0.5, 0.5)] * 2
    with pytest.raises(ValueError, match=r"score_001\.json.*duplicate.*score_000\.json"):
        T.load_scores(write_records(tmp_path / "b", twice))


def test_load_scores_rejects_percentages(tmp_path):
    with pytest.raises(ValueError, match=r"score_000\.json.*fraction"):
        T.load_scores(write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 52.0, 0.5)]))


# ---------------------------------------------------------------------------------------------
# select_checkpoints
# ---------------------------------------------------------------------------------------------


def test_selection_picks_lowest_val_loss_not_highest_score(world):
    chosen = T.select_checkpoints(world)
    runs = chosen[chosen.method != "pretrained"]
    # One checkpoint per run, always step 40 (val 4.0), never the 0.95/0.99 decoys.
    assert set(runs["checkpoint"]) == {"step-0000040"}
    assert len(runs) == 9 * 2
    assert runs["score"].max() < 0.9
    # Pretrained passes through unchanged.
    pd.testing.assert_frame_equal(
        chosen[chosen.method == "pretrained"].reset_index(drop=True),
        world[world.method == "pretrained"].reset_index(drop=True),
    )


def test_selection_tie_goes_to_earliest_step(tmp_path):
    recs = [
        record("ce", 0, "late", 90, 3.0, 0.1, 0.1),
        record("ce", 0, "early", 30, 3.0, 0.2, 0.2),
        record("ce", 0, "worse", 10, 3.5, 0.3, 0.3),
    ]
    chosen = T.select_checkpoints(T.load_scores(write_records(tmp_path, recs)))
    assert set(chosen["checkpoint"]) == {"early"}


def test_selection_without_any_val_loss_fails(tmp_path):
    recs = [record("ce", 3, "a", 1, None, 0.1, 0.1), record("ce", 3, "b", 2, None, 0.2, 0.2)]
    with pytest.raises(ValueError, match=r"'ce' seed 3.*no checkpoint has a validation loss"):
        T.select_checkpoints(T.load_scores(write_records(tmp_path, recs)))


# ---------------------------------------------------------------------------------------------
# Table 2
# ---------------------------------------------------------------------------------------------


def test_table2_rows_and_columns(t2, tidy):
    assert list(t2.index) == ["pretrained", "ce", "ortho", "dispersion"]
    assert list(tidy.columns) == T.table2_columns(TASKS) == [
        "model", "method", "label", "n_seeds",
        "persuasion_cloze_mean", "persuasion_cloze_std", "persuasion_cloze_rank",
        "next_sentence_mean", "next_sentence_std", "next_sentence_rank",
        "average_mean", "average_std", "avg_rank", "p_value", "n_pairs", "delta_vs_reference",
    ]
    assert t2.loc["ortho", "label"] == "Ortho_reg"
    assert t2.loc["pretrained", "label"] == "pretrained"
    assert t2["n_seeds"].tolist() == [1, 3, 3, 3]


def test_table2_means_and_stds(t2):
    d = t2.loc["dispersion"]
    # cloze 50, 52, 54 -> mean 52, deviations -2, 0, 2 -> var 8/2 = 4 -> std 2.
    assert d["persuasion_cloze_mean"] == pytest.approx(52.0)
    assert d["persuasion_cloze_std"] == pytest.approx(2.0)
    # next_sentence 40, 44, 42 -> mean 42, std 2.
    assert d["next_sentence_mean"] == pytest.approx(42.0)
    assert d["next_sentence_std"] == pytest.approx(2.0)
    c = t2.loc["ce"]
    # cloze 49, 50, 49 -> mean 148/3; deviations -1/3, 2/3, -1/3 -> var (6/9)/2 = 1/3.
    assert c["persuasion_cloze_mean"] == pytest.approx(148 / 3)
    assert c["persuasion_cloze_std"] == pytest.approx(math.sqrt(1 / 3))
    # next_sentence 37, 40, 36 -> mean 113/3.
    assert c["next_sentence_mean"] == pytest.approx(113 / 3)
    # Single "seed": pretrained has no spread.
    p = t2.loc["pretrained"]
    assert p["persuasion_cloze_mean"] == pytest.approx(30.0)
    assert math.isnan(p["persuasion_cloze_std"]) and math.isnan(p["average_std"])


def test_table2_average_is_mean_of_per_seed_means(t2):
    # dispersion per-seed averages: 45, 48, 48 -> mean 47; deviations -2, 1, 1 -> var 3.
    assert t2.loc["dispersion", "average_mean"] == pytest.approx(47.0)
    assert t2.loc["dispersion", "average_std"] == pytest.approx(math.sqrt(3))
    # ce per-seed averages: 43, 45, 42.5 -> mean 43.5; deviations -0.5, 1.5, -1 -> var 3.5/2.
    assert t2.loc["ce", "average_mean"] == pytest.approx(43.5)
    assert t2.loc["ce", "average_std"] == pytest.approx(math.sqrt(1.75))
    assert t2.loc["pretrained", "average_mean"] == pytest.approx(27.5)
    # delta = own average - dispersion's 47.
    assert t2.loc["ce", "delta_vs_reference"] == pytest.approx(-3.5)
    assert t2.loc["ortho", "delta_vs_reference"] == pytest.approx(46.5 - 47.0)
    assert t2.loc["dispersion", "delta_vs_reference"] == pytest.approx(0.0)


def test_table2_ranks_with_tie(t2):
    # cloze: dispersion 52 = ortho 52 > ce 49.3 > pretrained 30 -> 1.5, 1.5, 3, 4.
    assert t2["persuasion_cloze_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 1.5, "dispersion": 1.5}
    # next_sentence: dispersion 42 > ortho 41 > ce 37.7 > pretrained 25.
    assert t2["next_sentence_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 2.0, "dispersion": 1.0}
    assert t2["avg_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 1.75, "dispersion": 1.25}


def test_table2_wilcoxon_against_hand_enumeration(t2):
    # ce - dispersion over 6 (task, seed) pairs: all negative with distinct magnitudes, so
    # W+ = 0. Under H0 each of the 2^6 = 64 sign patterns is equally likely; only "all negative"
    # gives W+ = 0, so P(W+ <= 0) = 1/64 and the two-sided p = 2/64.
    assert t2.loc["ce", "n_pairs"] == 6
    assert t2.loc["ce", "p_value"] == pytest.approx(2 / 64)
    # Exact enumeration of the same null, independent of scipy.
    signs = np.array(np.meshgrid(*[[0, 1]] * 6)).reshape(6, -1).T
    w_plus = signs @ np.arange(1, 7)
    assert 2 * np.mean(w_plus <= 0) == pytest.approx(t2.loc["ce", "p_value"])
    # ortho: differences +2, 0, -2 (cloze) and +1, -3, -1 (next_sentence), scipy on explicit arrays.
    from scipy.stats import wilcoxon
    expected = wilcoxon([0.02, 0.0, -0.02, 0.01, -0.03, -0.01], alternative="two-sided").pvalue
    assert t2.loc["ortho", "p_value"] == pytest.approx(expected)
    # Reference and pretrained get no test.
    for method in ("dispersion", "pretrained"):
        assert math.isnan(t2.loc[method, "p_value"]) and pd.isna(t2.loc[method, "n_pairs"])


def test_wilcoxon_one_positive_smallest_rank(tmp_path):
    # Same magnitudes as ce but the smallest (1 point) positive: W- = 20, W+ = 1.
    # P(W+ <= 1) = |{none, {1}}| / 64 = 2/64, two-sided p = 4/64.
    base = {0: (0.50, 0.50), 1: (0.50, 0.50), 2: (0.50, 0.50)}
    other = {0: (0.51, 0.47), 1: (0.48, 0.46), 2: (0.45, 0.44)}
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in base.items()]
    recs += [record("x", s, "c", 1, 1.0, *v) for s, v in other.items()]
    t = T.table2(T.load_scores(write_records(tmp_path, recs)), TASKS, ["x", "dispersion"]).set_index("method")
    assert t.loc["x", "p_value"] == pytest.approx(4 / 64)


def test_all_zero_differences_give_p_one(tmp_path):
    recs = []
    for seed, vals in DISPERSION.items():
        recs.append(record("dispersion", seed, "c", 1, 1.0, *vals))
        recs.append(record("copy", seed, "c", 1, 1.0, *vals))
    scores = T.load_scores(write_records(tmp_path, recs))
    # scipy itself warns (a 0/0 in its normal approximation) or raises on this case; we do neither.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = T.table2(scores, TASKS, ["copy", "dispersion"]).set_index("method")
    assert t.loc["copy", "p_value"] == 1.0
    assert t.loc["copy", "n_pairs"] == 6


def test_pairs_only_shared_seeds_and_single_seed_std(tmp_path):
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in DISPERSION.items()]
    recs.append(record("solo", 1, "c", 1, 1.0, 0.60, 0.60))   # shares seed 1 only
    recs.append(record("stranger", 7, "c", 1, 1.0, 0.60, 0.60))  # shares no seed
    t = T.table2(T.load_scores(write_records(tmp_path, recs)), TASKS,
                 ["solo", "stranger", "dispersion"]).set_index("method")
    assert t.loc["solo", "n_pairs"] == 2
    # Differences +8, +16 points: both positive, n = 2 -> p = 2 * 1/4.
    assert t.loc["solo", "p_value"] == pytest.approx(0.5)
    assert math.isnan(t.loc["solo", "persuasion_cloze_std"])
    assert t.loc["stranger", "n_pairs"] == 0 and math.isnan(t.loc["stranger", "p_value"])


def test_table2_missing_method_or_task_is_an_error(world, tmp_path):
    with pytest.raises(ValueError, match=r"toy-mlp128.*whitening.*not scored"):
        T.table2(world, TASKS, ["ce", "whitening", "dispersion"])
    with pytest.raises(ValueError, match=r"method 'pretrained': task 'hellaswag' is missing"):
        T.table2(world, [*TASKS, "hellaswag"], METHODS)
    # One seed of one method lacks a task that the others have.
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in DISPERSION.items()]
    partial = record("ce", 4, "c", 1, 1.0, 0.5, 0.5)
    del partial["scores"]["next_sentence"]
    recs += [record("ce", 3, "c", 1, 1.0, 0.5, 0.5), partial]
    with pytest.raises(ValueError, match=r"'ce' seed 4: task 'next_sentence' is missing"):
        T.table2(T.load_scores(write_records(tmp_path, recs)), TASKS, ["ce", "dispersion"])
    with pytest.raises(ValueError, match=r"reference 'ortho2'"):
        T.table2(world, TASKS, METHODS, reference="ortho2")


def test_unlisted_methods_are_ignored(world):
    t = T.table2(world, TASKS, ["ortho", "dispersion"])
    assert t["method"].tolist() == ["pretrained", "ortho", "dispersion"]
    # Ranks are among the listed rows only: ortho and dispersion tie on cloze, pretrained last.
    assert t["persuasion_cloze_rank"].tolist() == [3.0, 1.5, 1.5]


# ---------------------------------------------------------------------------------------------
# Table 3
# ---------------------------------------------------------------------------------------------

GRID = {
    "dispersion": (0.1, 1.0),
    "disp_w1_t1": (1.0, 1.0),
    "disp_w01_t05": (0.1, 0.5),
    "disp_w1_t05": (1.0, 0.5),
}


@pytest.fixture
def ablation(tmp_path) -> pd.DataFrame:
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in DISPERSION.items()]
    # disp_w1_t1: per-seed averages 40, 44 -> mean 42, std sqrt(8).
    recs += [record("disp_w1_t1", 0, "c", 1, 1.0, 0.40, 0.40), record("disp_w1_t1", 1, "c", 1, 1.0, 0.46, 0.42)]
    # disp_w01_t05: per-seed averages 50, 51, 52 -> mean 51, std 1.
    recs += [record("disp_w01_t05", s, "c", 1, 1.0, a, b)
             for s, (a, b) in {0: (0.50, 0.50), 1: (0.52, 0.50), 2: (0.52, 0.52)}.items()]
    # disp_w1_t05: one seed, average 30 -> std NaN. A worse checkpoint must be skipped.
    recs += [record("disp_w1_t05", 0, "c", 1, 1.0, 0.20, 0.40), record("disp_w1_t05", 0, "d", 2, 2.0, 0.9, 0.9)]
    recs += [record("ce", 0, "c", 1, 1.0, 0.1, 0.1)]  # not in the grid: ignored
    return T.load_scores(write_records(tmp_path, recs))


def test_table3_values_and_order(ablation):
    t3 = T.table3(ablation, TASKS, GRID)
    assert list(t3.columns) == list(T.TABLE3_COLUMNS)
    assert list(zip(t3["weight"], t3["tau"])) == [(0.1, 0.5), (0.1, 1.0), (1.0, 0.5), (1.0, 1.0)]
    assert t3["method"].tolist() == ["disp_w01_t05", "dispersion", "disp_w1_t05", "disp_w1_t1"]
    assert t3["n_seeds"].tolist() == [3, 3, 1, 2]
    assert t3["average_mean"].tolist() == pytest.approx([51.0, 47.0, 30.0, 42.0])
    assert t3["average_std"].iloc[[0, 1, 3]].tolist() == pytest.approx([1.0, math.sqrt(3), math.sqrt(8)])
    assert math.isnan(t3["average_std"].iloc[2])


def test_table3_grid_strings(ablation):
    grid = T.table3_grid(T.table3(ablation, TASKS, GRID))
    assert list(grid.columns) == ["weight", "tau = 0.5", "tau = 1"]
    assert grid.values.tolist() == [
        ["0.1", "51.00 ± 1.00", "47.00 ± 1.73"],
        ["1", "30.00", "42.00 ± 2.83"],
    ]


def test_table3_incomplete_grid_is_an_error(ablation):
    with pytest.raises(ValueError, match=r"toy-mlp128.*lacks grid method.*disp_w2_t1"):
        T.table3(ablation, TASKS, {**GRID, "disp_w2_t1": (2.0, 1.0)})
    with pytest.raises(ValueError, match=r"share \(weight, tau\)"):
        T.table3(ablation, TASKS, {**GRID, "clone": (0.1, 1.0)})


# ---------------------------------------------------------------------------------------------
# Display and files
# ---------------------------------------------------------------------------------------------


def test_format_table2_strings_and_bold_best(tidy):
    shown = T.format_table2(tidy, TASKS).set_index("Method")
    # Ties for the best cloze mean: both rows bold.
    assert shown.loc["Dispersion", "persuasion_cloze"] == "**52.0 ± 2.0**"
    assert shown.loc["Ortho_reg", "persuasion_cloze"] == "**52.0 ± 0.0**"
    assert shown.loc["Cross-entropy", "persuasion_cloze"] == "49.3 ± 0.6"
    assert shown.loc["Dispersion", "next_sentence"] == "**42.0 ± 2.0**"
    assert shown.loc["Ortho_reg", "next_sentence"] == "41.0 ± 0.0"
    assert shown.loc["Dispersion", "Average"] == "**47.00 ± 1.73**"
    assert shown.loc["pretrained", "Average"] == "27.50"
    assert shown.loc["Ortho_reg", "Avg. rank"] == "1.8"  # 1.75, one decimal
    assert shown.loc["Cross-entropy", "p"] == "0.0312"
    assert shown.loc["Dispersion", "p"] == "—" and shown.loc["pretrained", "Pairs"] == "—"
    assert shown.loc["Cross-entropy", "Δ average"] == "-3.50"


def test_write_table_files(tidy, tmp_path):
    stem = tmp_path / "out" / "table2_toy"
    T.write_table(T.format_table2(tidy, TASKS), tidy, stem, T.table2_caption("dispersion"))

    back = pd.read_csv(stem.with_suffix(".csv"), dtype={"n_pairs": "Int64"})
    pd.testing.assert_frame_equal(back, tidy, check_dtype=False, rtol=0, atol=1e-12)
    assert back.loc[back.method == "ce", "p_value"].item() == 2 / 64

    md = stem.with_suffix(".md").read_text()
    first_paragraph = md.split("\n\n")[0]
    assert "Wilcoxon signed-rank test, two-sided, paired over (task, seed) against dispersion" in first_paragraph
    assert "checkpoint chosen per seed by the lowest validation loss" in first_paragraph
    assert "| **52.0 ± 2.0** |" in md

    tex = stem.with_suffix(".tex").read_text()
    assert r"persuasion\_cloze" in tex and "persuasion_cloze" not in tex.replace(r"\_", "")
    assert r"\textbf{52.0 $\pm$ 2.0}" in tex
    assert r"Ortho\_reg" in tex
    assert r"49.3 $\pm$ 0.6 &" in tex and r"\textbf{49.3" not in tex
    assert "±" not in tex and "**" not in tex
    assert tex.count(r"\begin{tabular}") == 1 and tex.rstrip().endswith(r"\end{tabular}")
    # Every body row has as many cells as the header.
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len(rows) == 1 + len(tidy)
    assert {row.count(" & ") for row in rows} == {len(T.format_table2(tidy, TASKS).columns) - 1}
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic writes left nothing behind


def test_latex_and_markdown_escaping():
    frame = pd.DataFrame({"a_b": ["50% & $x#", "**c_d**", r"back\slash {~^}"], "n": ["1", "|", "—"]})
    tex = T.to_latex(frame)
    assert r"a\_b" in tex
    assert r"50\% \& \$x\#" in tex
    assert r"\textbf{c\_d}" in tex
    assert r"back\textbackslash{}slash \{\textasciitilde{}\textasciicircum{}\}" in tex
    assert "---" in tex
    md = T.to_markdown(frame)
    assert r"| \| |" in md


def test_score_metrics(world):
    metrics = T.score_metrics(world, TASKS, METHODS)
    assert set(metrics) == {MODEL}
    assert set(metrics[MODEL]) == {"pretrained", "ce", "ortho", "dispersion"}
    assert metrics[MODEL]["ce"] == {"persuasion_cloze": 49.3333, "next_sentence": 37.6667, "average": 43.5}
    assert metrics[MODEL]["pretrained"]["average"] == 27.5
    assert json.loads(json.dumps(metrics)) == metrics
    with pytest.raises(ValueError, match="whitening"):
        T.score_metrics(world, TASKS, ["whitening"])


def test_scores_by_step_puts_pretrained_at_step_zero(tmp_path):
    from condensation.stages import scores_by_step

    paths = write_records(tmp_path / "scores", [
        record("pretrained", None, "pretrained", None, None, 0.30, 0.25),
        record("ce", 0, "step-0000010", 10, 5.0, 0.40, 0.30),
        record("ce", 1, "step-0000010", 10, 5.1, 0.50, 0.20),
    ])
    out = tmp_path / "by_step.csv"
    scores_by_step(paths, "acc", out)
    table = pd.read_csv(out).set_index(["method", "step", "task"])
    assert table.loc[("pretrained", 0, "persuasion_cloze"), "mean"] == pytest.approx(30.0)
    row = table.loc[("ce", 10, "persuasion_cloze")]
    assert row["mean"] == pytest.approx(45.0) and row["count"] == 2
    assert row["std"] == pytest.approx(math.sqrt(50.0), abs=1e-4)  # (40, 50): sample variance 50; 4 decimals
