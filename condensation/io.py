"""Atomic writes and checksummed manifests.

Every artifact the pipeline writes goes through here, so a killed job never leaves a
half-written file under its final name, and a later rule can check what it consumes.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any, Iterator


@contextlib.contextmanager
def atomic_path(path: str | os.PathLike) -> Iterator[Path]:
    """Yield a temporary path beside ``path``; rename it onto ``path`` only on success.

    Works for files and directories. The temporary name lives in the same directory, so
    the final ``os.replace`` is atomic on POSIX file systems.
    """
    final = Path(path)
    final.parent.mkdir(parents=True, exist_ok=True)
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


def manifest_path(artifact: str | os.PathLike) -> Path:
    artifact = Path(artifact)
    return artifact.with_name(artifact.name + ".manifest.json")


def write_manifest(artifact: str | os.PathLike, **fields: Any) -> Path:
    """Write ``<artifact>.manifest.json`` holding the artifact's checksum and ``fields``."""
    path = manifest_path(artifact)
    write_json(path, {"artifact": Path(artifact).name, "sha256": sha256_file(artifact), **fields})
    return path


class CorruptArtifactError(RuntimeError):
    """An artifact does not match the checksum its manifest recorded."""


def verify_manifest(artifact: str | os.PathLike) -> dict[str, Any]:
    """Return the manifest of ``artifact`` after checking the file against its checksum."""
    artifact = Path(artifact)
    path = manifest_path(artifact)
    if not artifact.exists():
        raise FileNotFoundError(f"artifact missing: {artifact}")
    if not path.exists():
        raise CorruptArtifactError(f"{artifact}: no manifest at {path}; rebuild it")
    manifest = read_json(path)
    actual = sha256_file(artifact)
    if actual != manifest.get("sha256"):
        raise CorruptArtifactError(
            f"{artifact}: checksum {actual[:12]} does not match its manifest "
            f"({str(manifest.get('sha256'))[:12]}); the file is truncated or was changed, rebuild it"
        )
    return manifest
