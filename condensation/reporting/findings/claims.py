"""The paper's claims, each tested as the paper states it, on what a run measured.

Every piece of evidence is an :class:`~condensation.reporting.statistics.panel.Estimate` over the
training runs and the units they were measured on (text sequences, test items), each noise counted
once; how a claim's pieces and statistics combine, and the multiplicity that follows, is stated with
the claim (:mod:`condensation.reporting.statistics.decisions`). The condensation claims are decided
on the deeper layers' mean cosine *and* on the paper's Spearman rho (Kendall tau shown beside it):
a claim takes a verdict only when both give it, and otherwise "depends on the statistic".

- size (Figs. 2, S1): the slope of condensation over log10 parameters across a family's sizes; a
  family's first text decides, its other texts are robustness checks (the same models again);
  families that do not compare sizes are listed, not counted;
- distillation (Fig. 3): an equivalence claim. The paper says distilled students stay about as
  condensed as students trained from scratch: agrees when the share of the CE-to-teacher gap that
  distillation closes is shown below a margin fixed in advance (:data:`DISTILLATION_MARGIN`),
  disagrees when it is shown above; the teacher must be replicated (its own seed per student);
- initialisation (Fig. 4, pairs; and the series of checkpoints): the model at initialisation
  against the trained one, any piece agreeing and none disagreeing (Holm over the pieces);
- dispersion lowers condensation (Fig. 6): dispersion against CE at each study's last checkpoint on
  text no run trained on, collapsed runs counted in the verdict line;
- dispersion improves scores (Tables 2, 4): dispersion against CE on the tasks fixed before the
  compared rows were seen, a paired t over seeds with the items' main effect;
- beyond the paper: lower condensation goes with higher scores (:mod:`.prediction`), and the
  dispersion loss reaches CE's final validation loss in fewer tokens (:mod:`.tokens`).

Replicates are rows with the same label: one model trained (or initialised) with another seed. A
model in ``drawn`` is one draw of a training procedure (trained or initialised by this workflow, or
a published run of a suite of seeds such as PolyPythia), so one run of it leaves its training noise
unmeasured; any other model (a published checkpoint) is one given object, a fixed reference.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import pandas as pd

from condensation.lenses import BY_NAME, LENS_NAMES, LENSES, OUTLIER_DIMENSIONS, Lens
from condensation.reporting.findings.noise_sources import noise_source_line
from condensation.reporting.findings.prediction import matched_settings_note, prediction_pieces
from condensation.reporting.findings.tokens import STATISTIC as TOKENS_STATISTIC
from condensation.reporting.findings.tokens import tokens_pieces
from condensation.reporting.statistics.decisions import (
    ANY,
    Decision,
    EvidencePiece,
    Verdict,
    decide,
    over_statistics,
)
from condensation.reporting.statistics.panel import (
    Estimate,
    difference,
    gap_share,
    slope,
)
from condensation.reporting.tables.profiles import STATISTICS, Profiles

DECIDING_STATISTICS = ("last_half", "spearman_rho")
"""The statistics every condensation claim is decided on: the deeper layers' mean cosine (the size
of the effect) and the paper's Spearman rho (the trend with depth); Kendall tau is shown beside rho."""

DISTILLATION_MARGIN = 0.25
"""The share of the CE-to-teacher gap below which distillation counts as not removing condensation,
fixed before any data: a distilled student that closes less than a quarter of the way to its
teacher's condensation stays, in the paper's words, about as condensed as one trained from scratch."""

ONE_BASE_MODEL = ("mid-training runs all start from one pre-trained model: their intervals cover the mid-training "
                  "seeds, not that model's own pre-training (a rerun that pre-trains it again may move beyond them)")
"""The caveat of a comparison of mid-training runs from one base model (Table 2 always: its rows are per model)."""

COLLAPSED = 0.99
"""A run whose deeper layers' mean cosine reaches this has collapsed (its tokens share one direction)."""


