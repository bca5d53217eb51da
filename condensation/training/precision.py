"""The precision a training run uses: an explicit setting, what ``accelerate config`` chose, or bf16
where the device supports it."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

import torch
import yaml
from accelerate.commands.config.config_args import default_config_file


def resolve_mixed_precision(
    setting: str, environ: Mapping[str, str] | None = None, accelerate_config: str | Path | None = None
) -> tuple[str, str]:
    """The precision a run trains in, and what decided it (for the log): an explicit ``bf16`` or
    ``no`` in our config; with ``auto``, what ``accelerate config`` chose (``environ``'s
    ``ACCELERATE_MIXED_PRECISION``, which ``accelerate launch`` exports, else the config file
    ``accelerate config`` writes, by default accelerate's own); else bf16 on a CUDA device that
    supports it; else ``no``. See ``TrainConfig.mixed_precision``."""
    if setting != "auto":
        return setting, "train.mixed_precision"
    chosen, source = _accelerate_mixed_precision(os.environ if environ is None else environ, accelerate_config)
    if chosen is not None:
        if chosen not in ("bf16", "no"):
            raise ValueError(
                f"{source} asks for {chosen!r} mixed precision, which this loop does not run (fp16's loss "
                "scaler would trip the NaN guard); set train.mixed_precision to 'bf16' or 'no'"
            )
        return chosen, source
    if torch.cuda.is_available() and torch.cuda.is_bf16_supported():
        return "bf16", "auto: a CUDA device with bf16"
    return "no", "auto: no CUDA device with bf16"


def _accelerate_mixed_precision(environ: Mapping[str, str], config_file: str | Path | None) -> tuple[str | None, str]:
    """What ``accelerate config`` chose, and where it was read; ``(None, "")`` when it chose nothing."""
    config_file = Path(default_config_file if config_file is None else config_file)
    exported = environ.get("ACCELERATE_MIXED_PRECISION", "").lower()
    # `accelerate launch` exports "no" when neither a flag nor a config file chose: not a choice.
    if exported and (exported != "no" or config_file.is_file()):
        return exported, f"ACCELERATE_MIXED_PRECISION={exported} (accelerate launch)"
    if config_file.is_file():
        chosen = (yaml.safe_load(config_file.read_text()) or {}).get("mixed_precision")
        chosen = "no" if chosen is False else chosen  # an unquoted `no` reads as false in YAML 1.1
        if chosen:
            return str(chosen).lower(), f"accelerate config file {config_file}"
    return None, ""
