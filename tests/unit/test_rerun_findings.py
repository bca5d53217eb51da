"""tools/rerun_findings.py: disjoint seed sets, and the estimates of finished sets compared by z."""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from scipy import stats

from condensation.config.plan import drawn_seeds, model_seed, studies, study_runs

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("rerun_findings", ROOT / "tools/rerun_findings.py")
rerun = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = rerun  # its dataclasses look their module up there
spec.loader.exec_module(rerun)

CLAIM = "Dispersion lowers condensation"


def piece(name: str, estimate: float, se: float, seed_se: float | None = None, dof: float = math.inf,
          verdict: str = "agrees") -> dict:
    """A piece as page.verdict_json writes it (the fields the comparison reads, and a few more)."""
    seed_se = se if seed_se is None else seed_se
    half = (stats.t.isf(0.025, dof) if math.isfinite(dof) else 1.96) * se
    unit_se = math.sqrt(max(se**2 - seed_se**2, 0))
    return {"piece": name, "text": f"{name}: {estimate:+.3f}", "counted": True, "verdict": verdict, "reason": "",
            "estimate": estimate, "se": se, "dof": dof, "seed_se": seed_se, "unit_se": unit_se,
            "ci_low": estimate - half, "ci_high": estimate + half, "covers": "seeds and sequences", "p": 0.01,
            "p_judged": 0.01, "level": 0.05, "detectable": 0.1, "margin": None, "per_seed": []}


def write_set(workdir: Path, offset: int, pieces: list[dict], verdict: str = "agrees",
              lens_pieces: list[dict] = ()) -> None:
    """A finished set: its findings.json under offset-<N>, one claim decided on one statistic."""
    def finding(found: list[dict]) -> dict:
        decision = {"statistic": "deep cosine", "verdict": verdict, "reason": "", "rule": "", "pieces": found}
        return {"claim": CLAIM, "verdict": verdict, "reason": "", "notes": [], "decisions": [decision]}
    path = workdir / f"offset-{offset}" / "results/metrics/findings.json"
    path.parent.mkdir(parents=True)
    lenses = {"isoscore": [finding(list(lens_pieces))]} if lens_pieces else {}
    path.write_text(json.dumps({"findings": [finding(pieces)], "under_lenses": lenses, "tasks": {}}))


def compare_only(workdir: Path) -> tuple[int, dict]:
    status = rerun.main(["--compare-only", "--workdir", str(workdir)])
    return status, json.loads((workdir / "rerun-report.json").read_text())


def test_known_z_over_the_whole_error_and_over_the_seeds_alone():
    a = rerun.PieceReading(1.0, 0.3, math.inf, 0.2, 0.4, 1.6, "agrees")
    b = rerun.PieceReading(0.6, 0.4, math.inf, 0.1, -0.2, 1.4, "inconclusive")
    found = rerun.compare_piece(("", CLAIM, "deep cosine", "midtrain"), (0, 1000), a, b)
    assert found.z == pytest.approx(0.4 / 0.5) and found.z_calibrated == found.z
    assert found.z_seeds == pytest.approx(0.4 / math.sqrt(0.05))
    assert (found.first, found.second, found.piece) == (0, 1000, f"{CLAIM} / deep cosine / midtrain")


def test_z_is_read_at_the_t_of_its_welch_degrees_of_freedom():
    assert rerun.welch_dof([1.0, 1.0], [2, 2]) == pytest.approx(4.0)
    assert rerun.welch_dof([1.0, 3.0], [math.inf, math.inf]) == math.inf
    assert rerun.welch_dof([1.0, 0.0], [3, math.inf]) == pytest.approx(3.0)
    assert rerun.calibrated(stats.t.isf(0.025, 4), 4) == pytest.approx(1.959964, abs=1e-5)
    assert rerun.calibrated(-2.0, math.inf) == -2.0


def comparisons(zs: list[float]) -> list:
    return [rerun.Comparison(f"piece {i}", 0, 1000, z, z, math.inf, z, z, math.inf, z) for i, z in enumerate(zs)]


