"""Every command is documented: a heading in docs/cli.md and an example in its help."""

from __future__ import annotations

from pathlib import Path

import click
import pytest

from retrysafe.cli import cli

DOC = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
_CTX = click.Context(cli)
COMMANDS = sorted(cli.list_commands(_CTX))


def command(name: str) -> click.Command:
    found = cli.get_command(_CTX, name)
    assert found is not None
    return found


@pytest.mark.parametrize("name", COMMANDS)
def test_command_has_a_section_in_docs_cli(name: str) -> None:
    """docs/cli.md has a '### retrysafe NAME' heading for each command."""
    assert f"### retrysafe {name}\n" in DOC


@pytest.mark.parametrize("name", COMMANDS)
def test_command_help_has_a_docstring(name: str) -> None:
    """Each command explains itself in --help, and its name is the one it is listed under."""
    cmd = command(name)
    assert (cmd.help or "").strip()
    assert cmd.name == name


def test_readme_names_the_two_commands_and_ci_runs_the_test_one() -> None:
    """The README's test command is what CI runs."""
    root = Path(__file__).parent.parent
    readme = (root / "README.md").read_text()
    assert "scripts/demo" in readme and "scripts/test" in readme
    lines = [line.strip() for line in (root / ".ci" / "run").read_text().splitlines()]
    commands = [line for line in lines if line and not line.startswith(("#", "set ", "cd ", "export "))]
    # the README's test command runs first, as written; anything after it is a further tier
    assert commands[0].removeprefix("exec ") == "scripts/test"


def test_architecture_names_only_files_that_exist() -> None:
    """docs/architecture.md points at real modules and folders (it must not rot)."""
    import re

    root = Path(__file__).parent.parent
    text = (root / "docs" / "architecture.md").read_text()
    named = set(re.findall(r"`([\w./]+?\.py|[\w]+/)`", text)) - {"ledger/yourdb.py"}
    assert len(named) > 20
    bases = [root, root / "src" / "retrysafe", root / "src" / "retrysafe" / "ledger"]
    missing = sorted(n for n in named if not any((b / n).exists() for b in bases))
    assert not missing, f"docs/architecture.md names files that do not exist: {missing}"


def test_every_environment_variable_is_documented_in_docs_cli() -> None:
    """Each ``RETRYSAFE_*`` name in envvars.py appears in docs/cli.md."""
    from retrysafe import envvars

    text = (Path(__file__).parent.parent / "docs" / "cli.md").read_text()
    names = [getattr(envvars, n) for n in envvars.__all__]
    assert len(names) > 10
    assert [n for n in names if n not in text] == []
