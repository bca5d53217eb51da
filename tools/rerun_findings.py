"""Rerun the pipeline with seed sets that share no run, and compare the findings' estimates.

Set i runs with ``seed_offset = 1000 x i`` (i = 0 .. --sets - 1): every pre-training,
initialisation and study seed moves by the offset, texts and test items stay (config.schema.yaml,
``seed_offset``). Before anything runs, the seeds each set draws are computed the way the workflow
computes them (``condensation.config.plan.drawn_seeds``, which rules/models.smk and
rules/training.smk call) and the sets must share none. Each set runs in its own copy of the
repository's files under --workdir (``offset-<N>``, first on PYTHONPATH), so editing the checkout
meanwhile changes no run; a second call refreshes the copies and Snakemake reruns what the changes
shape.

Each set writes ``results/metrics/findings.json``. Every piece of evidence measured in two sets
(claim, statistic, piece; also under each lens) is compared by

    z = (a - b) / sqrt(se_a^2 + se_b^2)

and, since a rerun redraws the training runs but measures them on the same sequences and items
(whose main effect cancels in a - b), also over the seed part of the error alone,
``z_seeds = (a - b) / sqrt(seed_se_a^2 + seed_se_b^2)``: the sharper test of what a rerun redraws.
The intervals are t intervals with few degrees of freedom (two for three seeds), under which z is
not normal; each z is read at the t distribution of its Welch-Satterthwaite degrees of freedom and
reported also as the normal score with the same tail probability ("calibrated"). Over all
comparisons: the share within 1.96 (raw), the coverage at the t quantile (95 % expected), the mean
calibrated z^2 (1 expected) and the largest calibrated |z| against its Bonferroni bound.

Exit status 1 when, for either z, the largest |z| exceeds its Bonferroni bound at --alpha or the
coverage is below 95 % by more than a one-sided binomial test at --alpha allows (the comparisons
are not independent: pairs share a set, statistics share runs; a low coverage is a flag to read),
or when nothing could be compared; 0 otherwise. Verdicts that moved are printed, not exited on.
Pieces with se NaN (unmeasured), saturated (one value for every run) or no seed part (nothing a rerun redraws) are
listed, not compared. The report is printed and written to --workdir as rerun-report.md and .json.

    python tools/rerun_findings.py                       # 3 sets, config.yaml + configs/rerun-reduced.yaml
    python tools/rerun_findings.py --configfile config.yaml --sets 4
    python tools/rerun_findings.py --compare-only        # compare the finished sets again
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import yaml
from scipy import stats

from condensation.runtime.checkout import DEBS, copy_checkout, source_files

ROOT = Path(__file__).resolve().parents[1]
SEED_STRIDE = 1000
"""Set i's seed_offset is SEED_STRIDE x i: the sets share no run while a config's seeds span less."""
DEFAULT_CONFIGFILES = ("config.yaml", "configs/rerun-reduced.yaml")
FINDINGS = Path("results/metrics/findings.json")
SET_RECORD = "rerun-set.json"
"""In a set's directory: how its last run was made (configs, command) and its wall time, for the report."""
NORMAL_95 = float(stats.norm.isf(0.025))

PieceKey = tuple[str, str, str, str]
"""(lens or "", claim, statistic, piece name): one piece of evidence, the same in every set."""


@dataclass(frozen=True)
class RerunSettings:
    """What a call of this script does."""

    sets: int = 3
    """Seed sets, at least 3; set i runs with seed_offset = SEED_STRIDE x i."""
    configfiles: tuple[str, ...] = DEFAULT_CONFIGFILES
    """Snakemake's --configfile for every set, merged in order (an overlay after config.yaml)."""
    workdir: Path = Path("/tmp/condensation-rerun")
    """Where each set's copy of the repository runs (``offset-<N>``) and the report goes."""
    cores: str = "all"
    """snakemake --cores of each set (the sets run one after another)."""
    alpha: float = 0.01
    """Level of the Bonferroni bound on the largest |z| and of the binomial test of the coverage."""
    compare_only: bool = False
    """Compare finished sets; run nothing."""
    snakemake_args: tuple[str, ...] = ()
    """More snakemake arguments for every set."""

    @property
    def offsets(self) -> list[int]:
        return [SEED_STRIDE * i for i in range(self.sets)]

    def directory(self, offset: int) -> Path:
        return self.workdir / f"offset-{offset}"


