"""The dataset loader of the offline lm-eval tasks; a copy lies beside every task's YAML.

``tasks.write_local_task`` copies this file into the task directory, and each YAML names
``load_items`` as its ``custom_dataset`` through a ``!function task_data.load_items`` reference.
lm-eval imports such a module from the YAML's own directory, so the JSON-lines file is found
relative to the YAML, wherever the directory lies and whatever the working directory (the
``json`` dataset builder would resolve a relative ``data_files`` against the working directory).
The copy must run without this package installed: standard library and ``datasets`` only.
"""

import json
from pathlib import Path


def load_items(data_file: str, **_lm_eval_metadata):
    """The items of ``data_file`` (a JSON-lines file beside this module) as the ``test`` split.

    lm-eval calls a ``custom_dataset`` with the task's ``metadata`` and ``dataset_kwargs`` as
    keywords; only ``data_file`` (from ``dataset_kwargs``) is used.
    """
    # deferred: tasks.py imports this file to copy it; datasets is slow
    import datasets  # noqa: PLC0415

    path = Path(__file__).resolve().parent / data_file
    with path.open(encoding="utf-8") as lines:
        rows = [json.loads(line) for line in lines if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})
