"""Which code made an output: the package's version, its git commit, and a hash of its source.

Every manifest records :func:`code_version` (``io.write_manifest``), and a training run's resumable
state is only continued by the same code (``training.checkpointing``). The source hash covers every
``.py`` and ``.yaml`` file of the package, so uncommitted changes count, and an install without git
is identified as well as a checkout.
"""

from __future__ import annotations

import functools
import hashlib
import subprocess
from importlib import metadata
from pathlib import Path
from typing import Any

PACKAGE_ROOT = Path(__file__).resolve().parents[1]
SOURCE_SUFFIXES = (".py", ".yaml")


@functools.lru_cache(maxsize=1)
def code_version() -> dict[str, Any]:
    """``{"version", "commit", "source_sha256"}`` of the running package (computed once per process;
    ``commit`` is None outside a git checkout or before its first commit)."""
    return {"version": _package_version(), "commit": _git_commit(), "source_sha256": source_sha256()}


def source_sha256(root: Path = PACKAGE_ROOT) -> str:
    """One hash of the package's source files: their paths and bytes, in path order."""
    digest = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.suffix in SOURCE_SUFFIXES and "__pycache__" not in p.parts):
        digest.update(path.relative_to(root).as_posix().encode() + b"\0")
        digest.update(hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()


def same_code(recorded: Any) -> bool:
    """Whether a manifest's or a state's recorded ``code`` is the running code."""
    return isinstance(recorded, dict) and recorded.get("source_sha256") == code_version()["source_sha256"]


def describe(recorded: Any) -> str:
    """A recorded ``code`` in words, for messages."""
    if not isinstance(recorded, dict):
        return "code that recorded no version (older than provenance records)"
    commit = (recorded.get("commit") or "no commit")[:12]
    return f"condensation {recorded.get('version')} ({commit}, source {str(recorded.get('source_sha256'))[:12]})"


def _package_version() -> str | None:
    try:
        return metadata.version("condensation")
    except metadata.PackageNotFoundError:
        return None


def _git_commit() -> str | None:
    try:
        done = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=PACKAGE_ROOT, capture_output=True, text=True, timeout=10
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.strip() or None if done.returncode == 0 else None
