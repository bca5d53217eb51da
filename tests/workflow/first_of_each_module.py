"""A pytest plugin (``-p first_of_each_module``, this folder on PYTHONPATH) that keeps the first
selected test of each module and deselects the rest: tests/workflow/test_clean_root.py runs one
planning test per module beside a finished run."""

import pytest


@pytest.hookimpl(trylast=True)  # after -m has selected
def pytest_collection_modifyitems(config, items):
    kept, modules = [], set()
    for item in items:
        module = item.nodeid.split("::")[0]
        if module not in modules:
            kept.append(item)
            modules.add(module)
    config.hook.pytest_deselected(items=[item for item in items if item not in kept])
    items[:] = kept
