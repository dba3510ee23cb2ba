"""Crash-safe local writes.

Every file retrysafe writes is either the old version or the new one, never a
torn mix: write a temporary file in the same folder, fsync it, rename it over
the target, fsync the folder so the rename itself survives a power cut.
Log lines are appended with one ``write`` on an ``O_APPEND`` descriptor and
not synced (``sync=True`` syncs on request): the ledger's history is the
durable record of every transition, the log is its readable companion; a
process crash loses nothing written, a power cut may cut its tail short.
Files derived from the ledger are written with ``durable=False`` (whole or
absent, without syncs; see :mod:`retrysafe.folders`).

Modes: a new file is private (``0600``, less what the umask takes away), a new
folder ``0700`` likewise; a file that is rewritten keeps its mode (and its
owner, where the process may set it). Links: :func:`private_dirs` walks folders
without following symbolic links, and the writes that must not follow one
(``atomic_write(refuse_link=True)``, the log) refuse it with :class:`~retrysafe.errors.UnsafePath`.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from .errors import UnsafePath

__all__ = [
    "FILE_MODE",
    "FOLDER_MODE",
    "JsonlAppender",
    "append_jsonl",
    "artifact_problem",
    "atomic_copy",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "check_writable",
    "fsync_dir",
    "json_members",
    "json_string",
    "lstat_no_link",
    "open_output",
    "private_dirs",
    "sha256_file",
]

FILE_MODE = 0o600
"""A new file's mode (the umask may take more away)."""
FOLDER_MODE = 0o700
"""A new folder's mode (the umask may take more away)."""

# O_PATH where there is one: a folder is walked through, not read (no read permission needed)
_DIR_FLAGS = getattr(os, "O_PATH", os.O_RDONLY) | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_LOG_FLAGS = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


def _unsafe(path: Path) -> UnsafePath:
    """The error for ``path``, which is a link or not what it should be."""
    try:
        link = stat.S_ISLNK(os.lstat(path).st_mode)
    except OSError:
        link = False
    what = "a symbolic link" if link else "not a folder"
    return UnsafePath(f"{path} is {what}; retrysafe does not follow links below its home: "
                      "remove it (or move what it points to in its place)")


def open_output(path: Path) -> BinaryIO:
    """``path`` opened to be written from its start (``w+b``), never through a symbolic
    link (refused as :class:`UnsafePath`); a new file is ``0600`` less the umask, an
    existing one keeps its mode: a step's output log, which holds what its command
    printed."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC | _NOFOLLOW
                     | getattr(os, "O_CLOEXEC", 0), FILE_MODE)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise _unsafe(path) from None
        raise
    return os.fdopen(fd, "w+b")


def lstat_no_link(path: Path) -> os.stat_result | None:
    """``path``'s own status (``None``: it does not exist); a symbolic link is refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return None
    if stat.S_ISLNK(st.st_mode):
        raise _unsafe(path)
    return st


def private_dirs(base: Path, parts: Sequence[str], *, create: bool = True) -> Path:
    """``base/parts[0]/parts[1]/...``, each part a real folder, never a link.

    ``base`` (the home) may itself be a link; below it a planted link (or a
    file where a folder belongs) is refused with
    :class:`~retrysafe.errors.UnsafePath` instead of followed. With ``create``
    each folder is opened relative to its parent without following links, and
    missing ones are made ``0700`` (less the umask); without it they are only
    checked (a missing one raises ``FileNotFoundError``).
    """
    path = base
    if not create:
        for part in parts:
            path = path / part
            if not stat.S_ISDIR(os.lstat(path).st_mode):
                raise _unsafe(path)
        return path
    fd = os.open(base, _DIR_FLAGS)
    try:
        for part in parts:
            path = path / part
            try:
                try:
                    child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
                except FileNotFoundError:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, FOLDER_MODE, dir_fd=fd)
                    child = os.open(part, _DIR_FLAGS | _NOFOLLOW, dir_fd=fd)
            except OSError as exc:
                if exc.errno in (errno.ENOTDIR, errno.ELOOP):
                    raise _unsafe(path) from None
                exc.filename = str(path)
                raise
            os.close(fd)
            fd = child
    finally:
        os.close(fd)
    return path


