"""Every Snakemake command that the README and the docs pages show plans from the root of a fresh
clone, as a user types it.

A dry run (-n) stands in for the real run where that would need the Hub, a GPU or half an hour;
what is tested is the command line itself: the Snakefile, config.yaml beside it, the profiles
and any --configfile, exactly as a fresh clone has them.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.helpers.repo import DOC_PAGES, REPO
from tests.helpers.workflow import BIN, run

pytestmark = pytest.mark.slow


def shown_commands(program: str, pages: tuple[Path, ...] = DOC_PAGES) -> list[str]:
    """Each ``program ...`` command of the pages: in code blocks, inline code, and after `&&`."""
    commands = set()
    for page in pages:
        text = page.read_text()
        snippets = re.findall(r"```bash\n(.*?)```", text, flags=re.DOTALL) + re.findall(r"`([^`\n]+)`", text)
        for snippet in snippets:
            for line in snippet.splitlines():
                for part in line.split("&&"):
                    part = part.split("#")[0].strip()
                    if part.startswith(program + " "):
                        commands.add(part)
    return sorted(commands)


SNAKEMAKE_COMMANDS = shown_commands("snakemake")


def test_the_readme_shows_the_commands_a_user_needs():
    on_the_front_page = shown_commands("snakemake", (REPO / "README.md",))
    assert any("--configfile configs/paper.yaml" in command for command in on_the_front_page)
    assert any("profiles/slurm" in command for command in on_the_front_page)
    assert any(command.startswith("snakemake --cores all") for command in on_the_front_page)


def dry_run(args: list[str]) -> list[str]:
    """The command as a dry run; the report is written after a real run only, so it is left out."""
    planned, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg == "--report":
            skip = True
        elif arg != "--report-after-run":
            planned.append(arg)
    return planned if {"-n", "--dry-run"} & set(planned) else [*planned, "-n"]


@pytest.mark.plans
@pytest.mark.parametrize("command", SNAKEMAKE_COMMANDS)
def test_shown_snakemake_command_runs_from_the_repository_root(command, clean_clone):
    args = shlex.split(command)
    if "--unlock" in args:  # changes nothing but a stale lock: run it as written
        unlocked = run([str(BIN / args[0]), *args[1:]], clean_clone)
        assert "Unlocked" in unlocked.stdout + unlocked.stderr
        return
    args = dry_run(args)
    output = run([str(BIN / args[0]), *args[1:]], clean_clone)
    assert ("This was a dry-run" in output.stdout + output.stderr
            or "Nothing to be done" in output.stdout + output.stderr)
