"""Manifests catch damaged artifacts; `python -m condensation verify --repair` removes what Snakemake must rebuild."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from condensation.models import ModelHandle, load_model, load_tokenizer
from condensation.runtime import verify
from condensation.runtime.io import (
    DIRECTORY_MANIFEST,
    CorruptArtifactError,
    atomic_path,
    verify_manifest,
    write_manifest,
)


def make_file(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    write_manifest(path)
    return path


def make_dir(path: Path, files: dict[str, str]) -> Path:
    with atomic_path(path) as tmp:
        tmp.mkdir()
        for name, text in files.items():
            (tmp / name).write_text(text)
        write_manifest(tmp)
    return path


def make_run(run_dir: Path) -> Path:
    run_dir.mkdir(parents=True)
    (run_dir / "log.csv").write_text("step,loss\n0,1.0\n")
    for step in (0, 5):
        make_dir(run_dir / "checkpoints" / f"step-{step:07d}", {"model.safetensors": f"weights {step}"})
    make_dir(run_dir / "final", {"model.safetensors": "weights 5", "train_summary.json": "{}"})
    return run_dir


@pytest.fixture
def tree(tmp_path) -> Path:
    make_file(tmp_path / "results/geometry/m/d.npz", "statistics")
    make_dir(tmp_path / "results/midtrain/geometry/m/ce/seed0", {"step-0000000.npz": "a", "trajectory.csv": "b"})
    make_file(tmp_path / "results/midtrain/geometry/m/ce/seed0/step-0000000.npz", "a")  # its own sidecar, too
    make_run(tmp_path / "runs/midtrain/m/ce/seed0")
    make_run(tmp_path / "runs/midtrain/m/ce/seed1")
    return tmp_path


def test_an_intact_tree_passes(tree, capsys):
    assert verify.main([str(tree / "results"), str(tree / "runs")]) == 0
    assert "0 corrupt" in capsys.readouterr().out


def test_a_changed_file_is_reported_and_removed(tree, capsys):
    path = tree / "results/geometry/m/d.npz"
    path.write_text("statisticz")
    assert verify.main([str(tree / "results")]) == 1
    assert f"CORRUPT {path}: checksum" in capsys.readouterr().out
    assert path.exists()  # reporting alone removes nothing
    assert verify.main(["--repair", str(tree / "results")]) == 0
    assert not path.exists() and not path.with_name("d.npz.manifest.json").exists()
    assert (tree / "results/midtrain/geometry/m/ce/seed0").is_dir()  # the intact one stays


def test_a_damaged_file_inside_a_directory_output_removes_the_directory(tree):
    outer = tree / "results/midtrain/geometry/m/ce/seed0"
    (outer / "step-0000000.npz").write_text("truncat")
    checked, problems = verify.check([tree / "results"])
    assert [p.artifact for p in problems] == [outer]  # reported once, as the output Snakemake knows
    verify.main(["--repair", str(tree / "results")])
    assert not outer.exists() and (tree / "results/geometry/m/d.npz").exists()


def test_a_damaged_checkpoint_removes_its_whole_training_run(tree):
    run_dir = tree / "runs/midtrain/m/ce/seed0"
    (run_dir / "checkpoints/step-0000005/model.safetensors").write_bytes(b"\x00" * 4)
    _, problems = verify.check([tree / "runs"])
    assert [p.artifact for p in problems] == [run_dir / "checkpoints/step-0000005"]
    assert verify.removal_target(problems[0].artifact) == run_dir
    verify.main(["--repair", str(tree / "runs")])
    assert not run_dir.exists()
    assert (tree / "runs/midtrain/m/ce/seed1/final").is_dir()  # the other seed is untouched


def test_a_missing_file_or_manifest_is_corruption(tree):
    final = tree / "runs/midtrain/m/ce/seed1/final"
    (final / "train_summary.json").unlink()
    with pytest.raises(CorruptArtifactError, match="train_summary.json is missing"):
        verify_manifest(final)
    (final / "manifest.json").unlink()
    assert not verify.check([final])[1]  # without any manifest it is not recognised as an artifact...
    with pytest.raises(CorruptArtifactError, match="no manifest"):
        verify_manifest(final)  # ...but a rule that needs one refuses it


def test_temporaries_and_orphaned_manifests_are_ignored(tree):
    make_dir(tree / "results/geometry/m/.d2.npz.abc123.tmp", {"junk": "half"})
    (tree / "results/geometry/m/.d2.npz.abc123.tmp/junk").write_text("changed")
    make_file(tree / "results/geometry/m/gone.npz", "x").unlink()
    checked, problems = verify.check([tree / "results"])
    assert problems == [] and checked == 3


def test_loading_a_damaged_model_directory_names_the_file(tiny_model_dir, tmp_path):
    copy = tmp_path / "model"
    shutil.copytree(tiny_model_dir, copy)
    handle = ModelHandle(name="tiny", location=str(copy))
    load_model(handle)  # intact: loads
    weights = copy / "model.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[len(raw) // 2] ^= 0x01
    weights.write_bytes(bytes(raw))
    for load in (load_model, load_tokenizer):
        with pytest.raises(CorruptArtifactError, match=r"model\.safetensors has checksum .* truncated or was changed"):
            load(handle)


def test_the_package_command_runs_verify_and_refuses_an_unknown_command(tree, capsys):
    from condensation.__main__ import main

    assert main(["verify", str(tree)]) == 0
    assert "0 corrupt" in capsys.readouterr().out
    assert main(["no-such-command"]) == 2
    assert "verify [--repair]" in capsys.readouterr().err


def test_outputs_of_other_code_are_listed_with_the_command_that_rebuilds_them(tree, capsys):
    """Every manifest names the code that wrote it; verify lists what other code made (outermost
    artifact only) and a `snakemake --force` of the outputs to rebuild: a run's final/ for anything
    inside a training run, so that the run trains again."""
    assert verify.made_by_other_code([tree / "results", tree / "runs"]) == []
    old = tree / "runs/midtrain/m/ce/seed1/checkpoints/step-0000005" / DIRECTORY_MANIFEST
    old.write_text(json.dumps(json.loads(old.read_text())
                              | {"code": {"version": "0.0.9", "commit": None, "source_sha256": "f" * 64}}))
    older = tree / "results/geometry/m/d.npz.manifest.json"
    older.write_text(json.dumps({key: value for key, value in json.loads(older.read_text()).items() if key != "code"}))
    listed = verify.made_by_other_code([tree / "results", tree / "runs"])
    assert [artifact for artifact, _ in listed] == [tree / "results/geometry/m/d.npz", old.parent]
    assert "0.0.9" in listed[1][1] and "recorded no version" in listed[0][1]
    assert verify.main([str(tree / "results"), str(tree / "runs")]) == 0  # listed, not corrupt
    out = capsys.readouterr().out
    assert f"OTHER CODE {old.parent}: made by condensation 0.0.9" in out
    command = out.splitlines()[-1].split()
    assert command[:4] == ["snakemake", "--cores", "all", "--force"]
    assert command[4:] == sorted([str(tree / "results/geometry/m/d.npz"), str(tree / "runs/midtrain/m/ce/seed1/final")])
