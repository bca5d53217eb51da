"""The built-in corpora: dataset sources that need no network, by name (a registry, like the
objectives': the schema's list of sources, the rules and the corpus stage read it)."""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass


@dataclass(frozen=True)
class Corpus:
    """A built-in corpus: a dataset ``source`` that needs no network."""

    package: str
    """The Debian package its text comes from (``tools/fetch_debs.sh`` downloads it)."""
    reader: str
    """``module:function`` giving ``{document: text}`` from the unpacked package; imported when used."""

    def read(self, unpacked_root: str | os.PathLike) -> dict[str, str]:
        module, _, function = self.reader.partition(":")
        return getattr(importlib.import_module(module), function)(unpacked_root)


CORPORA = {
    "austen": Corpus("r-cran-janeaustenr", "condensation.data.corpus:austen_novels"),
    "python_docs": Corpus("python3.11-doc", "condensation.data.corpus:python_docs"),
}
"""The built-in corpora by ``source`` name, like the objective registry: the schema's list of
sources, the rules and the corpus stage all read this one table."""
