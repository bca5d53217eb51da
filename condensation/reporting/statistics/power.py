"""How often the findings' tests call a claim, simulated at the noise levels the default produces.

Each ``simulate_*`` function draws whole designs (training runs with their seed noise, measured on
shared units with a main effect and a run x unit interaction), runs them through the very functions
the findings page uses (:mod:`~condensation.reporting.statistics.panel`,
:mod:`~condensation.reporting.statistics.decisions`) and returns how often the verdict was
"agrees" and "disagrees". Under no effect, "agrees" is a false call: the tests are calibrated when
it stays at or below 5 %; under the effect the paper reports it is the power.

The noise levels (:data:`DEFAULT_NOISE`) were read off the default pipeline's own results: see
``docs/statistics.md`` for where each number comes from.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np
import pandas as pd
from scipy.stats import norm

from condensation.reporting.statistics.decisions import (
    AGREES,
    ANY,
    DISAGREES,
    EvidencePiece,
    decide,
)
from condensation.reporting.statistics.panel import (
    Run,
    difference,
    gap_share,
    panel_from_units,
    slope,
)
from condensation.reporting.tables.comparisons import ABOVE_CHANCE, tasks_above_chance
from condensation.reporting.tables.condensation_effects import pool_bases
from condensation.reporting.tables.profiles import Profiles


@dataclass(frozen=True)
class Rates:
    """Shares of simulated designs whose verdict was agrees / disagrees, out of ``n``."""

    agrees: float
    disagrees: float
    n: int

    @property
    def margin(self) -> float:
        """Two Monte-Carlo standard errors of a 5 % rate over ``n`` draws."""
        return 2 * float(np.sqrt(0.05 * 0.95 / self.n))


@dataclass(frozen=True)
class ConditionNoise:
    """Noise of a condensation statistic (the deeper layers' mean cosine) measured on shared
    sequences. The defaults are the default pipeline's own, read off its toy family by
    :func:`estimate_noise` (``python tools/power_design.py``; docs/statistics.md)."""

    seed_sd: float = 0.037
    """Spread of a run's value between seeds (initialisation and data order)."""
    sequence_sd: float = 0.014
    """Spread of one sequence's value around its run's mean, shared by every run (main effect)."""
    interaction_sd: float = 0.012
    """A run's own spread on each sequence (run x sequence interaction)."""
    sequences: int = 32


@dataclass(frozen=True)
class ScoreNoise:
    """Noise of a task accuracy: each item answered right when its latent ease plus the run's shift
    plus the run's own noise on the item is above a threshold (a probit model; the Bernoulli draw
    is the threshold itself, so two runs that differ little answer most items alike, as trained
    models do). Scales on the latent axis, in units of the items' spread. The defaults reproduce the
    default's from-scratch comparison (Table 4, dispersion - CE: per-seed differences spread 0.5
    points, the items' main effect 0.28 points of standard error over 3 seeds and 900 items, in all
    0.40; simulated here 0.52, 0.28 and 0.45; docs/statistics.md)."""

    run_sd: float = 0.006
    """A run's shift (seed: initialisation and data order), its own part; as much again is shared
    by the methods run with the same seed."""
    interaction_sd: float = 0.06
    """A run's own latent noise on each item (run x item interaction)."""
    method_item_sd: float = 0.08
    """How the compared method moves each item, alike in all its seeds (the method x item
    interaction: the items' main effect of a difference between methods)."""
    base_accuracy: Sequence[float] = (0.28, 0.65, 0.39)
    items_per_task: int = 300


FROM_SCRATCH_SCORES = replace(ScoreNoise(), base_accuracy=(0.25, 0.42, 0.28))
"""Table 4's tasks as the default's from-scratch toys answer them (three seed sets of 2026-12-07):
the cloze at chance, word order about 42 %, word choice 27 to 33 % per row, here 28 %: a task
learned so little that the above_chance rule often leaves it out, and so loses its items."""


MEASURED_SIZE_SLOPE = -0.19
"""The size claim's slope (deeper-layer cosine per decade of parameters) the default measured across
its toy widths: the effect its design must find with 80 % power."""


def _draw_runs(rng: np.random.Generator, arms: dict[str, float], seeds: int | Sequence[int], noise: ConditionNoise,
               paired: bool, main: np.ndarray, own_shift: Sequence[str] = (),
               sharing: float = 1.0, seed_sds: Sequence[float] | None = None) -> tuple[list[Run], list[np.ndarray]]:
    """Per arm (name -> true mean) ``seeds`` runs (or ``seeds[i]`` for the i-th arm) on the shared
    sequences' main effect ``main``; ``paired``: the arms' runs of one seed share the share
    ``sharing`` of their shift's variance (the same initialisation and data order; 1: the whole
    shift), but the arms in ``own_shift``, whose runs are trained apart (a teacher: a pre-training
    run of its own) and draw shifts of their own. ``seed_sds``: each arm's own spread between
    seeds (unpaired arms only; default ``noise.seed_sd`` for every arm)."""
    runs, per_unit = [], []
    counts = [seeds] * len(arms) if isinstance(seeds, int) else list(seeds)
    if seed_sds is not None and (paired or len(seed_sds) != len(arms)):
        raise ValueError("seed_sds: one spread per arm, for unpaired arms only")
    spreads = [noise.seed_sd] * len(arms) if seed_sds is None else list(seed_sds)
    shared = rng.normal(0, noise.seed_sd, max(counts))
    for (arm, mean), count, spread in zip(arms.items(), counts, spreads, strict=True):
        own = rng.normal(0, spread, count)
        together = paired and arm not in own_shift
        shifts = np.sqrt(sharing) * shared[:count] + np.sqrt(1 - sharing) * own if together else own
        for seed in range(count):
            own = rng.normal(0, noise.interaction_sd, noise.sequences)
            per_unit.append(mean + shifts[seed] + main + own)
            runs.append(Run(arm, seed if paired else f"{arm}-{seed}", 0.0))  # unpaired arms share no seed
    return runs, per_unit


def simulate_difference(effect: float, seeds: int, *, paired: bool = True, noise: ConditionNoise = ConditionNoise(),
                        draws: int = 2000, seed: int = 0) -> Rates:
    """Two methods on one model (``second - first`` predicted negative, e.g. dispersion - CE on the
    deeper layers' cosine): how often the difference is called."""
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(draws):
        main = rng.normal(0, noise.sequence_sd, noise.sequences)
        runs, per_unit = _draw_runs(rng, {"first": 0.5, "second": 0.5 + effect}, seeds, noise, paired, main)
        panel = panel_from_units(runs, per_unit, units="sequences")
        piece = EvidencePiece("sim", "", difference(panel, "second", "first"), direction=-1)
        calls.append(decide([piece], ANY).verdict)
    return _rates(calls)


def simulate_slope(slope_per_decade: float, positions: Sequence[float], seeds: int | Sequence[int], *,
                   noise: ConditionNoise = ConditionNoise(), seed_sds: Sequence[float] | None = None,
                   robustness: int = 0, draws: int = 2000, seed: int = 0) -> Rates:
    """The size claim: widths at ``positions`` (log10 parameters), ``seeds`` runs each (or per
    width; a width's seeds are not paired with another width's), the slope predicted negative; the
    first text decides, ``robustness`` more texts are measured and shown. ``seed_sds``: each
    width's own spread between seeds (:func:`estimate_seed_spreads`), where one spread for all
    (``noise.seed_sd``) would hide a noisy width with few seeds."""
    rng = np.random.default_rng(seed)
    x = np.asarray(positions, float)
    arms = {f"w{index}": slope_per_decade * (value - x.mean()) + 0.4 for index, value in enumerate(x)}
    calls = []
    for _ in range(draws):
        pieces = []
        for _text in range(1 + robustness):
            main = rng.normal(0, noise.sequence_sd, noise.sequences)
            runs, per_unit = _draw_runs(rng, arms, seeds, noise, False, main, seed_sds=seed_sds)
            panel = panel_from_units(runs, per_unit, units="sequences")
            pieces.append(EvidencePiece("sim", "", slope(panel, dict(zip(arms, x))), direction=-1))
        calls.append(decide(pieces[:1], ANY, robustness=pieces[1:]).verdict)
    return _rates(calls)


STUDENT_SHARING = 0.9
"""How much of a seed's shift the CE and the distilled student share (the same initialisation and
data order): the default's from-scratch students measured 0.96 as the correlation of their three
seeds' deeper-layer cosines (benchmarks/results/distillation-students-2026-11-28.md), rounded
down for three seeds' noise."""


def simulate_gap_share(share: float, seeds: int, *, margin: float = 0.25, gap: float = -0.15,
                       noise: ConditionNoise = ConditionNoise(), sharing: float = STUDENT_SHARING,
                       draws: int = 1000, seed: int = 0) -> Rates:
    """Distillation: CE students, distilled students and their teachers, each seed one triple
    (the students of a seed share ``sharing`` of their seed shift's variance; each has its own
    teacher replicate, a pre-training run of its own whose shift the students do not share); the
    distilled student closes ``share`` of the CE-to-teacher ``gap``; agrees when the share is shown
    below ``margin``."""
    rng = np.random.default_rng(seed)
    arms = {"ce": 0.4, "distilled": 0.4 + share * gap, "teacher": 0.4 + gap}
    calls = []
    for _ in range(draws):
        main = rng.normal(0, noise.sequence_sd, noise.sequences)
        runs, per_unit = _draw_runs(rng, arms, seeds, noise, True, main, own_shift=("teacher",), sharing=sharing)
        panel = panel_from_units(runs, per_unit, units="sequences")
        share, ratio = gap_share(panel, "distilled", "ce", "teacher", margin)
        piece = EvidencePiece("sim", "", share, margin=margin, ratio=ratio)
        calls.append(decide([piece], ANY).verdict)
    return _rates(calls)


def simulate_scores(effect_points: float, seeds: int, *, noise: ScoreNoise = ScoreNoise(), draws: int = 1000,
                    seed: int = 0, pieces: int = 1, unlearned: Sequence[int] = (), counted: str | None = None,
                    choices: int = 4) -> Rates:
    """A method against CE on the same model, both run with the same seeds, scored on the same
    items of several tasks (every task weighing equally); the method answers ``effect_points``
    more of every task's items right (items it got wrong turned right at random). ``pieces``: how
    many such comparisons the claim holds (Holm). ``unlearned``: the tasks (indices into
    ``noise.base_accuracy``) no run learns, which the method cannot move either (give them the
    chance accuracy, 1 / ``choices``). ``counted="above_chance"``: each draw counts only the tasks
    its runs, pooled, answer above chance, by the tables' own rule
    (:func:`~condensation.reporting.tables.comparisons.tasks_above_chance`)."""
    rng = np.random.default_rng(seed)
    tasks, n = len(noise.base_accuracy), noise.items_per_task
    strata = np.repeat(np.arange(tasks), n)
    spread = np.sqrt(1.0 + noise.interaction_sd**2)
    centre = np.repeat(norm.ppf(np.asarray(noise.base_accuracy)) * spread, n)
    learned = np.array([task not in set(unlearned) for task in range(tasks)])
    flip = np.repeat(learned * effect_points / 100.0 / (1.0 - np.asarray(noise.base_accuracy)), n)
    names = [f"task{task}" for task in range(tasks)]
    calls = []
    for _ in range(draws):
        found = []
        for _piece in range(pieces):
            ease = centre + rng.normal(0, 1.0, tasks * n)
            runs, per_unit = [], []
            shared = rng.normal(0, noise.run_sd, seeds)
            moved = rng.normal(0, noise.method_item_sd, tasks * n) * np.repeat(learned, n)
            for arm, lift in (("ce", 0.0), ("method", 1.0)):
                for s in range(seeds):
                    own = rng.normal(0, noise.run_sd) + rng.normal(0, noise.interaction_sd, tasks * n)
                    latent = ease + shared[s] + own + lift * moved
                    right = latent > 0
                    right |= (rng.random(tasks * n) < lift * flip) & ~right
                    per_unit.append(100.0 * right)
                    runs.append(Run(arm, s, 0.0))
            keep = np.ones(tasks * n, dtype=bool)
            if counted == ABOVE_CHANCE:
                items = pd.DataFrame({
                    "method": np.repeat([run.arm for run in runs], tasks * n),
                    "task": np.tile(np.repeat(names, n), len(runs)),
                    "subtask": "", "doc_id": np.tile(np.arange(tasks * n), len(runs)),
                    "score": np.concatenate(per_unit) / 100.0, "n_choices": float(choices)})
                kept, _ = tasks_above_chance(items, names)
                keep = np.isin(strata, [names.index(task) for task in kept])
            weights = np.full(int(keep.sum()), 1.0 / keep.sum())  # every counted task weighs equally
            panel = panel_from_units(runs, [unit[keep] for unit in per_unit], units="test items",
                                     strata=strata[keep], weights=weights)
            found.append(EvidencePiece("sim", "", difference(panel, "method", "ce"), direction=+1))
        calls.append(decide(found, ANY).verdict)
    return _rates(calls)


def _rates(calls: list[str]) -> Rates:
    calls_array = np.array(calls)
    return Rates(float((calls_array == AGREES).mean()), float((calls_array == DISAGREES).mean()), len(calls))


def estimate_noise(per_unit: Sequence[np.ndarray], arms: Sequence[str]) -> ConditionNoise:
    """The noise levels of :class:`ConditionNoise` read off measured runs: ``per_unit[r]`` run r's
    value on each shared unit (e.g. each sequence's deeper-layer cosine), ``arms[r]`` its arm
    (runs of one arm are seeds of one model). Pooled over the arms with two or more runs: the
    interaction from the arms' run x unit residuals, the seed spread from the runs' means less the
    interaction's share, the units' main effect from the units' means less the interaction's."""
    values = np.asarray(np.stack(per_unit), float)
    labels = np.asarray(arms)
    units = values.shape[1]
    residual_ss, residual_df, seed_ss, seed_df = 0.0, 0, 0.0, 0
    centred = []
    for arm in dict.fromkeys(arms):
        block = values[labels == arm]
        if len(block) < 2:
            continue
        residual = block - block.mean(axis=1, keepdims=True) - block.mean(axis=0, keepdims=True) + block.mean()
        residual_ss += float((residual**2).sum())
        residual_df += (len(block) - 1) * (units - 1)
        means = block.mean(axis=1)
        seed_ss += float(((means - means.mean()) ** 2).sum())
        seed_df += len(block) - 1
        centred.append(block - block.mean(axis=1, keepdims=True))
    if not residual_df:
        raise ValueError("estimate_noise: needs an arm with two or more runs")
    interaction = residual_ss / residual_df
    seed = max(seed_ss / seed_df - interaction / units, 0.0)
    unit_means = np.concatenate(centred).mean(axis=0)
    main = max(float(unit_means.var(ddof=1)) - interaction / len(np.concatenate(centred)), 0.0)
    return ConditionNoise(seed_sd=float(np.sqrt(seed)), sequence_sd=float(np.sqrt(main)),
                          interaction_sd=float(np.sqrt(interaction)), sequences=units)


def estimate_seed_spreads(per_unit: Sequence[np.ndarray], arms: Sequence[str]) -> dict[str, float]:
    """Each arm's own spread between seeds, as :func:`estimate_noise` pools it (its runs' means'
    variance less the interaction's share, the interaction pooled over the arms); NaN for an arm
    of one run. Three seeds give a spread within a factor of about two: a design simulated at
    these is one plausible set of spreads, not the truth."""
    pooled = estimate_noise(per_unit, arms)
    values = np.asarray(np.stack(per_unit), float)
    labels = np.asarray(arms)
    spreads = {}
    for arm in dict.fromkeys(arms):
        means = values[labels == arm].mean(axis=1)
        spreads[arm] = (float(np.sqrt(max(means.var(ddof=1) - pooled.interaction_sd**2 / pooled.sequences, 0.0)))
                        if means.size > 1 else float("nan"))
    return spreads


DEFAULT_POSITIONS = (6.063, 6.209, 6.505)
"""log10 parameters of the default's toy widths (MLP 32, 256, 1024)."""


UNEQUAL_SPREADS = (
    ((5, 2, 5), (0.020, 0.006, 0.021), "the default's widths as one draw measured them"),
    ((2, 5, 5), (0.06, 0.024, 0.024), "a noisy 2-seed end"),
    ((5, 2, 5), (0.024, 0.06, 0.024), "a noisy 2-seed middle"),
)
"""Designs of the size claim whose widths differ in their seeds' spread: the default's, each width's
spread read by ``python tools/power_design.py`` off README command 1's profiles (a fresh clone,
2-core Intel, 2026-12-05: MLP 32 0.0204, MLP 256 0.0056, MLP 1024 0.0210), and the two a review
found where Welch's degrees of freedom alone call 9-10 % false effects (Hsu's bound keeps them
calibrated)."""


def design_table(draws: int = 1500) -> list[tuple[str, Rates, str]]:
    """The table of docs/statistics.md: each test at the default's noise, under no effect and under
    the effect the default measured (the same seeds for every row, so that a rerun gives it back)."""
    rows = []
    for seeds in ((3, 3, 3), (4, 2, 4), (5, 2, 5), (6, 2, 6)):
        null = simulate_slope(0.0, DEFAULT_POSITIONS, seeds, draws=draws)
        found = simulate_slope(MEASURED_SIZE_SLOPE, DEFAULT_POSITIONS, seeds, draws=draws)
        rows.append((f"size: slope over 3 widths, seeds {' / '.join(map(str, seeds))}", null,
                     f"{found.agrees:.0%} at {MEASURED_SIZE_SLOPE:+.2f} per decade"))
    for seeds, spreads, what in UNEQUAL_SPREADS:
        null = simulate_slope(0.0, DEFAULT_POSITIONS, seeds, seed_sds=spreads, draws=draws)
        found = simulate_slope(MEASURED_SIZE_SLOPE, DEFAULT_POSITIONS, seeds, seed_sds=spreads, draws=draws)
        rows.append((f"size: seeds {' / '.join(map(str, seeds))}, seed sd {' / '.join(map(str, spreads))} ({what})",
                     null, f"{found.agrees:.0%} at {MEASURED_SIZE_SLOPE:+.2f} per decade"))
    for seeds in (2, 3, 5):
        rows.append((f"dispersion - CE, condensation, paired, {seeds} seeds",
                     simulate_difference(0.0, seeds, draws=draws),
                     f"{simulate_difference(-0.05, seeds, draws=draws // 3).agrees:.0%} at -0.05"))
    for seeds in (3, 4, 5):
        rows.append((f"distillation: share of the gap closed, {seeds} seeds, at its 25 % margin",
                     simulate_gap_share(0.25, seeds, draws=draws // 2),
                     f"{simulate_gap_share(0.0, seeds, draws=draws // 5).agrees:.0%} at a share of 0 (gap -0.15)"))
    rows.append(("dispersion - CE, scores, 3 seeds, 3 tasks x 300 items", simulate_scores(0.0, 3, draws=draws // 3),
                 f"{simulate_scores(3.0, 3, draws=draws // 5).agrees:.0%} at +3 points, "
                 f"{simulate_scores(4.0, 3, draws=draws // 5).agrees:.0%} at +4"))
    # a first task no run learns, beside two learned well, then as Table 4's toys learn them
    for noise, what in ((replace(ScoreNoise(), base_accuracy=(0.25, 0.65, 0.39)), "one of the 3 tasks at chance"),
                        (FROM_SCRATCH_SCORES, "one at chance, the learned two at 42 % and 28 % (Table 4's toys)")):
        for counted, how in ((None, "every task counted"), (ABOVE_CHANCE, "counted_tasks: above_chance")):
            def scores(effect: float, share: int, noise: ScoreNoise = noise, counted: str | None = counted) -> Rates:
                return simulate_scores(effect, 3, noise=noise, unlearned=(0,), counted=counted, draws=draws // share)
            rows.append((f"dispersion - CE, scores, 3 seeds, {what}, {how}", scores(0.0, 3),
                         f"{scores(3.0, 5).agrees:.0%} at +3 points on the learned two, "
                         f"{scores(4.0, 5).agrees:.0%} at +4"))
    return rows



def simulate_pooled_bases(effect: float, bases: int, seeds: int, *, base_sd: float = 0.03, pooled: bool = True,
                          noise: ConditionNoise = ConditionNoise(), draws: int = 1000, seed: int = 0) -> Rates:
    """Mid-training from ``bases`` pre-training runs of one model, ``seeds`` data orders each,
    dispersion against CE (``effect``, predicted negative): each base moves the difference by its
    own amount (``base_sd``: how much the effect depends on the starting model) and both methods
    alike by a shift of ``noise.seed_sd``; each seed is a data order shared by both methods. Read
    as the findings read it: ``pooled`` (each base's seeds averaged, paired by base:
    :func:`~condensation.reporting.tables.condensation_effects.pool_bases`), or flat, every
    (base, seed) a pair of its own, which ignores the nesting."""
    rng = np.random.default_rng(seed)
    calls = []
    for _ in range(draws):
        main = rng.normal(0, noise.sequence_sd, noise.sequences)
        by_base = {}
        for base in range(bases):
            gap, shift = effect + rng.normal(0, base_sd), rng.normal(0, noise.seed_sd)
            rows, layers = [], []
            for order in range(seeds):
                order_shift = rng.normal(0, noise.seed_sd)
                for method, mean in (("ce", 0.5), ("dispersion", 0.5 + gap)):
                    own = rng.normal(0, noise.interaction_sd, noise.sequences)
                    rows.append({"method": method, "seed": order if pooled else base * seeds + order, "step": 1})
                    layers.append((mean + shift + order_shift + main + own)[:, None])
            by_base[f"base{base}"] = Profiles(pd.DataFrame(rows), layers, [None] * len(rows), [None] * len(rows))
        profiles = pool_bases(by_base) if pooled else Profiles.concat(list(by_base.values()))
        panel = profiles.panel("last_half", list(profiles.rows["method"]), list(profiles.rows["seed"]))
        piece = EvidencePiece("sim", "", difference(panel, "dispersion", "ce"), direction=-1)
        calls.append(decide([piece], ANY).verdict)
    return _rates(calls)
