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


def section(name: str) -> str:
    """The text of command NAME's section of docs/cli.md: after its '### retrysafe NAME'
    heading (and any headings stacked under it, which share the text) up to the next heading."""
    import re

    found = re.search(rf"^### retrysafe {re.escape(name)}\n(?:### [^\n]*\n)*(.*?)(?=^##+ |\Z)",
                      DOC, re.S | re.M)
    return found.group(1) if found else ""


def leaf_commands(group: click.Group = cli, path: tuple[str, ...] = ()) -> list[tuple[str, ...]]:
    """The path of every command that runs something: a group's subcommands, not the group."""
    out: list[tuple[str, ...]] = []
    for name in group.list_commands(_CTX):
        cmd = group.get_command(_CTX, name)
        assert cmd is not None
        if isinstance(cmd, click.Group):
            out += leaf_commands(cmd, (*path, name))
        else:
            out.append((*path, name))
    return out


def resolve_path(path: tuple[str, ...]) -> click.Command:
    cmd: click.Command | None = cli
    for name in path:
        assert isinstance(cmd, click.Group)
        cmd = cmd.get_command(_CTX, name)
    assert cmd is not None
    return cmd


@pytest.mark.parametrize("path", leaf_commands(), ids=" ".join)
def test_every_long_option_is_documented_in_its_commands_section(path: tuple[str, ...]) -> None:
    """Each visible long option of a command or subcommand is named (any of its spellings) in
    the section of docs/cli.md of the command (for a subcommand: of its group)."""
    import re

    text = section(path[0])
    assert text, f"docs/cli.md has no section for retrysafe {path[0]}"
    missing = []
    for param in resolve_path(path).params:
        if not isinstance(param, click.Option) or param.hidden:
            continue
        flags = [*param.opts, *param.secondary_opts]
        if "--help" in flags or not any(f.startswith("--") for f in flags):
            continue
        if not any(re.search(rf"(?<![\w-]){re.escape(f)}(?![\w-])", text) for f in flags):
            missing.append("/".join(flags))
    assert not missing, f"retrysafe {' '.join(path)}: not in its section of docs/cli.md: {missing}"
