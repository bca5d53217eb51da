"""Score records, Tables 2, 3 and 4 and the condensation effects from hand-made score files,
per-item results and trajectories: every expected number is worked out by hand here.

The fixture world: one model, two tasks, a pretrained record and three mid-training methods with
three seeds each. Percent values are chosen so means, stds, ranks and the item-level comparisons
can be computed on paper (see the comments next to each expectation). Each record's per-item file
holds 100 items per task, the first round(100 x score) of them answered correctly, so the
method with the higher score wins every discordant item and McNemar's p is a power of 2.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from condensation.evaluation import scores as S
from condensation.evaluation.score_files import (
    item_rows_path,
    read_item_rows,
    write_item_rows,
)
from condensation.reporting.tables import comparisons as C
from condensation.reporting.tables import (
    condensation_effects,
    table2,
    table3,
    table4,
    trend_tables,
)
from condensation.reporting.tables import score_tables as T
from condensation.reporting.tables import table_files as F
from condensation.reporting.tables.profiles import Profiles, read_profiles, write_profiles

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


N_ITEMS = 100
R = 10_000  # the tables' default bootstrap resamples


def n_choices(task: str, doc_id: int) -> int:
    """Cloze items have 4 choices (chance 25 %); next_sentence items alternate 2 and 4 (chance
    mean(1/2, 1/4) = 37.5 %)."""
    return 4 if task == "persuasion_cloze" or doc_id % 2 else 2


def item_rows(rec: dict, n_items: dict | None = None) -> list[dict]:
    """Per-item rows as lm-eval's log_samples gives them: of a task's n items, the first
    round(n x score) are correct, for each accuracy metric the record has."""
    rows = []
    for task, metrics in rec["scores"].items():
        n = (n_items or {}).get(task, N_ITEMS)
        for doc_id in range(n):
            row = {"task": task, "subtask": task, "doc_id": doc_id, "filter": "none", "num_fewshot": 0, "target": 0}
            for metric in ("acc", "acc_norm"):
                if metric in metrics:
                    row[metric] = float(doc_id < round(n * metrics[metric]))
            row["loglikelihoods"] = [-1.0] * n_choices(task, doc_id)
            rows.append(row)
    return rows


def write_records(directory: Path, records: list[dict], n_items: dict | None = None) -> list[Path]:
    """Each record as a score file with its per-item results beside it, as a scoring job writes them."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for i, rec in enumerate(records):
        path = directory / f"score_{i:03d}.json"
        path.write_text(json.dumps(rec), encoding="utf-8")
        write_item_rows(item_rows_path(path), item_rows(rec, n_items))
        paths.append(path)
    return paths


