"""What a call leaves in ``--out`` after every step: summary.json, summary.md and logs.tar.gz, all
rewritten, and each workflow step's records, so that a call stopped at its limit still returns
what finished."""

from __future__ import annotations

import io
import json
import tarfile
from pathlib import Path
from typing import Any

from .plan import Context
from .records import pack_records
from .report import render
from .targets import target_rows

LOG_TAIL_BYTES = 2 * 2**20
"""Each log in logs.tar.gz is cut to its last 2 MiB: what comes back from the lent machine is limited."""


def save_summary(ctx: Context, summary: dict[str, Any]) -> None:
    """summary.json, summary.md and logs.tar.gz under ``ctx.out``, all three rewritten, and each
    workflow step's records."""
    ctx.out.mkdir(parents=True, exist_ok=True)
    for step in summary["steps"].values():
        if step.get("records") and Path(step.get("work", "")).is_dir():
            step["records_left_out"] = pack_records(Path(step["work"]), ctx.out / step["records"])
    summary["targets"] = target_rows(summary["steps"], judged=summary["call"]["mode"] == "gpu")
    (ctx.out / "summary.json").write_text(json.dumps(summary, indent=2, default=str) + "\n")
    (ctx.out / "summary.md").write_text(render(summary))
    files = [
        ctx.work / "install.log",
        *sorted((ctx.work / "logs").glob("*")),
        *sorted((ctx.work / "benchmarks").glob("*")),
    ]
    with tarfile.open(ctx.out / "logs.tar.gz", "w:gz") as archive:
        for path in filter(Path.is_file, files):
            data = path.read_bytes()[-LOG_TAIL_BYTES:]
            info = tarfile.TarInfo(str(path.relative_to(ctx.work)))
            info.size, info.mtime = len(data), int(path.stat().st_mtime)
            archive.addfile(info, io.BytesIO(data))
