"""The ``tests`` step: the tests marked gpu, counted from pytest's JUnit XML, or from its verbose
lines when the box stopped it before the XML was written."""

from __future__ import annotations

import importlib.util
import re
import shlex
from typing import Any
from xml.etree import ElementTree

from .boxes import log_tail, run_limited
from .plan import Context

PYTEST_WORKERS = 4
"""pytest-xdist workers for the gpu tests on the lent machine (16 cores, one GPU; the tests are independent)."""
TEST_TIMEOUT_S = 120
"""pytest-timeout's limit per gpu test, so that one hung test does not take the step's whole box."""


def plugin_args(ctx: Context) -> list[str]:
    """xdist and pytest-timeout where installed (both are in the lent machine's image). On the CPU
    every test skips: one process, not the project's two workers (each would import torch for
    nothing, ~8 CPU seconds)."""
    args = []
    if importlib.util.find_spec("xdist"):
        args += ["-n", "0" if ctx.cpu else str(PYTEST_WORKERS)]
    if importlib.util.find_spec("pytest_timeout"):
        args += ["--timeout", str(TEST_TIMEOUT_S)]
    return args


def run_tests(ctx: Context, limit_s: float) -> dict[str, Any]:
    report = ctx.work / "logs" / "tests.xml"
    report.unlink(missing_ok=True)
    command = [
        ctx.python,
        "-m",
        "pytest",
        "-m",
        "gpu",
        "tests/unit/test_gpu.py",
        "tests/unit/test_train_forward.py",  # the training loop's CUDA path (pinned batches, numbers read late)
        "-p",
        "no:cacheprovider",
        "-v",
        "-rs",
        f"--junitxml={report}",
        *plugin_args(ctx),
    ]
    ran = run_limited(command, ctx.log("tests"), limit_s)
    result: dict[str, Any] = {
        "command": shlex.join(["python", *command[1:]]),
        "wall_s": round(ran.wall_s, 1),
        "returncode": ran.returncode,
        "log": "logs/tests.log",
    }
    result |= junit_counts(report.read_text()) if report.exists() else verbose_counts(log_tail(ctx.log("tests"), 10**6))
    if ran.stopped_at_limit:
        result["status"] = "stopped at the limit"
    elif ran.returncode == 0 and (result["passed"] > 0 or (ctx.cpu and result["skipped"] > 0)):
        result["status"] = "passed" if result["passed"] else "collected (all skipped without CUDA)"
    else:
        result["status"] = "failed"
    return result


def junit_counts(xml: str) -> dict[str, Any]:
    """Passed, failed, skipped counts and the names of the tests that failed, from pytest's JUnit XML."""
    root = ElementTree.fromstring(xml)
    failed, skipped, total = [], [], 0
    for case in root.iter("testcase"):
        total += 1
        name = f"{case.get('classname', '')}::{case.get('name', '')}"
        if case.find("failure") is not None or case.find("error") is not None:
            failed.append(name)
        elif case.find("skipped") is not None:
            skipped.append(f"{name}: {case.find('skipped').get('message', '')}")
    return {
        "passed": total - len(failed) - len(skipped),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_tests": failed,
        "skipped_tests": skipped,
    }


_VERBOSE = re.compile(r"(\S+::\S+) (PASSED|FAILED|ERROR|SKIPPED)|(PASSED|FAILED|ERROR|SKIPPED) (\S+::\S+)")


def verbose_counts(log: str) -> dict[str, Any]:
    """The same counts from ``pytest -v`` lines (with or without xdist), for a run stopped before its XML."""
    outcomes = {}
    for match in _VERBOSE.finditer(log):
        test, outcome = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(3))
        outcomes[test] = outcome
    failed = [test for test, outcome in outcomes.items() if outcome in ("FAILED", "ERROR")]
    skipped = [test for test, outcome in outcomes.items() if outcome == "SKIPPED"]
    return {
        "passed": sum(outcome == "PASSED" for outcome in outcomes.values()),
        "failed": len(failed),
        "skipped": len(skipped),
        "failed_tests": failed,
        "skipped_tests": skipped,
    }