def test_coverage_mean_square_and_the_bonferroni_bound_are_computed_right():
    held = rerun.check("z", comparisons([0.5] * 19 + [-3.0]), "z", alpha=0.01)
    assert held.comparisons == 20 and held.coverage == 0.95 and held.within_196 == 0.95
    assert held.mean_square == pytest.approx((19 * 0.25 + 9) / 20)
    assert held.coverage_p == pytest.approx(1 - 0.95**20)
    assert held.bound == pytest.approx(stats.norm.isf(0.01 / 40)) and held.largest == 3.0
    assert held.largest_at == "piece 19 (offsets 0 and 1000)" and held.passed
    too_far = rerun.check("z", comparisons([0.5] * 19 + [4.0]), "z", alpha=0.01)
    assert not too_far.passed and too_far.coverage == 0.95  # one piece beyond its Bonferroni bound
    undercovered = rerun.check("z", comparisons([0.5] * 15 + [2.5] * 5), "z", alpha=0.01)
    assert undercovered.coverage == 0.75 and undercovered.coverage_p == pytest.approx(stats.binom.cdf(15, 20, 0.95))
    assert undercovered.largest < undercovered.bound and not undercovered.passed  # coverage alone fails it


def test_estimates_within_their_error_exit_0_and_moved_verdicts_are_printed_not_exited_on(tmp_path, capsys):
    for offset, shift, verdict in ((0, 0.00, "agrees"), (1000, 0.01, "agrees"), (2000, -0.01, "inconclusive")):
        write_set(tmp_path, offset, [piece("midtrain", -0.05 + shift, 0.01), piece("scratch", -0.2 - shift, 0.05)],
                  verdict=verdict)
    status, report = compare_only(tmp_path)
    assert status == 0 and report["passed"]
    (whole, seeds) = report["checks"]
    assert whole["comparisons"] == seeds["comparisons"] == 6 and whole["coverage"] == 1.0
    moved = {row["name"]: row for row in report["verdicts"]}
    assert moved[CLAIM]["moved"] and moved[CLAIM]["verdicts"] == ["agrees", "agrees", "inconclusive"]
    shown = capsys.readouterr().out
    assert "**moved**" in shown and "The estimates held" in shown
    assert (tmp_path / "rerun-report.md").read_text() == shown


def test_a_piece_that_moved_beyond_its_error_exits_1(tmp_path):
    write_set(tmp_path, 0, [piece("midtrain", -0.05, 0.002), piece("scratch", -0.2, 0.05)])
    write_set(tmp_path, 1000, [piece("midtrain", -0.05, 0.002), piece("scratch", -0.2, 0.05)])
    write_set(tmp_path, 2000, [piece("midtrain", -0.03, 0.002), piece("scratch", -0.2, 0.05)])  # z = 7.1
    status, report = compare_only(tmp_path)
    assert status == 1 and not report["passed"]
    assert report["checks"][0]["largest"] == pytest.approx(0.02 / math.sqrt(2 * 0.002**2))
    assert "midtrain (offsets 0 and 2000)" in report["checks"][0]["largest_at"]


def test_an_interval_that_holds_only_through_its_units_fails_the_seeds_check(tmp_path):
    """The items' main effect is the same in every set (same items), so it cancels in a - b: a
    piece whose se is mostly that effect and whose seed part is too small moves beyond the latter."""
    for offset, estimate in ((0, 0.0), (1000, 0.05), (2000, -0.05)):
        write_set(tmp_path, offset, [piece("scores", estimate, se=0.1, seed_se=0.005)])
    status, report = compare_only(tmp_path)
    whole, seeds = report["checks"]
    assert whole["passed"] and whole["largest"] < 1 and not seeds["passed"] and seeds["largest"] > 10
    assert status == 1


def test_unmeasured_saturated_and_unrepeated_pieces_are_listed_not_compared(tmp_path):
    for offset in (0, 1000, 2000):
        pieces = [piece("midtrain", -0.05, 0.01), piece("one run", -0.1, math.nan), piece("at chance", 0.0, 0.0),
                  piece("packaged models", 0.3, 0.02, seed_se=0.0),
                  # rho 1.00 for every run, a rounding-sized se left by the resamples
                  piece("rho at one", 1e-14 * offset, 4e-11) | {"saturated": True}]
        if offset:
            pieces.append(piece("only here", 0.1, 0.01))
        write_set(tmp_path, offset, pieces, lens_pieces=[piece("midtrain", 0.02, 0.01, dof=2)])
    status, report = compare_only(tmp_path)
    # midtrain and its lens twin in 3 pairs each, and the piece two sets measured in theirs
    assert status == 0 and report["checks"][0]["comparisons"] == 7
    assert {(c["piece"].split(" / ")[-1], c["first"]) for c in report["comparisons"]} == {
        ("midtrain", 0), ("midtrain", 1000), ("only here", 1000)}
    assert sum(c["piece"].startswith("[isoscore]") for c in report["comparisons"]) == 3
    left_out = "\n".join(report["not_compared"])
    for expected in ("one run: unmeasured (se NaN)", "at chance: saturated (one value for every run)",
                     "packaged models: no seed part (nothing a rerun redraws)", "only here: not in offset 0",
                     "rho at one: saturated (one value for every run)"):
        assert expected in left_out


