"""What every command shares: the engine, output formats, errors."""

from __future__ import annotations

import contextlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, TypeVar

import click

from ..engine import Engine
from ..errors import InvalidInput

F = TypeVar("F", bound=Callable[..., Any])


class State:
    """The group's options, and the engine opened from them on first use."""

    def __init__(self, home: str | None, config: str | None, ledger: str | None) -> None:
        self.home, self.config, self.ledger = home, config, ledger
        self._engine: Engine | None = None

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            self._engine = Engine.open(self.home, self.config, self.ledger)
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.close()


@contextlib.contextmanager
def reading_engine(engine: Engine) -> Iterator[Engine]:
    """``engine`` for a dry run, which only reads: its ledger as it exists (never
    created), or, for a SQLite ledger not made yet, an empty one in a
    folder of its own that is removed after, so every outcome reads as missing and
    the home is left as it was."""
    url = engine.config.settings.ledger_url
    path = Path(url.removeprefix("sqlite:///"))
    if not (url.startswith("sqlite:///") and not path.exists()):
        engine.existing_ledger()
        yield engine
        return
    from ..identity import refuse_missing_file
    from ..ledger import open_ledger

    refuse_missing_file(engine.home, path)  # a used home lost its ledger: a run would stop

    with tempfile.TemporaryDirectory(prefix="retrysafe-dry-run-") as folder:
        empty = Engine(engine.config, open_ledger(f"sqlite:///{folder}/empty.sqlite3"))
        try:
            yield empty
        finally:
            empty.close()


def state() -> State:
    obj = click.get_current_context().find_object(State)
    assert obj is not None
    return obj


def json_option(f: F) -> F:
    return click.option("--json", "as_json", is_flag=True, help="Print JSON instead of text.")(f)


def params_option(help: str = "A job parameter (repeat for each).") -> Callable[[F], F]:
    """``-p/--param NAME=VALUE``, repeatable: a job's parameters."""
    return click.option("-p", "--param", "params", multiple=True, metavar="NAME=VALUE", help=help)


class _Seconds(click.FloatRange):
    """Seconds above 0 and at most 1e9; ``nan`` (which every comparison lets through) is
    refused too."""

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> Any:
        got = super().convert(value, param, ctx)
        if got != got:
            self.fail(f"{value!r} is not a number of seconds", param, ctx)
        return got


#: a timeout option's type: seconds above 0, at most 1e9, never ``nan``
SECONDS = _Seconds(min=0, min_open=True, max=1e9)


def _stored_key(_ctx: click.Context, _param: click.Parameter, key: str) -> str:
    """KEY as typed, or as the ledger holds it when it holds it only in the other
    Unicode normal form: a terminal or a copy can decompose ``é`` (NFD) in a key
    rendered with it composed (NFC), or the other way round, and the two look the
    same. An ASCII key, or one the ledger cannot be read for, is left as typed (the
    command itself then says what is wrong)."""
    import unicodedata

    from ..errors import RetrysafeError

    if key.isascii():
        return key
    others = sorted({unicodedata.normalize(form, key) for form in ("NFC", "NFD")} - {key})
    if not others:
        return key
    try:
        ledger = state().engine.existing_ledger()
        if ledger.outcome(key) is None:
            return next((o for o in others if ledger.outcome(o) is not None), key)
    except RetrysafeError:
        pass
    return key


def key_argument(f: F) -> F:
    """The ``KEY`` argument of a command about one outcome (:func:`_stored_key`)."""
    return click.argument("key", callback=_stored_key)(f)


def key_and_step(f: F) -> F:
    """The ``KEY STEP`` arguments of a command about one step of an outcome."""
    return key_argument(click.argument("step_name", metavar="STEP")(f))


def emit_json(obj: Any) -> None:
    """``obj`` as JSON on stdout, its times in ISO 8601 (:func:`retrysafe.timefmt.iso_times`)."""
    from ..timefmt import iso_times

    click.echo(json.dumps(iso_times(obj), indent=2, sort_keys=True, default=str))


def table(headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """Print :func:`~retrysafe.readout.table_lines`: each cell one line, as it is shown."""
    from ..readout import table_lines

    click.echo("\n".join(table_lines(headers, rows)))


# what the printed and documented command lines put where the evidence goes: pasted
# without being replaced, it would be recorded as what proves the effect
_PLACEHOLDERS = frozenset(w for n in ("ID", "EVIDENCE", "PROVIDER_ID") for w in (n, f"<{n}>"))


def refuse_placeholder(option: str, evidence: str) -> None:
    """Refuse evidence that is a placeholder of a printed or documented line (``ID``,
    ``<EVIDENCE>``...), pasted without being replaced."""
    if evidence.strip() in _PLACEHOLDERS:
        raise InvalidInput(f"{option} {evidence.strip()}: a placeholder, not evidence; replace "
                           "it with the provider's id for the effect")


def login_name() -> str:
    """The user's name, or ``uidN`` where the uid has none (a container's arbitrary uid,
    no ``USER`` set)."""
    import getpass  # imports termios: only human decisions record an actor

    try:
        return getpass.getuser()
    except (KeyError, OSError):
        return f"uid{os.getuid()}"


def actor() -> str:
    return f"{login_name()}@{os.uname().nodename}"
