"""Scoring with lm-eval, offline.

  tasks, task_items, task_data   offline multiple-choice tasks built from held-out text
  harness                        lm-eval on an in-memory model; one scoring job
  score_files                    the files of one score (record, per-item rows, lm-eval's output)
  scores                         score records read back, and the checkpoint each table uses
"""
