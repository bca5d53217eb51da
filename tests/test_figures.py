"""Figures: every plot writes a valid, non-blank PNG; bad input fails loudly; y range never crops."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from condensation import figures as F  # noqa: E402
from condensation.geometry import NUM_BINS, CosineStatistics  # noqa: E402

EDGES = np.linspace(-1.0, 1.0, NUM_BINS + 1)
MIDS = (EDGES[:-1] + EDGES[1:]) / 2


def _density(centers: np.ndarray, width: float) -> np.ndarray:
    h = np.exp(-0.5 * ((MIDS[None, :] - centers[:, None]) / width) ** 2)
    return h / (h.sum(axis=1, keepdims=True) * (2.0 / NUM_BINS))


def make_stats(centers, width: float = 0.04, seq_len: int = 6) -> CosineStatistics:
    """Synthetic statistics: layer ``l``'s cosine mass is a narrow bump at ``centers[l]``."""
    centers = np.asarray(centers, dtype=np.float64)
    mean = np.broadcast_to(centers[:, None, None], (centers.size, seq_len, seq_len)).astype(np.float32)
    return CosineStatistics(
        mean_cosine=mean.copy(),
        hist_of_mean=_density(centers, width),
        hist_pooled=_density(centers, 2.5 * width),
        layer_mean=centers.copy(),
        layer_mean_offdiag=centers.copy(),
        num_sequences=3,
    )


def condensing(layers: int = 7) -> CosineStatistics:
    """Similarity climbs from ~0 at the embedding to ~0.9 at the last layer."""
    return make_stats(np.linspace(0.0, 0.9, layers))


def dispersed(layers: int = 7) -> CosineStatistics:
    """Similarity falls with depth (negative trend)."""
    return make_stats(np.linspace(0.5, 0.05, layers))


def negative(layers: int = 5) -> CosineStatistics:
    """A model whose deepest layer's mass sits at -0.8."""
    return make_stats(np.linspace(0.1, -0.8, layers))


def assert_png(path) -> np.ndarray:
    assert path.exists() and path.stat().st_size > 0
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    image = mpimg.imread(path)
    assert image.ndim == 3 and image.shape[2] in (3, 4)
    assert 200 < image.shape[0] < 5000 and 200 < image.shape[1] < 8000
    rgb = image[..., :3]
    assert float(rgb.std()) > 0.02, "image is (nearly) a single colour"
    # a heatmap figure has many distinct colours, never just a couple
    assert len(np.unique((rgb.reshape(-1, 3)[::7] * 255).astype(np.uint8), axis=0)) > 20
    leftovers = [p for p in path.parent.iterdir() if p.name.startswith(f".{path.name}.")]
    assert not leftovers, f"temporary files left beside the figure: {leftovers}"
    return image


def family(n: int = 3) -> list[F.FamilyEntry]:
    makers = [condensing, dispersed, condensing]
    return [
        F.FamilyEntry(f"m{i}", makers[i % 3](5 + 2 * i), size=10 ** (6 + i) * 4.2)
        for i in range(n)
    ]


# --------------------------------------------------------------------------------------------
# heatmap_ylim and small helpers
# --------------------------------------------------------------------------------------------


def test_heatmap_ylim_keeps_default_when_mass_inside():
    stats = condensing()
    assert F.heatmap_ylim(stats.hist_of_mean, stats.bin_edges) == (-0.25, 1.0)


def test_heatmap_ylim_extends_below_for_mass_at_minus_point_eight():
    stats = negative()
    lo, hi = F.heatmap_ylim(stats.hist_of_mean, stats.bin_edges)
    assert hi == 1.0
    assert lo <= -0.8 - 2 * 0.04  # the whole bump (width 0.04) stays in view
    assert lo >= -1.0
    assert np.isclose(lo / 0.05, round(lo / 0.05))  # rounded outward to the 0.05 grid


