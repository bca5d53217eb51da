"""The paper's figures, drawn from data in memory.

Every ``plot_*`` function draws one figure, writes it as a PNG atomically (a killed job never
leaves half a figure under its final name) and returns the :class:`matplotlib.figure.Figure`.
No pyplot: figures render on the Agg canvas, independent of any display.

Depth trends (Spearman rho, Kendall tau, the deeper half of layers' mean cosine with its
interval over sequences) arrive with the data (:class:`FamilyEntry`, :class:`Checkpoint`),
computed by the caller under the configured trend conventions, so a figure shows the numbers
of the trend tables.

Modules: ``trends`` (families, pairs, datasets, series), ``runs`` (the studies' training runs),
``heatmaps`` (the per-layer density grid they share), ``style`` (colours, labels, saving).

* :func:`plot_family_trend`: a family's depth trend and deeper layers' mean cosine beside one
  heatmap per model (Fig. 2 / S1);
* :func:`plot_paired_trend`: two rows of heatmaps (e.g. scratch vs. distilled), pairs joined;
* :func:`plot_dataset_robustness`: heatmaps and depth trend per dataset, and the deeper
  layers' mean cosine with one line per dataset (Fig. S2);
* :func:`plot_condensation_grid`: a study's heatmaps per method and checkpoint (Fig. 6);
* :func:`plot_trajectory`: a study's trends against step, mean +- std over seeds;
* :func:`plot_loss_curves`: a study's training and validation loss against step.
"""
