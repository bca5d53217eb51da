"""Check every artifact the pipeline wrote against its manifest; optionally remove what is broken.

    python -m condensation verify                 # report, exit 1 if anything is corrupt
    python -m condensation verify --repair        # ... and remove it, so that snakemake rebuilds it

It also lists the outputs that other code than the running package made (each manifest records
the code that wrote it: ``runtime.provenance``), with the Snakemake command that rebuilds them.

Each artifact carries a manifest (``io.write_manifest``): a file has ``<name>.manifest.json``
beside it, a directory ``manifest.json`` inside. Rules check what they consume and stop with
``io.CorruptArtifactError``; this tool finds every such problem at once and, with ``--repair``,
deletes the smallest thing whose removal makes Snakemake rebuild it:

* the outermost corrupt artifact (a directory output whose files are fine one by one but not as
  a whole is removed whole, since Snakemake only sees the directory);
* for anything inside a training run (a directory holding ``log.csv``), the whole run: a
  checkpoint is only rewritten by training again, and training is deterministic, so the rerun
  gives the same files.
"""

from __future__ import annotations

import argparse
import json
import shutil
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

from condensation.runtime.io import (
    DIRECTORY_MANIFEST,
    CorruptArtifactError,
    manifest_path,
    verify_manifest,
)
from condensation.runtime.provenance import code_version, describe, same_code

DEFAULT_ROOTS = ("data", "models", "runs", "results")
SIDECAR_SUFFIX = ".manifest.json"
RUN_MARKER = "log.csv"


@dataclass(frozen=True)
class Problem:
    artifact: Path
    reason: str


def find_artifacts(roots: Iterable[str | Path]) -> Iterator[Path]:
    """Every artifact with a manifest under ``roots``, outer directories before their contents.

    Temporary names of interrupted atomic writes (``.<name>.<random>.tmp``) are skipped: they are
    never consumed, and the next write of that artifact removes them. So are manifests whose
    artifact is gone: a missing output is Snakemake's to notice.
    """
    for root in map(Path, roots):
        if not root.exists():
            continue
        for manifest in sorted(root.rglob("*.json")):
            if any(part.startswith(".") and part.endswith(".tmp") for part in manifest.parts):
                continue
            if manifest.name == DIRECTORY_MANIFEST:
                yield manifest.parent
            elif manifest.name.endswith(SIDECAR_SUFFIX):
                artifact = manifest.with_name(manifest.name.removesuffix(SIDECAR_SUFFIX))
                if artifact.exists():  # a missing output is Snakemake's to notice and rebuild
                    yield artifact


def _outer_first(roots: Iterable[str | Path]) -> list[Path]:
    return sorted(set(find_artifacts(roots)), key=lambda p: (len(p.parts), str(p)))


def check(roots: Iterable[str | Path]) -> tuple[int, list[Problem]]:
    """(number of artifacts checked, the corrupt ones); contents of a corrupt directory are not
    reported again."""
    checked, problems = 0, []
    for artifact in _outer_first(roots):
        if any(problem.artifact in artifact.parents for problem in problems):
            continue
        checked += 1
        try:
            verify_manifest(artifact)
        except CorruptArtifactError as error:
            problems.append(Problem(artifact, str(error)))
    return checked, problems


def made_by_other_code(roots: Iterable[str | Path]) -> list[tuple[Path, str]]:
    """The outermost artifacts under ``roots`` whose manifest names other code than the running
    package, each with that code in words; states set aside in a run (``set_aside/``) are not outputs."""
    found: list[tuple[Path, str]] = []
    for artifact in _outer_first(roots):
        if "set_aside" in artifact.parts or any(other in artifact.parents for other, _ in found):
            continue
        try:
            recorded = json.loads(manifest_path(artifact).read_text()).get("code")
        except (OSError, ValueError):
            continue  # unreadable: check() reports it
        if not same_code(recorded):
            found.append((artifact, describe(recorded)))
    return found


def rebuild_target(artifact: Path) -> Path:
    """The output to force so that Snakemake rebuilds ``artifact``: a training run's ``final/``
    (the run trains again) for anything inside a run, else the artifact itself."""
    run = removal_target(artifact)
    return run / "final" if run != artifact or (artifact / RUN_MARKER).is_file() else artifact


def removal_target(artifact: Path) -> Path:
    """What to delete so that Snakemake rebuilds ``artifact``: its training run if it lies in one."""
    for parent in (artifact, *artifact.parents):
        if (parent / RUN_MARKER).is_file() and (parent / "checkpoints").is_dir():
            return parent
    return artifact


def remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    else:
        path.unlink(missing_ok=True)
    sidecar = path.with_name(path.name + SIDECAR_SUFFIX)
    sidecar.unlink(missing_ok=True)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m condensation verify", description=__doc__.splitlines()[0])
    parser.add_argument("roots", nargs="*", default=list(DEFAULT_ROOTS), help="folders to scan (default: %(default)s)")
    parser.add_argument("--repair", action="store_true",
                        help="remove corrupt artifacts so that snakemake rebuilds them")
    args = parser.parse_args(argv)
    checked, problems = check(args.roots)
    for problem in problems:
        print(f"CORRUPT {problem.reason}")
    if args.repair:
        for target in sorted({removal_target(problem.artifact) for problem in problems}):
            remove(target)
            print(f"removed {target}")
    print(f"{checked} artifacts checked, {len(problems)} corrupt" + (", removed" if args.repair and problems else ""))
    _report_other_code(args.roots)
    return 1 if problems and not args.repair else 0


def _report_other_code(roots: Sequence[str]) -> None:
    others = made_by_other_code(roots)
    for artifact, code in others:
        print(f"OTHER CODE {artifact}: made by {code}")
    if others:
        targets = sorted({str(rebuild_target(artifact)) for artifact, _ in others})
        print(f"{len(others)} outputs were made by other code than the running {describe(code_version())}; "
              f"to rebuild them:\n  snakemake --cores all --force {' '.join(targets)}")