def test_heatmap_ylim_single_histogram_and_counts():
    counts = np.zeros(NUM_BINS)
    counts[5] = 10.0  # cosine around -0.92
    assert F.heatmap_ylim(counts, EDGES)[0] == pytest.approx(-0.95)
    counts[0] = 1.0
    assert F.heatmap_ylim(counts, EDGES)[0] == pytest.approx(-1.0)


def test_heatmap_ylim_ignores_negligible_tail_and_empty_layers():
    hist = np.zeros((3, NUM_BINS))
    hist[0, 100] = 1.0
    hist[0, 10] = 1e-5  # 0.001 % of the layer's mass: not worth a wider axis
    hist[1, 90] = 1.0  # layer 2 stays empty
    assert F.heatmap_ylim(hist, EDGES) == (-0.25, 1.0)


def test_heatmap_ylim_extends_upwards_and_validates():
    hist = np.zeros((1, NUM_BINS))
    hist[0, 70] = 1.0  # bin [0.094, 0.109]: the top rounds outward to 0.15
    assert F.heatmap_ylim(hist, EDGES, default=(-0.25, 0.0)) == (-0.25, pytest.approx(0.15))
    with pytest.raises(ValueError, match="edges"):
        F.heatmap_ylim(hist, EDGES[:-1])
    with pytest.raises(ValueError, match="low < high"):
        F.heatmap_ylim(hist, EDGES, default=(1.0, -0.25))


@pytest.mark.parametrize(
    "n, text", [(4.2e6, "4.2M"), (124e6, "124M"), (1.1e9, "1.1B"), (350e3, "350K"), (12, "12")]
)
def test_format_param_count(n, text):
    assert F.format_param_count(n) == text


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("histogram", ["mean", "pooled"])
def test_family_trend_writes_png(tmp_path, histogram):
    path = tmp_path / "sub" / "family.png"  # parent directory is created
    assert F.plot_family_trend(family(3), path, "family", histogram=histogram) == path
    assert_png(path)


def test_family_trend_wraps_many_models_and_negative_mass(tmp_path):
    entries = family(7) + [F.FamilyEntry("negative", negative(), size=None)]
    path = tmp_path / "wrapped.png"
    assert_png(F.plot_family_trend(entries, path, "eight models"))


def test_family_trend_overwrites_atomically(tmp_path):
    path = tmp_path / "f.png"
    path.write_bytes(b"old")
    F.plot_family_trend(family(2), path, "again")
    assert_png(path)


def test_paired_trend_writes_png(tmp_path):
    pairs = [
        (F.FamilyEntry(f"m{i}", condensing(5 + i), size=1e6 * (i + 1)), F.FamilyEntry(f"m{i}", dispersed(5 + i)))
        for i in range(3)
    ]
    path = tmp_path / "paired.png"
    F.plot_paired_trend(pairs, path, "distillation", row_labels=("teacher-free", "distilled"))
    assert_png(path)


def test_dataset_robustness_writes_png(tmp_path):
    models, datasets = ["small", "medium", "large"], ["wiki", "code"]
    grid = {d: {m: (condensing(6) if m != "medium" else dispersed(8)) for m in models} for d in datasets}
    grid["code"]["large"] = negative(9)
    path = tmp_path / "datasets.png"
    F.plot_dataset_robustness(grid, path, "datasets", models, datasets)
    assert_png(path)


