"""Does condensation predict the scores (condensation.reporting.findings.prediction): known slopes,
the false-call rate under no relation and the power at the detectable effect, by simulation."""

from __future__ import annotations

import json
import math

import numpy as np
import pandas as pd
import pytest

from condensation.reporting.findings import claims
from condensation.reporting.findings.prediction import (
    PER,
    across_methods,
    prediction_pieces,
    read_run_scores,
    run_table,
    within_methods,
)
from condensation.reporting.statistics.decisions import AGREES, DISAGREES, UNTESTED, decide
from condensation.reporting.statistics.panel import detectable_effect

DESIGN = {"midtrain, toy": ["ce", "dispersion"], "scratch, toy-init": ["ce", "dispersion", "distillation"]}
"""The default's shape: two studies, 2 and 3 methods, 3 seeds each (15 runs in 5 cells)."""
SEEDS = 3


def runs_of(condensation: np.ndarray, score: np.ndarray) -> pd.DataFrame:
    """Runs in DESIGN's order (study, method, seed) with the given values."""
    cells = [(study, method) for study, methods in DESIGN.items() for method in methods]
    rows = [{"study": study, "method": method, "seed": seed, "step": 10}
            for study, method in cells for seed in range(SEEDS)]
    frame = pd.DataFrame(rows)
    frame["condensation"], frame["score"] = condensation, score
    return frame


STUDY_OF_CELL = np.array([0, 0, 1, 1, 1])
"""Each of DESIGN's five cells' study."""


def test_known_slopes_within_and_across_methods():
    """Within each method and seed the score falls by 20 points per unit of condensation (2 per
    0.1); the methods' means lie on a line of slope -50 (5 per 0.1) once each study's mean is taken
    out, whatever the studies' own levels and whatever a seed moves in all of its arms alike."""
    rng = np.random.default_rng(0)
    method_x = np.array([0.30, 0.20, 0.50, 0.35, 0.40])  # per cell
    study_level = np.array([40.0, 40.0, 60.0, 60.0, 60.0])
    deviation = rng.normal(0, 0.02, (5, SEEDS))
    deviation -= deviation.mean(axis=1, keepdims=True)
    for study in range(2):  # contrasts within a seed too: each seed's mean over its study's cells is zero
        rows = STUDY_OF_CELL == study
        deviation[rows] -= deviation[rows].mean(axis=0, keepdims=True)
    seed_x, seed_y = rng.normal(0, 0.05, (2, SEEDS)), rng.normal(0, 3.0, (2, SEEDS))
    x = (method_x[:, None] + deviation + seed_x[STUDY_OF_CELL]).ravel()
    centred_x = method_x - np.array([0.25, 0.25, 0.4166666667, 0.4166666667, 0.4166666667])
    y = (study_level[:, None] - 50.0 * centred_x[:, None] - 20.0 * deviation + seed_y[STUDY_OF_CELL]).ravel()
    runs = runs_of(x, y)
    within, across = within_methods(runs, "last_half"), across_methods(runs, "last_half")
    assert within.estimate == pytest.approx(-20.0 * PER) and within.se == pytest.approx(0.0, abs=1e-9)
    assert within.dof == 15 - 5 - (6 - 2) - 1 and across.dof == 5 - 2 - 1
    assert across.estimate == pytest.approx(-50.0 * PER, rel=1e-6)
    # a missing run (an unbalanced layout) keeps the known slope: the means are fitted, not averaged
    unbalanced = within_methods(runs.drop(index=4), "last_half")
    assert unbalanced.estimate == pytest.approx(-20.0 * PER) and unbalanced.dof == 14 - 5 - (6 - 2) - 1


