"""Atomic writes and checksummed manifests.

Every artifact the pipeline writes goes through here, so a killed job never leaves a
half-written file under its final name, and a later rule can check what it consumes.
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from condensation.runtime.provenance import code_version

CACHE_ENV_VAR = "CONDENSATION_CACHE"
"""Where this package keeps what it builds once and reuses (converted GGUF models, built datasets,
the MKL library of ``runtime/mkl_on_amd.py``); default ``~/.cache/condensation``."""


def cache_dir() -> Path:
    """The package's cache directory (:data:`CACHE_ENV_VAR`)."""
    return Path(os.environ.get(CACHE_ENV_VAR) or Path.home() / ".cache" / "condensation")


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    Works for files and directories. The temporary name lives in the same directory, so
    the final ``os.replace`` is atomic on POSIX file systems.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
    # A writer killed mid-write (SIGKILL skips the cleanup below) leaves its temporary behind;
    # the next writer of the same artifact removes it. No two jobs write one artifact at once.
    for stale in final.parent.glob(f".{glob.escape(final.name)}.*.tmp"):
        shutil.rmtree(stale, ignore_errors=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=final.parent))
    target = tmp / final.name
    try:
        yield target
        if final.is_dir() and not final.is_symlink():
            # Directories cannot be replaced in one rename: move the old one aside first
            # (a rename, so the window without `final` is tiny), then delete it.
            os.replace(final, tmp / ".replaced")
        os.replace(target, final)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def write_text(path: str | os.PathLike, text: str) -> None:
    with atomic_path(path) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json(path: str | os.PathLike, obj: Any) -> None:
    write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=_json_default) + "\n")


def read_json(path: str | os.PathLike) -> Any:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def _json_default(obj: Any) -> Any:
    if hasattr(obj, "item"):  # numpy and torch scalars
        return obj.item()
    if hasattr(obj, "tolist"):
        return obj.tolist()
    if isinstance(obj, Path):
        return str(obj)
    raise TypeError(f"not JSON serialisable: {type(obj).__name__}")


def sha256_file(path: str | os.PathLike, chunk: int = 1 << 20) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(chunk), b""):
            digest.update(block)
    return digest.hexdigest()


DIRECTORY_MANIFEST = "manifest.json"
"""A directory artifact (a checkpoint, a model) carries its manifest inside, so that moving or
renaming the directory keeps the two together; a file artifact has a ``<name>.manifest.json``
beside it."""

REPAIR_HINT = "run `python -m condensation verify --repair` and then snakemake again to rebuild it"


def manifest_path(artifact: str | os.PathLike) -> Path:
    artifact = Path(artifact)
    if artifact.is_dir():
        return artifact / DIRECTORY_MANIFEST
    return artifact.with_name(artifact.name + ".manifest.json")


def _directory_checksums(directory: Path) -> dict[str, str]:
    return {
        path.relative_to(directory).as_posix(): sha256_file(path)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and path != directory / DIRECTORY_MANIFEST
    }


def write_manifest(artifact: str | os.PathLike, **fields: Any) -> Path:
    """Record the checksum of ``artifact`` (every file in it, for a directory), ``fields`` and the
    code that made it (``provenance.code_version``: ``python -m condensation verify`` lists what
    other code made).

    Call it on a directory before the directory is renamed into place, and on a file right after.
    """
    artifact = Path(artifact)
    path = manifest_path(artifact)
    if artifact.is_dir():
        checksums = {"files": _directory_checksums(artifact)}
    else:
        checksums = {"sha256": sha256_file(artifact)}

    write_json(path, {"artifact": artifact.name, **checksums, **fields, "code": code_version()})
    return path


class CorruptArtifactError(RuntimeError):
    """An artifact does not match the checksum its manifest recorded, or has no manifest."""


def verify_manifest(artifact: str | os.PathLike) -> dict[str, Any]:
    """Return the manifest of ``artifact`` after checking it against the recorded checksums.

    Raises ``CorruptArtifactError`` naming the artifact (and, in a directory, the first bad
    file) if the manifest is missing or anything differs: truncated, changed, or removed.
    """
    artifact = Path(artifact)
    if not artifact.exists():
        raise FileNotFoundError(f"artifact missing: {artifact}")
    path = manifest_path(artifact)
    if not path.exists():
        raise CorruptArtifactError(f"{artifact}: no manifest at {path}; it was not completely written. {REPAIR_HINT}")
    try:
        manifest = read_json(path)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise CorruptArtifactError(f"{artifact}: its manifest {path} is unreadable ({error}). {REPAIR_HINT}") from error
    if artifact.is_dir():
        expected = manifest.get("files", {})
        actual = _directory_checksums(artifact)
        for name, checksum in expected.items():
            if name not in actual:
                raise CorruptArtifactError(f"{artifact}: {name} is missing. {REPAIR_HINT}")
            if actual[name] != checksum:
                raise CorruptArtifactError(
                    f"{artifact}: {name} has checksum {actual[name][:12]}, its manifest says {checksum[:12]}; "
                    f"the file is truncated or was changed. {REPAIR_HINT}"
                )
    else:
        actual = sha256_file(artifact)
        if actual != manifest.get("sha256"):
            raise CorruptArtifactError(
                f"{artifact}: checksum {actual[:12]} does not match its manifest "
                f"({str(manifest.get('sha256'))[:12]}); the file is truncated or was changed. {REPAIR_HINT}"
            )
    return manifest
