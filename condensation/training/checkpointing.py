"""A training run's checkpoints and its resumable state (the directory's layout and checkpoint
names: :mod:`condensation.runtime.run_dir`).

``CheckpointManager`` writes and reads what
outlives the training process: evaluation checkpoints, ``final/``, the checkpoint index, and the
resumable state (weights, optimizer, every rank's RNG states, ``TrainState``), with the check that
a resumed run is the run that saved the state: a state saved by another config, other code or a
finished run is set aside (``set_aside/``, kept), and the run starts over.

Every directory is written under a temporary name and renamed into place (``io.atomic_path``), so
a killed job never leaves a half-written checkpoint or state under its final name.

Nothing here imports torch, NumPy or accelerate at module level (nor ``training.parallel``, which
does), so the workflow can plan with this module; the functions that need them import them when
called.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import random
import shutil
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from condensation import ln_scaling as lns
from condensation.runtime.io import (
    CorruptArtifactError,
    atomic_path,
    read_json,
    verify_manifest,
    write_json,
    write_manifest,
)
from condensation.runtime.run_dir import (
    CHECKPOINT_INFO_NAME,
    PROGRESS_NAME,
    SUMMARY_NAME,
    RunDir,
)

if TYPE_CHECKING:
    import torch
    from accelerate import Accelerator

    from condensation.training.parallel import Replicated, Sharded

    ModelLayout = Replicated | Sharded


# ----------------------------------------------------------------------------- resumable state


@dataclass
class TrainState:
    """Where a run stands, saved as ``progress.json`` inside ``state/`` (same keys since the first
    runs, so older states stay readable)."""

    step: int = 0
    """Optimizer steps done (global: the same on every rank)."""
    blocks_consumed: int = 0
    """Position in the endless stream of training blocks (all ranks)."""
    elapsed_s: float = 0.0
    """Training time so far, carried over a resume; updated when the state is saved."""
    train_loss: float | None = None
    """Total loss of the last step."""
    val_loss: float | None = None
    """Validation loss at the last evaluation checkpoint."""

    @classmethod
    def from_progress(cls, progress: Mapping[str, Any]) -> TrainState:
        return cls(**{field.name: progress[field.name] for field in dataclasses.fields(cls)})


def capture_rng_state(device: torch.device) -> dict[str, Any]:
    """This process's RNG states (Python, NumPy, torch, and CUDA on a CUDA device), in types
    ``torch.load(weights_only=True)`` accepts."""
    # deferred: see the module docstring
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    name, keys, pos, has_gauss, gauss = np.random.get_state()
    state = {
        "python": random.getstate(),
        "numpy": (name, keys.tolist(), pos, has_gauss, gauss),
        "torch": torch.get_rng_state(),
    }
    if device.type == "cuda":
        state["cuda"] = torch.cuda.get_rng_state(device)
    return state


def restore_rng_state(state: Mapping[str, Any], device: torch.device) -> None:
    """Undo ``capture_rng_state``: the RNGs continue exactly where they were captured."""
    # deferred: see the module docstring
    import numpy as np  # noqa: PLC0415
    import torch  # noqa: PLC0415

    version, internal, gauss_next = state["python"]
    random.setstate((version, tuple(internal), gauss_next))
    name, keys, pos, has_gauss, gauss = state["numpy"]
    np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    torch.set_rng_state(state["torch"])
    if device.type == "cuda":
        torch.cuda.set_rng_state(state["cuda"], device)


def resume_mismatch(saved: Mapping[str, Any], identity: Mapping[str, Any]) -> str | None:
    """Why a state saved as ``saved`` (progress.json) cannot continue the run that ``identity``
    describes (config, world size, data shape, baseline, code): every differing field with both
    values; None when it can."""
    now = _identity_fields(identity)
    before = _identity_fields({key: saved[key] for key in identity if key in saved})
    differing = sorted(key for key in now if before.get(key) != now[key])
    if not differing:
        return None
    return "; ".join(f"{key}: saved {before.get(key)!r}, now {now[key]!r}" for key in differing)


def _identity_fields(identity: Mapping[str, Any]) -> dict[str, Any]:
    """``identity`` as it reads back from JSON (tuples become lists), flattened so that a mismatch
    names the field: ``config.lr``, ``code.source_sha256``, ``world_size``."""
    identity = json.loads(json.dumps(identity))
    nested = {f"{group}.{key}": value for group in ("config", "code") for key, value in identity.pop(group, {}).items()}
    return nested | identity


class CheckpointManager:
    """Writes and reads a run's checkpoints and resumable state, under ``accelerate`` (DDP) as well
    as in a single process: only the main process writes, and every call that writes ends with
    ``wait_for_everyone``, so all ranks leave it together.

    ``identity`` is what a resumed run must share with the run that saved the state (see
    ``resume_mismatch``); its ``train_blocks_shape`` also places the data position of a
    state in epochs. ``module`` arguments are the unwrapped model (no DDP, no compiled wrapper).
    """

    def __init__(
        self, run_dir: RunDir, accelerator: Accelerator, identity: Mapping[str, Any], layout: ModelLayout | None = None
    ) -> None:
        # deferred: see the module docstring
        from condensation.training.parallel import Replicated  # noqa: PLC0415

        self.run_dir = run_dir
        self.accelerator = accelerator
        self.identity = dict(identity)
        self.layout = Replicated() if layout is None else layout
        """How the processes hold the model (``training.parallel``): whole, or in shards."""

    def remove_stale_temporaries(self) -> None:
        if self.accelerator.is_main_process:
            self.run_dir.remove_stale_temporaries()
        self.accelerator.wait_for_everyone()

    def has_state(self) -> bool:
        return (self.run_dir.state / PROGRESS_NAME).exists()

    def set_aside_unusable_state(self) -> str | None:
        """A state only continues an interrupted attempt of this very run. One that cannot (saved by
        another config, world size, data, baseline or code, or damaged) is moved to ``set_aside/``;
        returns why and where, for the log, or None when the state is usable or there is none."""
        note = None
        if self.accelerator.is_main_process and self.has_state():
            try:
                verify_manifest(self.run_dir.state)
                reason = resume_mismatch(read_json(self.run_dir.state / PROGRESS_NAME), self.identity)
            except CorruptArtifactError as error:
                reason = f"damaged ({error})"
            if reason is not None:
                note = f"the state on disk was saved by another run ({reason}); kept in {self._set_aside(reason)}"
        self.accelerator.wait_for_everyone()
        return note

    def set_aside_finished_state(self) -> None:
        """After ``final/``: the finished run's state goes to ``set_aside/finished-state`` (the last
        finished attempt's only), so a rerun of the job (``--forcerun``) trains again."""
        if self.accelerator.is_main_process and self.run_dir.state.exists():
            self._set_aside("the run finished; a later run of this directory trains again", "finished-state")
        self.accelerator.wait_for_everyone()

    def _set_aside(self, reason: str, name: str | None = None) -> Path:
        set_aside = self.run_dir.set_aside
        set_aside.mkdir(exist_ok=True)
        if name is None:
            name = next(f"state-{k}" for k in range(1, 10**6) if not (set_aside / f"state-{k}").exists())
        target = set_aside / name
        if target.exists():
            shutil.rmtree(target)
        self.run_dir.state.rename(target)
        (set_aside / f"{name}.why.txt").write_text(reason + "\n")
        return target

    def save_checkpoint(self, step: int, module: Any, tokenizer: Any, info: Mapping[str, Any]) -> None:
        """The evaluation checkpoint of ``step``, with ``info`` (its log row) as checkpoint.json."""
        self._save_pretrained(self.run_dir.checkpoint(step), module, tokenizer, CHECKPOINT_INFO_NAME, info)

    def save_final(self, module: Any, tokenizer: Any, summary: Mapping[str, Any], steps: Sequence[int]) -> None:
        """The end of a run: the index of the evaluation checkpoints ``steps``, then ``final/``
        with ``summary``. The index comes first so that a finished run (``final/`` present) always
        has one; a kill between the two resumes, rewrites the same index and then writes final/."""
        if self.accelerator.is_main_process:
            self.run_dir.write_index(steps)
        self._save_pretrained(self.run_dir.final, module, tokenizer, SUMMARY_NAME, summary)

    def _save_pretrained(
        self, path: Path, module: Any, tokenizer: Any, json_name: str, info: Mapping[str, Any]
    ) -> None:
        """``save_pretrained`` (+ tokenizer, + ``info`` as JSON, written last) into ``path`` atomically:
        a plain Hugging Face directory, whole weights also when the model is sharded. An LN-scaled
        model's constants are folded into the saved norms (``condensation.ln_scaling``), so that a
        plain ``from_pretrained`` loads the function that trained; the resumable state keeps the
        raw parameters (``save_state``)."""
        state_dict = self.layout.full_state_dict(module)  # a collective when sharded: every rank
        if self.accelerator.is_main_process:
            with atomic_path(path) as tmp:
                module.save_pretrained(tmp, state_dict=lns.saved_state_dict(module, state_dict))
                if tokenizer is not None:
                    tokenizer.save_pretrained(tmp)
                write_json(tmp / json_name, info)
                write_manifest(tmp, kind="checkpoint", **lns.manifest_fields(module))
        self.accelerator.wait_for_everyone()

    def save_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer, state: TrainState) -> None:
        """Everything needed to continue bit-identically, and the log as of this step (flush it
        first). Our own format rather than ``accelerator.save_state``: its loader silently ignores
        RNG states it cannot restore, which would break exact resume without a word. The other
        ranks contribute their RNG states through a gather (and, when sharded, write their own
        shards); one atomic rename puts it in place."""
        # deferred: see the module docstring
        import torch  # noqa: PLC0415
        from accelerate.utils import gather_object  # noqa: PLC0415

        rng_states = gather_object([capture_rng_state(self.accelerator.device)])  # one entry per rank
        main = self.accelerator.is_main_process
        with self._written_together(self.run_dir.state) as tmp:
            self.layout.save_state(module, optimizer, tmp, main)
            if main:
                epoch, position = divmod(state.blocks_consumed, self.identity["train_blocks_shape"][0])
                torch.save(rng_states, tmp / "rng.pt")
                shutil.copyfile(self.run_dir.log, tmp / "log.csv")
                progress = dataclasses.asdict(state) | self.identity | {"epoch": epoch, "position": position}
                write_json(tmp / PROGRESS_NAME, progress)

    @contextlib.contextmanager
    def _written_together(self, path: Path) -> Iterator[Path]:
        """A new directory that every rank may write into, put in place as ``path`` (with its
        manifest) by the main process once all ranks are done: ``io.atomic_path`` for many writers."""
        # deferred: see the module docstring
        from accelerate.utils import broadcast_object_list  # noqa: PLC0415

        main = self.accelerator.is_main_process
        with (atomic_path(path) if main else contextlib.nullcontext()) as tmp:
            if main:
                tmp.mkdir()
            shared = Path(broadcast_object_list([str(tmp) if main else None])[0])
            yield shared
            self.accelerator.wait_for_everyone()
            if main:
                write_manifest(shared, kind="training_state")
        self.accelerator.wait_for_everyone()

    def load_state(self, module: torch.nn.Module, optimizer: torch.optim.Optimizer) -> TrainState:
        """Restore weights, optimizer and this rank's RNG states from ``state/`` after checking its
        identity; put back the log as it was at the saved step. Call it after
        ``set_aside_unusable_state``, which also checked the state's manifest (hashing a large
        state a second time here would double its cost)."""
        # deferred: see the module docstring
        import torch  # noqa: PLC0415

        state_dir = self.run_dir.state
        saved = read_json(state_dir / PROGRESS_NAME)
        mismatch = resume_mismatch(saved, self.identity)
        if mismatch is not None:  # set_aside_unusable_state moves such a state first
            raise ValueError(f"{state_dir} was saved by another run ({mismatch})")
        self.layout.load_state(module, optimizer, state_dir)
        rng_states = torch.load(state_dir / "rng.pt", weights_only=True)
        restore_rng_state(rng_states[self.accelerator.process_index], self.accelerator.device)
        if self.accelerator.is_main_process:
            # Rows written after the saved step (before a kill) are dropped; training repeats
            # those steps and writes them again, identically.
            with atomic_path(self.run_dir.log) as tmp:
                shutil.copyfile(state_dir / "log.csv", tmp)
        self.accelerator.wait_for_everyone()
        return TrainState.from_progress(saved)
