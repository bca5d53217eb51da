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
