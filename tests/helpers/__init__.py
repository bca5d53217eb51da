"""What more than one test module (or a script a test starts) shares, imported from the repository
root as ``from tests.helpers.<module> import ...`` (pyproject.toml puts the root on ``sys.path``; a
script a test starts puts it there itself). A test module imports helpers from here, never from
another test module; fixtures stay in the conftest.py files, which import from here too.

* ``repo``: the repository's root and the docs pages the tests read;
* ``text``: a short English sample text;
* ``collection``: the check tests/conftest.py runs on the collected tests;
* ``float_bounds``: rounding-error bounds for float32 results computed in another order;
* ``training``: the training tests' tiny GPT-2, token blocks, resume config and run readers;
* ``baselines``: the baseline tests' tiny GPT-2 (tied embeddings), blocks, config and baselines;
* ``tasks``: a synthetic novel and the tiny offline lm-eval tasks built from it;
* ``workflow``: copies of the workflow and Snakemake/DVC calls for the workflow tests;
* ``plan_overlays``: dry runs of config overlays in one process, and a dry run's job counts.
"""
