"""From measurements and scores to the paper's tables, figures and findings, in four groups that
import downwards only (findings -> tables -> statistics; figures stand alone):

  statistics/   estimates over runs and units, verdicts and multiplicity, resampling, power simulations
  tables/       every table: scores (Tables 2-4), condensation effects, trends, and the per-sequence profiles
  figures/      every figure (trends, runs, heatmaps, style)
  findings/     the paper's claims against what a run measured, and the page
"""
