"""Estimates over training runs that were measured on the same units (text sequences, test items).

Two sources of randomness stand behind every comparison of trained models: which training runs
were drawn (a seed: initial weights and data order) and which units they were measured on (the
sequences of a text, the items of a task). Every run of a comparison is measured on the *same*
units, so the units' effect splits in two: a main effect that moves every run alike (which
sequences happened to be drawn) and a run x unit interaction (how this run differs from the others
on these units). The spread of the runs over seeds already holds the interaction; what it misses
is the main effect. For a contrast ``L = sum_j c_j mean_j`` over arms ``j`` of ``k_j`` runs:

    V = sum_j c_j^2 s_j^2 / k_j  +  max(U(L) - sum_j c_j^2 I_j / k_j, 0)

- ``s_j^2``: the sample variance of arm j's run values (training noise, interaction included);
- ``U(L)``: the units' sampling variance of the contrast as measured (main effect + interaction);
- ``I_j``: one run's interaction variance in arm j: the units' sampling variance of each run's
  deviation from its arm's mean, summed over the arm's runs, over ``k_j - 1``.

Each noise is counted once (counting the units' whole variance on top of the seeds' spread counts
the interaction twice, and multiplying it by the seeds' t quantile inflates it again). Arms run with
the same seeds (two or more, none fixed) are paired: a seed is one initialisation and data order
shared by both, so the per-seed contrasts form one arm. A *fixed* arm is one given object (a
published checkpoint): no training noise, its units' error all main effect. One run of a model
trained here leaves its training noise unmeasured: no interval.

The t interval's degrees of freedom are Welch-Satterthwaite's over the seed terms alone: the seeds
are what is known least, and a units part that is well estimated must not lend them confidence
(letting it raise the degrees of freedom gives too many false calls when a few seeds happen to land
close together). With fixed arms only, the units' own degrees of freedom.

The units' sampling variance comes in three forms (:class:`UnitSampling`): exact, for a statistic
that is a weighted mean over units (a mean cosine, an accuracy: :class:`LinearUnits`, strata for
the tasks); shared bootstrap resamples, for any other statistic of the per-unit data (a rank
correlation of the mean layer profile: :class:`Replicates`); or a delete-a-group jackknife (the
lenses' stored replicates).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
from scipy import optimize, stats

from condensation.intervals import (
    BOOTSTRAP_SEED,
    CONFIDENCE,
    EQUIVALENCE_CONFIDENCE,
    PANEL_RESAMPLES,
    resampled_units,
)

# --------------------------------------------------------------------------------------------
# How the units were sampled
# --------------------------------------------------------------------------------------------


class UnitSampling:
    """The units' sampling variance of any linear combination ``a`` of a panel's run values."""

    dof: float = math.inf

    def variance(self, a: np.ndarray) -> float:  # pragma: no cover - interface
        raise NotImplementedError


@dataclass(frozen=True)
class LinearUnits(UnitSampling):
    """A statistic that is a sum over units of per-unit contributions (weights included):
    ``contributions[r, j]`` of run r and unit j, ``strata[j]`` the stratum a unit was drawn in
    (a task's items; one stratum for a text's sequences). Exact, stratified, unbiased variance."""

    contributions: np.ndarray
    strata: np.ndarray

    def __post_init__(self) -> None:
        if self.contributions.ndim != 2 or self.strata.shape != (self.contributions.shape[1],):
            raise ValueError(f"contributions [runs, units] and one stratum per unit, got {self.contributions.shape} "
                             f"and {self.strata.shape}")

    @property
    def dof(self) -> float:
        return float(self.contributions.shape[1] - len(np.unique(self.strata)))

    def variance(self, a: np.ndarray) -> float:
        combined = np.asarray(a, float) @ self.contributions
        total = 0.0
        for stratum in np.unique(self.strata):
            part = combined[self.strata == stratum]
            if part.size > 1:
                total += part.size * part.var(ddof=1)
        return float(total)


@dataclass(frozen=True)
class Replicates(UnitSampling):
    """Each run's statistic recomputed on shared resamples of the units: ``values[r, b]``.
    ``kind`` "bootstrap" (variance over resamples) or "jackknife" (delete-a-group: (G-1)/G times
    the sum of squares, G - 1 degrees of freedom)."""

    values: np.ndarray
    kind: str = "bootstrap"

    def __post_init__(self) -> None:
        if self.kind not in ("bootstrap", "jackknife"):
            raise ValueError(f"kind must be bootstrap or jackknife, got {self.kind!r}")

    @property
    def dof(self) -> float:
        return float(self.values.shape[1] - 1) if self.kind == "jackknife" else math.inf

    def variance(self, a: np.ndarray) -> float:
        combined = np.asarray(a, float) @ self.values
        if self.kind == "jackknife":
            groups = combined.size
            return float((groups - 1) / groups * ((combined - combined.mean()) ** 2).sum())
        return float(combined.var(ddof=1))


# --------------------------------------------------------------------------------------------
# Runs and panels
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Run:
    """One measured model: the arm it belongs to (a method, a width, a label), its seed (None for
    a fixed, given model) and its value of the statistic on all units."""

    arm: str
    seed: Hashable
    value: float


@dataclass(frozen=True)
class Panel:
    """Runs measured on the same units, with the units' sampling (``units``: what they are, for
    the reader: "sequences", "test items"). ``fixed``: arms that are one given model each."""

    runs: tuple[Run, ...]
    sampling: UnitSampling
    units: str
    fixed: frozenset[str] = frozenset()
    statistic: str = ""

    def arm(self, name: str) -> list[int]:
        return [index for index, run in enumerate(self.runs) if run.arm == name]

    @property
    def values(self) -> np.ndarray:
        return np.array([run.value for run in self.runs], dtype=float)


def panel_from_units(
    runs: Sequence[Run], per_unit: Sequence[np.ndarray], *, units: str, strata: np.ndarray | None = None,
    weights: np.ndarray | None = None, fixed: Sequence[str] = (), statistic: str = "",
) -> Panel:
    """A panel of a weighted-mean statistic: ``per_unit[r]`` holds run r's value on each unit (in
    the same unit order for every run), ``weights`` sum to 1 (default: equal), ``strata`` the units'
    strata (default: one). The runs' values are replaced by the weighted means, so the panel's
    numbers always agree with its units."""
    matrix = _stack(per_unit, "per-unit values")
    n = matrix.shape[1]
    w = np.full(n, 1.0 / n) if weights is None else np.asarray(weights, float)
    if w.shape != (n,) or not math.isclose(w.sum(), 1.0, rel_tol=1e-9):
        raise ValueError(f"weights: one per unit ({n}), summing to 1")
    contributions = matrix * w
    runs = tuple(Run(run.arm, run.seed, float(total)) for run, total in zip(runs, contributions.sum(axis=1)))
    strata = np.zeros(n, int) if strata is None else np.asarray(strata)
    return Panel(runs, LinearUnits(contributions, strata), units, frozenset(fixed), statistic)


def panel_from_profiles(
    runs: Sequence[Run], profiles: Sequence[np.ndarray], statistic: Callable[[np.ndarray], np.ndarray], *,
    units: str, fixed: Sequence[str] = (), name: str = "", resamples: int = PANEL_RESAMPLES,
    seed: int = BOOTSTRAP_SEED,
) -> Panel:
    """A panel of any statistic of the mean over units of a per-unit profile: ``profiles[r]`` is
    ``[units, k]`` (e.g. each sequence's layer means), ``statistic`` maps ``[m, k]`` mean profiles to
    ``[m]`` values. The units are resampled with replacement, the same resamples for every run.
    Runs may differ in ``k`` (a family's models of different depths), not in their units."""
    arrays = [np.asarray(profile, dtype=float) for profile in profiles]
    units_per_run = {a.shape[0] if a.ndim == 2 else None for a in arrays}
    if len(units_per_run) != 1 or None in units_per_run:
        shapes = sorted({a.shape for a in arrays})
        raise ValueError(f"profiles: every run must be measured on the same units, got shapes {shapes}")
    if not all(np.isfinite(a).all() for a in arrays):
        raise ValueError("profiles: expected finite values")
    n = arrays[0].shape[0]
    counts = _resample_counts(n, resamples, seed)
    values, replicates = [], []
    for profile in arrays:
        values.append(float(statistic(profile.mean(axis=0, keepdims=True))[0]))
        replicates.append(statistic(counts @ profile / n))
    runs = tuple(Run(run.arm, run.seed, value) for run, value in zip(runs, values))
    return Panel(runs, Replicates(np.array(replicates)), units, frozenset(fixed), name)


def panel_from_replicates(
    runs: Sequence[Run], replicates: Sequence[np.ndarray], *, kind: str, units: str, fixed: Sequence[str] = (),
    statistic: str = "",
) -> Panel:
    """A panel from stored replicates (e.g. the lenses' delete-a-group jackknife), the same
    groups of units for every run."""
    return Panel(tuple(runs), Replicates(_stack(replicates, "replicates"), kind), units, frozenset(fixed), statistic)


def _stack(arrays: Sequence[np.ndarray], what: str, ndim: int = 2) -> np.ndarray:
    shapes = {np.shape(a) for a in arrays}
    if len(shapes) != 1:
        raise ValueError(f"{what}: every run must be measured on the same units, got shapes {sorted(shapes)}")
    matrix = np.asarray(np.stack(arrays), dtype=float)
    if matrix.ndim != ndim or not np.isfinite(matrix).all():
        raise ValueError(f"{what}: expected finite values of {ndim} dimensions, got shape {matrix.shape}")
    return matrix


def _resample_counts(n: int, resamples: int, seed: int) -> np.ndarray:
    """``[resamples, n]``: how often each unit is drawn in each bootstrap resample."""
    draws = resampled_units(n, resamples, seed)
    counts = np.zeros((resamples, n))
    np.add.at(counts, (np.arange(resamples)[:, None], draws), 1.0)
    return counts


# --------------------------------------------------------------------------------------------
# Contrasts
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Estimate:
    """A contrast of arms with its standard error over seeds and units, and what it covers.

    ``unmeasured`` says why there is no interval (an arm of one run trained here); then ``se`` is
    NaN. ``per_seed``: the same-seed contrasts of a paired design (or each run against a fixed
    arm), for the reader to see each run's effect."""

    estimate: float
    se: float
    dof: float
    seed_se: float
    unit_se: float
    covers: str
    """The units the interval covers, in words: "seeds and sequences", "sequences"."""
    per_seed: tuple[float, ...] = ()
    unmeasured: str = ""
    statistic: str = ""
    saturated: str = ""
    """Why the statistic cannot move (the same value for every run and resample), if so."""

    @property
    def measured(self) -> bool:
        return not self.unmeasured and math.isfinite(self.se)

    def quantile(self, tail: float) -> float:
        """The upper ``tail`` quantile of the estimate's t distribution (normal for infinite dof)."""
        return float(stats.t.isf(tail, self.dof)) if math.isfinite(self.dof) else float(stats.norm.isf(tail))

    def interval(self, confidence: float = CONFIDENCE) -> tuple[float, float]:
        if not self.measured:
            return (math.nan, math.nan)
        half = self.quantile((1 - confidence) / 2) * self.se
        return (self.estimate - half, self.estimate + half)

    @property
    def p_value(self) -> float:
        """Two-sided p of ``estimate = 0``."""
        if not self.measured:
            return math.nan
        if self.se == 0:
            return 1.0 if self.estimate == 0 else 0.0
        t = abs(self.estimate) / self.se
        return float(2 * (stats.t.sf(t, self.dof) if math.isfinite(self.dof) else stats.norm.sf(t)))

    def p_below(self, bound: float) -> float:
        """One-sided p of ``estimate >= bound`` against ``estimate < bound``."""
        if not self.measured:
            return math.nan
        if self.se == 0:
            return 0.0 if self.estimate < bound else 1.0
        t = (self.estimate - bound) / self.se
        return float(stats.t.cdf(t, self.dof) if math.isfinite(self.dof) else stats.norm.cdf(t))

    def detectable(self, alpha: float = 0.05, power: float = 0.8, sides: int = 2) -> float:
        """The smallest true effect this design finds with ``power`` at level ``alpha``: the
        effect whose noncentral t (at the estimate's degrees of freedom) clears the test's
        critical value with that probability. (t of the test + t of the power) x se, the usual
        shortcut, gives 73-77 % power at 1-2 degrees of freedom, not 80 %."""
        if not self.measured:
            return math.nan
        return detectable_effect(self.se, self.dof, alpha, power, sides)


def detectable_effect(se: float, dof: float, alpha: float, power: float, sides: int = 2) -> float:
    """The effect ``delta`` at which a ``sides``-sided t test at level ``alpha`` with standard
    error ``se`` and ``dof`` degrees of freedom (normal for infinite) rejects with probability
    ``power``, exactly, from the noncentral t (both tails counted when two-sided)."""
    if se == 0:
        return 0.0
    finite = math.isfinite(dof)
    critical = float(stats.t.isf(alpha / sides, dof) if finite else stats.norm.isf(alpha / sides))

    def rejects(shift: float) -> float:  # P(reject) at noncentrality `shift`, less the power asked for
        upper = stats.nct.sf(critical, dof, shift) if finite else stats.norm.sf(critical - shift)
        lower = 0.0
        if sides == 2:  # the wrong-sign tail: scipy's nct gives NaN where it is below 1e-17
            lower = stats.nct.cdf(-critical, dof, shift) if finite else stats.norm.cdf(-critical - shift)
        return float(upper) + float(np.nan_to_num(lower)) - power

    high = critical + float(stats.norm.isf(1 - power)) + 1.0
    while rejects(high) < 0:
        high *= 2
    return float(optimize.brentq(rejects, 0.0, high, xtol=1e-10)) * se


def contrast(panel: Panel, coefficients: Mapping[str, float]) -> Estimate:
    """``sum_j c_j mean_j`` over the arms named in ``coefficients`` (see the module docstring)."""
    arms = [arm for arm, c in coefficients.items() if c != 0]
    indices = {arm: panel.arm(arm) for arm in arms}
    empty = [arm for arm, found in indices.items() if not found]
    if empty:
        raise ValueError(f"contrast: no runs of {', '.join(empty)} (arms: {sorted({r.arm for r in panel.runs})})")
    single = [arm for arm in arms if len(indices[arm]) == 1 and arm not in panel.fixed]
    groups = _paired_groups(panel, arms, indices, coefficients) or _arm_groups(panel, arms, indices, coefficients)
    values = panel.values
    estimate = float(sum(c * (vectors @ values).mean() for c, vectors in groups))
    per_seed = _per_seed(panel, arms, indices, coefficients, groups)
    covers = panel.units if all(arm in panel.fixed for arm in arms) else f"seeds and {panel.units}"
    if single:
        reason = f"one run of {', '.join(single)}: its training noise is unmeasured"
        return Estimate(estimate, math.nan, math.nan, math.nan, math.nan, covers, per_seed, reason, panel.statistic)
    seed_terms, dofs, interaction = [], [], 0.0
    for c, vectors in groups:
        k = len(vectors)
        if k > 1:
            seed_terms.append(c * c * float((vectors @ values).var(ddof=1)) / k)
            dofs.append(k - 1)
            deviations = vectors - vectors.mean(axis=0)
            interaction += c * c * sum(panel.sampling.variance(d) for d in deviations) / (k - 1) / k
    combined = sum(c * vectors.mean(axis=0) for c, vectors in groups)
    unit_var = max(panel.sampling.variance(combined) - interaction, 0.0)
    seed_var = float(sum(seed_terms))
    if seed_var > 0:
        dof = min(seed_var**2 / sum(term**2 / d for term, d in zip(seed_terms, dofs)), _weighty_arms_dof(groups))
        if unit_var > 0:  # a delete-a-group jackknife's G - 1 bounds it too (the units' term is that noisy)
            dof = min(dof, panel.sampling.dof)
    else:
        dof = float(min(dofs)) if dofs else panel.sampling.dof
    se = math.sqrt(seed_var + unit_var)
    if se < 1e-12 * max(1.0, float(np.abs(values).max())):  # identical runs and units: rounding, not noise
        se = 0.0
    saturated = ""
    # every run the same value (rho 1.00 everywhere): a resampling's rounding-sized se is no noise to test against
    if se < SATURATED_SE * max(1.0, float(np.abs(values).max())) and np.ptp(values[[i for arm in arms
                                                                                 for i in indices[arm]]]) == 0:
        saturated = (f"{panel.statistic or 'the statistic'} is {values[indices[arms[0]][0]]:.2f} "
                     "for every run")
    return Estimate(estimate, se, dof, math.sqrt(seed_var), math.sqrt(unit_var), covers, per_seed,
                    statistic=panel.statistic, saturated=saturated)


SATURATED_SE = 1e-6
"""Below this standard error (relative to the values' size), runs that all take one value are a
saturated statistic, not a measurement: the default's toys put rho at exactly 1.00 for every run,
while the jackknife's replicates left a se of ~1e-10 and the page printed an MDE of 7e-10."""

HSU_WEIGHT_SHARE = 0.25
"""An arm carries a contrast (:func:`_weighty_arms_dof`) when its design weight ``c^2 / k`` is at
least this share of the largest arm's."""


def _weighty_arms_dof(groups: list[tuple[float, np.ndarray]]) -> float:
    """Hsu's bound on Welch's degrees of freedom, ``min(k) - 1``, when the arms that carry the
    contrast by design (weight ``c^2 / k``, known before any value is seen) differ in their seed
    counts; else no bound. Welch trusts each arm's sample variance, and a 2-seed arm's is so noisy
    that, when that arm is also the noisier one, Welch calls 9-11 % false effects (a slope over
    2/5/5 seeds). With the bound the simulated designs stay at or below 5 %, while equal seed
    counts (3/3/3) and the shipped 5/2/5 slope, whose 2-seed middle width weighs a tenth of an
    end's, keep Welch's power (tests/unit/test_calibration_corner_cases.py, docs/statistics.md)."""
    weights = [(c * c / len(vectors), len(vectors)) for c, vectors in groups if len(vectors) > 1]
    if not weights:
        return math.inf
    heaviest = max(weight for weight, _ in weights)
    carrying = {k for weight, k in weights if weight >= HSU_WEIGHT_SHARE * heaviest}
    return float(min(carrying) - 1) if len(carrying) > 1 else math.inf


def _paired_groups(panel: Panel, arms: list[str], indices: Mapping[str, list[int]],
                   coefficients: Mapping[str, float]) -> list[tuple[float, np.ndarray]]:
    """One group of per-seed contrasts when every arm has the same two or more seeds (none
    fixed); else []."""
    if len(arms) < 2 or any(arm in panel.fixed for arm in arms):
        return []
    seeds = [[panel.runs[i].seed for i in indices[arm]] for arm in arms]
    shared = seeds[0]
    if (len(shared) < 2 or len(set(shared)) != len(shared)
            or any(sorted(map(str, s)) != sorted(map(str, shared)) for s in seeds)):
        return []
    vectors = np.zeros((len(shared), len(panel.runs)))
    for row, seed in enumerate(shared):
        for arm in arms:
            index = next(i for i in indices[arm] if panel.runs[i].seed == seed)
            vectors[row, index] = coefficients[arm]
    return [(1.0, vectors)]


def _arm_groups(panel: Panel, arms: list[str], indices: Mapping[str, list[int]],
                coefficients: Mapping[str, float]) -> list[tuple[float, np.ndarray]]:
    groups = []
    for arm in arms:
        vectors = np.zeros((len(indices[arm]), len(panel.runs)))
        vectors[np.arange(len(indices[arm])), indices[arm]] = 1.0
        groups.append((coefficients[arm], vectors))
    return groups


def _per_seed(panel: Panel, arms: list[str], indices: Mapping[str, list[int]], coefficients: Mapping[str, float],
              groups: list[tuple[float, np.ndarray]]) -> tuple[float, ...]:
    """Same-seed contrasts (paired), or each run of the one drawn arm against fixed arms."""
    values = panel.values
    if len(groups) == 1 and len(arms) > 1:
        return tuple(float(v) for v in groups[0][1] @ values)
    drawn = [arm for arm in arms if arm not in panel.fixed]
    if len(drawn) == 1 and len(arms) > 1:
        rest = sum(coefficients[arm] * values[indices[arm]].mean() for arm in arms if arm in panel.fixed)
        return tuple(float(coefficients[drawn[0]] * values[i] + rest) for i in indices[drawn[0]])
    return ()


def difference(panel: Panel, first: str, second: str) -> Estimate:
    """``mean(first) - mean(second)`` (:func:`contrast`)."""
    return contrast(panel, {first: 1.0, second: -1.0})


def slope(panel: Panel, positions: Mapping[str, float]) -> Estimate:
    """The least-squares slope of the arms' means against their ``positions`` (e.g. log10 of
    parameters per width), each arm weighing once whatever its runs."""
    x = np.array(list(positions.values()), dtype=float)
    if len(x) < 2 or np.ptp(x) == 0:
        raise ValueError("slope: needs two or more arms at different positions")
    centred = x - x.mean()
    return contrast(panel, dict(zip(positions, centred / (centred @ centred))))


@dataclass(frozen=True)
class Ratio:
    """``numerator / denominator`` of two contrasts, with Fieller's interval (``ci`` NaN when the
    denominator's interval holds zero: the ratio is then unbounded)."""

    estimate: float
    ci_low: float
    ci_high: float
    confidence: float = CONFIDENCE
    notes: list[str] = field(default_factory=list)
    at_confidence: Callable[[float], Ratio] | None = field(default=None, compare=False, repr=False)
    """The same ratio's interval at another level (a multiplicity adjustment asks for a wider one)."""

    def at(self, confidence: float) -> Ratio:
        if math.isclose(confidence, self.confidence) or self.at_confidence is None:
            return self
        return self.at_confidence(confidence)


def fieller(panel: Panel, numerator: Mapping[str, float], denominator: Mapping[str, float],
            confidence: float = CONFIDENCE) -> Ratio:
    """Fieller's interval for the ratio of two contrasts: every ``m`` whose contrast
    ``numerator - m x denominator`` is not rejected at ``1 - confidence`` (two-sided), found by
    widening until the test rejects and refined by bisection through :func:`contrast`, so the same
    variance rules apply. ``Ratio.at`` gives the interval at another level."""
    ratio = _fieller(panel, numerator, denominator, confidence)
    return replace(ratio, at_confidence=lambda level: fieller(panel, numerator, denominator, level))


def _fieller(panel: Panel, numerator: Mapping[str, float], denominator: Mapping[str, float],
             confidence: float) -> Ratio:
    num, den = contrast(panel, numerator), contrast(panel, denominator)
    point = num.estimate / den.estimate if den.estimate else math.nan
    lo_den, hi_den = den.interval(confidence)
    if not (num.measured and den.measured) or lo_den <= 0 <= hi_den:
        return Ratio(point, math.nan, math.nan, confidence)
    if num.se == 0 and den.se == 0:  # no noise at all: the ratio is known
        return Ratio(point, point, point, confidence)
    tolerance = 1e-12 * max(1.0, float(np.abs(panel.values).max()))

    def accepted(m: float) -> bool:
        combined = {arm: numerator.get(arm, 0.0) - m * denominator.get(arm, 0.0) for arm in {*numerator, *denominator}}
        low, high = contrast(panel, combined).interval(confidence)
        return low <= tolerance and high >= -tolerance

    def edge(inside: float, outside: float) -> float:
        for _ in range(60):
            middle = (inside + outside) / 2
            inside, outside = (middle, outside) if accepted(middle) else (inside, middle)
        return (inside + outside) / 2

    def rejected_beyond(direction: float) -> float:
        """A point past the set's end on that side: the span doubles until the test rejects (it
        does, since the denominator's interval excludes zero: Fieller's set is then bounded)."""
        span = max(1.0, abs(point))
        while accepted(point + direction * span) and span < 1e300:
            span *= 2
        return point + direction * span

    if not accepted(point):
        return Ratio(point, math.nan, math.nan, confidence)
    return Ratio(point, edge(point, rejected_beyond(-1.0)), edge(point, rejected_beyond(1.0)), confidence)


def gap_share(panel: Panel, moved: str, start: str, target: str, margin: float,
              confidence: float = EQUIVALENCE_CONFIDENCE) -> tuple[Estimate, Ratio]:
    """The share of the gap from arm ``start`` to arm ``target`` that arm ``moved`` closes,
    ``(moved - start) / (target - start)``: Fieller's interval at ``confidence`` (0.90: two one-sided
    tests at 5 % against a margin), and an Estimate of the share whose standard error is that of the
    test at the ``margin`` (``moved - start - margin (target - start)``) over the gap's size, the
    delta method where the test decides."""
    numerator, denominator = {moved: 1.0, start: -1.0}, {target: 1.0, start: -1.0}
    ratio = fieller(panel, numerator, denominator, confidence)
    gap = contrast(panel, denominator)
    at_margin = contrast(panel, {moved: 1.0, start: margin - 1.0, target: -margin})
    scale = abs(gap.estimate) if gap.estimate else math.nan
    share = Estimate(ratio.estimate, at_margin.se / scale, at_margin.dof, at_margin.seed_se / scale,
                     at_margin.unit_se / scale, at_margin.covers, unmeasured=at_margin.unmeasured or gap.unmeasured,
                     statistic=panel.statistic)
    return share, ratio