def check_writable(base: Path, parts: Sequence[str], files: Sequence[str] = ()) -> None:
    """Before anything is recorded: the folders ``base/parts...`` that exist are real
    folders (a link is refused, :class:`UnsafePath`), so are ``files`` in the last one
    when it exists, and the deepest existing folder can be written
    (:class:`HomeNotWritable`), so that what is about to be claimed gets its folder."""
    path = base
    for part in parts:
        st = lstat_no_link(path / part)
        if st is None:
            break
        if not stat.S_ISDIR(st.st_mode):
            raise _unsafe(path / part)
        path = path / part
    else:
        for name in files:
            lstat_no_link(path / name)
    if not os.access(path, os.W_OK | os.X_OK):
        from .errors import HomeNotWritable

        raise HomeNotWritable(f"{path} cannot be written (permission denied): nothing was run")


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(target: Path, fill: Callable[[BinaryIO], object], *, exclusive: bool = False,
                 mode: int | None = None, refuse_link: bool = False,
                 durable: bool = True) -> None:
    """Write ``target`` through a temporary file in its folder: the whole file or nothing.

    ``fill(fh)`` writes the content into the open binary temporary file. With
    ``exclusive`` the final name is created with ``link``, which fails when the
    target appeared meanwhile, so two writers cannot both win.

    ``mode``: the file's mode; by default a file that exists keeps its mode
    and (where this process may set it) its owner, and a new one is ``0600``
    less the umask. With ``refuse_link`` a symbolic link at ``target`` is
    refused (:class:`~retrysafe.errors.UnsafePath`); otherwise it is replaced
    by the file, as ``rename`` does, and its target keeps its content.

    ``durable=False`` skips the two syncs (file and folder): the replacement is
    still whole or absent for every reader and after a process crash, but a
    power cut may leave the old file or an empty one. For files derived from
    the ledger, which rewrites them (:mod:`retrysafe.folders`).
    """
    keep: os.stat_result | None = None
    if refuse_link:
        keep = lstat_no_link(target)
    elif mode is None:
        with contextlib.suppress(OSError):
            keep = os.stat(target)
    fd, tmp = _temp_beside(target)
    try:
        with os.fdopen(fd, "wb") as fh:
            if mode is not None:
                os.fchmod(fh.fileno(), mode)
            elif keep is not None and stat.S_ISREG(keep.st_mode):
                _keep_owner_and_mode(fh.fileno(), keep)
            fill(fh)
            fh.flush()
            if durable:
                os.fsync(fh.fileno())
        if exclusive:
            os.link(tmp, target)
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    if durable:
        fsync_dir(target.parent)


def _temp_beside(target: Path) -> tuple[int, str]:
    """A new temporary file in ``target``'s folder, ``0600`` less the umask, as
    ``tempfile.mkstemp`` makes one (whose import, with what it pulls in, costs a
    command line more than the file does): exclusive, no link followed."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(100):
        tmp = os.path.join(target.parent, f".{target.name}.{os.urandom(6).hex()}.tmp")
        try:
            return os.open(tmp, flags, 0o600), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {target}")


def _keep_owner_and_mode(fd: int, old: os.stat_result) -> None:
    """Give the new file ``old``'s owner (where permitted) and mode."""
    mine = os.fstat(fd)
    if (mine.st_uid, mine.st_gid) != (old.st_uid, old.st_gid):
        # root may keep both; an owner may keep a group it belongs to; else the
        # file becomes ours, with the mode below
        try:
            os.fchown(fd, old.st_uid, old.st_gid)
        except OSError:
            with contextlib.suppress(OSError):
                os.fchown(fd, -1, old.st_gid)
    os.fchmod(fd, stat.S_IMODE(old.st_mode))