@dataclass(frozen=True)
class Design:
    """What the config says about the models behind the tables."""

    seeded: frozenset[str] = frozenset()
    """Models trained or initialised here (one run of one leaves its training noise unmeasured)."""
    uncounted: frozenset[str] = frozenset()
    """Families whose models differ in more than size (``compares_size: false``)."""
    families: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """Family -> its datasets in config order; the first is the family's primary text."""
    series_groups: Mapping[str, str] = field(default_factory=dict)
    """Series -> the group read together (the runs of one family pre-trained here)."""
    seeded_series: frozenset[str] = frozenset()
    pooled: Mapping[str, Sequence[str]] = field(default_factory=dict)
    """A study's effects with its base models pooled (a label's pre-training runs) -> the
    per-model effects it replaces in the dispersion verdict (they stay on the page, not counted)."""
    matched: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Study -> the training settings all its arms share (its ``train`` section), for the page."""

    @classmethod
    def from_params(cls, params: Mapping[str, Any]) -> Design:
        """From the findings rule's ``design`` parameter (``rules/functions/figures.smk``)."""
        return cls(seeded=frozenset(params["seeded_models"]), uncounted=frozenset(params["uncounted_families"]),
                   families=dict(params["families"]), series_groups=dict(params["series_groups"]),
                   seeded_series=frozenset(params["seeded_series"]),
                   pooled={name: tuple(members) for name, members in params["pooled"].items()},
                   matched=dict(params.get("matched", {})))


def _fmt(value: float, digits: int = 3) -> str:
    return "nan" if value is None or not math.isfinite(value) else f"{value:+.{digits}f}"


def describe(result: Estimate, digits: int = 3, per: str = "seed") -> str:
    """"+0.120 [+0.080, +0.160] (95 %, over seeds and sequences)" with the same-seed values (the
    same-``per`` values: "base model" for mid-training pooled over base models)."""
    if not result.measured:
        return _fmt(result.estimate, digits)
    low, high = result.interval()
    text = f"{_fmt(result.estimate, digits)} [{_fmt(low, digits)}, {_fmt(high, digits)}] (95 %, over {result.covers})"
    if len(result.per_seed) > 1:
        text += f"; per {per} " + ", ".join(_fmt(v, digits) for v in result.per_seed)
    return text


def _means(profiles: Profiles, statistic: str) -> str:
    """Each row's value of ``statistic`` (a key of STATISTICS or a lens), "0.312 / 0.298"."""
    if statistic in STATISTICS:
        compute = STATISTICS[statistic].compute
        values = [float(compute(layers.mean(axis=0, keepdims=True))[0]) for layers in profiles.layers]
    else:
        index = LENS_NAMES.index(statistic)
        values = [float(v[index]) for v in profiles.lens_values]
    return " / ".join(f"{v:.3f}" for v in values)


def _title(statistic: str) -> str:
    return (STATISTICS[statistic].title if statistic in STATISTICS
            else next(lens.title for lens in LENSES if lens.name == statistic))


# --------------------------------------------------------------------------------------------
# Size
# --------------------------------------------------------------------------------------------


def size_piece(name: str, profiles: Profiles, design: Design, statistic: str, direction: int) -> EvidencePiece | None:
    """The slope of ``statistic`` over log10(parameters) across the sizes of one family on one
    text (replicates: rows with the same label, none paired across sizes)."""
    rows = profiles.rows.drop_duplicates("model")
    profiles = profiles.subset(profiles.rows.index.isin(rows.index))
    labels = list(dict.fromkeys(rows["label"]))
    if len(labels) < 2:
        return None
    positions = {label: math.log10(float(rows.loc[rows["label"] == label, "num_parameters"].iloc[0]))
                 for label in labels}
    fixed = [label for label in labels if not rows.loc[rows["label"] == label, "model"].isin(design.seeded).any()]
    panel = profiles.panel(statistic, list(rows["label"]), list(rows["model"]), fixed)
    if np.ptp(list(positions.values())) == 0:
        return None
    result = slope(panel, positions)
    sizes = "; ".join(f"{label} {_means(profiles.subset(rows['label'].to_numpy() == label), statistic)}"
                      for label in labels)
    counts = "/".join(str(int((rows["label"] == label).sum())) for label in labels)
    text = (f"{name} ({len(labels)} sizes, runs per size {counts}; {_title(statistic)} {sizes}): "
            f"slope per decade of parameters {describe(result)}")
    return EvidencePiece(name, text, result, direction)