# --------------------------------------------------------------------------- seeds


def set_config(configfiles: Sequence[str], offset: int) -> dict[str, Any]:
    """The validated config one set runs: the files merged as Snakemake merges several
    --configfile, then ``seed_offset`` as --config sets it."""
    from snakemake.utils import update_config

    from condensation.config.validate import validate_config

    merged: dict[str, Any] = {}
    for name in configfiles:
        update_config(merged, yaml.safe_load((ROOT / name).read_text()) or {})
    merged["seed_offset"] = offset
    with contextlib.chdir(ROOT):  # the config's relative paths are the repository's
        return validate_config(merged)


def shared_seeds(configfiles: Sequence[str], offsets: Sequence[int]) -> list[str]:
    """Every seed two sets both draw, with what draws it in each; empty when the sets are disjoint."""
    from condensation.config.plan import drawn_seeds

    seeds = {offset: drawn_seeds(set_config(configfiles, offset)) for offset in offsets}
    shared = []
    for first, second in itertools.combinations(offsets, 2):
        for seed in sorted(set(seeds[first].values()) & set(seeds[second].values())):
            users = [f"{what} (offset {offset})" for offset in (first, second)
                     for what, drawn in seeds[offset].items() if drawn == seed]
            shared.append(f"seed {seed}: {', '.join(users)}")
    return shared


# --------------------------------------------------------------------------- running


UNSHARED = ("runs/eval_cache", ".snakemake/locks", ".snakemake/incomplete", ".snakemake/log", "rerun.log", SET_RECORD)
"""What a new set never takes from the first besides its training runs: lm-eval's response cache
(keyed by checkpoint path, it would answer for another seed's model), Snakemake's locks and logs,
the record."""
RUN_PLAN = "run.json"
"""A training run's plan: the folder that holds one is a run, all of it the first set's seeds."""


def start_from_first_set(first: Path, directory: Path) -> int:
    """Copy into a set that has run nothing yet the first set's outputs but its training runs (the
    folders under runs/ that hold a run.json: weights, states that would resume another seed's run),
    with their times and Snakemake's records, so Snakemake reruns only what the seeds shape: the
    runs and everything downstream of them, while the sampled texts, the tasks, the tokenizer, the
    packed blocks and the measurements of given models (hours at the paper's scale) are made once.
    Returns the files copied."""
    sources = set(source_files(ROOT))
    runs = {plan.parent.relative_to(first).as_posix() + "/" for plan in (first / "runs").rglob(RUN_PLAN)}
    left_out = (*runs, *(f"{name}/" for name in UNSHARED), DEBS.as_posix())
    copied = 0
    for path in sorted(first.rglob("*")):
        name = path.relative_to(first).as_posix()
        if name in sources or name in UNSHARED or path.is_dir() or name.startswith(left_out):
            continue
        target = directory / name
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(path, target, follow_symlinks=False)
        copied += 1
    return copied