def test_layer_means_writes_png(tmp_path):
    curves = {"a": np.linspace(0, 0.9, 7), "b": np.linspace(0.5, -0.2, 13), "flat": np.full(4, 0.3)}
    path = tmp_path / "means.png"
    F.plot_layer_means(curves, path, "layer means")
    assert_png(path)


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_family_trend_errors(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no entries"):
        F.plot_family_trend([], path, "t")
    with pytest.raises(ValueError, match="missing label"):
        F.plot_family_trend([F.FamilyEntry("", condensing())], path, "t")
    with pytest.raises(ValueError, match="duplicate"):
        F.plot_family_trend([F.FamilyEntry("a", condensing()), F.FamilyEntry("a", dispersed())], path, "t")
    with pytest.raises(ValueError, match="histogram"):
        F.plot_family_trend(family(1), path, "t", histogram="median")
    bad = condensing()
    bad.hist_of_mean = bad.hist_of_mean[:-1]  # one layer short of layer_mean
    with pytest.raises(ValueError, match="num_layers"):
        F.plot_family_trend([F.FamilyEntry("bad", bad)], path, "t")
    with pytest.raises(TypeError):
        F.plot_family_trend([condensing()], path, "t")
    with pytest.raises(ValueError, match="vmax"):
        F.plot_family_trend(family(1), path, "t", vmax=0)
    assert not path.exists()


def test_paired_trend_errors(tmp_path):
    path = tmp_path / "x.png"
    a, b = F.FamilyEntry("a", condensing()), F.FamilyEntry("b", dispersed())
    with pytest.raises(ValueError, match="no pairs"):
        F.plot_paired_trend([], path, "t")
    with pytest.raises(ValueError, match="pair 0"):
        F.plot_paired_trend([(a,)], path, "t")
    with pytest.raises(ValueError, match="exactly two"):
        F.plot_paired_trend([(a, b)], path, "t", row_labels=("only",))
    with pytest.raises(ValueError, match="missing label"):
        F.plot_paired_trend([(a, F.FamilyEntry(" ", dispersed()))], path, "t")
    assert not path.exists()


def test_dataset_robustness_errors(tmp_path):
    path = tmp_path / "x.png"
    grid = {"wiki": {"a": condensing(), "b": dispersed()}}
    with pytest.raises(ValueError, match="grid is empty"):
        F.plot_dataset_robustness({}, path, "t", ["a"], ["wiki"])
    with pytest.raises(ValueError, match="model_order is empty"):
        F.plot_dataset_robustness(grid, path, "t", [], ["wiki"])
    with pytest.raises(ValueError, match="dataset_order is empty"):
        F.plot_dataset_robustness(grid, path, "t", ["a", "b"], [])
    with pytest.raises(ValueError, match=r"missing \['code'\]"):
        F.plot_dataset_robustness(grid, path, "t", ["a", "b"], ["wiki", "code"])
    with pytest.raises(ValueError, match=r"dataset 'wiki'.*missing \['c'\]"):
        F.plot_dataset_robustness(grid, path, "t", ["a", "b", "c"], ["wiki"])
    with pytest.raises(ValueError, match=r"not in model_order \['b'\]"):
        F.plot_dataset_robustness(grid, path, "t", ["a"], ["wiki"])
    with pytest.raises(ValueError, match="duplicate"):
        F.plot_dataset_robustness(grid, path, "t", ["a", "b", "a"], ["wiki"])
    assert not path.exists()


def test_layer_means_errors(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no curves"):
        F.plot_layer_means({}, path, "t")
    with pytest.raises(ValueError, match="at least two"):
        F.plot_layer_means({"a": np.array([0.3])}, path, "t")
    with pytest.raises(ValueError, match="missing label"):
        F.plot_layer_means({"": np.arange(3.0)}, path, "t")
    assert not path.exists()


# --------------------------------------------------------------------------------------------
# mid-training figures
# --------------------------------------------------------------------------------------------

import pandas as pd  # noqa: E402

MID_STEPS = (0, 10, 20)


def condensing_run(step: int, layers: int = 7) -> CosineStatistics:
    """Similarity at the last layer climbs from 0.3 (step 0) to 0.9 (step 20)."""
    return make_stats(np.linspace(0.0, 0.3 + 0.03 * step, layers))


def dispersing_run(step: int, layers: int = 7) -> CosineStatistics:
    """The depth trend turns negative as training goes on: the last layer ends at -0.3."""
    return make_stats(np.linspace(0.0, 0.3 - 0.03 * step, layers))


def mid_rows() -> dict[str, list[tuple[int, CosineStatistics]]]:
    return {
        "cross-entropy only": [(s, condensing_run(s)) for s in MID_STEPS],
        "dispersion": [(s, dispersing_run(s)) for s in MID_STEPS],
    }


def trajectory_frame(seeds=(0, 1)) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    rows = []
    for method, sign in (("cross-entropy only", 1.0), ("dispersion", -1.0)):
        for seed in seeds:
            for step in (0, 50, 100, 150):
                base = 0.3 + sign * 0.004 * step
                rows.append(dict(method=method, seed=seed, step=step,
                                 spearman_rho=float(np.clip(base + rng.normal(0, 0.05), -1, 1)),
                                 kendall_tau=float(np.clip(0.8 * base + rng.normal(0, 0.05), -1, 1))))
    return pd.DataFrame(rows)


def loss_frame(steps: int = 120, every: int = 40) -> pd.DataFrame:
    rng = np.random.default_rng(1)
    rows = []
    for method, offset in (("cross-entropy only", 0.0), ("dispersion", 0.1)):
        for seed in (0, 1):
            for step in range(steps + 1):
                loss = 3.0 + np.exp(-step / 30) + offset + rng.normal(0, 0.1)
                val = 3.1 + np.exp(-step / 30) + offset + rng.normal(0, 0.02) if step % every == 0 else np.nan
                rows.append(dict(method=method, seed=seed, step=step, loss=loss, val_loss=val))
    return pd.DataFrame(rows)


def test_method_colors_deterministic_and_distinct():
    names = ["cross-entropy only", "dispersion", "decorrelation"]
    colors = F.method_colors(names)
    assert list(colors) == names
    assert colors == F.method_colors(list(names))
    assert len(set(colors.values())) == 3
    assert F.method_colors(names[:2]) == {k: colors[k] for k in names[:2]}  # a prefix keeps its colours
    many = [f"m{i}" for i in range(25)]
    assert len(set(F.method_colors(many).values())) == 25
    assert len(set(F.method_colors(many[:15]).values())) == 15
    assert F.method_colors([]) == {}
    with pytest.raises(ValueError, match="duplicate"):
        F.method_colors(["a", "a"])


def test_condensation_grid_writes_png(tmp_path):
    path = tmp_path / "mid" / "grid.png"
    assert F.plot_condensation_grid(mid_rows(), path, "mid-training") == path
    assert_png(path)
    F.plot_condensation_grid(mid_rows(), path, "pooled", histogram="pooled", annotate_trend=False)
    assert_png(path)


def test_condensation_grid_mismatched_steps_and_negative_mass(tmp_path):
    rows = {
        "cross-entropy only": [(20, condensing_run(20)), (0, condensing_run(0))],  # unsorted, no 10
        "dispersion": [(np.int64(10), dispersing_run(10)), (30.0, negative(7))],
    }
    path = tmp_path / "grid.png"
    F.plot_condensation_grid(rows, path, "mismatched steps", methods=["dispersion", "cross-entropy only"])
    assert_png(path)
    one = {"only": [(5, condensing_run(5))]}
    assert_png(F.plot_condensation_grid(one, tmp_path / "one.png", "one cell"))


def test_condensation_grid_errors(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no rows"):
        F.plot_condensation_grid({}, path, "t")
    with pytest.raises(ValueError, match="no checkpoints"):
        F.plot_condensation_grid({"a": []}, path, "t")
    with pytest.raises(ValueError, match="more than once"):
        F.plot_condensation_grid({"a": [(0, condensing_run(0)), (0, condensing_run(10))]}, path, "t")
    with pytest.raises(ValueError, match="non-negative integer"):
        F.plot_condensation_grid({"a": [(-1, condensing_run(0))]}, path, "t")
    with pytest.raises(ValueError, match="non-negative integer"):
        F.plot_condensation_grid({"a": [(2.5, condensing_run(0))]}, path, "t")
    with pytest.raises(ValueError, match="pair"):
        F.plot_condensation_grid({"a": [condensing_run(0)]}, path, "t")
    with pytest.raises(TypeError):
        F.plot_condensation_grid({"a": [(0, "stats")]}, path, "t")
    with pytest.raises(ValueError, match="missing label"):
        F.plot_condensation_grid({"": [(0, condensing_run(0))]}, path, "t")
    with pytest.raises(ValueError, match="not in methods"):
        F.plot_condensation_grid(mid_rows(), path, "t", methods=["dispersion"])
    with pytest.raises(ValueError, match="histogram"):
        F.plot_condensation_grid(mid_rows(), path, "t", histogram="median")
    assert not path.exists()


def test_trajectory_writes_png(tmp_path):
    path = tmp_path / "trajectory.png"
    assert F.plot_trajectory(trajectory_frame(), path, "trajectory") == path
    assert_png(path)


def test_trajectory_single_seed_nan_and_extra_methods(tmp_path):
    frame = trajectory_frame(seeds=(0,))  # no band
    frame.loc[0, "spearman_rho"] = np.nan  # an undefined trend is skipped, not an error
    path = tmp_path / "one_seed.png"
    F.plot_trajectory(frame, path, "one seed", methods=["dispersion", "cross-entropy only", "absent"])
    assert_png(path)
    assert_png(F.plot_trajectory(frame, tmp_path / "rho.png", "rho only", metrics=["spearman_rho"]))


def test_trajectory_errors(tmp_path):
    path = tmp_path / "x.png"
    frame = trajectory_frame()
    with pytest.raises(ValueError, match="empty"):
        F.plot_trajectory(frame.iloc[:0], path, "t")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['kendall_tau'\]"):
        F.plot_trajectory(frame.drop(columns="kendall_tau"), path, "t")
    with pytest.raises(ValueError, match=r"\['seed', 'step'\]"):
        F.plot_trajectory(frame.drop(columns=["seed", "step"]), path, "t")
    with pytest.raises(ValueError, match="metrics is empty"):
        F.plot_trajectory(frame, path, "t", metrics=[])
    with pytest.raises(ValueError, match="repeat"):
        F.plot_trajectory(pd.concat([frame, frame.iloc[:1]]), path, "t")
    with pytest.raises(ValueError, match="not in methods"):
        F.plot_trajectory(frame, path, "t", methods=["dispersion"])
    with pytest.raises(TypeError):
        F.plot_trajectory(frame.to_dict(), path, "t")
    assert not path.exists()


def test_loss_curves_writes_png(tmp_path):
    path = tmp_path / "loss.png"
    assert F.plot_loss_curves(loss_frame(), path, "loss") == path
    assert_png(path)
    no_val = loss_frame(steps=20).assign(val_loss=np.nan)  # no checkpoint evaluated: still a figure
    assert_png(F.plot_loss_curves(no_val, tmp_path / "no_val.png", "no validation"))


def test_loss_curves_errors(tmp_path):
    path = tmp_path / "x.png"
    frame = loss_frame(steps=10, every=5)
    with pytest.raises(ValueError, match="empty"):
        F.plot_loss_curves(frame.iloc[:0], path, "t")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['val_loss'\]"):
        F.plot_loss_curves(frame.drop(columns="val_loss"), path, "t")
    with pytest.raises(ValueError, match="no finite values"):
        F.plot_loss_curves(frame.assign(loss=np.nan), path, "t")
    with pytest.raises(ValueError, match="numeric"):
        F.plot_loss_curves(frame.assign(loss="high"), path, "t")
    with pytest.raises(ValueError, match="non-negative integers"):
        F.plot_loss_curves(frame.assign(step=frame["step"] - 0.5), path, "t")
    assert not path.exists()