def size_claim(trends: Mapping[str, Profiles], design: Design, statistic: str = "last_half",
               direction: int = -1) -> Decision:
    """A larger (or wider) model condenses less, on one statistic: the family's primary text
    decides, its other texts are robustness checks; families that do not compare sizes are left out."""
    pieces, robustness = [], []
    for family, datasets in design.families.items():
        if family in design.uncounted:
            continue
        for index, dataset in enumerate(datasets):
            table = trends.get(f"{family}_{dataset}")
            found = None if table is None else size_piece(f"{family} on {dataset}", table, design, statistic, direction)
            if found is not None:
                (pieces if index == 0 else robustness).append(found)
    return decide(pieces, ANY, _title(statistic), robustness=robustness)


# --------------------------------------------------------------------------------------------
# Pairs: distillation, initialisation
# --------------------------------------------------------------------------------------------


def pair_kind(labels: Sequence[str]) -> str | None:
    return "distill" if "distill" in labels[1].lower() else "init" if "init" in labels[0].lower() else None


def _pair_panel(profiles: Profiles, members: Mapping[str, pd.Series], design: Design, statistic: str):
    """Rows of a pair table as arms (first / second / reference), replicate i of every arm the
    same seed; a given (not drawn) model listed several times counts once, as a fixed arm."""
    keep, arms, seeds, fixed = [], [], [], []
    for arm, mask in members.items():
        rows = profiles.rows[mask.to_numpy()]
        given = not rows["model"].isin(design.seeded).any()
        if given or rows["model"].nunique() == 1:
            rows = rows.drop_duplicates("model")
        if given:
            fixed.append(arm)
        for position, index in enumerate(rows.index):
            keep.append(index)
            arms.append(arm)
            seeds.append(position)
    mask = np.zeros(len(profiles.rows), bool)
    order = np.argsort(keep)
    mask[keep] = True
    subset = profiles.subset(mask)
    return subset.panel(statistic, [arms[i] for i in order], [seeds[i] for i in order], fixed)


def pair_pieces(pairs: Mapping[str, tuple[Sequence[str], Profiles]], design: Design,
                statistic: str, orientation: int = 1) -> tuple[list[EvidencePiece], list[EvidencePiece]]:
    """The distillation pieces (equivalence) and the initialisation pieces (directional) of every
    pair, per (first label, second label) combination. ``orientation`` -1 reads a lens that falls
    as condensation rises."""
    distill, init = [], []
    for name, (labels, profiles) in pairs.items():
        kind = pair_kind(labels)
        rows = profiles.rows
        first, second, reference = rows[rows["member"] == 0], rows[rows["member"] == 1], rows[rows["member"] == 2]
        combos = list(dict.fromkeys(zip(first["label"], second["label"])))
        for label_a, label_b in combos:
            in_a = (rows["member"] == 0) & (rows["label"] == label_a)
            in_b = (rows["member"] == 1) & (rows["label"] == label_b)
            arm_a, arm_b = (label_a, label_b) if label_a != label_b else (labels[0], labels[1])
            members = {arm_a: in_a, arm_b: in_b}
            title = f"{name}: {label_a} vs {label_b}"
            if kind == "distill" and not reference.empty:
                arm_r = labels[2] if len(labels) > 2 else "reference"
                members[arm_r] = rows["member"] == 2
                distill.append(_distillation_piece(title, (arm_a, arm_b, arm_r), profiles, members, design, statistic))
            elif kind == "init":
                panel = _pair_panel(profiles, members, design, statistic)
                result = difference(panel, arm_a, arm_b)
                text = (f"{title}: {_means(profiles.subset(in_a), statistic)} vs "
                        f"{_means(profiles.subset(in_b), statistic)}"
                        f" ({_title(statistic)}); {labels[0]} - {labels[1]} {describe(result)}")
                init.append(EvidencePiece(title, text, result, orientation))
    return distill, init


