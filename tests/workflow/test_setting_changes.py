"""Every setting of the tiny config that shapes an output reruns the jobs that read it: each leaf
changed in turn in an overlay over the session's finished tiny run, planned by `snakemake -n`."""

from __future__ import annotations

import pytest

from tests.workflow import rerun_triggers

pytestmark = pytest.mark.slow


def test_every_setting_that_shapes_an_output_reruns_the_jobs_that_read_it(tiny_run, tmp_path):
    """Each leaf setting of the finished tiny run's config (defaults included), changed in turn in
    an overlay: `snakemake -n` plans at least a rule that reads it (rerun_triggers.EXPECTED_RULES).
    Snakemake compares only plain params, so a setting passed inside another object would plan
    nothing; a new setting no rule reads fails here until wired or listed in NOT_SHAPING."""
    planned = rerun_triggers.walk(tiny_run, tmp_path)
    assert len(planned) > 150  # every leaf of the tiny config, defaults included
    missed = rerun_triggers.missed(planned)
    assert not missed, "settings whose change reruns nothing that reads them:\n" + "\n".join(missed)