def load(paths: list[Path]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Scores and per-item results of score files."""
    return S.load_scores(paths), S.load_items(paths)


def markdown_cells(markdown: str) -> list[list[str]]:
    """The cells of a Markdown pipe table, header first, the alignment rule skipped; a cell
    splits only at unescaped pipes."""
    lines = markdown.strip().splitlines()
    assert set(lines[1]) <= set("|:-"), f"not an alignment rule: {lines[1]!r}"
    return [[cell.strip() for cell in re.split(r"(?<!\\)\|", line)[1:-1]] for line in [lines[0], *lines[2:]]]


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


@pytest.fixture(scope="module")
def world_paths(tmp_path_factory) -> list[Path]:
    return write_records(tmp_path_factory.mktemp("world") / "scores", world_records())


@pytest.fixture
def world(world_paths) -> pd.DataFrame:
    return S.load_scores(world_paths)


@pytest.fixture(scope="module")
def items(world_paths) -> pd.DataFrame:
    return S.load_items(world_paths)


LABELS = {"ce": "Cross-entropy", "ortho": "Ortho_reg", "dispersion": "Dispersion"}


@pytest.fixture(scope="module")
def tidy(world_paths, items) -> pd.DataFrame:
    return table2.table2(S.load_scores(world_paths), TASKS, METHODS, reference="dispersion", labels=LABELS, items=items)


@pytest.fixture
def t2(tidy) -> pd.DataFrame:
    """Table 2 indexed by method, for reading single cells."""
    return tidy.set_index("method")


# ---------------------------------------------------------------------------------------------
# scores.load_scores
# ---------------------------------------------------------------------------------------------


def test_load_scores_long_frame(world):
    assert list(world.columns) == list(S.SCORE_COLUMNS)
    # 1 pretrained + 3 methods x 3 seeds x 2 checkpoints + 1 decoy = 20 records, 2 tasks each.
    assert len(world) == 40
    row = world[(world.method == "ce") & (world.seed == 2) & (world.step == 40) & (world.task == "next_sentence")]
    assert row["score"].tolist() == [0.36]
    pre = world[world.method == "pretrained"]
    assert pre["seed"].isna().all() and pre["val_loss"].isna().all()


def test_load_scores_other_metric(tmp_path):
    paths = write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 0.5, 0.6, metric="acc_norm")])
    frame = S.load_scores(paths, metric="acc_norm")
    assert sorted(frame["score"]) == [0.5, 0.6]


def test_load_scores_missing_field_names_file(tmp_path):
    rec = record("ce", 0, "c", 1, 1.0, 0.5, 0.5)
    del rec["val_loss"]
    paths = write_records(tmp_path, [record("ce", 1, "c", 1, 1.0, 0.5, 0.5), rec])
    with pytest.raises(ValueError, match=r"score_001\.json.*val_loss"):
        S.load_scores(paths)


def test_load_scores_missing_metric_names_file_and_task(tmp_path):
    rec = record("ce", 0, "c", 1, 1.0, 0.5, 0.5)
    del rec["scores"]["next_sentence"]["acc"]
    paths = write_records(tmp_path, [rec])
    with pytest.raises(ValueError, match=r"score_000\.json.*next_sentence.*'acc'"):
        S.load_scores(paths)


def test_load_scores_rejects_seedless_run_and_duplicates(tmp_path):
    with pytest.raises(ValueError, match=r"score_000\.json.*needs a seed"):
        S.load_scores(write_records(tmp_path / "a", [record("ce", None, "c", 1, 1.0, 0.5, 0.5)]))
    twice = [record("ce", 0, "c", 1, 1.0, 0.5, 0.5)] * 2
    with pytest.raises(ValueError, match=r"score_001\.json.*duplicate.*score_000\.json"):
        S.load_scores(write_records(tmp_path / "b", twice))


def test_load_scores_rejects_percentages(tmp_path):
    with pytest.raises(ValueError, match=r"score_000\.json.*fraction"):
        S.load_scores(write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 52.0, 0.5)]))


# ---------------------------------------------------------------------------------------------
# scores.select_checkpoints
# ---------------------------------------------------------------------------------------------


def test_selection_picks_lowest_val_loss_not_highest_score(world):
    chosen = S.select_checkpoints(world)
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
    chosen = S.select_checkpoints(S.load_scores(write_records(tmp_path, recs)))
    assert set(chosen["checkpoint"]) == {"early"}


def test_selection_without_any_val_loss_fails(tmp_path):
    recs = [record("ce", 3, "a", 1, None, 0.1, 0.1), record("ce", 3, "b", 2, None, 0.2, 0.2)]
    with pytest.raises(ValueError, match=r"'ce' seed 3.*no checkpoint has a validation loss"):
        S.select_checkpoints(S.load_scores(write_records(tmp_path, recs)))


def test_selection_never_takes_step_zero(tmp_path):
    # Step 0 is the model before mid-training (the pretrained row), whatever its loss.
    recs = [record("ce", 0, "step-0000000", 0, 1.0, 0.9, 0.9), record("ce", 0, "step-0000010", 10, 2.0, 0.2, 0.2)]
    chosen = S.select_checkpoints(S.load_scores(write_records(tmp_path / "a", recs)))
    assert set(chosen["checkpoint"]) == {"step-0000010"}
    with pytest.raises(ValueError, match=r"'ce' seed 0: no checkpoint has a validation loss.*step 0.*step-0000000"):
        S.select_checkpoints(S.load_scores(write_records(tmp_path / "b", recs[:1])))


def test_selection_needs_one_step_per_checkpoint(tmp_path):
    shared = [record("ce", 0, "a", 10, 2.0, 0.1, 0.1), record("ce", 0, "b", 10, 3.0, 0.2, 0.2)]
    with pytest.raises(ValueError, match=r"'ce' seed 0: checkpoints a, b share a step"):
        S.select_checkpoints(S.load_scores(write_records(tmp_path / "a", shared)))
    stepless = [record("ce", 0, "a", None, 2.0, 0.1, 0.1), record("ce", 0, "b", 10, 3.0, 0.2, 0.2)]
    with pytest.raises(ValueError, match=r"'ce' seed 0: checkpoint 'a' has a validation loss but no step"):
        S.select_checkpoints(S.load_scores(write_records(tmp_path / "b", stepless)))
    # Without a validation loss a checkpoint is never a candidate, so its missing step is harmless.
    stepless[0]["val_loss"] = None
    chosen = S.select_checkpoints(S.load_scores(write_records(tmp_path / "c", stepless)))
    assert set(chosen["checkpoint"]) == {"b"}


# ---------------------------------------------------------------------------------------------
# scores.load_items
# ---------------------------------------------------------------------------------------------


def test_load_items_of_selected_checkpoints(world_paths, world):
    chosen = S.load_items(world_paths, checkpoints=S.select_checkpoints(world))
    assert list(chosen.columns) == list(S.ITEM_COLUMNS)
    # 1 pretrained + 9 selected runs, 2 tasks x 100 items each; the decoys' items are not read.
    assert len(chosen) == 10 * 2 * N_ITEMS
    assert set(chosen["checkpoint"]) == {"pretrained", "step-0000040"}
    run = chosen[(chosen.method == "ce") & (chosen.seed == 2) & (chosen.task == "next_sentence")]
    assert run["score"].sum() == 36 and run["score"].mean() == pytest.approx(0.36)  # the record's score
    assert run.set_index("doc_id")["n_choices"].loc[[0, 1]].tolist() == [2.0, 4.0]
    assert chosen.loc[chosen.method == "pretrained", "seed"].isna().all()
    assert len(S.load_items(world_paths)) == len(world_paths) * 2 * N_ITEMS


def test_load_items_needs_the_samples_file_and_metric(tmp_path):
    paths = write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 0.5, 0.5)])
    with pytest.raises(ValueError, match=r"samples\.jsonl\.gz.*lack metric 'acc_norm'"):
        S.load_items(paths, metric="acc_norm")
    item_rows_path(paths[0]).unlink()
    with pytest.raises(FileNotFoundError, match=r"score_000\.json: its per-item results .* are missing"):
        S.load_items(paths)


def test_load_items_keeps_unfiltered_rows(tmp_path):
    # A task scored under two filters: only the "none" rows are the items.
    path = write_records(tmp_path, [record("ce", 0, "c", 1, 1.0, 0.5, 0.5)])[0]
    rows = read_item_rows(item_rows_path(path)).to_dict("records")
    write_item_rows(item_rows_path(path), rows + [{**row, "filter": "strict", "acc": 1.0} for row in rows])
    items = S.load_items([path])
    assert len(items) == 2 * N_ITEMS and items["score"].sum() == 100  # 50 + 50, not the strict 1.0s


# ---------------------------------------------------------------------------------------------
# Table 2
# ---------------------------------------------------------------------------------------------


def test_table2_rows_and_columns(t2, tidy):
    assert list(t2.index) == ["pretrained", "ce", "ortho", "dispersion"]
    per_target = ["diff", "se", "dof", "seed_se", "unit_se", "ci_low", "ci_high", "p", "p_holm", "detectable",
                  "per_seed", "items_ci_low", "items_ci_high", "items_p", "n_items", "mcnemar_p"]
    assert list(tidy.columns) == table2.table2_columns(TASKS, ["ce", "dispersion"]) == [
        "model", "method", "label", "n_seeds",
        "persuasion_cloze_mean", "persuasion_cloze_std", "persuasion_cloze_rank",
        "next_sentence_mean", "next_sentence_std", "next_sentence_rank",
        "average_mean", "average_std", "avg_rank",
        *(f"{field}_vs_ce" for field in per_target), *(f"{field}_vs_dispersion" for field in per_target),
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
    # With the same seeds on both sides, the item-level difference is the difference of the
    # averages: own average - dispersion's 47 (it replaces the former delta_vs_reference).
    assert t2.loc["ce", "diff_vs_dispersion"] == pytest.approx(-3.5)
    assert t2.loc["ortho", "diff_vs_dispersion"] == pytest.approx(46.5 - 47.0)
    assert t2.loc["pretrained", "diff_vs_dispersion"] == pytest.approx(27.5 - 47.0)
    assert math.isnan(t2.loc["dispersion", "diff_vs_dispersion"])


def test_table2_ranks_with_tie(t2):
    # cloze: dispersion 52 = ortho 52 > ce 49.3 > pretrained 30 -> 1.5, 1.5, 3, 4.
    assert t2["persuasion_cloze_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 1.5, "dispersion": 1.5}
    # next_sentence: dispersion 42 > ortho 41 > ce 37.7 > pretrained 25.
    assert t2["next_sentence_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 2.0, "dispersion": 1.0}
    assert t2["avg_rank"].to_dict() == {"pretrained": 4.0, "ce": 3.0, "ortho": 1.75, "dispersion": 1.25}


def test_table2_item_comparisons_against_hand_counts(t2):
    # ce against dispersion, same seed, first-k items correct: dispersion alone is right on
    # 1, 2, 5 (cloze) and 3, 4, 6 (next_sentence) items = 21 discordant pairs, none for ce.
    # McNemar: 2 * P(X <= 0 | 21) = 2^-20. Every resampled difference is negative, so the
    # bootstrap p is its smallest, 2 / (R + 1), and the interval lies below 0.
    ce = t2.loc["ce"]
    assert ce["n_items_vs_dispersion"] == 3 * 2 * N_ITEMS  # 3 shared seeds x 2 tasks x 100 items
    assert ce["diff_vs_dispersion"] == pytest.approx(-21 / 600 * 100)  # = -3.5
    assert ce["mcnemar_p_vs_dispersion"] == pytest.approx(2.0**-20)
    assert ce["items_p_vs_dispersion"] == pytest.approx(2 / (R + 1))
    assert ce["items_ci_low_vs_dispersion"] < -3.5 < ce["items_ci_high_vs_dispersion"] < 0
    # Seed-aware: the same-seed differences of the averages, 43 - 45, 45 - 48, 42.5 - 48, give a t
    # interval with 2 degrees of freedom, wider than the items' (which treat the runs as fixed).
    assert ce["per_seed_vs_dispersion"] == "-2.00; -3.00; -5.50" and ce["dof_vs_dispersion"] == pytest.approx(2)
    seed_se = np.std([-2, -3, -5.5], ddof=1) / math.sqrt(3)
    half = ce["ci_high_vs_dispersion"] - ce["diff_vs_dispersion"]
    assert stats.t.ppf(0.975, 2) * seed_se < half < stats.t.ppf(0.975, 2) * (seed_se + 1.0)
    assert (ce["ci_low_vs_dispersion"] < ce["items_ci_low_vs_dispersion"]
            and ce["p_vs_dispersion"] > ce["items_p_vs_dispersion"])
    d = t2.loc["dispersion"]
    assert d["diff_vs_ce"] == pytest.approx(3.5) and d["mcnemar_p_vs_ce"] == pytest.approx(2.0**-20)
    assert 0 < d["items_ci_low_vs_ce"] < 3.5 < d["items_ci_high_vs_ce"]
    assert d["p_vs_ce"] == pytest.approx(ce["p_vs_dispersion"])
    # Holm over the table's 5 distinct comparisons (ce-dispersion counted once): never below p.
    assert d["p_holm_vs_ce"] == ce["p_holm_vs_dispersion"] >= d["p_vs_ce"]
    # ortho against dispersion: ortho alone right on 2, 0, 0 + 1, 0, 0 = 3 items, dispersion
    # alone on 0, 0, 2 + 0, 3, 1 = 6: McNemar 2 * P(X <= 3 | 9) = 2 * 130 / 512.
    o = t2.loc["ortho"]
    assert o["diff_vs_dispersion"] == pytest.approx(-0.5)
    assert o["mcnemar_p_vs_dispersion"] == pytest.approx(260 / 512)
    assert o["items_ci_low_vs_dispersion"] < 0 < o["items_ci_high_vs_dispersion"] and o["items_p_vs_dispersion"] > 0.05
    # ortho against ce: ortho alone right on 3, 2, 3 + 4, 1, 5 = 18 items -> +3.0 points.
    assert o["diff_vs_ce"] == pytest.approx(3.0) and o["mcnemar_p_vs_ce"] == pytest.approx(2.0**-17)
    # Those 18 pairs sit on only 8 distinct items (3 cloze, 5 next_sentence), and an item's pairs
    # are resampled together: a resample misses all 8 of the 200 items with probability
    # (192/200)^200 ~ 2.8e-4, so about 3 of 10,000 resampled differences are 0 and p ~ 8e-4.
    # Had the 600 pairs been resampled one by one, none would be and p = 2 / (R + 1).
    assert 2 / (R + 1) < o["items_p_vs_ce"] < 0.005
    # The pretrained run is paired with each of ce's 3 seeds: 600 pairs, ce alone right on
    # 19 + 20 + 19 + 12 + 15 + 11 = 96 of them.
    p = t2.loc["pretrained"]
    assert p["n_items_vs_ce"] == 600 and p["diff_vs_ce"] == pytest.approx(27.5 - 43.5)
    assert p["mcnemar_p_vs_ce"] == pytest.approx(2.0**-95)
    # ... a fixed reference: its one run against each of ce's seeds.
    assert p["per_seed_vs_ce"] == "-15.50; -17.50; -15.00" and p["dof_vs_ce"] == pytest.approx(2)
    # A method is not compared with itself.
    for method, target in (("ce", "ce"), ("dispersion", "dispersion")):
        assert math.isnan(t2.loc[method, f"diff_vs_{target}"]) and math.isnan(t2.loc[method, f"p_vs_{target}"])
        assert pd.isna(t2.loc[method, f"n_items_vs_{target}"])


def test_item_difference_weights_every_task_equally(tmp_path):
    # next_sentence has only 20 items. a - b: cloze 60 - 50 = +10, next 50 - 30 = +20 points, so
    # the averages differ by 15; pooling the 120 items equally would give (10 + 4) / 120 = 11.7.
    recs = [record("a", 0, "c", 1, 1.0, 0.60, 0.50), record("b", 0, "c", 1, 1.0, 0.50, 0.30)]
    scores, items = load(write_records(tmp_path, recs, n_items={"next_sentence": 20}))
    t = table2.table2(scores, TASKS, ["a", "b"], reference="b", baseline="b", items=items).set_index("method")
    assert t.loc["a", "diff_vs_b"] == pytest.approx(15.0)
    assert t.loc["a", "diff_vs_b"] == pytest.approx(t.loc["a", "average_mean"] - t.loc["b", "average_mean"])
    assert t.loc["a", "n_items_vs_b"] == 120


def test_identical_runs_differ_by_nothing(tmp_path):
    recs = []
    for seed, vals in DISPERSION.items():
        recs.append(record("dispersion", seed, "c", 1, 1.0, *vals))
        recs.append(record("copy", seed, "c", 1, 1.0, *vals))
    scores, items = load(write_records(tmp_path, recs))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        t = table2.table2(scores, TASKS, ["copy", "dispersion"], baseline="dispersion", items=items).set_index("method")
    row = t.loc["copy"]
    assert (row["diff_vs_dispersion"], row["ci_low_vs_dispersion"], row["ci_high_vs_dispersion"]) == (0.0, 0.0, 0.0)
    assert row["p_vs_dispersion"] == 1.0 and row["mcnemar_p_vs_dispersion"] == 1.0
    assert row["n_items_vs_dispersion"] == 600


def test_pairs_only_shared_seeds_and_single_seed_std(tmp_path):
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in DISPERSION.items()]
    recs.append(record("solo", 1, "c", 1, 1.0, 0.60, 0.60))   # shares seed 1 only
    recs.append(record("stranger", 7, "c", 1, 1.0, 0.60, 0.60))  # shares no seed
    scores, items = load(write_records(tmp_path, recs))
    t = table2.table2(scores, TASKS, ["solo", "stranger", "dispersion"], baseline="dispersion",
                      items=items).set_index("method")
    assert t.loc["solo", "n_items_vs_dispersion"] == 200
    # Against dispersion's seed 1 (52, 44): +8 and +16 points, all 24 discordant items solo's.
    assert t.loc["solo", "diff_vs_dispersion"] == pytest.approx(12.0)
    assert t.loc["solo", "mcnemar_p_vs_dispersion"] == pytest.approx(2.0**-23)
    assert math.isnan(t.loc["solo", "persuasion_cloze_std"])
    assert t.loc["stranger", "n_items_vs_dispersion"] == 0
    assert math.isnan(t.loc["stranger", "diff_vs_dispersion"]) and math.isnan(t.loc["stranger", "p_vs_dispersion"])


def test_runs_on_different_items_are_not_compared(tmp_path):
    recs = [record("dispersion", 0, "c", 1, 1.0, 0.5, 0.5)]
    short = write_records(tmp_path / "short", [record("ce", 0, "c", 1, 1.0, 0.5, 0.5)], n_items={"next_sentence": 80})
    scores, items = load([*write_records(tmp_path / "full", recs), *short])
    with pytest.raises(ValueError, match=r"'ce' and 'dispersion' were scored on different items "
                                         r"\(seed 0, task 'next_sentence': 20"):
        table2.table2(scores, TASKS, ["ce", "dispersion"], items=items)
    # A run whose per-item results lack a task of the table fails too.
    with pytest.raises(ValueError, match=r"method 'ce' seed 0: no per-item results for task 'next_sentence'"):
        table2.table2(scores, TASKS, ["ce", "dispersion"],
                      items=items.loc[~((items.method == "ce") & (items.task == "next_sentence"))])


def test_table2_missing_method_or_task_is_an_error(world, items, tmp_path):
    with pytest.raises(ValueError, match=r"toy-mlp128.*whitening.*not scored"):
        table2.table2(world, TASKS, ["ce", "whitening", "dispersion"], items=items)
    with pytest.raises(ValueError, match=r"method 'pretrained': task 'hellaswag' is missing"):
        table2.table2(world, [*TASKS, "hellaswag"], METHODS, items=items)
    # One seed of one method lacks a task that the others have.
    recs = [record("dispersion", s, "c", 1, 1.0, *v) for s, v in DISPERSION.items()]
    partial = record("ce", 4, "c", 1, 1.0, 0.5, 0.5)
    del partial["scores"]["next_sentence"]
    recs += [record("ce", 3, "c", 1, 1.0, 0.5, 0.5), partial]
    with pytest.raises(ValueError, match=r"'ce' seed 4: task 'next_sentence' is missing"):
        table2.table2(S.load_scores(write_records(tmp_path, recs)), TASKS, ["ce", "dispersion"], items=items)
    with pytest.raises(ValueError, match=r"reference 'ortho2'"):
        table2.table2(world, TASKS, METHODS, reference="ortho2", items=items)
    with pytest.raises(ValueError, match=r"comparison method 'ce' is not among methods"):
        table2.table2(world, TASKS, ["ortho", "dispersion"], items=items)


def test_unlisted_methods_are_ignored(world, items):
    t = table2.table2(world, TASKS, ["ortho", "dispersion"], baseline="dispersion", items=items)
    assert t["method"].tolist() == ["pretrained", "ortho", "dispersion"]
    # Ranks are among the listed rows only: ortho and dispersion tie on cloze, pretrained last.
    assert t["persuasion_cloze_rank"].tolist() == [3.0, 1.5, 1.5]
    # One comparison target when baseline and reference coincide.
    assert [c for c in t.columns if c.startswith("diff_vs_")] == ["diff_vs_dispersion"]


# ---------------------------------------------------------------------------------------------
# Chance levels
# ---------------------------------------------------------------------------------------------


def test_task_chance_of_the_world(tidy, items):
    chance = C.task_chance(tidy, items, TASKS).set_index("task")
    # cloze: 4 choices everywhere -> 25 %; next_sentence: 2 and 4 choices alternate -> 37.5 %.
    assert chance.loc["persuasion_cloze", "chance"] == pytest.approx(25.0)
    assert chance.loc["next_sentence", "chance"] == pytest.approx(37.5)
    # the above_chance rule's test measures against the same chance level
    pooled = C.pooled_chance_tests(items, TASKS).set_index("task")
    pd.testing.assert_series_equal(pooled["chance"], chance["chance"])
    # Furthest rows: dispersion/ortho at 52 on cloze (27 points), pretrained at 25 on next (12.5).
    assert chance.loc["persuasion_cloze", "max_distance"] == pytest.approx(27.0)
    assert chance.loc["next_sentence", "max_distance"] == pytest.approx(12.5)
    assert not chance["at_chance"].any()
    assert C.at_chance_note(chance.reset_index()) == ""


def chance_world() -> list[dict]:
    """next_sentence within 2 points of its 37.5 % chance for every row; cloze far from it."""
    return [
        record("pretrained", None, "pretrained", None, None, 0.30, 0.38),
        record("ce", 0, "c", 1, 1.0, 0.50, 0.37), record("ce", 1, "c", 1, 1.0, 0.52, 0.38),
        record("dispersion", 0, "c", 1, 1.0, 0.55, 0.39), record("dispersion", 1, "c", 1, 1.0, 0.53, 0.36),
    ]


def test_task_at_chance_is_flagged_and_the_counted_tasks_come_from_the_config(tmp_path):
    out = tmp_path / "out"
    paths = write_records(tmp_path / "scores", chance_world())
    table2.write_table2(
        score_paths=paths, tasks=TASKS, methods=["ce", "dispersion"], reference="dispersion", metric="acc", labels={},
        stem=out / "table2", metrics_path=out / "metrics.json", plot_path=out / "plot.csv",
    )
    # Row means on next_sentence: 38, 37.5, 37.5 -> at most 0.5 points from 37.5: flagged, still counted
    # (a task is never dropped on the outcomes it would be tested on)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["chance_flags"] == {
        "persuasion_cloze": {"chance": 25.0, "max_distance": 29.0, "at_chance": False},
        "next_sentence": {"chance": 37.5, "max_distance": 0.5, "at_chance": True},
    }
    caption, table = (out / "table2.md").read_text().split("\n\n")
    assert "At chance, every row within 2 points of guessing: next_sentence (chance 37.5 %)." in caption
    assert markdown_cells(table)[0][3:5] == ["persuasion_cloze", "next_sentence (at chance)"]
    assert "Averages, ranks and tests read every task" in caption
    tidy = pd.read_csv(out / "table2.csv").set_index("method")
    assert tidy.loc["ce", "average_mean"] == pytest.approx((51.0 + 37.5) / 2)
    assert tidy.loc["dispersion", "n_items_vs_ce"] == 2 * 2 * N_ITEMS
    # the config fixes which tasks count, before any run: next_sentence left out
    table2.write_table2(
        score_paths=paths, tasks=TASKS, methods=["ce", "dispersion"], reference="dispersion", metric="acc", labels={},
        stem=out / "counted", metrics_path=out / "counted.json", plot_path=out / "counted-plot.csv",
        counted=["persuasion_cloze"],
    )
    tidy = pd.read_csv(out / "counted.csv").set_index("method")
    assert (tidy.loc["ce", "average_mean"] == pytest.approx(51.0)
            and tidy.loc["dispersion", "average_mean"] == pytest.approx(54.0))
    assert tidy.loc["dispersion", "diff_vs_ce"] == pytest.approx(3.0)
    assert tidy.loc["dispersion", "n_items_vs_ce"] == 2 * N_ITEMS  # 2 seeds x the cloze items
    assert tidy.loc["dispersion", "avg_rank"] == tidy.loc["dispersion", "persuasion_cloze_rank"]
    assert ("read the tasks counted (persuasion_cloze, fixed in the config before any run)"
            in (out / "counted.md").read_text())
    metrics = json.loads((out / "counted.json").read_text())
    assert (metrics[MODEL]["ce"]["average"] == pytest.approx(51.0)
            and metrics[MODEL]["dispersion"]["average"] == pytest.approx(54.0))
    with pytest.raises(ValueError, match=r"counted tasks \['cloze'\]: each must be one of the scored tasks"):
        T.counted_tasks(TASKS, ["cloze"])


def test_the_above_chance_rule_counts_the_tasks_the_runs_pooled_answer(tmp_path):
    """counted_tasks: above_chance drops next_sentence (every row at its chance) and keeps the
    cloze (every row about 25 points above): the same table as listing the cloze, with the rule
    and what it left out in the caption and the counted tasks in the CSV."""
    out = tmp_path / "out"
    paths = write_records(tmp_path / "scores", chance_world())
    table2.write_table2(
        score_paths=paths, tasks=TASKS, methods=["ce", "dispersion"], reference="dispersion", metric="acc", labels={},
        stem=out / "rule", metrics_path=out / "rule.json", plot_path=out / "rule-plot.csv", counted="above_chance",
    )
    tidy = pd.read_csv(out / "rule.csv").set_index("method")
    assert tidy.loc["dispersion", "diff_vs_ce"] == pytest.approx(3.0)  # the cloze alone, as listed above
    assert tidy.loc["ce", "average_mean"] == pytest.approx(51.0)
    assert set(tidy["counted_tasks"]) == {"persuasion_cloze"}
    caption = (out / "rule.md").read_text().split("\n\n")[0]
    assert "read the tasks counted (persuasion_cloze; the rule below)" in caption
    assert "Counted by evaluation.counted_tasks: above_chance" in caption
    assert "not counted: next_sentence (pooled 37.6 % against 37.5 %, p = " in caption
    # listed tasks stay as they were; an unknown rule is refused by name
    assert T.resolve_counted(TASKS, ["persuasion_cloze"], pd.DataFrame()) == (["persuasion_cloze"], "")
    with pytest.raises(ValueError, match="the one rule is 'above_chance'"):
        T.resolve_counted(TASKS, "at_least_half", pd.DataFrame())
    with pytest.raises(ValueError, match="a rule, to be made a list"):
        T.counted_tasks(TASKS, "above_chance")


def test_the_above_chance_rule_reads_no_method_s_label_and_keeps_every_task_when_none_passes():
    rng = np.random.default_rng(0)
    rows = []
    for method, seeds in (("ce", (0, 1, 2)), ("dispersion", (0, 1, 2))):
        for seed in seeds:
            for doc_id in range(200):
                for task, accuracy in (("learned", 0.6), ("guessed", 0.25)):
                    rows.append({"model": MODEL, "method": method, "seed": seed, "checkpoint": "final", "task": task,
                                 "subtask": task, "doc_id": doc_id, "score": float(rng.random() < accuracy),
                                 "n_choices": 4.0})
    items = pd.DataFrame(rows)
    tests = C.pooled_chance_tests(items, ["learned", "guessed"]).set_index("task")
    assert tests.loc["learned", "counted"] and tests.loc["learned", "p"] < 1e-6
    assert not tests.loc["guessed", "counted"] and tests.loc["guessed", "chance"] == pytest.approx(25.0)
    assert tests.loc["guessed", "n_items"] == 200
    swapped = items.assign(method=items["method"].map({"ce": "dispersion", "dispersion": "ce"}))
    pd.testing.assert_frame_equal(C.pooled_chance_tests(swapped, ["learned", "guessed"]).set_index("task"), tests)
    assert C.tasks_above_chance(items, ["learned", "guessed"])[0] == ["learned"]
    kept, sentence = C.tasks_above_chance(items, ["guessed"])
    assert kept == ["guessed"] and sentence.startswith("No task is answered above chance")


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
    return S.load_scores(write_records(tmp_path, recs))


def test_table3_values_and_order(ablation):
    t3 = table3.table3(ablation, TASKS, GRID)
    assert list(t3.columns) == list(table3.TABLE3_COLUMNS)
    assert list(zip(t3["weight"], t3["tau"])) == [(0.1, 0.5), (0.1, 1.0), (1.0, 0.5), (1.0, 1.0)]
    assert t3["method"].tolist() == ["disp_w01_t05", "dispersion", "disp_w1_t05", "disp_w1_t1"]
    assert t3["n_seeds"].tolist() == [3, 3, 1, 2]
    assert t3["average_mean"].tolist() == pytest.approx([51.0, 47.0, 30.0, 42.0])
    assert t3["average_std"].iloc[[0, 1, 3]].tolist() == pytest.approx([1.0, math.sqrt(3), math.sqrt(8)])
    assert math.isnan(t3["average_std"].iloc[2])


def test_table3_grid_strings(ablation):
    grid = table3.table3_grid(table3.table3(ablation, TASKS, GRID))
    assert list(grid.columns) == ["weight", "tau = 0.5", "tau = 1"]
    assert grid.values.tolist() == [
        ["0.1", "51.00 ± 1.00", "47.00 ± 1.73"],
        ["1", "30.00", "42.00 ± 2.83"],
    ]


def test_table3_incomplete_grid_is_an_error(ablation):
    with pytest.raises(ValueError, match=r"toy-mlp128.*lacks grid method.*disp_w2_t1"):
        table3.table3(ablation, TASKS, {**GRID, "disp_w2_t1": (2.0, 1.0)})
    with pytest.raises(ValueError, match=r"share \(weight, tau\)"):
        table3.table3(ablation, TASKS, {**GRID, "clone": (0.1, 1.0)})


# ---------------------------------------------------------------------------------------------
# Display and files
# ---------------------------------------------------------------------------------------------


TARGETS = ["ce", "dispersion"]


def test_format_table2_strings_and_bold_best(tidy):
    display = T.format_score_table(tidy, TASKS, TARGETS)
    assert list(display.columns) == [
        "Model", "Method", "Seeds", "persuasion_cloze", "next_sentence", "Average", "Avg. rank",
        "Δ vs Cross-entropy", "per seed vs Cross-entropy", "Δ vs Dispersion", "per seed vs Dispersion",
    ]
    shown = display.set_index("Method")
    # Ties for the best cloze mean: both rows bold.
    assert shown.loc["Dispersion", "persuasion_cloze"] == "**52.0 ± 2.0**"
    assert shown.loc["Ortho_reg", "persuasion_cloze"] == "**52.0 ± 0.0**"
    assert shown.loc["Cross-entropy", "persuasion_cloze"] == "49.3 ± 0.6"
    assert shown.loc["Dispersion", "next_sentence"] == "**42.0 ± 2.0**"
    assert shown.loc["Ortho_reg", "next_sentence"] == "41.0 ± 0.0"
    assert shown.loc["Dispersion", "Average"] == "**47.00 ± 1.73**"
    assert shown.loc["pretrained", "Average"] == "27.50"
    assert shown.loc["Ortho_reg", "Avg. rank"] == "1.8"  # 1.75, one decimal
    # The comparison cells: difference, seed-aware interval (typographic minus), p and Holm p.
    t2 = tidy.set_index("method")
    ce = t2.loc["ce"]
    low, high = ce["ci_low_vs_dispersion"], ce["ci_high_vs_dispersion"]
    expected = F.comparison_cell(-3.5, low, high, ce["p_vs_dispersion"], holm=ce["p_holm_vs_dispersion"],
                                 detectable=ce["detectable_vs_dispersion"])
    assert shown.loc["Cross-entropy", "Δ vs Dispersion"] == expected
    # the interval holds zero: the smallest difference the comparison would find is shown
    assert re.fullmatch(r"−3\.5 \[−\d+\.\d, [−+]?\d+\.\d\], p=0\.\d+, Holm p=0\.\d+, MDE \d+\.\d", expected)
    assert shown.loc["Cross-entropy", "per seed vs Dispersion"] == "−2.00; −3.00; −5.50"
    assert shown.loc["pretrained", "Δ vs Cross-entropy"].startswith("−16.0 [")
    assert shown.loc["Dispersion", "Δ vs Dispersion"] == "—" and shown.loc["Cross-entropy", "Δ vs Cross-entropy"] == "—"
    assert shown.loc["Dispersion", "per seed vs Dispersion"] == "—"


def test_comparison_cell():
    assert F.comparison_cell(1.23, -0.44, 2.81, 0.1449) == "+1.2 [−0.4, 2.8], p=0.14"
    assert F.comparison_cell(-3.5, -5.06, -1.94, 0.0002) == "−3.5 [−5.1, −1.9], p<0.001"
    assert F.comparison_cell(0.0, 0.0, 0.0, 1.0) == "+0.0 [0.0, 0.0], p=1"
    assert F.comparison_cell(math.nan, math.nan, math.nan, math.nan) == "—"
    assert F.comparison_cell(-3.5, -5.06, -1.94, 0.0002, holm=0.0123) == "−3.5 [−5.1, −1.9], p<0.001, Holm p=0.012"
    assert F.comparison_cell(2.0, math.nan, math.nan, math.nan) == "+2.0 (one run: noise unmeasured)"
    assert F.comparison_cell(1.23, -0.44, 2.81, 0.1449, detectable=3.04) == "+1.2 [−0.4, 2.8], p=0.14, MDE 3.0"
    assert F.comparison_cell(-3.5, -5.06, -1.94, 0.0002, detectable=1.5) == "−3.5 [−5.1, −1.9], p<0.001"


def test_write_table_files(tidy, tmp_path):
    stem = tmp_path / "out" / "table2_toy"
    table2.write_table(T.format_score_table(tidy, TASKS, TARGETS), tidy, stem, table2.table2_caption(TARGETS))

    counts = {f"n_items_vs_{target}": "Int64" for target in TARGETS}
    back = pd.read_csv(stem.with_suffix(".csv"), dtype=counts)
    pd.testing.assert_frame_equal(back, tidy, check_dtype=False, rtol=0, atol=1e-12)
    assert back.loc[back.method == "ce", "items_p_vs_dispersion"].item() == 2 / (R + 1)

    md = stem.with_suffix(".md").read_text()
    first_paragraph, table = md.split("\n\n")
    assert "Δ vs ce and dispersion: the row's average minus that method's, in points" in first_paragraph
    assert "two-sided p over seeds and test items" in first_paragraph
    assert "a paired bootstrap over items, 10000 resamples" in first_paragraph and "MDE" in first_paragraph
    assert "Holm p: adjusted over the table's distinct comparisons" in first_paragraph
    assert "A seed varies the order of the training data" in first_paragraph
    assert "checkpoint chosen per seed by the lowest validation loss" in first_paragraph
    display = T.format_score_table(tidy, TASKS, TARGETS)
    assert markdown_cells(table) == [list(display.columns), *display.values.tolist()]
    assert markdown_cells(table)[4][:4] == ["toy-mlp128", "Dispersion", "3", "**52.0 ± 2.0**"]
    # Model and Method left, the 9 columns of numbers right
    assert re.fullmatch(r"\|:-+\|:-+\|(-+:\|){9}", md.split("\n\n")[1].splitlines()[1])

    page = stem.with_suffix(".html").read_text()
    assert page.startswith("<p>Downstream acc (%) as mean ± sample std") and "<table" in page
    assert "<td><b>52.0 ± 2.0</b></td>" in page and "**" not in page

    tex = stem.with_suffix(".tex").read_text()
    assert r"persuasion\_cloze" in tex and "persuasion_cloze" not in tex.replace(r"\_", "")
    assert r"\textbf{52.0 $\pm$ 2.0}" in tex
    assert r"Ortho\_reg" in tex
    assert r"49.3 $\pm$ 0.6 &" in tex and r"\textbf{49.3" not in tex
    assert r"$-$3.5 [$-$" in tex and "Holm p=" in tex and r"$\Delta$ vs Dispersion" in tex
    assert r"$-$2.00; $-$3.00; $-$5.50" in tex
    assert "±" not in tex and "**" not in tex and "−" not in tex
    assert tex.count(r"\begin{tabular}") == 1 and tex.rstrip().endswith(r"\end{tabular}")
    # Every body row has as many cells as the header.
    rows = [line for line in tex.splitlines() if line.endswith(r"\\")]
    assert len(rows) == 1 + len(tidy)
    assert {row.count(" & ") for row in rows} == {len(display.columns) - 1}
    assert not list((tmp_path / "out").glob(".*.tmp"))  # atomic writes left nothing behind


def test_latex_and_markdown_escaping():
    frame = pd.DataFrame({"a_b": ["50% & $x#", "**c_d**", r"back\slash {~^}"], "n": ["1", "|", "—"]})
    tex = F.to_latex(frame)
    assert r"a\_b" in tex
    assert r"50\% \& \$x\#" in tex
    assert r"\textbf{c\_d}" in tex
    assert r"back\textbackslash{}slash \{\textasciitilde{}\textasciicircum{}\}" in tex
    assert "---" in tex
    md = F.to_markdown(frame)
    # A pipe inside a cell is escaped, so every row keeps its two cells.
    assert markdown_cells(md) == [["a_b", "n"], ["50% & $x#", "1"], ["**c_d**", "\\|"], [r"back\slash {~^}", "—"]]


def test_markdown_keeps_display_strings_and_aligns_numbers():
    frame = pd.DataFrame({"Method": ["a", "b"], "Average": ["47.00", "**1.0 ± 0.5**"], "x": [1.23456, math.nan]})
    md = trend_tables.to_markdown(frame, float_format=".2f")
    # tabulate would print "47.00" as "47" and "1.0" as "1"; numbers are shown as given.
    assert markdown_cells(md) == [["Method", "Average", "x"], ["a", "47.00", "1.23"], ["b", "**1.0 ± 0.5**", "—"]]
    assert re.fullmatch(r"\|:-+\|-+:\|-+:\|", md.splitlines()[1])  # text left, numbers right
    assert trend_tables.to_markdown(frame.assign(x=["line\nbreak", "y"])).count("\n") == 3  # header, rule, 2 rows


def test_score_metrics(world):
    metrics = table2.score_metrics(world, TASKS, METHODS)
    assert set(metrics) == {MODEL}
    assert set(metrics[MODEL]) == {"pretrained", "ce", "ortho", "dispersion"}
    assert metrics[MODEL]["ce"] == {"persuasion_cloze": 49.3333, "next_sentence": 37.6667, "average": 43.5}
    assert metrics[MODEL]["pretrained"]["average"] == 27.5
    assert json.loads(json.dumps(metrics)) == metrics
    with pytest.raises(ValueError, match="whitening"):
        table2.score_metrics(world, TASKS, ["whitening"])


def test_scores_by_step_puts_pretrained_at_step_zero(tmp_path):
    paths = write_records(tmp_path / "scores", [
        record("pretrained", None, "pretrained", None, None, 0.30, 0.25),
        record("ce", 0, "step-0000010", 10, 5.0, 0.40, 0.30),
        record("ce", 1, "step-0000010", 10, 5.1, 0.50, 0.20),
    ])
    out = tmp_path / "by_step.csv"
    written = T.write_scores_by_step(score_paths=paths, metric="acc", out_path=out)
    table = pd.read_csv(out)
    assert list(table.columns) == list(written.columns) == ["model", "method", "step", "task", "mean", "std", "count"]
    table = table.set_index(["method", "step", "task"])
    assert table.loc[("pretrained", 0, "persuasion_cloze"), "mean"] == pytest.approx(30.0)
    row = table.loc[("ce", 10, "persuasion_cloze")]
    assert row["mean"] == pytest.approx(45.0) and row["count"] == 2
    assert row["std"] == pytest.approx(math.sqrt(50.0), abs=1e-4)  # (40, 50): sample variance 50; 4 decimals


# ---------------------------------------------------------------------------------------------
# The workflow's table files
# ---------------------------------------------------------------------------------------------


def test_write_table2_files_metrics_and_plot(tmp_path):
    paths = write_records(tmp_path / "scores", world_records())
    out = tmp_path / "out"
    table = table2.write_table2(
        score_paths=paths, tasks=TASKS, methods=METHODS, reference="dispersion", metric="acc",
        labels={"ce": "Cross-entropy"}, stem=out / "table2", metrics_path=out / "metrics.json",
        plot_path=out / "plot.csv",
    )
    assert sorted(p.name for p in out.iterdir()) == [
        "metrics.json", "plot.csv", "table2.csv", "table2.html", "table2.md", "table2.tex",
    ]
    assert table["label"].tolist() == ["pretrained", "Cross-entropy", "ortho", "dispersion"]
    counts = {"n_items_vs_ce": "Int64", "n_items_vs_dispersion": "Int64"}
    pd.testing.assert_frame_equal(pd.read_csv(out / "table2.csv", dtype=counts), table, check_dtype=False)
    assert table.set_index("method").loc["ce", "diff_vs_dispersion"] == pytest.approx(-3.5)
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics[MODEL]["ce"]["average"] == 43.5
    assert metrics["chance_flags"]["next_sentence"] == {"chance": 37.5, "max_distance": 12.5, "at_chance": False}
    plot = pd.read_csv(out / "plot.csv")
    assert plot.columns.tolist() == ["row", "model", "method", "average_mean", "average_std"]
    assert plot["row"].tolist()[1] == "toy-mlp128 / ce"
    assert plot["average_mean"].tolist() == [27.5, 43.5, 46.5, 47.0]
    assert plot["average_std"].round(4).tolist()[1] == round(math.sqrt(1.75), 4)  # written to 4 decimals


def test_write_table3_one_grid_per_model(tmp_path):
    recs = [record(method, seed, "c", 1, 1.0, 0.50 + 0.01 * seed, 0.40, model=model)
            for model in ("m1", "m2") for method in GRID for seed in (0, 1)]
    grid = {method: list(point) for method, point in GRID.items()}  # as the config gives it: lists
    stem = tmp_path / "table3"
    table = table3.write_table3(score_paths=write_records(tmp_path / "scores", recs), tasks=TASKS, metric="acc",
                           grid=grid, models=["m2", "m1"], stem=stem)
    assert table["model"].tolist() == ["m1"] * 4 + ["m2"] * 4
    cells = markdown_cells(stem.with_suffix(".md").read_text().split("\n\n")[1])
    # per-seed averages 45 and 45.5: mean 45.25, std 0.35
    assert cells == [
        ["model", "weight", "tau = 0.5", "tau = 1"],
        ["m2", "0.1", "45.25 ± 0.35", "45.25 ± 0.35"], ["m2", "1", "45.25 ± 0.35", "45.25 ± 0.35"],
        ["m1", "0.1", "45.25 ± 0.35", "45.25 ± 0.35"], ["m1", "1", "45.25 ± 0.35", "45.25 ± 0.35"],
    ]
    assert pd.read_csv(stem.with_suffix(".csv"))["method"].tolist() == table["method"].tolist()


def test_write_trend_table(tmp_path):
    rows = pd.DataFrame({
        "model": ["gpt2", "gpt2-medium"], "label": ["GPT-2", "GPT-2 | medium"], "num_layers": [12, 24],
        "spearman_rho": [0.87412587, math.nan], "kendall_tau": [0.7272727, -0.1],
    })
    written = trend_tables.write_trend_table(rows, family="gpt2", dataset="austen",
                                  csv_path=tmp_path / "t.csv", markdown_path=tmp_path / "t.md")
    assert list(rows.columns) == ["model", "label", "num_layers", "spearman_rho", "kendall_tau"]  # untouched
    assert list(written.columns[:2]) == ["family", "dataset"]
    assert (tmp_path / "t.csv").read_text().splitlines() == [
        "family,dataset,model,label,num_layers,spearman_rho,kendall_tau",
        "gpt2,austen,gpt2,GPT-2,12,0.8741,0.7273",
        "gpt2,austen,gpt2-medium,GPT-2 | medium,24,,-0.1000",
    ]
    title, units, table = (tmp_path / "t.md").read_text().split("\n\n")
    assert "cover the text sequences only" in units
    assert title == "# gpt2 on austen"
    assert markdown_cells(table) == [
        ["family", "dataset", "model", "label", "num_layers", "spearman_rho", "kendall_tau"],
        ["gpt2", "austen", "gpt2", "GPT-2", "12", "0.8741", "0.7273"],
        ["gpt2", "austen", "gpt2-medium", "GPT-2 \\| medium", "24", "—", "-0.1000"],
    ]


# ---------------------------------------------------------------------------------------------
# Table 4 and the condensation effects
# ---------------------------------------------------------------------------------------------

# (method, seed, step) -> (last_half, spearman_rho, kendall_tau)
TRAJECTORY = {
    ("ce", 0, 0): (0.80, 0.90, 0.80), ("ce", 0, 10): (0.80, 0.90, 0.80), ("ce", 0, 20): (0.80, 0.70, 0.50),
    ("ce", 1, 0): (0.80, 0.90, 0.80), ("ce", 1, 10): (0.80, 0.90, 0.80), ("ce", 1, 20): (0.84, 0.50, 0.30),
    ("dispersion", 0, 0): (0.80, 0.90, 0.80), ("dispersion", 0, 10): (0.79, 0.60, 0.40),
    ("dispersion", 0, 20): (0.60, -0.10, -0.20),
    ("dispersion", 1, 0): (0.80, 0.90, 0.80), ("dispersion", 1, 10): (0.81, 0.60, 0.40),
    ("dispersion", 1, 20): (0.64, -0.30, -0.40),
}


def trajectory_frame(points: dict = TRAJECTORY) -> pd.DataFrame:
    """A trajectory CSV's columns, as midtrain_tables writes them."""
    rows = []
    for (method, seed, step), (half, rho, tau) in points.items():
        rows.append({"method": method, "seed": seed, "step": step, "val_loss": 4.0 - step / 100,
                     "spearman_rho": rho, "kendall_tau": tau, **{f"last_{n}": half for n in range(1, 6)},
                     "last_half": half, "last_half_low": half - 0.0196, "last_half_high": half + 0.0196})
    # Shuffled, so that nothing relies on the file's order.
    return pd.DataFrame(rows).sample(frac=1.0, random_state=0).reset_index(drop=True)


def scratch_records() -> list[dict]:
    """Two methods pre-trained from scratch, two seeds, with a decoy checkpoint and a stray
    pretrained record that Table 4 leaves out."""
    recs = [record("pretrained", None, "pretrained", None, None, 0.9, 0.9, model="scratch")]
    for method, values in (("ce", {0: (0.50, 0.40), 1: (0.52, 0.42)}),
                           ("dispersion", {0: (0.54, 0.44), 1: (0.56, 0.42)})):
        for seed, (cloze, nxt) in values.items():
            recs.append(record(method, seed, "step-0000020", 20, 3.0, cloze, nxt, model="scratch"))
            recs.append(record(method, seed, "step-0000010", 10, 3.5, 0.9, 0.9, model="scratch"))
    return recs


def test_table4_reads_condensation_at_the_scored_checkpoint(tmp_path):
    # seed 0 of dispersion: its step 10 has the lower validation loss, so its scores and its
    # condensation both come from step 10 (0.79), not from the final step 20 (0.60)
    recs = [r for r in scratch_records() if not (r["method"] == "dispersion" and r["seed"] == 0)]
    recs.append(record("dispersion", 0, "step-0000020", 20, 3.0, 0.54, 0.44, model="scratch"))
    recs.append(record("dispersion", 0, "step-0000010", 10, 2.5, 0.54, 0.44, model="scratch"))
    scores, items = load(write_records(tmp_path, recs))
    t4 = table4.table4(scores, TASKS, ["ce", "dispersion"], items=items, trajectories={"scratch": trajectory_frame()})
    assert t4.set_index("method").loc["dispersion", "last_half_mean"] == pytest.approx((0.79 + 0.64) / 2)


def test_table4_scores_comparison_and_final_condensation(tmp_path):
    scores, items = load(write_records(tmp_path, scratch_records()))
    t4 = table4.table4(scores, TASKS, ["ce", "dispersion"], items=items,
                       trajectories={"scratch": trajectory_frame()}, labels={"ce": "CE"})
    assert list(t4.columns) == table4.table4_columns(TASKS, ["ce"])
    t4 = t4.set_index("method")
    assert list(t4.index) == ["ce", "dispersion"]  # no pretrained row
    # ce: cloze 50, 52 -> 51 +- sqrt(2); per-seed averages 45, 47 -> 46; dispersion 49, 49 -> 49 +- 0.
    assert t4.loc["ce", "persuasion_cloze_mean"] == pytest.approx(51.0)
    assert t4.loc["ce", "persuasion_cloze_std"] == pytest.approx(math.sqrt(2))
    assert (t4.loc["ce", "average_mean"] == pytest.approx(46.0)
            and t4.loc["dispersion", "average_mean"] == pytest.approx(49.0))
    # dispersion alone right on 4 + 4 (cloze) + 4 + 0 (next) of 400 pairs: +3 points, McNemar 2^-11.
    assert t4.loc["dispersion", "diff_vs_ce"] == pytest.approx(3.0)
    assert t4.loc["dispersion", "n_items_vs_ce"] == 400
    assert t4.loc["dispersion", "mcnemar_p_vs_ce"] == pytest.approx(2.0**-11)
    assert math.isnan(t4.loc["ce", "diff_vs_ce"])
    # Condensation at each run's final step (20), not at the selected-or-any other step.
    assert t4.loc["ce", "last_half_mean"] == pytest.approx(0.82)
    assert t4.loc["ce", "last_half_std"] == pytest.approx(math.sqrt(0.0008))
    assert t4.loc["dispersion", "last_half_mean"] == pytest.approx(0.62)
    assert t4.loc["dispersion", "spearman_rho_mean"] == pytest.approx(-0.2)
    assert t4.loc["dispersion", "spearman_rho_std"] == pytest.approx(math.sqrt(0.02))
    assert t4.loc["ce", "kendall_tau_mean"] == pytest.approx(0.4)


def test_table4_needs_every_scored_seed_in_the_trajectory(tmp_path):
    scores, items = load(write_records(tmp_path, scratch_records()))
    partial = {key: value for key, value in TRAJECTORY.items() if key[:2] != ("dispersion", 1)}
    with pytest.raises(ValueError,
                       match=r"'scratch' method 'dispersion' seed 1: step 20 of its scored checkpoint is not in"):
        table4.table4(scores, TASKS, ["ce", "dispersion"], items=items,
                      trajectories={"scratch": trajectory_frame(partial)})
    with pytest.raises(ValueError, match=r"'scratch': no trajectory given"):
        table4.table4(scores, TASKS, ["ce", "dispersion"], items=items, trajectories={})


def test_write_table4_files(tmp_path):
    trajectory = tmp_path / "trajectory.csv"
    trajectory_frame().to_csv(trajectory, index=False)
    stem = tmp_path / "out" / "table4"
    table = table4.write_table4(
        score_paths=write_records(tmp_path / "scores", scratch_records()), tasks=TASKS, methods=["ce", "dispersion"],
        metric="acc", labels={"ce": "CE", "dispersion": "Dispersion"}, condensation={"scratch": trajectory}, stem=stem,
    )
    assert sorted(p.name for p in stem.parent.iterdir()) == ["table4.csv", "table4.html", "table4.md", "table4.tex"]
    back = pd.read_csv(stem.with_suffix(".csv"), dtype={"n_items_vs_ce": "Int64"})
    pd.testing.assert_frame_equal(back, table, check_dtype=False, rtol=0, atol=1e-12)
    caption, body = stem.with_suffix(".md").read_text().split("\n\n")
    assert caption.startswith("Models pre-trained from scratch with each loss")
    assert "the checkpoint each run's scores come from" in caption and "lowest validation loss" in caption
    assert "Δ vs CE:" in caption
    assert "A seed varies the initialisation and the order of the training data" in caption
    cells = markdown_cells(body)
    assert cells[0] == ["Model", "Method", "Seeds", "persuasion_cloze", "next_sentence", "Average", "Avg. rank",
                        "Δ vs CE", "per seed vs CE", "Deep cos", "Spearman ρ", "Kendall τ"]
    assert cells[1][-4:] == ["—", "0.820 ± 0.028", "0.600 ± 0.141", "0.400 ± 0.141"]
    assert cells[2][1] == "Dispersion" and cells[2][5] == "**49.00 ± 0.00**"
    assert cells[2][7].startswith("+3.0 [")
    tex = stem.with_suffix(".tex").read_text()
    assert r"Spearman $\rho$ & Kendall $\tau$ \\" in tex


def effect_profiles(points: dict = TRAJECTORY, noise: float = 0.0, sequences: int = 12, layers: int = 4) -> Profiles:
    """Each (method, seed, step) of ``points`` as per-sequence layer means whose deeper half averages
    its ``last_half``, rising with depth by the sign of its rho; ``noise``: each run's own per-sequence
    noise (a run x sequence interaction), drawn with a fixed seed."""
    rng = np.random.default_rng(11)
    rows, profiles = [], []
    for (method, seed, step), (half, rho, _tau) in points.items():
        shape = np.linspace(-0.1, 0.1, layers) * (1 if rho >= 0 else -1)
        base = shape - shape[-(layers // 2):].mean() + half
        rows.append({"method": method, "seed": seed, "step": step})
        profiles.append(base + rng.normal(0, noise, (sequences, 1)) + np.zeros((sequences, layers)))
    return Profiles(pd.DataFrame(rows), profiles, [None] * len(rows), [None] * len(rows))


def test_condensation_effects_by_hand():
    profiles = effect_profiles(noise=0.01)
    effects = condensation_effects.condensation_effects(profiles, reference="ce")
    assert list(effects.columns) == list(condensation_effects.EFFECT_COLUMNS)
    cosine = effects[effects["metric"] == "last_half"].set_index("step")
    assert cosine.index.tolist() == [0, 10, 20] and (cosine["method"] == "dispersion").all()
    final = cosine.loc[20]
    # the paired differences' seed x sequence table, by the analysis of variance
    rows = profiles.rows

    def deep(method, seed):
        index = rows.index[(rows["method"] == method) & (rows["seed"] == seed) & (rows["step"] == 20)][0]
        return profiles.layers[index][:, 2:].mean(axis=1)

    d = np.array([deep("dispersion", s) - deep("ce", s) for s in (0, 1)])
    k, n = d.shape
    per_seed, per_unit = d.mean(axis=1), d.mean(axis=0)
    ms_unit = k * per_unit.var(ddof=1)
    ms_residual = ((d - per_seed[:, None] - per_unit[None, :] + d.mean()) ** 2).sum() / ((k - 1) * (n - 1))
    se = math.sqrt(per_seed.var(ddof=1) / k + max(ms_unit - ms_residual, 0) / (k * n))
    assert final["difference"] == pytest.approx(d.mean()) and final["se"] == pytest.approx(se)
    assert final["dof"] == pytest.approx(1)
    assert final["mean"] == pytest.approx((deep("dispersion", 0).mean() + deep("dispersion", 1).mean()) / 2)
    half = stats.t.ppf(0.975, 1) * se
    assert (final["ci_low"], final["ci_high"]) == (pytest.approx(d.mean() - half), pytest.approx(d.mean() + half))
    shift, critical = final["detectable"] / se, stats.t.isf(0.025, 1)  # 80 % power by the noncentral t
    assert stats.nct.sf(critical, 1, shift) == pytest.approx(0.80, abs=1e-6)  # the other tail: below 1e-17
    rho = effects[effects["metric"] == "spearman_rho"].set_index("step")
    assert rho.loc[20, "difference"] == pytest.approx(-1.0 - 1.0)  # falling against rising profiles


def test_condensation_effects_without_spread_and_errors():
    single = {key: value for key, value in TRAJECTORY.items() if key[1] == 0}
    effects = condensation_effects.condensation_effects(effect_profiles(single))
    assert effects["ci_low"].isna().all() and effects["p"].isna().all()  # one seed each: noise unmeasured
    cosine = effects[effects["metric"] == "last_half"].set_index("step")
    assert (cosine["n_seeds"] == 1).all() and cosine.loc[20, "difference"] == pytest.approx(-0.2)
    with pytest.raises(ValueError, match=r"reference 'whitening'"):
        condensation_effects.condensation_effects(effect_profiles(), reference="whitening")
    base = effect_profiles()
    doubled = Profiles(pd.concat([base.rows, base.rows.iloc[:1]], ignore_index=True), base.layers + base.layers[:1],
                       base.lens_values + [None], base.lens_jackknife + [None])
    with pytest.raises(ValueError, match=r"has step .* twice"):
        condensation_effects.condensation_effects(doubled)


def test_write_condensation_effects(tmp_path):
    profiles = effect_profiles(noise=0.01)
    path = tmp_path / "trajectory.profiles.npz"
    write_profiles(path, profiles.rows, profiles.layers, profiles.lens_values)
    written = condensation_effects.write_condensation_effects(
        profiles=read_profiles(path), csv_path=tmp_path / "effects.csv", markdown_path=tmp_path / "effects.md",
    )
    back = pd.read_csv(tmp_path / "effects.csv")
    assert back.columns.tolist() == list(condensation_effects.EFFECT_COLUMNS)
    assert back["difference"].round(5).tolist() == written["difference"].round(5).tolist()
    caption, body = (tmp_path / "effects.md").read_text().split("\n\n")
    assert "95 % interval and p over the training seeds and the text sequences" in caption and "MDE" in caption
    cells = markdown_cells(body)
    assert cells[0] == ["method", "step", "metric", "n_seeds", "mean", "ce mean", "difference", "se", "dof", "ci_low",
                        "ci_high", "p", "MDE", "per seed"]
    assert cells[3][:4] == ["dispersion", "20", "last_half", "2"]



# --------------------------------------------------------------------------------------------
# Fig. 4 over seeds: the band of a configuration's runs (reporting/tables/series_bands.py)
# --------------------------------------------------------------------------------------------

BAND_CHECKPOINTS = (("0", 0.0), ("1k", 2.0e9), ("143k", 3.0e11))


def band_run(offset: float, base: np.ndarray, checkpoints=BAND_CHECKPOINTS) -> Profiles:
    """A run's series profiles: at checkpoint c every sequence's layer means are ``base`` (shared by
    the runs: the same sequences) plus c / 10 plus the run's ``offset`` at every layer."""
    rows = [{"checkpoint": label, "tokens": tokens} for label, tokens in checkpoints]
    layers = [base + index / 10 + offset for index, _ in enumerate(checkpoints)]
    return Profiles(pd.DataFrame(rows), layers, [None] * len(rows), [None] * len(rows))


def test_a_series_band_is_the_runs_mean_with_their_spread_and_the_sequences_counted_once():
    from condensation.reporting.tables import series_bands

    rng = np.random.default_rng(3)
    base = rng.uniform(0.1, 0.5, size=(6, 4)).cumsum(axis=1) / 4  # 6 sequences, 4 layers, rising with depth
    offsets = {"seed0": 0.00, "seed1": 0.03, "seed2": -0.01}
    table = series_bands.band_table({name: band_run(offset, base) for name, offset in offsets.items()})
    deep = table[table["statistic"] == "last_half"].reset_index(drop=True)
    assert deep["checkpoint"].tolist() == ["0", "1k", "143k"] and deep["tokens"].tolist() == [0.0, 2.0e9, 3.0e11]
    # each run's deeper-half mean, and their mean: worked out from the construction
    base_deep = base[:, 2:].mean(axis=1)  # the deeper ceil(4 / 2) layers of each sequence
    for index, row in deep.iterrows():
        for name, offset in offsets.items():
            assert row[f"run:{name}"] == pytest.approx(base_deep.mean() + index / 10 + offset)
        assert row["mean"] == pytest.approx(base_deep.mean() + index / 10 + np.mean(list(offsets.values())))
    # the runs differ by a constant: no run x sequence interaction, so the variance is the seeds'
    # spread plus the sequences' sampling error of the shared part, each once; t over the seeds
    seeds = np.var(list(offsets.values()), ddof=1) / 3
    units = np.var(base_deep, ddof=1) / 6
    se = math.sqrt(seeds + units)
    half = stats.t.ppf(0.975, 2) * se
    np.testing.assert_allclose(deep["se"], se, rtol=1e-9)
    np.testing.assert_allclose(deep["dof"], 2.0)
    np.testing.assert_allclose(deep["high"] - deep["mean"], half, rtol=1e-9)
    np.testing.assert_allclose(deep["mean"] - deep["low"], half, rtol=1e-9)
    assert set(deep["covers"]) == {"seeds and sequences"} and set(deep["runs"]) == {3}
    # the rank statistic: every run rises with depth at every checkpoint
    rho = table[table["statistic"] == "spearman_rho"]
    assert np.allclose(rho["mean"], 1.0) and len(rho) == 3


def test_a_series_band_leaves_out_a_checkpoint_some_run_lacks_and_needs_two_runs():
    from condensation.reporting.tables import series_bands

    base = np.linspace(0.1, 0.4, 4)[None, :] + np.linspace(0, 0.05, 5)[:, None]
    runs = {"seed0": band_run(0.0, base), "seed1": band_run(0.02, base, BAND_CHECKPOINTS[::2])}
    assert series_bands.common_checkpoints(runs) == ["0", "143k"]
    assert series_bands.left_out(runs) == ["seed0: 1k"]
    assert series_bands.band_table(runs)["checkpoint"].unique().tolist() == ["0", "143k"]
    with pytest.raises(ValueError, match="two or more runs"):
        series_bands.band_table({"seed0": runs["seed0"]})


def test_pooled_bases_replicate_the_base_model_with_its_seeds_nested_in_it():
    """Three base models (one label: a suite's seeds), two mid-training seeds each: dispersion
    against CE with the base as the replicate. Each base's seeds are averaged first; the estimate
    is the mean over bases of their differences, its standard error their spread over sqrt(3)
    with 2 degrees of freedom (every sequence alike here: no sequence noise), worked out by hand."""
    gaps = {"base-a": (-0.10, -0.14), "base-b": (-0.02, -0.04), "base-c": (-0.07, -0.05)}
    by_base = {}
    for base, (first, second) in gaps.items():
        points = {("ce", 0, 20): (0.60, 1.0, 1.0), ("ce", 1, 20): (0.62, 1.0, 1.0),
                  ("dispersion", 0, 20): (0.60 + first, 1.0, 1.0), ("dispersion", 1, 20): (0.62 + second, 1.0, 1.0)}
        by_base[base] = effect_profiles(points)
    pooled = condensation_effects.pool_bases(by_base)
    assert pooled.rows[["method", "seed", "base", "runs"]].drop_duplicates().shape[0] == 6
    assert set(pooled.rows["runs"]) == {2} and sorted(set(pooled.rows["seed"])) == [0, 1, 2]
    effect = condensation_effects.condensation_effects(pooled)
    row = effect[effect["metric"] == "last_half"].iloc[0]
    per_base = np.array([(first + second) / 2 for first, second in gaps.values()])
    assert row["difference"] == pytest.approx(per_base.mean())
    assert row["se"] == pytest.approx(per_base.std(ddof=1) / math.sqrt(3))
    assert row["dof"] == pytest.approx(2.0) and row["n_seeds"] == 3
    assert [float(v) for v in row["per_seed"].split("; ")] == pytest.approx(per_base, abs=1e-4)
    assert "paired by base" in condensation_effects.effects_caption("ce", pooled=True)
