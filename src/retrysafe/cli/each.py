"""``retrysafe each``: one outcome per item (seed 001: key each item, not each run).

A job that handles "new items" must not key the occurrence that found them:
an item still new in the next occurrence would be handled again. ``each``
reads item ids and runs one outcome per item, the item being the value of the
job's key parameter named by ``--param``; done items are skipped. Each item is
exactly ``retrysafe run JOB -p PARAM=ITEM -- CMD`` (:func:`retrysafe.cli.run.run_job`),
so its claim, lease, close-out, exit code and ``resume`` are run's.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import signal
import socket
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import click

from ..config import Job
from ..engine import Engine
from ..errors import (
    EXIT_BLOCKED,
    EXIT_BUSY,
    EXIT_DONE,
    EXIT_FAILED,
    EXIT_USAGE,
    InvalidInput,
    InvalidParameter,
    RetrysafeError,
)
from ..keys import parse_assignments
from ..ledger import OutcomeRecord
from ._common import emit_json, json_option, reading_engine, state, table
from .run import run_context, run_job

__all__ = ["ITEM_PLACEHOLDER", "each", "read_items"]

ITEM_PLACEHOLDER = "{item}"
"""A CMD word holding this gets the item id in its place (an argument, never through a shell)."""

#: the exit code of a batch: the first of these that any item had
_SEVERITY = (EXIT_FAILED, EXIT_BLOCKED, EXIT_BUSY, EXIT_USAGE)


@dataclass
class Item:
    """One line (or JSON element) of the input: its id, or why it was refused."""

    where: str
    value: str | None
    refusal: str = ""


@dataclass
class Batch:
    """What happened to each item, and the exit code that sums it up."""

    results: list[dict[str, Any]] = field(default_factory=list)
    interrupted: bool = False

    def add(self, result: dict[str, Any]) -> None:
        self.results.append(result)

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        codes = {int(r["exit_code"]) for r in self.results}
        return next((c for c in _SEVERITY if c in codes), EXIT_DONE)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for r in self.results:
            out[r["status"]] = out.get(r["status"], 0) + 1
        return out


def _text_item(where: str, value: str) -> Item:
    """An id read as text; one holding bytes that are not UTF-8 (a lone surrogate) is refused."""
    try:
        value.encode()
    except UnicodeEncodeError:
        return Item(where, None, "the id is not UTF-8 text")
    return Item(where, value)


def _json_item(where: str, value: Any, param: str) -> Item:
    if isinstance(value, dict):
        for name in (param, "id"):
            if name in value:
                value = value[name]
                break
        else:
            return Item(where, None, f"a JSON object needs a {param!r} or 'id' field")
    if isinstance(value, bool) or not isinstance(value, str | int):
        return Item(where, None, f"an item id is a string or an integer, not {json.dumps(value)[:40]}")
    return _text_item(where, str(value))


def read_items(text: str, param: str) -> list[Item]:
    """Item ids from ``text``: a JSON array, JSON lines, or one id per line.

    A JSON element (or line) may be a string, an integer, or an object holding
    the id under ``param`` or ``id`` (a source record). Blank lines are skipped;
    a line that starts like JSON but is not is refused, not guessed at, and so is
    an id that is not UTF-8 text (bytes read with ``surrogateescape``, or a JSON
    escape of a lone surrogate). A leading byte order mark is not part of an id."""
    text = text.removeprefix("\ufeff")
    stripped = text.strip()
    if stripped.startswith("["):
        try:
            data = json.loads(stripped)
        except json.JSONDecodeError as exc:
            raise InvalidInput(f"the items look like a JSON array but are not valid JSON: {exc}") from None
        if not isinstance(data, list):
            raise InvalidInput("the items' JSON is not an array")
        return [_json_item(f"element {i}", v, param) for i, v in enumerate(data, start=1)]
    items: list[Item] = []
    for n, line in enumerate(text.splitlines(), start=1):
        word = line.strip()
        if not word:
            continue
        where = f"line {n}"
        if word[0] in '{"':
            try:
                items.append(_json_item(where, json.loads(word), param))
            except json.JSONDecodeError:
                items.append(Item(where, None, "starts like JSON but is not valid JSON"))
        else:
            items.append(_text_item(where, word))
    return items


def _check_fixed(job: Job, item_param: str, fixed: Mapping[str, str], now: datetime) -> None:
    """The parameters given with ``-p``, checked once before any item is read: one the
    job does not take, one missing, or a value its type refuses would refuse every item
    alike (and pass unseen on a day without items)."""
    unknown = sorted(set(fixed) - set(job.params))
    if unknown:
        raise InvalidParameter(f"job {job.name!r}: unknown parameter {unknown[0]!r} "
                               f"(declared: {', '.join(job.params)})")
    others = {name: kind for name, kind in job.params.items() if name != item_param}
    job._replace(params=others).resolve_params(fixed, now)


def _command(cmd: Sequence[str], item: str) -> list[str]:
    return [w.replace(ITEM_PLACEHOLDER, item) for w in cmd]


def _check_command(argv0: str) -> None:
    """A CMD that cannot start is refused once, before any item runs."""
    if ITEM_PLACEHOLDER in argv0:
        return  # named by the item: run refuses it per item
    path = Path(argv0)
    ok = (path.is_file() and os.access(path, os.X_OK)) if os.sep in argv0 else shutil.which(argv0)
    if not ok:
        raise InvalidInput(f"command not found: {argv0}")


@contextlib.contextmanager
def _stop_between_items(batch: Batch) -> Iterator[Callable[[], None]]:
    """A stop signal (SIGINT, SIGTERM, SIGHUP) ends the batch after the running item.

    While an item runs, ``run`` forwards the signal to its command with a handler
    of its own; the wakeup file descriptor sees every signal whichever Python
    handler takes it, so the batch learns of it too. Yields the function that
    reads it (call it after each item)."""
    stops = {signal.SIGINT, signal.SIGTERM, signal.SIGHUP}

    def stop(signum: int, _frame: object) -> None:
        batch.interrupted = True

    reader, writer = socket.socketpair()
    reader.setblocking(False)
    writer.setblocking(False)

    def drain() -> None:
        with contextlib.suppress(BlockingIOError):
            if stops & set(reader.recv(64)):
                batch.interrupted = True

    previous = {s: signal.signal(s, stop) for s in stops}
    old_fd = signal.set_wakeup_fd(writer.fileno(), warn_on_full_buffer=False)
    try:
        yield drain
    finally:
        signal.set_wakeup_fd(old_fd)
        for sig, handler in previous.items():
            signal.signal(sig, handler)
        reader.close()
        writer.close()


def _run_one(engine: Engine, job: str, params: Mapping[str, str], cmd: Sequence[str], item: str,
             as_json: bool) -> dict[str, Any]:
    """``retrysafe run`` for one item; its result as run's JSON gives it."""
    extra = {"item": item}
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out) if as_json else contextlib.nullcontext():
            run_job(engine, job, params, cmd, context={**run_context(None), "each_item": item},
                    as_json=as_json, extra=extra)
    except SystemExit as finished:
        code = finished.code if isinstance(finished.code, int) else EXIT_FAILED
        said = json.loads(out.getvalue()) if as_json else {}
        return {**said, **extra, "status": _status_of(code), "exit_code": code}
    except RetrysafeError as exc:
        click.echo(f"retrysafe: item {item!r}: {exc.message}", err=True)
        return {**extra, "status": "error", "reason": exc.message, "exit_code": exc.exit_code}
    raise AssertionError("run_job always exits")  # pragma: no cover


