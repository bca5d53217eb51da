"""The package's command line: ``python -m condensation COMMAND [OPTIONS]``.

    measure MODEL [MODEL ...] [--texts FILE | --dataset NAME] [...]
                                    a model's condensation layer by layer (measurement; --help)
    verify [--repair] [ROOTS ...]   check every artifact against its manifest (runtime.verify)
    objectives                      the registered training objectives, their options (config.objectives)
    adopt [--if-unrecorded]         after `dvc pull`: record the pulled outputs for Snakemake (runtime.adopt)
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

# command -> the module whose ``main(argv)`` runs it; imported only when called
COMMANDS = {
    "adopt": "condensation.runtime.adopt",
    "measure": "condensation.measurement",
    "objectives": "condensation.config.objectives",
    "verify": "condensation.runtime.verify",
}


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        print(__doc__.strip(), file=sys.stderr)
        return 0 if argv[:1] in (["-h"], ["--help"]) else 2
    return importlib.import_module(COMMANDS[argv[0]]).main(argv[1:])


if __name__ == "__main__":
    sys.exit(main())