def run_set(settings: RerunSettings, offset: int) -> float:
    """One set in its copy of the repository; its wall time in seconds."""
    directory = settings.directory(offset)
    first = settings.directory(settings.offsets[0])
    fresh = not (directory / ".snakemake/metadata").exists()
    copy_checkout(ROOT, directory)
    if fresh and offset != settings.offsets[0] and (first / SET_RECORD).exists():
        copied = start_from_first_set(first, directory)
        print(f"[rerun] offset {offset}: {copied} outputs that no seed shapes taken from offset {settings.offsets[0]}",
              flush=True)
    # the copy's own config files; one git ignores (not copied) is read where it is
    configs = [name if (directory / name).is_file() else str(ROOT / name) for name in settings.configfiles]
    env = dict(os.environ, PYTHONPATH=str(directory))
    # targets and options first: --configfile and --config take every word after them
    command = [sys.executable, "-m", "snakemake", "--cores", settings.cores, *settings.snakemake_args,
               "--configfile", *configs, "--config", f"seed_offset={offset}"]
    print(f"[rerun] offset {offset}: {' '.join(command)} in {directory}", flush=True)
    start = time.perf_counter()
    with open(directory / "rerun.log", "a") as log:
        subprocess.run(command, cwd=directory, env=env, check=True, stdout=log, stderr=subprocess.STDOUT)
    seconds = time.perf_counter() - start
    record = {"offset": offset, "configfiles": list(settings.configfiles), "command": command,
              "seconds": round(seconds, 1)}
    (directory / SET_RECORD).write_text(json.dumps(record, indent=2) + "\n")
    return seconds


# --------------------------------------------------------------------------- reading findings.json


@dataclass(frozen=True)
class PieceReading:
    """One piece of evidence in one set's findings.json."""

    estimate: float
    se: float
    dof: float
    seed_se: float
    ci_low: float
    ci_high: float
    verdict: str
    unit_se: float = math.nan
    """The part of ``se`` from the sequences or items, the same in every set."""
    detectable: float = math.nan
    """This set's minimum detectable effect (80 % power, at Holm's level where the claim has
    several pieces), from its own seed spread."""
    margin: float = math.nan
    """An equivalence piece's margin (its estimate a share of a gap, not an effect); NaN otherwise."""
    counted: bool = True
    """Whether the piece counts towards its claim's verdict (robustness pieces do not)."""
    saturated: bool = False
    """The statistic takes one value for every run (rho 1.00): nothing to compare, whatever its se."""


@dataclass(frozen=True)
class SetFindings:
    """What the comparison reads from one set: its pieces, and the claims' and statistics' verdicts."""

    pieces: dict[PieceKey, PieceReading]
    claims: dict[str, str]
    """``[lens] claim`` -> verdict."""
    decisions: dict[str, str]
    """``[lens] claim / statistic`` -> verdict."""


def _number(value: Any) -> float:
    return math.nan if value is None else float(value)


def read_findings(path: Path) -> SetFindings:
    """A set's findings.json (condensation.reporting.findings.page.write_findings)."""
    if not path.is_file():
        raise SystemExit(f"rerun_findings: {path} is missing: that set has not finished (see its rerun.log)")
    data = json.loads(path.read_text())
    groups = [("", data["findings"])] + sorted(data.get("under_lenses", {}).items())
    pieces, claims, decisions = {}, {}, {}
    for lens, verdicts in groups:
        prefix = f"[{lens}] " if lens else ""
        for finding in verdicts:
            claims[prefix + finding["claim"]] = finding["verdict"]
            for decision in finding["decisions"]:
                decisions[f"{prefix}{finding['claim']} / {decision['statistic']}"] = decision["verdict"]
                for piece in decision["pieces"]:
                    key = (lens, finding["claim"], decision["statistic"], piece["piece"])
                    pieces[key] = PieceReading(
                        *(_number(piece[name]) for name in ("estimate", "se", "dof", "seed_se", "ci_low", "ci_high")),
                        piece["verdict"], _number(piece.get("unit_se")), _number(piece.get("detectable")),
                        _number(piece.get("margin")), bool(piece.get("counted", True)),
                        bool(piece.get("saturated", False)))
    return SetFindings(pieces, claims, decisions)


def piece_label(key: PieceKey) -> str:
    lens, claim, statistic, piece = key
    return f"{f'[{lens}] ' if lens else ''}{claim} / {statistic} / {piece}"


# --------------------------------------------------------------------------- comparing