def _status_of(code: int) -> str:
    return {EXIT_DONE: "done", EXIT_BLOCKED: "blocked", EXIT_BUSY: "busy"}.get(code, "failed")


def out_of_attempts(out: OutcomeRecord | None, max_attempts: int) -> bool:
    """Whether the next run of ``out`` finds its attempts spent: it blocks it (exit 3,
    ``retrysafe retry KEY``) instead of running CMD. What a dry run says it would do."""
    return (out is not None and out.state not in ("done", "blocked")
            and out.attempts - out.budget_base >= max_attempts)


def _dry_run(engine: Engine, planned: list[tuple[Item, str, dict[str, str]]], batch: Batch,
             max_attempts: int, as_json: bool) -> None:
    """What would run: each item's key and the state its outcome is in now."""
    with reading_engine(engine) as reader:  # no ledger yet: every item is new
        for item, key, _ in planned:
            out = reader.ledger.outcome(key)
            now = out.state if out is not None else "new"
            action = {"done": "skip", "blocked": "stop (blocked)"}.get(now, "run")
            if out_of_attempts(out, max_attempts):
                action = "stop (out of attempts)"
            batch.add({"item": item.value, "key": key, "state": now, "action": action,
                       "status": f"would {action.split()[0]}", "exit_code": EXIT_DONE})
    if not as_json:
        table(["item", "key", "state", "would"],
              [[r["item"], r.get("key", ""), r.get("state", ""), r.get("action", r["status"])]
               for r in batch.results])  # (a refused id has no key: it was said why above)


