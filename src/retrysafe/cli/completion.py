"""``retrysafe completion bash|zsh|fish``: shell completion, with names from the home.

The scripts are click's, with one change: the shell asks ``retrysafe
completion SHELL --complete`` (not the plain program), so the answers can
come from the config (job names) and the ledger (outcome keys) as well as
from the commands' options. Any failure to read those gives no suggestions,
never an error in the shell.
"""

from __future__ import annotations

import contextlib

import click
from click.shell_completion import (
    BashComplete,
    CompletionItem,
    FishComplete,
    ShellComplete,
    ZshComplete,
    _resolve_context,
    _resolve_incomplete,
)

from ..keys import DRILL_MARK
from ..states import OutcomeState

__all__ = ["completion"]

_PROG = "retrysafe"
_VAR = "_RETRYSAFE_COMPLETION"
#: a parameter's name -> what it names
_JOB_PARAMS = frozenset({"job_name"})
_KEY_PARAMS = frozenset({"key"})
_STATE_PARAMS = frozenset({"state_name", "states"})


def _jobs(ctx: click.Context) -> list[str]:
    from ..engine import Engine

    root = ctx.find_root().params
    with Engine.open(root.get("home"), root.get("config"), root.get("ledger")) as engine:
        return sorted(engine.config.jobs)


def _keys(ctx: click.Context, incomplete: str) -> list[str]:
    from ..engine import Engine

    root = ctx.find_root().params
    with Engine.open(root.get("home"), root.get("config"), root.get("ledger")) as engine:
        outs = engine.existing_ledger().outcomes(limit=1000, drills=DRILL_MARK in incomplete)
        return sorted(o.key for o in outs)


def _suggest(ctx: click.Context, param: click.Parameter, incomplete: str
             ) -> list[CompletionItem[str]] | None:
    """Names from the home for a job, key or state parameter; ``None``: not one of those."""
    name = param.name or ""
    if name in _STATE_PARAMS:
        values = [s.value for s in OutcomeState]
    elif name in _JOB_PARAMS:
        values = _jobs(ctx)
    elif name in _KEY_PARAMS:
        values = _keys(ctx, incomplete)
    else:
        return None
    return [CompletionItem(v) for v in values if v.startswith(incomplete)]


class _FromHome(ShellComplete):
    def get_completions(self, args: list[str], incomplete: str) -> list[CompletionItem[str]]:
        ctx = _resolve_context(self.cli, self.ctx_args, self.prog_name, args)
        obj, incomplete = _resolve_incomplete(ctx, args, incomplete)
        if isinstance(obj, click.Parameter):
            found = None
            with contextlib.suppress(Exception):  # noqa: BLE001 - a completion never fails
                found = _suggest(ctx, obj, incomplete)
            if found is not None:
                return found
        return obj.shell_complete(ctx, incomplete)


def _ask(template: str, before: str) -> str:
    """``template`` with the program it runs replaced by ``retrysafe completion SHELL --complete``."""
    assert template.count(before) == 1, "click's completion script changed"
    return template.replace(before, before[:-1] + " completion {shell} --complete)")


class _Bash(_FromHome, BashComplete):
    source_template = _ask(BashComplete.source_template, "bash_complete $1)").replace(
        "{shell}", "bash")


class _Zsh(_FromHome, ZshComplete):
    source_template = _ask(ZshComplete.source_template, "zsh_complete %(prog_name)s)").replace(
        "{shell}", "zsh")


class _Fish(_FromHome, FishComplete):
    source_template = _ask(FishComplete.source_template, "(commandline -t) %(prog_name)s)").replace(
        "{shell}", "fish")


_SHELLS: dict[str, type[ShellComplete]] = {"bash": _Bash, "zsh": _Zsh, "fish": _Fish}


@click.command()
@click.argument("shell", type=click.Choice(sorted(_SHELLS)))
@click.option("--complete", "answer", is_flag=True, hidden=True,
              help="Answer the shell's completion request (the script calls this).")
def completion(shell: str, answer: bool) -> None:
    """Print the completion script for SHELL: job names, outcome keys, states and options.

    \b
    Example:
      retrysafe completion bash > ~/.local/share/bash-completion/completions/retrysafe
      retrysafe completion zsh > "${fpath[1]}/_retrysafe"
      retrysafe completion fish > ~/.config/fish/completions/retrysafe.fish
    """
    from . import cli

    comp = _SHELLS[shell](cli, {}, _PROG, _VAR)
    if answer:
        click.echo(comp.complete(), nl=False)
    else:
        click.echo(comp.source())
