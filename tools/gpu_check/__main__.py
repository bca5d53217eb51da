"""``python -m tools.gpu_check`` (from the repository root): the package's documentation says what it runs."""

import sys

from .cli import main

sys.exit(main())
