"""Every results table, from measurements and scores.

  score_tables          what Tables 2, 3 and 4 share: rows, score blocks, comparisons, captions
  comparisons           two rows of a score table compared over seeds and items; chance levels
  table2, table3, table4  Table 2 (methods x models), Table 3 (the ablation), Table 4 (from scratch)
  condensation_effects  each method's condensation against the baseline, per study and checkpoint
  trend_tables          a group of models' trend statistics
  profiles              the per-sequence data beside a condensation table, and its statistics
  tokens_to_target      each run's tokens to CE's validation loss and each method's token multiplier (Tables 2, 4)
  table_files           cells and table files shared by every table
"""
