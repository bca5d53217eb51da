"""The paper's figures, drawn from data in memory.

Every ``plot_*`` function draws one figure, writes it as a PNG atomically (a killed job never
leaves half a figure under its final name) and returns the :class:`matplotlib.figure.Figure`.
No pyplot: figures render on the Agg canvas, independent of any display.

Depth trends (Spearman rho, Kendall tau, the deeper half of layers' mean cosine with its
interval over sequences) arrive with the data (:class:`FamilyEntry`, :class:`Checkpoint`),
computed by the caller under the configured trend conventions, so a figure shows the numbers
of the trend tables.

* :func:`plot_family_trend`: a family's depth trend and deeper layers' mean cosine beside one
  heatmap per model (Fig. 2 / S1);
* :func:`plot_paired_trend`: two rows of heatmaps (e.g. scratch vs. distilled), pairs joined;
* :func:`plot_dataset_robustness`: heatmaps and depth trend per dataset, and the deeper
  layers' mean cosine with one line per dataset (Fig. S2);
* :func:`plot_condensation_grid`: mid-training heatmaps per method and checkpoint (Fig. 6);
* :func:`plot_trajectory`: mid-training trends against step, mean +- std over seeds (Fig. 4);
* :func:`plot_loss_curves`: mid-training training and validation loss against step.
"""

from .heatmaps import DEFAULT_VMAX, DEFAULT_YLIM, HeatmapOptions, heatmap_ylim
from .style import format_param_count, method_colors
from .training import Checkpoint, plot_condensation_grid, plot_loss_curves, plot_trajectory
from .trends import DEEPER_TITLE, NO_INTERVAL_NOTE, FamilyEntry, plot_dataset_robustness, plot_family_trend
from .trends import plot_paired_trend

__all__ = [
    "Checkpoint", "DEEPER_TITLE", "DEFAULT_VMAX", "DEFAULT_YLIM", "FamilyEntry", "HeatmapOptions", "NO_INTERVAL_NOTE",
    "format_param_count", "heatmap_ylim", "method_colors", "plot_condensation_grid", "plot_dataset_robustness",
    "plot_family_trend", "plot_loss_curves", "plot_paired_trend", "plot_trajectory",
]