def test_nothing_compared_exits_1(tmp_path):
    for offset in (0, 1000, 2000):
        write_set(tmp_path, offset, [piece("one run", -0.1, math.nan)])
    status, report = compare_only(tmp_path)
    assert status == 1 and report["checks"][0]["comparisons"] == 0


def test_the_default_and_its_reduced_overlay_draw_seed_sets_that_share_no_run():
    assert rerun.shared_seeds(rerun.DEFAULT_CONFIGFILES, [0, 1000, 2000]) == []
    assert rerun.shared_seeds(("config.yaml",), [0, 1000, 2000]) == []
    # the old scheme, offsets 0 and 1: seed 1 of offset 0 is seed 0 of offset 1
    shared = rerun.shared_seeds(("config.yaml",), [0, 1])
    assert any("models.toy-mlp32-s1 (offset 0)" in line and "models.toy-mlp32 (offset 1)" in line for line in shared)
    assert any("scratch toy-mlp32-init ce seed1 (offset 0)" in line for line in shared)


def test_drawn_seeds_are_every_pretraining_initialisation_and_study_seed_plus_the_offset():
    config = rerun.set_config(["config.yaml"], 1000)
    seeds = drawn_seeds(config)
    assert seeds["models.toy-mlp32-s1"] == 1001 and seeds["models.toy-mlp32-s1-init"] == 1001  # its of model's
    assert seeds["models.smollm2-135m-init"] == 1000 and "models.smollm2-135m" not in seeds  # given weights
    assert "models.toy-mlp32-ce-s0" not in seeds  # a run's final weights: its study run draws them
    assert model_seed(config, "toy-mlp1024") == 1000 + config["pretrain"]["seed"]
    runs = {name: seed for name, seed in seeds.items() if not name.startswith("models.")}
    assert set(runs) == {f"{study} {model} {method} seed{seed}" for study in studies(config)
                         for model, method, seed in study_runs(config, study)}
    assert runs["scratch toy-mlp32-init distillation seed2"] == 1002
    assert set(runs.values()) == {1000 + seed for study in studies(config) for seed in config[study]["seeds"]}