@dataclass(frozen=True)
class Comparison:
    """One piece in two sets: the raw z's, their degrees of freedom and calibrated normal scores."""

    piece: str
    first: int
    second: int
    difference: float
    z: float
    dof: float
    z_calibrated: float
    z_seeds: float
    dof_seeds: float
    z_seeds_calibrated: float


def welch_dof(variances: Sequence[float], dofs: Sequence[float]) -> float:
    """Welch-Satterthwaite degrees of freedom of a sum of estimated variances (inf: known)."""
    denominator = sum(v * v / d for v, d in zip(variances, dofs) if math.isfinite(d))
    return sum(variances) ** 2 / denominator if denominator > 0 else math.inf


def calibrated(z: float, dof: float) -> float:
    """The normal score with the same tail probability as ``z`` under a t with ``dof``."""
    if not math.isfinite(dof):
        return z
    return math.copysign(float(stats.norm.isf(stats.t.sf(abs(z), dof))), z)


def why_not_compared(a: PieceReading, b: PieceReading) -> str:
    """Why a piece measured in two sets is not compared, or ""."""
    for reading in (a, b):
        if not math.isfinite(reading.se) or not math.isfinite(reading.estimate):
            return "unmeasured (se NaN)"
        if reading.se == 0 or reading.saturated:
            return "saturated (one value for every run)"
        if not reading.seed_se > 0:
            return "no seed part (nothing a rerun redraws)"
    return ""


def compare_piece(key: PieceKey, offsets: tuple[int, int], a: PieceReading, b: PieceReading) -> Comparison:
    difference = a.estimate - b.estimate
    dof = welch_dof([a.se**2, b.se**2], [a.dof, b.dof])
    dof_seeds = welch_dof([a.seed_se**2, b.seed_se**2], [a.dof, b.dof])
    z = difference / math.hypot(a.se, b.se)
    z_seeds = difference / math.hypot(a.seed_se, b.seed_se)
    return Comparison(piece_label(key), *offsets, difference, z, dof, calibrated(z, dof),
                      z_seeds, dof_seeds, calibrated(z_seeds, dof_seeds))


def compare_sets(findings: dict[int, SetFindings]) -> tuple[list[Comparison], list[str]]:
    """Every piece measured in two sets compared; and the pieces left out of some pair, with why."""
    compared, left_out = [], {}
    for first, second in itertools.combinations(findings, 2):
        a, b = findings[first].pieces, findings[second].pieces
        for key in a.keys() & b.keys():
            reason = why_not_compared(a[key], b[key])
            if reason:
                left_out.setdefault(piece_label(key), reason)
            else:
                compared.append(compare_piece(key, (first, second), a[key], b[key]))
    for key in set.union(*(set(f.pieces) for f in findings.values())):
        absent = [str(offset) for offset, found in findings.items() if key not in found.pieces]
        if absent:
            left_out.setdefault(piece_label(key), f"not in offset {', '.join(absent)}")
    compared.sort(key=lambda c: (c.piece, c.first, c.second))
    return compared, [f"{label}: {reason}" for label, reason in sorted(left_out.items())]


@dataclass(frozen=True)
class Check:
    """One kind of z over every comparison: the numbers the exit status reads."""

    name: str
    comparisons: int
    within_196: float
    """Share of raw |z| <= 1.96."""
    coverage: float
    """Share of calibrated |z| <= 1.96 (raw |z| within its t quantile): 95 % expected."""
    coverage_p: float
    """One-sided binomial p of a coverage this low if it were 95 %."""
    mean_square: float
    """Mean calibrated z^2: 1 expected."""
    largest: float
    largest_at: str
    bound: float
    """Bonferroni bound on the largest calibrated |z| at alpha over every comparison."""
    passed: bool


