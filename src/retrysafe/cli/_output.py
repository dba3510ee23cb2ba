"""A printed line, and an error turned into one line and an exit code, without click.

:func:`echo` writes what ``click.echo`` writes and imports click only when the
two could differ; :func:`exit_for` is what :func:`retrysafe.cli.main` does with
an error; :func:`exit_plain` adds what click's own ``main`` does first, for a
command run without click (:func:`retrysafe.cli.run.run_plain`).
"""

from __future__ import annotations

import errno
import os
import sys
from typing import Any, NoReturn, TextIO

from .. import envvars
from ..errors import EXIT_FAILED, EXIT_USAGE, HomeNotWritable, RetrysafeError, StorageFull

__all__ = ["echo", "exit_for", "exit_plain"]


def echo(message: str, *, err: bool = False) -> None:
    """``click.echo(message, err=err)``. Click strips terminal escapes off a pipe and
    re-wraps a stream it finds misconfigured; text with an escape, or that the
    stream's encoding cannot take, goes through click, which decides."""
    stream: TextIO | None = sys.stderr if err else sys.stdout
    text = message + "\n"
    encoding = getattr(stream, "encoding", None)
    try:
        plain = (stream is not None and "\x1b" not in text and isinstance(encoding, str)
                 and text.encode(encoding) is not None)
    except (LookupError, UnicodeError):
        plain = False
    if not plain or stream is None:  # (no stream: click prints nothing)
        import click

        click.echo(message, err=err)
        return
    stream.write(text)
    stream.flush()


def _storage_error(exc: OSError) -> RetrysafeError | None:
    """Disk full or read-only storage, as one line; the ledger's own writes are
    transactions, so nothing is half-written by the failure."""
    where = f" ({exc.filename})" if exc.filename else ""
    if exc.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG):
        return StorageFull(f"no space left to write{where}: {exc.strerror}; free some space and "
                           "run again (what was recorded so far is intact)")
    if exc.errno == errno.EROFS:
        return HomeNotWritable(f"cannot write{where}: {exc.strerror}")
    if exc.errno in (errno.EACCES, errno.EPERM):  # a read as well as a write
        return HomeNotWritable(f"cannot use{where}: {exc.strerror}; check its owner and mode")
    return None


def _one_line(message: str) -> str:
    """An error is one line, whatever text it quotes (a reason with line breaks, an
    escape sequence in a value): :func:`retrysafe.readout.one_line`."""
    from ..readout import one_line

    return one_line(message)


def exit_for(exc: BaseException) -> NoReturn:
    """One clear line and a documented exit code for ``exc``, never a traceback (the
    last line of defence of :func:`retrysafe.cli.main`)."""
    click: Any = sys.modules.get("click")  # a click exception means click is loaded
    if isinstance(exc, RetrysafeError):
        echo(f"retrysafe: {_one_line(exc.message)}", err=True)
        sys.exit(exc.exit_code)
    if click is not None and isinstance(exc, click.exceptions.Abort):
        echo("retrysafe: interrupted", err=True)
        sys.exit(130)
    if click is not None and isinstance(exc, click.ClickException):
        echo(f"retrysafe: {_one_line(exc.format_message())}", err=True)
        sys.exit(EXIT_USAGE)
    if isinstance(exc, KeyboardInterrupt):
        echo("retrysafe: interrupted", err=True)
        sys.exit(130)
    if isinstance(exc, BrokenPipeError):
        sys.exit(EXIT_FAILED)
    storage = _storage_error(exc) if isinstance(exc, OSError) else None
    if storage is not None:
        echo(f"retrysafe: {_one_line(storage.message)}", err=True)
        sys.exit(storage.exit_code)
    if os.environ.get(envvars.DEBUG):
        import traceback

        traceback.print_exception(exc)
    echo(f"retrysafe: internal error: {type(exc).__name__}: {_one_line(str(exc))} "
         "(set RETRYSAFE_DEBUG=1 for the traceback)", err=True)
    sys.exit(EXIT_FAILED)


class _PacifyFlush:
    """A standard stream whose ``flush`` ignores a reader that went away (as click's
    ``main`` wraps both streams on ``EPIPE``, so the exit prints no second error)."""

    def __init__(self, wrapped: TextIO) -> None:
        self.wrapped = wrapped

    def flush(self) -> None:
        try:
            self.wrapped.flush()
        except OSError as exc:
            if exc.errno != errno.EPIPE:
                raise

    def __getattr__(self, attr: str) -> Any:
        return getattr(self.wrapped, attr)


def exit_plain(exc: BaseException) -> NoReturn:
    """What click's ``main`` (``standalone_mode=False``) and then :func:`exit_for` make
    of an error a command raised: Ctrl-C or end of input closes the terminal's line
    and is "interrupted"; a reader that went away is exit 1."""
    if isinstance(exc, EOFError | KeyboardInterrupt):
        if sys.stderr is not None:
            sys.stderr.write("\n")
            sys.stderr.flush()
        echo("retrysafe: interrupted", err=True)
        sys.exit(130)
    if isinstance(exc, OSError) and exc.errno == errno.EPIPE:
        sys.stdout = _PacifyFlush(sys.stdout)
        sys.stderr = _PacifyFlush(sys.stderr)
        sys.exit(EXIT_FAILED)
    exit_for(exc)