def test_help_and_bad_arguments():
    script = [sys.executable, str(ROOT / "tools/rerun_findings.py")]
    shown = subprocess.run([*script, "--help"], capture_output=True, text=True, check=True).stdout
    assert "--sets" in shown and "z = (a - b) / sqrt(se_a^2 + se_b^2)" in shown
    too_few = subprocess.run([*script, "--sets", "2"], check=False, capture_output=True, text=True)
    assert too_few.returncode == 2 and "--sets must be at least 3 (got 2)" in too_few.stderr
    missing = subprocess.run([*script, "--configfile", "config.yaml", "nope.yaml"], check=False,
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "nope.yaml" in missing.stderr


def leaves(tree: dict, prefix: str = "") -> dict[str, object]:
    """Every leaf setting of a nested mapping, by its dotted path."""
    found = {}
    for key, value in tree.items():
        path = f"{prefix}{key}"
        found |= leaves(value, f"{path}.") if isinstance(value, dict) else {path: value}
    return found


COST_SETTINGS = {"pretrain.train.train_tokens", "midtrain.train.train_tokens", "scratch.train.train_tokens",
                 "sampling.num_sequences", "evaluation.limit"}
"""What the reduced overlay may cut: how long each run trains and on how much it is measured and
scored, never which runs, models, methods, tasks or claims there are."""


def test_the_reduced_overlay_cuts_only_costs_and_keeps_every_seed():
    overlay = leaves(yaml.safe_load((ROOT / "configs/rerun-reduced.yaml").read_text()))
    assert set(overlay) <= COST_SETTINGS, f"the overlay changes the design: {sorted(set(overlay) - COST_SETTINGS)}"
    default, reduced = rerun.set_config(["config.yaml"], 0), rerun.set_config(rerun.DEFAULT_CONFIGFILES, 0)
    changed = {path for path, value in leaves(reduced).items() if leaves(default).get(path) != value}
    assert changed == set(overlay)
    for path in changed - {"evaluation.limit"}:
        assert 0 < leaves(reduced)[path] < leaves(default)[path], path
    items = {spec["num_items"] for spec in default["evaluation"]["local_tasks"].values()}
    assert reduced["evaluation"]["limit"] < min(items)
    assert drawn_seeds(reduced) == drawn_seeds(default)


def test_a_new_set_starts_from_the_first_sets_outputs_but_its_training_runs(tmp_path):
    first, new = tmp_path / "offset-0", tmp_path / "offset-1000"
    outputs = {"data/austen/sample.jsonl": "texts", "results/findings.md": "page", ".snakemake/metadata/abc": "{}",
               "runs/pretrain/tokenizer/tokenizer.json": "no seed", "runs/midtrain/toy/blocks.npy": "no seed"}
    left = {"runs/pretrain/toy/run.json": "seed 0", "runs/pretrain/toy/final/model.safetensors": "weights",
            "runs/midtrain/toy/ce/seed0/run.json": "seed 0", "runs/midtrain/toy/ce/seed0/state/optimizer.pt": "state",
            "runs/eval_cache/x_rank0.db": "answers", ".snakemake/locks/0.input.lock": "", "rerun.log": "log",
            rerun.SET_RECORD: "{}", "Snakefile": "changed"}
    for name, text in {**outputs, **left}.items():
        (first / name).parent.mkdir(parents=True, exist_ok=True)
        (first / name).write_text(text)
    made = (first / "results/findings.md").stat().st_mtime - 3600
    os.utime(first / "results/findings.md", (made, made))
    rerun.copy_checkout(ROOT, new)
    snakefile = (new / "Snakefile").read_text()

    assert rerun.start_from_first_set(first, new) == len(outputs)
    for name, text in outputs.items():
        assert (new / name).read_text() == text
    assert (new / "results/findings.md").stat().st_mtime == made  # Snakemake compares the times
    assert not (new / "runs/pretrain/toy").exists() and not (new / "runs/midtrain/toy/ce").exists()
    assert not (new / "runs/eval_cache").exists() and not (new / ".snakemake/locks").exists()
    assert not (new / "rerun.log").exists()
    assert (new / "Snakefile").read_text() == snakefile  # the checkout's sources are the checkout's


def test_across_the_sets_counts_verdicts_and_pools_the_seeds_part_but_not_the_shared_units(tmp_path):
    sets = ((0, -0.05, 0.01, "agrees"), (1000, -0.04, 0.02, "agrees"), (2000, -0.06, 0.02, "inconclusive"))
    for offset, estimate, se, verdict in sets:
        found = piece("midtrain", estimate, se, seed_se=0.8 * se, verdict=verdict)
        found["detectable"] = 3.0 * se  # each set's own MDE: its noncentral-t factor (3 here) x its se
        share = piece("distillation share", 0.3 + offset / 10000, se, verdict="inconclusive")
        share["margin"] = 0.25
        write_set(tmp_path, offset, [found, share], verdict=verdict)
    _, report = compare_only(tmp_path)
    (row,) = report["across_sets"]
    assert row["claim"] == CLAIM and row["counts"] == "agrees 2 / inconclusive 1" and row["marginal"]
    pooled, share = row["pieces"]
    assert (pooled["low"], pooled["high"]) == (-0.06, -0.04) and pooled["estimate"] == pytest.approx(-0.05)
    # the units' part (0.6 se) stays whole, the seeds' (0.8 se) averages over the three sets
    units, seeds = (sum((f * se) ** 2 for _, _, se, _ in sets) / 3 for f in (0.6, 0.8))
    assert pooled["se"] == pytest.approx(math.sqrt(units + seeds / 3))
    assert pooled["ci_high"] - pooled["estimate"] == pytest.approx(1.959964 * pooled["se"], rel=1e-5)
    # the design's MDE: the factor 3 on the se pooled over the sets, not any one set's
    assert pooled["detectable"] == pytest.approx(3.0 * math.sqrt((0.01**2 + 2 * 0.02**2) / 3))
    assert (pooled["detectable_low"], pooled["detectable_high"]) == pytest.approx((0.03, 0.06))
    # a share of a gap is not averaged: its range only
    assert (share["low"], share["high"]) == pytest.approx((0.3, 0.5)) and math.isnan(share["estimate"])
    text = (tmp_path / "rerun-report.md").read_text()
    assert "agrees 2 / inconclusive 1 (marginal)" in text and "| +0.3 to +0.5 | — | — |" in text
