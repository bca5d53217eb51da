"""The CPU seconds each test costs, listed at the end of a run beside pytest's slowest durations.

Under pytest-xdist a test's wall time counts the other worker's load too (a test beside the
paper miniature takes twice as long); its CPU does not, so this list says where a cut would pay.
Counted: the worker's own process and every child process it waited for (Snakemake, its jobs,
DVC, lm-eval), from the start of a test's setup to the end of its teardown; a session fixture
is charged to the test that built it. Not counted: daemons a test starts and does not wait for
(the jobs of a test SLURM's slurmd, the stand-in Hub's server).
"""

from __future__ import annotations

import resource
from collections import defaultdict

import pytest

SHOWN = 30
KEY = "cpu_s"
STARTED = pytest.StashKey[float]()


def cpu_seconds() -> float:
    """User and system CPU of this process and of its waited-for children, so far."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    item.stash[STARTED] = cpu_seconds()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    if call.when == "teardown":  # on the last report, which carries it to the controller under xdist
        item.user_properties.append((KEY, cpu_seconds() - item.stash[STARTED]))
    yield


_RECORDED: dict[str, float] = {}
"""CPU seconds by test id, in the process that reports (the controller under xdist)."""


def pytest_runtest_logreport(report):
    if report.when == "teardown" and KEY in dict(report.user_properties):
        _RECORDED[report.nodeid] = dict(report.user_properties)[KEY]


def pytest_terminal_summary(terminalreporter):
    if not _RECORDED:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"most CPU: {SHOWN} tests (this process and its children)")
    for nodeid, spent in sorted(_RECORDED.items(), key=lambda item: -item[1])[:SHOWN]:
        write(f"{spent:8.1f} s  {nodeid}")
    by_module: dict[str, float] = defaultdict(float)
    for nodeid, spent in _RECORDED.items():
        by_module[nodeid.split("::")[0]] += spent
    write(f"{sum(_RECORDED.values()):8.1f} s  in all; by module:")
    for module, spent in sorted(by_module.items(), key=lambda item: -item[1])[:15]:
        write(f"{spent:8.1f} s  {module}")