def _distillation_piece(title: str, arms: Sequence[str], profiles: Profiles, members: Mapping[str, pd.Series],
                        design: Design, statistic: str) -> EvidencePiece:
    """The share of the gap from the CE student (``arms[0]``) to the teacher (``arms[2]``) that the
    distilled student (``arms[1]``) closes, tested against :data:`DISTILLATION_MARGIN` at 90 %
    two-sided (two one-sided tests at 5 %). A ratio: the same whatever the statistic's sign."""
    panel = _pair_panel(profiles, members, design, statistic)
    margin = DISTILLATION_MARGIN
    ce, distilled, teacher = arms
    share, ratio = gap_share(panel, distilled, ce, teacher, margin)
    moved, gap = difference(panel, distilled, ce), difference(panel, teacher, ce)
    text = (f"{title}: {distilled} - {ce} {describe(moved)}; {teacher} - {ce} {describe(gap)}; "
            f"share of the gap closed {_pct(ratio.estimate)} [{_pct(ratio.ci_low)}, {_pct(ratio.ci_high)}] "
            f"(90 %, Fieller; agrees below {margin:.0%})")
    return EvidencePiece(title, text, share, margin=margin, ratio=ratio)


def _pct(value: float) -> str:
    return "unbounded" if not math.isfinite(value) else f"{value:.0%}"


# --------------------------------------------------------------------------------------------
# Series: first against last checkpoint of each run
# --------------------------------------------------------------------------------------------


def series_pieces(series: Mapping[str, Profiles], design: Design, statistic: str,
                  orientation: int = 1) -> list[EvidencePiece]:
    """Each group of series (the runs of one family pre-trained here): the first checkpoint
    (initialisation) against the last, paired by run."""
    groups: dict[str, list[str]] = {}
    for name in series:
        groups.setdefault(design.series_groups.get(name, name), []).append(name)
    pieces = []
    for group, names in groups.items():
        layers, lens_values, lens_jack, arms, seeds, rows = [], [], [], [], [], []
        for name in names:
            table = series[name]
            for arm, index in (("first checkpoint", 0), ("last checkpoint", len(table.rows) - 1)):
                layers.append(table.layers[index])
                lens_values.append(table.lens_values[index])
                lens_jack.append(table.lens_jackknife[index])
                arms.append(arm)
                seeds.append(name)
                rows.append({"series": name, "checkpoint": table.rows["checkpoint"].iloc[index]})
        combined = Profiles(pd.DataFrame(rows), layers, lens_values, lens_jack)
        fixed = [] if any(n in design.seeded_series for n in names) else ["first checkpoint", "last checkpoint"]
        panel = combined.panel(statistic, arms, seeds, fixed)
        result = difference(panel, "first checkpoint", "last checkpoint")
        firsts, lasts = (combined.subset(np.array(arms) == f"{which} checkpoint") for which in ("first", "last"))
        text = (f"{group} ({len(names)} run{'s' if len(names) > 1 else ''}): {firsts.rows['checkpoint'].iloc[0]} "
                f"{_means(firsts, statistic)} -> {lasts.rows['checkpoint'].iloc[0]} {_means(lasts, statistic)} "
                f"({_title(statistic)}), first - last {describe(result)}{_peaks(series, names, statistic)}")
        pieces.append(EvidencePiece(group, text, result, orientation))
    return pieces


