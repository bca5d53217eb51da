"""The size claim's power at a family's measured noise, and the design table of docs/statistics.md.

    python tools/power_design.py                                   # the design table at the default's noise
    python tools/power_design.py results/tables/trend/toy-gpt2-mlp_persuasion.profiles.npz [--slope -0.19]

Here, not in ``condensation.reporting.statistics.power``: it reads a table's profiles
(``reporting.tables``), which the statistics below the tables must not import."""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence

import numpy as np

from condensation.reporting.statistics.power import (
    design_table,
    estimate_noise,
    estimate_seed_spreads,
    simulate_slope,
)
from condensation.reporting.tables.profiles import STATISTICS, read_profiles


def main(argv: Sequence[str] | None = None) -> int:
    """``python tools/power_design.py PROFILES``: the noise levels of a family's
    trend profiles (``results/tables/trend/<family>_<text>.profiles.npz``), its measured slope, and
    the chance that the size claim agrees for designs of 2 to 6 seeds per width at that slope."""
    parser = argparse.ArgumentParser(description=main.__doc__.split("\n")[0].strip("`"))
    parser.add_argument("profiles", nargs="?", help="a trend table's .profiles.npz (one family on one text); "
                        "without it, the design table of docs/statistics.md at the default's noise")
    parser.add_argument("--slope", type=float, default=None, help="the slope to power for (default: the measured one)")
    parser.add_argument("--draws", type=int, default=600)
    args = parser.parse_args(argv)
    if args.profiles is None:
        print("| test (simulated) | false calls under no effect | power |\n|---|---|---|")
        for what, null, found in design_table():
            print(f"| {what} | {null.agrees + null.disagrees:.1%} (agrees {null.agrees:.1%}) | {found} |")
        return 0
    profiles = read_profiles(args.profiles)
    rows = profiles.rows.drop_duplicates("model")
    keep = profiles.subset(profiles.rows.index.isin(rows.index))
    per_unit = [STATISTICS["last_half"].compute(layers) for layers in keep.layers]
    noise = estimate_noise(per_unit, list(rows["label"]))
    labels = list(dict.fromkeys(rows["label"]))
    positions = [math.log10(float(rows.loc[rows["label"] == label, "num_parameters"].iloc[0])) for label in labels]
    means = [float(np.mean([v.mean() for v, lab in zip(per_unit, rows["label"]) if lab == label])) for label in labels]
    measured = float(np.polyfit(positions, means, 1)[0])
    target = measured if args.slope is None else args.slope
    print(f"{args.profiles}: {len(rows)} runs, {len(labels)} sizes at log10 parameters "
          + ", ".join(f"{p:.3f}" for p in positions))
    print(f"noise: seed sd {noise.seed_sd:.4f}, sequence main sd {noise.sequence_sd:.4f}, "
          f"interaction sd {noise.interaction_sd:.4f} over {noise.sequences} sequences")
    spreads = estimate_seed_spreads(per_unit, list(rows["label"]))
    counts = [int((rows["label"] == label).sum()) for label in labels]
    print("each width's own seed sd: " + ", ".join(f"{label} {spreads[label]:.4f} ({count} runs)"
                                                   for label, count in zip(labels, counts, strict=True)))
    print(f"measured slope per decade {measured:+.3f}; power at {target:+.3f} per decade:")
    for seeds in range(2, 7):
        rates = simulate_slope(target, positions, seeds, noise=noise, draws=args.draws)
        null = simulate_slope(0.0, positions, seeds, noise=noise, draws=args.draws)
        print(f"  {seeds} seeds per width, one pooled seed sd: agrees {rates.agrees:.0%}, false calls under no "
              f"effect {null.agrees + null.disagrees:.1%}")
    own = [spreads[label] for label in labels]
    if all(np.isfinite(own)):
        rates = simulate_slope(target, positions, counts, noise=noise, seed_sds=own, draws=args.draws)
        null = simulate_slope(0.0, positions, counts, noise=noise, seed_sds=own, draws=args.draws)
        print(f"  this design ({' / '.join(map(str, counts))} seeds) at each width's own seed sd: agrees "
              f"{rates.agrees:.0%}, false calls under no effect {null.agrees + null.disagrees:.1%}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
