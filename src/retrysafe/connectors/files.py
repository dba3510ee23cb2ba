"""Publish a file: copy an artifact to a target path, atomically, exactly once.

The target path is the provider: the file either is there with the artifact's
checksum (done), is there with other content (someone must decide), or is not
there (safe to publish). The copy goes to a temporary file in the target
folder, is fsynced, and then appears under its final name in one step, so a
reader (a web server, a sync client) never sees half a file.

Example config::

    [connectors.site]
    type = "file"
    target = "/srv/www/reports/{key}.html"

and a step ``retrysafe step publish --connector site --with source=report.html``.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ..errors import ConfigError, InvalidInput
from ..fsio import atomic_write
from ._config import config_bool, optional_str, parse_bool, reject_unknown, string
from .base import ABSENT, Ambiguous, ConnectorBase, EffectFailed, Evidence, Found, LookupResult, Payload

__all__ = ["FileConnector", "sha256_of", "slug_of"]

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


def sha256_of(path: Path) -> str:
    """The hex sha256 of a file, read in chunks so large artifacts are fine."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        while chunk := fh.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def slug_of(key: str) -> str:
    """A file-name-safe form of a step key: never a path separator, never ``..``."""
    slug = _UNSAFE.sub("_", key).strip(".")
    return slug or "_"


def _evidence(digest: str, target: Path) -> Evidence:
    return Evidence(f"sha256:{digest}@{target}", path=str(target), sha256=digest)