def _peaks(series: Mapping[str, Profiles], names: Sequence[str], statistic: str) -> str:
    """A checkpoint between the first and the last where the statistic peaks, per run."""
    if statistic not in STATISTICS:
        return ""
    compute = STATISTICS[statistic].compute
    peaks = []
    for name in names:
        values = [float(compute(layers.mean(axis=0, keepdims=True))[0]) for layers in series[name].layers]
        peak = int(np.argmax(values))
        if peak not in (0, len(values) - 1) and values[peak] > values[-1]:
            checkpoint = series[name].rows["checkpoint"].iloc[peak]
            peaks.append(f"{values[peak]:.3f} at {checkpoint} (then {values[-1]:.3f} at the end)")
    return "; peak " + ", ".join(peaks) if peaks else ""


# --------------------------------------------------------------------------------------------
# Studies: dispersion against CE
# --------------------------------------------------------------------------------------------


def estimate_from(row: Mapping, prefix: str = "", suffix: str = "", covers: str = "") -> Estimate:
    """An Estimate from a table row's columns (``difference``/``diff``, ``se``, ``dof``,
    ``seed_se``, ``unit_se``, ``per_seed``), as the tables wrote it."""
    def get(name: str) -> float:
        value = row.get(f"{prefix}{name}{suffix}")
        return float(value) if value is not None and pd.notna(value) else math.nan

    estimate = get("diff") if f"{prefix}diff{suffix}" in row else get("difference")
    seeds = row.get(f"{prefix}per_seed{suffix}")
    per_seed = tuple(float(v) for v in str(seeds).split(";")) if isinstance(seeds, str) and seeds else ()
    se = get("se")
    seeds = get("n_seeds")
    unmeasured = ("" if math.isfinite(se)
                  else f"{int(seeds) if math.isfinite(seeds) else 1} seed(s): training noise unmeasured")
    saturated = row.get(f"{prefix}saturated{suffix}")
    return Estimate(estimate, se, get("dof"), get("seed_se"), get("unit_se"),
                    str(row.get(f"{prefix}covers{suffix}", covers) or covers), per_seed, unmeasured,
                    saturated=saturated if isinstance(saturated, str) else "")


def dispersion_condensation_pieces(effects: Mapping[str, pd.DataFrame], trajectories: Mapping[str, pd.DataFrame],
                                   statistic: str, method: str = "dispersion",
                                   pooled: Sequence[str] = ()) -> list[EvidencePiece]:
    """Dispersion against CE at the last step each study measured (its effects table), with the
    runs that collapsed named; the effects named in ``pooled`` replicate base models, not seeds."""
    pieces = []
    for name, table in effects.items():
        rows = table[(table["method"] == method) & (table["metric"] == statistic)]
        if rows.empty:
            continue
        last = rows.loc[rows["step"].idxmax()]
        replicate = "base model" if name in pooled else "seed"
        result = estimate_from(last.to_dict(), covers=f"{replicate}s and sequences")
        text = (f"{name}, step {int(last['step'])}: {method} {last['mean']:.3f} vs CE {last['reference_mean']:.3f} "
                f"over {int(last['n_seeds'])} {replicate}s; {method} - CE {describe(result, per=replicate)}")
        collapsed = _collapsed(trajectories.get(name), int(last["step"]), (method, "ce"))
        notes = ((f"{name}: collapsed at step {int(last['step'])} (deeper-layer cosine >= {COLLAPSED}): "
                  f"{collapsed}",) if collapsed else ())
        shown = text + (f"; collapsed: {collapsed}" if collapsed else "")
        pieces.append(EvidencePiece(name, shown, result, -1, notes=notes))
    return pieces


def _collapsed(trajectory: pd.DataFrame | None, step: int, methods: Sequence[str]) -> str:
    """The runs of ``methods`` whose deeper-layer cosine reached :data:`COLLAPSED` at ``step``."""
    if trajectory is None or "last_half" not in trajectory:
        return ""
    at_step = trajectory[(trajectory["step"] == step) & trajectory["method"].isin(methods)]
    parts = []
    for method in methods:
        runs = at_step[at_step["method"] == method]
        gone = runs[runs["last_half"] >= COLLAPSED]
        if len(gone):
            parts.append(f"{method} {len(gone)} of {len(runs)} runs "
                         f"(seed {', '.join(str(int(s)) for s in gone['seed'])})")
    return "; ".join(parts)