def simulate(slope_within: float, slope_across: float, draws: int, seed: int,
             sharing: float = 0.9) -> tuple[np.ndarray, np.ndarray, tuple]:
    """p-values of the two pieces over ``draws`` simulated configs of DESIGN's shape. Each method
    moves condensation and score by its own independent amount (a confound the pieces remove); the
    arms of one seed share their initialisation and data order, so a seed shifts every arm of its
    study alike, ``sharing`` of the variance in condensation and in score (0.9: the students'
    seeds correlate 0.96 in the default); the score follows the given slopes plus noise. The runs'
    condensation is fixed across draws (the design), only the scores are drawn."""
    rng = np.random.default_rng(seed)
    shared, own = math.sqrt(sharing), math.sqrt(1.0 - sharing)
    method_x = rng.normal(0.3, 0.1, 5)
    x = (method_x[:, None] + 0.03 * (shared * rng.normal(0, 1, (2, SEEDS))[STUDY_OF_CELL]
                                     + own * rng.normal(0, 1, (5, SEEDS)))).ravel()
    runs = runs_of(x, np.zeros(15))
    cells, seeds = runs.groupby(["study", "method"]), runs.groupby(["study", "seed"])
    # the balanced layout's contrasts: less the cell's mean and the seed's, plus the study's
    x_within = (runs["condensation"] - cells["condensation"].transform("mean")
                - seeds["condensation"].transform("mean") + runs.groupby("study")["condensation"].transform("mean"))
    x_within = x_within.to_numpy()
    across_x = np.repeat(method_x - np.array([method_x[STUDY_OF_CELL == s].mean() for s in STUDY_OF_CELL]), SEEDS)
    p_within, p_across = np.empty(draws), np.empty(draws)
    for draw in range(draws):
        method_score = rng.normal(0, 2.0, 5)  # methods differ in score for reasons of their own
        noise = 3.0 * (shared * rng.normal(0, 1, (2, SEEDS))[STUDY_OF_CELL] + own * rng.normal(0, 1, (5, SEEDS)))
        y = (method_score[:, None] + noise).ravel()
        runs["score"] = y + slope_within / PER * x_within + slope_across / PER * across_x
        p_within[draw] = within_methods(runs, "last_half").p_value
        p_across[draw] = across_methods(runs, "last_half").p_value
    true_se = 3.0 * own / math.sqrt(float((x_within**2).sum())) * PER
    return p_within, p_across, (true_se, 15 - 5 - (6 - 2) - 1)


@pytest.mark.parametrize("sharing", [0.0, 0.5, 0.9])
def test_no_relation_calls_at_most_five_percent_false_effects(sharing):
    """Under no relation (methods confounded in level, never in slope; seeds shifting all their
    arms alike), each piece rejects at the 5 % level in 5 % of draws, within Monte Carlo error
    (1000 draws: sd 0.7 %). Deviations from the cell's means alone (the seed's mean left in) call
    13.5 % here at 0.9 sharing: a seed's shift then counts once per method."""
    p_within, p_across, _ = simulate(0.0, 0.0, 1000, seed=1, sharing=sharing)
    assert abs((p_within < 0.05).mean() - 0.05) < 0.02
    assert abs((p_across < 0.05).mean() - 0.05) < 0.02


def test_power_at_the_detectable_effect_is_eighty_percent():
    """At the within piece's minimum detectable effect (noncentral t, 80 % power at 5 %), the
    simulated power is 80 %: the MDE printed beside an inconclusive verdict means what it says."""
    _, _, (true_se, dof) = simulate(0.0, 0.0, 1, seed=2)
    effect = detectable_effect(true_se, dof, 0.05, 0.80, 2)
    p_within, _, _ = simulate(-effect, 0.0, 1000, seed=2)
    assert abs((p_within < 0.05).mean() - 0.80) < 0.035  # sd 1.3 %


def test_a_statistic_stuck_at_one_cannot_test_the_claim():
    runs = runs_of(np.ones(15), np.arange(15.0))
    trajectories = {study: runs[runs["study"] == study].rename(columns={"condensation": "spearman_rho"})
                    for study in DESIGN}
    scores = {study: runs[runs["study"] == study][["method", "seed", "step", "score"]] for study in DESIGN}
    pieces, _ = prediction_pieces(trajectories, scores, "spearman_rho", "Spearman rho")
    assert decide(pieces).verdict == UNTESTED and "does not vary" in pieces[0].text
    # scores that do not vary (a task every run gets equally right) say so, not "p = 1, MDE 0"
    same = {study: frame.assign(score=50.0) for study, frame in scores.items()}
    rng = np.random.default_rng(3)
    varied = {study: frame.assign(spearman_rho=rng.uniform(0.5, 0.9, len(frame)))
              for study, frame in trajectories.items()}
    pieces, _ = prediction_pieces(varied, same, "spearman_rho", "Spearman rho")
    assert decide(pieces).verdict == UNTESTED and "the scores do not vary" in pieces[0].text


def write_record(root, study, model, method, seed, step, accuracies):
    path = root / "results" / "scores" / study / model / method / f"seed{seed}" / "selected.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"method": method, "seed": seed, "step": step, "metric": "acc",
                                "scores": {task: {"acc": acc} for task, acc in accuracies.items()}}))
    return path