def atomic_write_bytes(path: Path, data: bytes, mode: int | None = None, *,
                       refuse_link: bool = False, durable: bool = True) -> None:
    atomic_write(path, lambda fh: fh.write(data), mode=mode, refuse_link=refuse_link,
                 durable=durable)


def atomic_write_json(path: Path, obj: Any, *, refuse_link: bool = False,
                      durable: bool = True) -> None:
    data = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"), refuse_link=refuse_link, durable=durable)


def atomic_copy(src: Path, dst: Path) -> None:
    """Copy ``src`` to ``dst`` atomically (streamed, so large artifacts are fine)."""

    def fill(out: BinaryIO) -> None:
        with src.open("rb") as inp:
            while chunk := inp.read(1 << 20):
                out.write(chunk)

    atomic_write(dst, fill)


#: one encoder for every log line (``json.dumps`` with options builds one per call)
_LINE = json.JSONEncoder(ensure_ascii=False)
#: a str as a JSON string literal
json_string: Callable[[str], str] = json.encoder.encode_basestring


def json_members(record: Mapping[str, Any]) -> str:
    """The members of ``record`` as JSON, without the braces.

    Log lines are flat (strings, numbers, ``None``) and written twice per
    effect: those values are formatted directly, anything else by the JSON
    encoder.
    """
    parts = []
    for key, value in record.items():
        kind = type(value)
        if kind is str:
            text = json_string(value)
        elif kind is float or kind is int:
            text = repr(value)
        elif value is None:
            text = "null"
        else:
            text = _LINE.encode(value)
        parts.append(f"{json_string(key)}: {text}")
    return ", ".join(parts)


def append_jsonl(path: Path, record: Mapping[str, Any], *, sync: bool = False) -> None:
    """Append one JSON line to ``path`` (opened and closed for this line)."""
    with JsonlAppender(path) as log:
        log.append(record, sync=sync)


class JsonlAppender:
    """A JSON-lines file kept open for appending, one ``write`` per line.

    The file is opened with ``O_APPEND`` on first use: each line lands whole at
    the end even when several processes append to the same file.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: BinaryIO | None = None

    def append(self, record: Mapping[str, Any], *, sync: bool = False) -> None:
        self.append_members(json_members(record), sync=sync)

    def append_members(self, members: str, *, sync: bool = False) -> None:
        """Append the line ``{members}``; ``members`` is JSON object members."""
        fh = self._fh
        if fh is None:
            fh = self.open()
        fh.write(f"{{{members}}}\n".encode())
        if sync:
            os.fsync(fh.fileno())

    def open(self) -> BinaryIO:
        """Open the file (once: it stays open until :meth:`close`), never through
        a symbolic link; a new file is ``0600`` less the umask."""
        if self._fh is None:
            try:
                fd = os.open(self.path, _LOG_FLAGS, FILE_MODE)
            except OSError as exc:
                if exc.errno == errno.ELOOP:
                    raise _unsafe(self.path) from None
                raise
            self._fh = os.fdopen(fd, "ab", buffering=0)
        return self._fh

    def close(self) -> None:
        if self._fh is not None:
            self._fh.close()
            self._fh = None

    def __enter__(self) -> JsonlAppender:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def sha256_file(path: Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return "sha256:" + digest.hexdigest()


def artifact_problem(path: Path, checksum: str | None) -> str:
    """What is wrong with an accepted artifact, said after its path ("" when nothing is):
    ``is missing`` (no regular file there), ``changed after it was accepted`` (its
    checksum is not ``checksum``) or ``cannot be read (...)``. Every reader of an
    artifact judges it here: a generate step reusing it, close-out, ``verify``, the
    take-back of a restored one."""
    if not path.is_file():
        return "is missing"
    try:
        digest = sha256_file(path)
    except OSError as exc:
        return f"cannot be read ({exc.strerror or exc})"
    return "" if digest == checksum else "changed after it was accepted"
