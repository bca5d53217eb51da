"""A checkout's sources copied elsewhere: what a fresh clone holds, plus the work not committed yet.

Tools that run the workflow apart from the checkout (the rerun of seed sets) and the tests that
plan or run it copy the checkout here first, so that outputs, locks and Snakemake's records in
the checkout change nothing they find.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Collection
from pathlib import Path

DEBS = Path("resources/debs")
"""The offline text's Debian packages (tools/fetch_debs.sh): git-ignored, linked into a copy."""


def source_files(checkout: Path) -> list[str]:
    """The files git tracks or would track in ``checkout`` (ignored ones, the outputs, left out)."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=checkout,
                            check=True, capture_output=True).stdout
    return [name for name in listed.decode().split("\0") if name]


def copy_checkout(checkout: Path, target: Path, only: Collection[str] = ()) -> Path:
    """``checkout``'s source files into ``target``, and its resources/debs linked; returns ``target``.
    ``only``: the top-level files and folders to copy (all when empty).

    A file already in ``target`` with the same bytes is left as it is (its time too), so Snakemake
    reruns only what a change shapes when a copy is refreshed. A file deleted but not yet committed
    is skipped."""
    for name in source_files(checkout):
        if only and name.split("/")[0] not in only:
            continue
        source, destination = checkout / name, target / name
        if not source.is_file() or (destination.is_file() and destination.read_bytes() == source.read_bytes()):
            continue
        destination.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(source, destination)
    debs = checkout / DEBS
    if debs.is_dir() and not (target / DEBS).exists():
        (target / DEBS).parent.mkdir(parents=True, exist_ok=True)
        (target / DEBS).symlink_to(debs.resolve())
    return target