def score_pieces(tables: Mapping[str, pd.DataFrame], method: str = "dispersion",
                 baseline: str = "ce") -> list[EvidencePiece]:
    """Dispersion against CE in each score table, per model: the table's seed-and-item test."""
    pieces = []
    for name, table in tables.items():
        for row in table[table["method"] == method].to_dict("records"):
            result = estimate_from(row, suffix=f"_vs_{baseline}", covers="seeds and test items")
            text = (f"{name}, {row['model']}: {method} - CE {describe(result, 2)} points over "
                    f"{int(row['n_seeds'])} seeds "
                    f"and the counted tasks' items")
            pieces.append(EvidencePiece(f"{name}, {row['model']}", text, result, +1))
    return pieces


# --------------------------------------------------------------------------------------------
# All claims
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Evidence:
    """Everything the claims read: profiles of the trend, pair and series tables, the studies'
    effects and trajectories, and the score tables."""

    trends: Mapping[str, Profiles] = field(default_factory=dict)
    pairs: Mapping[str, tuple[Sequence[str], Profiles]] = field(default_factory=dict)
    series: Mapping[str, Profiles] = field(default_factory=dict)
    effects: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    trajectories: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    scores: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    similarity: pd.DataFrame | None = None
    """The comparison tables of :mod:`condensation.similarity` (layer profile and CKA against a wider model)."""
    similarity_kinds: Mapping[str, str] = field(default_factory=dict)
    """Comparison -> "pair" (distilled students against their teacher) or "study" (runs against wider models)."""
    run_scores: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    """Study model ("midtrain, toy-mlp256") -> each trained run's scored step and score
    (:func:`condensation.reporting.findings.prediction.read_run_scores`)."""
    losses: Mapping[str, pd.DataFrame] = field(default_factory=dict)
    """Study model -> its runs' losses (``results/<study>/<model>/losses.csv``: the validation loss
    at each evaluation, with the tokens seen), for the tokens claim
    (:mod:`condensation.reporting.findings.tokens`)."""


SIZE = "A larger or wider model condenses less (Figs. 2, S1)"
DISTILLATION = "Distillation does not remove condensation (Fig. 3)"
INIT_PAIRS = "Condensation is highest at initialisation and falls with training (pairs)"
INIT_SERIES = "Condensation is highest at initialisation and falls over pre-training (Fig. 4)"
DISPERSION = "The dispersion loss lowers condensation (Fig. 6)"
SCORES = "The dispersion loss improves downstream scores (Tables 2, 4)"
PREDICTS = "Lower condensation goes with higher scores (across runs; beyond the paper)"
TOKENS = "The dispersion loss reaches the CE model's loss in fewer tokens (beyond the paper)"
CLAIM_KEYS = {SIZE: "size", DISTILLATION: "distillation", INIT_PAIRS: "initialisation", INIT_SERIES: "pretraining",
              DISPERSION: "dispersion", SCORES: "scores", PREDICTS: "prediction", TOKENS: "tokens"}
"""Each claim's short name in results/metrics/summary.json (what `dvc metrics` and `dvc exp show` show)."""


