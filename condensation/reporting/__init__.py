"""From measurements and scores to the paper's tables, figures and findings.

  score_tables          what Tables 2 and 3 share: rows, score blocks, comparisons, captions
  table2, table3        Table 2 (methods x models) and Table 3 (the dispersion ablation)
  table4                Table 4 (from scratch, CE vs dispersion) beside its condensation
  condensation_effects  how each method moved condensation against the baseline, per study
  trend_tables          a group of models' trend statistics
  comparisons           comparisons over seeds and items, and chance levels; statistics: tests and intervals
  table_files           cells and table files shared by every table
  findings              the paper's claims against what a run measured
  figures/              every figure (trends, runs, heatmaps, style)
"""
