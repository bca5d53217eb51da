"""A run directory's layout on disk, torch-free: the names of its checkpoints (``step-NNNNNNN``), its
final model, summary and progress files, and the choice of a checkpoint. Planning, rules and stages
read it; only ``training.checkpointing`` writes it."""

from __future__ import annotations

import math
import re
import shutil
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from condensation.runtime.io import read_json, write_json

STEP_DIGITS = 7


STEP_PATTERN = rf"step-\d{{{STEP_DIGITS}}}"
"""Regular expression of a checkpoint name."""


_STEP_NAME = re.compile(rf"^step-(\d{{{STEP_DIGITS}}})$")


def step_name(step: int) -> str:
    """``49 -> "step-0000049"``: zero-padded so that names sort in step order."""
    if step < 0:
        raise ValueError(f"a checkpoint step is >= 0, got {step}")
    return f"step-{step:0{STEP_DIGITS}d}"


def parse_step(name: str | Path) -> int:
    """The step of a checkpoint name or path (a file suffix such as ``.npz`` is ignored)."""
    stem = Path(name).name.split(".", 1)[0]
    match = _STEP_NAME.match(stem)
    if match is None:
        raise ValueError(f"{name!s} is not a checkpoint name like {step_name(0)}")
    return int(match.group(1))


SUMMARY_NAME = "train_summary.json"
"""Written last inside ``final/``: its presence marks a finished run."""


PROGRESS_NAME = "progress.json"
"""``TrainState`` and the run's identity, written last inside ``state/``."""


CHECKPOINT_INFO_NAME = "checkpoint.json"
"""The log row of a checkpoint's step (validation loss included), inside the checkpoint."""


class RunDir:
    """Where a training run keeps its files::

        run.json               the run's resolved plan (config.runs.RunPlan), written by the workflow
        log.csv                one row per step (step 0 = the model before training, val loss only)
        checkpoints/step-N/    evaluation checkpoints: save_pretrained (+ tokenizer), checkpoint.json
        checkpoints.json       index of the evaluation checkpoints, written when the run ends
        dvclive/               per-step metric series (progress.open_tracker): dvc plots reads them live
        state/                 the latest resumable state: model.safetensors, optimizer.pt (or, for a
                               run in FSDP shards, shards/: a file per rank), rng.pt, progress.json,
                               log.csv (the log up to that step)
        final/                 the trained model (+ tokenizer) and train_summary.json (= done marker)
    """

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.plan = self.root / "run.json"
        self.log = self.root / "log.csv"
        self.checkpoints = self.root / "checkpoints"
        self.index = self.root / "checkpoints.json"
        self.state = self.root / "state"
        self.set_aside = self.root / "set_aside"
        """States that cannot continue this run (another run's, other code's, a finished run's),
        kept rather than deleted, each with a ``.why.txt`` beside it."""
        self.final = self.root / "final"
        self.summary = self.final / SUMMARY_NAME

    def __repr__(self) -> str:
        return f"RunDir({str(self.root)!r})"

    def checkpoint(self, step: int) -> Path:
        return self.checkpoints / step_name(step)

    def checkpoint_steps(self) -> list[int]:
        """Steps of the checkpoints on disk, ascending."""
        return sorted(parse_step(path) for path in self.checkpoints.glob("step-*") if _STEP_NAME.match(path.name))

    def is_finished(self) -> bool:
        return self.summary.exists()

    def remove_stale_temporaries(self) -> None:
        """Temporary directories of ``atomic_path`` (``.<name>.<random>.tmp``) that a kill left
        behind mid-write: never valid, possibly model-sized."""
        for parent in (self.root, self.checkpoints):
            for path in parent.glob(".*.tmp"):
                shutil.rmtree(path, ignore_errors=True)

    def write_index(self, steps: Iterable[int]) -> None:
        """``checkpoints.json``: the checkpoints of ``steps`` in step order, with the tokens and
        validation loss their ``checkpoint.json`` recorded, and the step ``select_step`` chooses
        (null when no checkpoint after step 0 has a finite validation loss)."""
        entries = []
        for step in sorted(steps):
            info = read_json(self.checkpoint(step) / CHECKPOINT_INFO_NAME)
            entries.append(
                {"step": step, "name": step_name(step), "tokens": info["tokens"], "val_loss": info["val_loss"]}
            )
        try:
            selected = select_step((entry["step"], entry["val_loss"]) for entry in entries)
        except ValueError:
            selected = None
        write_json(self.index, {"checkpoints": entries, "selected": selected})

    def read_index(self) -> list[dict[str, Any]]:
        """The entries of ``checkpoints.json`` (step, name, tokens, val_loss), in step order."""
        return read_json(self.index)["checkpoints"]

    def selected_step(self) -> int:
        """The step ``select_step`` chose when the run ended, as the index records it."""
        selected = read_json(self.index)["selected"]
        if selected is None:
            raise ValueError(f"{self.index}: no checkpoint after step 0 has a finite validation loss to select")
        return selected


def select_step(val_losses: Mapping[int, float | None] | Iterable[tuple[int, float | None]]) -> int:
    """The checkpoint step with the lowest validation loss; ties go to the earliest step.

    Step 0 is never chosen: it is the model before (mid-)training, reported on its own. Steps
    without a finite validation loss are skipped. The choice never looks at a test score (the
    reference code picked the checkpoint with the best test scores, which is optimistic).
    """
    pairs = val_losses.items() if isinstance(val_losses, Mapping) else val_losses
    candidates = [(loss, step) for step, loss in pairs if step > 0 and loss is not None and math.isfinite(loss)]
    if not candidates:
        raise ValueError("no checkpoint after step 0 has a validation loss")
    return min(candidates)[1]