def all_claims(evidence: Evidence, design: Design) -> list[Verdict]:
    """Each claim, on the deeper-layer cosine and Spearman rho (scores: accuracy)."""
    by_claim: dict[str, list[Decision]] = {
        claim: [] for claim in (SIZE, DISTILLATION, INIT_PAIRS, INIT_SERIES, DISPERSION)}
    notes: dict[str, list[str]] = {claim: [] for claim in by_claim}
    for statistic in DECIDING_STATISTICS:
        title = STATISTICS[statistic].title
        by_claim[SIZE].append(size_claim(evidence.trends, design, statistic))
        distill, init = pair_pieces(evidence.pairs, design, statistic)
        by_claim[DISTILLATION].append(decide(distill, ANY, title))  # one pair: nothing to adjust
        by_claim[INIT_PAIRS].append(decide(init, ANY, title))
        by_claim[INIT_SERIES].append(decide(series_pieces(evidence.series, design, statistic), ANY, title))
        dispersion = dispersion_condensation_pieces(evidence.effects, evidence.trajectories, statistic,
                                                    pooled=list(design.pooled))
        pooled_into = {member: name for name, members in design.pooled.items() for member in members}
        by_claim[DISPERSION].append(decide([p for p in dispersion if p.name not in pooled_into], ANY, title))
        if statistic == "last_half":
            notes[DISPERSION] += [note for piece in dispersion for note in piece.notes]
            notes[DISPERSION] += [f"shown, not counted (one base model of {pooled_into[piece.name]}): {piece.text}"
                                  for piece in dispersion if piece.name in pooled_into]
    uncounted = [f"{family}: not counted (its models differ in more than size: compares_size is false)"
                 for family in design.families if family in design.uncounted]
    notes[SIZE] += uncounted + _noise_source_notes(evidence, design)
    notes[DISTILLATION] += _similarity_notes(evidence, "pair")
    notes[DISPERSION] += _similarity_notes(evidence, "study")
    notes[DISPERSION] += _base_model_notes(evidence, design)
    verdicts = [over_statistics(claim, decisions, notes[claim]) for claim, decisions in by_claim.items()]
    scores = score_pieces(evidence.scores)
    verdicts.append(over_statistics(SCORES, [decide(scores, ANY, "accuracy")],
                                    [ONE_BASE_MODEL] if any(p.name.startswith("table2") for p in scores) else []))
    if evidence.run_scores:
        verdicts.append(prediction_claim(evidence, design))
    if evidence.losses:
        verdicts.append(tokens_claim(evidence))
    return verdicts


def tokens_claim(evidence: Evidence) -> Verdict:
    """"The dispersion loss reaches the CE model's loss in fewer tokens", per study model
    (:mod:`condensation.reporting.findings.tokens`): Holm over the models, as every claim."""
    pieces, notes = tokens_pieces(evidence.losses)
    return over_statistics(TOKENS, [decide(pieces, ANY, TOKENS_STATISTIC)], notes)


def prediction_claim(evidence: Evidence, design: Design) -> Verdict:
    """"Lower condensation goes with higher scores", over every scored run
    (:mod:`condensation.reporting.findings.prediction`), on each deciding statistic."""
    decisions, missing = [], {}
    for statistic in DECIDING_STATISTICS:
        title = STATISTICS[statistic].title
        pieces, left_out = prediction_pieces(evidence.trajectories, evidence.run_scores, statistic, title)
        decisions.append(decide(pieces, ANY, title))
        missing |= dict.fromkeys(left_out)
    notes = [f"left out, its scored step unmeasured: {line}" for line in missing]
    matched = matched_settings_note(design.matched, evidence.run_scores)
    return over_statistics(PREDICTS, decisions, [*notes, *([matched] if matched else [])])


def _base_model_notes(evidence: Evidence, design: Design) -> list[str]:
    """What the mid-training intervals cover: one base model's runs cover its mid-training seeds
    only; a pooled study's cover its base models' pre-training too."""
    pooled = set(design.pooled) | {member for members in design.pooled.values() for member in members}
    notes = [f"{name}: the base model is a replicate ({len(design.pooled[name])} pre-training runs of one model, "
             "each with its mid-training seeds): its interval covers their pre-training too"
             for name in design.pooled if name in evidence.effects]
    if any(name.startswith("midtrain") and name not in pooled for name in evidence.effects):
        notes.append(ONE_BASE_MODEL)
    return notes


def _noise_source_notes(evidence: Evidence, design: Design) -> list[str]:
    """Each family that does not compare sizes, on its first text: the spread of each label's runs
    (:mod:`condensation.reporting.findings.noise_sources`), where a label has two or more."""
    lines = []
    for family, datasets in design.families.items():
        table = evidence.trends.get(f"{family}_{datasets[0]}") if family in design.uncounted else None
        line = None if table is None else noise_source_line(family, table)
        if line is not None:
            lines.append(line)
    return lines