@click.command(context_settings={"ignore_unknown_options": True})
@click.argument("job_name", metavar="JOB")
@click.option("--param", "item_param", required=True, metavar="NAME",
              help="The job's key parameter each item id goes into.")
@click.option("-p", "params", multiple=True, metavar="NAME=VALUE",
              help="Another parameter, the same for every item (repeat for each).")
@click.option("--from", "source", type=click.Path(dir_okay=False, allow_dash=True), default="-",
              show_default="stdin", help="Read the item ids from this file.")
@click.option("--dry-run", is_flag=True,
              help="List each item's key, state and what would happen; run nothing.")
@json_option
@click.argument("cmd", nargs=-1, type=click.UNPROCESSED)
def each(job_name: str, item_param: str, params: tuple[str, ...], source: str, dry_run: bool,
         as_json: bool, cmd: tuple[str, ...]) -> None:
    """Run CMD once per item id: one outcome per item, done items skipped.

    \b
    Item ids come from stdin or --from FILE: one per line, a JSON array, or
    JSON lines (strings, integers, or objects with the id under NAME or "id").
    Each item runs as 'retrysafe run JOB -p NAME=ITEM -- CMD' would; a CMD
    word containing {item} gets the item id there. An id the parameter's type
    refuses is reported on one line and skipped; the others still run.
    Exit: 0 every item done (or skipped as done); else the first of 1 (an
    item failed), 3 (one is blocked), 75 (one was busy), 2 (an id was
    refused); 130 when interrupted (the items after it are not started).

    \b
    Example:
      printf 'A-17\\nA-18\\n' | retrysafe each new-item --param item -- ./handle.sh {item}
    """
    if not cmd and not dry_run:
        raise InvalidInput("give the command to run after --: retrysafe each JOB --param NAME -- CMD")
    engine = state().engine
    job = engine.config.job(job_name)
    fixed = parse_assignments(params)
    if item_param not in job.params:
        raise InvalidInput(f"job {job_name!r} has no parameter {item_param!r} "
                           f"(its parameters: {', '.join(job.params) or 'none'})")
    if item_param in fixed:
        raise InvalidInput(f"parameter {item_param!r} comes from the items; do not also give it with -p")
    if cmd and not dry_run:
        _check_command(cmd[0])
    # one clock for the batch: an omitted occurrence is the same for every item
    now = datetime.now(UTC)
    _check_fixed(job, item_param, fixed, now)
    try:
        with click.open_file(source, "rb") as stream:
            # bytes that are not UTF-8 refuse their own id only (read_items), not the batch
            text = stream.read().decode("utf-8", "surrogateescape")
    except OSError as exc:
        raise InvalidInput(f"cannot read the items from {source}: {exc}") from None
    batch = Batch()
    planned: list[tuple[Item, str, dict[str, str]]] = []
    seen: set[str] = set()
    for item in read_items(text, item_param):
        if item.value is not None:
            try:
                _, key, canonical = engine.outcome_key(job_name, {**fixed, item_param: item.value}, now)
            except InvalidInput as exc:
                item.refusal = exc.message
            else:
                if key not in seen:
                    seen.add(key)
                    planned.append((item, key, canonical))
                continue
        click.echo(f"retrysafe: item {item.where} refused: {item.refusal}", err=True)
        batch.add({"item": item.value, "where": item.where, "status": "refused",
                   "reason": item.refusal, "exit_code": EXIT_USAGE})
    if dry_run:
        _dry_run(engine, planned, batch, job.max_attempts, as_json)
    else:
        with _stop_between_items(batch) as check_signals:
            for _item, key, canonical in planned:
                if batch.interrupted:
                    break
                value = canonical[item_param]
                known = engine.ledger.outcome(key)
                if known is not None and known.state == "done":
                    if not as_json:
                        click.echo(f"skip: {key} is done")
                    batch.add({"item": value, "key": key, "status": "skipped", "exit_code": EXIT_DONE})
                    continue
                result = _run_one(engine, job_name, canonical, _command(cmd, value), value, as_json)
                batch.add(result)
                check_signals()
    code = batch.exit_code
    if as_json:
        emit_json({"job": job_name, "param": item_param, "dry_run": dry_run, "items": batch.results,
                   "counts": batch.counts(), "interrupted": batch.interrupted, "exit_code": code})
    else:
        summary = ", ".join(f"{n} {s}" for s, n in sorted(batch.counts().items())) or "no items"
        click.echo(f"each: {summary}" + (" (interrupted)" if batch.interrupted else ""))
    sys.exit(code)
