"""The project's tools, most of them scripts run by path (``python tools/gpu_kit.py``).

A regular package, not a namespace one, so that ``python -m tools.gpu_check`` from the repository
root finds this folder even where an installed distribution ships a top-level ``tools`` package
(a namespace folder loses to any regular package of that name further down ``sys.path``)."""