def _similarity_notes(evidence: Evidence, kind: str) -> list[str]:
    """"Recovers the patterns of larger models": how close each group's layer profile and CKA come
    to a wider model's (condensation.similarity), each calibrated score beside its raw one, and the
    call on "recovers" read from the calibrated CKA against its token-shuffle null
    (:func:`condensation.similarity.recovery`). Shown beside the claim, not counted in it: the claims
    are about condensation's level, not about likeness to another model."""
    if evidence.similarity is None or evidence.similarity.empty:
        return []
    # deferred: condensation.similarity measures models (torch); the findings job of a config
    # without comparisons never needs it, see test_code_layout
    from condensation.similarity import summarise  # noqa: PLC0415

    chosen = [name for name, found in evidence.similarity_kinds.items() if found == kind]
    table = evidence.similarity[evidence.similarity["comparison"].isin(chosen)]
    return ([f"recovers the wider model's pattern? (calibrated against a permutation null; shown, not counted): {line}"
             for line in summarise(table)] if len(table) else [])


def claims_under_lenses(evidence: Evidence, design: Design) -> dict[str, list[Verdict]]:
    """The size, pair and series claims again under each lens (:mod:`condensation.lenses`), its
    jackknife over groups of sequences in place of the sequences; a lens that falls as condensation
    rises (IsoScore*, effective rank) reads with the predicted signs flipped. A lens with no
    predicted sign (the layer angle, the norms' lenses) is read two-sided in a fixed orientation:
    "agrees" there means it rises with size, or falls with training (the page words it so). The
    dispersion claims read the study tables, which hold the cosine statistics only."""
    under = {}
    for lens in LENSES:
        if not _has_lens(evidence, lens):
            continue
        sign = lens.condensed or 1
        size_direction = -lens.condensed or 1
        distill, init = pair_pieces(evidence.pairs, design, lens.name, orientation=sign)  # a share needs no sign
        under[lens.title] = [
            over_statistics(SIZE, [size_claim(evidence.trends, design, lens.name, size_direction)]),
            over_statistics(DISTILLATION, [decide(distill, ANY, lens.title)]),
            over_statistics(INIT_PAIRS, [decide(init, ANY, lens.title)]),
            over_statistics(INIT_SERIES,
                            [decide(series_pieces(evidence.series, design, lens.name, sign), ANY, lens.title)]),
        ]
    return under


OUTLIER_FREE = BY_NAME["cosine_without_outliers"]


def with_outlier_robustness(verdicts: Sequence[Verdict],
                            under_lenses: Mapping[str, Sequence[Verdict]]) -> list[Verdict]:
    """Each claim that the lenses read again, with a robustness line: its verdict on the
    within-sequence cosine without the outlier dimensions (``lenses.OUTLIER_DIMENSIONS`` of largest
    variance removed). A few coordinates can carry most of a cosine (arXiv 2603.00029);
    this line says whether the claim survives their removal. Shown, not counted."""
    found = {v.claim: v for v in under_lenses.get(OUTLIER_FREE.title, [])}
    if not found:
        return list(verdicts)
    lines = {claim: (f"robustness: without the {OUTLIER_DIMENSIONS} outlier dimensions (the within-sequence cosine "
                     f"of the sampled tokens, the coordinates of largest variance removed), **{v.verdict}**"
                     + (f" ({v.reason})" if v.reason else "")) for claim, v in found.items()}
    return [replace(v, notes=[*v.notes, lines[v.claim]]) if v.claim in lines else v for v in verdicts]


def _has_lens(evidence: Evidence, lens: Lens) -> bool:
    tables = [*evidence.trends.values(), *(p for _, p in evidence.pairs.values()), *evidence.series.values()]
    return bool(tables) and all(all(v is not None for v in table.lens_values) for table in tables)

