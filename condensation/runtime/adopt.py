"""Adopt what DVC restored: after `dvc pull`, record every output for Snakemake as made by the
settings that dvc.lock holds, so that the next `snakemake` remakes what a changed setting shapes
and nothing else.

    dvc pull && python -m condensation adopt

A clone that pulls its outputs has none of Snakemake's records of them (``.snakemake/``, which
git ignores), and DVC gives the files its own times, in no order: Snakemake would remake
whatever looks older than its inputs, and could not see a setting changed since. This command

1. checks every artifact against its manifest (``python -m condensation verify``) and refuses,
   naming them, if any does not match: a damaged file is never recorded as good;
2. reads the settings that made the outputs from dvc.lock (the ``pipeline`` stage's copy of
   config.yaml, written by ``dvc repro``), not from config.yaml, which may have changed since;
3. runs ``snakemake --touch --forceall`` with those settings: every job's outputs get times in the
   order of the DAG and a record of its params and code, as if it had just run.

``--if-unrecorded`` does nothing where Snakemake already keeps records (a workspace where it
ran) or where no output is yet (a fresh clone): dvc.yaml's stage starts with it, so that ``dvc
exp run --temp``, whose copy holds only what git and DVC version, starts from the pulled
results, while ``dvc repro`` in a working checkout or a fresh clone is unchanged.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml

from condensation.runtime.verify import DEFAULT_ROOTS, check, made_by_other_code

LOCK = Path("dvc.lock")
STAGE = "pipeline"
"""dvc.yaml's stage, whose params are the whole of config.yaml."""
RECORDS = Path(".snakemake/metadata")
"""Where Snakemake keeps a record of each output it made."""


class AdoptError(Exception):
    """What cannot be adopted, and why, in words for the user."""


def locked_settings(lock: Path = LOCK) -> dict[str, Any]:
    """The config that made the outputs dvc.lock records."""
    if not lock.is_file():
        raise AdoptError(f"no {lock}: nothing says which settings made these outputs (run `dvc pull` in a clone "
                         "of a commit that holds one)")
    stage = (yaml.safe_load(lock.read_text()) or {}).get("stages", {}).get(STAGE, {})
    settings = stage.get("params", {}).get("config.yaml")
    if not settings:
        raise AdoptError(f"{lock}: stage '{STAGE}' records no config.yaml params")
    return settings


def refuse_damaged(roots: Sequence[str]) -> int:
    """The number of artifacts checked; AdoptError naming each that does not match its manifest."""
    checked, problems = check(roots)
    if problems:
        listed = "\n".join(f"  {problem.reason}" for problem in problems)
        raise AdoptError(f"{len(problems)} of {checked} artifacts do not match their manifests; nothing was "
                         f"recorded:\n{listed}\n`dvc pull --force` fetches them again (or `python -m condensation "
                         "verify --repair` removes them, and snakemake remakes them)")
    return checked


def touch_command(configfile: Path, snakemake_args: Sequence[str] = ()) -> list[str]:
    return [sys.executable, "-m", "snakemake", "--touch", "--forceall", "--cores", "1", "--quiet", "rules",
            "--configfile", str(configfile), *snakemake_args]


def adopt(roots: Sequence[str] = DEFAULT_ROOTS, snakemake_args: Sequence[str] = ()) -> str:
    """Record every output as made by dvc.lock's settings; a line saying what was done."""
    settings = locked_settings()
    checked = refuse_damaged(roots)
    with tempfile.TemporaryDirectory(prefix="adopt-") as folder:
        configfile = Path(folder) / "locked-config.yaml"
        configfile.write_text(yaml.safe_dump(settings, sort_keys=False))
        done = subprocess.run(touch_command(configfile, snakemake_args), capture_output=True, text=True)
    if done.returncode != 0:
        raise AdoptError(f"snakemake --touch failed ({done.returncode}):\n{done.stdout[-3000:]}{done.stderr[-3000:]}")
    missing = [line for line in done.stderr.splitlines() if "not touched because they don't exist" in line]
    others = made_by_other_code(roots)
    return "\n".join([
        f"adopt: {checked} artifacts match their manifests; every job's outputs are recorded as made by the "
        f"settings in {LOCK}",
        *(f"adopt: not pulled, so snakemake makes it (and what reads it): {line.split(': ', 1)[-1]}"
          for line in missing),
        *([f"adopt: {len(others)} outputs were made by other code than this checkout's "
           "(`python -m condensation verify` lists them)"] if others else []),
        "adopt: `snakemake -n` lists what your changed settings remake",
    ])


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m condensation adopt", description=__doc__.splitlines()[0])
    parser.add_argument("--if-unrecorded", action="store_true",
                        help="do nothing where Snakemake already keeps records (dvc.yaml's stage uses it)")
    args = parser.parse_args(argv)
    if args.if_unrecorded and RECORDS.is_dir() and any(RECORDS.iterdir()):
        print("adopt: Snakemake keeps records here already; nothing adopted")
        return 0
    if args.if_unrecorded and not any(Path(root).exists() for root in DEFAULT_ROOTS):
        print("adopt: no outputs here yet; nothing adopted")  # a fresh clone's first `dvc repro`
        return 0
    try:
        print(adopt())
    except AdoptError as error:
        print(f"adopt: {error}", file=sys.stderr)
        return 1
    return 0