def check(name: str, comparisons: Sequence[Comparison], raw: str, alpha: float) -> Check:
    """The check of one kind of z (``raw``: "z" or "z_seeds") over every comparison."""
    raws = [getattr(c, raw) for c in comparisons]
    normal = [getattr(c, f"{raw}_calibrated") for c in comparisons]
    count = len(normal)
    if not count:
        return Check(name, 0, math.nan, math.nan, math.nan, math.nan, math.nan, "", math.nan, False)
    covered = sum(abs(z) <= NORMAL_95 for z in normal)
    coverage_p = float(stats.binomtest(covered, count, 0.95, alternative="less").pvalue)
    worst = max(range(count), key=lambda i: abs(normal[i]))
    at = comparisons[worst]
    bound = float(stats.norm.isf(alpha / (2 * count)))
    largest = abs(normal[worst])
    return Check(name, count, sum(abs(z) <= NORMAL_95 for z in raws) / count, covered / count, coverage_p,
                 sum(z * z for z in normal) / count, largest, f"{at.piece} (offsets {at.first} and {at.second})",
                 bound, largest <= bound and coverage_p >= alpha)


def moved_verdicts(findings: dict[int, SetFindings]) -> list[tuple[str, list[str], bool]]:
    """Each claim's and each claim-statistic's verdict in every set, and whether it moved."""
    rows = []
    for attribute in ("claims", "decisions"):
        names = dict.fromkeys(name for f in findings.values() for name in getattr(f, attribute))
        for name in names:
            verdicts = [getattr(f, attribute).get(name, "-") for f in findings.values()]
            rows.append((name, verdicts, len(set(verdicts)) > 1))
    return rows


# --------------------------------------------------------------------------- across the sets


POWER = 0.8
"""The power of the design's minimum detectable effect, as on the findings page."""


def verdict_counts(verdicts: Sequence[str]) -> str:
    """``agrees 2 / inconclusive 1``: how often each verdict came out, most frequent first."""
    counts: dict[str, int] = {}
    for verdict in verdicts:
        counts[verdict] = counts.get(verdict, 0) + 1
    return " / ".join(f"{v} {n}" for v, n in sorted(counts.items(), key=lambda item: (-item[1], item[0])))


def pooled(readings: Sequence[PieceReading]) -> dict[str, float]:
    """One piece over k sets that share its sequences or items but no training run.

    - ``low``/``high``: the range of the sets' estimates.
    - ``estimate``: their mean; its standard error keeps the units' part whole (every set measures
      the same units, so averaging does not shrink it) and divides the seeds' part by k:
      ``sqrt(mean(unit_se^2) + mean(seed_se^2) / k)``; the interval is read at the t of one set's
      degrees of freedom (their median), which the pooled estimate exceeds: conservative.
    - ``detectable``: the design's minimum detectable effect at 80 % power, from the noise pooled
      over the sets (``sqrt(mean(se^2))``: each set's se^2 estimates the same variance) times the
      median over the sets of their own MDE per unit of se (the noncentral-t factor at the piece's
      degrees of freedom and level, Holm's where the claim has several pieces), so one draw's seed
      spread does not set it; ``detectable_low``/``high`` are the sets' own MDEs, what a reader of
      one run sees. An equivalence piece (a share of a gap, with a margin) gets its range only:
      averaging ratios whose denominators vary is no estimate of the design's.
    """
    k = len(readings)
    estimates = [r.estimate for r in readings]
    dof = float(statistics.median(r.dof for r in readings))
    seed_var = sum(r.seed_se**2 for r in readings) / k
    unit_var = sum((r.unit_se if math.isfinite(r.unit_se) else math.sqrt(max(r.se**2 - r.seed_se**2, 0.0)))**2
                   for r in readings) / k
    se = math.sqrt(unit_var + seed_var / k)
    quantile = float(stats.t.isf(0.025, dof) if math.isfinite(dof) else NORMAL_95)
    mean = sum(estimates) / k
    design_se = math.sqrt(sum(r.se**2 for r in readings) / k)
    own = [abs(r.detectable) for r in readings if math.isfinite(r.detectable)]
    factors = [abs(r.detectable) / r.se for r in readings if math.isfinite(r.detectable) and r.se > 0]
    if any(math.isfinite(r.margin) for r in readings):
        return {"estimate": math.nan, "low": min(estimates), "high": max(estimates), "se": math.nan,
                "ci_low": math.nan, "ci_high": math.nan, "dof": dof, "detectable": math.nan,
                "detectable_low": math.nan, "detectable_high": math.nan}
    return {"estimate": mean, "low": min(estimates), "high": max(estimates), "se": se,
            "ci_low": mean - quantile * se, "ci_high": mean + quantile * se, "dof": dof,
            "detectable": statistics.median(factors) * design_se if factors else math.nan,
            "detectable_low": min(own) if own else math.nan, "detectable_high": max(own) if own else math.nan}


