"""The on-disk layout of the stand-in hub, shared by the builder and the server.

``<root>/<kind>/<org>/<name>/<revision>/<files>`` with ``kind`` ``models`` or ``datasets``: every
directory at revision depth is a branch of that repository, holding a complete snapshot. A
revision's commit sha is a hash of the repository id, the branch name and its files' contents,
so it is stable across builds and servers and changes when the content does.
"""

from __future__ import annotations

import gzip
import hashlib
import io
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

KINDS = ("models", "datasets")
LFS_SUFFIXES = (".safetensors", ".parquet", ".gz", ".bin")
"""Files the real Hub keeps in LFS/Xet storage; their tree entries carry an ``lfs`` block."""


def revision_dir(root: str | Path, kind: str, repo_id: str, revision: str) -> Path:
    org, name = repo_id.split("/")
    return Path(root) / kind / org / name / revision


@dataclass(frozen=True)
class FileEntry:
    path: str
    size: int
    sha256: str
    blob_id: str
    """Git's blob id (sha1 of ``blob <size>\\0`` + content), as the Hub reports ``oid``."""

    @property
    def is_lfs(self) -> bool:
        return self.path.endswith(LFS_SUFFIXES)


@dataclass(frozen=True)
class Snapshot:
    """One revision of one repository: its commit sha and files."""

    repo_id: str
    revision: str
    directory: Path
    commit: str
    files: dict[str, FileEntry]


def file_entry(path: Path, relative: str) -> FileEntry:
    data = path.read_bytes()
    blob = hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()
    return FileEntry(relative, len(data), hashlib.sha256(data).hexdigest(), blob)


def read_snapshot(kind: str, repo_id: str, revision: str, directory: Path) -> Snapshot:
    files = {
        rel: file_entry(path, rel)
        for path in sorted(directory.rglob("*"))
        if path.is_file() and not (rel := path.relative_to(directory).as_posix()).startswith(".")
    }
    digest = hashlib.sha1(f"{kind}/{repo_id}@{revision}\n".encode())
    for entry in files.values():
        digest.update(f"{entry.path} {entry.sha256}\n".encode())
    return Snapshot(repo_id, revision, directory, digest.hexdigest(), files)


def scan(root: str | Path) -> dict[tuple[str, str], dict[str, Snapshot]]:
    """Every repository under ``root``: ``{(kind, repo_id): {branch: snapshot}}``."""
    repos: dict[tuple[str, str], dict[str, Snapshot]] = {}
    for kind in KINDS:
        for directory in sorted(Path(root, kind).glob("*/*/*")):
            if directory.is_dir():
                repo_id = f"{directory.parent.parent.name}/{directory.parent.name}"
                snapshot = read_snapshot(kind, repo_id, directory.name, directory)
                repos.setdefault((kind, repo_id), {})[directory.name] = snapshot
    return repos


# --------------------------------------------------------------------------------------------
# Writing dataset repositories
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class DatasetConfig:
    """One config of a dataset repository: rows per split, with their features."""

    name: str
    splits: Mapping[str, list[dict[str, Any]]]
    columns: dict[str, Any]
    """Column types in :func:`features`' compact form; the parquet files carry the resulting
    ``datasets.Features``, so class labels keep their names."""
    default: bool = False


def features(spec: dict[str, Any]):
    """``datasets.Features`` from a compact spec: a dtype string, ``[inner]`` for a list, a dict
    for a struct, a tuple of names for a class label."""
    import datasets

    def convert(value):
        if isinstance(value, dict):
            return {key: convert(inner) for key, inner in value.items()}
        if isinstance(value, list):
            return datasets.List(convert(value[0]))
        if isinstance(value, tuple):
            return datasets.ClassLabel(names=list(value))
        return datasets.Value(value)

    return datasets.Features({key: convert(value) for key, value in spec.items()})


def _parquet_bytes(rows: list[dict[str, Any]], schema: Any) -> bytes:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.Table.from_pylist(rows, schema=schema.arrow_schema)
    buffer = io.BytesIO()
    pq.write_table(table, buffer, compression="zstd")
    return buffer.getvalue()


def _json_gz_bytes(rows: list[dict[str, Any]]) -> bytes:
    lines = "".join(json.dumps(row, ensure_ascii=False) + "\n" for row in rows).encode()
    return gzip.compress(lines, mtime=0)  # mtime 0: the same rows give the same bytes


def dataset_card(repo_id: str, configs: Iterable[dict[str, Any]], note: str) -> str:
    """A README whose YAML header declares the configs and their data files, as on the Hub."""
    header = yaml.safe_dump({"configs": list(configs)}, sort_keys=False, allow_unicode=True)
    return f"---\n{header}---\n\n# {repo_id} (stand-in)\n\n{note}\n"


def write_dataset_repo(root: str | Path, repo_id: str, configs: list[DatasetConfig], note: str) -> Path:
    """Write each config's splits as ``<config>/<split>-00000-of-00001.parquet`` and the README."""
    directory = revision_dir(root, "datasets", repo_id, "main")
    card_configs = []
    for config in configs:
        schema, data_files = features(config.columns), []
        for split, rows in config.splits.items():
            relative = f"{config.name}/{split}-00000-of-00001.parquet"
            write_bytes(directory / relative, _parquet_bytes(rows, schema))
            data_files.append({"split": split, "path": relative})
        card_configs.append({"config_name": config.name, "data_files": data_files,
                             **({"default": True} if config.default else {})})
    write_bytes(directory / "README.md", dataset_card(repo_id, card_configs, note).encode())
    return directory


C4_SHARDS = {"train": 1024, "validation": 8}
"""How many shards the real allenai/c4 ``en`` config splits each split into."""


def write_json_lines_repo(
    root: str | Path, repo_id: str, config: str, splits: Mapping[str, list[dict[str, Any]]], note: str
) -> Path:
    """A dataset kept as gzipped JSON lines matched by a glob, as C4 is, in shards named as C4's:
    ``<config>/c4-train.00000-of-01024.json.gz``, ``<config>/c4-validation.00000-of-00008.json.gz``
    (one shard of each: a config that picks C4's first shards by name picks these)."""
    directory = revision_dir(root, "datasets", repo_id, "main")
    data_files = []
    for split, rows in splits.items():
        shards = C4_SHARDS.get(split, 1)
        write_bytes(directory / f"{config}/c4-{split}.00000-of-{shards:05d}.json.gz", _json_gz_bytes(rows))
        data_files.append({"split": split, "path": f"{config}/c4-{split}.*.json.gz"})
    card = dataset_card(repo_id, [{"config_name": config, "default": True, "data_files": data_files}], note)
    write_bytes(directory / "README.md", card.encode())
    return directory


def write_bytes(path: Path, data: bytes) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(data)