class FileConnector(ConnectorBase):
    """Publishes ``source`` to ``target`` atomically; evidence ``sha256:<hex>@<path>``.

    ``target`` (config or payload) is an absolute path and may contain
    ``{key}`` (the step key made file-name safe), ``{key_hash}`` (12 hex
    digits of its sha256) and ``{name}`` (the source's file name). An
    existing target with other content is never replaced unless
    ``overwrite = true`` (then :meth:`update` replaces it).
    """

    effect_class = "publish"
    authoritative = True

    def __init__(
        self,
        name: str,
        *,
        target: str | None = None,
        overwrite: bool = False,
        file_mode: int | None = None,
        effect_class: str = "publish",
    ) -> None:
        self.name = name
        self.target = target
        self.overwrite = overwrite
        self.updatable = overwrite
        self.file_mode = file_mode
        self.effect_class = effect_class

    @classmethod
    def from_config(cls, name: str, table: Mapping[str, Any]) -> FileConnector:
        where = f"connector {name!r}"
        reject_unknown(where, table, {"type", "target", "overwrite", "mode", "effect_class"})
        mode = table.get("mode")
        file_mode: int | None = None
        if mode is not None:
            try:
                file_mode = int(str(mode), 8)
            except ValueError:
                file_mode = -1
            # Permission bits only: "-1" would be chmod to 07777 (setuid, world-writable).
            if isinstance(mode, bool) or not 0 <= file_mode <= 0o777:
                raise ConfigError(f'{where}: mode must be octal permission bits like "644", not {mode!r}')
        return cls(
            name,
            target=optional_str(where, table, "target"),
            overwrite=config_bool(where, table, "overwrite"),
            file_mode=file_mode,
            effect_class=string(where, table, "effect_class", "publish"),
        )

    # --- payload ----------------------------------------------------------

    def _source(self, payload: Payload) -> Path:
        raw = payload.get("source")
        if not raw or not isinstance(raw, str | os.PathLike):
            raise InvalidInput(f"connector {self.name!r}: payload needs 'source' (the file to publish)")
        return Path(raw).expanduser().absolute()

    def _target(self, step_key: str, payload: Payload, source_name: str = "") -> Path:
        raw = payload.get("target", self.target)
        if not raw or not isinstance(raw, str):
            raise InvalidInput(
                f"connector {self.name!r}: no target path (set 'target' in the config or payload)"
            )
        fields = {
            "key": slug_of(step_key),
            "key_hash": hashlib.sha256(step_key.encode()).hexdigest()[:12],
            "name": source_name,
        }
        try:
            expanded = raw.format(**fields)
        except (KeyError, IndexError, ValueError) as exc:
            raise InvalidInput(
                f"connector {self.name!r}: target {raw!r} has an unknown placeholder ({exc}); "
                "use {key}, {key_hash} or {name}"
            ) from None
        path = Path(expanded).expanduser()
        # A relative target would depend on the working directory, so a re-run
        # from elsewhere would look in the wrong place and publish twice.
        if not path.is_absolute():
            raise InvalidInput(f"connector {self.name!r}: target {expanded!r} must be an absolute path")
        return path

    def _overwrite(self, payload: Payload) -> bool:
        if "overwrite" in payload:
            return parse_bool(payload["overwrite"], "payload 'overwrite'")
        return self.overwrite

    def _read_source(self, payload: Payload) -> tuple[Path, str]:
        source = self._source(payload)
        if not source.is_file():
            raise InvalidInput(f"connector {self.name!r}: source {source} is not a readable file")
        try:
            return source, sha256_of(source)
        except OSError as exc:
            raise InvalidInput(
                f"connector {self.name!r}: cannot read source {source}: {exc.strerror}"
            ) from exc

    # --- protocol ---------------------------------------------------------

    def validate(self, payload: Payload) -> None:
        """Check a payload without changing anything; raises :class:`InvalidInput`.

        Lets the engine reject bad input before it records any intent.
        """
        source, _ = self._read_source(payload)
        self._target("validate/only", payload, source.name)
        self._overwrite(payload)

    def execute(self, step_key: str, payload: Payload) -> str:
        """Copy the source to the target; an identical target is already done."""
        source, digest = self._read_source(payload)
        target = self._target(step_key, payload, source.name)
        replace = self._overwrite(payload)
        existing = self._existing_digest(target)
        if existing == digest:
            return _evidence(digest, target)
        if existing is not None and not replace:
            raise EffectFailed(
                f"{target} already exists with different content (sha256:{existing}); "
                "nothing was written. Remove it or allow overwrite = true"
            )
        self._copy(source, target, exclusive=existing is None and not replace)
        return _evidence(digest, target)

    def update(self, step_key: str, payload: Payload) -> str:
        """Replace the target with the source (the step allowed overwriting)."""
        source, digest = self._read_source(payload)
        target = self._target(step_key, payload, source.name)
        self._copy(source, target, exclusive=False)
        return _evidence(digest, target)

    def lookup(self, step_key: str, payload: Payload) -> LookupResult:
        source, digest = self._read_source(payload)
        target = self._target(step_key, payload, source.name)
        existing = self._existing_digest(target)
        if existing is None:
            return ABSENT
        if existing == digest:
            return Found(_evidence(digest, target), {"path": str(target), "sha256": digest})
        return Ambiguous(
            f"{target} exists but holds sha256:{existing}, not the artifact's sha256:{digest}. "
            "Check whether it is an earlier publication of this step (then allow overwrite "
            "to replace it) or another file that must be kept"
        )

    def verify(self, step_key: str, evidence: str) -> bool:
        """The file named in the evidence still holds the recorded checksum."""
        digest, sep, path = evidence.removeprefix("sha256:").partition("@")
        if not sep:
            return False
        return self._existing_digest(Path(path)) == digest

    def count(self, step_key: str) -> int:
        """1 when the configured target for this key exists, else 0."""
        if self.target is None or "{name}" in self.target:
            raise InvalidInput(f"connector {self.name!r}: count needs a config target without {{name}}")
        return 1 if self._target(step_key, {}).is_file() else 0

    # --- the file system ----------------------------------------------------

    def _existing_digest(self, target: Path) -> str | None:
        try:
            return sha256_of(target)
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            return "(a directory)"
        except NotADirectoryError:
            return None
        except OSError as exc:
            raise EffectFailed(f"cannot read {target}: {exc.strerror}") from exc

    def _copy(self, source: Path, target: Path, *, exclusive: bool) -> None:
        def fill(fh: Any) -> None:
            with source.open("rb") as inp:
                while chunk := inp.read(1 << 20):
                    fh.write(chunk)

        try:
            atomic_write(target, fill, exclusive=exclusive, mode=self.file_mode)
        except FileExistsError:
            if target.is_symlink() and not target.exists():
                raise EffectFailed(
                    f"{target} is a symbolic link to a missing file; nothing was written. Remove it"
                ) from None
            # Another writer created the target between our check and our link.
            raise EffectFailed(
                f"{target} appeared while publishing; nothing was replaced. Check its content"
            ) from None
        except (NotADirectoryError, FileNotFoundError, PermissionError, IsADirectoryError) as exc:
            # The temporary file could not be made or linked: nothing was published.
            raise EffectFailed(
                f"cannot publish to {target}: {exc.strerror or exc} (folder {target.parent}); "
                "nothing was written"
            ) from exc