def across_sets(findings: dict[int, SetFindings]) -> list[dict[str, Any]]:
    """Each claim of the page (not the lens tables) over the sets: its verdict in each and their
    count, and each counted piece measured with a seed part in every set, pooled (``pooled``)."""
    rows = []
    claims = dict.fromkeys(name for f in findings.values() for name in f.claims if not name.startswith("["))
    for claim in claims:
        verdicts = [f.claims.get(claim, "-") for f in findings.values()]
        pieces = []
        keys = dict.fromkeys(key for f in findings.values() for key in f.pieces if not key[0] and key[1] == claim)
        for key in keys:
            readings = [f.pieces.get(key) for f in findings.values()]
            if any(r is None or not r.counted or not math.isfinite(r.se) or not r.seed_se > 0 for r in readings):
                continue
            pieces.append({"statistic": key[2], "piece": key[3], "verdicts": [r.verdict for r in readings],
                           **pooled(readings)})
        rows.append({"claim": claim, "verdicts": verdicts, "counts": verdict_counts(verdicts),
                     "marginal": len(set(verdicts)) > 1, "pieces": pieces})
    return rows


# --------------------------------------------------------------------------- the report


def _interval(reading: PieceReading | None) -> str:
    if reading is None:
        return "-"
    if not math.isfinite(reading.se):
        return f"{reading.estimate:+.3g} (unmeasured)"
    return f"{reading.estimate:+.3g} [{reading.ci_low:+.3g}, {reading.ci_high:+.3g}] {reading.verdict}"


def _piece_rows(findings: dict[int, SetFindings], comparisons: Sequence[Comparison]) -> list[dict[str, Any]]:
    """Each piece: its estimate and interval in every set, and its z's per pair of sets."""
    zs: dict[str, dict[str, list[float]]] = {}
    for c in comparisons:
        zs.setdefault(c.piece, {})[f"{c.first}-{c.second}"] = [c.z, c.z_seeds]
    keys = sorted(set.union(*(set(f.pieces) for f in findings.values())), key=piece_label)
    return [{"piece": piece_label(key), "z": zs.get(piece_label(key), {}),
             "sets": {str(offset): _interval(found.pieces.get(key)) for offset, found in findings.items()}}
            for key in keys]


def _set_records(settings: RerunSettings) -> dict[int, dict[str, Any]]:
    """How each set's last run was made (run_set writes it); {} for a set run otherwise."""
    paths = {offset: settings.directory(offset) / SET_RECORD for offset in settings.offsets}
    return {offset: json.loads(path.read_text()) if path.is_file() else {} for offset, path in paths.items()}


