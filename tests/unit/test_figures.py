"""Figures: every plot writes a valid, non-blank PNG; bad input fails loudly; y range never crops."""

from __future__ import annotations

import matplotlib

matplotlib.use("Agg")

from dataclasses import replace

import matplotlib.image as mpimg  # noqa: E402
import numpy as np  # noqa: E402
import pytest  # noqa: E402

from condensation.config.specs import TrendConfig  # noqa: E402
from condensation.geometry import NUM_BINS, CosineStatistics
from condensation.reporting.figures import runs, style, trends  # noqa: E402
from condensation.reporting.figures.heatmaps import HeatmapOptions, heatmap_ylim  # noqa: E402
from condensation.trend import TrendStatistics, depth_trend, trend_layer_means, trend_statistics

EDGES = np.linspace(-1.0, 1.0, NUM_BINS + 1)
MIDS = (EDGES[:-1] + EDGES[1:]) / 2


def _density(centers: np.ndarray, width: float) -> np.ndarray:
    h = np.exp(-0.5 * ((MIDS[None, :] - centers[:, None]) / width) ** 2)
    return h / (h.sum(axis=1, keepdims=True) * (2.0 / NUM_BINS))


def make_stats(centers, width: float = 0.04, seq_len: int = 6, per_sequence: bool = True) -> CosineStatistics:
    """Synthetic statistics: layer ``l``'s cosine mass is a narrow bump at ``centers[l]``; the
    three sequences' layer means sit 0.03 below, at and 0.03 above it (without ``per_sequence``:
    unknown, as in files written before they were stored)."""
    centers = np.asarray(centers, dtype=np.float64)
    mean = np.broadcast_to(centers[:, None, None], (centers.size, seq_len, seq_len)).astype(np.float32)
    sequences = centers + np.array([[-0.03], [0.0], [0.03]]) if per_sequence else None
    return CosineStatistics(
        mean_cosine=mean.copy(),
        hist_of_mean=_density(centers, width),
        hist_pooled=_density(centers, 2.5 * width),
        layer_mean=centers.copy(),
        layer_mean_offdiag=centers.copy(),
        num_sequences=3,
        sequence_layer_mean=sequences,
        sequence_layer_mean_offdiag=sequences,
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


CONVENTIONS = TrendConfig(include_embedding_layer=True, include_diagonal=True)


def entry(label: str, stats: CosineStatistics, size: float | None = None) -> trends.FamilyEntry:
    return trends.FamilyEntry(label, stats, size, depth_trend(stats, CONVENTIONS))


def family(n: int = 3) -> list[trends.FamilyEntry]:
    makers = [condensing, dispersed, condensing]
    return [entry(f"m{i}", makers[i % 3](5 + 2 * i), size=10 ** (6 + i) * 4.2) for i in range(n)]


def heatmap_axes(fig) -> list:
    return [ax for ax in fig.axes if ax.images]


def line(ax, label: str) -> np.ndarray:
    return next(np.asarray(ln.get_ydata(), dtype=np.float64) for ln in ax.lines if ln.get_label() == label)


def deeper_panel(fig):
    return next(ax for ax in fig.axes if ax.get_title() == trends.DEEPER_TITLE)


def error_bars(ax) -> list[np.ndarray]:
    """Per drawn series, ``[bars, 3]``: x, low and high end of each vertical error bar."""
    bars = []
    for collection in ax.collections:
        segments = collection.get_segments()
        assert all(seg[0, 0] == seg[1, 0] for seg in segments)  # vertical
        bars.append(np.array([[seg[0, 0], seg[0, 1], seg[1, 1]] for seg in segments]).reshape(-1, 3))
    return bars


def intervals(entries) -> np.ndarray:
    return np.array([e.trend.last_half_ci for e in entries])


# --------------------------------------------------------------------------------------------
# heatmap_ylim and small helpers
# --------------------------------------------------------------------------------------------


def test_heatmap_ylim_keeps_default_when_mass_inside():
    stats = condensing()
    assert heatmap_ylim(stats.hist_of_mean, stats.bin_edges) == (-0.25, 1.0)


def test_heatmap_ylim_extends_below_for_mass_at_minus_point_eight():
    stats = negative()
    lo, hi = heatmap_ylim(stats.hist_of_mean, stats.bin_edges)
    assert hi == 1.0
    assert lo <= -0.8 - 2 * 0.04  # the whole bump (width 0.04) stays in view
    assert lo >= -1.0
    assert np.isclose(lo / 0.05, round(lo / 0.05))  # rounded outward to the 0.05 grid


def test_heatmap_ylim_single_histogram_and_counts():
    counts = np.zeros(NUM_BINS)
    counts[5] = 10.0  # cosine around -0.92
    assert heatmap_ylim(counts, EDGES)[0] == pytest.approx(-0.95)
    counts[0] = 1.0
    assert heatmap_ylim(counts, EDGES)[0] == pytest.approx(-1.0)


def test_heatmap_ylim_ignores_negligible_tail_and_empty_layers():
    hist = np.zeros((3, NUM_BINS))
    hist[0, 100] = 1.0
    hist[0, 10] = 1e-5  # 0.001 % of the layer's mass: not worth a wider axis
    hist[1, 90] = 1.0  # layer 2 stays empty
    assert heatmap_ylim(hist, EDGES) == (-0.25, 1.0)


def test_heatmap_ylim_extends_upwards_and_validates():
    hist = np.zeros((1, NUM_BINS))
    hist[0, 70] = 1.0  # bin [0.094, 0.109]: the top rounds outward to 0.15
    assert heatmap_ylim(hist, EDGES, default=(-0.25, 0.0)) == (-0.25, pytest.approx(0.15))
    with pytest.raises(ValueError, match="edges"):
        heatmap_ylim(hist, EDGES[:-1])
    with pytest.raises(ValueError, match="low < high"):
        heatmap_ylim(hist, EDGES, default=(1.0, -0.25))


@pytest.mark.parametrize(
    "n, text", [(4.2e6, "4.2M"), (124e6, "124M"), (1.1e9, "1.1B"), (350e3, "350K"), (12, "12")]
)
def test_format_param_count(n, text):
    assert style.format_param_count(n) == text


# --------------------------------------------------------------------------------------------
# figures
# --------------------------------------------------------------------------------------------


@pytest.mark.parametrize("histogram", ["mean", "pooled"])
def test_family_trend_writes_png(tmp_path, histogram):
    path = tmp_path / "sub" / "family.png"  # parent directory is created
    fig = trends.plot_family_trend(family(3), path, "family", heatmaps=HeatmapOptions(histogram=histogram))
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    assert len(heatmaps) == 3
    # the narrow mean histograms fit the default range; the wider pooled ones widen it downwards
    expected = {(-0.25, 1.0)} if histogram == "mean" else {(-0.35, 1.0)}
    assert {ax.get_ylim() for ax in heatmaps} == expected
    assert [ax.get_title() for ax in heatmaps] == ["m0\n4.2M", "m1\n42M", "m2\n420M"]
    # heatmaps, the trend panel and its twin tau axis, the deeper-layers panel, the colour bar
    assert len(fig.axes) == 3 + 4


def test_family_trend_shows_the_deeper_layers_with_their_intervals(tmp_path):
    """Even where rho = tau = 1 for every model, the deeper layers' mean tells them apart, and the
    error bars are the intervals over sequences."""
    entries = [entry(f"MLP {w}", make_stats(np.linspace(0.0, top, 5)), size=1e6 * (i + 1))
               for i, (w, top) in enumerate([(32, 0.33), (512, 0.29), (2048, 0.25)])]
    fig = trends.plot_family_trend(entries, tmp_path / "widths.png", "widths")
    assert_png(tmp_path / "widths.png")
    np.testing.assert_allclose(line(fig.axes[0], "Spearman ρ"), [1.0, 1.0, 1.0])
    panel = deeper_panel(fig)
    assert fig.axes.index(panel) == 2  # beside the trend panel (and its twin), before the heatmaps
    np.testing.assert_allclose(panel.lines[0].get_ydata(), [e.trend.last_half for e in entries])
    assert [e.trend.last_half for e in entries] == sorted((e.trend.last_half for e in entries), reverse=True)
    (bars,) = error_bars(panel)
    np.testing.assert_allclose(bars[:, 0], [0, 1, 2])
    np.testing.assert_allclose(bars[:, 1:], intervals(entries))
    assert (bars[:, 2] - bars[:, 1] > 0.01).all()  # the sequences differ by +-0.03: a real interval
    assert not panel.texts  # every model has its interval


def test_family_trend_draws_the_other_lenses_when_every_model_has_them(tmp_path):
    from condensation.lenses import BY_NAME, LENSES

    def lens_values(shift: float) -> dict[str, float]:
        return {f"{lens.name}{end}": 0.2 + shift + 0.1 * i + delta for i, lens in enumerate(LENSES)
                for end, delta in (("", 0.0), ("_low", -0.01), ("_high", 0.01))}

    entries = [replace(e, lenses=lens_values(0.05 * i)) for i, e in enumerate(family(2))]
    fig = trends.plot_family_trend(entries, tmp_path / "lenses.png", "lenses")
    assert_png(tmp_path / "lenses.png")
    panel = next(ax for ax in fig.axes if ax.get_title() == trends.LENS_TITLE)
    assert fig.axes.index(panel) == 3  # after the trend panel, its twin and the deeper-layers panel
    drawn = [line for line in panel.lines if not line.get_label().startswith("_")]  # not the zero line
    unit = [lens for lens in LENSES if lens.scale == "unit"]
    assert len(drawn) == len(unit)
    np.testing.assert_allclose(drawn[2].get_ydata(), [0.4, 0.45])  # IsoScore*, per model
    legend = [text.get_text() for text in panel.get_legend().get_texts()]
    assert legend[2] == "IsoScore* ↓" and legend[unit.index(BY_NAME["layer_angle"])] == "layer angle"  # no sign
    # the unbounded lenses on a log axis of their own, next
    log_panel = fig.axes[4]
    assert log_panel.get_title() == trends.LOG_LENS_TITLE and log_panel.get_yscale() == "log"
    log_lenses = [lens for lens in LENSES if lens.scale == "log"]
    assert [text.get_text() for text in log_panel.get_legend().get_texts()] == [
        lens.short + (" ↑" if lens.condensed > 0 else "") for lens in log_lenses]
    np.testing.assert_allclose(log_panel.lines[0].get_ydata(),
                               [lens_values(0.05 * i)[log_lenses[0].name] for i in range(2)])
    # one model without lenses (a file written before them): no lens panel, as before
    fig = trends.plot_family_trend([entries[1], family(1)[0]], tmp_path / "mixed.png", "mixed")
    assert not any(ax.get_title() == trends.LENS_TITLE for ax in fig.axes)


def test_family_trend_without_per_sequence_means_draws_points_and_says_why(tmp_path):
    entries = [entry("old", make_stats(np.linspace(0, 0.3, 5), per_sequence=False)),
               entry("new", make_stats(np.linspace(0, 0.2, 5)))]
    assert np.isnan(entries[0].trend.last_half_ci).all()
    fig = trends.plot_family_trend(entries, tmp_path / "old.png", "old file")
    assert_png(tmp_path / "old.png")
    panel = deeper_panel(fig)
    np.testing.assert_allclose(panel.lines[0].get_ydata(), [np.mean([0.15, 0.225, 0.3]), np.mean([0.1, 0.15, 0.2])])
    (bars,) = error_bars(panel)
    np.testing.assert_allclose(bars, [[1.0, *entries[1].trend.last_half_ci]])  # only the new one
    assert [t.get_text() for t in panel.texts] == [trends.NO_INTERVAL_NOTE]


def test_family_trend_wraps_many_models_and_negative_mass(tmp_path):
    entries = family(7) + [entry("negative", negative())]
    path = tmp_path / "wrapped.png"
    fig = trends.plot_family_trend(entries, path, "eight models")
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    # balanced rows: 4 + 4, not 6 + 2
    assert len({round(ax.get_position().x0, 3) for ax in heatmaps}) == 4
    assert len({round(ax.get_position().y0, 3) for ax in heatmaps}) == 2
    # one y range for all, widened to show the negative model's mass at -0.8
    low, high = heatmaps[0].get_ylim()
    assert low <= -0.88 and high == 1.0
    assert all(ax.get_ylim() == (low, high) for ax in heatmaps)


def test_family_trend_overwrites_atomically(tmp_path):
    path = tmp_path / "f.png"
    path.write_bytes(b"old")
    trends.plot_family_trend(family(2), path, "again")
    assert_png(path)


def test_family_trend_shows_the_trends_it_is_given(tmp_path):
    """The figure draws the entries' trends; it never recomputes them from the layer means."""
    given = [TrendStatistics(0.3, -0.2, {}), TrendStatistics(float("nan"), float("nan"), {})]
    entries = [trends.FamilyEntry(f"m{i}", condensing(), None, t) for i, t in enumerate(given)]
    fig = trends.plot_family_trend(entries, tmp_path / "given.png", "given")
    rho_axis = fig.axes[0]
    np.testing.assert_array_equal(line(rho_axis, "Spearman ρ"), [0.3, np.nan])
    np.testing.assert_array_equal(line(fig.axes[1], "Kendall τ"), [-0.2, np.nan])
    assert [t.get_text() for t in rho_axis.texts] == ["n/a"]  # the undefined trend is marked


def test_paired_trend_writes_png(tmp_path):
    pairs = [(entry(f"m{i}", condensing(5 + i), size=1e6 * (i + 1)), entry(f"m{i}", dispersed(5 + i)))
             for i in range(3)]
    path = tmp_path / "paired.png"
    fig = trends.plot_paired_trend(pairs, path, "distillation", row_labels=("teacher-free", "distilled"))
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    assert len(heatmaps) == 6
    assert [heatmaps[0].get_ylabel(), heatmaps[3].get_ylabel()] == [
        "teacher-free\ncosine similarity", "distilled\ncosine similarity"]
    rho_axis, tau_axis = fig.axes[:2]
    # first members' rho, second members' rho, and one dashed line joining each pair's points
    np.testing.assert_allclose([ln.get_ydata() for ln in rho_axis.lines[1:3]], [[1.0] * 3, [-1.0] * 3])
    assert sum(ln.get_linestyle() == "--" for ln in rho_axis.lines + tau_axis.lines) == 2 * 3
    # both members' deeper layers, each with its own error bars left and right of the tick, joined
    panel = deeper_panel(fig)
    first_bars, second_bars = error_bars(panel)
    np.testing.assert_allclose(first_bars[:, 0], np.arange(3) - 0.1)
    np.testing.assert_allclose(second_bars[:, 0], np.arange(3) + 0.1)
    np.testing.assert_allclose(first_bars[:, 1:], intervals([p[0] for p in pairs]))
    np.testing.assert_allclose(second_bars[:, 1:], intervals([p[1] for p in pairs]))
    assert sum(ln.get_linestyle() == "--" for ln in panel.lines) == 3


def test_paired_trend_with_a_reference_row(tmp_path):
    """CE student, distilled student, teacher: three heatmap rows; the reference is drawn, not joined."""
    pairs = [(entry(f"ce{i}", condensing(5)), entry(f"kd{i}", dispersed(5)), entry(f"t{i}", negative(5)))
             for i in range(2)]
    path = tmp_path / "paired3.png"
    fig = trends.plot_paired_trend(pairs, path, "distillation", row_labels=("CE only", "distilled", "teacher"))
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    assert len(heatmaps) == 6
    assert [heatmaps[i].get_ylabel() for i in (0, 2, 4)] == [
        "CE only\ncosine similarity", "distilled\ncosine similarity", "teacher\ncosine similarity"]
    rho_axis, tau_axis = fig.axes[:2]
    assert sum(ln.get_linestyle() == "--" for ln in rho_axis.lines + tau_axis.lines) == 2 * 2  # pairs only
    bars = error_bars(deeper_panel(fig))
    assert len(bars) == 3
    np.testing.assert_allclose([rows[:, 0] for rows in bars], [np.arange(2) - 0.2, np.arange(2), np.arange(2) + 0.2])
    np.testing.assert_allclose(bars[2][:, 1:], intervals([p[2] for p in pairs]))
    legend = [text.get_text() for text in rho_axis.get_legend().get_texts()]
    assert legend == ["CE only", "distilled", "teacher", "pair"]


def test_dataset_robustness_writes_png(tmp_path):
    models, datasets = ["small", "medium", "large"], ["wiki", "code"]
    grid = {d: {m: (condensing(6) if m != "medium" else dispersed(8)) for m in models} for d in datasets}
    grid["code"]["large"] = negative(9)
    rows = {d: [entry(m, grid[d][m]) for m in models] for d in datasets}
    path = tmp_path / "datasets.png"
    fig = trends.plot_dataset_robustness(rows, path, "datasets")
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    assert len(heatmaps) == 6
    assert [ax.get_title() for ax in heatmaps] == models + ["", "", ""]  # titles on the first row only
    assert heatmaps[0].get_ylim()[0] <= -0.88  # the code row's negative mass widens every row
    trend_panels = [ax for ax in fig.axes if ax.get_ylabel() == "rank correlation"]
    assert len(trend_panels) == 2
    np.testing.assert_allclose(line(trend_panels[1], "Spearman ρ"), [1.0, -1.0, -1.0])
    # one line per dataset, each with its error bars, named in the legend
    panel = deeper_panel(fig)
    assert [t.get_text() for t in panel.get_legend().get_texts()] == datasets
    for d, bars in zip(datasets, error_bars(panel)):
        np.testing.assert_allclose(line(panel, d), [e.trend.last_half for e in rows[d]])
        np.testing.assert_allclose(bars[:, 1:], intervals(rows[d]))


# --------------------------------------------------------------------------------------------
# errors
# --------------------------------------------------------------------------------------------


def test_family_trend_errors(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no entries"):
        trends.plot_family_trend([], path, "t")
    with pytest.raises(ValueError, match="duplicate"):
        trends.plot_family_trend([entry("a", condensing()), entry("a", dispersed())], path, "t")
    with pytest.raises(ValueError, match="histogram"):
        trends.plot_family_trend(family(1), path, "t", heatmaps=HeatmapOptions(histogram="median"))
    with pytest.raises(ValueError, match="vmax"):
        trends.plot_family_trend(family(1), path, "t", heatmaps=HeatmapOptions(vmax=0))
    assert not path.exists()


def test_paired_trend_errors(tmp_path):
    path = tmp_path / "x.png"
    a, b, c = entry("a", condensing()), entry("b", dispersed()), entry("c", negative(6))
    with pytest.raises(ValueError, match="no pairs"):
        trends.plot_paired_trend([], path, "t")
    with pytest.raises(ValueError, match="pair 0"):
        trends.plot_paired_trend([(a,)], path, "t")
    with pytest.raises(ValueError, match="must name the 2 rows"):
        trends.plot_paired_trend([(a, b)], path, "t", row_labels=("only",))
    with pytest.raises(ValueError, match="must name the 3 rows"):
        trends.plot_paired_trend([(a, b, c)], path, "t", row_labels=("CE", "distilled"))
    with pytest.raises(ValueError, match="pair 1"):
        trends.plot_paired_trend([(a, b, c), (a, b)], path, "t", row_labels=("CE", "distilled", "teacher"))
    with pytest.raises(ValueError, match="duplicate scratch labels"):  # the first row names the ticks
        trends.plot_paired_trend([(a, b), (a, c)], path, "t")
    assert not path.exists()
    trends.plot_paired_trend([(a, b, c), (b, a, c)], path, "t", row_labels=("CE", "distilled", "teacher"))
    assert path.exists()  # one teacher beside every pair: shown again, not a duplicate


def test_dataset_robustness_errors(tmp_path):
    path = tmp_path / "x.png"
    a, b, c = entry("a", condensing()), entry("b", dispersed()), entry("c", condensing())
    with pytest.raises(ValueError, match="no datasets"):
        trends.plot_dataset_robustness({}, path, "t")
    with pytest.raises(ValueError, match="'wiki' has no models"):
        trends.plot_dataset_robustness({"wiki": []}, path, "t")
    with pytest.raises(ValueError, match=r"dataset 'code' lists models \['a'\].*\['a', 'b'\]"):
        trends.plot_dataset_robustness({"wiki": [a, b], "code": [a]}, path, "t")
    with pytest.raises(ValueError, match=r"dataset 'code' lists models \['a', 'b', 'c'\]"):
        trends.plot_dataset_robustness({"wiki": [a, b], "code": [a, b, c]}, path, "t")
    with pytest.raises(ValueError, match="duplicate"):
        trends.plot_dataset_robustness({"wiki": [a, b, a]}, path, "t")
    assert not path.exists()


# --------------------------------------------------------------------------------------------
# the stages hand the figures trends computed under the configured conventions
# --------------------------------------------------------------------------------------------


def embedding_outlier(layers: int = 6) -> CosineStatistics:
    """The embedding output is the most similar layer; from layer 1 on similarity climbs, so the
    trend depends on whether layer 0 is included."""
    return make_stats(np.r_[0.95, np.linspace(0.1, 0.6, layers - 1)])


@pytest.mark.parametrize("include_embedding_layer", [False, True])
def test_family_figure_shows_the_trend_table(tmp_path, monkeypatch, include_embedding_layer):
    from condensation.models import ModelHandle
    from condensation.stages.figures import family_figure
    from condensation.stages.geometry import trend_rows

    trend = TrendConfig(include_embedding_layer=include_embedding_layer, include_diagonal=True)
    names = ["tiny", "small"]
    geometry_paths, handle_paths = [], []
    for i, (name, stats) in enumerate(zip(names, [embedding_outlier(), dispersed()])):
        geometry_paths.append(tmp_path / f"{name}.npz")
        handle_paths.append(tmp_path / f"{name}.json")
        stats.save(geometry_paths[-1])
        ModelHandle(name=name, location=str(tmp_path), num_parameters=10**6 * (i + 1)).save(handle_paths[-1])
    drawn = []
    draw = trends.plot_family_trend
    monkeypatch.setattr(trends, "plot_family_trend", lambda *a, **k: drawn.append(draw(*a, **k)))
    family_figure(
        family="fam", dataset="wiki", model_names=names, geometry_paths=geometry_paths, handle_paths=handle_paths,
        labels={"tiny": "Tiny"}, trend=trend, out_path=tmp_path / "family.png", compares_size=True,
    )
    assert_png(tmp_path / "family.png")
    table = trend_rows(names, geometry_paths, handle_paths, {}, trend)
    np.testing.assert_allclose(line(drawn[0].axes[0], "Spearman ρ"), table["spearman_rho"])
    np.testing.assert_allclose(line(drawn[0].axes[1], "Kendall τ"), table["kendall_tau"])
    (bars,) = error_bars(deeper_panel(drawn[0]))
    np.testing.assert_allclose(bars[:, 1:], table[["last_half_low", "last_half_high"]])
    assert list(table.columns[:13]) == ["model", "label", "num_parameters", "num_layers", "spearman_rho",
                                        "kendall_tau", "last_1", "last_2", "last_3", "last_4", "last_5", "last_half",
                                        "last_half_low"]
    assert list(table.columns[13:]) == ["last_half_high", "depth_slope", "depth_slope_low", "depth_slope_high"]
    assert (table["last_half_low"] < table["last_half"]).all() and (table["last_half"] < table["last_half_high"]).all()
    # listed largest first, the family stops the figure job with the key and the fix (not checked where sizes
    # are not compared)
    with pytest.raises(ValueError,
                       match=r"config\.families\.fam\.models: listed as small \(2,000,000\), Tiny \(1,000,000\)"):
        family_figure(
            family="fam", dataset="wiki", model_names=names[::-1], geometry_paths=geometry_paths[::-1],
            handle_paths=handle_paths[::-1], labels={"tiny": "Tiny"}, trend=trend, out_path=tmp_path / "reversed.png",
            compares_size=True,
        )
    family_figure(
        family="fam", dataset="wiki", model_names=names[::-1], geometry_paths=geometry_paths[::-1],
        handle_paths=handle_paths[::-1], labels={"tiny": "Tiny"}, trend=trend, out_path=tmp_path / "unordered.png",
        compares_size=False,
    )
    # ranks 6, 1..5 against depth give rho = 1 - 6 * 30 / (6 * 35) = 1/7; without layer 0 it is 1
    assert table["spearman_rho"][0] == pytest.approx(1 / 7 if include_embedding_layer else 1.0)
    assert [ax.get_title() for ax in heatmap_axes(drawn[0])] == ["Tiny\n1M", "small\n2M"]


def test_dataset_figure_reads_geometry_dataset_major(tmp_path, monkeypatch):
    from condensation.stages.figures import dataset_figure

    trend = TrendConfig(include_embedding_layer=False, include_diagonal=True)
    stats = {("wiki", "a"): embedding_outlier(), ("wiki", "b"): dispersed(),
             ("code", "a"): dispersed(), ("code", "b"): embedding_outlier(8)}
    paths = []
    for (dataset, model), s in stats.items():
        paths.append(tmp_path / f"{dataset}_{model}.npz")
        s.save(paths[-1])
    kwargs = dict(family="fam", model_names=["a", "b"], datasets=["wiki", "code"], labels={"a": "A"}, trend=trend)
    given = []
    draw = trends.plot_dataset_robustness
    monkeypatch.setattr(trends, "plot_dataset_robustness",
                        lambda rows, *a, **k: given.append(rows) or draw(rows, *a, **k))
    dataset_figure(**kwargs, geometry_paths=paths, out_path=tmp_path / "datasets.png")
    assert_png(tmp_path / "datasets.png")
    assert {d: [e.label for e in row] for d, row in given[0].items()} == {"wiki": ["A", "b"], "code": ["A", "b"]}
    for (dataset, model), s in stats.items():
        entry = given[0][dataset][["a", "b"].index(model)]
        assert entry.trend == depth_trend(s, trend)
        assert entry.trend.last_n == trend_statistics(trend_layer_means(s, trend)).last_n
    with pytest.raises(ValueError, match="3 geometry paths for 2 models x 2 datasets"):
        dataset_figure(**kwargs, geometry_paths=paths[:3], out_path=tmp_path / "short.png")
    assert not (tmp_path / "short.png").exists()



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


def checkpoint(step: int, stats: CosineStatistics) -> runs.Checkpoint:
    return runs.Checkpoint(step, stats, depth_trend(stats, CONVENTIONS))


def mid_rows() -> dict[str, list[runs.Checkpoint]]:
    return {
        "cross-entropy only": [checkpoint(s, condensing_run(s)) for s in MID_STEPS],
        "dispersion": [checkpoint(s, dispersing_run(s)) for s in MID_STEPS],
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
    colors = runs.method_colors(names)
    assert list(colors) == names
    assert colors == runs.method_colors(list(names))
    assert len(set(colors.values())) == 3
    assert runs.method_colors(names[:2]) == {k: colors[k] for k in names[:2]}  # a prefix keeps its colours
    many = [f"m{i}" for i in range(25)]
    assert len(set(runs.method_colors(many).values())) == 25
    assert len(set(runs.method_colors(many[:15]).values())) == 15
    assert runs.method_colors([]) == {}
    with pytest.raises(ValueError, match="duplicate"):
        runs.method_colors(["a", "a"])


def test_condensation_grid_writes_png(tmp_path):
    path = tmp_path / "mid" / "grid.png"
    fig = runs.plot_condensation_grid(mid_rows(), path, "mid-training")
    assert_png(path)
    heatmaps = heatmap_axes(fig)
    assert [ax.get_title() for ax in heatmaps[:3]] == ["step 0 (before)", "step 10", "step 20"]
    # every cell carries its checkpoint's trend; the dispersing run's trend turns negative
    notes = [ax.texts[0].get_text() for ax in heatmaps]
    assert notes[:3] == ["ρ +1.00  τ +1.00"] * 3
    assert notes[3:] == ["ρ +1.00  τ +1.00", "ρ n/a  τ n/a", "ρ \u22121.00  τ \u22121.00"]  # flat at step 10
    fig = runs.plot_condensation_grid(mid_rows(), path, "pooled", heatmaps=HeatmapOptions(histogram="pooled"),
                                   annotate_trend=False)
    assert_png(path)
    assert not [t for ax in heatmap_axes(fig) for t in ax.texts if t.get_text().startswith("ρ")]


def test_condensation_grid_mismatched_steps_and_negative_mass(tmp_path):
    rows = {
        "cross-entropy only": [checkpoint(20, condensing_run(20)), checkpoint(0, condensing_run(0))],  # no 10
        "dispersion": [checkpoint(10, dispersing_run(10)), checkpoint(30, negative(7))],
    }
    path = tmp_path / "grid.png"
    fig = runs.plot_condensation_grid(rows, path, "mismatched steps", methods=["dispersion", "cross-entropy only"])
    assert_png(path)
    cells = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    assert len(cells) == 2 * 4 and len(heatmap_axes(fig)) == 4  # steps 0, 10, 20, 30; four blank cells
    blanks = [ax for ax in cells if not ax.images]
    assert len(blanks) == 4 and all(ax.texts[0].get_text() == "no checkpoint" for ax in blanks)
    assert cells[0].get_ylim()[0] <= -0.88  # the negative mass widens every cell's range
    # each row label in its method's colour, coloured over the order given
    colors = runs.method_colors(["dispersion", "cross-entropy only"])
    labels = [t for ax in cells for t in ax.texts if t.get_text() in colors]
    assert {t.get_text(): t.get_color() for t in labels} == colors
    one = {"only": [checkpoint(5, condensing_run(5))]}
    runs.plot_condensation_grid(one, tmp_path / "one.png", "one cell")
    assert_png(tmp_path / "one.png")


def test_condensation_grid_errors(tmp_path):
    path = tmp_path / "x.png"
    with pytest.raises(ValueError, match="no rows"):
        runs.plot_condensation_grid({}, path, "t")
    with pytest.raises(ValueError, match="no checkpoints"):
        runs.plot_condensation_grid({"a": []}, path, "t")
    with pytest.raises(ValueError, match=r"duplicate steps in row 'a': \[0\]"):
        twice = [checkpoint(0, condensing_run(0)), checkpoint(0, condensing_run(10))]
        runs.plot_condensation_grid({"a": twice}, path, "t")
    with pytest.raises(ValueError, match="not in methods"):
        runs.plot_condensation_grid(mid_rows(), path, "t", methods=["dispersion"])
    with pytest.raises(ValueError, match="histogram"):
        runs.plot_condensation_grid(mid_rows(), path, "t", heatmaps=HeatmapOptions(histogram="median"))
    assert not path.exists()


def test_midtrain_grid_annotates_the_configured_trend(tmp_path, monkeypatch):
    """With the embedding layer left out, the grid shows the trend the trajectory table holds."""
    from condensation.stages.figures import study_figures

    trend = TrendConfig(include_embedding_layer=False, include_diagonal=True)
    grid_dirs = [tmp_path / "geometry" / m for m in ("ce", "disp")]
    for directory in grid_dirs:
        for step in MID_STEPS:
            embedding_outlier().save(directory / f"step-{step:07d}.npz")
    pd.DataFrame(
        [dict(method=m, seed=0, step=s, spearman_rho=1.0, kendall_tau=1.0, last_half=0.5) for m in ("ce", "disp")
         for s in MID_STEPS]
    ).to_csv(tmp_path / "trajectory.csv", index=False)
    loss_frame(steps=20, every=10).rename(columns={"loss": "ce_loss"}).replace(
        {"method": {"cross-entropy only": "ce", "dispersion": "disp"}}).to_csv(tmp_path / "losses.csv", index=False)
    drawn = []
    grid = runs.plot_condensation_grid
    monkeypatch.setattr(runs, "plot_condensation_grid", lambda *a, **k: drawn.append(grid(*a, **k)))
    out = {name: tmp_path / f"{name}.png" for name in ("grid", "trajectory", "losses")}
    study_figures(
        model="tiny", label="Tiny", trajectory_path=tmp_path / "trajectory.csv", loss_path=tmp_path / "losses.csv",
        methods=["ce", "disp"], grid_methods=["ce", "disp"], grid_dirs=grid_dirs, trend=trend,
        grid_figure=out["grid"], trajectory_figure=out["trajectory"], loss_figure=out["losses"],
    )
    for path in out.values():
        assert_png(path)
    expected = trend_statistics(trend_layer_means(embedding_outlier(), trend))
    assert expected.spearman_rho == pytest.approx(1.0)  # 1/7 with the embedding layer
    notes = {ax.texts[0].get_text() for ax in heatmap_axes(drawn[0])}
    assert notes == {f"ρ +{expected.spearman_rho:.2f}  τ +{expected.kendall_tau:.2f}"}


def test_trajectory_writes_png(tmp_path):
    path = tmp_path / "trajectory.png"
    fig = runs.plot_trajectory(trajectory_frame(), path, "trajectory")
    assert_png(path)
    rho, tau = fig.axes[:2]
    assert [rho.get_title(), tau.get_title()] == ["Spearman ρ", "Kendall τ"]
    assert rho.get_shared_y_axes().joined(rho, tau)  # the two rank correlations share one axis
    # per method: the mean over both seeds at each of the four steps, with a +- std band
    frame = trajectory_frame()
    means = frame.groupby(["method", "step"])["spearman_rho"].mean()
    drawn = [ln for ln in rho.lines if len(ln.get_xdata()) == 4]
    np.testing.assert_allclose(drawn[0].get_ydata(), means["cross-entropy only"].to_numpy())
    np.testing.assert_allclose(drawn[1].get_ydata(), means["dispersion"].to_numpy())
    assert len(rho.collections) == 2


def test_trajectory_single_seed_nan_and_extra_methods(tmp_path):
    frame = trajectory_frame(seeds=(0,))  # no band
    frame.loc[0, "spearman_rho"] = np.nan  # an undefined trend is skipped, not an error
    path = tmp_path / "one_seed.png"
    runs.plot_trajectory(frame, path, "one seed", methods=["dispersion", "cross-entropy only", "absent"])
    assert_png(path)
    fig = runs.plot_trajectory(frame, tmp_path / "rho.png", "rho only", metrics=["spearman_rho"])
    assert_png(tmp_path / "rho.png")
    assert len(fig.axes) == 1 and not fig.axes[0].collections  # one seed: no std band


def test_trajectory_draws_the_interval_over_sequences_where_given(tmp_path):
    frame = trajectory_frame().assign(last_half=lambda f: 0.5 + 0.1 * f["spearman_rho"])
    frame = frame.assign(last_half_low=frame["last_half"] - 0.02 - 0.01 * frame["seed"],
                         last_half_high=frame["last_half"] + 0.03)
    fig = runs.plot_trajectory(frame, tmp_path / "ci.png", "ci", metrics=["spearman_rho", "last_half"])
    assert_png(tmp_path / "ci.png")
    rho, deeper = fig.axes
    assert len(rho.collections) == 2  # only the seed bands: rho has no interval columns
    bands_and_bars = deeper.collections
    assert len(bands_and_bars) == 2 * 2  # per method: the band over seeds, then the error bars
    bounds = frame.groupby(["method", "step"])[["last_half_low", "last_half_high"]].mean()
    for method, bars in zip(["cross-entropy only", "dispersion"], bands_and_bars[1::2]):
        segments = np.array(bars.get_segments())  # [steps, 2 ends, (x, y)]
        np.testing.assert_allclose(segments[:, 0, 0], [0, 50, 100, 150])
        np.testing.assert_allclose(segments[:, :, 1], bounds.loc[method].to_numpy())


def test_trajectory_errors(tmp_path):
    path = tmp_path / "x.png"
    frame = trajectory_frame()
    with pytest.raises(ValueError, match="empty"):
        runs.plot_trajectory(frame.iloc[:0], path, "t")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['kendall_tau'\]"):
        runs.plot_trajectory(frame.drop(columns="kendall_tau"), path, "t")
    with pytest.raises(ValueError, match=r"\['seed', 'step'\]"):
        runs.plot_trajectory(frame.drop(columns=["seed", "step"]), path, "t")
    with pytest.raises(ValueError, match="metrics is empty"):
        runs.plot_trajectory(frame, path, "t", metrics=[])
    with pytest.raises(ValueError, match="repeat"):
        runs.plot_trajectory(pd.concat([frame, frame.iloc[:1]]), path, "t")
    with pytest.raises(ValueError, match="not in methods"):
        runs.plot_trajectory(frame, path, "t", methods=["dispersion"])
    assert not path.exists()


def test_loss_curves_writes_png(tmp_path):
    path = tmp_path / "loss.png"
    fig = runs.plot_loss_curves(loss_frame(), path, "loss")
    assert_png(path)
    assert [ax.get_title() for ax in fig.axes] == ["training loss (rolling mean, 2 steps)", "validation loss"]
    assert [t.get_text() for t in fig.legends[0].get_texts()] == ["cross-entropy only", "dispersion"]
    no_val = loss_frame(steps=20).assign(val_loss=np.nan)  # no checkpoint evaluated: still a figure
    fig = runs.plot_loss_curves(no_val, tmp_path / "no_val.png", "no validation")
    assert_png(tmp_path / "no_val.png")
    assert [t.get_text() for t in fig.axes[1].texts] == ["no validation checkpoints"]


def test_loss_curves_errors(tmp_path):
    path = tmp_path / "x.png"
    frame = loss_frame(steps=10, every=5)
    with pytest.raises(ValueError, match="empty"):
        runs.plot_loss_curves(frame.iloc[:0], path, "t")
    with pytest.raises(ValueError, match=r"missing column\(s\) \['val_loss'\]"):
        runs.plot_loss_curves(frame.drop(columns="val_loss"), path, "t")
    with pytest.raises(ValueError, match="no finite values"):
        runs.plot_loss_curves(frame.assign(loss=np.nan), path, "t")
    with pytest.raises(ValueError, match="numeric"):
        runs.plot_loss_curves(frame.assign(loss="high"), path, "t")
    assert not path.exists()


def test_replicates_are_numbered_and_a_model_shown_again_is_not(tmp_path):
    """Two seeds under one label are "#1" and "#2"; a teacher listed beside each pair keeps its label."""
    from condensation.config.specs import TrendConfig
    from condensation.stages.figures import _entries

    names = ["ce-s0", "ce-s1", "teacher", "teacher"]
    for name in dict.fromkeys(names):
        make_stats(np.linspace(0.0, 0.3, 5)).save(tmp_path / f"{name}.npz")
    paths = [tmp_path / f"{name}.npz" for name in names]
    entries = _entries(names, paths, None, {"ce-s0": "CE", "ce-s1": "CE", "teacher": "MLP 1024"},
                       TrendConfig(include_embedding_layer=True, include_diagonal=True))
    assert [e.label for e in entries] == ["CE #1", "CE #2", "MLP 1024", "MLP 1024"]


def test_the_series_band_stage_draws_each_run_their_mean_and_band_and_writes_the_numbers(tmp_path):
    """Two runs measured on the same sequences at three checkpoints (the third only in one):
    a figure with a panel per statistic and the table of the two shared checkpoints."""
    import pandas as pd

    from condensation.reporting.tables.profiles import write_profiles
    from condensation.stages.figures import series_band

    rng = np.random.default_rng(0)
    base = np.linspace(0.1, 0.6, 5)[None, :] + rng.normal(0, 0.02, size=(8, 5))
    paths = []
    for seed, (offset, points) in enumerate(((0.0, 3), (0.05, 2))):
        rows = pd.DataFrame([{"checkpoint": f"step {k * 10}", "tokens": k * 640.0} for k in range(points)])
        paths.append(tmp_path / f"seed{seed}.profiles.npz")
        write_profiles(paths[-1], rows, [base * (1 - k / 4) + offset for k in range(points)], [None] * points)
    series_band(label="MLP 32", dataset="persuasion", series=["toy-s0", "toy-s1"], profile_paths=paths,
                out_path=tmp_path / "band.png", csv_path=tmp_path / "band.csv")
    image = mpimg.imread(tmp_path / "band.png")
    assert image.shape[1] > image.shape[0] > 200  # two panels side by side
    table = pd.read_csv(tmp_path / "band.csv")
    assert table["checkpoint"].tolist() == ["step 0", "step 10"] * 2
    assert table["statistic"].tolist() == ["last_half"] * 2 + ["spearman_rho"] * 2
    deep = table[table["statistic"] == "last_half"]
    assert (deep["low"] < deep["mean"]).all() and (deep["mean"] < deep["high"]).all()
    assert {"run:toy-s0", "run:toy-s1"} <= set(table.columns)
