"""The repository the tests run from, and the pages whose commands, examples and links they test."""

from __future__ import annotations

from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DOC_PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
"""The front page and the docs pages: the commands, examples and links they show are tested."""