def test_score_records_join_their_trajectory_and_the_claim_reads_both_statistics(tmp_path):
    """Runs read from their score records (the counted tasks' mean, in points) meet their
    trajectory at the scored step; a run whose step was not measured is left out with a note; the
    claim says which settings the arms share."""
    rng = np.random.default_rng(4)
    paths, trajectory = [], []
    for method, shift in (("ce", 0.0), ("dispersion", -0.1), ("decorrelation", -0.05)):
        for seed in range(4):
            x = 0.4 + shift + rng.normal(0, 0.02)
            acc = 0.5 - 1.5 * (x - 0.4) + rng.normal(0, 0.004)  # lower condensation, higher score
            paths.append(write_record(tmp_path, "midtrain", "toy", method, seed, 49, {"a": acc, "b": acc, "c": 0.9}))
            trajectory += [{"method": method, "seed": seed, "step": 49, "last_half": x,
                            "spearman_rho": 0.9 + rng.normal(0, 0.01)},
                           {"method": method, "seed": seed, "step": 0, "last_half": 0.5, "spearman_rho": 1.0}]
    paths.append(write_record(tmp_path, "midtrain", "toy", "ce", 9, 30, {"a": 0.5, "b": 0.5}))  # step 30 unmeasured
    run_scores = read_run_scores(paths, ["a", "b"])
    assert list(run_scores) == ["midtrain, toy"]
    first = run_scores["midtrain, toy"].iloc[0]
    assert first["score"] == pytest.approx(100 * json.loads(paths[0].read_text())["scores"]["a"]["acc"])
    trajectories = {"midtrain, toy": pd.DataFrame(trajectory)}
    runs, missing = run_table(trajectories, run_scores, "last_half")
    assert len(runs) == 12 and missing == ["midtrain, toy: ce seed 9 (step 30 not measured)"]
    evidence = claims.Evidence(trajectories=trajectories, run_scores=run_scores)
    design = claims.Design(matched={"midtrain": {"lr": 0.0005, "weight_decay": 0.1, "train_tokens": 100000}})
    verdict = claims.prediction_claim(evidence, design)
    deep = verdict.decisions[0]
    assert [r.piece.name for r in deep.readings] == ["within methods", "across methods"]
    assert deep.verdict == AGREES and deep.readings[0].piece.estimate.estimate == pytest.approx(-15.0, rel=0.2)
    assert any("step 30 not measured" in note for note in verdict.notes)
    assert any("lr 0.0005, weight_decay 0.1, train_tokens 100000" in note for note in verdict.notes)
    # the budget is matched, the scored checkpoint is each run's own (lowest validation loss)
    assert any("(midtrain, toy steps 30 to 49), so there the arms' tokens differ" in note for note in verdict.notes)
    # the claim's direction: a positive slope disagrees
    flipped = {name: frame.assign(score=-frame["score"]) for name, frame in run_scores.items()}
    pieces, _ = prediction_pieces(trajectories, flipped, "last_half", "deep cos")
    assert decide(pieces).verdict == DISAGREES


def test_under_the_above_chance_rule_each_study_reads_the_tasks_its_table_counted(tmp_path):
    """counted_tasks: above_chance: the page reads each score table's counted tasks (its
    counted_tasks column) and the prediction claim scores each study's runs on its table's."""
    from condensation.reporting.findings import page

    paths = [write_record(tmp_path, "midtrain", "toy", "ce", 0, 49, {"a": 0.6, "b": 0.2}),
             write_record(tmp_path, "scratch", "toy", "ce", 0, 99, {"a": 0.3, "b": 0.5})]
    tables = {"table2": pd.DataFrame({"method": ["ce"], "counted_tasks": ["a"]}),
              "table4": pd.DataFrame({"method": ["ce"], "counted_tasks": ["a;b"]})}
    counted = page.counted_tasks(["a", "b"], "above_chance", tables)
    assert counted["counted"] == {"midtrain": ["a"], "scratch": ["a", "b"]}
    assert "table2 (midtrain): a; table4 (scratch): a, b" in counted["sentence"]
    run_scores = read_run_scores(paths, counted["counted"])
    assert run_scores["midtrain, toy"]["score"].iloc[0] == pytest.approx(60.0)
    assert run_scores["scratch, toy"]["score"].iloc[0] == pytest.approx(40.0)
    assert page.table_counted({}, "table4", ["a", "b"]) == ["a", "b"]  # no table: every task
    assert page.counted_tasks(["a", "b"], None)["counted"] == ["a", "b"]