def report(settings: RerunSettings, findings: dict[int, SetFindings], comparisons: list[Comparison],
           left_out: list[str], checks: list[Check]) -> dict[str, Any]:
    """Everything the report says, as plain data (the JSON; the Markdown is made from it)."""
    records = _set_records(settings)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, check=False,
                            capture_output=True, text=True).stdout
    return {
        "offsets": list(findings), "alpha": settings.alpha,
        "configfiles": sorted({" ".join(r.get("configfiles", ["(not recorded)"])) for r in records.values()}),
        "commit": commit.strip(), "date": datetime.date.today().isoformat(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores",
        "minutes": {str(offset): round(r["seconds"] / 60, 1) if "seconds" in r else None
                    for offset, r in records.items()},
        "checks": [asdict(c) for c in checks], "passed": all(c.passed for c in checks),
        "verdicts": [{"name": n, "verdicts": v, "moved": m} for n, v, m in moved_verdicts(findings)],
        "across_sets": across_sets(findings),
        "pieces": _piece_rows(findings, comparisons),
        "comparisons": [asdict(c) for c in comparisons], "not_compared": left_out,
    }


def markdown(data: dict[str, Any]) -> str:
    offsets = data["offsets"]
    minutes = ", ".join(f"{m} min" for m in data["minutes"].values() if m is not None)
    timed = f"; wall time per set: {minutes}" if minutes else ""
    sets = (f"Seed offsets {', '.join(map(str, offsets))}; configs {'; '.join(data['configfiles'])}; commit "
            f"{data['commit']}; {data['date']}; {data['machine']}{timed}.")
    header = ("| z | comparisons | raw \\|z\\| <= 1.96 | coverage (t) | binomial p | mean z^2 | largest \\|z\\| "
              f"| Bonferroni bound (alpha {data['alpha']:g}) | |")
    lines = [f"# Rerun of the findings over {len(offsets)} seed sets that share no run", "", sets, "", header,
             "|---" * 9 + "|"]
    for c in data["checks"]:
        lines.append(f"| {c['name']} | {c['comparisons']} | {c['within_196']:.1%} | {c['coverage']:.1%} | "
                     f"{c['coverage_p']:.2g} | {c['mean_square']:.2f} | {c['largest']:.2f} | {c['bound']:.2f} | "
                     f"{'holds' if c['passed'] else '**fails**'} |")
    largest = [f"- largest {c['name']}: {c['largest_at']}" for c in data["checks"] if c["largest_at"]]
    outcome = "The estimates held" if data["passed"] else "The estimates moved"
    lines += ["", *largest, "", f"**{outcome} across the sets** (exit status {0 if data['passed'] else 1}).", "",
              "## Verdicts", "", "| claim / statistic | " + " | ".join(map(str, offsets)) + " | |",
              "|---" * (len(offsets) + 2) + "|"]
    lines += [f"| {v['name']} | " + " | ".join(v["verdicts"]) + f" | {'**moved**' if v['moved'] else ''} |"
              for v in data["verdicts"]]
    lines += ["", "## Across the sets", "",
              "Each claim's verdicts counted over the sets (marginal: not the same in every set), and each "
              "counted piece: the range of its estimates, their mean with an interval that keeps the shared "
              "sequences' or items' error whole and averages the seeds' over the sets, and the design's "
              f"minimum detectable effect ({POWER:.0%} power) from the noise pooled over the sets, beside the "
              "range of the sets' own.", "",
              "| claim / piece | verdicts | estimates (range) | pooled [95 %] | design MDE (sets' own) |",
              "|---|---|---|---|---|"]
    for row in data["across_sets"]:
        lines.append(f"| **{row['claim']}** | {row['counts']}{' (marginal)' if row['marginal'] else ''} | | | |")
        for p in row["pieces"]:
            pooled_text = "—" if math.isnan(p["estimate"]) else \
                f"{p['estimate']:+.3g} [{p['ci_low']:+.3g}, {p['ci_high']:+.3g}]"
            mde = "—" if math.isnan(p["detectable"]) else \
                f"{p['detectable']:.3g} ({p['detectable_low']:.3g}-{p['detectable_high']:.3g})"
            lines.append(f"| {p['statistic']} / {p['piece']} | {verdict_counts(p['verdicts'])} | "
                         f"{p['low']:+.3g} to {p['high']:+.3g} | {pooled_text} | {mde} |")
    lines += ["", "## Pieces: estimate [95 % interval] verdict per set; z and z over seeds per pair", "",
              "| piece | " + " | ".join(map(str, offsets)) + " | z (z seeds) |", "|---" * (len(offsets) + 2) + "|"]
    for piece in data["pieces"]:
        zs = "; ".join(f"{pair}: {z:+.2f} ({zs:+.2f})" for pair, (z, zs) in piece["z"].items())
        lines.append(f"| {piece['piece']} | " + " | ".join(piece["sets"].values()) + f" | {zs} |")
    lines += ["", "## Not compared (in some or every pair)", ""]
    lines += [f"- {line}" for line in data["not_compared"] or ["(none)"]]
    return "\n".join(lines) + "\n"


def compare(settings: RerunSettings) -> bool:
    """Compare the finished sets, print and write the report; True when the estimates held."""
    findings = {offset: read_findings(settings.directory(offset) / FINDINGS) for offset in settings.offsets}
    comparisons, left_out = compare_sets(findings)
    checks = [check("z (se: seeds and units)", comparisons, "z", settings.alpha),
              check("z over seeds (what a rerun redraws)", comparisons, "z_seeds", settings.alpha)]
    data = report(settings, findings, comparisons, left_out, checks)
    text = markdown(data)
    settings.workdir.mkdir(parents=True, exist_ok=True)
    (settings.workdir / "rerun-report.md").write_text(text)
    (settings.workdir / "rerun-report.json").write_text(json.dumps(data, indent=2) + "\n")
    print(text, end="", flush=True)
    if not comparisons:
        print("rerun_findings: no piece was measured with a seed part in two sets: nothing was compared")
    return data["passed"]


# --------------------------------------------------------------------------- command line


def parse(argv: Sequence[str] | None = None) -> RerunSettings:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sets", type=int, default=3, help="seed sets, at least 3 (default: %(default)s)")
    parser.add_argument("--configfile", nargs="+", default=list(DEFAULT_CONFIGFILES),
                        help="configs every set runs, merged in order (default: %(default)s)")
    parser.add_argument("--workdir", type=Path, default=RerunSettings.workdir,
                        help="where the sets run and the report goes (default: %(default)s)")
    parser.add_argument("--cores", default="all", help="snakemake --cores of each set (default: all)")
    parser.add_argument("--alpha", type=float, default=0.01, help="level of both checks (default: %(default)s)")
    parser.add_argument("--compare-only", action="store_true", help="compare finished sets, run nothing")
    parser.add_argument("snakemake_args", nargs="*", help="more snakemake arguments for every set, after --")
    args = parser.parse_args(argv)
    if args.sets < 3:
        parser.error(f"--sets must be at least 3 (got {args.sets}): two sets give one comparison per piece")
    if not 0 < args.alpha < 1:
        parser.error(f"--alpha must lie between 0 and 1 (got {args.alpha})")
    missing = [name for name in args.configfile if not (ROOT / name).is_file()]
    if missing:
        parser.error(f"--configfile: no such file in {ROOT}: {', '.join(missing)}")
    return RerunSettings(args.sets, tuple(args.configfile), args.workdir.resolve(), args.cores, args.alpha,
                         args.compare_only, tuple(args.snakemake_args))


def main(argv: Sequence[str] | None = None) -> int:
    settings = parse(argv)
    if not settings.compare_only:
        shared = shared_seeds(settings.configfiles, settings.offsets)
        if shared:
            raise SystemExit("rerun_findings: the seed sets share runs (a config's seeds span "
                             f"{SEED_STRIDE} or more):\n  " + "\n  ".join(shared))
        for offset in settings.offsets:
            seconds = run_set(settings, offset)
            print(f"[rerun] offset {offset}: {seconds / 60:.1f} min", flush=True)
    return 0 if compare(settings) else 1


if __name__ == "__main__":
    sys.exit(main())
