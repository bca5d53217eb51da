"""What tests/conftest.py checks of the tests pytest collects (tested by tests/workflow/test_clean_root.py)."""

from __future__ import annotations

import pytest


def refuse_planning_outside_clean_clone(items) -> None:
    """A test marked ``plans`` must take the fixture clean_clone: UsageError naming those that do not."""
    planning_elsewhere = [item.nodeid for item in items
                          if item.get_closest_marker("plans") and "clean_clone" not in item.fixturenames]
    if planning_elsewhere:
        raise pytest.UsageError("tests marked 'plans' must plan in the fixture clean_clone (a clean copy of the "
                                "checkout), not in the checkout: " + ", ".join(planning_elsewhere))
