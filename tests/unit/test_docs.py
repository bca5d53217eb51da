"""The README and the docs pages point at things that exist: every relative link (and its #anchor)
resolves, and every repository path they quote in inline code is a file or folder of the checkout.

The commands they show are planned by tests/workflow/test_readme.py, their code examples run by
test_measurement.py and test_public_api.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.helpers.repo import DOC_PAGES, REPO

FRONT_PAGE_LINES = 250
"""The README is a front page: what this is, the two commands, what the default computes
and finds, where to go next; everything else lives in docs/."""

TRACKED_TOP_LEVEL = ("condensation", "rules", "tools", "configs", "tests", "benchmarks", "docs", "profiles",
                     "workflow_scripts", "stand_in_hub", "report", ".ci", ".dvc")
"""Folders of the checkout a page quotes paths under; results/, runs/, data/ and the like are written by
a run and absent from a fresh clone."""

PLACEHOLDER = re.compile(r"[{}<>*]|\.\.\.")
"""A quoted path with a wildcard or placeholder names a pattern, not a file."""


def page_id(page: Path) -> str:
    return str(page.relative_to(REPO))


def prose(text: str) -> str:
    """The page without its fenced code blocks (a link or path inside code is code's business)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.DOTALL | re.MULTILINE)


def anchors(text: str) -> set[str]:
    """GitHub's anchors of a page's headings: lower case, punctuation dropped, spaces to hyphens,
    a repeated heading numbered from -1."""
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#{1,6} +(.+?) *$", prose(text), flags=re.MULTILINE):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        count = seen.get(slug, 0)
        seen[slug] = count + 1
        if count:
            seen[f"{slug}-{count}"] = 1
    return set(seen)


def relative_links(text: str) -> list[str]:
    targets = re.findall(r"\]\(([^)\s]+)\)", prose(text))
    return [target for target in targets if not re.match(r"[a-z]+:", target)]


def quoted_paths(text: str) -> list[str]:
    """Inline-code spans that are a path under one of the checkout's own folders."""
    paths = []
    for span in re.findall(r"`([^`\n]+)`", prose(text)):
        candidate = span.strip().rstrip(":")
        if " " in candidate or PLACEHOLDER.search(candidate) or "/" not in candidate:
            continue
        candidate = candidate.rstrip("/")
        if candidate.split("/")[0] in TRACKED_TOP_LEVEL:
            paths.append(candidate)
    return paths


def test_the_anchor_rule_follows_github():
    text = "# Cluster and GPU runs\n## Table 4 at the paper's scale\n```\n# not a heading\n```\n## Notes\n## Notes\n"
    assert anchors(text) == {"cluster-and-gpu-runs", "table-4-at-the-papers-scale", "notes", "notes-1"}
    assert anchors("### `configs/paper.yaml`, the paper's setting\n") == {"configspaperyaml-the-papers-setting"}


def test_quoted_paths_skip_patterns_and_run_outputs():
    text = ("`condensation/geometry.py`, `rules/<stage>.smk`, `results/findings.md`, `configs/*.yaml`, "
            "`snakemake --cores all`, `docs/`, `tools/x.py ...`")
    assert quoted_paths(text) == ["condensation/geometry.py", "docs"]


def test_the_readme_is_a_front_page():
    lines = (REPO / "README.md").read_text().splitlines()
    assert len(lines) <= FRONT_PAGE_LINES, f"README.md has {len(lines)} lines; move a section to docs/"


@pytest.mark.parametrize("page", DOC_PAGES, ids=page_id)
def test_every_relative_link_resolves(page):
    text = page.read_text()
    broken = []
    for link in relative_links(text):
        path, _, anchor = link.partition("#")
        target = (page.parent / path).resolve() if path else page
        if not target.exists():
            broken.append(f"{link}: no such file")
        elif anchor and target.suffix == ".md" and anchor not in anchors(target.read_text()):
            broken.append(f"{link}: no heading with that anchor")
    assert not broken, f"{page_id(page)}: {broken}"


@pytest.mark.parametrize("page", DOC_PAGES, ids=page_id)
def test_every_quoted_repository_path_exists(page):
    missing = sorted({path for path in quoted_paths(page.read_text()) if not (REPO / path).exists()})
    assert not missing, f"{page_id(page)} quotes paths that do not exist: {missing}"


def test_the_docs_pages_are_all_linked_from_the_readme():
    linked = {(REPO / link.partition("#")[0]).resolve() for link in relative_links((REPO / "README.md").read_text())}
    unlinked = [page_id(page) for page in DOC_PAGES[1:] if page.resolve() not in linked]
    assert not unlinked, f"README.md's 'Where to go next' should list {unlinked}"


def decimals(text: str) -> set[str]:
    """The decimal numbers of a text, without their signs ("-0.217" and "+0.217" are "0.217")."""
    return set(re.findall(r"\d+\.\d+", text))


def test_the_readme_quotes_what_the_default_finds_from_its_dated_report():
    """The README's "What the default finds" (its table and bullets, before the rerun's paragraph)
    quotes the findings page of one run of the first command, kept as a dated report under
    benchmarks/results/ and linked there: every decimal number it gives is one of the report's,
    so a number copied by hand and left behind by a later run fails here."""
    readme = (REPO / "README.md").read_text()
    section = readme.split("## What the default finds", 1)[1].split("**Rerun in three seed sets", 1)[0]
    reports = re.findall(r"\]\((benchmarks/results/default-findings-[\d-]+\.md)\)", section)
    assert len(reports) == 1, f"the section should link one dated report of the default's findings: {reports}"
    missing = sorted(decimals(section) - decimals((REPO / reports[0]).read_text()))
    assert not missing, f"README.md quotes numbers that {reports[0]} does not hold: {missing}"
