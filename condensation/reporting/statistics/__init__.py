"""Tests and intervals for the results: estimates over training runs measured on shared units
(``panel``), verdicts and multiplicity (``decisions``), resampling helpers (``resampling``) and the
simulations that show the tests calibrated and powered (``power``). Pure NumPy/SciPy."""
