"""Dry runs of several config overlays in one process (tests/workflow/rerun_triggers.py's
planned_in_batches runs it as a script); ``job_counts`` reads a dry run's job-stats table.

    python plan_overlays.py OVERLAY... # in the project: prints a JSON list of jobs per rule

Nothing of the project is imported before Snakemake reads its Snakefile, so the rules use the
project's own ``condensation``, as a ``snakemake -n`` there would.
"""

from __future__ import annotations

import contextlib
import io
import json
import sys
from pathlib import Path


def job_counts(text: str) -> dict[str, int]:
    """Jobs per rule from the job-stats table of a dry run's output (empty: nothing to be done)."""
    counts = {}
    in_stats = False
    for line in text.splitlines():
        if line.startswith("job ") and "count" in line:
            in_stats = True
            continue
        if in_stats:
            parts = line.split()
            if parts and parts[0] == "total":
                break
            if len(parts) == 2 and parts[1].isdigit():
                counts[parts[0]] = int(parts[1])
    return counts


def plan_in_one_process(overlays: list[str]) -> list[dict[str, int]]:
    """``snakemake -n``'s job counts per rule for each overlay over config.yaml, in the current
    directory, all in this process: Snakemake's start (imports, plugins) is most of a small dry
    run's time, so it is paid once. An empty overlay planned last must plan nothing, or state
    of one plan leaked into the next."""
    from snakemake.cli import main as snakemake_main  # noqa: PLC0415

    def plan(overlay_path: str) -> dict[str, int]:
        captured = io.StringIO()
        with contextlib.redirect_stdout(captured), contextlib.redirect_stderr(captured):
            try:
                snakemake_main(["-n", "--configfile", "config.yaml", overlay_path])
                code = 0
            except SystemExit as exit_:
                code = exit_.code
        if code:
            raise AssertionError(f"snakemake -n with {Path(overlay_path).read_text()} failed:\n"
                                 + captured.getvalue()[-3000:])
        return job_counts(captured.getvalue())

    counts = [plan(path) for path in overlays]
    control = Path(overlays[-1]).with_name(f"{Path(overlays[-1]).stem}-control.yaml")
    control.write_text("{}\n")
    leaked = plan(str(control))
    if leaked:
        raise AssertionError(f"an unchanged config planned {leaked} after {len(overlays)} plans in one process")
    return counts


if __name__ == "__main__":
    print(json.dumps(plan_in_one_process(sys.argv[1:])))
