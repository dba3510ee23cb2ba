"""Crash-safe local writes.

Every file retrysafe writes is either the old version or the new one, never a
torn mix: write a temporary file in the same folder, fsync it, rename it over
the target, fsync the folder so the rename itself survives a power cut.
Log lines are appended with one ``write`` on an ``O_APPEND`` descriptor; they
are fsynced together by the close-out line (``sync=True``), not one by one: the
ledger's history is the durable record of every transition, the log is its
readable companion; a crash can cut only its last line short.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

__all__ = [
    "JsonlAppender",
    "append_jsonl",
    "atomic_copy",
    "atomic_write",
    "atomic_write_bytes",
    "atomic_write_json",
    "fsync_dir",
    "json_members",
    "json_string",
    "sha256_file",
]


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write(target: Path, fill: Callable[[BinaryIO], object], *, exclusive: bool = False,
                 mode: int | None = None) -> None:
    """Write ``target`` through a temporary file in its folder: the whole file or nothing.

    ``fill(fh)`` writes the content into the open binary temporary file. With
    ``exclusive`` the final name is created with ``link``, which fails when the
    target appeared meanwhile, so two writers cannot both win.
    """
    import tempfile  # imported here: most commands never write a whole file

    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fill(fh)
            fh.flush()
            os.fsync(fh.fileno())
        if mode is not None:
            os.chmod(tmp, mode)
        if exclusive:
            os.link(tmp, target)
            os.unlink(tmp)
        else:
            os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    fsync_dir(target.parent)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> None:
    atomic_write(path, lambda fh: fh.write(data), mode=mode)


def atomic_write_json(path: Path, obj: Any) -> None:
    data = json.dumps(obj, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
    atomic_write_bytes(path, data.encode("utf-8"))


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
            fh = self._fh = open(self.path, "ab", buffering=0)  # noqa: SIM115 - kept open
        fh.write(f"{{{members}}}\n".encode())
        if sync:
            os.fsync(fh.fileno())

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
