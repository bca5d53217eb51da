"""`python -m condensation adopt` before it runs Snakemake: when it does nothing, and what it
refuses (the whole command, with Snakemake and DVC, runs in tests/workflow/test_dvc.py)."""

from __future__ import annotations

import json

import pytest

from condensation.runtime import adopt
from condensation.runtime.io import write_manifest


@pytest.fixture
def project(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_in_a_fresh_clone_or_where_snakemake_ran_the_stage_adopts_nothing(project, capsys):
    assert adopt.main(["--if-unrecorded"]) == 0  # dvc repro's first run: no outputs yet
    assert "no outputs here yet" in capsys.readouterr().out
    (project / "results").mkdir()
    (project / ".snakemake/metadata").mkdir(parents=True)
    (project / ".snakemake/metadata/cmVzdWx0cw==").write_text("{}")
    assert adopt.main(["--if-unrecorded"]) == 0
    assert "keeps records here already" in capsys.readouterr().out


def test_without_dvc_lock_nothing_says_which_settings_made_the_outputs(project, capsys):
    (project / "results").mkdir()
    assert adopt.main([]) == 1
    assert "no dvc.lock: nothing says which settings made these outputs" in capsys.readouterr().err
    (project / "dvc.lock").write_text("schema: '2.0'\nstages: {pipeline: {cmd: snakemake}}\n")
    assert adopt.main([]) == 1
    assert "records no config.yaml params" in capsys.readouterr().err


def test_a_damaged_artifact_is_named_and_nothing_is_recorded(project, capsys):
    (project / "dvc.lock").write_text(json.dumps({"stages": {"pipeline": {"params": {"config.yaml": {"a": 1}}}}}))
    artifact = project / "results/table.csv"
    artifact.parent.mkdir()
    artifact.write_text("x,y\n1,2\n")
    write_manifest(artifact, kind="table")
    artifact.write_text("x,y\n1,3\n")
    assert adopt.main([]) == 1
    error = capsys.readouterr().err
    assert "1 of 1 artifacts do not match their manifests; nothing was recorded" in error
    assert "results/table.csv" in error and not (project / ".snakemake").exists()
