"""One function per workflow rule, grouped like the rule files (``rules/<stage>.smk`` ->
``stages/<stage>.py``): paths and settings in, artifacts out.

``workflow_scripts/*.py`` call one of these by keyword with what Snakemake hands them. Nothing
here knows about Snakemake, so every stage also runs from plain Python.

Only the ``fetch_*`` stages download (the workflow runs them where the network is: on the
submitting node of a cluster); every other stage runs with the Hugging Face libraries offline,
reading what those fetched into the cache (``logged(..., offline=True)``, the default).
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
from collections.abc import Iterator
from pathlib import Path

from condensation.runtime.gpus import claim_gpus

log = logging.getLogger("condensation")

OFFLINE_VARIABLES = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE", "TRANSFORMERS_OFFLINE")
NO_BARS_VARIABLES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS", "TQDM_DISABLE")
"""A bar in a log file is a run of carriage returns: stages log lines instead (progress.py)."""


def go_offline() -> None:
    """Forbid the Hugging Face libraries any download in this process: compute nodes of a
    cluster often have no network, and a job that needs one should fail at once, naming what is
    missing from the cache, rather than hang."""
    for variable in OFFLINE_VARIABLES:
        os.environ[variable] = "1"
    if "huggingface_hub" in sys.modules:  # already imported: it read the variables at import
        # deferred: only once something imported it (it read the variables at its import)
        import huggingface_hub.constants  # noqa: PLC0415

        huggingface_hub.constants.HF_HUB_OFFLINE = True


@contextlib.contextmanager
def logged(log_path: str | Path | None, offline: bool = True, gpus: int = 0) -> Iterator[None]:
    """Send this stage's logging, stdout and stderr to ``log_path`` (Snakemake's ``log:``);
    with ``offline`` (every stage but the fetch stages), forbid downloads first; with ``gpus``,
    claim that many of this machine's GPUs (:func:`condensation.runtime.gpus.claim_gpus`)."""
    if offline:
        go_offline()
    if log_path is not None or not sys.stderr.isatty():  # a log file (ours, or the rule's redirection)
        for variable in NO_BARS_VARIABLES:  # read by the libraries when they are imported, later
            os.environ[variable] = "1"
    if log_path is None:
        logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
        claim_gpus(gpus)
        yield
        return
    Path(log_path).parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w", buffering=1) as stream:
        handler = logging.StreamHandler(stream)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
        root = logging.getLogger()
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        with contextlib.redirect_stdout(stream), contextlib.redirect_stderr(stream):
            try:
                claim_gpus(gpus)
                yield
            except BaseException:
                log.exception("stage failed")
                raise
            finally:
                root.removeHandler(handler)
